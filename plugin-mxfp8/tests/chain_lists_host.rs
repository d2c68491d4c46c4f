//! The residual-list kernel `mx_chain_lists_*` (`cuda/include/mx_reencode_pair.cuh`), run on
//! the host through `tests/host/simt.hpp` and compared with the CPU reference
//! (`numerics::reencode::reencode_rows`).
//!
//! The one-pass quantizers leave, per row and 128-deep stage, how many elements the stage scale
//! cannot carry; this kernel turns those counts into each row's list (k ascending, exact MX
//! values), the count per row, and the status words the chained GEMM's gate reads. Its rows per
//! warp (`rpw`: 1 … 16) change how a CTA's threads split the work, never the result, so every
//! case runs at every `rpw`, on fresh random operands: rows without residuals, with a few, and
//! with more than the row's slots (overflow); 1×32 rows (their scales row-major or transposed)
//! and 32×32 weight tiles; both formats;
//! 2 stages (the last one short), 23 and 33 (past the 32 counts a warp keeps in shared memory).
//! The seed is printed, and `MXHOST_TEST_SEED` replays one.

use mxhost_plugin_abi::MxFormat;
use mxhost_plugin_mxfp8::numerics::reencode::{reencode_rows, STAGE};

mod host;
use host::{group_scales, row_bytes, Bytes, Rng};

const OVERFLOW: i32 = 1;

/// One operand as the kernel reads it, with the per-row scales the reference reads.
struct Case {
    name: String,
    format: MxFormat,
    rows: usize,
    k: usize,
    /// rows per expert, scale rows' divisor, and the scale strides (ise, isr, isc)
    rpe: usize,
    rdv: usize,
    strides: (usize, usize, usize),
    q: Vec<u8>,
    /// the scales in the kernel's layout
    s: Vec<u8>,
    /// the same, one row of `ceil(k / 32)` per operand row
    s_rows: Vec<u8>,
}

fn draw(rng: &mut Rng, kind: Bytes) -> Bytes {
    match rng.below(10) {
        0..=3 => kind,
        4..=7 => Bytes::Few,
        8 => Bytes::Zeros,
        _ => Bytes::Any,
    }
}

/// `rows` rows of 1×32 blocks (X, dY): scales `[rows][kb]`.
fn rows_case(rng: &mut Rng, format: MxFormat, rows: usize, k: usize) -> Case {
    let kb = k.div_ceil(32);
    let (mut q, mut s) = (Vec::new(), Vec::new());
    for _ in 0..rows {
        s.extend(group_scales(rng, 3, kb));
        let bk = draw(rng, Bytes::Few);
        q.extend(row_bytes(rng, format, bk, k));
    }
    Case {
        name: format!("1x32 rows {rows} x {k} {format:?}"),
        format,
        rows,
        k,
        rpe: rows,
        rdv: 1,
        strides: (0, 1, kb),
        q,
        s_rows: s.clone(),
        s,
    }
}

/// The same with the scales transposed, `[kb][rows]` (strides swapped): where X's and dY's
/// form kernel writes them when the MX tensor's scales are left out too (plugin ABI 1.8).
fn rows_case_transposed(rng: &mut Rng, format: MxFormat, rows: usize, k: usize) -> Case {
    let c = rows_case(rng, format, rows, k);
    let kb = k.div_ceil(32);
    Case {
        name: format!("{}, scales transposed", c.name),
        strides: (0, rows, 1),
        s: host::transpose(&c.s_rows, rows, kb),
        ..c
    }
}

/// A weight `[e][cols][k]` in 32×32 tiles: scales `[e][cols / 32][kb]`, shared by a tile's rows.
fn tiles_case(rng: &mut Rng, format: MxFormat, e: usize, cols: usize, k: usize) -> Case {
    let (kb, nb) = (k.div_ceil(32), cols / 32);
    let mut s = Vec::new();
    for _ in 0..e * nb {
        s.extend(group_scales(rng, 3, kb));
    }
    let rows = e * cols;
    let mut q = Vec::new();
    let mut s_rows = Vec::new();
    for r in 0..rows {
        let bk = draw(rng, Bytes::Few);
        q.extend(row_bytes(rng, format, bk, k));
        let tile_row = (r / cols) * nb + (r % cols) / 32;
        s_rows.extend_from_slice(&s[tile_row * kb..(tile_row + 1) * kb]);
    }
    Case {
        name: format!("32x32 tiles {e} x {cols} x {k} {format:?}"),
        format,
        rows,
        k,
        rpe: cols,
        rdv: 32,
        strides: (nb * kb, 1, kb),
        q,
        s,
        s_rows,
    }
}

