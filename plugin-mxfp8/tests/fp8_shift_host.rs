//! The re-encoding's byte shift (`cuda/include/mx_fp8_shift.cuh`), compiled for the host
//! and checked on every byte: the GPU kernels that write the chained GEMM's stage-uniform
//! forms call `mx_fp8_shift4` on every word, so its word-at-a-time fast path must give, for
//! each byte and every distance d, what the byte-by-byte rule gives.
//!
//! The header is plain integer C++ once the CUDA spellings are shimmed (`tests/host/simt.hpp`),
//! so the host C++ compiler (`$CXX`, else `c++`) builds a small driver around it
//! (`tests/host/fp8_shift_driver.cpp`, with the real `mx_numerics.cuh`). The driver checks, in C++, every byte in every
//! position of a word (the other three bytes pseudo-random) for d = 0 .. 299 against the
//! documented rule (d = 0 or ±0: unchanged; exponent field E > d: b − (d << mbits), which
//! it also checks equals `mx_fp8_shift_exact` for finite bytes; else `mx_fp8_shift_exact`,
//! 0 and a miss bit when inexact), then prints one line per (format, d < 64, byte); this
//! test compares those with the CPU reference `numerics::reencode::shift_exact`, which
//! decodes to f64 and re-encodes (an independent route). Without a C++ compiler (the
//! development and CI machines have g++) it prints a visible skip message, or fails under
//! `MXHOST_REQUIRE_CXX=1`.

use mxhost_plugin_abi::MxFormat;
use mxhost_plugin_mxfp8::numerics::element::decode;
use mxhost_plugin_mxfp8::numerics::reencode::shift_exact;
use std::process::Command;

mod host;

#[test]
fn word_shift_equals_the_byte_rule_and_the_cpu_reference() {
    let Some(cxx) = host::compiler_or_skip("fp8_shift_host") else {
        return;
    };
    let exe = host::build_driver(&cxx, "fp8_shift_host", &host::here("fp8_shift_driver.cpp"));
    let run = Command::new(&exe).output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    for line in text.lines().filter(|l| !l.starts_with("T ")) {
        eprintln!("{line}");
    }
    assert!(run.status.success(), "the C++ driver found mismatches");
    let mut compared = 0;
    for line in text.lines().filter(|l| l.starts_with("T ")) {
        let v: Vec<u32> = line[2..].split(' ').map(|x| x.parse().unwrap()).collect();
        let format = if v[0] == 0 {
            MxFormat::E4m3
        } else {
            MxFormat::E5m2
        };
        let (d, code, got, miss) = (v[1], v[2] as u8, v[3] as u8, v[4] == 1);
        if !decode(code, format).is_finite() {
            continue;
        }
        match shift_exact(code, d, format) {
            // ±0 are one value; the kernels keep the sign byte
            Some(want) => assert!(
                !miss
                    && (got == want
                        || (decode(got, format) == 0.0 && decode(want, format) == 0.0)),
                "{format:?} byte {code:#04x} d {d}: kernel {got:#04x} (miss {miss}), CPU {want:#04x}"
            ),
            None => assert!(
                miss && got == 0,
                "{format:?} byte {code:#04x} d {d}: kernel {got:#04x} (miss {miss}), CPU: not exact"
            ),
        }
        compared += 1;
    }
    assert!(compared > 30_000, "only {compared} table lines compared");
}
