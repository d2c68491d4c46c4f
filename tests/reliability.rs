//! Concurrency: guests on threads sharing plugins while plugin selections change.

use mxhost::limits::Limits;
use mxhost::runtime::engine::new_engine;
use mxhost::runtime::run::{run_experiment, RunOutcome};
use mxhost_integration_tests::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn guests_on_threads_with_plugin_switches_all_succeed() {
    let shared = in_process_shared();
    let engine = new_engine().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // A thread flipping the default plugin while guests run and switch their own.
    let flipper = {
        let (shared, stop) = (shared.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let name = if flips.is_multiple_of(2) {
                    "bf16"
                } else {
                    "mxfp8"
                };
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
                        run_experiment(
                            &engine,
                            shared.clone(),
                            &in_process_config("hello-gemm", &[&seed], Limits::default()),
                        )
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
