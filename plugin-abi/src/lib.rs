//! The versioned C ABI between `mxhost` and its native precision plugins.
//!
//! A plugin is a shared library exporting one symbol, [`ENTRY_SYMBOL`]
//! (`mxhost_plugin_entry`), an `extern "C" fn() -> *const PluginApi`. The table it
//! returns starts with a magic number, the ABI major/minor version and its own
//! `struct_size`, so that a host can refuse a plugin built against another ABI with a
//! clear error instead of calling through a mismatched table (the PJRT pattern).
//!
//! Ownership: the **host owns every buffer** (host or device memory) and passes raw
//! pointers plus shapes and a stream handle; a plugin only reads its inputs and writes
//! its outputs. That is why swapping plugins never copies a tensor. Errors come back as
//! a [`Status`] code plus a message the plugin writes into a host-provided
//! [`ErrorBuf`]. Every entry point must catch panics (see [`guard_entry`]); a plugin is
//! never unloaded while the process lives.
//!
//! Compatibility rules: a new *minor* version may only append fields at the end of a
//! top-level descriptor (`PluginApi`, `QuantizeDesc`, `DequantizeDesc`,
//! `GroupedGemmDesc`: readers check `struct_size` before touching them) or append
//! functions at the end of [`PluginApi`]. Structs embedded by value (`TensorView`,
//! `MxTensorView`, `Operand`, `GemmOptions`) are frozen within a major version, since
//! growing one would shift its parent's fields; anything else bumps the *major* version.
//!
//! History: 1.0 first version; 1.1 appended `QuantizeDesc::transposed` (quantize into
//! both layouts of the last two axes in one call). A host only sets it for plugins that
//! report minor ≥ 1; plugins read 1.0 descriptors with `read_desc_grown`. 1.2 appended
//! `QuantizeDesc::values` (also write the exact MX values in bf16) and the operand kinds
//! `MxWithValues` / `MxWithValuesSwapped` that pass them to a GEMM; a host uses either only
//! with plugins that report minor ≥ 2. 1.3 appended `PluginApi::annex_words` (may be null),
//! `QuantizeDesc::annex` / `transposed_annex` and the operand kind `MxWithAnnex`: a plugin
//! may keep private data beside an MX tensor it writes (host-allocated, host-owned, handed
//! back only to that plugin); a host reads `annex_words` only from tables whose
//! `struct_size` covers it. 1.4 appended `AnnexQuery::partner_kept`: the two results of a
//! transposing quantize each keep the other's data (and, from 1.7, its annex) alive, so a
//! plugin's annex of one may refer to the other's bytes and form (a host sets it only for plugins that report minor ≥ 4;
//! plugins read 1.3 queries with `read_desc_grown`). 1.5 appended
//! `QuantizeDesc::wgrad_values` / `wgrad_offs` / `wgrad_num_groups` (also write the values
//! wgrad would quantize the input to, from the same pass) and the operand kind
//! `DenseMxValues` that hands them to wgrad; a host uses either only with plugins that
//! report minor ≥ 5. 1.6 appended `AnnexQuery::for_gemm` (the caller quantizes the tensor
//! to be a GEMM operand: a plugin may give it an annex by default and others none); a host
//! sets it only for plugins that report minor ≥ 6. 1.7 appended
//! `QuantizeDesc::bytes_on_demand` (the host will call `PluginApi::fill_bytes` before anything
//! but the plugin's own GEMMs reads the MX tensor's bytes, so the plugin may leave out bytes
//! its annex gives back) and `PluginApi::fill_bytes` (may be null); a host sets the first
//! only for plugins that report minor ≥ 7 and have the second. 1.8 gave
//! `QuantizeDesc::bytes_on_demand` the value 2 (`BYTES_ON_DEMAND_WITH_SCALES`: the host asks
//! before it reads the scales too, so the plugin may leave those out as well); a host sets 2
//! only for plugins that report minor ≥ 8. Nothing was appended. 1.9 appended
//! `QuantizeDesc::weight` and `weight_annex` (the weight the output will be multiplied with in
//! forward or dgrad, with this plugin's annex: a hint that lets the plugin write only the part
//! of the output's annex that GEMM reads); a host sets them only for plugins that report
//! minor ≥ 9.

use std::ffi::{c_char, c_void};

pub mod layout;
pub mod plugin_support;

