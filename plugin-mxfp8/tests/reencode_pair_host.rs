//! The weight's pair kernel `mx_reencode_pair` (`cuda/include/mx_reencode_pair.cuh`), run on the
//! host through `tests/host/simt.hpp` and compared with the CPU reference
//! (`numerics::reencode::reencode_rows`) on fresh random weights.
//!
//! From one read of a weight W `[E][R][C]` in 32×32 tiles the kernel writes both chain forms
//! the chained GEMM reads: W re-encoded along C (forward) and Wᵀ re-encoded along R (dgrad),
//! their stage scale bytes, per row and stage the count of residuals, and, in the `COPIES`
//! build, W transposed and W's own bytes. Every byte of every output is compared (the outputs
//! are poisoned first), for both builds, on shapes whose R and C are not multiples of 128 (nor C
//! of 32); a weight with a NaN/Inf tile must set both copies' non-finite flag.
//!
//! The bf16 build (`mx_quantize_pair_bf16_e4m3`, the default; `MXHOST_MX_CHAIN_QPAIR=0` turns
//! it off) quantizes W itself:
//! its W, Wᵀ and tile scales are compared with `quantize_mx` in 32×32 tiles of W and of Wᵀ
//! (each quantized on its own), its forms with the references of those bytes, in all three
//! scale modes.
//!
//! The NOQ build (`mx_quantize_pair_bf16_noq_e4m3`) stores W's and Wᵀ's own bytes (btt, bt)
//! only in the row-stages their forms cannot give back (a residual, or a non-finite stage
//! scale): every other output must equal the bf16 build's byte for byte, the stored row-stages
//! too, the others must still hold the poison, and `mx_plain_from_form` (`rpe` > 0: a weight in
//! 32×32 tiles) must then write both copies back whole.

use half::bf16;
use mxhost_plugin_abi::{BlockLayout, MxFormat, ScaleMode};
use mxhost_plugin_mxfp8::numerics::reencode::{reencode_rows, StageUniform, STAGE};
use mxhost_plugin_mxfp8::quantize_mx;

mod host;
use host::{group_scales, row_bytes, Bytes, Rng};

const NONFINITE: i32 = 2;

/// W `[e][r][c]` and its tile scales `[e][ceil(r / 32)][ceil(c / 32)]`.
struct Weight {
    e: usize,
    r: usize,
    c: usize,
    q: Vec<u8>,
    s: Vec<u8>,
}

impl Weight {
    fn nb(&self) -> usize {
        self.r.div_ceil(32)
    }
    fn kb(&self) -> usize {
        self.c.div_ceil(32)
    }
    /// W's rows with their 1×32 scales (each tile's, repeated), for the reference.
    fn row_scales(&self) -> Vec<u8> {
        let (nb, kb) = (self.nb(), self.kb());
        (0..self.e * self.r)
            .flat_map(|row| {
                let t = (row / self.r) * nb + (row % self.r) / 32;
                self.s[t * kb..(t + 1) * kb].to_vec()
            })
            .collect()
    }
    /// Wᵀ `[e][c][r]` and its rows' 1×32 scales (the same tiles, transposed).
    fn transposed(&self) -> (Vec<u8>, Vec<u8>) {
        let (e, r, c, nb, kb) = (self.e, self.r, self.c, self.nb(), self.kb());
        let mut qt = vec![0u8; e * c * r];
        let mut st = vec![0u8; e * c * nb];
        for x in 0..e {
            for n in 0..r {
                for k in 0..c {
                    qt[(x * c + k) * r + n] = self.q[(x * r + n) * c + k];
                }
            }
            for k in 0..c {
                for t in 0..nb {
                    st[(x * c + k) * nb + t] = self.s[(x * nb + t) * kb + k / 32];
                }
            }
        }
        (qt, st)
    }
}

fn weight(rng: &mut Rng, (e, r, c): (usize, usize, usize)) -> Weight {
    let (nb, kb) = (r.div_ceil(32), c.div_ceil(32));
    let mut s = Vec::new();
    for _ in 0..e * nb {
        s.extend(group_scales(rng, 4, kb));
    }
    let mut q = Vec::new();
    for _ in 0..e * r {
        let kind = match rng.below(8) {
            0 => Bytes::Zeros,
            1 => Bytes::Any,
            _ => Bytes::Few,
        };
        q.extend(row_bytes(rng, MxFormat::E4m3, kind, c));
    }
    Weight { e, r, c, q, s }
}

