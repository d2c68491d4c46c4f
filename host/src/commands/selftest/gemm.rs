//! The grouped GEMM checks: a `GemmCase` (pass, expert sizes, layouts, operand kinds) run
//! on both devices, the CPU reference on all experts or a sample, compared by SNR.

use super::compare::compare;
use super::inputs::{bytes_bf16, gen};
use super::Ctx;
use crate::device::Device;
use crate::error::{ErrorKind, OpResult};
use crate::ops::{self, GemmConfig, GemmOperand};
use crate::tensor::{MxTensor, Tensor};
use mxhost_plugin_abi::{BlockLayout, DType, GemmPass, MxFormat, ScaleMode, WeightLayout};
use std::time::Instant;

impl Ctx {
    /// One grouped GEMM pass on both devices.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gemm_case(&mut self, label: &str, g: &GemmCase) {
        if !self.quantizes && (g.mx || g.expect_unsupported) {
            return;
        }
        let t0 = Instant::now();
        let case = format!(
            "{} E={} m={} K={} N={}{}",
            label,
            g.sizes.len(),
            g.sizes_desc(),
            g.k,
            g.n,
            g.extra()
        );
        let check = format!(
            "{} {}{}",
            match g.pass {
                GemmPass::Forward => "fwd",
                GemmPass::Dgrad => "dgrad",
                GemmPass::Wgrad => "wgrad",
            },
            if g.mx { "MX " } else { "dense " },
            if g.pass == GemmPass::Wgrad {
                "1x32".to_string()
            } else if g.w2d {
                "w32x32".into()
            } else {
                "w1x32".into()
            }
        );
        let r = self.run_gemm(g);
        self.push(&check, case, t0, r);
    }

    fn run_gemm(&self, g: &GemmCase) -> OpResult<(bool, Option<f64>, Option<f64>, String)> {
        let (k, n, e) = (g.k, g.n, g.sizes.len());
        let mut offs = Vec::with_capacity(e);
        let mut acc = 0usize;
        for &m in &g.sizes {
            acc += m;
            offs.push(acc as i32);
        }
        let rows = acc + g.pad_rows;
        let a_cols = if g.pass == GemmPass::Forward { k } else { n };
        let mut a = gen(rows, a_cols, g.seed, 1.0, false);
        if g.nan_row {
            a[5 * a_cols + a_cols / 3] = f32::NAN;
        }
        let kn = g.layout == WeightLayout::Kn;
        let wshape: [usize; 3] = if kn { [e, k, n] } else { [e, n, k] };
        let mut b_vals = if g.pass == GemmPass::Wgrad {
            gen(rows, k, g.seed + 1, 1.0, false)
        } else {
            gen(e * wshape[1], wshape[2], g.seed + 1, WEIGHT_STD, false)
        };
        // The reduction is the weight's stored axis 2 when forward reads [E, N, K] or dgrad
        // reads [E, K, N], else its axis 1.
        let red_last = (g.pass == GemmPass::Forward) != kn;
        if g.residual_carried {
            residual_carried(&mut a, a_cols, &mut b_vals, wshape, red_last, g.seed);
        }
        if g.b_residual_carried {
            b_residual_carried(&mut a, a_cols, &mut b_vals, wshape, red_last);
        }
        let b_shape: Vec<u64> = if g.pass == GemmPass::Wgrad {
            vec![rows as u64, k as u64]
        } else {
            wshape.iter().map(|&d| d as u64).collect()
        };
        let cfg = GemmConfig {
            format: g.format,
            mode: ScaleMode::Rceil,
            weight_blocks_2d: g.w2d,
            weight_layout: g.layout,
            out_dtype: g.out,
            ..GemmConfig::default()
        };
        // The case's GEMM on these offsets: an operand given quantized goes as MX, else dense.
        let gemm = |qa: Option<&MxTensor>, a: &Tensor, qb: Option<&MxTensor>, b: &Tensor| {
            let a = qa.map_or(GemmOperand::Dense(a), GemmOperand::Mx);
            let b = qb.map_or(GemmOperand::Dense(b), GemmOperand::Mx);
            ops::grouped_gemm(&self.plugin, g.pass, a, b, &offs, &cfg)
        };
        // ---- GPU, full problem ----
        let ag = Tensor::from_bytes_on(
            self.gpu,
            vec![rows as u64, a_cols as u64],
            DType::Bf16,
            &bytes_bf16(&a),
        )?;
        let bg =
            Tensor::from_bytes_on(self.gpu, b_shape.clone(), DType::Bf16, &bytes_bf16(&b_vals))?;
        // Pre-quantized operands: quantized once on the CPU, the same bytes on both sides.
        let (a_blk, b_blk) = match g.pass {
            GemmPass::Forward | GemmPass::Dgrad => (
                g.a_block.unwrap_or(BlockLayout::vector(1)),
                if g.w2d {
                    BlockLayout::tile()
                } else {
                    // along the reduction axis of the stored weight
                    let red_last = (g.pass == GemmPass::Forward) != kn;
                    BlockLayout::vector(if red_last { 2 } else { 1 })
                },
            ),
            GemmPass::Wgrad => (
                BlockLayout::vector(0),
                g.wgrad_x_block.unwrap_or(BlockLayout::vector(0)),
            ),
        };
        let a_cpu_full =
            Tensor::from_bytes_on(Device::Cpu, ag.shape.clone(), DType::Bf16, &bytes_bf16(&a))?;
        let b_cpu_full = Tensor::from_bytes_on(
            Device::Cpu,
            bg.shape.clone(),
            DType::Bf16,
            &bytes_bf16(&b_vals),
        )?;
        let (qa_c, qb_c) = if g.mx {
            (
                if g.dense_a {
                    None
                } else {
                    Some(ops::quantize(
                        &self.plugin,
                        &a_cpu_full,
                        g.format,
                        ScaleMode::Rceil,
                        a_blk,
                    )?)
                },
                if g.dense_b {
                    None
                } else {
                    Some(ops::quantize(
                        &self.plugin,
                        &b_cpu_full,
                        g.format,
                        ScaleMode::Rceil,
                        b_blk,
                    )?)
                },
            )
        } else {
            (None, None)
        };
        // Values kept (ABI 1.2): the GPU operands quantized on the GPU with their bf16
        // values (the same bytes: the quantizer checks above are bit-exact), the weight
        // with swapped values by quantizing its transpose with a transposed copy.
        // Quantized on the GPU without values (`quantized_on_gpu`): the same path, for a GEMM
        // (ABI 1.6 `for_gemm`), so that the plugin's annexes (ABI 1.3) come along as they
        // come for guest-sdk's GroupedLinear: the chained GEMM by default on a Hopper GPU.
        let on_gpu = g
            .keep_values
            .or(g.quantized_on_gpu.then_some(g.layout == WeightLayout::Kn))
            .filter(|_| g.mx && !g.dense_b);
        // The weight transposed on the GPU, for the swapped quantize (made once: a repeated
        // case quantizes it from the same buffer every time).
        let bt_g = match on_gpu {
            Some(true) => {
                let (b0, r, c) = (
                    b_shape[0] as usize,
                    b_shape[1] as usize,
                    b_shape[2] as usize,
                );
                let mut bt = vec![0f32; b_vals.len()];
                for (i, v) in b_vals.iter().enumerate() {
                    let (bi, ri, ci) = (i / (r * c), i / c % r, i % c);
                    bt[bi * r * c + ci * r + ri] = *v;
                }
                Some(Tensor::from_bytes_on(
                    self.gpu,
                    vec![b0 as u64, c as u64, r as u64],
                    DType::Bf16,
                    &bytes_bf16(&bt),
                )?)
            }
            _ => None,
        };
        // The weight named at A's quantize call (ABI 1.9) where the case asks and it fits: A
        // along its rows, the weight's reduction its last axis.
        let named = g
            .name_weight
            .filter(|_| on_gpu.is_some() && red_last && a_blk == BlockLayout::vector(1));
        // The GPU side: quantized on the GPU (or uploaded) and multiplied; run `g.repeat`
        // times from the same input buffers when the case asks (the plugin's gate memory then
        // meets the same operands again), each result checked below.
        let run_gpu = || -> OpResult<OpResult<Tensor>> {
            let (qa_g, qb_g) = if on_gpu.is_some() {
                let keep = ops::QuantizeExtras {
                    transposed: false,
                    keep_values: g.keep_values.is_some(),
                    for_gemm: g.keep_values.is_none(),
                };
                let q = |t: &Tensor, blk, extras| {
                    ops::quantize_with(&self.plugin, t, g.format, ScaleMode::Rceil, blk, extras)
                };
                // (the weight first: A may name it)
                let qb = || -> OpResult<MxTensor> {
                    Ok(if let Some(btg) = &bt_g {
                        let extras = ops::QuantizeExtras {
                            transposed: true,
                            ..keep
                        };
                        let blk_t = mxhost_plugin_abi::transposed_block(b_blk, 3);
                        q(btg, blk_t, extras)?.1.expect("requested")
                    } else {
                        q(&bg, b_blk, keep)?.0
                    })
                };
                let mut qb_g = qb()?;
                let qa_g = match (g.dense_a, named) {
                    (true, _) => None,
                    (false, Some(fresh)) => {
                        let fmb = (g.format, ScaleMode::Rceil, a_blk);
                        let w = Some(&qb_g);
                        let qa = ops::quantize_with_wgrad_values(
                            &self.plugin,
                            &ag,
                            fmb,
                            keep,
                            &offs,
                            w,
                        )?
                        .0;
                        if !fresh {
                            // (the named fill goes stale: the GEMM must write A's `at` whole)
                            qb_g = qb()?;
                        }
                        Some(qa)
                    }
                    (false, None) => Some(q(&ag, a_blk, keep)?.0),
                };
                (qa_g, Some(qb_g))
            } else {
                (
                    qa_c.as_ref().map(|a| a.to_device(self.gpu)).transpose()?,
                    qb_c.as_ref().map(|b| b.to_device(self.gpu)).transpose()?,
                )
            };
            Ok(gemm(qa_g.as_ref(), &ag, qb_g.as_ref(), &bg))
        };
        let out_g = match (run_gpu()?, g.expect_unsupported) {
            (Err(e), true) if e.kind == ErrorKind::Unsupported => {
                return Ok((
                    true,
                    None,
                    None,
                    format!("Unsupported as expected: {}", e.message),
                ))
            }
            (Ok(_), true) => {
                return Ok((
                    false,
                    None,
                    None,
                    "expected Unsupported, got a result".into(),
                ))
            }
            (r, _) => r?,
        };
        let gpu_out = out_g.try_to_f32_vec()?;
        let mut repeated = Vec::new();
        for _ in 1..g.repeat {
            repeated.push(run_gpu()??.try_to_f32_vec()?);
        }
        // ---- CPU reference, on a sample of experts when the problem is large ----
        let sample: Vec<usize> = if g.sample && e > 2 {
            vec![0, e - 1]
        } else {
            (0..e).collect()
        };
        let full = sample.len() == e && !g.sample;
        let starts: Vec<usize> = (0..e)
            .map(|i| if i == 0 { 0 } else { offs[i - 1] as usize })
            .collect();
        let (out_c, ref_gpu): (Vec<f32>, Vec<f32>) = if full {
            let out_c = gemm(qa_c.as_ref(), &a_cpu_full, qb_c.as_ref(), &b_cpu_full)?;
            (out_c.try_to_f32_vec()?, gpu_out)
        } else {
            // Sub-problem: the sampled experts' rows (forward/dgrad: up to 128 rows at
            // each end of the expert), their weights; rows of the GPU output to match.
            let out_cols = match g.pass {
                GemmPass::Forward => n,
                GemmPass::Dgrad => k,
                GemmPass::Wgrad => 0,
            };
            let mut row_sel: Vec<usize> = Vec::new();
            let mut sub_offs: Vec<i32> = Vec::new();
            for &ei in &sample {
                let (s, m) = (starts[ei], g.sizes[ei]);
                if g.pass == GemmPass::Wgrad || m <= 256 {
                    row_sel.extend(s..s + m);
                } else {
                    row_sel.extend(s..s + 128);
                    row_sel.extend(s + m - 128..s + m);
                }
                sub_offs.push(row_sel.len() as i32);
            }
            let a_host = a_cpu_full.host_bytes()?;
            let a_rb = a_cols * 2;
            let a_sub: Vec<u8> = row_sel
                .iter()
                .flat_map(|&r| a_host[r * a_rb..(r + 1) * a_rb].iter().copied())
                .collect();
            let a_sub_t = Tensor::from_bytes_on(
                Device::Cpu,
                vec![row_sel.len() as u64, a_cols as u64],
                DType::Bf16,
                &a_sub,
            )?;
            let b_host = b_cpu_full.host_bytes()?;
            let b_sub_t = if g.pass == GemmPass::Wgrad {
                let rb = k * 2;
                let b_sub: Vec<u8> = row_sel
                    .iter()
                    .flat_map(|&r| b_host[r * rb..(r + 1) * rb].iter().copied())
                    .collect();
                Tensor::from_bytes_on(
                    Device::Cpu,
                    vec![row_sel.len() as u64, k as u64],
                    DType::Bf16,
                    &b_sub,
                )?
            } else {
                let per = wshape[1] * wshape[2] * 2;
                let b_sub: Vec<u8> = sample
                    .iter()
                    .flat_map(|&ei| b_host[ei * per..(ei + 1) * per].iter().copied())
                    .collect();
                Tensor::from_bytes_on(
                    Device::Cpu,
                    vec![sample.len() as u64, wshape[1] as u64, wshape[2] as u64],
                    DType::Bf16,
                    &b_sub,
                )?
            };
            let out_c = ops::grouped_gemm(
                &self.plugin,
                g.pass,
                GemmOperand::Dense(&a_sub_t),
                GemmOperand::Dense(&b_sub_t),
                &sub_offs,
                &cfg,
            )?
            .try_to_f32_vec()?;
            let mut sel = Vec::with_capacity(out_c.len());
            if g.pass == GemmPass::Wgrad {
                let per = n * k;
                for &ei in &sample {
                    sel.extend_from_slice(&gpu_out[ei * per..(ei + 1) * per]);
                }
            } else {
                for &r in &row_sel {
                    sel.extend_from_slice(&gpu_out[r * out_cols..(r + 1) * out_cols]);
                }
            }
            (out_c, sel)
        };
        let (rel, snr, nan_ok) = compare(&ref_gpu, &out_c);
        let (snr_gate, rel_gate) = if g.out == DType::Bf16 {
            (40.0, 2e-2)
        } else {
            (75.0, 2e-3)
        };
        let mut ok = nan_ok && snr >= snr_gate && rel <= rel_gate && ref_gpu.len() == out_c.len();
        let mut note = format!(
            "gate SNR≥{snr_gate} dB, rel≤{rel_gate:.0e}{}",
            if full {
                ""
            } else {
                "; CPU on experts {first,last}"
            }
        );
        if g.nan_row {
            // The NaN row must be all NaN (its X row has a NaN), every other row finite.
            let cols = if g.pass == GemmPass::Forward { n } else { k };
            let row_nan = ref_gpu[5 * cols..6 * cols].iter().all(|x| x.is_nan());
            let others = ref_gpu
                .iter()
                .enumerate()
                .filter(|(i, x)| x.is_nan() && i / cols != 5)
                .count();
            ok &= row_nan && others == 0;
            note = format!("NaN row all NaN: {row_nan}, NaN elsewhere: {others}; {note}");
        }
        if !nan_ok {
            note = format!("NaN positions differ; {note}");
        }
        let (mut rel, mut snr) = (rel, snr);
        if !repeated.is_empty() {
            // (cases that repeat compare the whole output: `full`)
            for out in &repeated {
                let (r, s, nan_same) = compare(out, &out_c);
                ok &= full && nan_same && s >= snr_gate && r <= rel_gate;
                (rel, snr) = (rel.max(r), snr.min(s));
            }
            note = format!(
                "{} calls from the same buffers, the worst shown; {note}",
                g.repeat
            );
        }
        Ok((ok, Some(rel), Some(snr), note))
    }
}

