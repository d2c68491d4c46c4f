//! What the host-compiled kernel tests share: finding the host C++ compiler (`$CXX`, else
//! `c++`), skipping visibly without one (failing under `MXHOST_REQUIRE_CXX=1`), and building a
//! driver against `cuda/include` and this folder (`simt.hpp`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The host C++ compiler, or `None` after printing a skip message (a panic when
/// `MXHOST_REQUIRE_CXX` is set: CI machines have g++, so a missing one is a setup error there).
pub fn compiler_or_skip(test: &str) -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let found = Command::new(&cxx)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(cxx);
    }
    assert!(
        std::env::var_os("MXHOST_REQUIRE_CXX").is_none(),
        "{test}: no C++ compiler ($CXX or c++) to build the host driver"
    );
    eprintln!("SKIPPED {test}: no C++ compiler ($CXX or c++)");
    None
}

/// Compiles `source` (a C++ file) into an executable in this test's scratch folder `name`,
/// with `cuda/include` and `tests/host` on the include path; panics with the compiler's
/// messages on failure.
pub fn build_driver(cxx: &str, name: &str, source: &Path, std: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("driver");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // -fno-strict-aliasing: the kernels read byte arrays through word pointers, as CUDA allows
    let out = Command::new(cxx)
        .args([
            std,
            "-O2",
            "-Wall",
            "-Wno-unknown-pragmas",
            "-fno-strict-aliasing",
            "-pthread",
        ])
        .arg("-I")
        .arg(root.join("cuda/include"))
        .arg("-I")
        .arg(root.join("tests/host"))
        .arg(source)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cxx} failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// A file of this folder.
pub fn here(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/host")
        .join(file)
}
