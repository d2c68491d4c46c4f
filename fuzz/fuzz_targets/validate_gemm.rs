//! `plan_grouped_gemm` on arbitrary requests: it must never panic, and an `Ok` plan
//! must be safe to hand to a plugin.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mxhost_fuzz::validate::{
    checked_size, plan_grouped_gemm, MxDesc, OperandDesc, MAX_TENSOR_BYTES,
};
use mxhost_fuzz::Dim;
use mxhost_plugin_abi::{scale_shape, BlockLayout, DType, GemmPass, MxFormat, WeightLayout};

const DTYPES: [DType; 6] = [
    DType::F32,
    DType::Bf16,
    DType::E4m3,
    DType::E5m2,
    DType::E8m0,
    DType::I32,
];

/// One dimension: one of four shared values (so operand shapes can agree) or its own.
#[derive(Arbitrary, Debug)]
enum DimSrc {
    Shared(u8),
    Own(Dim),
}

#[derive(Arbitrary, Debug)]
enum ScalesSrc {
    /// The shape the ABI's `scale_shape` gives (when the layout is valid).
    Correct,
    /// That shape with one entry nudged.
    Nudged(u8, i8),
    /// Anything (rank 0–5).
    Raw(Vec<Dim>),
}

#[derive(Arbitrary, Debug)]
struct MxIn {
    format: bool,
    /// Raw `BlockLayout` kind and axis (unknown kinds and far axes included).
    kind: u8,
    axis: u8,
    scales: ScalesSrc,
}

#[derive(Arbitrary, Debug)]
struct OpIn {
    rank: u8,
    dims: [DimSrc; 5],
    dtype: u8,
    /// `None`: dtype as chosen; with MX, the dtype usually matches the format.
    mx: Option<MxIn>,
    dtype_from_format: bool,
}

#[derive(Arbitrary, Debug)]
enum OffsSrc {
    Raw(Vec<i32>),
    /// Cumulative sums of small steps, one per `experts` (capped at 512 entries).
    Steps(Vec<u8>, bool),
}

#[derive(Arbitrary, Debug)]
struct Input {
    pass: u8,
    /// Replace the operand shapes by ones that agree for the pass, from the shared
    /// dims (rows, N, K, experts), so that most inputs reach the `Ok` checks.
    consistent: bool,
    shared: [Dim; 4],
    a: OpIn,
    b: OpIn,
    offs: OffsSrc,
    layout: bool,
    out_dtype: u8,
}

fn raw_kind(k: u8) -> u32 {
    match k % 4 {
        0 => 0,
        1 => 1,
        2 => 2,
        _ => u32::MAX - (k as u32 >> 2),
    }
}

fn build(op: &OpIn, shared: &[Dim; 4], consistent: Option<Vec<u64>>) -> OperandDesc {
    let rank = (op.rank % 6) as usize;
    let shape: Vec<u64> = consistent.unwrap_or_else(|| {
        op.dims[..rank]
            .iter()
            .map(|d| match d {
                DimSrc::Shared(i) => shared[(*i % 4) as usize].0,
                DimSrc::Own(d) => d.0,
            })
            .collect()
    });
    let mut dtype = DTYPES[(op.dtype % 6) as usize];
    let mx = op.mx.as_ref().map(|m| {
        let format = if m.format {
            MxFormat::E5m2
        } else {
            MxFormat::E4m3
        };
        if op.dtype_from_format {
            dtype = format.dtype();
        }
        let axis = match m.axis % 8 {
            a @ 0..=5 => a as u32,
            _ => u32::MAX - (m.axis >> 3) as u32,
        };
        let block = BlockLayout {
            kind: raw_kind(m.kind),
            axis,
        };
        let correct = scale_shape(&shape, block);
        let scales_shape = match &m.scales {
            ScalesSrc::Correct => correct.unwrap_or_default(),
            ScalesSrc::Nudged(i, d) => {
                let mut s = correct.unwrap_or_else(|| shape.clone());
                if !s.is_empty() {
                    let i = *i as usize % s.len();
                    s[i] = s[i].wrapping_add(*d as i64 as u64);
                }
                s
            }
            ScalesSrc::Raw(v) => v.iter().take(5).map(|d| d.0).collect(),
        };
        MxDesc {
            format,
            block,
            scales_shape,
        }
    });
    OperandDesc { shape, dtype, mx }
}

fn check_ok_operand(op: &OperandDesc, rank: usize) {
    assert_eq!(op.shape.len(), rank);
    let (_, bytes) =
        checked_size(&op.shape, op.dtype).expect("accepted operand must have a checked size");
    assert!(bytes <= MAX_TENSOR_BYTES);
    match &op.mx {
        None => assert!(matches!(op.dtype, DType::F32 | DType::Bf16)),
        Some(mx) => {
            assert_eq!(op.dtype, mx.format.dtype());
            assert_eq!(
                scale_shape(&op.shape, mx.block).as_ref(),
                Some(&mx.scales_shape)
            );
        }
    }
}

