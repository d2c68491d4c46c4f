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

/// The kernel on `w` (its bytes and scales), or with `src` on W in bf16 (the bf16 build; `w`
/// gives only the dimensions) in scale mode `src.1`.
fn run_kernel(
    exe: &std::path::Path,
    w: &Weight,
    copies: bool,
    src: Option<(&[bf16], usize)>,
) -> Pair {
    let mode = src.map_or(0, |s| s.1);
    let header = [w.e, w.r, w.c, copies as usize, src.is_some() as usize, mode];
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
