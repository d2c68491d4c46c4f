//! `quantize_mx` then `dequantize_mx` on arbitrary f32 (or bf16) bit patterns — NaN,
//! ±Inf, subnormals, ±0, f32::MAX — over small shapes, every block layout, format and
//! scale mode. Never panic, and (mirroring plugin-mxfp8/tests/properties.rs):
//! - a block holding a non-finite value has scale 0xFF, NaN element bytes, and
//!   dequantizes to NaN; a finite block never gets the 0xFF scale;
//! - in a finite block, deq = decode(byte)·2^(b−127) exactly (f32), finite unless that
//!   value exceeds f32::MAX (documented in quantize.rs), the sign of x is kept, and
//!   |deq − x| ≤ ½ step at |x|/scale times scale, or exactly the saturation error
//!   (which rceil only reaches at q = elem_max);
//! - quantize(−x) has the same scales and the element bytes differ only in the sign
//!   bit (both NaN codes in a non-finite block).
//!
//! Invalid layouts and wrong buffer lengths must come back as errors; arbitrary
//! data/scale bytes must dequantize without panicking (0xFF scale → NaN).
#![no_main]

use arbitrary::Arbitrary;
use half::bf16;
use libfuzzer_sys::fuzz_target;
use mxhost_fuzz::block_table;
use mxhost_plugin_abi::{BlockLayout, MxFormat, ScaleMode};
use mxhost_plugin_common::dense::DenseElem;
use mxhost_plugin_mxfp8::numerics::element::{decode, spec};
use mxhost_plugin_mxfp8::{dequantize_mx, quantize_mx, scale_count};

#[derive(Arbitrary, Debug)]
struct Input {
    rank: u8,
    dims: [u8; 3],
    layout: u8,
    format: bool,
    mode: u8,
    bf16: bool,
    /// Make one of the three buffers one element too short (must be an error).
    short_buffer: u8,
    /// Element bit patterns, cycled over the tensor.
    values: Vec<u32>,
    /// Arbitrary bytes to dequantize as (data, scales), cycled.
    garbage: Option<(Vec<u8>, Vec<u8>)>,
}

fn shape_of(input: &Input) -> Vec<u64> {
    let d = input.dims.map(|d| d as u64);
    match input.rank % 3 {
        0 => vec![d[0] % 200],
        1 => vec![d[0] % 70, d[1] % 70],
        _ => vec![d[0] % 3, d[1] % 40, d[2] % 40],
    }
}

/// (layout, is_tile, axis); the last choice is invalid for every rank.
fn layout_of(choice: u8, rank: usize) -> (BlockLayout, bool, usize) {
    match choice % 4 {
        0 => (BlockLayout::vector(rank as u32 - 1), false, rank - 1),
        1 => (
            BlockLayout::vector(rank.saturating_sub(2) as u32),
            false,
            rank.saturating_sub(2),
        ),
        2 => (BlockLayout::tile(), true, 0),
        _ => (
            BlockLayout {
                kind: 2 + choice as u32 / 4,
                axis: 0,
            },
            false,
            0,
        ),
    }
}

fn valid(l: BlockLayout, rank: usize) -> bool {
    match l.kind {
        0 => (l.axis as usize) < rank && l.axis as usize + 2 >= rank,
        1 => rank >= 2,
        _ => false,
    }
}

fn quantize<T: DenseElem>(
    x: &[T],
    shape: &[u64],
    l: BlockLayout,
    f: MxFormat,
    m: ScaleMode,
    nscales: usize,
) -> (Vec<u8>, Vec<u8>) {
    let mut d = vec![0u8; x.len()];
    let mut s = vec![0u8; nscales];
    quantize_mx(x, shape, l, f, m, &mut d, &mut s).expect("valid quantize request failed");
    (d, s)
}

