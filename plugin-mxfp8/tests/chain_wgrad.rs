//! The exact decomposition the chained wgrad computes (`mx_cgemm_w_*`, `MXHOST_MX_CHAIN_WGRAD=1`;
//! docs/perf.md, twenty-third part), checked on the CPU. wgrad reduces over each
//! expert's rows M, with both operands quantized 1×32 along M (blocks restarting at each
//! expert). Laid out as a chained GEMM reads them — dYᵀ `[N][Mpad]` and Xᵀ `[K][Mpad]`, each
//! expert's rows padded to whole 128-row stages — both are re-encoded *per row* (per output
//! row n of dYᵀ, per output column k of Xᵀ: one scale per row and stage, the scale layout
//! `examples/wgrad_stage_residuals.rs` shows is needed) by `reencode_rows`, and then for
//! expert e, over its stages only,
//!   out_e = A'B'ᵀ (one promotion per stage: row scale × column scale)
//!         + A_res · B   (A's residual entries of the expert's rows, B's original values)
//!         + A' · B_resᵀ (B's residual entries of the expert's rows, A's re-encoded values)
//! equals dY_eᵀ · X_e of the MX values. The residual lists are per row over all of Mpad, in
//! m order, so an expert's entries are one contiguous run of each list.

use mxhost_plugin_abi::{BlockLayout, MxFormat, ScaleMode};
use mxhost_plugin_common::testing::Rng;
use mxhost_plugin_mxfp8::numerics::e8m0::scale_value;
use mxhost_plugin_mxfp8::numerics::element::decode;
use mxhost_plugin_mxfp8::numerics::reencode::{reencode_rows, Residual, StageUniform, STAGE};
use mxhost_plugin_mxfp8::quantize_mx;

const F: MxFormat = MxFormat::E4m3;

/// An operand `[P][Mpad]` quantized 1×32 along M: bytes, scales, and its MX values.
struct AlongM {
    p: usize,
    mpad: usize,
    bytes: Vec<u8>,
    scales: Vec<u8>,
}

impl AlongM {
    /// `x` is `[rows][p]` row-major; expert e's rows `segs[e]` go to columns
    /// `pad_starts[e] ..` of the transposed, padded layout (zeros elsewhere).
    fn new(
        x: &[f32],
        p: usize,
        segs: &[(usize, usize)],
        pad_starts: &[usize],
        mpad: usize,
    ) -> Self {
        let mut t = vec![0f32; p * mpad];
        for (&(r0, len), &c0) in segs.iter().zip(pad_starts) {
            for i in 0..len {
                for j in 0..p {
                    t[j * mpad + c0 + i] = x[(r0 + i) * p + j];
                }
            }
        }
        let (mut bytes, mut scales) = (vec![0u8; p * mpad], vec![0u8; p * mpad / 32]);
        let shape = [p as u64, mpad as u64];
        quantize_mx(
            &t,
            &shape,
            BlockLayout::vector(1),
            F,
            ScaleMode::Rceil,
            &mut bytes,
            &mut scales,
        )
        .expect("quantize along M");
        AlongM {
            p,
            mpad,
            bytes,
            scales,
        }
    }

    fn value(&self, j: usize, m: usize) -> f64 {
        decode(self.bytes[j * self.mpad + m], F) as f64
            * scale_value(self.scales[j * self.mpad / 32 + m / 32]) as f64
    }

    fn reencoded(&self) -> StageUniform {
        reencode_rows(&self.bytes, &self.scales, self.p, self.mpad, F).expect("finite")
    }
}

/// Row `j`'s residual entries with m in `ms` (a contiguous run: the lists are in m order).
fn entries(res: &[Residual], j: usize, ms: std::ops::Range<usize>) -> &[Residual] {
    let lo = res.partition_point(|r| (r.row, r.k) < (j, ms.start));
    let hi = res.partition_point(|r| (r.row, r.k) < (j, ms.end));
    &res[lo..hi]
}

