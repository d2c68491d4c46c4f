//! The chained forward end to end on the host (`tests/host/chain_gemm_driver.cpp` through
//! `simt.hpp` and `simt_sm90.hpp`), as `cuda/bench/chain.py` runs it on a GPU: X (1×32) and W
//! (32×32 tiles) re-encoded to stage-uniform copies plus residual lists (`mx_reencode_rows`), the
//! chained GEMM (`mx_tgemm_chain_impl`, `MXHOST_MX_CHAIN`: both the 4-stage build and the
//! 3-stage `_s3` one, whose A'·B_res corrections run as bf16 wgmmas) with the gatherer warps'
//! correction rounds, compared with a float64 reference of the original MX operands.
//!
//! The chained kernel sums in another order than the per-k32 one (a stage's four k32 products in
//! the tensor core, one promotion per stage, the corrections after the main loop), so the
//! comparison has a tolerance: |out − ref| ≤ 1e-5 · Σ|terms| (f32 output; bf16 adds half an ulp
//! of the reference). The operands are built so that the corrections matter: each X row's first
//! stage has one block 10 binades above the other three, whose few elements mostly leave E4M3
//! after the shift (A residuals), and W's second stage is built the same way (B residuals);
//! one case also runs without the corrections and requires that to fail.
//!
//! Two cases leave out the bytes of W's partner Wᵀ (what the A_res·B corrections read) where
//! Wᵀ's own chain form gives them back (plugin ABI 1.7's bytes on demand, `MXC_BT_FORM`): the
//! driver builds that form and poisons the partner's bytes there, and the corrections must read
//! the form instead; without `MXC_BT_FORM`, or with residual counts of zero (the form read where
//! it lost elements), they must fail; with the form's words null (annexes filled one at a time)
//! and the partner's bytes whole they must pass.
//!
//! One case stores its full tiles through the TMA-store epilogue (`MXHOST_MX_CHAIN_TMA_STORE`)
//! beside a partial tile.
//!
//! Two cases also run with the transposed copy of X's form poisoned in every 16-row chunk at a k where no
//! expert of the chunk's rows has a residual of W (what the form kernel leaves unwritten for a
//! named weight, plugin ABI 1.9; the map from `mx_chain_need_map`): the result must not change,
//! and must when the first expert's map is emptied.

use half::bf16;
use mxhost_plugin_abi::MxFormat;
use mxhost_plugin_mxfp8::numerics::element::decode;

mod host;
use host::{finite_byte, group_scales, large_byte, row_bytes, Bytes, Rng};

use MxFormat::{E4m3, E5m2};

struct Case {
    name: &'static str,
    experts: &'static [usize],
    /// Rows after the last expert (the kernel zeroes them); M must be a multiple of 16.
    pad: usize,
    n: usize,
    k: usize,
    fa: MxFormat,
    out_bf16: bool,
    /// 0: the 4-stage build; 1: `_s3` (corrections of B's residuals on the tensor cores).
    build: usize,
    grid: usize,
    /// Also run without the corrections and require that to fail (f32 output: bf16's rounding
    /// can hide the residuals' share).
    without: bool,
    /// W's residuals in one column of 32 only, at stages 1-3 by column (≤ 24 B entries per
    /// tile, two columns sharing a stage): the A'·B_res corrections alone at several k per tile
    /// beside dense A_res ones, and required to matter (the run with A's corrections only
    /// must fail).
    sparse_b: bool,
    /// Wᵀ's bytes left out (poisoned by the driver) in its row-stages without residuals in its
    /// own chain form, the A_res corrections reading that form there (`MXC_BT_FORM`); W's tile
    /// row 4 (e mod ⌊N/128⌋) raised 16 binades on its first stage (uniform along K: no B
    /// residuals), so that Wᵀ's rows 32-127 (X's A residuals) have many residuals in that stage
    /// of 128 columns (the partner's bytes read) and few elsewhere (the form read).
    form: bool,
    /// The 3-stage build's TMA-store epilogue for full tiles (bf16 output; `TMA_STORE`).
    tma_store: bool,
    /// Also run with the transposed copy of X's form poisoned outside W's need map (`AT_NEED`: what the
    /// form kernel leaves unwritten for a named weight, plugin ABI 1.9) and require the same
    /// result; and with the first expert's map emptied (`AT_NEED_DROP`) and require a miss.
    at_need: bool,
}

