//! What the host-compiled kernel tests share: finding the host C++ compiler (`$CXX`, else
//! `c++`), skipping visibly without one (failing under `MXHOST_REQUIRE_CXX=1`), and building a
//! driver against `cuda/include` and this folder (`simt.hpp`); random MX operands with a
//! chosen share of residuals (elements a stage scale cannot carry), from a printed seed.
#![allow(dead_code)] // each test binary uses a part

use mxhost_plugin_abi::MxFormat;
pub use mxhost_plugin_common::testing::Rng;
use mxhost_plugin_mxfp8::numerics::element::decode;

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
pub fn build_driver(cxx: &str, name: &str, source: &Path) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("driver");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // -fno-strict-aliasing: the kernels read byte arrays through word pointers, as CUDA allows
    let out = Command::new(cxx)
        .args([
            "-std=c++20",
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

/// What a kernel test starts from: its driver built (scratch folder `test`), and this run's
/// seed with a generator on it; `None` after a skip message without a C++ compiler.
pub fn setup(test: &str, driver: &str) -> Option<(PathBuf, Rng, u64)> {
    let cxx = compiler_or_skip(test)?;
    let exe = build_driver(&cxx, test, &here(driver));
    let seed = seed(test);
    Some((exe, Rng::new(seed), seed))
}

/// Panics at the first byte where `got` differs from `want` (rows of `width` bytes).
pub fn first_difference(what: &str, got: &[u8], want: &[u8], width: usize) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        panic!(
            "{what}: byte {i} (row {}, column {}): kernel {:#04x}, reference {:#04x}",
            i / width,
            i % width,
            got[i],
            want[i]
        );
    }
}

/// Runs the driver `exe` on `header` (as little-endian i64) followed by `payload`, through
/// files in its scratch folder; returns what it wrote. Panics with its messages on failure.
pub fn run_driver(exe: &Path, header: &[usize], payload: &[&[u8]]) -> Vec<u8> {
    let dir = exe.parent().unwrap();
    let (inp, out) = (dir.join("in.bin"), dir.join("out.bin"));
    let mut bytes: Vec<u8> = header
        .iter()
        .flat_map(|&v| (v as i64).to_le_bytes())
        .collect();
    for p in payload {
        bytes.extend_from_slice(p);
    }
    std::fs::write(&inp, bytes).unwrap();
    let run = Command::new(exe).arg(&inp).arg(&out).output().unwrap();
    assert!(
        run.status.success(),
        "the driver {} failed on {header:?}: {}",
        exe.display(),
        String::from_utf8_lossy(&run.stderr)
    );
    std::fs::read(&out).unwrap()
}

/// `a` (`rows` × `cols`, row-major) transposed.
pub fn transpose<T: Copy + Default>(a: &[T], rows: usize, cols: usize) -> Vec<T> {
    let mut t = vec![T::default(); a.len()];
    for i in 0..rows {
        for j in 0..cols {
            t[j * rows + i] = a[i * cols + j];
        }
    }
    t
}

/// A file of this folder.
pub fn here(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/host")
        .join(file)
}

/// The seed of this run: `MXHOST_TEST_SEED`, else the clock (fresh inputs each run); printed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("MXHOST_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("{test}: seed {seed} (MXHOST_TEST_SEED replays it)");
    seed
}

/// How a scale group (one row, or a weight's 32-row tile row) draws its block scales.
#[derive(Clone, Copy)]
enum Scales {
    /// One scale per stage: nothing shifts.
    Uniform,
    /// Spread over a few binades: small elements of the smaller-scale blocks become residuals.
    Spread,
}

/// How a row draws its element bytes.
#[derive(Clone, Copy)]
pub enum Bytes {
    /// Large magnitudes (they survive any shift up to 8), a rare small one: a few residuals.
    Few,
    /// Any finite byte: many residuals, usually more than the slots.
    Any,
    /// ±0 only.
    Zeros,
}

/// A finite byte of `format`; `small`: exponent field 0–3 (subnormals and the smallest normals).
pub fn finite_byte(rng: &mut Rng, format: MxFormat, small: bool) -> u8 {
    let mbits = if format == MxFormat::E4m3 { 3 } else { 2 };
    loop {
        let b = if small {
            // exponent field 0..=3: subnormals and the smallest normals
            let e = rng.below(4) as u8;
            (rng.below(2) as u8) << 7 | e << mbits | rng.below(1 << mbits) as u8
        } else {
            rng.below(256) as u8
        };
        if decode(b, format).is_finite() {
            return b;
        }
    }
}

/// A finite byte with exponent field ≥ 9: it survives any shift up to 8 binades.
pub fn large_byte(rng: &mut Rng, format: MxFormat) -> u8 {
    loop {
        let b = finite_byte(rng, format, false);
        let mbits = if format == MxFormat::E4m3 { 3 } else { 2 };
        if ((b & 0x7F) >> mbits) >= 9 {
            return b;
        }
    }
}

/// `k` element bytes of one row, drawn as `kind` says.
pub fn row_bytes(rng: &mut Rng, format: MxFormat, kind: Bytes, k: usize) -> Vec<u8> {
    (0..k)
        .map(|_| match kind {
            Bytes::Zeros => (rng.below(2) as u8) << 7,
            Bytes::Any => finite_byte(rng, format, false),
            Bytes::Few if rng.below(300) == 0 => finite_byte(rng, format, true),
            Bytes::Few => large_byte(rng, format),
        })
        .collect()
}

