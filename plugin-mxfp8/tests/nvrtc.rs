//! Every CUDA kernel unit of the plugin compiles through NVRTC for sm_90a (no GPU
//! needed, only libnvrtc.so.13 on the library path, e.g. the CUDA 13.0 wheels'
//! `site-packages/nvidia/cu13/lib` in `LD_LIBRARY_PATH`).
//!
//! NVRTC can crash on degenerate code, so each unit compiles in a child process (this
//! test binary re-run with `MXHOST_NVRTC_CHILD=<index>`). The children get
//! `LD_LIBRARY_PATH` extended with the first of these directories holding
//! `libnvrtc.so.13`: `$MXHOST_NVRTC_LIB_DIR`, `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`,
//! and the CUDA 13.0 wheels of the development machine
//! (`/work/cuda-venv/lib/python3.11/site-packages/nvidia/cu13/lib`). Without libnvrtc the
//! test prints a visible skip message, or fails under `MXHOST_REQUIRE_NVRTC=1`.
#![cfg(feature = "cuda")]

use mxhost_plugin_mxfp8::kernels::{self, Unit};
use std::process::Command;

const CHILD_ENV: &str = "MXHOST_NVRTC_CHILD";

#[test]
fn every_kernel_compiles_with_nvrtc_for_sm_90a() {
    let units = Unit::all();
    if let Ok(idx) = std::env::var(CHILD_ENV) {
        // Child: compile one unit, report, exit.
        let unit = units[idx.parse::<usize>().unwrap()];
        let t0 = std::time::Instant::now();
        match kernels::compile(unit, "sm_90a") {
            Ok(cubin) => {
                println!(
                    "NVRTC-OK {} cubin {} bytes in {:.2} s",
                    unit.label(),
                    cubin.len(),
                    t0.elapsed().as_secs_f64()
                );
                return;
            }
            Err(log) => panic!("{log}"),
        }
    }
    let extra_dir = nvrtc_dir();
    if !kernels::nvrtc_present() && extra_dir.is_none() {
        let msg = "SKIPPED: libnvrtc.so.13 not found (set LD_LIBRARY_PATH to a CUDA 13 NVRTC, e.g. <venv>/site-packages/nvidia/cu13/lib); the CUDA kernels were NOT compile-checked";
        if std::env::var("MXHOST_REQUIRE_NVRTC").as_deref() == Ok("1") {
            panic!("MXHOST_REQUIRE_NVRTC=1 but {msg}");
        }
        eprintln!("{msg}");
        println!("{msg}");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut ld_path = std::ffi::OsString::new();
    if let Some(d) = &extra_dir {
        eprintln!("NVRTC from {}", d.display());
        ld_path.push(d);
        ld_path.push(":");
    }
    ld_path.push(std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default());
    let mut failures = Vec::new();
    for (i, unit) in units.iter().enumerate() {
        let out = Command::new(&exe)
            .args([
                "--exact",
                "every_kernel_compiles_with_nvrtc_for_sm_90a",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, i.to_string())
            .env("LD_LIBRARY_PATH", &ld_path)
            .output()
            .expect("re-running the test binary");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        match stdout
            .lines()
            .find_map(|l| l.find("NVRTC-OK").map(|i| &l[i..]))
        {
            Some(line) if out.status.success() => eprintln!("{line}"),
            _ => failures.push(format!(
                "{} (exit {:?}):\n{stdout}\n{stderr}",
                unit.label(),
                out.status
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "NVRTC failed on {} unit(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A directory holding `libnvrtc.so.13` that is not already on the search path.
fn nvrtc_dir() -> Option<std::path::PathBuf> {
    let mut dirs: Vec<std::path::PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("MXHOST_NVRTC_LIB_DIR") {
        dirs.push(d.into());
    }
    if let Some(d) = std::env::var_os("CUDA_HOME") {
        dirs.push(std::path::PathBuf::from(d).join("lib64"));
    }
    dirs.push("/usr/local/cuda/lib64".into());
    dirs.push("/work/cuda-venv/lib/python3.11/site-packages/nvidia/cu13/lib".into());
    dirs.into_iter()
        .find(|d| d.join("libnvrtc.so.13").is_file())
}