/// `MxChainFix::terms` beside the corrections: `Bt` addresses words, the partner's bytes
/// first (`MXC_BT_REF`); then its form's bytes, scales and residual counts (`MXC_BT_FORM`).
const BT_REF: usize = 4;
const BT_FORM: usize = 8;
/// The driver's TERMS bits: build Wᵀ's form and poison Wᵀ's bytes where it gives them back
/// (`LEFT_OUT`; without it `BT_FORM`'s three words are null: the partner's bytes are whole);
/// pass that form's residual counts as zeros (`COUNTS_ZERO`, a diagnostic).
const LEFT_OUT: usize = 16;
const COUNTS_ZERO: usize = 32;
/// The driver's TERMS bit for the TMA-store epilogue (`MxGemmChainParams::tmO`, `o_tma`).
const TMA_STORE: usize = 64;
/// The driver's TERMS bits for `Case::at_need`.
const AT_NEED: usize = 128;
const AT_NEED_DROP: usize = 256;

const CASES: &[Case] = &[
    Case {
        name: "4 stages, e4m3, f32 out, K 2880, an empty expert, N tail",
        experts: &[40, 0, 200],
        pad: 16,
        n: 144,
        k: 2880,
        fa: E4m3,
        out_bf16: false,
        build: 0,
        grid: 2,
        without: false,
        sparse_b: false,
        form: false,
        tma_store: false,
        at_need: true,
    },
    Case {
        name: "_s3 (B corrections on the tensor cores), e4m3, f32 out, K tail",
        experts: &[257, 30],
        pad: 1,
        n: 128,
        k: 1040,
        fa: E4m3,
        out_bf16: false,
        build: 1,
        grid: 2,
        without: true,
        sparse_b: false,
        form: false,
        tma_store: false,
        at_need: false,
    },
    Case {
        name: "4 stages, e5m2 A (dgrad), bf16 out",
        experts: &[64, 70],
        pad: 10,
        n: 96,
        k: 528,
        fa: E5m2,
        out_bf16: true,
        build: 0,
        grid: 1,
        without: false,
        sparse_b: false,
        form: false,
        tma_store: false,
        at_need: false,
    },
    Case {
        name: "_s3, e4m3, bf16 out",
        experts: &[16, 0, 200],
        pad: 8,
        n: 160,
        k: 400,
        fa: E4m3,
        out_bf16: true,
        build: 1,
        grid: 3,
        without: false,
        sparse_b: false,
        form: false,
        tma_store: false,
        at_need: false,
    },
    Case {
        name: "_s3 with few B residuals per tile at several stages, K tail, an empty expert",
        experts: &[300, 0, 90],
        pad: 10,
        n: 256,
        k: 1040,
        fa: E4m3,
        out_bf16: false,
        build: 1,
        grid: 2,
        without: true,
        sparse_b: true,
        form: false,
        tma_store: false,
        at_need: true,
    },
    Case {
        name: "4 stages, Wᵀ's bytes left out where its form gives them back, K tail",
        experts: &[70, 42, 0],
        pad: 16,
        n: 256,
        k: 272,
        fa: E4m3,
        out_bf16: false,
        build: 0,
        grid: 2,
        without: false,
        sparse_b: false,
        form: true,
        tma_store: false,
        at_need: false,
    },
    Case {
        name: "_s3, Wᵀ's bytes left out where its form gives them back, N tail",
        experts: &[48, 90],
        pad: 6,
        n: 144,
        k: 272,
        fa: E4m3,
        out_bf16: false,
        build: 1,
        grid: 2,
        without: false,
        sparse_b: false,
        form: true,
        tma_store: false,
        at_need: false,
    },
    Case {
        name: "_s3, bf16 out, TMA-store epilogue: full tiles and an expert's partial one, N tail, K tail of 96",
        experts: &[256, 0, 300],
        pad: 4,
        n: 144,
        k: 352,
        fa: E4m3,
        out_bf16: true,
        build: 1,
        grid: 2,
        without: false,
        sparse_b: false,
        form: false,
        tma_store: true,
        at_need: false,
    },
];

