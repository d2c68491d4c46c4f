//! The fast element encoder against an exhaustive-search reference, on edge values,
//! every midpoint between neighbouring codes, and many random quotients.

mod common;

use common::{reference_encode, Rng, FORMATS};
use mxhost_plugin_mxfp8::numerics::element::{decode, encode, spec};

#[test]
fn midpoints_and_neighbours_agree_with_the_reference() {
    for format in FORMATS {
        let s = spec(format);
        let mut values: Vec<f64> = (0u8..=0x7F)
            .map(|c| decode(c, format) as f64)
            .filter(|v| v.is_finite())
            .collect();
        values.sort_by(f64::total_cmp);
        let mut probes = vec![
            0.0,
            s.max,
            s.max * 1.0625,
            s.max * 1.125,
            s.max * 2.0,
            1e300,
            f64::MIN_POSITIVE,
        ];
        for w in values.windows(2) {
            let mid = (w[0] + w[1]) / 2.0; // exact in f64
            for p in [
                w[0],
                w[1],
                mid,
                mid.next_up(),
                mid.next_down(),
                w[0].next_up(),
            ] {
                probes.push(p);
            }
        }
        for p in probes {
            for v in [p, -p] {
                assert_eq!(
                    encode(v, s),
                    reference_encode(v, format),
                    "{format:?} at {v:e}"
                );
            }
        }
    }
}

#[test]
fn random_quotients_agree_with_the_reference() {
    let mut rng = Rng::new(7);
    for format in FORMATS {
        let s = spec(format);
        for _ in 0..20_000 {
            // Log-uniform magnitudes from far below the subnormals to beyond max.
            let exp = rng.uniform() * 50.0 - 30.0;
            let mut v = 2f64.powf(exp) * if rng.below(2) == 0 { 1.0 } else { -1.0 };
            // Sometimes an f32-exact value, as the quantizer produces.
            if rng.below(2) == 0 {
                v = v as f32 as f64;
            }
            assert_eq!(
                encode(v, s),
                reference_encode(v, format),
                "{format:?} at {v:e}"
            );
        }
    }
}

#[test]
fn non_finite_inputs() {
    for format in FORMATS {
        let s = spec(format);
        assert_eq!(encode(f64::NAN, s), 0x7F);
        assert_eq!(encode(f64::INFINITY, s), s.max_code);
        assert_eq!(encode(f64::NEG_INFINITY, s), 0x80 | s.max_code);
    }
}
