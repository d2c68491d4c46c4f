//! The TMA grouped GEMM kernels (`mx_tgemm_*`, `cuda/include/mx_tgemm_*.cuh`: the backend's
//! forward and dgrad on Hopper) run on the host through `tests/host/simt.hpp` and
//! `simt_sm90.hpp` (mbarriers, TMA, bulk copies and wgmma emulated), compared bit for bit with a
//! model of their arithmetic on fresh random MX operands.
//!
//! The model: an output element sums its K blocks in order, each block's exact dot product
//! rounded once to f32 (the emulated wgmma's partial) times the f32 product of the two block
//! scales, one fused multiply-add per block (the kernels' promotion); bf16 output rounds that
//! to nearest even. For the bits to match, everything the kernel does around the tensor core
//! must be right: TMA boxes and their 128-byte swizzle, the wgmma descriptors and fragment
//! layout, the stage ring and its mbarrier phases across tiles, the persistent tile sequence
//! over experts (empty ones, rows not a multiple of 128), K and N tails, the scale tables, the
//! promotion order, both epilogues (registers and TMA store) and the zeroed padding rows.
//! On a GPU the tensor core's own partial rounding enters; `mxhost selftest --device cuda`
//! checks that against the CPU reference with its tolerance.

use half::bf16;
use mxhost_plugin_abi::MxFormat;
use mxhost_plugin_mxfp8::numerics::element::decode;

mod host;
use host::{finite_byte, Rng};

/// Which kernel the driver launches (tgemm_driver.cpp), as the backend picks them (kernels.rs).
#[derive(Clone, Copy, Debug)]
enum Kernel {
    /// `MXT_INST` MODE 0: 1×32 weight scales.
    Mode0,
    /// `v2u`: 32×32 weight scales, f32 output.
    V2u,
    /// `v2t`: 32×32 weight scales, bf16 output, TMA-store epilogue for full tiles.
    V2t,
    /// `mx_gemm_*` (cp.async, no swizzle: the fallback where TMA is unavailable), 32×32 weights.
    GemmW2d,
    /// `mx_gemm_*` with 1×32 weight scales.
    GemmW1d,
}

impl Kernel {
    /// The driver's KERNEL code.
    fn code(self) -> usize {
        match self {
            Kernel::Mode0 => 0,
            Kernel::V2u => 1,
            Kernel::V2t => 2,
            Kernel::GemmW2d | Kernel::GemmW1d => 3,
        }
    }
    /// Whether the weight has 32×32 scales (else one per column: 1×32 along K).
    fn w2d(self) -> bool {
        !matches!(self, Kernel::Mode0 | Kernel::GemmW1d)
    }
}

use MxFormat::{E4m3, E5m2};

struct Case {
    name: &'static str,
    /// Rows per expert; `pad` more rows follow the last expert (the kernel zeroes them).
    experts: &'static [usize],
    pad: usize,
    n: usize,
    k: usize,
    fa: MxFormat,
    fb: MxFormat,
    kernel: Kernel,
    out_bf16: bool,
    /// Persistent CTAs (the backend launches one per SM; a few here make each walk many tiles).
    grid: usize,
    /// The TMA-store epilogue's output map (v2t); without it every tile takes the register one.
    o_tma: bool,
    /// Batched K segments (the FP8 wgrad): `experts` are the segments' lengths (K per expert),
    /// this many GEMM rows (0: grouped rows), output transposed or not.
    wgrad_rows: usize,
    out_t: bool,
}

const BASE: Case = Case {
    name: "",
    experts: &[],
    pad: 0,
    n: 0,
    k: 0,
    fa: E4m3,
    fb: E4m3,
    kernel: Kernel::V2t,
    out_bf16: true,
    grid: 2,
    o_tma: false,
    wgrad_rows: 0,
    out_t: false,
};