#[derive(Clone)]
pub(super) struct GemmCase {
    pass: GemmPass,
    sizes: Vec<usize>,
    pub(super) pad_rows: usize,
    k: usize,
    n: usize,
    pub(super) w2d: bool,
    pub(super) layout: WeightLayout,
    pub(super) out: DType,
    pub(super) format: MxFormat,
    pub(super) mx: bool,
    pub(super) nan_row: bool,
    pub(super) sample: bool,
    pub(super) expect_unsupported: bool,
    pub(super) seed: u64,
    /// wgrad with `mx`: X's block layout (default 1×32 along M).
    pub(super) wgrad_x_block: Option<BlockLayout>,
    /// forward/dgrad with `mx`: A's block layout (default 1×32 along its last axis).
    pub(super) a_block: Option<BlockLayout>,
    /// With `mx`: only A pre-quantized, B dense (quantized in the call).
    pub(super) dense_b: bool,
    /// With `mx`: only B pre-quantized, A dense (as guest-sdk's GroupedLinear passes them).
    pub(super) dense_a: bool,
    /// With `mx`: the GPU operands quantized on the GPU keeping their bf16 values
    /// (Some(true): the weight's values stored swapped, as a transposing quantize keeps
    /// them for its second result).
    pub(super) keep_values: Option<bool>,
    /// Forward/dgrad: A and B built so that the product is carried by the elements a
    /// re-encoding to one scale per 128-deep stage cannot keep ([`residual_carried`]): the
    /// chained GEMM (`MXHOST_MX_CHAIN`) gets it right only through its corrections.
    pub(super) residual_carried: bool,
    /// Forward/dgrad: the same for B, in one output column of 32 ([`b_residual_carried`]):
    /// a few of B's residuals per 128-column tile, which the chained GEMM adds back as its
    /// A'·B_res corrections.
    pub(super) b_residual_carried: bool,
    /// With `mx`: the GPU operands quantized on the GPU (not uploaded from the CPU's
    /// quantization; the same bytes), the weight as the transposed result of a transposing
    /// quantize when `keep_values` would say swapped, here for `Kn`. Under
    /// `MXHOST_MX_CHAIN` the plugin then fills its annexes and the chained GEMM reads them.
    pub(super) quantized_on_gpu: bool,
    /// The GPU's quantize calls and GEMM run this many times from the same buffers, every
    /// result checked (1: once). Under `MXHOST_MX_CHAIN=on` with the gate memory, an operand
    /// whose gate closed then gets no annex until the 16th call: both paths checked.
    pub(super) repeat: usize,
    /// With `quantized_on_gpu`, where the weight's reduction is its last axis (forward on
    /// `Nk`, dgrad on `Kn`): the weight quantized first and named at A's quantize call, which
    /// then writes A's wgrad values too (ABI 1.9, `quantize-with-wgrad-values-for`: the plugin
    /// may write only the part of A's form this weight's GEMM reads). `Some(false)`: the
    /// weight quantized again after A, so the named fill is stale and the GEMM must write
    /// that form whole first.
    pub(super) name_weight: Option<bool>,
}

