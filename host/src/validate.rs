//! Validation of every guest request before it reaches a plugin.
//!
//! Plugins are native code that trusts its descriptors, so the host checks here, in
//! pure functions with no side effects (easy to unit-test and fuzz): shape arithmetic
//! cannot overflow, offsets are monotonic and inside the buffer, dtypes and block
//! layouts match, and operand shapes agree with each other. The result is a
//! [`GemmPlan`] holding the logical sizes and the output shape.

use mxhost_plugin_abi::{
    scale_shape, BlockLayout, DType, GemmPass, MxFormat, WeightLayout, MAX_RANK,
};

/// Largest tensor the host will describe (2^40 bytes); far above any budget, it only
/// keeps all later arithmetic in range.
pub const MAX_TENSOR_BYTES: u64 = 1 << 40;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValidationError(pub String);

fn bad<T>(msg: impl Into<String>) -> Result<T, ValidationError> {
    Err(ValidationError(msg.into()))
}

/// Checked element count and byte size of a shape.
pub fn checked_size(shape: &[u64], dtype: DType) -> Result<(u64, u64), ValidationError> {
    if shape.len() > MAX_RANK {
        return bad(format!(
            "rank {} exceeds the maximum of {MAX_RANK}",
            shape.len()
        ));
    }
    let mut numel: u64 = 1;
    for &d in shape {
        numel = match numel.checked_mul(d) {
            Some(n) => n,
            None => return bad(format!("shape {shape:?} overflows")),
        };
    }
    let bytes = numel
        .checked_mul(dtype.size_bytes())
        .filter(|&b| b <= MAX_TENSOR_BYTES);
    match bytes {
        Some(b) => Ok((numel, b)),
        None => bad(format!(
            "shape {shape:?} of {} is larger than {MAX_TENSOR_BYTES} bytes",
            dtype.name()
        )),
    }
}

/// What the validator needs to know about one operand.
#[derive(Debug, Clone, PartialEq)]
pub struct OperandDesc {
    pub shape: Vec<u64>,
    /// The dtype of the data (f32/bf16 for dense, e4m3/e5m2 for MX).
    pub dtype: DType,
    /// For a quantized operand: its format, block layout and scale-tensor shape.
    pub mx: Option<MxDesc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MxDesc {
    pub format: MxFormat,
    pub block: BlockLayout,
    pub scales_shape: Vec<u64>,
}

impl OperandDesc {
    pub fn dense(shape: &[u64], dtype: DType) -> Self {
        OperandDesc {
            shape: shape.to_vec(),
            dtype,
            mx: None,
        }
    }
}

/// The validated sizes of a grouped GEMM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GemmPlan {
    pub rows: u64,
    pub n: u64,
    pub k: u64,
    pub experts: u64,
    pub out_shape: Vec<u64>,
}

fn check_operand(name: &str, op: &OperandDesc, rank: usize) -> Result<(), ValidationError> {
    if op.shape.len() != rank {
        return bad(format!(
            "{name} must have rank {rank}, got shape {:?}",
            op.shape
        ));
    }
    checked_size(&op.shape, op.dtype)?;
    match &op.mx {
        None => {
            if !matches!(op.dtype, DType::F32 | DType::Bf16) {
                return bad(format!(
                    "{name} must be f32 or bf16, got {}",
                    op.dtype.name()
                ));
            }
        }
        Some(mx) => {
            if op.dtype != mx.format.dtype() {
                return bad(format!(
                    "{name}: data dtype {} does not match its MX format",
                    op.dtype.name()
                ));
            }
            match scale_shape(&op.shape, mx.block) {
                Some(s) if s == mx.scales_shape => {}
                Some(s) => {
                    return bad(format!(
                        "{name}: scales have shape {:?}, expected {s:?} for its block layout",
                        mx.scales_shape
                    ))
                }
                None => {
                    return bad(format!(
                        "{name}: invalid block layout {:?} for shape {:?}",
                        mx.block, op.shape
                    ))
                }
            }
        }
    }
    Ok(())
}

/// Offsets: one per expert, non-negative, non-decreasing, last ≤ rows.
pub fn check_offs(offs: &[i32], experts: u64, rows: u64) -> Result<(), ValidationError> {
    if offs.is_empty() {
        return bad("offs is empty: one cumulative end offset per expert is required");
    }
    if offs.len() as u64 != experts {
        return bad(format!(
            "offs has {} entries but the weights have {experts} experts",
            offs.len()
        ));
    }
    let mut prev = 0i64;
    for (e, &o) in offs.iter().enumerate() {
        let o = o as i64;
        if o < prev {
            return bad(format!(
                "offs must be non-decreasing and non-negative: offs[{e}] = {o} after {prev}"
            ));
        }
        prev = o;
    }
    if prev as u64 > rows {
        return bad(format!(
            "offs ends at {prev} but the activation buffer has only {rows} rows"
        ));
    }
    Ok(())
}