/// The kernel's outputs: status words, the count per row, the records `(k, value)`.
struct Lists {
    status: [i32; 2],
    cnt: Vec<i32>,
    res: Vec<(i32, f32)>,
}

fn run_kernel(exe: &std::path::Path, c: &Case, mc: &[u8], slots: usize, rpw: usize) -> Lists {
    let fmt = if c.format == MxFormat::E4m3 { 0 } else { 1 };
    let (ise, isr, isc) = c.strides;
    let header = [
        c.rows,
        c.k,
        c.rpe,
        c.rdv,
        ise,
        isr,
        isc,
        slots,
        fmt,
        rpw,
        c.s.len(),
        0,
    ];
    let o = host::run_driver(exe, &header, &[&c.q, &c.s, mc]);
    let word = |i: usize| i32::from_le_bytes(o[4 * i..4 * i + 4].try_into().unwrap());
    let res_at = 2 + c.rows;
    Lists {
        status: [word(0), word(1)],
        cnt: (0..c.rows).map(|r| word(2 + r)).collect(),
        res: (0..c.rows * slots)
            .map(|i| {
                let (k, v) = (word(res_at + 2 * i), word(res_at + 2 * i + 1));
                (k, f32::from_bits(v as u32))
            })
            .collect(),
    }
}

fn check(exe: &std::path::Path, c: &Case, seed: u64) -> (usize, usize, usize) {
    let slots = 16 + c.k / 256; // the backend's rule (chain_form::slots); any value is valid
    let reference = reencode_rows(&c.q, &c.s_rows, c.rows, c.k, c.format).unwrap();
    let ns = c.k.div_ceil(STAGE);
    let mut mc = vec![0u8; ns * c.rows];
    let mut per_row: Vec<Vec<(i32, f32)>> = vec![Vec::new(); c.rows];
    for r in &reference.residuals {
        mc[(r.k / STAGE) * c.rows + r.row] += 1;
        per_row[r.row].push((r.k as i32, r.value as f32));
    }
    let listed: usize = per_row
        .iter()
        .filter(|l| l.len() <= slots)
        .map(Vec::len)
        .sum();
    let overflowing = per_row.iter().filter(|l| l.len() > slots).count();
    let with_lists = per_row
        .iter()
        .filter(|l| !l.is_empty() && l.len() <= slots)
        .count();
    for rpw in [1, 2, 4, 8, 16] {
        let got = run_kernel(exe, c, &mc, slots, rpw);
        let ctx = format!("{}, rpw {rpw}, seed {seed}", c.name);
        assert_eq!(
            got.status[0] & OVERFLOW != 0,
            overflowing > 0,
            "{ctx}: overflow flag"
        );
        assert_eq!(got.status[1] as usize, listed, "{ctx}: residuals listed");
        for (r, want) in per_row.iter().enumerate() {
            let n = if want.len() <= slots { want.len() } else { 0 };
            assert_eq!(got.cnt[r] as usize, n, "{ctx}: row {r}'s count");
            let have = &got.res[r * slots..r * slots + n];
            for (i, (&(k, v), &(wk, wv))) in have.iter().zip(want).enumerate() {
                assert!(
                    k == wk && v.to_bits() == wv.to_bits(),
                    "{ctx}: row {r} record {i}: ({k}, {v}), reference ({wk}, {wv})"
                );
            }
        }
    }
    (with_lists, overflowing, listed)
}

#[test]
fn lists_equal_the_cpu_reference_at_every_rows_per_warp() {
    let Some((exe, mut rng, seed)) = host::setup("chain_lists_host", "chain_lists_driver.cpp")
    else {
        return;
    };
    let cases = [
        rows_case(&mut rng, MxFormat::E4m3, 301, 2880),
        rows_case(&mut rng, MxFormat::E5m2, 301, 2880),
        rows_case(&mut rng, MxFormat::E4m3, 200, 4224),
        rows_case(&mut rng, MxFormat::E4m3, 77, 160),
        rows_case_transposed(&mut rng, MxFormat::E4m3, 301, 2880),
        tiles_case(&mut rng, MxFormat::E4m3, 3, 96, 2880),
    ];
    let (mut lists, mut overflows) = (0, 0);
    for c in &cases {
        let (l, o, n) = check(&exe, c, seed);
        eprintln!(
            "{}: {l} rows listed ({n} residuals), {o} rows over their slots",
            c.name
        );
        lists += l;
        overflows += o;
    }
    // the draw must reach every branch: rows with lists, rows over their slots, rows without
    assert!(
        lists > 50 && overflows > 10,
        "seed {seed}: too few lists ({lists}) or overflows ({overflows}) to test"
    );
}
