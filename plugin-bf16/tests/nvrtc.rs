//! The CUDA backend's one kernel (f32 → bf16 RNE, `backend::convert`) compiles through
//! NVRTC to PTX for the virtual architectures of the GPUs it targets (no GPU needed, only
//! `libnvrtc.so.13` on the library path).
//!
//! As in the mxfp8 plugin's NVRTC test, the compile runs in a child process (this test
//! binary re-run with `MXHOST_NVRTC_CHILD=1`) whose `LD_LIBRARY_PATH` is extended with
//! the first of `$MXHOST_NVRTC_LIB_DIR`, `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64` and
//! the development machine's CUDA 13.0 wheels that holds `libnvrtc.so.13`. Without
//! libnvrtc the test prints a visible skip message, or fails under
//! `MXHOST_REQUIRE_NVRTC=1`.
#![cfg(feature = "cuda")]

use mxhost_plugin_bf16::backend::{convert, cuda};
use mxhost_plugin_common::testing::{ld_library_path_with, nvrtc_lib_dir};
use std::process::Command;

const CHILD_ENV: &str = "MXHOST_NVRTC_CHILD";
const TEST: &str = "the_conversion_kernel_compiles_with_nvrtc";

#[test]
fn the_conversion_kernel_compiles_with_nvrtc() {
    if std::env::var_os(CHILD_ENV).is_some() {
        for (major, minor) in [(9, 0), (8, 0), (10, 0)] {
            let ptx = cuda::compile_convert(major, minor).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                ptx.contains(&format!(".entry {}", convert::KERNEL)),
                "no kernel entry in the PTX:\n{ptx}"
            );
            assert!(
                ptx.contains(&format!(".target sm_{major}{minor}")),
                "unexpected target:\n{ptx}"
            );
            println!("NVRTC-OK compute_{major}{minor} ptx {} bytes", ptx.len());
        }
        return;
    }
    let extra_dir = nvrtc_lib_dir();
    if !cuda::nvrtc_present() && extra_dir.is_none() {
        let msg = "SKIPPED: libnvrtc.so.13 not found (set LD_LIBRARY_PATH to a CUDA 13 NVRTC); the bf16 conversion kernel was NOT compile-checked";
        if std::env::var("MXHOST_REQUIRE_NVRTC").as_deref() == Ok("1") {
            panic!("MXHOST_REQUIRE_NVRTC=1 but {msg}");
        }
        eprintln!("{msg}");
        return;
    }
    let ld_path = ld_library_path_with(extra_dir.as_deref());
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env("LD_LIBRARY_PATH", &ld_path)
        .output()
        .expect("re-running the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.matches("NVRTC-OK").count() == 3,
        "NVRTC compile of the bf16 conversion kernel failed (exit {:?}):\n{stdout}\n{stderr}",
        out.status
    );
    for line in stdout.lines().filter(|l| l.contains("NVRTC-OK")) {
        eprintln!("{line}");
    }
}