impl GemmCase {
    pub(super) fn new(pass: GemmPass, sizes: Vec<usize>, k: usize, n: usize) -> Self {
        GemmCase {
            pass,
            sizes,
            pad_rows: 0,
            k,
            n,
            w2d: true,
            layout: WeightLayout::Nk,
            out: DType::F32,
            format: MxFormat::E4m3,
            mx: false,
            nan_row: false,
            sample: false,
            expect_unsupported: false,
            seed: 7,
            wgrad_x_block: None,
            a_block: None,
            dense_b: false,
            dense_a: false,
            keep_values: None,
            residual_carried: false,
            b_residual_carried: false,
            quantized_on_gpu: false,
            repeat: 1,
            name_weight: None,
        }
    }
    fn sizes_desc(&self) -> String {
        let s = &self.sizes;
        if s.iter().all(|&m| m == s[0]) {
            format!("{}x{}", s.len(), s[0])
        } else {
            format!("{s:?}")
        }
    }
    fn extra(&self) -> String {
        let mut v = Vec::new();
        if self.pad_rows > 0 {
            v.push(format!("pad={}", self.pad_rows));
        }
        if self.layout == WeightLayout::Kn {
            v.push("Kn".into());
        }
        if self.out == DType::Bf16 {
            v.push("bf16-out".into());
        }
        if self.format == MxFormat::E5m2 {
            v.push("e5m2".into());
        }
        if self.nan_row {
            v.push("NaN in A".into());
        }
        if self.residual_carried {
            v.push("residual-carried".into());
        }
        if self.b_residual_carried {
            v.push("B residual-carried".into());
        }
        if self.repeat > 1 {
            v.push(format!("{} calls", self.repeat));
        }
        match self.name_weight {
            Some(true) => v.push("W named".into()),
            Some(false) => v.push("W named, then quantized again".into()),
            None => {}
        }
        if self.wgrad_x_block == Some(BlockLayout::tile()) {
            v.push("X 32x32".into());
        }
        if self.dense_b {
            v.push("B dense".into());
        }
        if self.dense_a {
            v.push("A dense".into());
        }
        match self.keep_values {
            Some(false) => v.push("values kept".into()),
            Some(true) => v.push("values kept, W's swapped".into()),
            None => {}
        }
        if v.is_empty() {
            String::new()
        } else {
            format!(" {}", v.join(" "))
        }
    }
}

