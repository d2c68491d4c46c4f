//! The quantize checks: both devices byte-identical (data, scales, transposed copy, kept
//! values) and dequantize bit-identical.

use super::compare::differing;
use super::inputs::{gen, pair};
use super::Ctx;
use crate::error::OpResult;
use crate::ops;
use crate::tensor::{MxTensor, Tensor};
use mxhost_plugin_abi::{BlockLayout, DType, MxFormat, ScaleMode};
use std::time::Instant;

fn block_name(b: BlockLayout, rank: usize) -> String {
    if b.kind == mxhost_plugin_abi::BlockKind::Tile32x32 as u32 {
        "32x32".into()
    } else if b.axis as usize + 1 == rank {
        "1x32 last".into()
    } else {
        "1x32 axis-2".into()
    }
}

impl Ctx {
    /// Quantize on both devices; data and scales must be byte-identical. Then
    /// dequantize both and require bit-identical values.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn quantize_case(
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
            // (bytes a plugin left out, ABI 1.7, written before they are compared)
            for q in [Some(&qc), Some(&qg), tc.as_ref(), tg.as_ref()]
                .into_iter()
                .flatten()
            {
                ops::ensure_bytes(q)?;
            }
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
                ops::ensure_bytes(&qp)?;
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
                    for_gemm: false,
                };
                let (vq_c, _) = ops::quantize_with(&self.plugin, &xc, format, mode, block, extras)?;
                let (vq_g, vt_g) =
                    ops::quantize_with(&self.plugin, &xg, format, mode, block, extras)?;
                for q in std::iter::once(&vq_g).chain(vt_g.iter()) {
                    ops::ensure_bytes(q)?;
                }
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
                bad_vals = differing(&vc, &vg, true);
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
}