const CASES: &[Case] = &[
    Case {
        name: "v2t e4m3 x e4m3, bf16 out, TMA store, empty and unaligned experts, K tail",
        experts: &[130, 0, 257, 64, 0],
        pad: 7,
        n: 200,
        k: 304,
        fa: E4m3,
        fb: E4m3,
        kernel: Kernel::V2t,
        out_bf16: true,
        grid: 3,
        o_tma: true,
        ..BASE
    },
    Case {
        name: "v2t e5m2 x e4m3 (dgrad), register epilogue, one CTA",
        experts: &[128, 3],
        pad: 0,
        n: 136,
        k: 272,
        fa: E5m2,
        fb: E4m3,
        kernel: Kernel::V2t,
        out_bf16: true,
        grid: 1,
        o_tma: false,
        ..BASE
    },
    Case {
        name: "v2u e4m3 x e4m3, f32 out, K 2880 (23 stages, ring wraps within a tile)",
        experts: &[40, 150],
        pad: 2,
        n: 136,
        k: 2880,
        fa: E4m3,
        fb: E4m3,
        kernel: Kernel::V2u,
        out_bf16: false,
        grid: 2,
        o_tma: false,
        ..BASE
    },
    Case {
        name: "v2u e5m2 x e5m2, f32 out",
        experts: &[0, 77, 129],
        pad: 0,
        n: 64,
        k: 160,
        fa: E5m2,
        fb: E5m2,
        kernel: Kernel::V2u,
        out_bf16: false,
        grid: 2,
        o_tma: false,
        ..BASE
    },
    Case {
        name: "MODE 0 e4m3 x e4m3, 1x32 weights, bf16 out",
        experts: &[1, 129, 0],
        pad: 5,
        n: 72,
        k: 96,
        fa: E4m3,
        fb: E4m3,
        kernel: Kernel::Mode0,
        out_bf16: true,
        grid: 2,
        o_tma: false,
        ..BASE
    },
    Case {
        name: "MODE 0 e4m3 x e4m3, 1x32 weights, f32 out, K 400",
        experts: &[200],
        pad: 0,
        n: 130,
        k: 400,
        fa: E4m3,
        fb: E4m3,
        kernel: Kernel::Mode0,
        out_bf16: false,
        grid: 3,
        o_tma: false,
        ..BASE
    },
    Case {
        name: "MODE 0 e5m2 x e4m3, 1x32 weights, bf16 out",
        experts: &[33, 0, 96],
        pad: 1,
        n: 128,
        k: 128,
        fa: E5m2,
        fb: E4m3,
        kernel: Kernel::Mode0,
        out_bf16: true,
        grid: 2,
        o_tma: false,
        ..BASE
    },
    Case {
        name: "mx_gemm (cp.async) e4m3 x e4m3, 32x32 weights, bf16 out",
        experts: &[130, 0, 64],
        pad: 3,
        n: 136,
        k: 304,
        kernel: Kernel::GemmW2d,
        ..BASE
    },
    Case {
        name: "mx_gemm (cp.async) e4m3 x e4m3, 1x32 weights, bf16 out, one CTA",
        experts: &[50, 129],
        n: 72,
        k: 160,
        kernel: Kernel::GemmW1d,
        grid: 1,
        ..BASE
    },
    Case {
        name: "mx_gemm (cp.async) e5m2 x e5m2, 1x32 weights, f32 out",
        experts: &[0, 77],
        n: 128,
        k: 96,
        fa: E5m2,
        fb: E5m2,
        kernel: Kernel::GemmW1d,
        out_bf16: false,
        ..BASE
    },
    Case {
        name: "wgrad (batched K segments) e5m2 x e4m3, 1x32 along M, bf16 out",
        experts: &[300, 0, 64, 129],
        n: 136,
        fa: E5m2,
        kernel: Kernel::Mode0,
        wgrad_rows: 72,
        ..BASE
    },
    Case {
        name: "wgrad (batched K segments) e4m3 x e4m3, f32 out, transposed store",
        experts: &[31, 200],
        n: 200,
        kernel: Kernel::Mode0,
        out_bf16: false,
        grid: 3,
        wgrad_rows: 130,
        out_t: true,
        ..BASE
    },
];

/// A block scale byte: mostly within 2^±7, now and then the same for a whole row.
fn scale_byte(rng: &mut Rng) -> u8 {
    120 + rng.below(15) as u8
}

fn scale_value(b: u8) -> f32 {
    2f32.powi(b as i32 - 127)
}

/// An element byte: any finite one, a zero block now and then (set by the caller), -0 too.
fn element(rng: &mut Rng, f: MxFormat) -> u8 {
    match rng.below(40) {
        0 => 0x80,
        1 => 0,
        _ => {
            let small = rng.below(8) == 0;
            finite_byte(rng, f, small)
        }
    }
}

struct Operands {
    /// GEMM rows (grouped: the experts' rows and the padding; batched: `wgrad_rows`).
    m: usize,
    e: usize,
    /// K blocks of a row (batched: of the experts' 128-padded segments side by side).
    kb: usize,
    lda: usize,
    offs: Vec<i32>,
    /// Batched: where each expert's segment starts in K (multiples of 128), and the end.
    seg: Vec<usize>,
    a: Vec<u8>,
    /// Grouped: `[e][n][lda]`; batched: `[n][lda]`.
    b: Vec<u8>,
    /// Scale bytes: A `[m][kb]`, B `[e][kb][nb]` (32×32) or `[e][kb][n]` (1×32; batched e = 1).
    sa: Vec<u8>,
    sb: Vec<u8>,
    sb_cols: usize,
}