/// Validate one pass. `a`/`b` follow [`GemmPass`]: forward (X, W), dgrad (dY, W),
/// wgrad (dY, X).
pub fn plan_grouped_gemm(
    pass: GemmPass,
    a: &OperandDesc,
    b: &OperandDesc,
    offs: &[i32],
    layout: WeightLayout,
    out_dtype: DType,
) -> Result<GemmPlan, ValidationError> {
    if !matches!(out_dtype, DType::F32 | DType::Bf16) {
        return bad(format!(
            "output dtype must be f32 or bf16, got {}",
            out_dtype.name()
        ));
    }
    let (a_name, b_name) = match pass {
        GemmPass::Forward => ("x", "w"),
        GemmPass::Dgrad => ("dy", "w"),
        GemmPass::Wgrad => ("dy", "x"),
    };
    check_operand(a_name, a, 2)?;
    let rows = a.shape[0];
    let plan = match pass {
        GemmPass::Forward | GemmPass::Dgrad => {
            check_operand(b_name, b, 3)?;
            let experts = b.shape[0];
            let (n, k) = match layout {
                WeightLayout::Nk => (b.shape[1], b.shape[2]),
                WeightLayout::Kn => (b.shape[2], b.shape[1]),
            };
            let (inner, inner_name) = if pass == GemmPass::Forward {
                (k, "K")
            } else {
                (n, "N")
            };
            if a.shape[1] != inner {
                return bad(format!(
                    "{a_name} has {} columns but w {:?} ({layout:?} layout) has {inner_name} = {inner}",
                    a.shape[1], b.shape
                ));
            }
            let out_cols = if pass == GemmPass::Forward { n } else { k };
            GemmPlan {
                rows,
                n,
                k,
                experts,
                out_shape: vec![rows, out_cols],
            }
        }
        GemmPass::Wgrad => {
            check_operand(b_name, b, 2)?;
            if b.shape[0] != rows {
                return bad(format!("dy has {rows} rows but x has {}", b.shape[0]));
            }
            let (n, k) = (a.shape[1], b.shape[1]);
            let experts = offs.len() as u64;
            let out_shape = match layout {
                WeightLayout::Nk => vec![experts, n, k],
                WeightLayout::Kn => vec![experts, k, n],
            };
            GemmPlan {
                rows,
                n,
                k,
                experts,
                out_shape,
            }
        }
    };
    if plan.n == 0 || plan.k == 0 {
        return bad(format!(
            "N and K must be positive (N = {}, K = {})",
            plan.n, plan.k
        ));
    }
    check_offs(offs, plan.experts, rows)?;
    checked_size(&plan.out_shape, out_dtype)?;
    Ok(plan)
}