/// Activations with channel magnitudes over two decades, and in every 32-row block a few tiny
/// values: the re-encoding leaves residuals in both operands.
fn activations(rng: &mut Rng, rows: usize, p: usize) -> Vec<f32> {
    let chan: Vec<f64> = (0..p).map(|_| (2.3 * rng.normal()).exp()).collect();
    (0..rows * p)
        .map(|i| {
            let v = rng.normal() * chan[i % p];
            (if rng.below(16) == 0 { v * 1e-4 } else { v }) as f32
        })
        .collect()
}

#[test]
fn per_row_stage_reencoding_gives_each_experts_wgrad_exactly() {
    let mut rng = Rng::new(31);
    // Unaligned experts, empty ones, one longer than a stage; N, K not multiples of 32.
    let lens = [0usize, 100, 256, 37, 0, 300];
    let (n, k) = (40, 72);
    let mut segs = Vec::new();
    let (mut r0, mut pad_starts, mut mpad) = (0, Vec::new(), 0);
    for &m in &lens {
        segs.push((r0, m));
        pad_starts.push(mpad);
        r0 += m;
        mpad += m.div_ceil(STAGE) * STAGE;
    }
    let rows = r0;
    let (dy, x) = (
        activations(&mut rng, rows, n),
        activations(&mut rng, rows, k),
    );
    let a = AlongM::new(&dy, n, &segs, &pad_starts, mpad);
    let b = AlongM::new(&x, k, &segs, &pad_starts, mpad);
    let (ra, rb) = (a.reencoded(), b.reencoded());
    assert!(
        ra.residuals.len() > 10 && rb.residuals.len() > 10,
        "the case must exercise both corrections: {} / {}",
        ra.residuals.len(),
        rb.residuals.len()
    );
    let re_value = |s: &StageUniform, o: &AlongM, j: usize, m: usize| {
        decode(s.bytes[j * o.mpad + m], F) as f64
            * scale_value(s.scales[j * o.mpad / 32 + m / 32]) as f64
    };
    for (e, (&(_, len), &c0)) in segs.iter().zip(&pad_starts).enumerate() {
        let span = c0..c0 + len.div_ceil(STAGE) * STAGE;
        for i in 0..n {
            for j in 0..k {
                // What the kernel would add, term by term.
                let mut chained = 0f64;
                for s0 in span.clone().step_by(STAGE) {
                    // one promotion per stage: the stage's partial sum of the re-encoded
                    // element values times the row's and the column's stage scales
                    let (sa, sb) = (
                        ra.scales[i * mpad / 32 + s0 / 32],
                        rb.scales[j * mpad / 32 + s0 / 32],
                    );
                    let partial: f64 = (s0..s0 + STAGE)
                        .map(|m| {
                            decode(ra.bytes[i * mpad + m], F) as f64
                                * decode(rb.bytes[j * mpad + m], F) as f64
                        })
                        .sum();
                    chained += partial * scale_value(sa) as f64 * scale_value(sb) as f64;
                }
                let a_res: f64 = entries(&ra.residuals, i, span.clone())
                    .iter()
                    .map(|r| r.value * b.value(j, r.k))
                    .sum();
                let b_res: f64 = entries(&rb.residuals, j, span.clone())
                    .iter()
                    .map(|r| re_value(&ra, &a, i, r.k) * r.value)
                    .sum();
                let got = chained + a_res + b_res;
                // dY_eᵀ X_e of the MX values, directly.
                let (mut want, mut absum) = (0f64, 0f64);
                for m in span.clone() {
                    let t = a.value(i, m) * b.value(j, m);
                    want += t;
                    absum += t.abs();
                }
                assert!(
                    (got - want).abs() <= 1e-12 * absum.max(f64::MIN_POSITIVE),
                    "expert {e}, out[{i}][{j}]: {got} against {want} (absum {absum})"
                );
            }
        }
    }
}

#[test]
fn residual_lists_run_in_m_order_within_each_row() {
    let mut rng = Rng::new(7);
    let (rows, p) = (512, 24);
    let x = activations(&mut rng, rows, p);
    let a = AlongM::new(&x, p, &[(0, rows)], &[0], rows);
    let res = a.reencoded().residuals;
    assert!(!res.is_empty());
    assert!(
        res.windows(2)
            .all(|w| (w[0].row, w[0].k) < (w[1].row, w[1].k)),
        "not in (row, m) order"
    );
}