/// `count` rows of `lda` bytes: element blocks (now and then all zero) where `real(k)`, zeros
/// elsewhere below `k_end`, stride bytes (never read) from `k_end` on.
fn rows(
    rng: &mut Rng,
    f: MxFormat,
    (count, lda, k_end): (usize, usize, usize),
    real: &dyn Fn(usize) -> bool,
) -> Vec<u8> {
    let mut v = vec![0u8; count * lda];
    for r in 0..count {
        for blk in 0..k_end.div_ceil(32) {
            let zero_block = rng.below(16) == 0;
            for k in blk * 32..(blk * 32 + 32).min(k_end) {
                if real(k) && !zero_block {
                    v[r * lda + k] = element(rng, f);
                }
            }
        }
        for k in k_end..lda {
            v[r * lda + k] = rng.below(256) as u8;
        }
    }
    v
}

fn operands(rng: &mut Rng, c: &Case) -> Operands {
    let e = c.experts.len();
    let mut offs = Vec::new();
    let mut seg = vec![0];
    let mut end = 0;
    for &r in c.experts {
        end += r;
        offs.push(end as i32);
        seg.push(seg.last().unwrap() + r.next_multiple_of(128));
    }
    let w2d = c.kernel.w2d();
    let sb_cols = if w2d { c.n.div_ceil(32) } else { c.n };
    let (m, kb, lda, b_rows, sb_tables) = if c.wgrad_rows > 0 {
        // the experts' segments, each zero padded to a multiple of 128 (wgrad.rs)
        (c.wgrad_rows, seg[e] / 32, seg[e], c.n, 1)
    } else {
        let m = c.experts.iter().sum::<usize>() + c.pad;
        (m, c.k.div_ceil(32), c.k.next_multiple_of(16), e * c.n, e)
    };
    let (k_end, real): (usize, Box<dyn Fn(usize) -> bool>) = if c.wgrad_rows > 0 {
        let (seg, lens) = (seg.clone(), c.experts);
        let real = move |k: usize| (0..lens.len()).any(|x| k >= seg[x] && k < seg[x] + lens[x]);
        (lda, Box::new(real))
    } else {
        (c.k, Box::new(|_| true))
    };
    Operands {
        m,
        e,
        kb,
        lda,
        offs,
        a: rows(rng, c.fa, (m, lda, k_end), &real),
        b: rows(rng, c.fb, (b_rows, lda, k_end), &real),
        sa: (0..m * kb).map(|_| scale_byte(rng)).collect(),
        sb: (0..sb_tables * kb * sb_cols)
            .map(|_| scale_byte(rng))
            .collect(),
        seg,
        sb_cols,
    }
}

/// The f32 tables the kernels read (as `mx_scales_to_f32(_stages)` writes them, zero padded):
/// SA stage-major `[kb4 / 4][ldsa = 4 m]` (row-major within a stage: row × 4 + kb % 4), SB
/// `[e][kb4][ldsb]` (batched: `[kb4][ldsb]`) with ldsb = 4 ⌈n / 128⌉ column blocks (32×32) or
/// 128 ⌈n / 128⌉ columns.
fn tables(o: &Operands, c: &Case) -> (Vec<f32>, Vec<f32>, usize, usize) {
    let kb4 = o.kb.next_multiple_of(4);
    let ldsa = 4 * o.m;
    let mut sa = vec![0f32; kb4 / 4 * ldsa];
    for r in 0..o.m {
        for kb in 0..o.kb {
            sa[kb / 4 * ldsa + r * 4 + kb % 4] = scale_value(o.sa[r * o.kb + kb]);
        }
    }
    let w2d = c.kernel.w2d();
    let ldsb = c.n.div_ceil(128) * if w2d { 4 } else { 128 };
    let sb_tables = o.sb.len() / (o.kb * o.sb_cols);
    let mut sb = vec![0f32; sb_tables * kb4 * ldsb];
    for x in 0..sb_tables {
        for kb in 0..o.kb {
            for col in 0..o.sb_cols {
                sb[(x * kb4 + kb) * ldsb + col] =
                    scale_value(o.sb[(x * o.kb + kb) * o.sb_cols + col]);
            }
        }
    }
    (sa, sb, ldsa, ldsb)
}