struct Operands {
    m: usize,
    kb: usize,
    nb: usize,
    x: Vec<u8>,
    sx: Vec<u8>,
    w: Vec<u8>,
    sw: Vec<u8>,
}

/// X `[m][k]` with 1×32 scales `[m][kb]`: stage scales uniform, except that the first stage's
/// first block is 10 binades above its other three and holds one large element, and those three
/// hold six elements each row (most of them residuals after the shift); W `[e][n][k]` E4M3 with
/// tile scales `[e][nb][kb]`, zero on X's first block, its second stage built as X's first;
/// `form`: expert e's tile row 4 (e mod ⌊N/128⌋) 16 binades up on the first stage (`Case::form`).
fn operands(rng: &mut Rng, c: &Case) -> Operands {
    let e = c.experts.len();
    let m = c.experts.iter().sum::<usize>() + c.pad;
    let (kb, nb) = (c.k.div_ceil(32), c.n.div_ceil(32));
    let mut x = Vec::with_capacity(m * c.k);
    let mut sx = Vec::with_capacity(m * kb);
    for _ in 0..m {
        let mut row = row_bytes(rng, c.fa, Bytes::Few, c.k);
        let mut s = group_scales(rng, 1, kb);
        assert!(c.k >= 256, "the first two stages are whole");
        row[..128].fill(0);
        row[0] = large_byte(rng, c.fa);
        for _ in 0..6 {
            row[32 + rng.below(96)] = finite_byte(rng, c.fa, false);
        }
        s[0] += 10;
        x.extend(row);
        sx.extend(s);
    }
    let mut w = Vec::with_capacity(e * c.n * c.k);
    // sparse_b: stages 1-3 (tile scales raised on each) zero but in columns n % 32 == 5, each
    // built as X's first stage at stage 1 + (n / 32) % 3 (two columns of a tile share one)
    let stages: &[usize] = if c.sparse_b { &[1, 2, 3] } else { &[1] };
    assert!(
        c.k >= 128 * (stages.len() + 1),
        "the structured stages are whole"
    );
    for i in 0..e * c.n {
        let n = i % c.n;
        let mut row = row_bytes(rng, E4m3, Bytes::Few, c.k);
        row[..32].fill(0);
        // the second stage: as X's first, so that W's residuals carry weight too
        row[128..128 * (stages.len() + 1)].fill(0);
        if !c.sparse_b || n % 32 == 5 {
            let st = if c.sparse_b { 1 + (n / 32) % 3 } else { 1 };
            row[128 * st] = large_byte(rng, E4m3);
            for _ in 0..6 {
                row[128 * st + 32 + rng.below(96)] = finite_byte(rng, E4m3, false);
            }
        }
        w.extend(row);
    }
    let sw = (0..e * nb)
        .flat_map(|i| {
            let mut s = group_scales(rng, 1, kb);
            for st in stages {
                s[4 * st] += 10;
            }
            // form: Wᵀ's residuals in one stage of 128 columns per expert, at rows k < 128
            if c.form && i % nb == 4 * (i / nb % (c.n / 128)) {
                s[..4].iter_mut().for_each(|b| *b += 16);
            }
            s
        })
        .collect();
    Operands {
        m,
        kb,
        nb,
        x,
        sx,
        w,
        sw,
    }
}

/// The float64 product of the original MX operands and Σ|terms| per output (0 for padding).
fn reference(o: &Operands, c: &Case) -> (Vec<f64>, Vec<f64>) {
    let (mut out, mut mag) = (vec![0f64; o.m * c.n], vec![0f64; o.m * c.n]);
    let scale = |b: u8| 2f64.powi(b as i32 - 127);
    let mut row = 0;
    for (e, &rows) in c.experts.iter().enumerate() {
        for r in row..row + rows {
            for n in 0..c.n {
                let (mut v, mut a) = (0f64, 0f64);
                for k in 0..c.k {
                    let kb = k / 32;
                    let s =
                        scale(o.sx[r * o.kb + kb]) * scale(o.sw[(e * o.nb + n / 32) * o.kb + kb]);
                    let t = decode(o.x[r * c.k + k], c.fa) as f64
                        * decode(o.w[(e * c.n + n) * c.k + k], E4m3) as f64
                        * s;
                    v += t;
                    a += t.abs();
                }
                out[r * c.n + n] = v;
                mag[r * c.n + n] = a;
            }
        }
        row += rows;
    }
    (out, mag)
}

