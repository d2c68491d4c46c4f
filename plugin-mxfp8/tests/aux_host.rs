//! The backend's helper kernels (`cuda/mx_dequantize.cu`) run on the host through
//! `tests/host/simt.hpp` and compared with a plain reference on fresh random bytes:
//! - `mx_dequantize16`, the dequantize-to-BF16 path's expansion of MX operands (the default
//!   forward and dgrad of large experts, shapes a and b), in every layout it takes (1×32 along
//!   C, 1×32 along R, 32×32), bf16 and f32 output, both formats, with element bytes that include
//!   the NaN/Inf codes and scale bytes on both sides of its fast path's bounds (0, 1, the
//!   smallest that keeps a subnormal element normal, 253–255);
//! - `mx_dequantize`, batched, with scales stored the other axis inner (`scs` ≠ 1);
//! - `mx_transpose_u8`, batched, on a shape with interior tiles (word path) and edge tiles (byte
//!   path), and on one with only the byte path.
//!
//! The host runs the software FP8 decode where the GPU's fast path converts in hardware (both
//! exact); the fast path's choice, its truncation to bf16 and the indexing are what is checked.
//! Values compare bit for bit, NaNs as NaNs (the GPU's multiply returns its canonical NaN).

use mxhost_plugin_abi::MxFormat;
use mxhost_plugin_mxfp8::numerics::element::decode;

mod host;
use host::Rng;

/// One launch (aux_driver.cpp's header).
struct Launch {
    kernel: usize,
    out_bf16: bool,
    fmt: MxFormat,
    batch: usize,
    r: usize,
    c: usize,
    rdiv: usize,
    cdiv: usize,
    srs: usize,
    sbs: usize,
    scs: usize,
    scales: usize,
}

fn run(exe: &std::path::Path, l: &Launch, q: &[u8], s: &[u8]) -> Vec<u8> {
    let header = [
        l.kernel,
        l.out_bf16 as usize,
        (l.fmt == MxFormat::E5m2) as usize,
        l.batch,
        l.r,
        l.c,
        l.rdiv,
        l.cdiv,
        l.srs,
        l.sbs,
        l.scs,
        l.scales,
    ];
    host::run_driver(exe, &header, &[q, s])
}

/// A scale byte: any, often one of the fast path's bounds.
fn scale_byte(rng: &mut Rng) -> u8 {
    const EDGES: [u8; 9] = [0, 1, 9, 10, 16, 17, 253, 254, 255];
    if rng.below(3) == 0 {
        EDGES[rng.below(EDGES.len())]
    } else {
        100 + rng.below(55) as u8
    }
}

fn e8m0(b: u8) -> f32 {
    match b {
        255 => f32::NAN,
        0 => f32::from_bits(0x0040_0000),
        _ => f32::from_bits((b as u32) << 23),
    }
}

/// Round to nearest even; a NaN keeps its high half with the quiet bit (mxd_bf16_rne).
fn bf16_bits(v: f32) -> u16 {
    let u = v.to_bits();
    if u & 0x7FFF_FFFF > 0x7F80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) as u16
}

/// Compares the kernel's values with `want` (f32 per element), bit for bit but NaN for NaN.
fn check(ctx: &str, got: &[u8], want: &[f32], out_bf16: bool, c: usize) {
    for (i, w) in want.iter().enumerate() {
        let (g, wb, nan) = if out_bf16 {
            let g = u16::from_le_bytes([got[2 * i], got[2 * i + 1]]) as u32;
            (g, bf16_bits(*w) as u32, g & 0x7FFF > 0x7F80)
        } else {
            let g = u32::from_le_bytes(got[4 * i..4 * i + 4].try_into().unwrap());
            (g, w.to_bits(), f32::from_bits(g).is_nan())
        };
        let same = if w.is_nan() { nan } else { g == wb };
        assert!(
            same,
            "{ctx}: element {i} (row {}, column {}): kernel {g:#x}, reference {wb:#x} ({w})",
            i / c,
            i % c
        );
    }
}

