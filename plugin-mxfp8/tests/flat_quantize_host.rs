//! The default path's quantizers, run on the host through `tests/host/simt.hpp` and compared
//! with the CPU references on fresh random input (bf16 and f32, both formats, all three scale
//! modes, NaN, ±Inf, zero blocks, tiny and huge values):
//! - the flat 1×32 quantizer (`mx_quant_flat.cuh`, what quantizes X and dY by default) writing
//!   bytes and scales, MX values in bf16 (`mx_fakequant_rows_*`), or both (`_vals_`), against
//!   `quantize_mx` and `fake_quantize` along rows; a grid of 2–3 CTAs, so the grid-stride loop
//!   and its tail run;
//! - the fake quantization along M (`mx_fakequant_m32_*`, the default wgrad's operands) over a
//!   block table of experts with 37, 0, 64 and 99 rows and a gap no block covers (left
//!   untouched), against `fake_quantize` in 32×1 blocks of each block's rows; C = 136 (16-byte
//!   path) and C = 100 (the scalar path).
//!
//! Values are compared as bf16 bits (round to nearest even, as the kernels write them); NaN
//! against NaN.

use half::bf16;
use mxhost_plugin_abi::{BlockLayout, MxFormat, ScaleMode};
use mxhost_plugin_common::dense::DenseElem;
use mxhost_plugin_mxfp8::{fake_quantize, quantize_mx};

mod host;

const MODES: [ScaleMode; 3] = [ScaleMode::Rceil, ScaleMode::Floor, ScaleMode::Even];
const FORMATS: [MxFormat; 2] = [MxFormat::E4m3, MxFormat::E5m2];

fn bits<T: DenseElem>(x: &[T]) -> Vec<u8> {
    x.iter()
        .flat_map(|v| {
            let f = v.to_f32();
            if T::DTYPE == mxhost_plugin_abi::DType::Bf16 {
                bf16::from_f32(f).to_bits().to_le_bytes().to_vec()
            } else {
                f.to_le_bytes().to_vec()
            }
        })
        .collect()
}

fn check_flat<T: DenseElem>(
    exe: &std::path::Path,
    x: &[T],
    (r, c): (usize, usize),
    grid: usize,
    ctx: &str,
) {
    let bf = (T::DTYPE == mxhost_plugin_abi::DType::Bf16) as usize;
    let input = bits(x);
    let shape = [r as u64, c as u64];
    for (fmt, format) in FORMATS.into_iter().enumerate() {
        for (m, mode) in MODES.into_iter().enumerate() {
            let ctx = format!("{ctx}, {format:?} {mode:?}");
            let (mut q, mut s) = (vec![0u8; r * c], vec![0u8; r * c / 32]);
            let rows = BlockLayout::vector(1);
            quantize_mx(x, &shape, rows, format, mode, &mut q, &mut s).unwrap();
            let vals = fake_quantize(x, &shape, rows, format, mode).unwrap();
            for kernel in 0..3 {
                let o = host::run_driver(exe, &[kernel, bf, fmt, m, r, c, grid, 0], &[&input]);
                let ctx = format!("{ctx}, flat kernel {kernel}");
                match kernel {
                    0 => {
                        host::first_difference(&format!("{ctx}: bytes"), &o[..r * c], &q, c);
                        host::first_difference(&format!("{ctx}: scales"), &o[r * c..], &s, c / 32);
                    }
                    1 => host::same_bf16_values(&ctx, &o, &vals, c),
                    _ => {
                        host::first_difference(&format!("{ctx}: bytes"), &o[..r * c], &q, c);
                        let s_end = r * c + r * c / 32;
                        host::first_difference(
                            &format!("{ctx}: scales"),
                            &o[r * c..s_end],
                            &s,
                            c / 32,
                        );
                        host::same_bf16_values(&format!("{ctx}: values"), &o[s_end..], &vals, c);
                    }
                }
            }
        }
    }
}

#[test]
fn the_flat_quantizer_equals_the_cpu_reference() {
    let Some((exe, mut rng, seed)) = host::setup("flat_quantize_host", "flat_driver.cpp") else {
        return;
    };
    for (r, c, grid) in [(37, 96, 2), (24, 2880, 3)] {
        let x = host::mx_test_values(&mut rng, r * c);
        let ctx = format!("{r} x {c}, seed {seed}");
        check_flat(&exe, &x, (r, c), grid, &format!("{ctx}, f32"));
        let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
        check_flat(&exe, &xb, (r, c), grid, &format!("{ctx}, bf16"));
    }
}

fn check_along_m<T: DenseElem>(
    exe: &std::path::Path,
    x: &[T],
    (r, c): (usize, usize),
    table: &[(usize, usize)],
    ctx: &str,
) {
    let bf = (T::DTYPE == mxhost_plugin_abi::DType::Bf16) as usize;
    let input = bits(x);
    let t: Vec<u8> = table
        .iter()
        .flat_map(|&(r0, n)| [(r0 as i32).to_le_bytes(), (n as i32).to_le_bytes()])
        .flatten()
        .collect();
    for (fmt, format) in FORMATS.into_iter().enumerate() {
        for (m, mode) in MODES.into_iter().enumerate() {
            let ctx = format!("{ctx}, {format:?} {mode:?}");
            let o = host::run_driver(exe, &[3, bf, fmt, m, r, c, 0, table.len()], &[&input, &t]);
            let mut covered = vec![false; r];
            for &(r0, n) in table {
                let slab = &x[r0 * c..(r0 + n) * c];
                let cols = BlockLayout::vector(0);
                let want = fake_quantize(slab, &[n as u64, c as u64], cols, format, mode).unwrap();
                let what = format!("{ctx}: block ({r0}, {n})");
                host::same_bf16_values(&what, &o[2 * r0 * c..2 * (r0 + n) * c], &want, c);
                covered[r0..r0 + n].fill(true);
            }
            for row in (0..r).filter(|&i| !covered[i]) {
                assert!(
                    o[2 * row * c..2 * (row + 1) * c].iter().all(|&b| b == 0xA5),
                    "{ctx}: row {row}, in no block, was written"
                );
            }
        }
    }
}

#[test]
fn the_fake_quantization_along_m_equals_the_cpu_reference() {
    let Some((exe, mut rng, seed)) = host::setup("flat_quantize_host_m", "flat_driver.cpp") else {
        return;
    };
    // experts of 37, 0, 64 and 99 rows, in blocks of up to 32 rows; rows 101..104 in none
    let mut table = Vec::new();
    let mut at = 0;
    for m in [37, 0, 64, 99] {
        for b in (0..m).step_by(32) {
            table.push((at + b, (m - b).min(32)));
        }
        at += m;
    }
    table.retain(|&(r0, _)| r0 != 101);
    table.push((101 + 4, 28));
    for c in [136, 100] {
        let x = host::mx_test_values(&mut rng, at * c);
        let ctx = format!("{at} x {c}, seed {seed}");
        check_along_m(&exe, &x, (at, c), &table, &format!("{ctx}, f32"));
        let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
        check_along_m(&exe, &xb, (at, c), &table, &format!("{ctx}, bf16"));
    }
}
