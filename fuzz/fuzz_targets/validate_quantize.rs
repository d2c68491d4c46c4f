//! `plan_quantize` and the ABI's `scale_shape` on arbitrary shapes, dtypes and raw
//! block layouts: never panic; an `Ok` plan has a consistent scale shape (each
//! blocked dim = ceil(dim/32), the others unchanged) that the plugin agrees with.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mxhost_fuzz::validate::{checked_size, plan_quantize, MAX_TENSOR_BYTES};
use mxhost_fuzz::Dim;
use mxhost_plugin_abi::{scale_shape, BlockKind, BlockLayout, DType, MAX_RANK};

const DTYPES: [DType; 6] = [
    DType::F32,
    DType::Bf16,
    DType::E4m3,
    DType::E5m2,
    DType::E8m0,
    DType::I32,
];

#[derive(Arbitrary, Debug)]
struct Input {
    rank: u8,
    dims: [Dim; 6],
    dtype: u8,
    kind: u8,
    axis: u8,
    raw_kind: u32,
    raw_axis: u32,
}

fn blocked_axes(shape: &[u64], layout: BlockLayout) -> Option<Vec<usize>> {
    let rank = shape.len();
    if rank == 0 {
        return None;
    }
    match BlockKind::from_raw(layout.kind)? {
        BlockKind::Vector => {
            let a = layout.axis as usize;
            (a < rank && a + 2 >= rank).then(|| vec![a])
        }
        BlockKind::Tile32x32 => (rank >= 2).then(|| vec![rank - 2, rank - 1]),
    }
}

fuzz_target!(|input: Input| {
    let rank = (input.rank % 7) as usize;
    let shape: Vec<u64> = input.dims[..rank].iter().map(|d| d.0).collect();
    let dtype = DTYPES[(input.dtype % 6) as usize];
    let layout = match input.kind % 4 {
        0 => BlockLayout::vector((input.axis % 8) as u32),
        1 => BlockLayout::tile(),
        2 => BlockLayout {
            kind: 1,
            axis: input.raw_axis,
        },
        _ => BlockLayout {
            kind: input.raw_kind,
            axis: input.raw_axis,
        },
    };

    // The ABI rule on its own.
    let s = scale_shape(&shape, layout);
    match (&s, blocked_axes(&shape, layout)) {
        (Some(s), Some(axes)) => {
            assert_eq!(s.len(), shape.len());
            for (i, (&d, &sd)) in shape.iter().zip(s).enumerate() {
                let want = if axes.contains(&i) { d.div_ceil(32) } else { d };
                assert_eq!(sd, want, "scale dim {i} of {shape:?} in {layout:?}");
            }
        }
        (None, None) => {}
        (s, a) => panic!("scale_shape {s:?} but blocked axes {a:?} for {shape:?} {layout:?}"),
    }

    let Ok(plan) = plan_quantize(&shape, dtype, layout) else {
        return;
    };
    assert!(!shape.is_empty() && shape.len() <= MAX_RANK);
    assert!(matches!(dtype, DType::F32 | DType::Bf16));
    assert_eq!(
        Some(&plan),
        s.as_ref(),
        "plan_quantize disagrees with scale_shape"
    );
    let (numel, bytes) = checked_size(&shape, dtype).expect("accepted shape has a size");
    assert!(bytes <= MAX_TENSOR_BYTES);
    // The scale tensor is never larger than the data.
    let snumel = plan.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    assert!(
        matches!(snumel, Some(n) if n <= numel),
        "scales {plan:?} vs numel {numel}"
    );
    // The plugin sizes the same request identically.
    assert_eq!(
        mxhost_plugin_mxfp8::scale_count(&shape, layout).map(|c| c as u64),
        snumel,
        "plugin scale_count disagrees for {shape:?} {layout:?}"
    );
});
