//! Conversions between the WIT types the guest sees and the ABI/host types.

use super::bindings::types as wit;
use crate::error::{ErrorKind, OpError};
use mxhost_plugin_abi::{BlockKind, BlockLayout, DType, MxFormat, ScaleMode};

pub fn dtype_from_wit(d: wit::Dtype) -> DType {
    match d {
        wit::Dtype::F32 => DType::F32,
        wit::Dtype::Bf16 => DType::Bf16,
        wit::Dtype::E4m3 => DType::E4m3,
        wit::Dtype::E5m2 => DType::E5m2,
        wit::Dtype::E8m0 => DType::E8m0,
        wit::Dtype::I32 => DType::I32,
    }
}

pub fn dtype_to_wit(d: DType) -> wit::Dtype {
    match d {
        DType::F32 => wit::Dtype::F32,
        DType::Bf16 => wit::Dtype::Bf16,
        DType::E4m3 => wit::Dtype::E4m3,
        DType::E5m2 => wit::Dtype::E5m2,
        DType::E8m0 => wit::Dtype::E8m0,
        DType::I32 => wit::Dtype::I32,
    }
}

pub fn format_from_wit(f: wit::ElementFormat) -> MxFormat {
    match f {
        wit::ElementFormat::E4m3 => MxFormat::E4m3,
        wit::ElementFormat::E5m2 => MxFormat::E5m2,
    }
}

pub fn format_to_wit(f: MxFormat) -> wit::ElementFormat {
    match f {
        MxFormat::E4m3 => wit::ElementFormat::E4m3,
        MxFormat::E5m2 => wit::ElementFormat::E5m2,
    }
}

pub fn mode_from_wit(m: wit::ScaleMode) -> ScaleMode {
    match m {
        wit::ScaleMode::Rceil => ScaleMode::Rceil,
        wit::ScaleMode::Floor => ScaleMode::Floor,
        wit::ScaleMode::Even => ScaleMode::Even,
    }
}

pub fn mode_to_wit(m: ScaleMode) -> wit::ScaleMode {
    match m {
        ScaleMode::Rceil => wit::ScaleMode::Rceil,
        ScaleMode::Floor => wit::ScaleMode::Floor,
        ScaleMode::Even => wit::ScaleMode::Even,
    }
}

pub fn block_from_wit(b: wit::BlockLayout) -> BlockLayout {
    match b {
        wit::BlockLayout::Along(axis) => BlockLayout::vector(axis),
        wit::BlockLayout::Tile32x32 => BlockLayout::tile(),
    }
}

pub fn block_to_wit(b: BlockLayout) -> wit::BlockLayout {
    match BlockKind::from_raw(b.kind) {
        Some(BlockKind::Tile32x32) => wit::BlockLayout::Tile32x32,
        _ => wit::BlockLayout::Along(b.axis),
    }
}

pub fn error_to_wit(e: OpError) -> wit::Error {
    let kind = match e.kind {
        ErrorKind::InvalidArgument => wit::ErrorKind::InvalidArgument,
        ErrorKind::Unsupported => wit::ErrorKind::Unsupported,
        ErrorKind::LimitExceeded => wit::ErrorKind::LimitExceeded,
        ErrorKind::RejectedByGuard => wit::ErrorKind::RejectedByGuard,
        ErrorKind::BackendFailure => wit::ErrorKind::BackendFailure,
        ErrorKind::BadHandle => wit::ErrorKind::BadHandle,
    };
    wit::Error {
        kind,
        message: e.message,
    }
}

/// Shape from the guest (u32 dims) to host dims.
pub fn dims(shape: &[u32]) -> Vec<u64> {
    shape.iter().map(|&d| d as u64).collect()
}

/// Host dims back to the guest (validated shapes always fit u32 dims).
pub fn dims_to_wit(shape: &[u64]) -> Vec<u32> {
    shape
        .iter()
        .map(|&d| u32::try_from(d).unwrap_or(u32::MAX))
        .collect()
}
