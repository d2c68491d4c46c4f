//! Block quantization: agreement with the index-arithmetic reference for every layout,
//! tails, the decided non-finite and zero-block rules, worked examples from the notes,
//! and argument validation.

mod common;

use common::{layouts, reference_quantize, Rng, FORMATS, MODES};
use mxhost_plugin_abi::{BlockLayout, MxFormat, ScaleMode};
use mxhost_plugin_mxfp8::numerics::element::decode;
use mxhost_plugin_mxfp8::{dequantize_mx, fake_quantize, quantize_mx, scale_count};

fn quantize(
    x: &[f32],
    shape: &[u64],
    layout: BlockLayout,
    format: MxFormat,
    mode: ScaleMode,
) -> (Vec<u8>, Vec<u8>) {
    let mut data = vec![0xAAu8; x.len()];
    let mut scales = vec![0xAAu8; scale_count(shape, layout).unwrap()];
    quantize_mx(x, shape, layout, format, mode, &mut data, &mut scales).unwrap();
    (data, scales)
}

fn dequantize(
    data: &[u8],
    scales: &[u8],
    shape: &[u64],
    layout: BlockLayout,
    format: MxFormat,
) -> Vec<f32> {
    let mut out = vec![f32::NAN; data.len()];
    dequantize_mx(data, scales, shape, layout, format, &mut out).unwrap();
    out
}

/// Random data with a different magnitude per 8-row band, so blocks get varied scales.
fn data(rng: &mut Rng, n: usize) -> Vec<f32> {
    let mut x = rng.normals(n, 1.0);
    for (i, v) in x.iter_mut().enumerate() {
        *v *= 2f32.powi(((i / 8) % 23) as i32 - 11);
    }
    x
}

