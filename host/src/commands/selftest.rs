//! `mxhost selftest`: the CUDA backend of the MX plugin against its CPU backend, through
//! the same plugin library and the same host ops a guest uses.
//!
//! - **Quantize**: byte-for-byte equality of data and scales (every layout the ABI has:
//!   1×32 along the last axis, 1×32 along axis rank−2, 32×32 tiles; both formats, all
//!   three scale modes, f32 and bf16 input, NaN/±Inf/subnormal inputs, odd shapes).
//! - **Dequantize**: bit equality (NaN = NaN).
//! - **Grouped GEMM** (forward, dgrad, wgrad): the GPU result against the CPU result on
//!   identical MX inputs: either pre-quantized operands (quantized once, the same bytes
//!   uploaded), or dense operands quantized inside each call (identical MX values because
//!   the quantizers are bit-exact, checked above). Reported: max relative error
//!   (max |gpu − cpu| / max |cpu|) and SNR = 10·log10(Σcpu² / Σ(gpu − cpu)²).
//!
//! Tolerance. The CPU backend accumulates dequantized FP32 products in FP32 (> 120 dB
//! against FP64). The GPU computes each k32 block with one FP8 wgmma, whose internal
//! accumulation on Hopper is reduced-precision (~1.5e-4 of the block's largest partial
//! product), then promotes it into FP32 with the block scales; its order of FP32
//! additions differs too. Expected agreement with f32 output is ≥ ~80 dB (the kernels
//! measure ~87 dB against FP64); the gate is **SNR ≥ 75 dB and max rel ≤ 2e-3** for f32
//! output, and SNR ≥ 40 dB / max rel ≤ 2e-2 for bf16 output (one bf16 rounding each
//! side). NaN positions must match exactly.
//!
//! The anchor shapes (`/work/shared/anchors/README.md`) run at full size on the GPU; the
//! CPU reference is computed for a sample of experts (the first and the last; forward and
//! dgrad on up to 256 rows of each, since output rows are independent) so the check
//! stays fast. `--quick` shrinks the anchors (rows per expert ÷ 16, at least 64).
//!
//! Without a GPU it prints a skip message and exits 0; with `MXHOST_REQUIRE_CUDA=1` it
//! fails instead.

use crate::device::{self, Device, DeviceChoice};
use crate::error::{ErrorKind, OpResult};
use crate::ops::{self, GemmConfig, GemmOperand};
use crate::plugin::registry::{search_dirs, PluginRegistry};
use crate::plugin::LoadedPlugin;
use crate::tensor::{MxTensor, Tensor};
use mxhost_plugin_abi::{BlockLayout, DType, GemmPass, MxFormat, ScaleMode, WeightLayout};
use rand::{Rng, SeedableRng};
use rand_distr::Distribution;
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct SelftestArgs {
    /// The device to check against the CPU (only `cuda` has something to check).
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    pub device: DeviceChoice,
    /// Shrink the anchor shapes (rows per expert ÷ 16).
    #[arg(long)]
    pub quick: bool,
    /// Anchor shapes to run (subset of a,b,c,d; empty for none).
    #[arg(long, default_value = "a,b,c,d")]
    pub shapes: String,
    /// The MX plugin under test.
    #[arg(long, default_value = "mxfp8")]
    pub plugin: String,
    /// Check the harness itself: run the "GPU" side on the CPU too (no GPU needed).
    #[arg(long, hide = true)]
    pub harness_on_cpu: bool,
}

const ANCHORS: [(&str, usize, usize, usize, usize); 4] = [
    ("a", 8, 4096, 4096, 4096),
    ("b", 8, 4096, 2048, 8192),
    ("c", 32, 1024, 2880, 2880),
    ("d", 128, 256, 2048, 768),
];

struct Row {
    check: String,
    case: String,
    ok: bool,
    max_rel: Option<f64>,
    snr: Option<f64>,
    note: String,
    ms: f64,
}