/// The kernel's outputs, as the driver wrote them.
struct Pair {
    q2: Vec<u8>,
    s2: Vec<u8>,
    qt2: Vec<u8>,
    st2: Vec<u8>,
    bt: Vec<u8>,
    btt: Vec<u8>,
    mc: Vec<u8>,
    mct: Vec<u8>,
    /// the bf16 build's tile scales of W and Wᵀ
    s: Vec<u8>,
    st: Vec<u8>,
    status: i32,
    status_t: i32,
}

/// Which bf16 build writes W's and Wᵀ's bytes, and what runs after it (pair_driver.cpp's `noq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Noq {
    /// The build that writes both copies whole (`mx_quantize_pair_bf16_e4m3`), and the byte
    /// builds.
    Writes = 0,
    /// The NOQ build (`mx_quantize_pair_bf16_noq_e4m3`) alone.
    Omits = 1,
    /// The NOQ build, then `mx_plain_from_form` on W (btt) and on Wᵀ (bt).
    ThenPlainFromForm = 2,
}

/// The kernel on `w` (its bytes and scales), or with `src` on W in bf16 (the bf16 build; `w`
/// gives only the dimensions) in scale mode `src.1`.
fn run_kernel(
    exe: &std::path::Path,
    w: &Weight,
    copies: bool,
    src: Option<(&[bf16], usize)>,
) -> Pair {
    run_kernel_noq(exe, w, copies, src, Noq::Writes)
}

/// `run_kernel`, with the bf16 build `noq` says (`Noq::Writes` for the byte builds).
fn run_kernel_noq(
    exe: &std::path::Path,
    w: &Weight,
    copies: bool,
    src: Option<(&[bf16], usize)>,
    noq: Noq,
) -> Pair {
    let mode = src.map_or(0, |s| s.1);
    let header = [
        w.e,
        w.r,
        w.c,
        copies as usize,
        src.is_some() as usize,
        mode,
        noq as usize,
    ];
    let x: Vec<u8> = src.map_or(Vec::new(), |(x, _)| {
        x.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect()
    });
    let o = match src {
        Some(_) => host::run_driver(exe, &header, &[&x]),
        None => host::run_driver(exe, &header, &[&w.q, &w.s]),
    };
    let (n, tiles) = (w.e * w.r * w.c, w.e * w.nb() * w.kb());
    let copy = if copies { n } else { 0 };
    let own = if src.is_some() { tiles } else { 0 };
    let sizes = [
        n,
        tiles,
        n,
        tiles,
        copy,
        copy,
        w.c.div_ceil(STAGE) * w.e * w.r,
        w.r.div_ceil(STAGE) * w.e * w.c,
        own,
        own,
    ];
    let mut at = 0;
    let mut parts = sizes.iter().map(|&len| {
        at += len;
        o[at - len..at].to_vec()
    });
    let mut next = || parts.next().unwrap();
    let (q2, s2, qt2, st2, bt, btt, mc, mct) = (
        next(),
        next(),
        next(),
        next(),
        next(),
        next(),
        next(),
        next(),
    );
    let (s, st) = (next(), next());
    let word = |i: usize| i32::from_le_bytes(o[at + 4 * i..at + 4 * i + 4].try_into().unwrap());
    assert_eq!(o.len(), at + 16, "output size");
    Pair {
        q2,
        s2,
        qt2,
        st2,
        bt,
        btt,
        mc,
        mct,
        s,
        st,
        status: word(0),
        status_t: word(2),
    }
}

