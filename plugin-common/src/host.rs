//! Host-memory access: turning a validated [`TensorArg`] into a Rust slice.
//!
//! This is the only place the CPU backends build slices from the host's raw pointers.
//! [`TensorArg::parse`] has already checked that the byte size fits in memory and that
//! the pointer is non-null when there is data; the functions here add the device,
//! element-type and alignment checks and then rely on the ABI's ownership rule (the host
//! allocated `numel × size` bytes and keeps them alive for the call) for the rest.

use crate::args::{MxArg, OperandArg, TensorArg};
use crate::dense::{DenseMut, DenseRef};
use half::bf16;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::{BlockLayout, DType, DeviceKind, MxFormat, ScaleMode};

/// A Rust type a host buffer of some [`DType`]s can be viewed as.
pub trait HostElem: Copy + 'static {
    fn accepts(dtype: DType) -> bool;
}

impl HostElem for f32 {
    fn accepts(dtype: DType) -> bool {
        dtype == DType::F32
    }
}
impl HostElem for bf16 {
    fn accepts(dtype: DType) -> bool {
        dtype == DType::Bf16
    }
}
impl HostElem for i32 {
    fn accepts(dtype: DType) -> bool {
        dtype == DType::I32
    }
}
impl HostElem for u8 {
    fn accepts(dtype: DType) -> bool {
        matches!(dtype, DType::E4m3 | DType::E5m2 | DType::E8m0)
    }
}

fn check<T: HostElem>(t: &TensorArg) -> PluginResult<()> {
    if t.device != DeviceKind::Cpu {
        return Err(PluginError::invalid(format!(
            "{} is not in host memory",
            t.what
        )));
    }
    if !T::accepts(t.dtype) || std::mem::size_of::<T>() as u64 != t.dtype.size_bytes() {
        return Err(PluginError::invalid(format!(
            "{}: dtype {} cannot be viewed as {}",
            t.what,
            t.dtype.name(),
            std::any::type_name::<T>()
        )));
    }
    if t.numel > 0 && !(t.ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(PluginError::invalid(format!(
            "{}: data pointer is not aligned for {}",
            t.what,
            t.dtype.name()
        )));
    }
    Ok(())
}

/// View a host tensor as `&[T]`.
///
/// # Safety
/// `t` came from [`TensorArg::parse`] of a descriptor whose buffer the host allocated
/// with at least `numel × size_of::<T>()` readable bytes, alive and not written by
/// anyone else for `'a` (the ABI's ownership rule for the duration of a call).
pub unsafe fn slice<'a, T: HostElem>(t: &TensorArg) -> PluginResult<&'a [T]> {
    check::<T>(t)?;
    if t.numel == 0 {
        return Ok(&[]);
    }
    // SAFETY: non-null (TensorArg::parse), aligned for T and a host pointer (check), and
    // valid for numel elements of T by this function's precondition; numel·size ≤
    // isize::MAX (TensorArg::parse).
    Ok(unsafe { std::slice::from_raw_parts(t.ptr as *const T, t.numel) })
}

/// View a host tensor as `&mut [T]`.
///
/// # Safety
/// As for [`slice`], with the bytes writable and not accessed through any other
/// reference for `'a` (outputs are checked not to overlap inputs in [`crate::args`]).
pub unsafe fn slice_mut<'a, T: HostElem>(t: &TensorArg) -> PluginResult<&'a mut [T]> {
    check::<T>(t)?;
    if t.numel == 0 {
        return Ok(&mut []);
    }
    // SAFETY: as in `slice`, plus exclusive access by the precondition.
    Ok(unsafe { std::slice::from_raw_parts_mut(t.ptr as *mut T, t.numel) })
}

/// View a dense f32/bf16 host tensor.
///
/// # Safety
/// As for [`slice`].
pub unsafe fn dense<'a>(t: &TensorArg) -> PluginResult<DenseRef<'a>> {
    // SAFETY: forwarded precondition.
    unsafe {
        match t.dtype {
            DType::F32 => Ok(DenseRef::F32(slice(t)?)),
            DType::Bf16 => Ok(DenseRef::Bf16(slice(t)?)),
            other => Err(PluginError::invalid(format!(
                "{}: {} is not f32 or bf16",
                t.what,
                other.name()
            ))),
        }
    }
}

