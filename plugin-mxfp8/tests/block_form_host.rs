//! The one-pass A-side quantizer `mx_quantize_rows_form_*` (`cuda/include/mx_quant_block_form.cuh`:
//! what a quantize call with an annex writes for X and dY under `MXHOST_MX_CHAIN`), run on the
//! host through `tests/host/simt.hpp` and compared with the CPU references on fresh random bf16
//! input: the MX tensor with `quantize_mx` (1×32 blocks along rows), its stage-uniform copy,
//! scales and residual counts with `reencode_rows`, the copy's transposes, and the FP32
//! stage-major scale table. Every output is poisoned first and compared whole, for both
//! formats and all three scale modes, on shapes with a row tail (R not a multiple of 128), a
//! short last stage (C = 2880) and a single partial stage (C = 96); an Inf must set the
//! non-finite flag. Both builds: one 128-column block per CTA, and four
//! (`mx_quantize_rows_form4_*`, their scale bytes gathered in shared memory; C = 2880 leaves its
//! last CTA 2.5 blocks).
//!
//! The WV build (`mx_quantize_rows_form_wv_*`) also writes wgrad's values, X fake-quantized in
//! 32×1 blocks along rows from row 0: compared with `fake_quantize` (what `mx_fakequant_m32_*`
//! matches) on the same inputs, and, on inputs whose 32×1 and 1×32 blocks draw zeros, tiny
//! values (the reference decode), huge ones, NaN and ±Inf, in every scale mode, with its other
//! outputs equal byte for byte to the plain build's.

use half::bf16;
use mxhost_plugin_abi::{BlockLayout, MxFormat, ScaleMode};
use mxhost_plugin_mxfp8::numerics::e8m0::scale_value;
use mxhost_plugin_mxfp8::numerics::reencode::{reencode_rows, STAGE};
use mxhost_plugin_mxfp8::quantize_mx;

mod host;
use host::Rng;

const NONFINITE: i32 = 2;

/// bf16 rows whose 1×32 blocks span several binades, with zero blocks and tiny elements, so
/// that stages mix scales and some elements become residuals.
fn input(rng: &mut Rng, rows: usize, c: usize) -> Vec<bf16> {
    let mut x = Vec::with_capacity(rows * c);
    for _ in 0..rows * c / 32 {
        let kind = rng.below(10);
        let mag = 2f64.powi(rng.below(9) as i32 - 4);
        for _ in 0..32 {
            let v = match kind {
                0 => 0.0,
                1 => rng.normal() * mag * 1e-3,
                _ if rng.below(50) == 0 => rng.normal() * mag * 2e-4,
                _ => rng.normal() * mag,
            };
            x.push(bf16::from_f64(v));
        }
    }
    x
}

struct Form {
    q: Vec<u8>,
    s: Vec<u8>,
    q2: Vec<u8>,
    s2: Vec<u8>,
    at: Vec<u8>,
    sat: Vec<u8>,
    mc: Vec<u8>,
    sa: Vec<f32>,
    status: i32,
    /// The WV build's wgrad values (bf16 bytes); empty for the others.
    wv: Vec<u8>,
}

fn run_kernel(
    exe: &std::path::Path,
    x: &[bf16],
    (r, c): (usize, usize),
    (fmt, mode, bpc, wv): (usize, usize, usize, bool),
) -> Form {
    run_kernel_noq(exe, x, (r, c), (fmt, mode, bpc, wv), Noq::Writes)
}

/// Which build writes q, and what runs after it (form_driver.cpp's `noq` argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Noq {
    /// The build that writes every byte of q.
    Writes = 0,
    /// The NOQ build alone.
    Omits = 1,
    /// The NOQ build, then `mx_plain_from_form`.
    ThenPlainFromForm = 2,
    /// The same, gated on a gate the chained GEMM took (so it writes nothing).
    ThenGatedPlainFromForm = 3,
    /// The NOQ build given no scales pointer: s goes transposed into s2's buffer.
    OmitsScales = 4,
    /// That, then `mx_plain_from_form` writing the bytes and s back.
    ThenPlainFromFormWithScales = 5,
}

