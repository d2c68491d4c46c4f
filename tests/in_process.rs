//! One host process serving several guests: a trap, a timeout and a limit in one guest
//! leave the host (engine, plugins) able to run the next guest.

use mxhost::limits::Limits;
use mxhost::metrics::MetricsSink;
use mxhost::plugin::registry::PluginRegistry;
use mxhost::runtime::engine::new_engine;
use mxhost::runtime::run::{run_experiment, RunConfig, RunOutcome};
use mxhost::runtime::state::Shared;
use mxhost_integration_tests::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn config(guest_name: &str, args: &[&str], limits: Limits) -> RunConfig {
    RunConfig {
        guest: guest(guest_name),
        guards: vec![],
        router: None,
        limits,
        capabilities: Default::default(),
        args: args.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn the_host_survives_misbehaving_guests() {
    build_all();
    let plugins = Arc::new(PluginRegistry::open(&[release_dir()], "mxfp8").unwrap());
    let shared = Arc::new(Shared {
        plugins,
        metrics: Arc::new(Mutex::new(MetricsSink::new(false))),
    });
    let engine = new_engine().unwrap();
    let tight = Limits {
        call_timeout: Duration::from_millis(500),
        guest_memory_bytes: 64 << 20,
        ..Limits::default()
    };

    let outcome = run_experiment(
        &engine,
        shared.clone(),
        &config("fixtures", &["trap"], Limits::default()),
    )
    .unwrap();
    assert!(
        matches!(&outcome, RunOutcome::Trapped(m) if m.contains("unreachable")),
        "{outcome:?}"
    );

    let outcome = run_experiment(
        &engine,
        shared.clone(),
        &config("fixtures", &["loop"], tight.clone()),
    )
    .unwrap();
    assert!(
        matches!(&outcome, RunOutcome::Trapped(m) if m.contains("deadline")),
        "{outcome:?}"
    );

    let outcome = run_experiment(
        &engine,
        shared.clone(),
        &config("fixtures", &["alloc"], tight),
    )
    .unwrap();
    assert!(
        matches!(&outcome, RunOutcome::Trapped(m) if m.contains("memory limit")),
        "{outcome:?}"
    );

    // After all that, the same engine and plugins still do real work.
    let outcome = run_experiment(
        &engine,
        shared.clone(),
        &config("hello-gemm", &[], Limits::default()),
    )
    .unwrap();
    assert!(
        matches!(&outcome, RunOutcome::Completed(s) if s.contains("all SNR gates passed")),
        "{outcome:?}"
    );
}