struct Ctx {
    plugin: std::sync::Arc<LoadedPlugin>,
    gpu: Device,
    rows: Vec<Row>,
    /// The plugin quantizes (MX plugins); without it (the bf16 plugin) the quantizer
    /// checks, MX-operand GEMMs and MX-only limits are skipped.
    quantizes: bool,
}

fn rng(seed: u64) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

/// Normal values, each row scaled by 2^U(-12, 12) (exercises the scale rules), with
/// optional special values (NaN, ±Inf, subnormals, huge, an all-zero block).
fn gen(rows: usize, cols: usize, seed: u64, std: f32, specials: bool) -> Vec<f32> {
    let mut v = vec![0f32; rows * cols];
    // Rows in parallel chunks, each chunk seeded from (seed, chunk): deterministic.
    let chunk_rows = (rows / 64).max(256);
    std::thread::scope(|sc| {
        for (ci, chunk) in v.chunks_mut((chunk_rows * cols).max(1)).enumerate() {
            sc.spawn(move || {
                let mut r = rng(seed.wrapping_mul(0x9E37_79B9).wrapping_add(ci as u64));
                let normal = rand_distr::Normal::new(0.0f32, std).unwrap();
                for row in chunk.chunks_mut(cols.max(1)) {
                    let s = if specials {
                        2f32.powi(r.random_range(-12..12))
                    } else {
                        1.0
                    };
                    for x in row {
                        *x = normal.sample(&mut r) * s;
                    }
                }
            });
        }
    });
    let mut r = rng(seed ^ 0x5151);
    if specials && !v.is_empty() {
        let n = v.len();
        let specials = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
            3e38,
            -2.5e-45,
        ];
        for sp in specials {
            let i = r.random_range(0..n);
            v[i] = sp;
        }
        if cols >= 64 && rows >= 2 {
            v[..64].iter_mut().for_each(|x| *x = 0.0);
            v[cols + 32..cols + 64].iter_mut().for_each(|x| *x = 62.0);
        }
    }
    v
}

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn bytes_bf16(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes())
        .collect()
}

/// The same values on the CPU and on the GPU.
fn pair(ctx: &Ctx, shape: &[u64], dtype: DType, v: &[f32]) -> OpResult<(Tensor, Tensor)> {
    let b = if dtype == DType::Bf16 {
        bytes_bf16(v)
    } else {
        bytes_f32(v)
    };
    Ok((
        Tensor::from_bytes_on(Device::Cpu, shape.to_vec(), dtype, &b)?,
        Tensor::from_bytes_on(ctx.gpu, shape.to_vec(), dtype, &b)?,
    ))
}

fn block_name(b: BlockLayout, rank: usize) -> String {
    if b.kind == mxhost_plugin_abi::BlockKind::Tile32x32 as u32 {
        "32x32".into()
    } else if b.axis as usize + 1 == rank {
        "1x32 last".into()
    } else {
        "1x32 axis-2".into()
    }
}

/// Compare two f32 vectors: (max rel, snr, nan positions equal).
fn compare(gpu: &[f32], cpu: &[f32]) -> (f64, f64, bool) {
    let mut nan_ok = true;
    let (mut num, mut den, mut maxd, mut maxr) = (0f64, 0f64, 0f64, 0f64);
    for (&g, &c) in gpu.iter().zip(cpu) {
        if c.is_nan() || g.is_nan() {
            nan_ok &= c.is_nan() && g.is_nan();
            continue;
        }
        let (g, c) = (g as f64, c as f64);
        if !(g.is_finite() && c.is_finite()) {
            nan_ok &= g == c;
            continue;
        }
        num += c * c;
        den += (g - c) * (g - c);
        maxd = maxd.max((g - c).abs());
        maxr = maxr.max(c.abs());
    }
    let rel = if maxr > 0.0 { maxd / maxr } else { maxd };
    let snr = if den == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (num.max(1e-300) / den).log10()
    };
    (rel, snr, nan_ok)
}

