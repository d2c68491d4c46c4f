//! BF16 grouped GEMM against a naive f64 triple loop on bf16-rounded operands: every
//! pass, weight layout and output dtype, unaligned sizes, empty experts, padding rows,
//! NaN propagation, and a property test over random problems.

use half::bf16;
use mxhost_plugin_abi::{GemmPass, WeightLayout};
use mxhost_plugin_bf16::gemm::Bf16Prep;
use mxhost_plugin_common::args::groups_from_offs;
use mxhost_plugin_common::dense::{round_to_bf16, DenseMut, DenseRef};
use mxhost_plugin_common::gemm::{run, GroupedGemm};
use mxhost_plugin_common::host::HostOperand;
use mxhost_plugin_common::testing::{check_close, reference_with_bound, Rng};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Case {
    pass: GemmPass,
    layout: WeightLayout,
    offs: Vec<usize>,
    rows: usize,
    n: usize,
    k: usize,
}

impl Case {
    fn shapes(&self) -> (Vec<u64>, Vec<u64>, usize) {
        let (e, r, n, k) = (
            self.offs.len() as u64,
            self.rows as u64,
            self.n as u64,
            self.k as u64,
        );
        let w = match self.layout {
            WeightLayout::Nk => vec![e, n, k],
            WeightLayout::Kn => vec![e, k, n],
        };
        match self.pass {
            GemmPass::Forward => (vec![r, k], w, self.rows * self.n),
            GemmPass::Dgrad => (vec![r, n], w, self.rows * self.k),
            GemmPass::Wgrad => (vec![r, n], vec![r, k], self.offs.len() * self.n * self.k),
        }
    }
    fn inputs(&self, seed: u64) -> (Vec<f32>, Vec<f32>) {
        let mut rng = Rng::new(seed);
        let (sa, sb, _) = self.shapes();
        (
            rng.normals(sa.iter().product::<u64>() as usize, 1.0),
            rng.normals(sb.iter().product::<u64>() as usize, 0.1),
        )
    }
    fn run_into(&self, a: DenseRef<'_>, b: DenseRef<'_>, out: DenseMut<'_>) {
        let (sa, sb, _) = self.shapes();
        let groups = groups_from_offs(&self.offs);
        let g = GroupedGemm {
            pass: self.pass,
            weight_layout: self.layout,
            groups: &groups,
            rows: self.rows,
            n: self.n,
            k: self.k,
        };
        run(
            &g,
            HostOperand::Dense {
                data: a,
                shape: &sa,
            },
            HostOperand::Dense {
                data: b,
                shape: &sb,
            },
            out,
            &Bf16Prep,
        )
        .unwrap();
    }
    fn run_f32(&self, a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut out = vec![f32::NAN; self.shapes().2];
        self.run_into(DenseRef::F32(a), DenseRef::F32(b), DenseMut::F32(&mut out));
        out
    }
    fn check(&self, a: &[f32], b: &[f32], got: &[f32]) -> Result<(), String> {
        let round = |x: &[f32]| x.iter().map(|&v| round_to_bf16(v)).collect::<Vec<f32>>();
        let (want, absum) = reference_with_bound(
            self.pass,
            self.layout,
            &round(a),
            &round(b),
            &self.offs,
            self.rows,
            self.n,
            self.k,
        );
        let depth = match self.pass {
            GemmPass::Forward => self.k,
            GemmPass::Dgrad => self.n,
            GemmPass::Wgrad => self.rows,
        };
        check_close(got, &want, &absum, depth)?;
        if self.pass != GemmPass::Wgrad {
            let used = self.offs.last().copied().unwrap_or(0);
            let width = got.len() / self.rows.max(1);
            if got[used * width..].iter().any(|&v| v != 0.0) {
                return Err("padding rows not zero".into());
            }
        }
        Ok(())
    }
}

const PASSES: [GemmPass; 3] = [GemmPass::Forward, GemmPass::Dgrad, GemmPass::Wgrad];
const LAYOUTS: [WeightLayout; 2] = [WeightLayout::Nk, WeightLayout::Kn];

