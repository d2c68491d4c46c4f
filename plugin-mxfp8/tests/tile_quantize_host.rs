//! The tiled quantizer `mx_quantize_f32_*` (`cuda/include/mx_quant_tile.cuh` for f32 input: what
//! quantizes every case the flat and TMA kernels do not take: tails, 32×1 columns, grouped
//! experts), run on the host through `tests/host/simt.hpp` and compared with the independent
//! block reference `common::reference_quantize` (the one `quantize_mx` is tested against) on
//! fresh random input (NaN, ±Inf, zero blocks, tiny and huge values), every output poisoned first:
//! - ROWS with C % 32 != 0;
//! - TILE | TILE_T on a batch of two (32×32 tiles and the transposed copy with its scales);
//! - COLS (32×1 along R, written transposed with a padded leading dimension);
//! - ROWS | COLS grouped by experts of 45, 0, 130 and 20 rows plus 5 rows after the last
//!   expert: the transposed outputs in the padded expert layout (each expert's columns rounded up
//!   to 128, blocks restarting at each expert, padding zero with the all-zero block's scale,
//!   except inside a part-full last block holding a NaN or Inf: 0x7F like the whole block).
//!
//! Grid y is 2 or 3, so CTAs walk several tiles. Both formats; the scale mode rotates.
//!
//! The bf16-input kernels run too (`the_bf16_tile_paths_…`, with `simt_sm90.hpp`'s TMA and
//! mbarriers): 32×32 tiles with the transposed copy through the cp.async ring
//! (`mx_quantize_bf16_*`), the TMA tile loop (`mx_quantize_t32_*`) and its row-group build
//! (`mx_quantize_t32l_*`, the backend's default for a weight with Wᵀ).

use mxhost_plugin_abi::{BlockLayout, MxFormat, ScaleMode};
mod common;
mod host;
use common::reference_quantize;

const ROWS: usize = 1;
const COLS: usize = 2;
const TILE: usize = 4;
const TILE_T: usize = 8;
const MODES: [ScaleMode; 3] = [ScaleMode::Rceil, ScaleMode::Floor, ScaleMode::Even];

/// One launch: flags, shapes, leading dimensions, experts, grid y, and the output sizes.
struct Launch {
    flags: usize,
    batch: usize,
    r: usize,
    c: usize,
    ldt: usize,
    ldst: usize,
    offs: Vec<i32>,
    grouped_tiles: usize,
    gy: usize,
    sizes: [usize; 4],
}

/// Which kernel quantizes (tile_driver.cpp): f32 input, or bf16 through the cp.async ring, the TMA
/// tile loop (`mx_quantize_t32_*`) or its row-group build (`mx_quantize_t32l_*`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kernel {
    F32 = 0,
    Bf16Ring = 1,
    T32 = 2,
    T32l = 3,
}

/// The kernel's qa, sa, qt, st.
fn run(
    exe: &std::path::Path,
    l: &Launch,
    x: &[f32],
    (fmt, mode): (usize, usize),
    kernel: Kernel,
) -> Vec<Vec<u8>> {
    let header = [
        fmt,
        mode,
        l.flags,
        l.batch,
        l.r,
        l.c,
        l.ldt,
        l.ldst,
        l.offs.len(),
        l.grouped_tiles,
        l.gy,
        l.sizes[0],
        l.sizes[1],
        l.sizes[2],
        l.sizes[3],
        kernel as usize,
    ];
    let input: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let offs: Vec<u8> = l.offs.iter().flat_map(|v| v.to_le_bytes()).collect();
    let o = host::run_driver(exe, &header, &[&input, &offs]);
    let mut at = 0;
    l.sizes
        .iter()
        .map(|&n| {
            at += n;
            o[at - n..at].to_vec()
        })
        .collect()
}

/// The first `width` bytes of each of `rows` rows of `got` (leading dimension `ld`).
fn leading(got: &[u8], rows: usize, ld: usize, width: usize) -> Vec<u8> {
    (0..rows)
        .flat_map(|i| got[i * ld..i * ld + width].to_vec())
        .collect()
}

/// TILE | TILE_T on a batch of two (`x`: 2 × r × c) by `kernel`: the tiles and the transposed
/// copy's tiles against the reference quantization of `x` and of its transpose.
fn check_tiles(
    exe: &std::path::Path,
    x: &[f32],
    (r, c): (usize, usize),
    (fmt, format, m): (usize, MxFormat, usize),
    kernel: Kernel,
    ctx: &str,
) {
    let (rb, cb) = (r.div_ceil(32), c.div_ceil(32));
    let l = Launch {
        flags: TILE | TILE_T,
        batch: 2,
        r,
        c,
        ldt: r,
        ldst: rb,
        offs: vec![],
        grouped_tiles: 0,
        // (t32l: grid y counts groups of four tiles)
        gy: 2,
        sizes: [2 * r * c, 2 * rb * cb, 2 * c * r, 2 * cb * rb],
    };
    let got = run(exe, &l, x, (fmt, m), kernel);
    let (q, s) = reference_quantize(
        x,
        &[2, r as u64, c as u64],
        BlockLayout::tile(),
        format,
        MODES[m],
    );
    host::first_difference(&format!("{ctx}: qa"), &got[0], &q, c);
    host::first_difference(&format!("{ctx}: sa"), &got[1], &s, cb);
    let mut xt = vec![0f32; x.len()];
    for (i, v) in x.iter().enumerate() {
        let (b, n, k) = (i / (r * c), i / c % r, i % c);
        xt[(b * c + k) * r + n] = *v;
    }
    let (qt, st) = reference_quantize(
        &xt,
        &[2, c as u64, r as u64],
        BlockLayout::tile(),
        format,
        MODES[m],
    );
    host::first_difference(&format!("{ctx}: qt"), &got[2], &qt, r);
    host::first_difference(&format!("{ctx}: st"), &got[3], &st, rb);
}