impl Ctx {
    fn push(
        &mut self,
        check: &str,
        case: String,
        t0: Instant,
        r: OpResult<(bool, Option<f64>, Option<f64>, String)>,
    ) {
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let (ok, max_rel, snr, note) = match r {
            Ok(v) => v,
            Err(e) => (false, None, None, format!("{:?}: {}", e.kind, e.message)),
        };
        let row = Row {
            check: check.into(),
            case,
            ok,
            max_rel,
            snr,
            note,
            ms,
        };
        eprintln!(
            "  {} {:<20} {:<60} rel {:>9} snr {:>6} {:>7.0} ms  {}",
            if row.ok { "PASS" } else { "FAIL" },
            row.check,
            row.case,
            row.max_rel.map_or("-".into(), |v| format!("{v:.2e}")),
            row.snr.map_or("-".into(), |v| format!("{v:.1}")),
            row.ms,
            row.note
        );
        self.rows.push(row);
    }

    /// Quantize on both devices; data and scales must be byte-identical. Then
    /// dequantize both and require bit-identical values.
    #[allow(clippy::too_many_arguments)]
    fn quantize_case(
        &mut self,
        shape: &[u64],
        dtype: DType,
        block: BlockLayout,
        format: MxFormat,
        mode: ScaleMode,
        seed: u64,
        specials: bool,
    ) {
        if !self.quantizes {
            return;
        }
        let t0 = Instant::now();
        let rank = shape.len();
        let case = format!(
            "{:?} {} {} {:?} {:?}{}",
            shape,
            dtype.name(),
            block_name(block, rank),
            format,
            mode,
            if specials { " +NaN/Inf" } else { "" }
        );
        let r = (|| {
            let cols = *shape.last().unwrap() as usize;
            let rows = shape.iter().product::<u64>() as usize / cols.max(1);
            let v = gen(rows, cols, seed, 1.0, specials);
            let (xc, xg) = pair(self, shape, dtype, &v)?;
            // Rank ≥ 2: with the transposed copy too (ABI 1.1), also byte-compared.
            let both = |x: &Tensor| -> OpResult<(MxTensor, Option<MxTensor>)> {
                if rank >= 2 {
                    let (q, t) =
                        ops::quantize_with_transpose(&self.plugin, x, format, mode, block)?;
                    Ok((q, Some(t)))
                } else {
                    Ok((ops::quantize(&self.plugin, x, format, mode, block)?, None))
                }
            };
            let (qc, tc) = both(&xc)?;
            let (qg, tg) = both(&xg)?;
            let (mut dc, mut dg) = (
                qc.data.host_bytes()?.to_vec(),
                qg.data.host_bytes()?.to_vec(),
            );
            let (mut sc, mut sg) = (
                qc.scales.host_bytes()?.to_vec(),
                qg.scales.host_bytes()?.to_vec(),
            );
            if let (Some(tc), Some(tg)) = (&tc, &tg) {
                dc.extend_from_slice(&tc.data.host_bytes()?);
                dg.extend_from_slice(&tg.data.host_bytes()?);
                sc.extend_from_slice(&tc.scales.host_bytes()?);
                sg.extend_from_slice(&tg.scales.host_bytes()?);
            }
            let mut bad_d = dc.iter().zip(dg.iter()).filter(|(a, b)| a != b).count();
            let mut bad_s = sc.iter().zip(sg.iter()).filter(|(a, b)| a != b).count();
            // Without the transposed copy the backend may launch another kernel (e.g.
            // 32×32 without TILE_T): its bytes must be the same too. dg / sg begin with
            // qg's data / scales (the transposed copy is appended after them).
            if rank >= 2 {
                let qp = ops::quantize(&self.plugin, &xg, format, mode, block)?;
                let (pd, ps) = (qp.data.host_bytes()?, qp.scales.host_bytes()?);
                bad_d += pd.iter().zip(dg.iter()).filter(|(a, b)| a != b).count();
                bad_s += ps.iter().zip(sg.iter()).filter(|(a, b)| a != b).count();
            }
            // With the values kept (ABI 1.2): the same bytes (and transposed copy), and
            // values bit-identical to the CPU's (its dequantized output in bf16).
            let mut bad_vals = 0;
            if self.plugin.abi_minor >= 2 {
                let extras = ops::QuantizeExtras {
                    transposed: rank >= 2,
                    keep_values: true,
                };
                let (vq_c, _) = ops::quantize_with(&self.plugin, &xc, format, mode, block, extras)?;
                let (vq_g, vt_g) =
                    ops::quantize_with(&self.plugin, &xg, format, mode, block, extras)?;
                let mut bytes_g = vq_g.data.host_bytes()?.to_vec();
                let mut scales_g = vq_g.scales.host_bytes()?.to_vec();
                if let Some(t) = &vt_g {
                    bytes_g.extend_from_slice(&t.data.host_bytes()?);
                    scales_g.extend_from_slice(&t.scales.host_bytes()?);
                }
                bad_d += bytes_g.iter().zip(&dc).filter(|(a, b)| a != b).count();
                bad_s += scales_g.iter().zip(&sc).filter(|(a, b)| a != b).count();
                let values = |q: &MxTensor| -> OpResult<Vec<u8>> {
                    let v = q.values.as_ref().ok_or_else(|| {
                        crate::error::OpError::invalid("quantize did not keep the values")
                    })?;
                    Ok(v.tensor.host_bytes()?.to_vec())
                };
                let (vc, vg) = (values(&vq_c)?, values(&vq_g)?);
                // bf16 bits, NaN payloads aside (as dequantize's check).
                let is_nan = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]) & 0x7FFF > 0x7F80;
                bad_vals = vc
                    .chunks(2)
                    .zip(vg.chunks(2))
                    .filter(|(a, b)| a != b && !(is_nan(a) && is_nan(b)))
                    .count()
                    + vc.len().abs_diff(vg.len());
            }
            // Dequantize too (skipped for anchor-size tensors: host time).
            let check_deq = v.len() <= 1 << 22;
            let bad_deq = if check_deq {
                let deq_c = ops::dequantize(&self.plugin, &qc)?.try_to_f32_vec()?;
                let deq_g = ops::dequantize(&self.plugin, &qg)?.try_to_f32_vec()?;
                deq_c
                    .iter()
                    .zip(&deq_g)
                    .filter(|(a, b)| !(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())))
                    .count()
            } else {
                0
            };
            let ok =
                bad_d == 0 && bad_s == 0 && bad_deq == 0 && bad_vals == 0 && dc.len() == dg.len();
            Ok((
                ok,
                None,
                None,
                if ok {
                    format!(
                        "{} data + {} scale bytes identical{}{}{}",
                        dc.len(),
                        sc.len(),
                        if tc.is_some() {
                            " (with the transposed copy)"
                        } else {
                            ""
                        },
                        if check_deq {
                            ", dequantize identical"
                        } else {
                            ""
                        },
                        if self.plugin.abi_minor >= 2 {
                            ", kept values identical"
                        } else {
                            ""
                        }
                    )
                } else {
                    format!("{bad_d} data / {bad_s} scale bytes differ, {bad_deq} dequantized values differ, {bad_vals} kept values differ")
                },
            ))
        })();
        self.push("quantize byte-exact", case, t0, r);
    }

    /// One grouped GEMM pass on both devices.
    #[allow(clippy::too_many_arguments)]
    fn gemm_case(&mut self, label: &str, g: &GemmCase) {
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
        let b_vals = if g.pass == GemmPass::Wgrad {
            gen(rows, k, g.seed + 1, 1.0, false)
        } else {
            gen(e * wshape[1], wshape[2], g.seed + 1, 0.05, false)
        };
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
        let mut qa_g = qa_c.as_ref().map(|a| a.to_device(self.gpu)).transpose()?;
        let mut qb_g = qb_c.as_ref().map(|b| b.to_device(self.gpu)).transpose()?;
        // Values kept (ABI 1.2): the GPU operands quantized on the GPU with their bf16
        // values (the same bytes: the quantizer checks above are bit-exact), the weight
        // with swapped values by quantizing its transpose with a transposed copy.
        if let (Some(swapped), true) = (g.keep_values, g.mx && !g.dense_b) {
            let keep = ops::QuantizeExtras {
                transposed: false,
                keep_values: true,
            };
            let q = |t: &Tensor, blk, extras| {
                ops::quantize_with(&self.plugin, t, g.format, ScaleMode::Rceil, blk, extras)
            };
            qa_g = if g.dense_a {
                None
            } else {
                Some(q(&ag, a_blk, keep)?.0)
            };
            qb_g = Some(if swapped {
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
                let btg = Tensor::from_bytes_on(
                    self.gpu,
                    vec![b0 as u64, c as u64, r as u64],
                    DType::Bf16,
                    &bytes_bf16(&bt),
                )?;
                let extras = ops::QuantizeExtras {
                    transposed: true,
                    ..keep
                };
                let blk_t = mxhost_plugin_abi::transposed_block(b_blk, 3);
                q(&btg, blk_t, extras)?.1.expect("requested")
            } else {
                q(&bg, b_blk, keep)?.0
            });
        }
        let out_g = ops::grouped_gemm(
            &self.plugin,
            g.pass,
            qa_g.as_ref()
                .map_or(GemmOperand::Dense(&ag), GemmOperand::Mx),
            qb_g.as_ref()
                .map_or(GemmOperand::Dense(&bg), GemmOperand::Mx),
            &offs,
            &cfg,
        );
        let out_g = match (out_g, g.expect_unsupported) {
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
            let out_c = ops::grouped_gemm(
                &self.plugin,
                g.pass,
                qa_c.as_ref()
                    .map_or(GemmOperand::Dense(&a_cpu_full), GemmOperand::Mx),
                qb_c.as_ref()
                    .map_or(GemmOperand::Dense(&b_cpu_full), GemmOperand::Mx),
                &offs,
                &cfg,
            )?;
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
        Ok((ok, Some(rel), Some(snr), note))
    }
}