/// `kb` block scale bytes of one scale group (a row, or a weight's 32-row tile row): one scale
/// per stage with probability 1 / `uniform_one_in`, else spread over 8 binades.
pub fn group_scales(rng: &mut Rng, uniform_one_in: usize, kb: usize) -> Vec<u8> {
    let kind = if rng.below(uniform_one_in) == 0 {
        Scales::Uniform
    } else {
        Scales::Spread
    };
    let base = 118 + rng.below(4) as u8;
    (0..kb)
        .map(|b| match kind {
            Scales::Uniform => base + (b / 4 % 3) as u8,
            Scales::Spread => base + rng.below(8) as u8,
        })
        .collect()
}

/// `n` values in blocks of 32 that span many binades, with zero blocks, specials, tiny and huge
/// values.
pub fn mx_test_values(rng: &mut Rng, n: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        let kind = rng.below(16);
        let mag = 2f64.powi(rng.below(40) as i32 - 20);
        for _ in 0..32 {
            v.push(match kind {
                0 => 0.0,
                1 if rng.below(8) == 0 => {
                    [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][rng.below(3)]
                }
                2 => (rng.normal() * 1e-38) as f32,
                3 => (rng.normal() * 3e38) as f32,
                _ => (rng.normal() * mag) as f32,
            });
        }
    }
    v.truncate(n);
    v
}

/// `r` × `c` values (row-major, `c` a multiple of 32) for kernels that quantize along both axes:
/// each 32-row band of a column (a 32×1 block) and each row's 1×32 block draws a kind: zero,
/// tiny (scale bytes below the fake quantizers' fast path, so their reference decode runs),
/// huge, one NaN or ±Inf, or normal over 40 binades.
pub fn two_axis_test_values(rng: &mut Rng, r: usize, c: usize) -> Vec<f32> {
    let col: Vec<(usize, f64, usize)> = (0..r.div_ceil(32) * c)
        .map(|_| {
            (
                rng.below(12),
                2f64.powi(rng.below(40) as i32 - 20),
                rng.below(32),
            )
        })
        .collect();
    let row: Vec<usize> = (0..r * c / 32).map(|_| rng.below(24)).collect();
    let mut v = Vec::with_capacity(r * c);
    for i in 0..r {
        for j in 0..c {
            let (kind, mag, at) = col[(i / 32) * c + j];
            v.push(match (row[(i * c + j) / 32], kind) {
                (0, _) | (_, 0) => 0.0,
                (1, _) | (_, 1) => (rng.normal() * 1e-38) as f32,
                (_, 2) => (rng.normal() * 1e37) as f32,
                (_, 3) if i % 32 == at => {
                    [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][rng.below(3)]
                }
                _ => (rng.normal() * mag) as f32,
            });
        }
    }
    v
}

/// Asserts that the bf16 words of `o` are `want` (f32 values rounded to bf16, to nearest even);
/// NaN against NaN (the kernels' NaN payloads are theirs).
pub fn same_bf16_values(what: &str, o: &[u8], want: &[f32], width: usize) {
    use half::bf16;
    assert_eq!(o.len(), 2 * want.len(), "{what}: length");
    for (i, w) in want.iter().enumerate() {
        let got = bf16::from_bits(u16::from_le_bytes([o[2 * i], o[2 * i + 1]]));
        let w = bf16::from_f32(*w);
        assert!(
            got.to_bits() == w.to_bits() || (got.is_nan() && w.is_nan()),
            "{what}: element {i} (row {}, column {}): kernel {got} ({:#06x}), reference {w} ({:#06x})",
            i / width,
            i % width,
            got.to_bits(),
            w.to_bits()
        );
    }
}

/// The MX tensor of `x` (`[r][c]`) in 1×32 blocks along rows: (bytes, scales).
pub fn rows_reference(
    x: &[half::bf16],
    (r, c): (usize, usize),
    format: MxFormat,
    mode: mxhost_plugin_abi::ScaleMode,
) -> (Vec<u8>, Vec<u8>) {
    let (mut q, mut s) = (vec![0u8; r * c], vec![0u8; r * c.div_ceil(32)]);
    let rows = mxhost_plugin_abi::BlockLayout::vector(1);
    let shape = [r as u64, c as u64];
    mxhost_plugin_mxfp8::quantize_mx(x, &shape, rows, format, mode, &mut q, &mut s).unwrap();
    (q, s)
}

/// The MX values of `x` (`[r][c]`) in 1×32 blocks along rows (what kept values hold).
pub fn row_values(
    x: &[half::bf16],
    (r, c): (usize, usize),
    format: MxFormat,
    mode: mxhost_plugin_abi::ScaleMode,
) -> Vec<f32> {
    let rows = mxhost_plugin_abi::BlockLayout::vector(1);
    mxhost_plugin_mxfp8::fake_quantize(x, &[r as u64, c as u64], rows, format, mode).unwrap()
}

/// The wgrad operand's values for `x` (`r` × `c` bf16): `x` fake-quantized in 32×1 blocks along
/// rows from row 0 (rows past `r` as zeros), what `mx_fakequant_m32_*` writes with the blocks
/// (32 k, min(32, r − 32 k)).
pub fn wgrad_values(
    x: &[half::bf16],
    (r, c): (usize, usize),
    format: MxFormat,
    mode: mxhost_plugin_abi::ScaleMode,
) -> Vec<f32> {
    let cols = mxhost_plugin_abi::BlockLayout::vector(0);
    mxhost_plugin_mxfp8::fake_quantize(x, &[r as u64, c as u64], cols, format, mode).unwrap()
}