/// ROWS | COLS grouped by experts of `sizes` rows, then 5 more rows (`x`: rows × c), by `kernel`:
/// the row quantization, and the transposed outputs in the padded expert layout (each expert's
/// columns rounded up to 128, blocks restarting at each expert, padding zero with the all-zero
/// block's scale, except inside a part-full last block holding a NaN or Inf).
fn check_grouped(
    exe: &std::path::Path,
    x: &[f32],
    c: usize,
    sizes: &[usize],
    (fmt, format, m): (usize, MxFormat, usize),
    kernel: Kernel,
    ctx: &str,
) {
    let rg = sizes.iter().sum::<usize>() + 5;
    let cb = c.div_ceil(32);
    let pad: Vec<usize> = sizes.iter().map(|m| m.div_ceil(128) * 128).collect();
    let mpad: usize = pad.iter().sum();
    let offs: Vec<i32> = sizes
        .iter()
        .scan(0, |a, &m| {
            *a += m as i32;
            Some(*a)
        })
        .collect();
    let l = Launch {
        flags: ROWS | COLS,
        batch: 1,
        r: rg,
        c,
        ldt: mpad,
        ldst: mpad / 32,
        offs,
        grouped_tiles: mpad / 32,
        gy: 3,
        sizes: [rg * c, rg * cb, c * mpad, c * mpad / 32],
    };
    let got = run(exe, &l, x, (fmt, m), kernel);
    let (q, s) = reference_quantize(
        x,
        &[rg as u64, c as u64],
        BlockLayout::vector(1),
        format,
        MODES[m],
    );
    host::first_difference(&format!("{ctx}: qa"), &got[0], &q, c);
    host::first_difference(&format!("{ctx}: sa"), &got[1], &s, cb);
    // the transposed outputs, expert by expert: zero bytes and the zero block's scale in padding
    let (_, zero_scale) = reference_quantize(
        &[0.0; 32],
        &[1, 32],
        BlockLayout::vector(1),
        format,
        MODES[m],
    );
    let (mut qt, mut st) = (vec![0u8; c * mpad], vec![zero_scale[0]; c * mpad / 32]);
    let (mut row0, mut seg) = (0, 0);
    for (&me, &pe) in sizes.iter().zip(&pad) {
        if me > 0 {
            let slab = host::transpose(&x[row0 * c..(row0 + me) * c], me, c);
            let (q, s) = reference_quantize(
                &slab,
                &[c as u64, me as u64],
                BlockLayout::vector(1),
                format,
                MODES[m],
            );
            let mb = me.div_ceil(32);
            for k in 0..c {
                qt[k * mpad + seg..k * mpad + seg + me].copy_from_slice(&q[k * me..(k + 1) * me]);
                st[k * (mpad / 32) + seg / 32..k * (mpad / 32) + seg / 32 + mb]
                    .copy_from_slice(&s[k * mb..(k + 1) * mb]);
                // a NaN/Inf block is 0x7F throughout, the padding rows of a part-full last
                // block too (the non-finite rule holds for the whole 32-row block)
                if s[(k + 1) * mb - 1] == 0xFF {
                    qt[k * mpad + seg + me..k * mpad + seg + 32 * mb].fill(0x7F);
                }
            }
        }
        (row0, seg) = (row0 + me, seg + pe);
    }
    host::first_difference(&format!("{ctx}: qt"), &got[2], &qt, mpad);
    host::first_difference(&format!("{ctx}: st"), &got[3], &st, mpad / 32);
}