/// One form against its reference: bytes, stage scale bytes per tile
/// `[e][ceil(rows / 32)][kb]`, and residual counts `mc[stage * e rows + row]`.
fn check_form(
    what: &str,
    (q2, s2, mc): (&[u8], &[u8], &[u8]),
    want: &StageUniform,
    (e, rows, k): (usize, usize, usize),
) {
    let kb = k.div_ceil(32);
    let tiles = rows.div_ceil(32);
    host::first_difference(what, q2, &want.bytes, k);
    for x in 0..e {
        for t in 0..tiles {
            let row = x * rows + 32 * t; // the tile's first row
            for b in 0..kb {
                let (got, w) = (s2[(x * tiles + t) * kb + b], want.scales[row * kb + b]);
                assert_eq!(got, w, "{what}: stage scale of tile ({x}, {t}, {b})");
            }
        }
    }
    let rows = e * rows;
    let mut counts = vec![0u8; k.div_ceil(STAGE) * rows];
    for r in &want.residuals {
        counts[(r.k / STAGE) * rows + r.row] += 1;
    }
    if let Some(i) = (0..counts.len()).find(|&i| mc[i] != counts[i]) {
        panic!(
            "{what}: residuals of row {} in stage {}: kernel {}, reference {}",
            i % rows,
            i / rows,
            mc[i],
            counts[i]
        );
    }
}

/// Both forms of a run against their references (W's, then Wᵀ's), and clean status words.
fn check_forms(
    ctx: &str,
    got: &Pair,
    (fwd, bwd): (&StageUniform, &StageUniform),
    (e, r, c): (usize, usize, usize),
) {
    let w = (&got.q2[..], &got.s2[..], &got.mc[..]);
    check_form(&format!("{ctx}: W's form"), w, fwd, (e, r, c));
    let wt = (&got.qt2[..], &got.st2[..], &got.mct[..]);
    check_form(&format!("{ctx}: Wᵀ's form"), wt, bwd, (e, c, r));
    assert_eq!((got.status, got.status_t), (0, 0), "{ctx}: status words");
}

#[test]
fn both_chain_forms_equal_the_cpu_reference() {
    let Some((exe, mut rng, seed)) = host::setup("reencode_pair_host", "pair_driver.cpp") else {
        return;
    };
    let mut residuals = 0;
    for dims in [(2, 160, 2880), (3, 96, 208)] {
        let w = weight(&mut rng, dims);
        let (e, r, c) = dims;
        let fwd = reencode_rows(&w.q, &w.row_scales(), e * r, c, MxFormat::E4m3).unwrap();
        let (qt, st_rows) = w.transposed();
        let bwd = reencode_rows(&qt, &st_rows, e * c, r, MxFormat::E4m3).unwrap();
        residuals += fwd.residuals.len() + bwd.residuals.len();
        for copies in [false, true] {
            let got = run_kernel(&exe, &w, copies, None);
            let ctx = format!("W {dims:?}, copies {copies}, seed {seed}");
            check_forms(&ctx, &got, (&fwd, &bwd), dims);
            if copies {
                assert!(got.bt == qt, "{ctx}: W transposed");
                assert!(got.btt == w.q, "{ctx}: W's own bytes");
            }
        }
    }
    assert!(
        residuals > 100,
        "seed {seed}: only {residuals} residuals, too few to test"
    );
    // a NaN/Inf tile (scale byte 0xFF, bytes 0x7F): no stage-uniform form for either copy
    let mut w = weight(&mut rng, (1, 64, 256));
    let kb = w.kb();
    w.s[kb + 5] = 0xFF;
    for n in 32..64 {
        w.q[n * 256 + 160..n * 256 + 192].fill(0x7F);
    }
    let got = run_kernel(&exe, &w, false, None);
    assert!(
        got.status & NONFINITE != 0 && got.status_t & NONFINITE != 0,
        "a NaN tile: status {} / {}",
        got.status,
        got.status_t
    );
}

/// W `[e][r][c]` in bf16 whose 32×32 tiles span several binades, with zero tiles and tiny
/// elements (residuals in both forms).
fn bf16_weight(rng: &mut Rng, (e, r, c): (usize, usize, usize)) -> Vec<bf16> {
    let (nb, kb) = (r.div_ceil(32), c.div_ceil(32));
    let tile_mag: Vec<f64> = (0..e * nb * kb)
        .map(|_| match rng.below(12) {
            0 => 0.0,
            _ => 2f64.powi(rng.below(9) as i32 - 4),
        })
        .collect();
    (0..e * r * c)
        .map(|i| {
            let (x, n, k) = (i / (r * c), (i / c) % r, i % c);
            let mag = tile_mag[(x * nb + n / 32) * kb + k / 32];
            let tiny = if rng.below(40) == 0 { 3e-4 } else { 1.0 };
            bf16::from_f64(rng.normal() * mag * tiny)
        })
        .collect()
}

