//! MXFP8 grouped GEMM against a naive f64 triple loop on operands dequantized by the
//! test itself (canonical layouts, per-expert wgrad quantization), across passes,
//! weight layouts, output dtypes, unaligned sizes, empty experts, padding rows, NaN
//! propagation and pre-quantized operands in non-canonical layouts.

mod common;

use common::{reference_with_bound, Rng};
use half::bf16;
use mxhost_plugin_abi::{BlockLayout, GemmPass, MxFormat, ScaleMode, WeightLayout};
use mxhost_plugin_common::args::groups_from_offs;
use mxhost_plugin_common::dense::{DenseMut, DenseRef};
use mxhost_plugin_common::gemm::{run, GroupedGemm};
use mxhost_plugin_common::host::{HostMx, HostOperand};
use mxhost_plugin_common::testing::check_close;
use mxhost_plugin_mxfp8::gemm::MxPrep;
use mxhost_plugin_mxfp8::{fake_quantize, quantize_mx, scale_count};

#[derive(Debug, Clone)]
struct Case {
    pass: GemmPass,
    layout: WeightLayout,
    offs: Vec<usize>,
    rows: usize,
    n: usize,
    k: usize,
    blocks_2d: bool,
    format: MxFormat,
    mode: ScaleMode,
}

impl Case {
    fn new(
        pass: GemmPass,
        layout: WeightLayout,
        offs: &[usize],
        rows: usize,
        n: usize,
        k: usize,
    ) -> Self {
        Case {
            pass,
            layout,
            offs: offs.to_vec(),
            rows,
            n,
            k,
            blocks_2d: false,
            format: MxFormat::E4m3,
            mode: ScaleMode::Rceil,
        }
    }
    fn e(&self) -> usize {
        self.offs.len()
    }
    fn shapes(&self) -> (Vec<u64>, Vec<u64>, usize) {
        let (e, r, n, k) = (
            self.e() as u64,
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
            GemmPass::Wgrad => (vec![r, n], vec![r, k], self.e() * self.n * self.k),
        }
    }
    fn inputs(&self, seed: u64) -> (Vec<f32>, Vec<f32>) {
        let mut rng = Rng::new(seed);
        let (sa, sb, _) = self.shapes();
        let na = sa.iter().product::<u64>() as usize;
        let nb = sb.iter().product::<u64>() as usize;
        (rng.normals(na, 1.0), rng.normals(nb, 0.05))
    }
    fn problem<'g>(&self, groups: &'g [std::ops::Range<usize>]) -> GroupedGemm<'g> {
        GroupedGemm {
            pass: self.pass,
            weight_layout: self.layout,
            groups,
            rows: self.rows,
            n: self.n,
            k: self.k,
        }
    }
    fn prep(&self) -> MxPrep {
        MxPrep::new(self.format, self.mode, self.blocks_2d)
    }

    /// Run through the plugin with dense f32 operands into a NaN-poisoned f32 output.
    fn run_f32(&self, a: &[f32], b: &[f32]) -> Vec<f32> {
        let (sa, sb, no) = self.shapes();
        let groups = groups_from_offs(&self.offs);
        let mut out = vec![f32::NAN; no];
        run(
            &self.problem(&groups),
            HostOperand::Dense {
                data: DenseRef::F32(a),
                shape: &sa,
            },
            HostOperand::Dense {
                data: DenseRef::F32(b),
                shape: &sb,
            },
            DenseMut::F32(&mut out),
            &self.prep(),
        )
        .unwrap();
        out
    }

    /// What the plugin must compute: canonical fake quantization done here, then f64;
    /// with Σ|a·b| per element for the error bound.
    fn expected(&self, a: &[f32], b: &[f32]) -> (Vec<f64>, Vec<f64>) {
        let (sa, sb, _) = self.shapes();
        let fq = |x: &[f32], shape: &[u64], l: BlockLayout| {
            fake_quantize(x, shape, l, self.format, self.mode).unwrap()
        };
        let (qa, qb) = match self.pass {
            GemmPass::Forward | GemmPass::Dgrad => {
                let axis = match (self.pass, self.layout) {
                    (GemmPass::Forward, WeightLayout::Nk) | (GemmPass::Dgrad, WeightLayout::Kn) => {
                        2
                    }
                    _ => 1,
                };
                let wl = if self.blocks_2d {
                    BlockLayout::tile()
                } else {
                    BlockLayout::vector(axis)
                };
                (fq(a, &sa, BlockLayout::vector(1)), fq(b, &sb, wl))
            }
            GemmPass::Wgrad => {
                let per_expert = |x: &[f32], p: usize| {
                    let mut out = vec![0f32; x.len()];
                    for g in groups_from_offs(&self.offs) {
                        let q = fq(
                            &x[g.start * p..g.end * p],
                            &[g.len() as u64, p as u64],
                            BlockLayout::vector(0),
                        );
                        out[g.start * p..g.end * p].copy_from_slice(&q);
                    }
                    out
                };
                (per_expert(a, self.n), per_expert(b, self.k))
            }
        };
        reference(self, &qa, &qb)
    }
}