#[derive(Clone)]
struct GemmCase {
    pass: GemmPass,
    sizes: Vec<usize>,
    pad_rows: usize,
    k: usize,
    n: usize,
    w2d: bool,
    layout: WeightLayout,
    out: DType,
    format: MxFormat,
    mx: bool,
    nan_row: bool,
    sample: bool,
    expect_unsupported: bool,
    seed: u64,
    /// wgrad with `mx`: X's block layout (default 1×32 along M).
    wgrad_x_block: Option<BlockLayout>,
    /// forward/dgrad with `mx`: A's block layout (default 1×32 along its last axis).
    a_block: Option<BlockLayout>,
    /// With `mx`: only A pre-quantized, B dense (quantized in the call).
    dense_b: bool,
    /// With `mx`: only B pre-quantized, A dense (as guest-sdk's GroupedLinear passes them).
    dense_a: bool,
    /// With `mx`: the GPU operands quantized on the GPU keeping their bf16 values
    /// (Some(true): the weight's values stored swapped, as a transposing quantize keeps
    /// them for its second result).
    keep_values: Option<bool>,
}

impl GemmCase {
    fn new(pass: GemmPass, sizes: Vec<usize>, k: usize, n: usize) -> Self {
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

pub fn main(args: SelftestArgs) -> anyhow::Result<i32> {
    let require = std::env::var("MXHOST_REQUIRE_CUDA").as_deref() == Ok("1");
    if args.device == DeviceChoice::Cpu {
        println!("selftest checks a GPU backend against the CPU one; with --device cpu there is nothing to check");
        return Ok(if require { 1 } else { 0 });
    }
    let gpu = match device::cuda_device() {
        _ if args.harness_on_cpu => Device::Cpu,
        Ok(d) => d,
        Err(why) => {
            if require {
                eprintln!("mxhost selftest: FAILED: MXHOST_REQUIRE_CUDA=1 but CUDA is not available: {why}");
                return Ok(1);
            }
            println!("mxhost selftest: SKIPPED: CUDA is not available: {why}. Nothing was checked on a GPU (set MXHOST_REQUIRE_CUDA=1 to make this an error).");
            return Ok(0);
        }
    };
    let registry = PluginRegistry::open(&search_dirs(), &args.plugin)?;
    let plugin = registry.active();
    println!(
        "mxhost selftest: plugin `{}` ({}) on {gpu} vs cpu",
        plugin.name,
        plugin.path.display()
    );
    let portable = std::env::var("MXHOST_MX_PORTABLE")
        .ok()
        .filter(|v| !v.trim().is_empty() && v.trim() != "0");
    println!(
        "mxhost selftest: grouped GEMM kernel family: {} (MXHOST_MX_GEMM_KERNEL=tgemm|gemm, default tgemm; launches the TMA kernels cannot take fall back to mx_gemm_*; GPUs other than Hopper, or MXHOST_MX_PORTABLE=1, get the portable build: dequantize-to-BF16 + cuBLAS; MXHOST_MX_GEMM_TRACE=1 logs each launch)",
        match (portable, std::env::var("MXHOST_MX_GEMM_KERNEL").as_deref().map(str::trim)) {
            (Some(v), _) => format!("portable build (MXHOST_MX_PORTABLE={v})"),
            (None, Ok("gemm")) => "mx_gemm_* (cp.async)".to_string(),
            (None, Err(_) | Ok("") | Ok("tgemm")) => "mx_tgemm_* (TMA)".to_string(),
            (None, Ok(other)) => {
                format!("invalid MXHOST_MX_GEMM_KERNEL={other:?} (GEMMs will fail)")
            }
        }
    );
    let quantizes = plugin.has(mxhost_plugin_abi::caps::QUANTIZE);
    if !quantizes {
        println!(
            "mxhost selftest: plugin `{}` does not quantize: checking its dense grouped GEMMs only",
            plugin.name
        );
    }
    let mut ctx = Ctx {
        plugin,
        gpu,
        rows: Vec::new(),
        quantizes,
    };
    let t_all = Instant::now();

    // ---------------- quantize: edge cases ----------------
    let mut seed = 100;
    for dtype in [DType::Bf16, DType::F32] {
        for (format, mode) in [
            (MxFormat::E4m3, ScaleMode::Rceil),
            (MxFormat::E4m3, ScaleMode::Floor),
            (MxFormat::E4m3, ScaleMode::Even),
            (MxFormat::E5m2, ScaleMode::Rceil),
        ] {
            // [4, 64, 96]: whole 32×32 blocks and C % 32 == 0 (the flat 1×32 and
            // warp-per-block 32×32 kernels, batched); the others take the tiled kernel.
            for shape in [
                vec![977u64, 2880],
                vec![300, 200],
                vec![3, 96, 136],
                vec![4, 64, 96],
            ] {
                let rank = shape.len();
                for block in [
                    BlockLayout::vector(rank as u32 - 1),
                    BlockLayout::vector(rank as u32 - 2),
                    BlockLayout::tile(),
                ] {
                    seed += 1;
                    ctx.quantize_case(&shape, dtype, block, format, mode, seed, true);
                }
            }
        }
    }
    ctx.quantize_case(
        &[1000],
        DType::F32,
        BlockLayout::vector(0),
        MxFormat::E4m3,
        ScaleMode::Rceil,
        1,
        true,
    );
    ctx.quantize_case(
        &[2, 3, 37, 33],
        DType::Bf16,
        BlockLayout::vector(2),
        MxFormat::E4m3,
        ScaleMode::Rceil,
        2,
        true,
    );

    // ---------------- GEMM: edge cases (full CPU reference) ----------------
    let odd = vec![0usize, 37, 200, 1, 513, 0, 130];
    for pass in [GemmPass::Forward, GemmPass::Dgrad, GemmPass::Wgrad] {
        for mx in [false, true] {
            let mut g = GemmCase::new(pass, odd.clone(), 2880, 208);
            g.pad_rows = 19;
            g.mx = mx;
            ctx.gemm_case("odd experts", &g);
            if pass != GemmPass::Wgrad {
                g.w2d = false;
                ctx.gemm_case("odd experts", &g);
            }
        }
        let mut g = GemmCase::new(pass, vec![129, 0, 300, 64, 31], 304, 272);
        g.pad_rows = 7;
        g.layout = WeightLayout::Kn;
        ctx.gemm_case("Kn weights", &g);
        g.w2d = false;
        g.mx = true;
        ctx.gemm_case("Kn weights", &g);
        if pass != GemmPass::Wgrad {
            // 32×32 weight tiles stored [E, K, N] (quantize-with-transpose's copy).
            let mut g = GemmCase::new(pass, vec![129, 0, 300, 64, 31], 304, 272);
            g.pad_rows = 5;
            g.layout = WeightLayout::Kn;
            g.mx = true;
            ctx.gemm_case("Kn weights", &g);
        }
        let mut g = GemmCase::new(pass, odd.clone(), 2880, 208);
        g.out = DType::Bf16;
        g.pad_rows = 3;
        ctx.gemm_case("odd experts", &g);
        if pass != GemmPass::Wgrad {
            // X / dY pre-quantized in 32×32 tiles (the copy that also serves wgrad); the
            // tiles straddle expert boundaries, each row keeps its tile's scale.
            let mut g = GemmCase::new(pass, odd.clone(), 2880, 208);
            g.mx = true;
            g.pad_rows = 11;
            g.a_block = Some(BlockLayout::tile());
            ctx.gemm_case("A in 32x32 tiles", &g);
        }
        let mut g = GemmCase::new(pass, vec![64, 64, 0], 256, 128);
        g.format = MxFormat::E5m2;
        ctx.gemm_case("small", &g);
    }
    let mut g = GemmCase::new(GemmPass::Wgrad, vec![100, 0, 45], 96, 33);
    g.layout = WeightLayout::Nk;
    ctx.gemm_case("odd N", &g);
    let mut g = GemmCase::new(GemmPass::Wgrad, vec![100, 0, 45], 33, 96);
    ctx.gemm_case("odd K", &g);
    g.layout = WeightLayout::Kn;
    ctx.gemm_case("odd K", &g);
    // wgrad on pre-quantized X in 32×32 tiles, and on one pre-quantized and one dense
    // operand: the dequantize-to-BF16 path takes any layout (the FP8 kernel does not).
    if std::env::var("MXHOST_MX_WGRAD").as_deref() != Ok("fp8") {
        let mut g = GemmCase::new(GemmPass::Wgrad, vec![129, 0, 300, 64, 31], 304, 272);
        g.mx = true;
        g.pad_rows = 9;
        g.wgrad_x_block = Some(BlockLayout::tile());
        ctx.gemm_case("any MX layout", &g);
        g.wgrad_x_block = None;
        g.dense_b = true;
        ctx.gemm_case("mixed operands", &g);
    }
    let mut g = GemmCase::new(GemmPass::Forward, vec![64, 64], 256, 128);
    g.nan_row = true;
    g.mx = true;
    ctx.gemm_case("NaN propagation", &g);
    // Operands quantized with their bf16 values kept (ABI 1.2): forward/dgrad read them
    // on the dequantize-to-BF16 path (both kept: cuBLAS alone), from either stored layout
    // of the weight and with its values stored swapped; wgrad reads A's and B's.
    if ctx.plugin.abi_minor >= 2 {
        for pass in [GemmPass::Forward, GemmPass::Dgrad] {
            for (layout, swapped, out) in [
                (WeightLayout::Nk, false, DType::F32),
                (WeightLayout::Nk, true, DType::Bf16),
                (WeightLayout::Kn, false, DType::Bf16),
                (WeightLayout::Kn, true, DType::F32),
            ] {
                let mut g = GemmCase::new(pass, odd.clone(), 2880, 208);
                (g.pad_rows, g.mx, g.layout, g.out) = (13, true, layout, out);
                g.keep_values = Some(swapped);
                ctx.gemm_case("odd experts", &g);
            }
            let mut g = GemmCase::new(pass, odd.clone(), 2880, 208);
            (g.mx, g.a_block, g.keep_values) = (true, Some(BlockLayout::tile()), Some(true));
            ctx.gemm_case("A in 32x32 tiles", &g);
            // A dense (quantized in the call), only the weight kept: GroupedLinear's case.
            for w2d in [true, false] {
                let mut g = GemmCase::new(pass, odd.clone(), 2880, 208);
                (g.mx, g.dense_a, g.w2d, g.keep_values) = (true, true, w2d, Some(false));
                (g.pad_rows, g.out) = (6, DType::Bf16);
                ctx.gemm_case("odd experts", &g);
            }
        }
        if std::env::var("MXHOST_MX_WGRAD").as_deref() != Ok("fp8") {
            let mut g = GemmCase::new(GemmPass::Wgrad, vec![129, 0, 300, 64, 31], 304, 272);
            (g.mx, g.pad_rows, g.keep_values) = (true, 9, Some(false));
            ctx.gemm_case("values kept", &g);
            g.wgrad_x_block = Some(BlockLayout::tile());
            ctx.gemm_case("values kept", &g);
        }
    }
    let mut g = GemmCase::new(GemmPass::Forward, vec![0, 0, 0], 256, 128);
    g.pad_rows = 40;
    ctx.gemm_case("all experts empty", &g);
    if gpu != Device::Cpu {
        let mut g = GemmCase::new(GemmPass::Forward, vec![50, 50], 200, 128);
        g.expect_unsupported = true;
        ctx.gemm_case("K % 16 != 0", &g);
    }

    // ---------------- anchor shapes ----------------
    for key in args
        .shapes
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let Some(&(name, e, mut m, k, n)) = ANCHORS.iter().find(|a| a.0 == key) else {
            anyhow::bail!("unknown anchor shape `{key}` (a, b, c, d)");
        };
        if args.quick {
            m = (m / 16).max(64);
        }
        let label = format!("anchor {name}");
        seed += 1;
        ctx.quantize_case(
            &[(e * m) as u64, k as u64],
            DType::Bf16,
            BlockLayout::vector(1),
            MxFormat::E4m3,
            ScaleMode::Rceil,
            seed,
            false,
        );
        ctx.quantize_case(
            &[e as u64, n as u64, k as u64],
            DType::Bf16,
            BlockLayout::tile(),
            MxFormat::E4m3,
            ScaleMode::Rceil,
            seed + 1,
            false,
        );
        ctx.quantize_case(
            &[(e * m) as u64, n as u64],
            DType::Bf16,
            BlockLayout::vector(0),
            MxFormat::E4m3,
            ScaleMode::Rceil,
            seed + 2,
            false,
        );
        for pass in [GemmPass::Forward, GemmPass::Dgrad, GemmPass::Wgrad] {
            let mut g = GemmCase::new(pass, vec![m; e], k, n);
            g.sample = true;
            g.seed = seed;
            ctx.gemm_case(&label, &g);
            if pass == GemmPass::Forward {
                g.w2d = false;
                ctx.gemm_case(&label, &g);
            }
        }
    }

    // ---------------- table ----------------
    let failed = ctx.rows.iter().filter(|r| !r.ok).count();
    println!();
    println!("| check | case | result | max rel err | SNR (dB) | ms | note |");
    println!("|---|---|---|---|---|---|---|");
    for r in &ctx.rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {} |",
            r.check,
            r.case,
            if r.ok { "PASS" } else { "**FAIL**" },
            r.max_rel.map_or("-".into(), |v| format!("{v:.2e}")),
            r.snr.map_or("-".into(), |v| if v.is_infinite() {
                "inf".into()
            } else {
                format!("{v:.1}")
            }),
            r.ms,
            r.note.replace('|', "/")
        );
    }
    println!();
    println!(
        "mxhost selftest: {} checks, {} passed, {} failed ({:.1} s)",
        ctx.rows.len(),
        ctx.rows.len() - failed,
        failed,
        t_all.elapsed().as_secs_f64()
    );
    Ok(if failed == 0 { 0 } else { 1 })
}