pub use layout::*;

/// Name of the single exported entry symbol (NUL-terminated for `dlsym`).
pub const ENTRY_SYMBOL: &[u8] = b"mxhost_plugin_entry\0";
/// `"MXHOSTPL"` in ASCII: the first field of every [`PluginApi`].
pub const PLUGIN_MAGIC: u64 = 0x4D58_484F_5354_504C;
pub const ABI_MAJOR: u32 = 1;
pub const ABI_MINOR: u32 = 9;

/// ABI 1.3: the size, in i32 words, of the annex a plugin wants beside the MX tensor that
/// `query` describes (0: none); written to `words`.
pub type AnnexWordsFn =
    unsafe extern "C" fn(query: *const AnnexQuery, words: *mut u64, err: *mut ErrorBuf) -> u32;

/// Type of the exported entry symbol.
pub type PluginEntryFn = unsafe extern "C" fn() -> *const PluginApi;

/// Result of every plugin call. Values are stable across minor versions.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok = 0,
    /// The request is malformed (the host validates first, so this is a host bug or a
    /// plugin with stricter rules).
    InvalidArgument = 1,
    /// A valid request this plugin does not implement (a format, layout or device).
    Unsupported = 2,
    /// The backend failed (CUDA error, out of memory, ...).
    BackendError = 3,
    /// The plugin panicked; the panic was caught at the boundary.
    Panic = 4,
}

impl Status {
    pub fn from_raw(raw: u32) -> Option<Status> {
        Some(match raw {
            0 => Status::Ok,
            1 => Status::InvalidArgument,
            2 => Status::Unsupported,
            3 => Status::BackendError,
            4 => Status::Panic,
            _ => return None,
        })
    }
}

/// A host-owned buffer the plugin writes an error message into (UTF-8, truncated to
/// `capacity`, not NUL-terminated; `len` is set to the bytes written).
#[repr(C)]
pub struct ErrorBuf {
    pub struct_size: usize,
    pub data: *mut u8,
    pub capacity: usize,
    pub len: usize,
}

/// Capability bits reported in [`PluginApi::capabilities`].
pub mod caps {
    /// Implements `quantize` / `dequantize` (MX formats).
    pub const QUANTIZE: u64 = 1 << 0;
    /// Implements grouped GEMM (all three passes).
    pub const GROUPED_GEMM: u64 = 1 << 1;
    /// Accepts pre-quantized MX operands in grouped GEMM.
    pub const MX_OPERANDS: u64 = 1 << 2;
    /// Accepts high-precision (f32/bf16) operands in grouped GEMM.
    pub const DENSE_OPERANDS: u64 = 1 << 3;
    /// On a GPU, forward and dgrad run a chained GEMM in this process (mxfp8 under
    /// `MXHOST_MX_CHAIN=on`): their fastest weight operand is then the weight quantized in
    /// 32×32 tiles with its transposed copy (`transposed`), whose annexes that GEMM reads, not
    /// a copy with kept values (which sends them to cuBLAS). A hint for callers choosing how
    /// to quantize a weight (guest-sdk's `GroupedLinear`); it changes no result. Hosts that do
    /// not know the bit ignore it.
    pub const CHAINED_GEMM: u64 = 1 << 4;
    /// Runs on host memory.
    pub const DEVICE_CPU: u64 = 1 << 8;
    /// Runs on CUDA device memory.
    pub const DEVICE_CUDA: u64 = 1 << 9;
    /// Reserved for a HIP backend.
    pub const DEVICE_HIP: u64 = 1 << 10;
}