fn reference(case: &Case, qa: &[f32], qb: &[f32]) -> (Vec<f64>, Vec<f64>) {
    reference_with_bound(
        case.pass,
        case.layout,
        qa,
        qb,
        &case.offs,
        case.rows,
        case.n,
        case.k,
    )
}

/// Every element written, padding rows exactly zero, and each value within the
/// worst-case f32 summation error of the f64 reference.
fn check(case: &Case, got: &[f32], (want, absum): &(Vec<f64>, Vec<f64>)) {
    let depth = match case.pass {
        GemmPass::Forward => case.k,
        GemmPass::Dgrad => case.n,
        GemmPass::Wgrad => case.rows,
    };
    if let Err(e) = check_close(got, want, absum, depth) {
        panic!("{case:?}: {e}");
    }
    if matches!(case.pass, GemmPass::Forward | GemmPass::Dgrad) {
        let used = case.offs.last().copied().unwrap_or(0);
        let width = got.len() / case.rows.max(1);
        assert!(
            got[used * width..].iter().all(|&v| v == 0.0),
            "{case:?}: padding rows not zero"
        );
    }
}

const PASSES: [GemmPass; 3] = [GemmPass::Forward, GemmPass::Dgrad, GemmPass::Wgrad];
const LAYOUTS: [WeightLayout; 2] = [WeightLayout::Nk, WeightLayout::Kn];

#[test]
fn all_passes_and_layouts_match_the_reference() {
    // Unaligned rows and group boundaries, an empty leading and middle expert, padding.
    let offs = [0, 37, 37, 100, 161];
    for pass in PASSES {
        for layout in LAYOUTS {
            for (format, mode) in [
                (MxFormat::E4m3, ScaleMode::Rceil),
                (MxFormat::E5m2, ScaleMode::Floor),
                (MxFormat::E4m3, ScaleMode::Even),
            ] {
                let mut case = Case::new(pass, layout, &offs, 170, 48, 72);
                case.format = format;
                case.mode = mode;
                let (a, b) = case.inputs(11);
                check(&case, &case.run_f32(&a, &b), &case.expected(&a, &b));
            }
        }
    }
}

#[test]
fn weight_tiles_when_blocks_2d() {
    for pass in [GemmPass::Forward, GemmPass::Dgrad] {
        for layout in LAYOUTS {
            let mut case = Case::new(pass, layout, &[50, 90], 96, 70, 45);
            case.blocks_2d = true;
            let (a, mut b) = case.inputs(12);
            // Magnitudes spread over 2^±12 inside each tile: with power-of-two scales,
            // tiles and vectors then differ (small values fall into the subnormals of a
            // tile's larger scale); with uniform magnitudes they often coincide.
            for (i, v) in b.iter_mut().enumerate() {
                *v *= 2f32.powi((i % 13) as i32 - 6) * 2f32.powi(((i / 45) % 7) as i32 * 2 - 6);
            }
            let got = case.run_f32(&a, &b);
            check(&case, &got, &case.expected(&a, &b));
            // And it really differs from 1×32 weight blocks.
            case.blocks_2d = false;
            let vec = case.run_f32(&a, &b);
            let differ = got.iter().zip(&vec).filter(|(x, y)| x != y).count();
            assert!(
                differ > got.len() / 4,
                "{pass:?} {layout:?}: only {differ} of {} differ",
                got.len()
            );
        }
    }
}

#[test]
fn k_not_a_multiple_of_32_or_128() {
    for k in [40, 2880] {
        for pass in PASSES {
            let case = Case::new(pass, WeightLayout::Nk, &[33, 70], 75, 24, k);
            let (a, b) = case.inputs(13 + k as u64);
            check(&case, &case.run_f32(&a, &b), &case.expected(&a, &b));
        }
    }
}

