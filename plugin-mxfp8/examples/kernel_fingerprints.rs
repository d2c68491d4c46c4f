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
//! this hashes what NVRTC produced: the whole image, and the machine code alone (the
//! cubin's `.text.*` sections; for PTX the whole text). The two can differ when only data
//! that no kernel reads changed (e.g. unused `static constexpr` members of a layout struct,
//! which NVRTC's `-default-device` emits as initialized globals). `--dump DIR` also writes each image to
//! `DIR/<unit>.<arch>` (ELF cubins: `readelf -S` shows which section a difference is in).

use mxhost_plugin_mxfp8::kernels::{self, fnv, Unit};
use rayon::prelude::*;

/// The `.text.*` sections of an ELF64 little-endian cubin, concatenated in section order;
/// `None` when `image` is not such an ELF (PTX).
fn code_sections(image: &[u8]) -> Option<Vec<u8>> {
    let u16_at = |o: usize| {
        image
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |o: usize| {
        image
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let u64_at = |o: usize| {
        image
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    };
    if image.get(0..5)? != b"\x7fELF\x02" {
        return None;
    }
    let shoff = u64_at(0x28)? as usize;
    let (shentsize, shnum, shstrndx) = (
        u16_at(0x3a)? as usize,
        u16_at(0x3c)? as usize,
        u16_at(0x3e)? as usize,
    );
    let section = |i: usize| {
        let h = shoff + i * shentsize;
        Some((
            u32_at(h)? as usize,
            u64_at(h + 0x18)? as usize,
            u64_at(h + 0x20)? as usize,
        ))
    };
    let (_, str_off, _) = section(shstrndx)?;
    let mut code = Vec::new();
    for i in 0..shnum {
        let (name, off, size) = section(i)?;
        let name_bytes = image.get(str_off + name..)?;
        let end = name_bytes.iter().position(|&b| b == 0)?;
        if name_bytes[..end].starts_with(b".text.") {
            code.extend_from_slice(image.get(off..off + size)?);
        }
    }
    Some(code)
}

fn main() {
    if !kernels::nvrtc_present() {
        eprintln!("kernel_fingerprints: libnvrtc.so.13 not found on the library path");
        std::process::exit(2);
    }
    let args: Vec<String> = std::env::args().collect();
    let dump = args
        .iter()
        .position(|a| a == "--dump")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    if let Some(d) = &dump {
        std::fs::create_dir_all(d).expect("kernel_fingerprints: cannot create the --dump folder");
    }
    let mut jobs: Vec<(Unit, &str)> = Unit::all().into_iter().map(|u| (u, "sm_90a")).collect();
    jobs.extend(Unit::PORTABLE.iter().map(|&u| (u, "compute_80")));
    // NVRTC compiles one unit per thread; a few at a time bound its memory.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .expect("kernel_fingerprints: thread pool");
    let results: Vec<String> = pool.install(|| {
        jobs.par_iter()
            .map(|&(unit, arch)| match kernels::compile(unit, arch) {
                Ok(image) => {
                    if let Some(d) = &dump {
                        let path = d.join(format!("{}.{arch}", unit.label()));
                        std::fs::write(&path, &image).expect("kernel_fingerprints: write failed");
                    }
                    let code = code_sections(&image);
                    format!(
                        "{:<40} {:<10} {:>9} bytes  image {:016x}  code {:016x}",
                        unit.label(),
                        arch,
                        image.len(),
                        fnv(0, &[&image]),
                        fnv(0, &[code.as_deref().unwrap_or(&image)])
                    )
                }
                Err(log) => format!(
                    "{:<40} {:<10} FAILED: {}",
                    unit.label(),
                    arch,
                    log.lines().next().unwrap_or("")
                ),
            })
            .collect()
    });
    let failed = results.iter().filter(|l| l.contains("FAILED")).count();
    for line in &results {
        println!("{line}");
    }
    if failed > 0 {
        eprintln!("kernel_fingerprints: {failed} unit(s) failed to compile");
        std::process::exit(1);
    }
}