fn run_kernel_noq(
    exe: &std::path::Path,
    x: &[bf16],
    (r, c): (usize, usize),
    (fmt, mode, bpc, wv): (usize, usize, usize, bool),
    noq: Noq,
) -> Form {
    let x: Vec<u8> = x.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
    let o = host::run_driver(
        exe,
        &[r, c, fmt, mode, bpc, wv as usize, noq as usize],
        &[&x],
    );
    let (n, kb, ns) = (r * c, c / 32, c.div_ceil(STAGE));
    let sizes = [n, r * kb, n, r * kb, n, r * kb, ns * r, ns * 4 * r * 4];
    let mut at = 0;
    let mut parts: Vec<Vec<u8>> = sizes
        .iter()
        .map(|&len| {
            at += len;
            o[at - len..at].to_vec()
        })
        .collect();
    let n_wv = if wv { 2 * n } else { 0 };
    assert_eq!(o.len(), at + 8 + n_wv, "output size");
    let sa = parts
        .pop()
        .unwrap()
        .chunks(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let mut it = parts.into_iter();
    let mut next = || it.next().unwrap();
    Form {
        q: next(),
        s: next(),
        q2: next(),
        s2: next(),
        at: next(),
        sat: next(),
        mc: next(),
        sa,
        status: i32::from_le_bytes(o[at..at + 4].try_into().unwrap()),
        wv: o[at + 8..].to_vec(),
    }
}

/// Two runs' chain forms (q2, s2, their transposes, the residual counts, the scale table and
/// the status) byte for byte.
fn same_form(ctx: &str, got: &Form, want: &Form, (r, c): (usize, usize)) {
    same_form_but_s2(ctx, got, want, (r, c));
    host::first_difference(&format!("{ctx}: s2"), &got.s2, &want.s2, c / 32);
}

/// [`same_form`] without `s2` (which the NOQ builds do not write: `sat` holds it transposed).
fn same_form_but_s2(ctx: &str, got: &Form, want: &Form, (r, c): (usize, usize)) {
    let pairs = [
        ("q2", &got.q2, &want.q2, c),
        ("at", &got.at, &want.at, r),
        ("sat", &got.sat, &want.sat, r),
        ("mc", &got.mc, &want.mc, r),
    ];
    for (what, a, b, width) in pairs {
        host::first_difference(&format!("{ctx}: {what}"), a, b, width);
    }
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert!(bits(&got.sa) == bits(&want.sa), "{ctx}: sa");
    assert_eq!(got.status, want.status, "{ctx}: status");
}

#[test]
fn the_form_kernel_equals_the_cpu_references() {
    let Some((exe, mut rng, seed)) = host::setup("block_form_host", "form_driver.cpp") else {
        return;
    };
    let modes = [ScaleMode::Rceil, ScaleMode::Floor, ScaleMode::Even];
    let mut residuals = 0;
    for (i, (r, c)) in [(144, 2880), (48, 96), (16, 1024)].into_iter().enumerate() {
        for (fmt, format) in [MxFormat::E4m3, MxFormat::E5m2].into_iter().enumerate() {
            let mode = (i + fmt) % 3;
            let ctx = format!("{r} x {c} {format:?} {:?}, seed {seed}", modes[mode]);
            let x = input(&mut rng, r, c);
            let kb = c / 32;
            let (mut q, mut s) = (vec![0u8; r * c], vec![0u8; r * kb]);
            let shape = [r as u64, c as u64];
            quantize_mx(
                &x,
                &shape,
                BlockLayout::vector(1),
                format,
                modes[mode],
                &mut q,
                &mut s,
            )
            .unwrap();
            let want = reencode_rows(&q, &s, r, c, format).unwrap();
            residuals += want.residuals.len();
            for (bpc, wv) in [(1, false), (1, true), (4, false)] {
                let ctx = format!("{ctx}, {bpc} blocks per CTA, wv {wv}");
                let got = run_kernel(&exe, &x, (r, c), (fmt, mode, bpc, wv));
                if wv {
                    let want = host::wgrad_values(&x, (r, c), format, modes[mode]);
                    host::same_bf16_values(&format!("{ctx}: wv"), &got.wv, &want, c);
                }
                host::first_difference(&format!("{ctx}: q"), &got.q, &q, c);
                host::first_difference(&format!("{ctx}: s"), &got.s, &s, kb);
                host::first_difference(&format!("{ctx}: q2"), &got.q2, &want.bytes, c);
                host::first_difference(&format!("{ctx}: s2"), &got.s2, &want.scales, kb);
                host::first_difference(
                    &format!("{ctx}: at"),
                    &got.at,
                    &host::transpose(&want.bytes, r, c),
                    r,
                );
                let sat = host::transpose(&want.scales, r, kb);
                host::first_difference(&format!("{ctx}: sat"), &got.sat, &sat, r);
                let mut mc = vec![0u8; c.div_ceil(STAGE) * r];
                for x in &want.residuals {
                    mc[(x.k / STAGE) * r + x.row] += 1;
                }
                host::first_difference(&format!("{ctx}: mc"), &got.mc, &mc, r);
                for (j, v) in got.sa.iter().enumerate() {
                    let (stage, row, b) = (j / (4 * r), (j / 4) % r, j % 4);
                    let block = 4 * stage + b;
                    let w = if block < kb {
                        scale_value(want.scales[row * kb + block])
                    } else {
                        0.0
                    };
                    assert!(
                        v.to_bits() == w.to_bits(),
                        "{ctx}: sa of row {row}, block {block}: kernel {v}, reference {w}"
                    );
                }
                assert_eq!(got.status, 0, "{ctx}: status");
            }
        }
    }
    assert!(
        residuals > 50,
        "seed {seed}: only {residuals} residuals, too few to test"
    );
    // an Inf: its block gets scale byte 0xFF, so its stage has no stage-uniform form
    let mut x = input(&mut rng, 16, 256);
    x[3 * 256 + 200] = bf16::INFINITY;
    let got = run_kernel(&exe, &x, (16, 256), (0, 0, 4, false));
    assert!(got.status & NONFINITE != 0, "an Inf: status {}", got.status);
}

#[test]
fn the_wv_build_writes_the_wgrad_values_beside_the_same_outputs() {
    let Some((exe, mut rng, seed)) = host::setup("block_form_host_wv", "form_driver.cpp") else {
        return;
    };
    let modes = [ScaleMode::Rceil, ScaleMode::Floor, ScaleMode::Even];
    for (r, c) in [(80, 2880), (48, 96)] {
        let x: Vec<bf16> = host::two_axis_test_values(&mut rng, r, c)
            .into_iter()
            .map(bf16::from_f32)
            .collect();
        for (fmt, format) in [MxFormat::E4m3, MxFormat::E5m2].into_iter().enumerate() {
            for (m, mode) in modes.into_iter().enumerate() {
                let ctx = format!("{r} x {c} {format:?} {mode:?}, seed {seed}");
                let got = run_kernel(&exe, &x, (r, c), (fmt, m, 1, true));
                let want = host::wgrad_values(&x, (r, c), format, mode);
                host::same_bf16_values(&format!("{ctx}: wv"), &got.wv, &want, c);
                let (q, s) = host::rows_reference(&x, (r, c), format, mode);
                host::first_difference(&format!("{ctx}: q"), &got.q, &q, c);
                host::first_difference(&format!("{ctx}: s"), &got.s, &s, c / 32);
                let plain = run_kernel(&exe, &x, (r, c), (fmt, m, 1, false));
                same_form(&format!("{ctx} (WV against plain)"), &got, &plain, (r, c));
            }
        }
    }
}

/// The NOQ builds (`mx_quantize_rows_form_noq_*`, `mx_quantize_rows_form_wv_noq_*`) store q only
/// in the row-stages with a residual or a non-finite stage scale, leave s2 unwritten (`sat` is
/// s2 transposed), and write every other output as the builds that write q do;
/// `mx_plain_from_form` (reading the stage scales from `sat`) then writes the rest of q back
/// from the chain form, equal byte for byte to the plain quantizer's, and with a gate the
/// chained GEMM took it writes nothing. Given no s (the scales on demand too, ABI 1.8) the
/// NOQ build writes s transposed into s2's buffer instead, and the write-back restores s. On inputs with residuals, signed zeros, tiny values, an Inf and a NaN,
/// both formats and every scale mode.
#[test]
fn the_noq_build_leaves_out_only_bytes_the_form_gives_back() {
    let Some((exe, mut rng, seed)) = host::setup("block_form_host_noq", "form_driver.cpp") else {
        return;
    };
    let modes = [ScaleMode::Rceil, ScaleMode::Floor, ScaleMode::Even];
    let (mut stored, mut left_out) = (0usize, 0usize);
    for (i, (r, c)) in [(16, 2880), (144, 96), (32, 512)].into_iter().enumerate() {
        let mut x = input(&mut rng, r, c);
        for (j, v) in x.iter_mut().enumerate() {
            if j % 97 == 5 {
                *v = bf16::from_f32(-0.0);
            }
        }
        if i == 2 {
            x[3 * c + 200] = bf16::INFINITY;
            x[20 * c + 7] = bf16::NAN;
        }
        for (fmt, format) in [MxFormat::E4m3, MxFormat::E5m2].into_iter().enumerate() {
            for wv in [false, true] {
                let mode = (i + fmt + wv as usize) % 3;
                let ctx = format!(
                    "{r} x {c} {format:?} {:?} wv {wv}, seed {seed}",
                    modes[mode]
                );
                let cfg = (fmt, mode, 1, wv);
                let plain = run_kernel_noq(&exe, &x, (r, c), cfg, Noq::Writes);
                let omits = run_kernel_noq(&exe, &x, (r, c), cfg, Noq::Omits);
                let vs = format!("{ctx} (NOQ against plain)");
                same_form_but_s2(&vs, &omits, &plain, (r, c));
                assert!(
                    omits.s2.iter().all(|&b| b == 0xA5),
                    "{ctx}: the NOQ build wrote s2 (sat holds it)"
                );
                host::first_difference(&format!("{vs}: s"), &omits.s, &plain.s, c / 32);
                host::first_difference(&format!("{vs}: wv"), &omits.wv, &plain.wv, 2 * c);
                if i == 2 {
                    assert!(
                        plain.status & NONFINITE != 0,
                        "{ctx}: the Inf and NaN set no flag"
                    );
                }
                // q: the plain bytes where the row-stage has a residual or a non-finite stage
                // scale, the driver's poison (untouched) everywhere else
                for row in 0..r {
                    for k in 0..c {
                        let stage = k / STAGE;
                        let keep = plain.mc[stage * r + row] != 0
                            || plain.s2[row * (c / 32) + k / 32] == 0xFF;
                        let (got, want) = (omits.q[row * c + k], plain.q[row * c + k]);
                        if keep {
                            assert_eq!(
                                got, want,
                                "{ctx}: q[{row}][{k}] of a row-stage the form cannot give back"
                            );
                            stored += 1;
                        } else {
                            assert_eq!(
                                got, 0xA5,
                                "{ctx}: q[{row}][{k}] was written (the form gives it back)"
                            );
                            left_out += 1;
                        }
                    }
                }
                let back = run_kernel_noq(&exe, &x, (r, c), cfg, Noq::ThenPlainFromForm);
                host::first_difference(
                    &format!("{ctx}: q written back from the form"),
                    &back.q,
                    &plain.q,
                    c,
                );
                let gated = run_kernel_noq(&exe, &x, (r, c), cfg, Noq::ThenGatedPlainFromForm);
                host::first_difference(
                    &format!("{ctx}: q with a gate the chained GEMM took"),
                    &gated.q,
                    &omits.q,
                    c,
                );
                // the scales left out too: s untouched, s transposed in s2's buffer, the rest as
                // the NOQ build writes it; then both written back
                let no_s = run_kernel_noq(&exe, &x, (r, c), cfg, Noq::OmitsScales);
                let vs = format!("{ctx} (NOQ without s against NOQ)");
                same_form_but_s2(&vs, &no_s, &omits, (r, c));
                host::first_difference(&format!("{vs}: q"), &no_s.q, &omits.q, c);
                host::first_difference(&format!("{vs}: wv"), &no_s.wv, &omits.wv, 2 * c);
                assert!(
                    no_s.s.iter().all(|&b| b == 0xA5),
                    "{ctx}: the NOQ build given no s wrote s"
                );
                host::first_difference(
                    &format!("{vs}: s transposed"),
                    &no_s.s2,
                    &host::transpose(&plain.s, r, c / 32),
                    r,
                );
                let back = run_kernel_noq(&exe, &x, (r, c), cfg, Noq::ThenPlainFromFormWithScales);
                let vs = format!("{ctx}: written back without s");
                host::first_difference(&format!("{vs}: q"), &back.q, &plain.q, c);
                host::first_difference(&format!("{vs}: s"), &back.s, &plain.s, c / 32);
            }
        }
    }
    assert!(
        stored > 1000 && left_out > 50_000,
        "seed {seed}: {stored} bytes stored, {left_out} left out: too few of either to test"
    );
}