/// The standard deviation of the forward/dgrad weights' N(0, σ²) values.
const WEIGHT_STD: f32 = 0.05;

/// B's counterpart of [`residual_carried`], sparse: B's second 128-deep stage (reduction
/// 128..256) is zero but in output columns c % 32 == 5, where it holds 2^12 at 128 and six of
/// B's own values in 160..256; A is zero on 128..160. Re-encoded to one scale per stage (~12
/// binades above their blocks'), those six lose all or most of their bits to B's residual
/// lists: at most 24 of B's residuals per 128-column tile, carrying (by estimate, not
/// measured) ~-27 dB of those columns' output.
fn b_residual_carried(
    a: &mut [f32],
    red: usize,
    b: &mut [f32],
    wshape: [usize; 3],
    red_last: bool,
) {
    for row in a.chunks_mut(red) {
        row[128..160].iter_mut().for_each(|x| *x = 0.0);
    }
    let [e, d1, d2] = wshape;
    let cols = if red_last { d1 } else { d2 };
    let at = |ei: usize, c: usize, r: usize| {
        if red_last {
            (ei * d1 + c) * d2 + r
        } else {
            (ei * d1 + r) * d2 + c
        }
    };
    for ei in 0..e {
        for c in 0..cols {
            let keep = c % 32 == 5;
            for r in 128..256 {
                let i = at(ei, c, r);
                // six of the column's own values kept past the first block (c-dependent spots)
                let kept = keep && r >= 160 && (r + 7 * c) % 16 == 0;
                if !kept {
                    b[i] = if keep && r == 128 {
                        4096.0 * WEIGHT_STD
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

/// Operands whose product the residual elements of a stage-uniform re-encoding carry
/// (bench/chain.py's "residual-carried" case). Per row of A: the first 1×32 block of the
/// first 128-deep stage holds one value 2^12 above everything else and the stage's other
/// three blocks hold six N(0, 1) values each, so re-encoding them to the block's scale loses
/// them (12 binades below E4M3's subnormals); the rest of A is N(0, 1/64²). B is zero on the
/// first 32 reduction indices, so the 2^12 value contributes nothing and the lost elements
/// carry the output: without the chained GEMM's corrections the result is off by ~27 dB.
fn residual_carried(
    a: &mut [f32],
    red: usize,
    b: &mut [f32],
    wshape: [usize; 3],
    red_last: bool,
    seed: u64,
) {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for row in a.chunks_mut(red) {
        let kept: Vec<f32> = row[32..128].to_vec();
        row.iter_mut().for_each(|x| *x /= 64.0);
        row[..128].iter_mut().for_each(|x| *x = 0.0);
        row[0] = 4096.0;
        for _ in 0..6 {
            let j = (next() % 96) as usize;
            row[32 + j] = kept[j];
        }
    }
    let [e, d1, d2] = wshape;
    for ei in 0..e {
        for i in 0..d1 {
            for j in 0..d2 {
                let red_index = if red_last { j } else { i };
                if red_index < 32 {
                    b[(ei * d1 + i) * d2 + j] = 0.0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{b_residual_carried, WEIGHT_STD};

    /// B's second stage after `b_residual_carried`: in each output column c % 32 == 5 the 2^12
    /// value at 128 and six of its own values in 160..256, zeros in every other column (so at
    /// most 4 × 6 = 24 of B's residuals per 128-column tile), A zero on 128..160; both stored
    /// layouts of the weight.
    #[test]
    fn b_residual_carried_leaves_six_values_in_one_column_of_32() {
        let (e, cols, red) = (2usize, 96usize, 320usize);
        for red_last in [true, false] {
            let wshape = if red_last {
                [e, cols, red]
            } else {
                [e, red, cols]
            };
            let mut b: Vec<f32> = (0..e * cols * red)
                .map(|i| 0.01 + (i % 7) as f32 * 0.01)
                .collect();
            let mut a = vec![1f32; 4 * red];
            b_residual_carried(&mut a, red, &mut b, wshape, red_last);
            assert!(a
                .chunks(red)
                .all(|r| r[128..160].iter().all(|&x| x == 0.0) && r[160] == 1.0));
            let at = |ei: usize, c: usize, r: usize| {
                if red_last {
                    b[(ei * cols + c) * red + r]
                } else {
                    b[(ei * red + r) * cols + c]
                }
            };
            for ei in 0..e {
                for c in 0..cols {
                    let nonzero = (160..256).filter(|&r| at(ei, c, r) != 0.0).count();
                    let big = at(ei, c, 128);
                    if c % 32 == 5 {
                        assert_eq!(
                            (nonzero, big),
                            (6, 4096.0 * WEIGHT_STD),
                            "column {c}, red_last {red_last}"
                        );
                    } else {
                        assert_eq!((nonzero, big), (0, 0.0), "column {c}, red_last {red_last}");
                    }
                    assert!((129..160).all(|r| at(ei, c, r) == 0.0));
                    assert!(
                        at(ei, c, 127) != 0.0 && at(ei, c, 256) != 0.0,
                        "outside the stage untouched"
                    );
                }
            }
        }
    }
}