#[test]
fn the_tiled_quantizer_equals_the_cpu_reference_quantize() {
    let Some((exe, mut rng, seed)) = host::setup("tile_quantize_host", "tile_driver.cpp") else {
        return;
    };
    let (r, c): (usize, usize) = (70, 100);
    let (rb, cb) = (r.div_ceil(32), c.div_ceil(32));
    let mut case = 0;
    for (fmt, format) in [MxFormat::E4m3, MxFormat::E5m2].into_iter().enumerate() {
        let mut next_mode = || {
            case += 1;
            case % 3
        };
        // ROWS, C % 32 != 0
        let m = next_mode();
        let ctx = format!("ROWS {r} x {c} {format:?} {:?}, seed {seed}", MODES[m]);
        let x = host::mx_test_values(&mut rng, r * c);
        let l = Launch {
            flags: ROWS,
            batch: 1,
            r,
            c,
            ldt: 0,
            ldst: 0,
            offs: vec![],
            grouped_tiles: 0,
            gy: 2,
            sizes: [r * c, r * cb, 0, 0],
        };
        let got = run(&exe, &l, &x, (fmt, m), Kernel::F32);
        let (q, s) = reference_quantize(
            &x,
            &[r as u64, c as u64],
            BlockLayout::vector(1),
            format,
            MODES[m],
        );
        host::first_difference(&format!("{ctx}: qa"), &got[0], &q, c);
        host::first_difference(&format!("{ctx}: sa"), &got[1], &s, cb);

        // TILE | TILE_T, a batch of two
        let m = next_mode();
        let ctx = format!(
            "TILE|TILE_T 2 x {r} x {c} {format:?} {:?}, seed {seed}",
            MODES[m]
        );
        let x = host::mx_test_values(&mut rng, 2 * r * c);
        check_tiles(&exe, &x, (r, c), (fmt, format, m), Kernel::F32, &ctx);

        // COLS, written transposed into rows of 72
        let m = next_mode();
        let ctx = format!("COLS {r} x {c} {format:?} {:?}, seed {seed}", MODES[m]);
        let x = host::mx_test_values(&mut rng, r * c);
        let ldt = 72;
        let l = Launch {
            flags: COLS,
            batch: 1,
            r,
            c,
            ldt,
            ldst: rb,
            offs: vec![],
            grouped_tiles: 0,
            gy: 2,
            sizes: [0, 0, c * ldt, c * rb],
        };
        let got = run(&exe, &l, &x, (fmt, m), Kernel::F32);
        let xt = host::transpose(&x, r, c);
        let (qt, st) = reference_quantize(
            &xt,
            &[c as u64, r as u64],
            BlockLayout::vector(1),
            format,
            MODES[m],
        );
        host::first_difference(&format!("{ctx}: qt"), &leading(&got[2], c, ldt, r), &qt, r);
        host::first_difference(&format!("{ctx}: st"), &got[3], &st, rb);

        // ROWS | COLS grouped by experts, 5 rows after the last one
        let m = next_mode();
        let sizes = [45usize, 0, 130, 20];
        let rg = sizes.iter().sum::<usize>() + 5;
        let ctx = format!(
            "grouped ROWS|COLS {sizes:?} + 5 rows, {format:?} {:?}, seed {seed}",
            MODES[m]
        );
        let x = host::mx_test_values(&mut rng, rg * c);
        check_grouped(&exe, &x, c, &sizes, (fmt, format, m), Kernel::F32, &ctx);
    }
}

/// The bf16-input paths: 32×32 tiles with the transposed copy (the backend's quantization of a
/// weight with Wᵀ: `mx_quantize_t32l_*` by default, `mx_quantize_t32_*` with
/// `MXHOST_MX_T32_ROW_GROUPS=off`, the cp.async ring where TMA is unavailable) on a batch of
/// two, R = 300 (three row groups, the last short) and C = 104 (a part-full column tile), through
/// TMA and mbarriers emulated by `simt_sm90.hpp`; the reference quantizes the input rounded to
/// bf16 as the driver hands it to the kernel.
#[test]
fn the_bf16_tile_paths_equal_the_cpu_reference_quantize() {
    let Some((exe, mut rng, seed)) = host::setup("tile_quantize_host_bf16", "tile_driver.cpp")
    else {
        return;
    };
    let (r, c): (usize, usize) = (300, 104);
    let mut case = 0;
    for kernel in [Kernel::Bf16Ring, Kernel::T32, Kernel::T32l] {
        for (fmt, format) in [MxFormat::E4m3, MxFormat::E5m2].into_iter().enumerate() {
            case += 1;
            let m = case % 3;
            let ctx = format!(
                "{kernel:?} TILE|TILE_T 2 x {r} x {c} {format:?} {:?}, seed {seed}",
                MODES[m]
            );
            let x: Vec<f32> = host::mx_test_values(&mut rng, 2 * r * c)
                .into_iter()
                .map(|v| half::bf16::from_f32(v).to_f32())
                .collect();
            check_tiles(&exe, &x, (r, c), (fmt, format, m), kernel, &ctx);
            if kernel == Kernel::Bf16Ring {
                // (the TMA kernels take ungrouped tiles only)
                let sizes = [45usize, 0, 130, 20];
                let ctx = format!(
                    "{kernel:?} grouped ROWS|COLS {sizes:?} + 5 rows {format:?}, seed {seed}"
                );
                let x: Vec<f32> = host::mx_test_values(&mut rng, (195 + 5) * c)
                    .into_iter()
                    .map(|v| half::bf16::from_f32(v).to_f32())
                    .collect();
                check_grouped(&exe, &x, c, &sizes, (fmt, format, m), kernel, &ctx);
            }
        }
    }
}