/// View a dense f32/bf16 host tensor for writing.
///
/// # Safety
/// As for [`slice_mut`].
pub unsafe fn dense_mut<'a>(t: &TensorArg) -> PluginResult<DenseMut<'a>> {
    // SAFETY: forwarded precondition.
    unsafe {
        match t.dtype {
            DType::F32 => Ok(DenseMut::F32(slice_mut(t)?)),
            DType::Bf16 => Ok(DenseMut::Bf16(slice_mut(t)?)),
            other => Err(PluginError::invalid(format!(
                "{}: {} is not f32 or bf16",
                t.what,
                other.name()
            ))),
        }
    }
}

/// An MX tensor in host memory.
#[derive(Debug, Clone, Copy)]
pub struct HostMx<'a> {
    pub data: &'a [u8],
    pub scales: &'a [u8],
    pub shape: &'a [u64],
    pub format: MxFormat,
    pub mode: ScaleMode,
    pub block: BlockLayout,
}

/// View an MX tensor in host memory.
///
/// # Safety
/// As for [`slice`], for both the data and the scale buffer.
pub unsafe fn mx<'a>(m: &'a MxArg) -> PluginResult<HostMx<'a>> {
    Ok(HostMx {
        // SAFETY: forwarded precondition.
        data: unsafe { slice(&m.data)? },
        // SAFETY: forwarded precondition.
        scales: unsafe { slice(&m.scales)? },
        shape: &m.data.shape,
        format: m.format,
        mode: m.mode,
        block: m.block,
    })
}

/// A GEMM operand in host memory.
#[derive(Debug, Clone, Copy)]
pub enum HostOperand<'a> {
    Dense {
        data: DenseRef<'a>,
        shape: &'a [u64],
    },
    Mx(HostMx<'a>),
}

/// View a GEMM operand in host memory.
///
/// # Safety
/// As for [`slice`], for every buffer of the operand.
pub unsafe fn operand<'a>(op: &'a OperandArg) -> PluginResult<HostOperand<'a>> {
    // SAFETY: forwarded precondition.
    unsafe {
        Ok(match op {
            OperandArg::Dense(t) => HostOperand::Dense {
                data: dense(t)?,
                shape: &t.shape,
            },
            OperandArg::Mx(m) => HostOperand::Mx(mx(m)?),
        })
    }
}

/// `dst = src` with the last two axes of `shape` swapped (a batched matrix transpose of
/// `[.., r, c]` into `[.., c, r]`). Used to write the `transposed` copy of a quantization:
/// MX bytes and scales move as they are, nothing is re-rounded.
pub fn transpose_last2<T: Copy + Send + Sync>(src: &[T], dst: &mut [T], shape: &[u64]) {
    use rayon::prelude::*;
    let rank = shape.len();
    assert!(rank >= 2, "transpose_last2 needs two axes");
    let (r, c) = (shape[rank - 2] as usize, shape[rank - 1] as usize);
    let mat = r * c;
    assert_eq!(src.len(), dst.len());
    if mat == 0 {
        return;
    }
    dst.par_chunks_mut(mat)
        .zip(src.par_chunks(mat))
        .for_each(|(d, s)| {
            for i in 0..r {
                for j in 0..c {
                    d[j * r + i] = s[i * c + j];
                }
            }
        });
}

#[cfg(test)]
mod transpose_tests {
    #[test]
    fn transpose_last2_swaps_the_last_two_axes_of_each_matrix() {
        let src: Vec<u8> = (0..12).collect(); // [2, 2, 3]
        let mut dst = vec![0u8; 12];
        super::transpose_last2(&src, &mut dst, &[2, 2, 3]);
        assert_eq!(dst, vec![0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11]);
    }
}