#[test]
fn every_layout_matches_the_reference_including_tails() {
    let mut rng = Rng::new(1);
    let shapes: [&[u64]; 6] = [
        &[70, 45],
        &[3, 33, 65],
        &[2, 2, 32, 64],
        &[1, 1],
        &[31, 97],
        &[64, 40],
    ];
    for shape in shapes {
        let n = shape.iter().product::<u64>() as usize;
        let x = data(&mut rng, n);
        for layout in layouts(shape.len()) {
            for format in FORMATS {
                for mode in MODES {
                    let got = quantize(&x, shape, layout, format, mode);
                    let want = reference_quantize(&x, shape, layout, format, mode);
                    assert_eq!(
                        got.1, want.1,
                        "scales {shape:?} {layout:?} {format:?} {mode:?}"
                    );
                    assert_eq!(
                        got.0, want.0,
                        "data {shape:?} {layout:?} {format:?} {mode:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn rank_one_vectors() {
    let mut rng = Rng::new(2);
    let x = data(&mut rng, 77);
    let got = quantize(
        &x,
        &[77],
        BlockLayout::vector(0),
        MxFormat::E4m3,
        ScaleMode::Rceil,
    );
    let want = reference_quantize(
        &x,
        &[77],
        BlockLayout::vector(0),
        MxFormat::E4m3,
        ScaleMode::Rceil,
    );
    assert_eq!(got, want);
    assert_eq!(got.1.len(), 3);
}

#[test]
fn column_blocks_equal_row_blocks_of_the_transpose() {
    let mut rng = Rng::new(3);
    let (r, c) = (75usize, 41usize);
    let x = data(&mut rng, r * c);
    let xt: Vec<f32> = (0..c * r).map(|i| x[(i % r) * c + i / r]).collect();
    for format in FORMATS {
        for mode in MODES {
            let (d, s) = quantize(
                &x,
                &[r as u64, c as u64],
                BlockLayout::vector(0),
                format,
                mode,
            );
            let (dt, st) = quantize(
                &xt,
                &[c as u64, r as u64],
                BlockLayout::vector(1),
                format,
                mode,
            );
            let nb = r.div_ceil(32);
            for i in 0..r {
                for j in 0..c {
                    assert_eq!(d[i * c + j], dt[j * r + i]);
                }
            }
            for bi in 0..nb {
                for j in 0..c {
                    assert_eq!(s[bi * c + j], st[j * nb + bi]);
                }
            }
        }
    }
}

#[test]
fn worked_e4m3_examples_through_the_block_path() {
    // One block of 32 whose amax is the example value; per mode rceil/floor/even.
    for (amax, want) in [
        (448.0f32, [127u8, 127, 127]),
        (480.0, [128, 127, 127]),
        (496.0, [128, 127, 128]),
        (1.0, [119, 119, 119]),
    ] {
        let mut x = vec![0.25f32; 32];
        x[5] = -amax;
        for (mode, &b) in MODES.iter().zip(&want) {
            let (d, s) = quantize(&x, &[32], BlockLayout::vector(0), MxFormat::E4m3, *mode);
            assert_eq!(s, vec![b], "amax {amax} {mode:?}");
            let deq = decode(d[5], MxFormat::E4m3) as f64 * 2f64.powi(b as i32 - 127);
            // 448 and 1.0 are exact; 480 is exact with X = 2 (240) and saturates to 448
            // with X = 1; 496 with X = 2 is 248, the tie between 240 and 256: even → 256.
            let expect = match (amax as u32, b) {
                (480, 127) => -448.0,
                (496, 127) => -448.0,
                (496, 128) => -512.0,
                _ => -(amax as f64),
            };
            assert_eq!(deq, expect, "amax {amax} {mode:?}");
        }
    }
}

#[test]
fn non_finite_elements_poison_their_block_only() {
    for format in FORMATS {
        for mode in MODES {
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                let mut x: Vec<f32> = (0..64).map(|i| i as f32).collect();
                x[40] = bad;
                let (d, s) = quantize(&x, &[64], BlockLayout::vector(0), format, mode);
                assert_ne!(s[0], 0xFF);
                assert_eq!(s[1], 0xFF);
                assert!(d[32..].iter().all(|&c| c == 0x7F));
                let y = dequantize(&d, &s, &[64], BlockLayout::vector(0), format);
                assert!(y[..32].iter().all(|v| v.is_finite()));
                assert!(y[32..].iter().all(|v| v.is_nan()));
            }
        }
    }
}

#[test]
fn nan_scale_makes_every_element_nan_on_decode() {
    let data = vec![0x38u8; 32]; // 1.0 in E4M3
    let y = dequantize(
        &data,
        &[0xFF],
        &[32],
        BlockLayout::vector(0),
        MxFormat::E4m3,
    );
    assert!(y.iter().all(|v| v.is_nan()));
}

#[test]
fn e5m2_inf_byte_decodes_to_inf() {
    let y = dequantize(
        &[0x7C, 0xFC],
        &[127],
        &[2],
        BlockLayout::vector(0),
        MxFormat::E5m2,
    );
    assert_eq!(y, vec![f32::INFINITY, f32::NEG_INFINITY]);
}

#[test]
fn zero_blocks_keep_signed_zeros() {
    let x = [0.0f32, -0.0, 0.0, -0.0];
    for format in FORMATS {
        for (mode, b) in MODES.iter().zip([0u8, 0, 1]) {
            let (d, s) = quantize(&x, &[4], BlockLayout::vector(0), format, *mode);
            assert_eq!(s, vec![b]);
            assert_eq!(d, vec![0x00, 0x80, 0x00, 0x80]);
            let y = dequantize(&d, &s, &[4], BlockLayout::vector(0), format);
            assert_eq!(
                y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                x.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn f32_subnormal_inputs_are_exact() {
    // A block of f32 subnormals: rceil picks b = 0 (2^-127); quotients are exact in f64.
    let x: Vec<f32> = (1..=32).map(|i| f32::from_bits(i * 1000)).collect();
    let (d, s) = quantize(
        &x,
        &[32],
        BlockLayout::vector(0),
        MxFormat::E4m3,
        ScaleMode::Rceil,
    );
    assert_eq!(s, vec![0]);
    let want = reference_quantize(
        &x,
        &[32],
        BlockLayout::vector(0),
        MxFormat::E4m3,
        ScaleMode::Rceil,
    );
    assert_eq!(d, want.0);
    let y = dequantize(&d, &s, &[32], BlockLayout::vector(0), MxFormat::E4m3);
    for (a, b) in x.iter().zip(&y) {
        // Half the smallest E4M3 step (2^-9) at X = 2^-127: 2^-137 (an f32 subnormal).
        assert!((a - b).abs() <= f32::from_bits(1 << 12), "{a:e} vs {b:e}");
    }
}

#[test]
fn floor_and_even_saturate_and_rceil_does_not() {
    let mut x = vec![1.0f32; 32];
    x[0] = 500.0; // floor X = 1 → 500 saturates to 448; even rounds 500 up to 512 → X = 2
    let (d, s) = quantize(
        &x,
        &[32],
        BlockLayout::vector(0),
        MxFormat::E4m3,
        ScaleMode::Floor,
    );
    assert_eq!(s[0], 127);
    assert_eq!(d[0], 0x7E);
    let (_, s) = quantize(
        &x,
        &[32],
        BlockLayout::vector(0),
        MxFormat::E4m3,
        ScaleMode::Rceil,
    );
    assert_eq!(s[0], 128);
}

#[test]
fn rceil_requantization_may_halve_the_scale_without_changing_values() {
    // amax/X = 225 (X = 1) rounds to the element 224 = 448/2; re-quantizing 224 gives
    // X = 1/2 and elements doubled: other bytes, same values.
    let mut x = vec![1.0f32; 32];
    x[0] = 225.0 * 2f32.powi(0) * 2.0; // amax 450 → X = 2, 450/2 = 225 → element 224
    let shape = [32u64];
    let l = BlockLayout::vector(0);
    let (d, s) = quantize(&x, &shape, l, MxFormat::E4m3, ScaleMode::Rceil);
    assert_eq!(s[0], 128);
    assert_eq!(decode(d[0], MxFormat::E4m3), 224.0);
    let y = dequantize(&d, &s, &shape, l, MxFormat::E4m3);
    let (d2, s2) = quantize(&y, &shape, l, MxFormat::E4m3, ScaleMode::Rceil);
    assert_eq!(s2[0], 127);
    assert_eq!(decode(d2[0], MxFormat::E4m3), 448.0);
    assert_eq!(dequantize(&d2, &s2, &shape, l, MxFormat::E4m3), y);
}

#[test]
fn bf16_input_and_output() {
    use half::bf16;
    let mut rng = Rng::new(5);
    let x32: Vec<f32> = rng
        .normals(96, 3.0)
        .iter()
        .map(|&v| bf16::from_f32(v).to_f32())
        .collect();
    let xb: Vec<bf16> = x32.iter().map(|&v| bf16::from_f32(v)).collect();
    let shape = [3u64, 32];
    let l = BlockLayout::vector(1);
    let a = quantize(&x32, &shape, l, MxFormat::E4m3, ScaleMode::Rceil);
    let mut d = vec![0u8; 96];
    let mut s = vec![0u8; 3];
    quantize_mx(
        &xb,
        &shape,
        l,
        MxFormat::E4m3,
        ScaleMode::Rceil,
        &mut d,
        &mut s,
    )
    .unwrap();
    assert_eq!(a, (d.clone(), s.clone()));
    let mut yb = vec![bf16::ZERO; 96];
    dequantize_mx(&d, &s, &shape, l, MxFormat::E4m3, &mut yb).unwrap();
    let y32 = dequantize(&d, &s, &shape, l, MxFormat::E4m3);
    // E4M3 × 2^k fits bf16 exactly at these magnitudes.
    assert_eq!(yb.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), y32);
}

#[test]
fn invalid_arguments_are_errors_not_panics() {
    let x = vec![1.0f32; 64];
    let mut d = vec![0u8; 64];
    let mut s = vec![0u8; 2];
    let q = |shape: &[u64], l: BlockLayout, d: &mut [u8], s: &mut [u8]| {
        quantize_mx(&x, shape, l, MxFormat::E4m3, ScaleMode::Rceil, d, s)
    };
    assert!(q(&[64], BlockLayout::vector(0), &mut d, &mut s).is_ok());
    assert!(q(&[64], BlockLayout::vector(0), &mut d, &mut s[..1]).is_err());
    assert!(q(&[64], BlockLayout::vector(0), &mut d[..63], &mut s).is_err());
    assert!(q(&[65], BlockLayout::vector(0), &mut d, &mut s).is_err());
    assert!(q(&[64], BlockLayout::tile(), &mut d, &mut s).is_err());
    assert!(q(&[2, 2, 16], BlockLayout::vector(0), &mut d, &mut s).is_err());
    assert!(q(&[64], BlockLayout { kind: 7, axis: 0 }, &mut d, &mut s).is_err());
    assert!(q(&[], BlockLayout::vector(0), &mut d, &mut s).is_err());
    let mut out = vec![0f32; 64];
    assert!(dequantize_mx(
        &d,
        &s[..1],
        &[64],
        BlockLayout::vector(0),
        MxFormat::E4m3,
        &mut out
    )
    .is_err());
}

#[test]
fn empty_tensors_are_fine() {
    for shape in [&[0u64, 5][..], &[5, 0], &[0]] {
        let l = BlockLayout::vector(shape.len() as u32 - 1);
        assert_eq!(scale_count(shape, l), Some(0));
        quantize_mx::<f32>(
            &[],
            shape,
            l,
            MxFormat::E4m3,
            ScaleMode::Rceil,
            &mut [],
            &mut [],
        )
        .unwrap();
        assert!(
            fake_quantize::<f32>(&[], shape, l, MxFormat::E4m3, ScaleMode::Rceil)
                .unwrap()
                .is_empty()
        );
    }
}

#[test]
fn snr_on_random_normal_data_is_as_expected() {
    // Sanity against the reference project's figures: E4M3 ≈ 30 dB on N(0,1) data.
    let mut rng = Rng::new(9);
    let x = rng.normals(1 << 16, 1.0);
    let y = fake_quantize(
        &x,
        &[256, 256],
        BlockLayout::vector(1),
        MxFormat::E4m3,
        ScaleMode::Rceil,
    )
    .unwrap();
    let sig: f64 = x.iter().map(|&v| (v as f64).powi(2)).sum();
    let err: f64 = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
        .sum();
    let snr = 10.0 * (sig / err).log10();
    assert!(snr > 28.0 && snr < 40.0, "snr {snr}");
}

#[test]
fn one_million_elements_quantize_in_milliseconds() {
    let mut rng = Rng::new(10);
    let x = rng.normals(1 << 20, 1.0);
    let shape = [1024u64, 1024];
    for layout in layouts(2) {
        let mut d = vec![0u8; x.len()];
        let mut s = vec![0u8; scale_count(&shape, layout).unwrap()];
        quantize_mx(
            &x,
            &shape,
            layout,
            MxFormat::E4m3,
            ScaleMode::Rceil,
            &mut d,
            &mut s,
        )
        .unwrap();
        // Best of a few runs: the machine may be shared.
        let best = |f: &mut dyn FnMut()| {
            (0..5)
                .map(|_| {
                    let t = std::time::Instant::now();
                    f();
                    t.elapsed()
                })
                .min()
                .unwrap()
        };
        let tq = best(&mut || {
            quantize_mx(
                &x,
                &shape,
                layout,
                MxFormat::E4m3,
                ScaleMode::Rceil,
                &mut d,
                &mut s,
            )
            .unwrap()
        });
        let mut y = vec![0f32; x.len()];
        let td =
            best(&mut || dequantize_mx(&d, &s, &shape, layout, MxFormat::E4m3, &mut y).unwrap());
        eprintln!("{layout:?}: quantize {tq:?}, dequantize {td:?}");
        if !cfg!(debug_assertions) {
            assert!(
                tq.as_millis() < 100 && td.as_millis() < 100,
                "{layout:?}: {tq:?} / {td:?}"
            );
        }
    }
}