/// One output element of the model (module docs): A's row `r` against B's row `brow` (its
/// first byte), B's scale table `x` and column `n`, over the K blocks `blocks`.
fn model_element(
    o: &Operands,
    c: &Case,
    (r, brow, x, n): (usize, usize, usize, usize),
    blocks: std::ops::Range<usize>,
) -> f32 {
    let w2d = c.kernel.w2d();
    let sbcol = if w2d { n / 32 } else { n };
    let mut acc = 0f32;
    for kb in blocks {
        let mut dot = 0f64;
        for k in kb * 32..(kb * 32 + 32).min(o.lda) {
            dot += decode(o.a[r * o.lda + k], c.fa) as f64 * decode(o.b[brow + k], c.fb) as f64;
        }
        let s = scale_value(o.sa[r * o.kb + kb])
            * scale_value(o.sb[(x * o.kb + kb) * o.sb_cols + sbcol]);
        acc = (dot as f32).mul_add(s, acc);
    }
    acc
}

/// The model's output in the kernel's output layout (0 for padding rows).
fn model(o: &Operands, c: &Case) -> Vec<f32> {
    if c.wgrad_rows > 0 {
        let mut out = vec![0f32; o.e * o.m * c.n];
        for x in 0..o.e {
            let blocks = o.seg[x] / 32..o.seg[x + 1] / 32;
            for r in 0..o.m {
                for n in 0..c.n {
                    let i = if c.out_t { n * o.m + r } else { r * c.n + n };
                    out[x * o.m * c.n + i] =
                        model_element(o, c, (r, n * o.lda, 0, n), blocks.clone());
                }
            }
        }
        return out;
    }
    let mut out = vec![0f32; o.m * c.n];
    let mut row = 0;
    for (x, &rows) in c.experts.iter().enumerate() {
        for r in row..row + rows {
            for n in 0..c.n {
                let brow = (x * c.n + n) * o.lda;
                out[r * c.n + n] = model_element(o, c, (r, brow, x, n), 0..o.kb);
            }
        }
        row += rows;
    }
    out
}

fn run_case(exe: &std::path::Path, rng: &mut Rng, seed: u64, c: &Case) {
    let o = operands(rng, c);
    let (sa, sb, ldsa, ldsb) = tables(&o, c);
    let fmt = |f: MxFormat| (f == E5m2) as usize;
    let w2d = c.kernel.w2d();
    let kernel = c.kernel.code();
    let header = [
        o.e,
        o.m,
        c.n,
        c.k,
        fmt(c.fa),
        fmt(c.fb),
        w2d as usize,
        c.out_bf16 as usize,
        kernel,
        c.grid,
        c.o_tma as usize,
        o.lda,
        ldsa,
        ldsb,
        (c.wgrad_rows > 0) as usize,
        c.out_t as usize,
    ];
    let offs: Vec<u8> = o.offs.iter().flat_map(|v| v.to_le_bytes()).collect();
    let f32s = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let t = std::time::Instant::now();
    let got = host::run_driver(exe, &header, &[&offs, &o.a, &o.b, &f32s(&sa), &f32s(&sb)]);
    eprintln!("  {} ({:.1} s)", c.name, t.elapsed().as_secs_f64());
    let want = model(&o, c);
    let width = if c.out_bf16 { 2 } else { 4 };
    assert_eq!(got.len(), want.len() * width, "{}: output size", c.name);
    let bits = |i: usize| -> (u32, u32) {
        let g = &got[i * width..(i + 1) * width];
        if c.out_bf16 {
            let w = bf16::from_f32(want[i]).to_bits() as u32;
            (u16::from_le_bytes([g[0], g[1]]) as u32, w)
        } else {
            (u32::from_le_bytes(g.try_into().unwrap()), want[i].to_bits())
        }
    };
    let wrong: Vec<usize> = (0..want.len())
        .filter(|&i| {
            let (g, w) = bits(i);
            g != w
        })
        .collect();
    if let Some(&i) = wrong.first() {
        let (g, w) = bits(i);
        panic!(
            "{} (seed {seed}): {} of {} outputs differ; the first at row {}, column {}: kernel {g:#x}, model {w:#x} ({})",
            c.name,
            wrong.len(),
            want.len(),
            i / c.n,
            i % c.n,
            want[i]
        );
    }
}

#[test]
fn tgemm_kernels_match_the_model_of_their_arithmetic() {
    let Some((exe, mut rng, seed)) = host::setup("tgemm_host", "tgemm_driver.cpp") else {
        return;
    };
    for c in CASES {
        run_case(&exe, &mut rng, seed, c);
    }
}