#[test]
fn the_bf16_build_equals_the_tile_quantizer_and_both_forms() {
    let Some((exe, mut rng, seed)) = host::setup("reencode_pair_host_bf16", "pair_driver.cpp")
    else {
        return;
    };
    let modes = [ScaleMode::Rceil, ScaleMode::Floor, ScaleMode::Even];
    let mut residuals = 0;
    for (i, dims) in [(2, 160, 2880), (3, 96, 208), (1, 48, 128)]
        .into_iter()
        .enumerate()
    {
        let (e, r, c) = dims;
        let x = bf16_weight(&mut rng, dims);
        let mode = i % 3;
        let ctx = format!("W {dims:?} {:?}, seed {seed}", modes[mode]);
        // the references: W and Wᵀ each quantized in 32×32 tiles on the CPU
        let (nb, kb) = (r.div_ceil(32), c.div_ceil(32));
        let (mut q, mut s) = (vec![0u8; e * r * c], vec![0u8; e * nb * kb]);
        let tile = BlockLayout::tile();
        let shape = [e as u64, r as u64, c as u64];
        quantize_mx(
            &x,
            &shape,
            tile,
            MxFormat::E4m3,
            modes[mode],
            &mut q,
            &mut s,
        )
        .unwrap();
        let mut xt = vec![bf16::ZERO; x.len()];
        for (j, v) in x.iter().enumerate() {
            let (b, n, k) = (j / (r * c), (j / c) % r, j % c);
            xt[(b * c + k) * r + n] = *v;
        }
        let (mut qt, mut st) = (vec![0u8; x.len()], vec![0u8; s.len()]);
        let shape_t = [e as u64, c as u64, r as u64];
        quantize_mx(
            &xt,
            &shape_t,
            tile,
            MxFormat::E4m3,
            modes[mode],
            &mut qt,
            &mut st,
        )
        .unwrap();
        let w = Weight { e, r, c, q, s };
        let got = run_kernel(&exe, &w, true, Some((&x, mode)));
        assert!(got.btt == w.q, "{ctx}: W's bytes");
        assert!(got.s == w.s, "{ctx}: W's tile scales");
        assert!(got.bt == qt, "{ctx}: Wᵀ's bytes");
        assert!(got.st == st, "{ctx}: Wᵀ's tile scales");
        let fwd = reencode_rows(&w.q, &w.row_scales(), e * r, c, MxFormat::E4m3).unwrap();
        let (wt, st_rows) = w.transposed();
        let bwd = reencode_rows(&wt, &st_rows, e * c, r, MxFormat::E4m3).unwrap();
        residuals += fwd.residuals.len() + bwd.residuals.len();
        check_forms(&ctx, &got, (&fwd, &bwd), dims);
    }
    assert!(
        residuals > 100,
        "seed {seed}: only {residuals} residuals, too few to test"
    );
    // an Inf in W: its tile gets scale byte 0xFF and bytes 0x7F, both copies' flag is set
    let (r, c) = (64, 256);
    let mut x = bf16_weight(&mut rng, (1, r, c));
    x[40 * c + 170] = bf16::NEG_INFINITY;
    let w = Weight {
        e: 1,
        r,
        c,
        q: Vec::new(),
        s: Vec::new(),
    };
    let got = run_kernel(&exe, &w, true, Some((&x, 0)));
    assert!(
        got.status & NONFINITE != 0 && got.status_t & NONFINITE != 0,
        "an Inf: status {} / {}",
        got.status,
        got.status_t
    );
    assert_eq!(got.s[c / 32 + 5], 0xFF, "the Inf's tile scale");
    assert!(
        (32..64).all(|n| got.btt[n * c + 160..n * c + 192].iter().all(|&b| b == 0x7F)),
        "the Inf's tile bytes"
    );
}

/// The poison pair_driver.cpp fills every output with before the launch.
const POISON: u8 = 0xA5;