#[test]
fn wgrad_quantizes_each_expert_separately() {
    // Boundaries at 37 and 100 are not multiples of 32: a global quantization along M
    // would mix experts in one block and give different numbers.
    let case = Case::new(GemmPass::Wgrad, WeightLayout::Nk, &[37, 100], 100, 16, 16);
    let (mut a, b) = case.inputs(14);
    // Make expert 0's rows tiny next to expert 1's, so shared blocks would crush them.
    for v in &mut a[..37 * 16] {
        *v *= 1e-6;
    }
    let got = case.run_f32(&a, &b);
    check(&case, &got, &case.expected(&a, &b));
    assert!(got[..16 * 16].iter().any(|&v| v != 0.0));
}

#[test]
fn empty_experts_and_no_experts() {
    for pass in PASSES {
        for offs in [&[0usize, 0, 0][..], &[0, 64, 64], &[64, 64, 64], &[]] {
            let case = Case::new(pass, WeightLayout::Nk, offs, 80, 32, 32);
            let (a, b) = case.inputs(15);
            let got = case.run_f32(&a, &b);
            check(&case, &got, &case.expected(&a, &b));
            if pass == GemmPass::Wgrad {
                // Experts 0 and 2 of [0, 64, 64] are empty: zero gradients.
                if offs == [0, 64, 64] {
                    assert!(got[..32 * 32].iter().all(|&v| v == 0.0));
                    assert!(got[2 * 32 * 32..].iter().all(|&v| v == 0.0));
                }
            }
        }
    }
}

#[test]
fn kn_and_nk_agree() {
    let (e, n, k) = (3usize, 40usize, 56usize);
    let offs = [20, 50, 64];
    for pass in PASSES {
        let nk = Case::new(pass, WeightLayout::Nk, &offs, 70, n, k);
        let kn = Case::new(pass, WeightLayout::Kn, &offs, 70, n, k);
        let (a, b) = nk.inputs(16);
        let transpose = |w: &[f32], d1: usize, d2: usize| -> Vec<f32> {
            let mut t = vec![0f32; w.len()];
            for ex in 0..w.len() / (d1 * d2) {
                for i in 0..d1 {
                    for j in 0..d2 {
                        t[ex * d1 * d2 + j * d1 + i] = w[ex * d1 * d2 + i * d2 + j];
                    }
                }
            }
            t
        };
        let (got_nk, got_kn) = match pass {
            GemmPass::Wgrad => (nk.run_f32(&a, &b), transpose(&kn.run_f32(&a, &b), k, n)),
            _ => (nk.run_f32(&a, &b), kn.run_f32(&a, &transpose(&b, n, k))),
        };
        assert_eq!(got_nk.len(), got_kn.len());
        let _ = e;
        for (x, y) in got_nk.iter().zip(&got_kn) {
            assert!(
                (x - y).abs() <= 1e-5 * x.abs().max(1.0),
                "{pass:?}: {x} vs {y}"
            );
        }
    }
}

#[test]
fn nan_propagates_to_exactly_the_affected_outputs() {
    let case = Case::new(GemmPass::Forward, WeightLayout::Nk, &[40, 80], 90, 32, 64);
    let (mut a, b) = case.inputs(17);
    a[45 * 64 + 3] = f32::NAN; // row 45 (expert 1), first K block
    let got = case.run_f32(&a, &b);
    for r in 0..90 {
        let row = &got[r * 32..(r + 1) * 32];
        if r == 45 {
            assert!(row.iter().all(|v| v.is_nan()));
        } else {
            assert!(row.iter().all(|v| v.is_finite()), "row {r}");
        }
    }
    // An Inf weight poisons its expert's outputs in forward.
    let (a, mut b) = case.inputs(18);
    b[32 * 64 + 5] = f32::INFINITY; // expert 1, n = 0
    let got = case.run_f32(&a, &b);
    assert!((40..80).all(|r| got[r * 32].is_nan()));
    assert!((0..40).all(|r| got[r * 32].is_finite()));
}

