//! Prints a fingerprint (size and hash) of every kernel image the backend can build: each
//! NVRTC unit for `sm_90a`, and the portable build's units for `compute_80`. No GPU
//! needed, only libnvrtc.so.13 on the library path.
//!
//! What it is for: a change to the `.cu`/`.cuh` sources that should not change any binary
//! (moving code between files, harness-only code out of the product files, comments) is
//! proven so by identical fingerprints before and after, without a GPU:
//!
//! ```sh
//! LD_LIBRARY_PATH=$PWD/.venv-cuda/lib/python3.*/site-packages/nvidia/cu13/lib \
//!   cargo run --release -p mxhost-plugin-mxfp8 --example kernel_fingerprints > before.txt
//! ```
//!
//! The cache key (`kernels::cache_key`) hashes the sources, so it changes with any edit;
//! this hashes what NVRTC produced.

use mxhost_plugin_mxfp8::kernels::{self, Unit};
use std::sync::Mutex;

fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn main() {
    if !kernels::nvrtc_present() {
        eprintln!("kernel_fingerprints: libnvrtc.so.13 not found on the library path");
        std::process::exit(2);
    }
    let mut jobs: Vec<(Unit, &str)> = Unit::all().into_iter().map(|u| (u, "sm_90a")).collect();
    jobs.extend(Unit::PORTABLE.iter().map(|&u| (u, "compute_80")));
    let results = Mutex::new(Vec::new());
    let next = Mutex::new(0usize);
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(4);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    let i = *n;
                    *n += 1;
                    i
                };
                let Some(&(unit, arch)) = jobs.get(i) else {
                    break;
                };
                let line = match kernels::compile(unit, arch) {
                    Ok(image) => format!(
                        "{:<40} {:<10} {:>9} bytes  {:016x}",
                        unit.label(),
                        arch,
                        image.len(),
                        fnv64(&image)
                    ),
                    Err(log) => format!(
                        "{:<40} {:<10} FAILED: {}",
                        unit.label(),
                        arch,
                        log.lines().next().unwrap_or("")
                    ),
                };
                results.lock().unwrap().push((i, line));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort();
    let failed = results.iter().filter(|(_, l)| l.contains("FAILED")).count();
    for (_, line) in &results {
        println!("{line}");
    }
    if failed > 0 {
        eprintln!("kernel_fingerprints: {failed} unit(s) failed to compile");
        std::process::exit(1);
    }
}
