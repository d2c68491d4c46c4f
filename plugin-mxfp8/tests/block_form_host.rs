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
//!
//! Given a need map (plugin ABI 1.9) every build stores exactly the 16-row chunks of `at` that
//! the map names for the chunk's experts, and the rest as without it; the map's own kernel
//! `mx_chain_need_map` (`cuda/include/mx_chain_need.cuh`) is compared with one built here from
//! the same residual lists.

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
    shape: (usize, usize),
    cfg: (usize, usize, usize, bool),
    noq: Noq,
) -> Form {
    run_kernel_need(exe, x, shape, cfg, noq, None)
}

/// A need map as the form kernel takes it (plugin ABI 1.9): the experts' cumulative end rows,
/// and per expert `c / 32` words whose bit `k % 32` of word `k / 32` says that column `k` of
/// `at` is read for the expert's rows.
struct NeedMap {
    offs: Vec<i32>,
    words: Vec<u32>,
}

/// [`run_kernel_noq`] with a need map (`None`: the kernel's null, all of `at`).
fn run_kernel_need(
    exe: &std::path::Path,
    x: &[bf16],
    (r, c): (usize, usize),
    (fmt, mode, bpc, wv): (usize, usize, usize, bool),
    noq: Noq,
    need: Option<&NeedMap>,
) -> Form {
    let x: Vec<u8> = x.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
    let (offs, words): (Vec<u8>, Vec<u8>) = match need {
        Some(m) => (
            m.offs.iter().flat_map(|v| v.to_le_bytes()).collect(),
            m.words.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        None => (Vec::new(), Vec::new()),
    };
    let experts = need.map_or(0, |m| m.offs.len());
    let o = host::run_driver(
        exe,
        &[
            r,
            c,
            fmt,
            mode,
            bpc,
            wv as usize,
            noq as usize,
            need.is_some() as usize,
            experts,
        ],
        &[&x, &offs, &words],
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

/// Each `(name, got, want, row width)` region byte for byte, then the FP32 scale table bit for
/// bit and the status word.
fn same_regions(ctx: &str, pairs: &[(&str, &Vec<u8>, &Vec<u8>, usize)], got: &Form, want: &Form) {
    for &(what, a, b, width) in pairs {
        host::first_difference(&format!("{ctx}: {what}"), a, b, width);
    }
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert!(bits(&got.sa) == bits(&want.sa), "{ctx}: sa");
    assert_eq!(got.status, want.status, "{ctx}: status");
}

/// [`same_form`] without `s2` (which the NOQ builds do not write: `sat` holds it transposed).
fn same_form_but_s2(ctx: &str, got: &Form, want: &Form, (r, c): (usize, usize)) {
    let pairs = [
        ("q2", &got.q2, &want.q2, c),
        ("at", &got.at, &want.at, r),
        ("sat", &got.sat, &want.sat, r),
        ("mc", &got.mc, &want.mc, r),
    ];
    same_regions(ctx, &pairs, got, want);
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

/// A need map over `r` rows and `c` columns: an empty expert before row 0, one of 21 rows (chunks
/// 0 and 1), an empty one inside chunk 1, one of 19 rows, then random sizes (a quarter empty)
/// while at least 24 rows are left: those belong to no expert. Each expert's words are empty,
/// dense or sparse; the empty experts' are dense (no row of theirs reads them).
fn need_map(rng: &mut Rng, r: usize, c: usize) -> NeedMap {
    let mut sizes = vec![0, 21, 0, 19];
    loop {
        let size = if rng.below(4) == 0 {
            0
        } else {
            1 + rng.below(40)
        };
        if sizes.iter().sum::<usize>() + size > r - 24 {
            break;
        }
        sizes.push(size);
    }
    let offs: Vec<i32> = sizes
        .iter()
        .scan(0, |end, &n| {
            *end += n;
            Some(*end as i32)
        })
        .collect();
    let word = |rng: &mut Rng, kind| -> u32 {
        let bits = |rng: &mut Rng| rng.next_u64() as u32;
        match kind {
            0 => 0,
            1 => bits(rng),
            // each bit one in 16
            _ => bits(rng) & bits(rng) & bits(rng) & bits(rng),
        }
    };
    let mut words = Vec::new();
    for &n in &sizes {
        let kind = if n == 0 { 1 } else { rng.below(4) };
        for _ in 0..c / 32 {
            words.push(word(rng, kind));
        }
    }
    NeedMap { offs, words }
}

/// Whether the 16-row chunk `m` of `at`'s column `k` is read, at `[k * r / 16 + m]`: some row of
/// the chunk belongs to an expert whose words have bit `k`.
fn chunks_needed(map: &NeedMap, r: usize, c: usize) -> Vec<bool> {
    let nw = c / 32;
    let expert = |row: usize| map.offs.iter().position(|&end| end as usize > row);
    let mut needed = vec![false; c * r / 16];
    for row in 0..r {
        let Some(e) = expert(row) else { continue };
        for k in 0..c {
            if map.words[e * nw + k / 32] >> (k % 32) & 1 != 0 {
                needed[k * r / 16 + row / 16] = true;
            }
        }
    }
    needed
}

/// Given a need map (plugin ABI 1.9), every build stores exactly the 16-row chunks of `at` whose
/// column an expert with rows in the chunk needs, those byte for byte as without a map, and
/// leaves the other chunks alone (the driver's poison); every other output is the same as
/// without a map. Experts whose sizes are not multiples of 16 (chunks straddle them), empty
/// experts (before row 0, and inside a chunk, their own words dense: no row reads them), rows
/// past the last expert; R not a multiple of 128 and C = 2880 (a short last stage); the
/// one-block, WV, four-block and NOQ builds in E4M3, the one-block build in E5M2. (Without a
/// map the kernel writes all of `at`: the tests above.)
#[test]
fn a_need_map_stores_exactly_the_chunks_of_at_it_names() {
    let Some((exe, mut rng, seed)) = host::setup("block_form_host_need", "form_driver.cpp") else {
        return;
    };
    let (r, c) = (208, 2880);
    let x = input(&mut rng, r, c);
    let map = need_map(&mut rng, r, c);
    let needed = chunks_needed(&map, r, c);
    let (mut stored, mut left_out) = (0usize, 0usize);
    let builds = [
        (1, false, Noq::Writes),
        (1, true, Noq::Writes),
        (4, false, Noq::Writes),
        (1, false, Noq::Omits),
        (1, true, Noq::Omits),
    ];
    for (fmt, format) in [MxFormat::E4m3, MxFormat::E5m2].into_iter().enumerate() {
        // (the mask does not depend on the format: E5M2 in the one-block build only)
        for &(bpc, wv, noq) in &builds[..if fmt == 0 { builds.len() } else { 1 }] {
            let ctx = format!(
                "{r} x {c} {format:?}, {bpc} blocks per CTA, wv {wv}, {noq:?}, experts {:?}, seed {seed}",
                map.offs
            );
            let cfg = (fmt, (fmt + bpc) % 3, bpc, wv);
            let all = run_kernel_need(&exe, &x, (r, c), cfg, noq, None);
            let some = run_kernel_need(&exe, &x, (r, c), cfg, noq, Some(&map));
            same_but_at(&format!("{ctx} (map against none)"), &some, &all, (r, c));
            for (i, &need) in needed.iter().enumerate() {
                let (k, m) = (i / (r / 16), i % (r / 16));
                let chunk = k * r + 16 * m..k * r + 16 * m + 16;
                if need {
                    assert_eq!(
                        some.at[chunk.clone()],
                        all.at[chunk],
                        "{ctx}: at's column {k}, rows {} .. {}: a chunk the map needs",
                        16 * m,
                        16 * m + 15
                    );
                    stored += 1;
                } else {
                    assert!(
                        some.at[chunk].iter().all(|&b| b == 0xA5),
                        "{ctx}: at's column {k}, rows {} .. {} was stored (the map does not need it)",
                        16 * m,
                        16 * m + 15
                    );
                    left_out += 1;
                }
            }
        }
    }
    assert!(
        stored > 5000 && left_out > 5000,
        "seed {seed}: {stored} chunks stored, {left_out} left out: too few of either to test"
    );
}

/// Two runs' outputs but `at`, byte for byte.
fn same_but_at(ctx: &str, got: &Form, want: &Form, (r, c): (usize, usize)) {
    let pairs = [
        ("q", &got.q, &want.q, c),
        ("s", &got.s, &want.s, c / 32),
        ("q2", &got.q2, &want.q2, c),
        ("s2", &got.s2, &want.s2, c / 32),
        ("sat", &got.sat, &want.sat, r),
        ("mc", &got.mc, &want.mc, r),
        ("wv", &got.wv, &want.wv, 2 * c),
    ];
    same_regions(ctx, &pairs, got, want);
}

/// `mx_chain_need_map` (`cuda/include/mx_chain_need.cuh`, through `tests/host/need_map_driver.cpp`)
/// against the map built here from the same lists: per expert, bit `k % 32` of word `k / 32`
/// for every k in its weight rows' lists. Rows with empty lists, an expert without residuals,
/// lists k-ascending as `mx_chain_lists` writes them and one out of order, one that overflowed
/// (`cnt` > slots: read up to the slots; it is the row before the expert without residuals);
/// more rows than the driver's threads (the grid-stride loop goes round). The lists name only
/// columns before the last word, and every slot past a row's count holds a stale k in the last
/// word: a slot read that should not be sets a bit the reference leaves clear.
#[test]
fn the_need_map_kernel_marks_each_experts_residual_columns() {
    let Some((exe, mut rng, seed)) = host::setup("block_form_host_need_map", "need_map_driver.cpp")
    else {
        return;
    };
    let (experts, n, slots, nw) = (5, 120, 12, 90);
    let rows = experts * n;
    let quiet = 3; // the expert without residuals
    let listed_k = |rng: &mut Rng| rng.below(32 * (nw - 1)) as i32;
    let stale_k = |rng: &mut Rng| (32 * (nw - 1) + rng.below(32)) as i32;
    let mut cnt = vec![0i32; rows];
    let mut res: Vec<(i32, f32)> = (0..rows * slots)
        .map(|_| (stale_k(&mut rng), -1.0))
        .collect();
    for row in 0..rows {
        let listed = match rng.below(4) {
            _ if row / n == quiet => 0,
            0 => 0,
            _ => 1 + rng.below(slots),
        };
        let mut ks: Vec<i32> = (0..listed).map(|_| listed_k(&mut rng)).collect();
        ks.sort_unstable();
        if row == 8 {
            ks.reverse();
        }
        for (i, &k) in ks.iter().enumerate() {
            res[row * slots + i] = (k, rng.normal() as f32);
        }
        cnt[row] = listed as i32;
    }
    let overflow = quiet * n - 1;
    cnt[overflow] = slots as i32 + 5;
    for i in 0..slots {
        res[overflow * slots + i].0 = (3 * i + 1) as i32;
    }
    let mut want = vec![0u32; experts * nw];
    for row in 0..rows {
        for &(k, _) in &res[row * slots..row * slots + (cnt[row] as usize).min(slots)] {
            want[row / n * nw + k as usize / 32] |= 1 << (k % 32);
        }
    }
    let cnt_bytes: Vec<u8> = cnt.iter().flat_map(|v| v.to_le_bytes()).collect();
    let res_bytes: Vec<u8> = res
        .iter()
        .flat_map(|&(k, v)| k.to_le_bytes().into_iter().chain(v.to_le_bytes()))
        .collect();
    let o = host::run_driver(&exe, &[rows, n, slots, nw], &[&cnt_bytes, &res_bytes]);
    let got: Vec<u32> = o
        .chunks(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(got.len(), want.len(), "seed {seed}: map size");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g,
            w,
            "seed {seed}: expert {}, word {} (columns {} ..): kernel {g:#010x}, reference {w:#010x}",
            i / nw,
            i % nw,
            32 * (i % nw)
        );
    }
    assert!(
        want.iter().filter(|&&w| w != 0).count() > 100,
        "seed {seed}: the lists set too few bits to test"
    );
}

/// The prefetching build (`mx_quantize_rows_form_wv_noq_pf_*`, `MXHOST_MX_FORM_PREFETCH=1`:
/// two CTAs per row block walk its column blocks, each loading its next block while it stores
/// the current one) writes exactly the bytes of the one-block WV NOQ build, and leaves the same
/// ones out (every buffer poisoned before both): with and without the scales pointer, with and
/// without a need map (whose words are double-buffered across a CTA's blocks), both formats,
/// every scale mode; C = 2880 (23 column blocks, a short last one: the walkers' counts differ),
/// 96 (one block: the second walker has none) and 1024, R not a multiple of 128, non-finite
/// input.
#[test]
fn the_prefetching_build_writes_the_one_block_builds_bytes() {
    let Some((exe, mut rng, seed)) = host::setup("block_form_host_pf", "form_driver.cpp") else {
        return;
    };
    for (i, (r, c)) in [(208, 2880), (144, 96), (48, 1024)].into_iter().enumerate() {
        let mut x = input(&mut rng, r, c);
        if i == 2 {
            x[3 * c + 200] = bf16::INFINITY;
            x[20 * c + 7] = bf16::NAN;
        }
        let map = need_map(&mut rng, r, c);
        for (fmt, format) in [MxFormat::E4m3, MxFormat::E5m2].into_iter().enumerate() {
            for (noq, need) in [
                (Noq::Omits, None),
                (Noq::OmitsScales, None),
                (Noq::Omits, Some(&map)),
                (Noq::OmitsScales, Some(&map)),
            ] {
                let mode = (i + fmt) % 3;
                let ctx = format!(
                    "{r} x {c} {format:?} mode {mode} {noq:?}, need map {}, seed {seed}",
                    need.is_some()
                );
                let want = run_kernel_need(&exe, &x, (r, c), (fmt, mode, 1, true), noq, need);
                let got = run_kernel_need(&exe, &x, (r, c), (fmt, mode, 2, true), noq, need);
                same_form(&ctx, &got, &want, (r, c));
                let regions = [
                    ("q", &got.q, &want.q, c),
                    ("s", &got.s, &want.s, c / 32),
                    ("wv", &got.wv, &want.wv, 2 * c),
                ];
                for (what, a, b, width) in regions {
                    host::first_difference(&format!("{ctx}: {what}"), a, b, width);
                }
            }
        }
    }
}