/// Validate a quantization request: dense input, a layout valid for its rank.
pub fn plan_quantize(
    shape: &[u64],
    dtype: DType,
    block: BlockLayout,
) -> Result<Vec<u64>, ValidationError> {
    if shape.is_empty() {
        return bad("cannot quantize a rank-0 tensor");
    }
    if !matches!(dtype, DType::F32 | DType::Bf16) {
        return bad(format!(
            "quantize needs an f32 or bf16 tensor, got {}",
            dtype.name()
        ));
    }
    checked_size(shape, dtype)?;
    match scale_shape(shape, block) {
        Some(s) => Ok(s),
        None => bad(format!(
            "block layout {block:?} is not valid for shape {shape:?} (vectors run along one of the last two axes; tiles need rank ≥ 2)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense(shape: &[u64]) -> OperandDesc {
        OperandDesc::dense(shape, DType::F32)
    }

    #[test]
    fn forward_plan_has_rows_by_n_output() {
        let p = plan_grouped_gemm(
            GemmPass::Forward,
            &dense(&[100, 64]),
            &dense(&[3, 32, 64]),
            &[10, 10, 90],
            WeightLayout::Nk,
            DType::Bf16,
        )
        .unwrap();
        assert_eq!(
            p,
            GemmPlan {
                rows: 100,
                n: 32,
                k: 64,
                experts: 3,
                out_shape: vec![100, 32]
            }
        );
        let p = plan_grouped_gemm(
            GemmPass::Forward,
            &dense(&[100, 64]),
            &dense(&[3, 64, 32]),
            &[10, 10, 90],
            WeightLayout::Kn,
            DType::F32,
        )
        .unwrap();
        assert_eq!(p.n, 32);
    }

    #[test]
    fn dgrad_and_wgrad_shapes() {
        let p = plan_grouped_gemm(
            GemmPass::Dgrad,
            &dense(&[8, 32]),
            &dense(&[2, 32, 48]),
            &[4, 8],
            WeightLayout::Nk,
            DType::F32,
        )
        .unwrap();
        assert_eq!(p.out_shape, vec![8, 48]);
        let p = plan_grouped_gemm(
            GemmPass::Wgrad,
            &dense(&[8, 32]),
            &dense(&[8, 48]),
            &[4, 8],
            WeightLayout::Kn,
            DType::F32,
        )
        .unwrap();
        assert_eq!(p.out_shape, vec![2, 48, 32]);
    }

    #[test]
    fn bad_offsets_are_rejected_with_reasons() {
        let run = |offs: &[i32]| {
            plan_grouped_gemm(
                GemmPass::Forward,
                &dense(&[10, 4]),
                &dense(&[3, 4, 4]),
                offs,
                WeightLayout::Nk,
                DType::F32,
            )
        };
        assert!(run(&[1, 2, 3]).is_ok());
        assert!(run(&[0, 0, 10]).is_ok(), "empty experts are fine");
        assert!(run(&[3, 2, 5]).unwrap_err().0.contains("non-decreasing"));
        assert!(run(&[-1, 2, 5]).unwrap_err().0.contains("non-negative"));
        assert!(run(&[1, 2, 11]).unwrap_err().0.contains("only 10 rows"));
        assert!(run(&[1, 2]).unwrap_err().0.contains("3 experts"));
        assert!(run(&[]).unwrap_err().0.contains("empty"));
    }

    #[test]
    fn mismatched_shapes_and_dtypes_are_rejected() {
        let e = plan_grouped_gemm(
            GemmPass::Forward,
            &dense(&[10, 5]),
            &dense(&[1, 4, 4]),
            &[10],
            WeightLayout::Nk,
            DType::F32,
        );
        assert!(e.unwrap_err().0.contains("K = 4"));
        let e = plan_grouped_gemm(
            GemmPass::Forward,
            &dense(&[10, 4]),
            &dense(&[1, 4, 4]),
            &[10],
            WeightLayout::Nk,
            DType::I32,
        );
        assert!(e.unwrap_err().0.contains("output dtype"));
        let int = OperandDesc::dense(&[10, 4], DType::I32);
        let e = plan_grouped_gemm(
            GemmPass::Forward,
            &int,
            &dense(&[1, 4, 4]),
            &[10],
            WeightLayout::Nk,
            DType::F32,
        );
        assert!(e.unwrap_err().0.contains("f32 or bf16"));
        let e = plan_grouped_gemm(
            GemmPass::Wgrad,
            &dense(&[10, 4]),
            &dense(&[9, 4]),
            &[9],
            WeightLayout::Nk,
            DType::F32,
        );
        assert!(e.unwrap_err().0.contains("rows"));
    }

    #[test]
    fn overflowing_shapes_are_rejected() {
        let huge = dense(&[u32::MAX as u64, u32::MAX as u64]);
        let e = plan_grouped_gemm(
            GemmPass::Forward,
            &huge,
            &dense(&[1, 4, u32::MAX as u64]),
            &[1],
            WeightLayout::Nk,
            DType::F32,
        );
        assert!(e.is_err());
        assert!(checked_size(&[u64::MAX, 2], DType::F32).is_err());
    }

    #[test]
    fn mx_operands_need_matching_scales() {
        let mut q = OperandDesc {
            shape: vec![10, 64],
            dtype: DType::E4m3,
            mx: Some(MxDesc {
                format: MxFormat::E4m3,
                block: BlockLayout::vector(1),
                scales_shape: vec![10, 2],
            }),
        };
        let w = dense(&[1, 8, 64]);
        assert!(plan_grouped_gemm(
            GemmPass::Forward,
            &q,
            &w,
            &[10],
            WeightLayout::Nk,
            DType::F32
        )
        .is_ok());
        q.mx.as_mut().unwrap().scales_shape = vec![10, 3];
        assert!(plan_grouped_gemm(
            GemmPass::Forward,
            &q,
            &w,
            &[10],
            WeightLayout::Nk,
            DType::F32
        )
        .is_err());
        q.mx.as_mut().unwrap().scales_shape = vec![10, 2];
        q.dtype = DType::E5m2;
        assert!(plan_grouped_gemm(
            GemmPass::Forward,
            &q,
            &w,
            &[10],
            WeightLayout::Nk,
            DType::F32
        )
        .is_err());
    }

    #[test]
    fn quantize_layouts() {
        assert_eq!(
            plan_quantize(&[4, 40], DType::F32, BlockLayout::vector(1)).unwrap(),
            vec![4, 2]
        );
        assert!(plan_quantize(&[40], DType::F32, BlockLayout::tile()).is_err());
        assert!(plan_quantize(&[4, 40], DType::E4m3, BlockLayout::vector(1)).is_err());
    }
}