/// The function table a plugin exports. Lives for the whole process (`'static`).
#[repr(C)]
pub struct PluginApi {
    pub magic: u64,
    pub abi_major: u32,
    pub abi_minor: u32,
    pub struct_size: usize,
    /// NUL-terminated, static: short name used by `select` (e.g. `"mxfp8"`).
    pub name: *const c_char,
    /// NUL-terminated, static: what the plugin computes in (e.g. `"MXFP8 E4M3/E5M2"`).
    pub precision: *const c_char,
    /// NUL-terminated, static: plugin version string.
    pub version: *const c_char,
    /// Bit set of [`caps`].
    pub capabilities: u64,
    /// Quantize a high-precision tensor into MX data + E8M0 scales.
    pub quantize: unsafe extern "C" fn(desc: *const QuantizeDesc, err: *mut ErrorBuf) -> u32,
    /// Expand MX data + scales back to f32 or bf16.
    pub dequantize: unsafe extern "C" fn(desc: *const DequantizeDesc, err: *mut ErrorBuf) -> u32,
    /// One contiguous grouped GEMM pass (forward, dgrad or wgrad).
    pub grouped_gemm: unsafe extern "C" fn(desc: *const GroupedGemmDesc, err: *mut ErrorBuf) -> u32,
    /// Opaque per-plugin context for backends that need one; may be null.
    pub user_data: *mut c_void,
    /// ABI 1.3: how large an annex the plugin wants beside an MX tensor (see
    /// [`OperandKind::MxWithAnnex`]); null when it keeps none.
    pub annex_words: Option<AnnexWordsFn>,
    /// ABI 1.7: write the bytes of an MX tensor that a quantize call with
    /// `QuantizeDesc::bytes_on_demand` may have left out, from its annex ([`FillBytesDesc`]),
    /// and (1.8, when the call had [`layout::BYTES_ON_DEMAND_WITH_SCALES`]) its scales;
    /// a no-op for a tensor whose bytes are all there. Null when the plugin never leaves
    /// bytes out.
    pub fill_bytes: Option<EntryFn<FillBytesDesc>>,
}

/// `struct_size` of a table from a plugin of ABI 1.0–1.2 (no `annex_words`): the smallest
/// a host accepts.
pub const PLUGIN_API_SIZE_1_0: usize = std::mem::offset_of!(PluginApi, annex_words);
/// `struct_size` of a table from a plugin of ABI 1.3–1.6 (no `fill_bytes`).
pub const PLUGIN_API_SIZE_1_6: usize = std::mem::offset_of!(PluginApi, fill_bytes);

/// A `&CStr` from a NUL-terminated literal, checked at compile time, e.g.
/// `static_cstr(concat!(env!("CARGO_PKG_VERSION"), "\0"))` for a plugin's version.
pub const fn static_cstr(s: &'static str) -> &'static std::ffi::CStr {
    match std::ffi::CStr::from_bytes_with_nul(s.as_bytes()) {
        Ok(c) => c,
        Err(_) => panic!("static_cstr needs exactly one NUL, at the end"),
    }
}

/// A plugin's entry function for one request kind.
pub type EntryFn<D> = unsafe extern "C" fn(desc: *const D, err: *mut ErrorBuf) -> u32;

impl PluginApi {
    /// A table for this ABI version: magic, major/minor and `struct_size` filled in, so
    /// a plugin states only what is its own. `name`, `precision` and `version` must be
    /// NUL-terminated static strings.
    pub const fn new(
        name: &'static std::ffi::CStr,
        precision: &'static std::ffi::CStr,
        version: &'static std::ffi::CStr,
        capabilities: u64,
        quantize: EntryFn<QuantizeDesc>,
        dequantize: EntryFn<DequantizeDesc>,
        grouped_gemm: EntryFn<GroupedGemmDesc>,
    ) -> PluginApi {
        PluginApi {
            magic: PLUGIN_MAGIC,
            abi_major: ABI_MAJOR,
            abi_minor: ABI_MINOR,
            struct_size: std::mem::size_of::<PluginApi>(),
            name: name.as_ptr(),
            precision: precision.as_ptr(),
            version: version.as_ptr(),
            capabilities,
            quantize,
            dequantize,
            grouped_gemm,
            user_data: std::ptr::null_mut(),
            annex_words: None,
            fill_bytes: None,
        }
    }

    /// This table with an annex-size entry (ABI 1.3).
    pub const fn with_annex(mut self, annex_words: AnnexWordsFn) -> PluginApi {
        self.annex_words = Some(annex_words);
        self
    }

    /// This table with a `fill_bytes` entry (ABI 1.7).
    pub const fn with_fill_bytes(mut self, fill_bytes: EntryFn<FillBytesDesc>) -> PluginApi {
        self.fill_bytes = Some(fill_bytes);
        self
    }
}

// SAFETY: the table is immutable after the plugin builds it; the string pointers point
// at static data, and `user_data` is only handed back to the plugin's own functions,
// which must be thread-safe (the host calls them from several threads).
unsafe impl Sync for PluginApi {}
unsafe impl Send for PluginApi {}