#[test]
fn all_passes_and_layouts_match_the_reference() {
    for pass in PASSES {
        for layout in LAYOUTS {
            for (offs, rows, n, k) in [
                (vec![0, 37, 37, 100, 161], 170, 48, 72),
                (vec![33, 70], 75, 24, 40),
                (vec![20, 45], 45, 16, 2880),
                (vec![0, 0], 10, 8, 8),
                (vec![], 7, 8, 8),
            ] {
                let case = Case {
                    pass,
                    layout,
                    offs,
                    rows,
                    n,
                    k,
                };
                let (a, b) = case.inputs(1);
                let got = case.run_f32(&a, &b);
                case.check(&a, &b, &got)
                    .unwrap_or_else(|e| panic!("{case:?}: {e}"));
            }
        }
    }
}

#[test]
fn operands_are_rounded_to_bf16_not_used_as_f32() {
    // 1 + 2^-10 is not a bf16: rounded it is 1.0, so 1 row × 1 col gives exactly 1.
    let case = Case {
        pass: GemmPass::Forward,
        layout: WeightLayout::Nk,
        offs: vec![1],
        rows: 1,
        n: 1,
        k: 1,
    };
    assert_eq!(case.run_f32(&[1.0 + 2f32.powi(-10)], &[1.0]), vec![1.0]);
}

#[test]
fn bf16_inputs_and_outputs() {
    for pass in PASSES {
        let case = Case {
            pass,
            layout: WeightLayout::Kn,
            offs: vec![30, 70],
            rows: 100,
            n: 48,
            k: 40,
        };
        let (a, b) = case.inputs(2);
        let f = case.run_f32(&a, &b);
        let ab: Vec<bf16> = a.iter().map(|&v| bf16::from_f32(v)).collect();
        let bb: Vec<bf16> = b.iter().map(|&v| bf16::from_f32(v)).collect();
        let mut out = vec![bf16::NAN; f.len()];
        case.run_into(
            DenseRef::Bf16(&ab),
            DenseRef::Bf16(&bb),
            DenseMut::Bf16(&mut out),
        );
        let want: Vec<u16> = f.iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
        assert_eq!(
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want,
            "{pass:?}"
        );
    }
}

#[test]
fn nan_propagates_to_exactly_the_affected_outputs() {
    let case = Case {
        pass: GemmPass::Forward,
        layout: WeightLayout::Nk,
        offs: vec![40, 80],
        rows: 90,
        n: 32,
        k: 64,
    };
    let (mut a, b) = case.inputs(3);
    a[45 * 64 + 3] = f32::NAN;
    let got = case.run_f32(&a, &b);
    for r in 0..90 {
        let row = &got[r * 32..(r + 1) * 32];
        assert!(
            if r == 45 {
                row.iter().all(|v| v.is_nan())
            } else {
                row.iter().all(|v| v.is_finite())
            },
            "row {r}"
        );
    }
}

#[test]
fn demo_sized_gemm_is_fast_enough() {
    let offs: Vec<usize> = (1..=8).map(|e| e * 512).collect();
    for pass in PASSES {
        let case = Case {
            pass,
            layout: WeightLayout::Nk,
            offs: offs.clone(),
            rows: 4096,
            n: 512,
            k: 256,
        };
        let (a, b) = case.inputs(4);
        let dt = (0..4)
            .map(|_| {
                let t = std::time::Instant::now();
                let out = case.run_f32(&a, &b);
                let dt = t.elapsed();
                assert!(out.iter().all(|v| v.is_finite()));
                dt
            })
            .min()
            .unwrap();
        eprintln!("{pass:?}: {dt:?}");
        if !cfg!(debug_assertions) {
            assert!(dt.as_millis() < 500, "{pass:?} took {dt:?}");
        }
    }
}

fn case_strategy() -> impl Strategy<Value = (Case, u64)> {
    let pass = prop::sample::select(PASSES.to_vec());
    let layout = prop::sample::select(LAYOUTS.to_vec());
    (
        pass,
        layout,
        prop::collection::vec(0usize..40, 0..5),
        0usize..20,
        1usize..40,
        1usize..70,
        any::<u64>(),
    )
        .prop_map(|(pass, layout, sizes, pad, n, k, seed)| {
            let mut offs = Vec::new();
            let mut end = 0;
            for s in sizes {
                end += s;
                offs.push(end);
            }
            (
                Case {
                    pass,
                    layout,
                    offs,
                    rows: end + pad,
                    n,
                    k,
                },
                seed,
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn random_problems_match_the_reference((case, seed) in case_strategy()) {
        let (a, b) = case.inputs(seed);
        let got = case.run_f32(&a, &b);
        prop_assert!(case.check(&a, &b, &got).is_ok(), "{:?}: {:?}", case, case.check(&a, &b, &got));
    }
}
