//! TMA tensor maps (`cuTensorMapEncodeTiled`): the operand and output maps of the
//! `mx_tgemm_*` kernels and the input map of the TMA quantizer, and when the TMA kernels
//! can take a launch at all (driver, alignment, strides), else why not.

use super::device::Dev;
use super::params::{GemmParams, TGemmParams};
use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::driver::sys as cu;

/// A 2-D UINT8 tensor map for `mx_tgemm_*` (README: box 128 × 128, SWIZZLE_128B, L2
/// promotion 256 B, OOB zero fill): `rows` rows of `inner` bytes, `ld` bytes apart.
/// `Err(reason)` where TMA cannot describe the operand.
pub(super) fn encode_2d(addr: u64, inner: u64, rows: u64, ld: u64) -> Result<[u64; 16], String> {
    encode_2d_box(addr, inner, rows, ld, false, [128, 128], true)
}

/// [`encode_2d`] with the element type (bf16 or bytes), the box (elements) and the
/// swizzle (128 B or none) as arguments: `inner` counts elements, `ld` bytes.
pub(super) fn encode_2d_box(
    addr: u64,
    inner: u64,
    rows: u64,
    ld: u64,
    bf16: bool,
    boxd: [u32; 2],
    swizzle_128b: bool,
) -> Result<[u64; 16], String> {
    use cu::CUtensorMapDataType::{
        CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_DATA_TYPE_UINT8,
    };
    use cu::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
    use cu::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE;
    use cu::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    use cu::CUtensorMapSwizzle::{CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_SWIZZLE_NONE};
    // cuTensorMapEncodeTiled's rules: global address 16-byte aligned, global strides
    // multiples of 16 bytes and < 2^40, every global dimension in 1..=2^32 (the driver
    // rejects 0 rows: encode 1, the kernel never reads past its row count).
    if !addr.is_multiple_of(16) {
        return Err(format!(
            "operand address {addr:#x} is not 16-byte aligned (TMA)"
        ));
    }
    if !ld.is_multiple_of(16) || ld >= 1 << 40 {
        return Err(format!(
            "row stride {ld} B is not a multiple of 16 bytes below 2^40 (TMA global stride)"
        ));
    }
    let rows = rows.max(1);
    if inner == 0 || inner > 1 << 32 || rows > 1 << 32 {
        return Err(format!(
            "TMA global dimensions {inner} × {rows} out of range"
        ));
    }
    let dims: [u64; 2] = [inner, rows];
    let strides: [u64; 1] = [ld];
    let estr: [u32; 2] = [1, 1];
    let mut tm = cu::CUtensorMap { opaque: [0; 16] };
    // SAFETY: all arrays are live for the call and sized for rank 2; encoding is a pure
    // host call that writes `tm`.
    let rc = unsafe {
        cu::cuTensorMapEncodeTiled(
            &mut tm,
            if bf16 {
                CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
            } else {
                CU_TENSOR_MAP_DATA_TYPE_UINT8
            },
            2,
            addr as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxd.as_ptr(),
            estr.as_ptr(),
            CU_TENSOR_MAP_INTERLEAVE_NONE,
            if swizzle_128b {
                CU_TENSOR_MAP_SWIZZLE_128B
            } else {
                CU_TENSOR_MAP_SWIZZLE_NONE
            },
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if rc != cu::CUresult::CUDA_SUCCESS {
        return Err(format!(
            "cuTensorMapEncodeTiled({inner} × {rows}, ld {ld}) returned {rc:?}"
        ));
    }
    Ok(tm.opaque)
}

/// Whether the driver has `cuTensorMapEncodeTiled` (CUDA ≥ 12.0; cudarc panics on a
/// missing symbol, so probe first).
pub(super) fn tensor_map_available(dev: &Dev) -> bool {
    static A: OnceLock<bool> = OnceLock::new();
    !dev.portable
        && dev.driver >= 12000
        && *A.get_or_init(|| {
            // SAFETY: looks the symbol up in the already loaded driver library.
            unsafe {
                cu::culib()
                    .get::<unsafe extern "C" fn()>(b"cuTensorMapEncodeTiled")
                    .is_ok()
            }
        })
}

/// The `mx_tgemm_*` parameter block for `p` (README "Tensor maps"), or why the TMA
/// kernels cannot run it. What makes `mx_tgemm_*` fall back to `mx_gemm_*`:
/// - a driver without `cuTensorMapEncodeTiled` (CUDA < 12.0);
/// - A or B not 16-byte aligned (TMA global address), SA or SB not 16-byte aligned
///   (bulk copies of the scale tables); our scratch buffers always are, a pre-quantized
///   operand passed in place might not be;
/// - `lda`/`ldb` not multiples of 16 bytes (TMA global strides; forward/dgrad already
///   require K % 16 == 0 and wgrad's padded layout has ld = Mpad, a multiple of 128, so
///   this is a guard, not an expected case); grouped mode also needs `b_es % ldb == 0`;
/// - any other encoding error of the driver.
///
/// (The device not giving the ~225 KB of shared memory is checked when the kernel
/// loads, [`Dev::func_opt`].) Wgrad runs each expert's whole zero-padded segment:
/// both wgrad producers (grouped `COLS` quantizer, `mx_wgrad_relayout`) write zeros
/// with a finite scale there, so every wgrad the backend launches qualifies.
pub(super) fn tgemm_params(dev: &Dev, p: &GemmParams) -> Result<TGemmParams, String> {
    if !tensor_map_available(dev) {
        return Err(format!(
            "driver {} has no cuTensorMapEncodeTiled",
            dev.driver
        ));
    }
    if !p.sa.is_multiple_of(16) || !p.sb.is_multiple_of(16) {
        return Err("scale tables not 16-byte aligned (bulk copies)".into());
    }
    let (lda, ldb) = (p.lda as u64, p.ldb as u64);
    let (tm_a, tm_b) = if p.batched == 0 {
        if p.k % 16 != 0 || p.ldb <= 0 || p.b_es % p.ldb != 0 {
            return Err(format!(
                "grouped mode needs K % 16 == 0 and b_es % ldb == 0 (K {}, b_es {}, ldb {})",
                p.k, p.b_es, p.ldb
            ));
        }
        let brows = p.e as u64 * (p.b_es / p.ldb) as u64;
        (
            encode_2d(p.a, p.k as u64, p.m as u64, lda)?,
            encode_2d(p.b, p.k as u64, brows, ldb)?,
        )
    } else {
        (
            encode_2d(p.a, lda, p.m as u64, lda)?,
            encode_2d(p.b, ldb, p.n as u64, ldb)?,
        )
    };
    Ok(TGemmParams::new(tm_a, tm_b, *p))
}

/// The output's tensor map for a TMA-store kernel (bf16 `[rows][N]`, box 64 × 64,
/// SWIZZLE_128B; batched: rows = E · M, which needs `o_es == M · ldo` and no transposed
/// store), or `None`: then every tile takes the register epilogue (same results).
pub(super) fn out_map(p: &GemmParams) -> Option<[u64; 16]> {
    if p.batched != 0 && (p.out_t != 0 || p.o_es != p.m as i64 * p.ldo) {
        return None;
    }
    let rows = if p.batched != 0 {
        p.e as u64 * p.m as u64
    } else {
        p.m as u64
    };
    encode_2d_box(
        p.out,
        p.n as u64,
        rows,
        p.ldo as u64 * 2,
        true,
        [64, 64],
        true,
    )
    .ok()
}