fuzz_target!(|input: Input| {
    let pass = match input.pass % 3 {
        0 => GemmPass::Forward,
        1 => GemmPass::Dgrad,
        _ => GemmPass::Wgrad,
    };
    let layout = if input.layout {
        WeightLayout::Kn
    } else {
        WeightLayout::Nk
    };
    let out_dtype = DTYPES[(input.out_dtype % 6) as usize];
    let (a_shape, b_shape) = if input.consistent {
        let [rows, n, k, e] = input.shared.map(|d| d.0);
        let w = match layout {
            WeightLayout::Nk => vec![e, n, k],
            WeightLayout::Kn => vec![e, k, n],
        };
        match pass {
            GemmPass::Forward => (Some(vec![rows, k]), Some(w)),
            GemmPass::Dgrad => (Some(vec![rows, n]), Some(w)),
            GemmPass::Wgrad => (Some(vec![rows, n]), Some(vec![rows, k])),
        }
    } else {
        (None, None)
    };
    let a = build(&input.a, &input.shared, a_shape);
    let b = build(&input.b, &input.shared, b_shape);
    let offs: Vec<i32> = match &input.offs {
        OffsSrc::Raw(v) => v.clone(),
        OffsSrc::Steps(steps, to_rows) => {
            let experts = match pass {
                GemmPass::Wgrad => steps.len() as u64,
                _ => b.shape.first().copied().unwrap_or(0),
            };
            let n = experts.min(512) as usize;
            let mut acc = 0i32;
            let mut v: Vec<i32> = (0..n)
                .map(|i| {
                    acc = acc.saturating_add(*steps.get(i).unwrap_or(&0) as i32);
                    acc
                })
                .collect();
            if *to_rows {
                if let (Some(last), Some(&rows)) = (v.last_mut(), a.shape.first()) {
                    *last = rows.min(i32::MAX as u64) as i32;
                }
            }
            v
        }
    };

    let Ok(plan) = plan_grouped_gemm(pass, &a, &b, &offs, layout, out_dtype) else {
        return;
    };

    // Operands as described are sound.
    check_ok_operand(&a, 2);
    let b_rank = if pass == GemmPass::Wgrad { 2 } else { 3 };
    check_ok_operand(&b, b_rank);
    assert!(matches!(out_dtype, DType::F32 | DType::Bf16));

    // Sizes.
    assert!(
        plan.n > 0 && plan.k > 0,
        "N and K must be positive: {plan:?}"
    );
    assert_eq!(plan.rows, a.shape[0]);
    assert_eq!(plan.experts, offs.len() as u64, "experts == offs.len()");
    let (out_numel, out_bytes) =
        checked_size(&plan.out_shape, out_dtype).expect("out_shape must have a checked size");
    assert!(out_bytes <= MAX_TENSOR_BYTES);
    assert_eq!(
        out_numel.checked_mul(out_dtype.size_bytes()),
        Some(out_bytes)
    );

    // Shapes agree with the pass.
    let (n, k) = (plan.n, plan.k);
    match pass {
        GemmPass::Forward | GemmPass::Dgrad => {
            assert_eq!(plan.experts, b.shape[0]);
            let w = match layout {
                WeightLayout::Nk => [b.shape[0], n, k],
                WeightLayout::Kn => [b.shape[0], k, n],
            };
            assert_eq!(b.shape, w);
            let (inner, outer) = if pass == GemmPass::Forward {
                (k, n)
            } else {
                (n, k)
            };
            assert_eq!(a.shape[1], inner);
            assert_eq!(plan.out_shape, vec![plan.rows, outer]);
        }
        GemmPass::Wgrad => {
            assert_eq!(a.shape, [plan.rows, n]);
            assert_eq!(b.shape, [plan.rows, k]);
            let want = match layout {
                WeightLayout::Nk => vec![plan.experts, n, k],
                WeightLayout::Kn => vec![plan.experts, k, n],
            };
            assert_eq!(plan.out_shape, want);
        }
    }

    // Offsets: non-empty, non-negative, non-decreasing, last ≤ rows.
    assert!(!offs.is_empty());
    let mut prev = 0i64;
    for &o in &offs {
        assert!(o as i64 >= prev, "offs not monotonic: {offs:?}");
        prev = o as i64;
    }
    assert!(
        prev as u64 <= plan.rows,
        "offs end {prev} > rows {}",
        plan.rows
    );
});