/// Every output of `got` but W's and Wᵀ's own bytes (btt, bt) equals `plain`'s byte for byte:
/// both forms, their stage scales and residual counts, the tile scales, the status words.
fn same_but_the_copies(ctx: &str, got: &Pair, plain: &Pair, (e, r, c): (usize, usize, usize)) {
    let outputs = [
        ("q2", &got.q2, &plain.q2, c),
        ("s2", &got.s2, &plain.s2, c.div_ceil(32)),
        ("qt2", &got.qt2, &plain.qt2, r),
        ("st2", &got.st2, &plain.st2, r.div_ceil(32)),
        ("mc", &got.mc, &plain.mc, e * r),
        ("mct", &got.mct, &plain.mct, e * c),
        ("s", &got.s, &plain.s, c.div_ceil(32)),
        ("st", &got.st, &plain.st, r.div_ceil(32)),
    ];
    for (name, g, p, width) in outputs {
        host::first_difference(&format!("{ctx}: {name}"), g, p, width);
    }
    assert_eq!(
        (got.status, got.status_t),
        (plain.status, plain.status_t),
        "{ctx}: status words"
    );
}

/// How one copy's row-stages (a row's 128 bytes of one stage) went in the NOQ build.
#[derive(Default)]
struct RowStages {
    /// stored: a residual in the row-stage, or a non-finite stage scale
    stored: usize,
    /// of those, stored for the non-finite stage scale alone (no residual)
    non_finite_only: usize,
    /// left out (the form gives them back)
    left_out: usize,
}

/// One copy's own bytes from the NOQ build (`omits`, `[e][rows][k]`) against the bf16 build's
/// (`plain`): the plain bytes in the row-stages with a residual (`mc[stage * e rows + row]`) or
/// a non-finite stage scale (`s2[e][ceil(rows / 32)][k / 32]` = 0xFF), the poison everywhere
/// else. `mc` and `s2` are the plain build's.
fn check_left_out(
    what: &str,
    (omits, plain): (&[u8], &[u8]),
    (s2, mc): (&[u8], &[u8]),
    (e, rows, k): (usize, usize, usize),
) -> RowStages {
    let (kb, tiles) = (k.div_ceil(32), rows.div_ceil(32));
    let mut seen = RowStages::default();
    for x in 0..e {
        for n in 0..rows {
            let row = x * rows + n;
            for stage in 0..k.div_ceil(STAGE) {
                let cols = stage * STAGE..k.min((stage + 1) * STAGE);
                let residuals = mc[stage * e * rows + row];
                let scale = |col: usize| s2[(x * tiles + n / 32) * kb + col / 32];
                let non_finite = cols.clone().step_by(32).any(|col| scale(col) == 0xFF);
                let stored = residuals != 0 || non_finite;
                if !stored {
                    seen.left_out += 1;
                } else {
                    seen.stored += 1;
                    seen.non_finite_only += (residuals == 0) as usize;
                }
                for col in cols {
                    let (got, want) = (omits[row * k + col], plain[row * k + col]);
                    if stored {
                        assert_eq!(
                            got,
                            want,
                            "{what}: byte ({x}, {n}, {col}) of a row-stage the form cannot give \
                             back ({residuals} residuals, stage scale {:#04x})",
                            scale(col)
                        );
                    } else {
                        assert_eq!(
                            got, POISON,
                            "{what}: byte ({x}, {n}, {col}) was written (the form gives it back)"
                        );
                    }
                }
            }
        }
    }
    seen
}