#[test]
fn bf16_output_is_the_rounded_f32_output() {
    for pass in PASSES {
        let case = Case::new(pass, WeightLayout::Nk, &[30, 70], 100, 48, 40);
        let (a, b) = case.inputs(19);
        let f = case.run_f32(&a, &b);
        let (sa, sb, no) = case.shapes();
        let groups = groups_from_offs(&case.offs);
        let mut out = vec![bf16::NAN; no];
        run(
            &case.problem(&groups),
            HostOperand::Dense {
                data: DenseRef::F32(&a),
                shape: &sa,
            },
            HostOperand::Dense {
                data: DenseRef::F32(&b),
                shape: &sb,
            },
            DenseMut::Bf16(&mut out),
            &case.prep(),
        )
        .unwrap();
        let want: Vec<u16> = f.iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
        assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
    }
}

#[test]
fn bf16_operands_equal_their_f32_widening() {
    let case = Case::new(GemmPass::Forward, WeightLayout::Nk, &[30, 64], 64, 32, 64);
    let (a, b) = case.inputs(20);
    let ab: Vec<bf16> = a.iter().map(|&v| bf16::from_f32(v)).collect();
    let a_round: Vec<f32> = ab.iter().map(|v| v.to_f32()).collect();
    let (sa, sb, no) = case.shapes();
    let groups = groups_from_offs(&case.offs);
    let mut out = vec![f32::NAN; no];
    run(
        &case.problem(&groups),
        HostOperand::Dense {
            data: DenseRef::Bf16(&ab),
            shape: &sa,
        },
        HostOperand::Dense {
            data: DenseRef::F32(&b),
            shape: &sb,
        },
        DenseMut::F32(&mut out),
        &case.prep(),
    )
    .unwrap();
    assert_eq!(out, case.run_f32(&a_round, &b));
}

#[test]
fn pre_quantized_operands_in_any_layout_are_dequantized_as_given() {
    let case = Case::new(GemmPass::Forward, WeightLayout::Nk, &[40, 96], 100, 48, 72);
    let (a, b) = case.inputs(21);
    let (sa, sb, no) = case.shapes();
    // A as 32×32 tiles (not the canonical 1×32 along K), W as column vectors along N.
    let (la, lb) = (BlockLayout::tile(), BlockLayout::vector(1));
    let q = |x: &[f32], shape: &[u64], l: BlockLayout, f: MxFormat| {
        let mut d = vec![0u8; x.len()];
        let mut s = vec![0u8; scale_count(shape, l).unwrap()];
        quantize_mx(x, shape, l, f, ScaleMode::Floor, &mut d, &mut s).unwrap();
        (d, s)
    };
    let (ad, ascl) = q(&a, &sa, la, MxFormat::E5m2);
    let (bd, bscl) = q(&b, &sb, lb, MxFormat::E4m3);
    let groups = groups_from_offs(&case.offs);
    let mut out = vec![f32::NAN; no];
    let mx = |data: &'static [u8], scales: &'static [u8], shape: &'static [u64], format, block| {
        HostOperand::Mx(HostMx {
            data,
            scales,
            shape,
            format,
            mode: ScaleMode::Floor,
            block,
        })
    };
    let leak = |v: Vec<u8>| -> &'static [u8] { Box::leak(v.into_boxed_slice()) };
    let leak64 = |v: Vec<u64>| -> &'static [u64] { Box::leak(v.into_boxed_slice()) };
    run(
        &case.problem(&groups),
        mx(leak(ad), leak(ascl), leak64(sa.clone()), MxFormat::E5m2, la),
        mx(leak(bd), leak(bscl), leak64(sb.clone()), MxFormat::E4m3, lb),
        DenseMut::F32(&mut out),
        // Options that differ from the operands': they must be ignored for Mx operands.
        &MxPrep::new(MxFormat::E4m3, ScaleMode::Rceil, true),
    )
    .unwrap();
    let qa = fake_quantize(&a, &sa, la, MxFormat::E5m2, ScaleMode::Floor).unwrap();
    let qb = fake_quantize(&b, &sb, lb, MxFormat::E4m3, ScaleMode::Floor).unwrap();
    check(&case, &out, &reference(&case, &qa, &qb));
}

#[test]
fn demo_sized_gemm_is_fast_enough() {
    // 8 experts × 512 rows, K = 256, N = 512: each pass must take milliseconds in a
    // release build. Debug builds are far slower, so only report there.
    let offs: Vec<usize> = (1..=8).map(|e| e * 512).collect();
    for pass in PASSES {
        let case = Case::new(pass, WeightLayout::Nk, &offs, 4096, 512, 256);
        let (a, b) = case.inputs(22);
        // Best of a few runs (the first also warms the thread pool).
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