fn run<T: DenseElem>(input: &Input, xs: Vec<T>, neg: Vec<T>, shape: &[u64]) {
    let rank = shape.len();
    let n = xs.len();
    let (l, tile, axis) = layout_of(input.layout, rank);
    let format = if input.format {
        MxFormat::E5m2
    } else {
        MxFormat::E4m3
    };
    let mode = match input.mode % 3 {
        0 => ScaleMode::Rceil,
        1 => ScaleMode::Floor,
        _ => ScaleMode::Even,
    };

    let Some(nscales) = scale_count(shape, l) else {
        assert!(
            !valid(l, rank),
            "scale_count refused a valid layout {l:?} for {shape:?}"
        );
        let (mut d, mut s, mut y) = (vec![0u8; n], vec![0u8; 1], vec![0f32; n]);
        assert!(quantize_mx(&xs, shape, l, format, mode, &mut d, &mut s).is_err());
        assert!(dequantize_mx(&d, &s, shape, l, format, &mut y).is_err());
        return;
    };
    assert!(
        valid(l, rank),
        "scale_count accepted invalid layout {l:?} for {shape:?}"
    );

    // Wrong buffer lengths are errors, not panics.
    if input.short_buffer % 4 != 0 {
        let which = input.short_buffer % 4;
        let mut d = vec![0u8; n.saturating_sub((which == 1) as usize)];
        let mut s = vec![0u8; nscales.saturating_sub((which == 2) as usize)];
        let x = &xs[..n.saturating_sub((which == 3) as usize)];
        let shorter = (which == 1 && n > 0) || (which == 2 && nscales > 0) || (which == 3 && n > 0);
        let r = quantize_mx(x, shape, l, format, mode, &mut d, &mut s);
        assert_eq!(r.is_err(), shorter, "short buffer {which} accepted: {r:?}");
        let mut y = vec![0f32; n];
        d.resize(n, 0);
        let r = dequantize_mx(&d, &s, shape, l, format, &mut y);
        assert_eq!(r.is_err(), which == 2 && nscales > 0);
    }

    // Arbitrary bytes dequantize without panicking; a 0xFF scale gives NaN.
    if let Some((gd, gs)) = &input.garbage {
        let d: Vec<u8> = (0..n)
            .map(|i| gd.get(i % gd.len().max(1)).copied().unwrap_or(0))
            .collect();
        let s: Vec<u8> = (0..nscales)
            .map(|i| gs.get(i % gs.len().max(1)).copied().unwrap_or(0))
            .collect();
        let mut y = vec![0f32; n];
        dequantize_mx(&d, &s, shape, l, format, &mut y).expect("garbage dequantize failed");
        let mut yb = vec![bf16::ZERO; n];
        dequantize_mx(&d, &s, shape, l, format, &mut yb).expect("garbage dequantize (bf16) failed");
        for (i, &bi) in block_table(shape, tile, axis).iter().enumerate() {
            if s[bi] == 0xFF {
                assert!(y[i].is_nan() && yb[i].is_nan());
            }
        }
    }

    let (d, s) = quantize(&xs, shape, l, format, mode, nscales);
    let mut y = vec![0f32; n];
    dequantize_mx(&d, &s, shape, l, format, &mut y).expect("dequantize failed");

    let sp = spec(format);
    let blk = block_table(shape, tile, axis);
    let mut bad = vec![false; nscales];
    for i in 0..n {
        bad[blk[i]] |= !xs[i].to_f32().is_finite();
    }
    for (i, x) in xs.iter().enumerate() {
        let xv = x.to_f32();
        let b = s[blk[i]];
        if bad[blk[i]] {
            assert_eq!(
                b, 0xFF,
                "block of element {i} holds a non-finite value but has scale {b}"
            );
            assert_eq!(d[i], sp.nan_code);
            assert!(
                y[i].is_nan(),
                "element {i} of a non-finite block decoded to {}",
                y[i]
            );
            continue;
        }
        assert_ne!(
            b, 0xFF,
            "finite block got the NaN scale (element {i} = {xv:e})"
        );
        let scale = 2f64.powi(b as i32 - 127);
        let dv = decode(d[i], format) as f64;
        assert!(
            dv.is_finite(),
            "finite x {xv:e} encoded to non-finite byte {:#x}",
            d[i]
        );
        let exact = dv * scale;
        if exact.abs() <= f32::MAX as f64 {
            assert!(
                y[i].is_finite(),
                "x {xv:e} dequantized to {} (exact {exact:e})",
                y[i]
            );
            assert_eq!(
                y[i].to_bits(),
                (exact as f32).to_bits(),
                "deq not exact for x {xv:e}"
            );
        } else {
            assert!(y[i].is_infinite());
        }
        let q = (xv as f64 / scale).abs();
        let err = (xv as f64 - exact).abs();
        if q >= sp.max {
            // Finding fuzz/artifacts-found/quantizer-rceil-clip-*: rceil clips when the
            // FP32 quotient amax/elem_max rounds down onto 2^-127 exactly. Resolved as
            // documented behaviour (docs/numerics.md): a clip of at most one f32 ulp, b = 0.
            let ulp = f32::from_bits(xv.abs().to_bits() + 1) as f64 - xv.abs() as f64;
            assert!(
                mode != ScaleMode::Rceil || q == sp.max || (b == 0 && err <= ulp),
                "rceil clipped x {xv:e} (bits {:#010x}) at b {b}: q = {q} > {} ({format:?})",
                xv.to_bits(),
                sp.max
            );
            assert_eq!(
                err,
                (q - sp.max) * scale,
                "saturation error of x {xv:e} at b {b}"
            );
        } else {
            let e = if q == 0.0 {
                sp.emin()
            } else {
                (q.log2().floor() as i32).max(sp.emin())
            };
            let half_step = 2f64.powi(e - sp.mbits as i32 - 1);
            assert!(
                err <= half_step * scale,
                "x {xv:e} deq {exact:e} b {b} err {err:e}"
            );
        }
        assert_eq!(
            xv.is_sign_negative(),
            exact.is_sign_negative(),
            "sign of {xv:e} vs {exact:e}"
        );
    }

    // Sign symmetry.
    let (dn, sn) = quantize(&neg, shape, l, format, mode, nscales);
    assert_eq!(s, sn, "scales of -x differ");
    for i in 0..n {
        if s[blk[i]] == 0xFF {
            assert_eq!(dn[i], sp.nan_code);
        } else {
            assert_eq!(d[i] ^ 0x80, dn[i], "byte of -x[{i}] is not the sign flip");
        }
    }
}

fuzz_target!(|input: Input| {
    let shape = shape_of(&input);
    let n = shape.iter().product::<u64>() as usize;
    let bits = |i: usize| -> u32 {
        if input.values.is_empty() {
            0
        } else {
            input.values[i % input.values.len()]
        }
    };
    if input.bf16 {
        let xs: Vec<bf16> = (0..n)
            .map(|i| bf16::from_bits((bits(i) >> 16) as u16))
            .collect();
        let neg: Vec<bf16> = xs
            .iter()
            .map(|v| bf16::from_bits(v.to_bits() ^ 0x8000))
            .collect();
        run(&input, xs, neg, &shape);
    } else {
        let xs: Vec<f32> = (0..n).map(|i| f32::from_bits(bits(i))).collect();
        let neg: Vec<f32> = xs
            .iter()
            .map(|v| f32::from_bits(v.to_bits() ^ 0x8000_0000))
            .collect();
        run(&input, xs, neg, &shape);
    }
});
