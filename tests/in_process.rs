//! One host process serving several guests: a trap, a timeout and a limit in one guest
//! leave the host (engine, plugins) able to run the next guest.

use mxhost::limits::Limits;
use mxhost::runtime::engine::new_engine;
use mxhost::runtime::run::{run_experiment, RunOutcome};
use mxhost_integration_tests::*;
use std::time::Duration;

#[test]
fn the_host_survives_misbehaving_guests() {
    let shared = in_process_shared();
    let engine = new_engine().unwrap();
    let tight = Limits {
        call_timeout: Duration::from_millis(500),
        guest_memory_bytes: 64 << 20,
        ..Limits::default()
    };

    let outcome = run_experiment(
        &engine,
        shared.clone(),
        &in_process_config("fixtures", &["trap"], Limits::default()),
    )
    .unwrap();
    assert!(
        matches!(&outcome, RunOutcome::Trapped(m) if m.contains("unreachable")),
        "{outcome:?}"
    );

    let outcome = run_experiment(
        &engine,
        shared.clone(),
        &in_process_config("fixtures", &["loop"], tight.clone()),
    )
    .unwrap();
    assert!(
        matches!(&outcome, RunOutcome::Trapped(m) if m.contains("deadline")),
        "{outcome:?}"
    );

    let outcome = run_experiment(
        &engine,
        shared.clone(),
        &in_process_config("fixtures", &["alloc"], tight),
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
        &in_process_config("hello-gemm", &[], Limits::default()),
    )
    .unwrap();
    assert!(
        matches!(&outcome, RunOutcome::Completed(s) if s.contains("all SNR gates passed")),
        "{outcome:?}"
    );
}
