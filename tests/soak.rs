//! Soak: one host process runs guests that hoard 400 MiB of host tensors and trap,
//! alternating with real work, for a bounded time (`MXHOST_SOAK_S`, default 15 s);
//! resident memory must plateau, well under one round's hoard. Its own test binary, so no
//! other test shares the process while RSS is measured.

use mxhost::limits::Limits;
use mxhost::runtime::engine::new_engine;
use mxhost::runtime::run::{run_experiment, RunOutcome};
use mxhost_integration_tests::*;
use std::time::{Duration, Instant};

/// Resident set size of this process in bytes (Linux).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

#[test]
fn memory_returns_to_its_level_after_guests_hoard_and_trap() {
    let shared = in_process_shared();
    let engine = new_engine().unwrap();
    // Warm up (code caches, rayon pools), then measure.
    for _ in 0..2 {
        run_experiment(
            &engine,
            shared.clone(),
            &in_process_config("hello-gemm", &[], Limits::default()),
        )
        .unwrap();
        run_experiment(
            &engine,
            shared.clone(),
            &in_process_config("fixtures", &["hoard-then-trap"], Limits::default()),
        )
        .unwrap();
    }
    let soak = Duration::from_secs(
        std::env::var("MXHOST_SOAK_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(15),
    );
    let start = Instant::now();
    let mut runs = 0;
    let mut rss = Vec::new();
    while start.elapsed() < soak {
        let o = run_experiment(
            &engine,
            shared.clone(),
            &in_process_config("fixtures", &["hoard-then-trap"], Limits::default()),
        )
        .unwrap();
        assert!(
            matches!(&o, RunOutcome::Trapped(m) if m.contains("unreachable")),
            "{o:?}"
        );
        let o = run_experiment(
            &engine,
            shared.clone(),
            &in_process_config("hello-gemm", &[], Limits::default()),
        )
        .unwrap();
        assert!(matches!(o, RunOutcome::Completed(_)), "{o:?}");
        runs += 1;
        rss.push(rss_bytes());
    }
    assert!(runs >= 4, "only {runs} rounds in {soak:?}");
    let (first, second) = rss.split_at(runs / 2);
    let (peak1, peak2) = (*first.iter().max().unwrap(), *second.iter().max().unwrap());
    eprintln!(
        "soak: {runs} rounds in {:?}; peak RSS {} MiB (first half) → {} MiB (second half)",
        start.elapsed(),
        peak1 >> 20,
        peak2 >> 20
    );
    // Each round allocates 400 MiB of tensors; a leak of even one round's tensors in the
    // second half would show as growth far above this allowance for allocator noise.
    assert!(
        peak2 <= peak1 + (64 << 20),
        "RSS kept growing: {} MiB → {} MiB",
        peak1 >> 20,
        peak2 >> 20
    );
    // And the level is low: the host hands each round's freed 400 MiB back to the OS
    // (malloc_trim after every run; before it, identical rounds left 97–264 MiB resident).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    assert!(
        peak2 <= 200 << 20,
        "RSS stays at {} MiB after runs that freed everything they held",
        peak2 >> 20
    );
}