/// (name, [r, c, rdiv, cdiv, kernel, batch], scales stored the other axis inner)
type DequantLayout = (&'static str, [usize; 6], bool);
const LAYOUTS: [DequantLayout; 5] = [
    ("16: 1x32 along C", [70, 160, 1, 32, 1, 1], false),
    ("16: 1x32 along R", [70, 48, 32, 1, 1, 1], false),
    ("16: 32x32", [90, 96, 32, 32, 1, 1], false),
    ("1x32 along C, batch 2", [50, 70, 1, 32, 0, 2], false),
    (
        "32x32, batch 2, scales column-major",
        [50, 70, 32, 32, 0, 2],
        true,
    ),
];

#[test]
fn dequantize_and_transpose_kernels_equal_the_reference() {
    let Some((exe, mut rng, seed)) = host::setup("aux_host", "aux_driver.cpp") else {
        return;
    };
    for (name, [r, c, rdiv, cdiv, kernel, batch], col_major) in LAYOUTS {
        for fmt in [MxFormat::E4m3, MxFormat::E5m2] {
            for out_bf16 in [true, false] {
                let (sr, sc) = (r.div_ceil(rdiv), c.div_ceil(cdiv));
                // scale of (b, r, c): b * sbs + (r / rdiv) * srs + (c / cdiv) * scs
                let (srs, scs) = if col_major { (1, sr) } else { (sc, 1) };
                let sbs = sr * sc;
                let q: Vec<u8> = (0..batch * r * c).map(|_| rng.below(256) as u8).collect();
                let s: Vec<u8> = (0..batch * sbs).map(|_| scale_byte(&mut rng)).collect();
                let want: Vec<f32> = (0..batch * r * c)
                    .map(|i| {
                        let (b, rr, cc) = (i / (r * c), i / c % r, i % c);
                        let sb = s[b * sbs + (rr / rdiv) * srs + (cc / cdiv) * scs];
                        decode(q[i], fmt) * e8m0(sb)
                    })
                    .collect();
                let l = Launch {
                    kernel,
                    out_bf16,
                    fmt,
                    batch,
                    r,
                    c,
                    rdiv,
                    cdiv,
                    srs,
                    sbs,
                    scs,
                    scales: s.len(),
                };
                let got = run(&exe, &l, &q, &s);
                let ctx = format!("{name} {fmt:?} bf16 out {out_bf16}, seed {seed}");
                check(&ctx, &got, &want, out_bf16, c);
            }
        }
    }
    for (r, c, batch) in [(272, 260, 2), (50, 70, 1)] {
        let q: Vec<u8> = (0..batch * r * c).map(|_| rng.below(256) as u8).collect();
        let l = Launch {
            kernel: 2,
            out_bf16: false,
            fmt: MxFormat::E4m3,
            batch,
            r,
            c,
            rdiv: 0,
            cdiv: 0,
            srs: 0,
            sbs: 0,
            scs: 0,
            scales: 0,
        };
        let got = run(&exe, &l, &q, &[]);
        let mut want = Vec::with_capacity(q.len());
        for b in 0..batch {
            want.extend(host::transpose(&q[b * r * c..(b + 1) * r * c], r, c));
        }
        host::first_difference(
            &format!("mx_transpose_u8 {batch} x {r} x {c}, seed {seed}"),
            &got,
            &want,
            r,
        );
    }
}

/// `mx_wgrad_relayout` (the FP8 wgrad's move of a pre-quantized `[R][P]` operand with 1×32 blocks
/// along R into the GEMM's padded transposed layout, `MXHOST_MX_WGRAD=fp8`): experts of 45, 0,
/// 70 and 3 rows (starts not multiples of 32, so each is shifted by start % 32 and keeps its
/// global blocks' scales), P = 40; the table as wgrad.rs builds it. Blocks of 32 × 8 threads.
#[test]
fn wgrad_relayout_equals_the_reference() {
    let Some((exe, mut rng, seed)) = host::setup("aux_host_relayout", "aux_driver.cpp") else {
        return;
    };
    let (sizes, p) = ([45usize, 0, 70, 3], 40usize);
    let r: usize = sizes.iter().sum();
    // wgrad.rs: {seg, shift, start, rows} per expert, segments of rup(rows + shift, 128)
    let (mut tbl, mut seg, mut start) = (Vec::new(), 0usize, 0usize);
    for &m in &sizes {
        let sh = if m == 0 { 0 } else { start % 32 };
        tbl.push([seg, sh, start, m]);
        seg += (m + sh).next_multiple_of(128);
        start += m;
    }
    let mpad = seg;
    let q: Vec<u8> = (0..r * p).map(|_| rng.below(256) as u8).collect();
    let s: Vec<u8> = (0..r.div_ceil(32) * p)
        .map(|_| rng.below(256) as u8)
        .collect();
    let mut qt = vec![0u8; p * mpad];
    let mut st = vec![0u8; p * (mpad / 32)];
    for (b, blk) in st.chunks_mut(1).enumerate() {
        let (col, t0) = (b / (mpad / 32), 32 * (b % (mpad / 32)));
        // the expert whose segment holds t0 (the last one starting at or before it)
        let &[sg, sh, st0, m] = tbl.iter().rev().find(|t| t[0] <= t0).unwrap();
        let j0 = t0 as i64 - (sg + sh) as i64;
        let (a, z) = (j0.max(0), (j0 + 32).min(m as i64));
        blk[0] = if a < z {
            s[(st0 + a as usize) / 32 * p + col]
        } else {
            127
        };
    }
    for &[sg, sh, st0, m] in &tbl {
        for j in 0..m {
            for col in 0..p {
                qt[col * mpad + sg + sh + j] = q[(st0 + j) * p + col];
            }
        }
    }
    let tbl_bytes: Vec<u8> = tbl
        .iter()
        .flatten()
        .flat_map(|&v| (v as i32).to_le_bytes())
        .collect();
    let header = [3, 0, 0, sizes.len(), r, p, mpad, 0, 0, 0, 0, s.len()];
    let got = host::run_driver(&exe, &header, &[&q, &s, &tbl_bytes]);
    let ctx = format!("mx_wgrad_relayout {sizes:?} x {p}, seed {seed}");
    host::first_difference(&format!("{ctx}: qt"), &got[..p * mpad], &qt, mpad);
    host::first_difference(&format!("{ctx}: st"), &got[p * mpad..], &st, mpad / 32);
}