/// Runs the driver; returns (status flags, residuals listed, output as f64).
/// The cumulative ends of `sizes` as little-endian i32 (the kernels' `offs`).
fn offsets_le(sizes: &[usize]) -> Vec<u8> {
    sizes
        .iter()
        .scan(0i32, |end, &m| {
            *end += m as i32;
            Some(*end)
        })
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

/// `terms`: 3 both corrections, 1 A's only, 0 none (`MxChainFix::terms`), with `BT_REF`,
/// `BT_FORM`, `LEFT_OUT` and `COUNTS_ZERO`. Returns the status words (flags, residuals listed;
/// with `LEFT_OUT` the A_res entries, times their expert's column stages, at left-out
/// row-stages and at ones with residuals) and the output.
fn run(exe: &std::path::Path, o: &Operands, c: &Case, terms: usize) -> (Vec<i32>, Vec<f64>) {
    let e = c.experts.len();
    let header = [
        e,
        o.m,
        c.n,
        c.k,
        (c.fa == E5m2) as usize,
        c.out_bf16 as usize,
        c.build,
        c.grid,
        terms,
    ];
    let offs = offsets_le(c.experts);
    let mut wt = Vec::with_capacity(o.w.len());
    for x in 0..e {
        wt.extend(host::transpose(
            &o.w[x * c.n * c.k..(x + 1) * c.n * c.k],
            c.n,
            c.k,
        ));
    }
    let payload: [&[u8]; 6] = [&offs, &o.x, &o.sx, &o.w, &o.sw, &wt];
    let got = host::run_driver(exe, &header, &payload);
    let words = if terms & LEFT_OUT != 0 { 4 } else { 2 };
    status_and_output(&got, words, c.out_bf16)
}

/// The driver's output: `words` status words (flags, residuals listed, …), the values as f64.
fn status_and_output(got: &[u8], words: usize, out_bf16: bool) -> (Vec<i32>, Vec<f64>) {
    let word = |i: usize| i32::from_le_bytes(got[4 * i..4 * i + 4].try_into().unwrap());
    let body = &got[4 * words..];
    let out = if out_bf16 {
        body.chunks(2)
            .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect()
    } else {
        body.chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect()
    };
    ((0..words).map(word).collect(), out)
}

/// The first output outside the tolerance (`cols` per output row), as a message.
fn first_miss(
    (out_bf16, cols): (bool, usize),
    got: &[f64],
    want: &[f64],
    mag: &[f64],
) -> Option<String> {
    (0..want.len()).find_map(|i| {
        let tol = 1e-5 * mag[i] + if out_bf16 { want[i].abs() / 256.0 } else { 0.0 };
        // (a NaN is outside too)
        let bad = (got[i] - want[i]).abs() > tol || got[i].is_nan();
        bad.then(|| {
            format!(
                "row {}, column {}: chained {}, float64 {} (tolerance {tol:.3e})",
                i / cols,
                i % cols,
                got[i],
                want[i]
            )
        })
    })
}

#[test]
fn chained_forward_matches_float64_and_needs_its_corrections() {
    let Some((exe, mut rng, seed)) = host::setup("chain_gemm_host", "chain_gemm_driver.cpp") else {
        return;
    };
    for c in CASES {
        let o = operands(&mut rng, c);
        let (want, mag) = reference(&o, c);
        let t = std::time::Instant::now();
        let terms = if c.form {
            3 | BT_REF | BT_FORM | LEFT_OUT
        } else {
            3
        } | if c.tma_store { TMA_STORE } else { 0 };
        let (words, got) = run(&exe, &o, c, terms);
        let (flags, listed) = (words[0], words[1]);
        let hits = if c.form {
            format!(
                ", A_res entries x column stages at left-out row-stages {}, at ones with residuals {}",
                words[2], words[3]
            )
        } else {
            String::new()
        };
        eprintln!(
            "  {} ({:.1} s): {listed} residuals{hits}",
            c.name,
            t.elapsed().as_secs_f64()
        );
        assert_eq!(
            flags, 0,
            "{} (seed {seed}): the re-encoding reported status {flags}",
            c.name
        );
        assert!(
            listed as usize >= o.m,
            "{} (seed {seed}): only {listed} residuals",
            c.name
        );
        if let Some(miss) = first_miss((c.out_bf16, c.n), &got, &want, &mag) {
            panic!("{} (seed {seed}): {miss}", c.name);
        }
        if c.form {
            assert!(
                words[2] > 0 && words[3] > 0,
                "{} (seed {seed}): the A residuals meet {} left-out row-stages of Wᵀ and {} with residuals: the case does not test both",
                c.name,
                words[2],
                words[3]
            );
            // the form's words null (annexes filled one at a time), the partner's bytes whole
            let (_, nulls) = run(&exe, &o, c, 3 | BT_REF | BT_FORM);
            if let Some(miss) = first_miss((c.out_bf16, c.n), &nulls, &want, &mag) {
                panic!(
                    "{} (seed {seed}), MXC_BT_FORM without the form: {miss}",
                    c.name
                );
            }
            // the same poisoned bytes read as the partner's everywhere: the form is what saves it
            let (_, no_form) = run(&exe, &o, c, 3 | BT_REF | LEFT_OUT);
            assert!(
                first_miss((c.out_bf16, c.n), &no_form, &want, &mag).is_some(),
                "{} (seed {seed}): within tolerance on the left-out bytes without MXC_BT_FORM: the case does not test it",
                c.name
            );
            // the form read where it has residuals too: the counts are what keeps the partner's bytes there
            let (_, no_counts) = run(&exe, &o, c, 3 | BT_REF | BT_FORM | LEFT_OUT | COUNTS_ZERO);
            assert!(
                first_miss((c.out_bf16, c.n), &no_counts, &want, &mag).is_some(),
                "{} (seed {seed}): within tolerance with the form read at its residuals: the case does not test the counts",
                c.name
            );
        }
        if c.at_need {
            let (_, partial) = run(&exe, &o, c, terms | AT_NEED);
            if let Some(miss) = first_miss((c.out_bf16, c.n), &partial, &want, &mag) {
                panic!(
                    "{} (seed {seed}), at only where W's residuals read it: {miss}",
                    c.name
                );
            }
            let (_, dropped) = run(&exe, &o, c, terms | AT_NEED | AT_NEED_DROP);
            assert!(
                first_miss((c.out_bf16, c.n), &dropped, &want, &mag).is_some(),
                "{} (seed {seed}): within tolerance with the first expert's needed chunks of at poisoned: the case does not test the need map",
                c.name
            );
        }
        if c.sparse_b {
            let (_, a_only) = run(&exe, &o, c, 1);
            assert!(
                first_miss((c.out_bf16, c.n), &a_only, &want, &mag).is_some(),
                "{} (seed {seed}): within tolerance without B's corrections: the case does not test them",
                c.name
            );
        }
        if !c.without {
            continue;
        }
        let (_, without) = run(&exe, &o, c, 0);
        assert!(
            first_miss((c.out_bf16, c.n), &without, &want, &mag).is_some(),
            "{} (seed {seed}): also within tolerance without the corrections: the case does not test them",
            c.name
        );
    }
}

/// Rows of the chained wgrad's operands `[rows][mpad]` with 1×32 scales along mpad: each expert's
/// segment (`lens`, each padded to 128) holds large elements, zeros past its length; in the
/// segment's stage `carry` (if it has one) a block 10 binades above the other three, which hold
/// six elements each row (residuals after the shift); the segment's first block zero when `carry`
/// is not 0 (so that the other operand's large element there meets zeros).
fn wgrad_rows(rng: &mut Rng, lens: &[usize], rows: usize, carry: usize) -> (Vec<u8>, Vec<u8>) {
    let mpad: usize = lens.iter().map(|m| m.next_multiple_of(128)).sum();
    let (mut q, mut s) = (vec![0u8; rows * mpad], Vec::with_capacity(rows * mpad / 32));
    for r in 0..rows {
        let row = &mut q[r * mpad..(r + 1) * mpad];
        let mut sc = group_scales(rng, 1, mpad / 32);
        let mut seg = 0;
        for &m in lens {
            let bytes = row_bytes(rng, E4m3, Bytes::Few, m);
            row[seg..seg + m].copy_from_slice(&bytes);
            let c0 = seg + 128 * carry;
            if c0 + 128 <= seg + m {
                row[c0..c0 + 128].fill(0);
                row[c0] = large_byte(rng, E4m3);
                for _ in 0..6 {
                    row[c0 + 32 + rng.below(96)] = finite_byte(rng, E4m3, false);
                }
                sc[c0 / 32] += 10;
                if carry > 0 {
                    row[seg..seg + 32].fill(0);
                }
            }
            seg += m.next_multiple_of(128);
        }
        s.extend(sc);
    }
    (q, s)
}

/// The chained wgrad (`mx_cgemm_w_*_s3`, `MXHOST_MX_CHAIN_WGRAD=1`: batched K segments, a scale
/// per B column and stage, corrections with B's column scales) on A `[48][mpad]` and B
/// `[80][mpad]`, experts of 300, 0 and 260 rows (residuals of both operands in both non-empty
/// segments, so that each tile takes its own expert's part of a row's list), against float64; without the corrections it
/// must fail.
#[test]
fn chained_wgrad_matches_float64_and_needs_its_corrections() {
    let Some((exe, mut rng, seed)) = host::setup("chain_wgrad_host", "chain_gemm_driver.cpp")
    else {
        return;
    };
    let (lens, pr, qc) = ([300usize, 0, 260], 48usize, 80usize);
    let mpad: usize = lens.iter().map(|m| m.next_multiple_of(128)).sum();
    let (a, sa) = wgrad_rows(&mut rng, &lens, pr, 0);
    let (b, sb) = wgrad_rows(&mut rng, &lens, qc, 1);
    let mp = mpad / 32;
    let e = lens.len();
    let (mut want, mut mag) = (vec![0f64; e * pr * qc], vec![0f64; e * pr * qc]);
    let mut seg = 0;
    for (x, &m) in lens.iter().enumerate() {
        for r in 0..pr {
            for n in 0..qc {
                let (mut v, mut t) = (0f64, 0f64);
                for k in seg..seg + m {
                    let s =
                        2f64.powi(sa[r * mp + k / 32] as i32 + sb[n * mp + k / 32] as i32 - 254);
                    let p = decode(a[r * mpad + k], E4m3) as f64
                        * decode(b[n * mpad + k], E4m3) as f64
                        * s;
                    v += p;
                    t += p.abs();
                }
                want[(x * pr + r) * qc + n] = v;
                mag[(x * pr + r) * qc + n] = t;
            }
        }
        seg += m.next_multiple_of(128);
    }
    let offs = offsets_le(&lens);
    for (out_bf16, terms) in [(false, 3), (true, 3), (false, 0)] {
        let header = [e, pr, qc, mpad, 0, out_bf16 as usize, 2, 2, terms];
        let t = std::time::Instant::now();
        let got = host::run_driver(&exe, &header, &[&offs, &a, &sa, &b, &sb]);
        let (words, got) = status_and_output(&got, 2, out_bf16);
        let (flags, listed) = (words[0], words[1]);
        eprintln!(
            "  wgrad, bf16 out {out_bf16}, corrections {terms} ({:.1} s): {listed} residuals",
            t.elapsed().as_secs_f64()
        );
        assert_eq!(
            flags, 0,
            "wgrad (seed {seed}): the re-encoding reported status {flags}"
        );
        let miss = first_miss((out_bf16, qc), &got, &want, &mag);
        if terms == 3 {
            if let Some(miss) = miss {
                panic!("wgrad, bf16 out {out_bf16} (seed {seed}): {miss}");
            }
        } else {
            assert!(
                miss.is_some(),
                "wgrad (seed {seed}): also within tolerance without the corrections"
            );
        }
    }
}
