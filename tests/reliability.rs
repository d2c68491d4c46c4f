//! Concurrency: guests on threads sharing plugins while plugin selections change.

use mxhost::limits::Limits;
use mxhost::metrics::MetricsSink;
use mxhost::plugin::registry::PluginRegistry;
use mxhost::runtime::engine::new_engine;
use mxhost::runtime::run::{run_experiment, RunConfig, RunOutcome};
use mxhost::runtime::state::Shared;
use mxhost_integration_tests::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn config(name: &str, args: &[&str]) -> RunConfig {
    RunConfig {
        guest: guest(name),
        guards: vec![],
        router: None,
        limits: Limits::default(),
        capabilities: Default::default(),
        args: args.iter().map(|s| s.to_string()).collect(),
    }
}

fn shared() -> Arc<Shared> {
    build_all();
    let plugins = Arc::new(PluginRegistry::open(&[release_dir()], "mxfp8").unwrap());
    Arc::new(Shared {
        plugins,
        metrics: Arc::new(Mutex::new(MetricsSink::new(false))),
    })
}

#[test]
fn guests_on_threads_with_plugin_switches_all_succeed() {
    let shared = shared();
    let engine = new_engine().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // A thread flipping the default plugin while guests run and switch their own.
    let flipper = {
        let (shared, stop) = (shared.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let name = if flips % 2 == 0 { "bf16" } else { "mxfp8" };
                shared.plugins.select(name).unwrap();
                flips += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            flips
        })
    };
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let (shared, engine) = (shared.clone(), engine.clone());
            std::thread::spawn(move || {
                let seed = (i + 1).to_string();
                (0..3)
                    .map(|_| {
                        run_experiment(&engine, shared.clone(), &config("hello-gemm", &[&seed]))
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let outcomes: Vec<RunOutcome> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    stop.store(true, Ordering::Relaxed);
    assert!(flipper.join().unwrap() > 0);
    assert_eq!(outcomes.len(), 12);
    for o in &outcomes {
        // hello-gemm checks every result against FP64 references of its own plugin's
        // numerics (≥ 90 dB vs dequantized for MXFP8): a result computed by the wrong
        // plugin, or a mix, would fail its gates.
        assert!(
            matches!(o, RunOutcome::Completed(s) if s.contains("all SNR gates passed")),
            "{o:?}"
        );
    }
}
