//! The backend boundary and the ABI entry bodies every plugin shares.
//!
//! A plugin's exported functions are one-liners that call [`quantize`], [`dequantize`]
//! or [`grouped_gemm`] here with its backend selector. Those read and validate the
//! descriptor (device-agnostic, see [`crate::args`]), then dispatch on the device the
//! tensors live on — the single place where a CUDA or HIP backend is plugged in beside
//! the CPU one. Everything runs inside `guard_entry`, so a panic (including one in a
//! rayon worker, which rayon re-raises on the calling thread) becomes `Status::Panic`.

use crate::args::{AnnexSpec, DequantizeArgs, FillBytesArgs, GemmArgs, QuantizeArgs};
use mxhost_plugin_abi::plugin_support::{
    guard_entry, read_desc, read_desc_grown, PluginError, PluginResult,
};
use mxhost_plugin_abi::{
    AnnexQuery, DequantizeDesc, DeviceKind, ErrorBuf, FillBytesDesc, GroupedGemmDesc, QuantizeDesc,
    ANNEX_QUERY_SIZE_1_3, QUANTIZE_DESC_SIZE_1_0,
};

/// One compute backend (CPU today; CUDA and HIP later). Receives validated requests;
/// a backend for device memory uses the raw pointers and `stream` as they are.
pub trait Backend: Sync {
    fn quantize(&self, args: &QuantizeArgs) -> PluginResult<()>;
    fn dequantize(&self, args: &DequantizeArgs) -> PluginResult<()>;
    fn grouped_gemm(&self, args: &GemmArgs) -> PluginResult<()>;
    /// ABI 1.3: the annex (i32 words) this backend wants beside an MX tensor a quantize
    /// call will write; 0, the default, keeps none.
    fn annex_words(&self, spec: &AnnexSpec) -> PluginResult<u64> {
        let _ = spec;
        Ok(0)
    }
    /// ABI 1.7: write the bytes of `args.tensor` that a quantize call with
    /// `bytes_on_demand` left out. The default, for a backend that never leaves any out,
    /// does nothing.
    fn fill_bytes(&self, args: &FillBytesArgs) -> PluginResult<()> {
        let _ = args;
        Ok(())
    }
}

/// Picks the backend for a device, or says why there is none.
pub type SelectBackend = fn(DeviceKind) -> PluginResult<&'static dyn Backend>;

/// The error for a device whose backend is not compiled in or not usable.
pub fn device_unavailable(device: DeviceKind) -> PluginError {
    PluginError::unsupported(match device {
        DeviceKind::Cpu => "CPU backend not built/available",
        DeviceKind::Cuda => "CUDA backend not built/available",
        DeviceKind::Hip => "HIP backend not built/available",
    })
}

/// Body of a plugin's `quantize` entry.
///
/// # Safety
/// `desc` and `err` are what the host passed (null or valid, per the ABI).
pub unsafe fn quantize(
    desc: *const QuantizeDesc,
    err: *mut ErrorBuf,
    select: SelectBackend,
) -> u32 {
    guard_entry(err, || {
        // SAFETY: the host passes null or a readable descriptor (ABI contract).
        let desc = unsafe { read_desc_grown(desc, QUANTIZE_DESC_SIZE_1_0)? };
        // SAFETY: the ABI contract: `wgrad_offs` is null or holds `wgrad_num_groups`
        // offsets (zero-filled, hence absent, in an older descriptor).
        let args = unsafe { QuantizeArgs::parse(&desc)? };
        select(args.device)?.quantize(&args)
    })
}

/// Body of a plugin's `dequantize` entry.
///
/// # Safety
/// As for [`quantize`].
pub unsafe fn dequantize(
    desc: *const DequantizeDesc,
    err: *mut ErrorBuf,
    select: SelectBackend,
) -> u32 {
    guard_entry(err, || {
        // SAFETY: the host passes null or a readable descriptor (ABI contract).
        let desc = unsafe { read_desc(desc)? };
        let args = DequantizeArgs::parse(&desc)?;
        select(args.device)?.dequantize(&args)
    })
}

/// Body of a plugin's `grouped_gemm` entry.
///
/// # Safety
/// As for [`quantize`]; `offs_host` points at `num_groups` readable `i32`s.
pub unsafe fn grouped_gemm(
    desc: *const GroupedGemmDesc,
    err: *mut ErrorBuf,
    select: SelectBackend,
) -> u32 {
    guard_entry(err, || {
        // SAFETY: the host passes null or a readable descriptor (ABI contract).
        let desc = unsafe { read_desc(desc)? };
        // SAFETY: offs_host is valid for num_groups reads (ABI contract).
        let args = unsafe { GemmArgs::parse(&desc)? };
        select(args.device)?.grouped_gemm(&args)
    })
}

/// Body of a plugin's `fill_bytes` entry (ABI 1.7).
///
/// # Safety
/// As for [`quantize`].
pub unsafe fn fill_bytes(
    desc: *const FillBytesDesc,
    err: *mut ErrorBuf,
    select: SelectBackend,
) -> u32 {
    guard_entry(err, || {
        // SAFETY: the host passes null or a readable descriptor (ABI contract).
        let desc = unsafe { read_desc(desc)? };
        let args = FillBytesArgs::parse(&desc)?;
        select(args.device)?.fill_bytes(&args)
    })
}

/// Body of a plugin's `annex_words` entry (ABI 1.3).
///
/// # Safety
/// `query` and `err` are what the host passed (null or valid); `words` is null or
/// writable.
pub unsafe fn annex_words(
    query: *const AnnexQuery,
    words: *mut u64,
    err: *mut ErrorBuf,
    select: SelectBackend,
) -> u32 {
    guard_entry(err, || {
        if words.is_null() {
            return Err(PluginError::invalid("annex_words: null output"));
        }
        // SAFETY: the host passes null or a readable query (ABI contract); a zero
        // `partner_kept` is valid for a 1.3 query that ends before it.
        let query = unsafe { read_desc_grown(query, ANNEX_QUERY_SIZE_1_3)? };
        let spec = AnnexSpec::parse(&query)?;
        let n = select(spec.device)?.annex_words(&spec)?;
        // SAFETY: checked non-null; the host passes a writable u64.
        unsafe { *words = n };
        Ok(())
    })
}

/// An ABI entry that always answers Unsupported (e.g. `quantize` in a plugin that
/// does not quantize).
pub fn unsupported(err: *mut ErrorBuf, message: &str) -> u32 {
    guard_entry(err, || Err(PluginError::unsupported(message)))
}