/// The NOQ build (`mx_reencode_pair<FMT, true, 1, 1>`, `mx_quantize_pair_bf16_noq_e4m3`) leaves
/// out of W's bytes (btt) and Wᵀ's (bt) exactly the row-stages their forms give back, and writes
/// every other output as the bf16 build does; `mx_plain_from_form` with `rpe` (W: `rpe` = R,
/// Wᵀ: `rpe` = C, scales in the tile layout) then writes both copies back equal byte for byte to
/// the bf16 build's. The chained GEMM and the per-k32 kernels read those bytes, so a byte left
/// out that the form cannot give back, or one written back wrong, is a wrong product.
/// On several experts, R and C multiples of 32 but not of 128, all three scale modes, stages
/// with and without residuals, an Inf in a random weight, and an expert of zeros but for an Inf
/// tile and a NaN: row-stages stored for their non-finite stage scale alone.
#[test]
fn the_noq_pair_build_leaves_out_only_bytes_the_forms_give_back() {
    let Some((exe, mut rng, seed)) = host::setup("reencode_pair_host_noq", "pair_driver.cpp")
    else {
        return;
    };
    let modes = [ScaleMode::Rceil, ScaleMode::Floor, ScaleMode::Even];
    let (mut w_seen, mut wt_seen) = (RowStages::default(), RowStages::default());
    let shapes = [
        (2, 160, 2880),
        (3, 96, 224),
        (4, 32, 416),
        (2, 288, 96),
        (2, 64, 256),
    ];
    for (i, dims) in shapes.into_iter().enumerate() {
        let (e, r, c) = dims;
        let mut x = bf16_weight(&mut rng, dims);
        match i {
            // an Inf in a random weight: its tile's row-stages are stored whatever they hold
            1 => x[(r + 40) * c + 170] = bf16::INFINITY,
            // expert 0 zeros but for tile (1, 5), with an Inf; a NaN in expert 1: W's row-stages
            // of rows 32..63, stage 1, and Wᵀ's of rows 160..191, stage 0, hold no residual
            // (zeros, and the tile's own NaN bytes, shift by nothing), only the 0xFF scale
            4 => {
                for n in 0..r {
                    for k in 0..c {
                        if !(32..64).contains(&n) || !(160..192).contains(&k) {
                            x[n * c + k] = bf16::ZERO;
                        }
                    }
                }
                x[50 * c + 181] = bf16::NEG_INFINITY;
                x[(r + 7) * c + 70] = bf16::NAN;
            }
            _ => {}
        }
        let mode = i % 3;
        let ctx = format!("W {dims:?} {:?}, seed {seed}", modes[mode]);
        let w = Weight {
            e,
            r,
            c,
            q: Vec::new(),
            s: Vec::new(),
        };
        let src = Some((&x[..], mode));
        let plain = run_kernel_noq(&exe, &w, true, src, Noq::Writes);
        let omits = run_kernel_noq(&exe, &w, true, src, Noq::Omits);
        let vs = format!("{ctx} (NOQ against the bf16 build)");
        same_but_the_copies(&vs, &omits, &plain, dims);
        if i == 1 || i == 4 {
            assert!(
                plain.status & NONFINITE != 0 && plain.status_t & NONFINITE != 0,
                "{ctx}: the Inf sets no flag"
            );
        }
        let w_here = check_left_out(
            &format!("{vs}: W's bytes (btt)"),
            (&omits.btt, &plain.btt),
            (&plain.s2, &plain.mc),
            (e, r, c),
        );
        let wt_here = check_left_out(
            &format!("{vs}: Wᵀ's bytes (bt)"),
            (&omits.bt, &plain.bt),
            (&plain.st2, &plain.mct),
            (e, c, r),
        );
        if i == 4 {
            // the Inf tile's 32 rows in W, its 32 columns in Wᵀ (at least: the NaN adds more)
            assert!(
                w_here.non_finite_only >= 32 && wt_here.non_finite_only >= 32,
                "{ctx}: row-stages stored for their non-finite scale alone: W {}, Wᵀ {}",
                w_here.non_finite_only,
                wt_here.non_finite_only
            );
        }
        for (all, here) in [(&mut w_seen, w_here), (&mut wt_seen, wt_here)] {
            all.stored += here.stored;
            all.non_finite_only += here.non_finite_only;
            all.left_out += here.left_out;
        }
        let back = run_kernel_noq(&exe, &w, true, src, Noq::ThenPlainFromForm);
        let wb = format!("{ctx} (NOQ, then mx_plain_from_form)");
        same_but_the_copies(&wb, &back, &plain, dims);
        host::first_difference(&format!("{wb}: W's bytes (btt)"), &back.btt, &plain.btt, c);
        host::first_difference(&format!("{wb}: Wᵀ's bytes (bt)"), &back.bt, &plain.bt, r);
    }
    for (copy, seen) in [("W", &w_seen), ("Wᵀ", &wt_seen)] {
        assert!(
            seen.stored - seen.non_finite_only > 100 && seen.left_out > 100,
            "seed {seed}: {copy}'s row-stages: {} with residuals, {} left out: too few of either \
             to test",
            seen.stored - seen.non_finite_only,
            seen.left_out
        );
    }
}
