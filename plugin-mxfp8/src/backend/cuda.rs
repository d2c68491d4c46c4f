//! The CUDA backend: requests whose tensors are in CUDA device memory, computed by the
//! exact kernels of `plugin-mxfp8/cuda/` (see its README for signatures, launch rules and
//! workspace layouts; `cuda/bench/bench.py` drives the same passes from Python).
//!
//! - Context: the **primary context** of the device named by the tensors'
//!   `device_ordinal`, i.e. the one the host allocated them in. Work is launched on the
//!   host's stream (`desc.stream`, a raw `CUstream`); temporary workspace is allocated and
//!   freed stream-ordered on that stream (`cuMemAllocAsync`/`cuMemFreeAsync`), so a call
//!   never synchronizes. The host synchronizes before it reads results back.
//! - Kernels: compiled with NVRTC for the device's architecture on first use and cached
//!   on disk ([`crate::kernels`]): `sm_90a` on Hopper (the fast path below), the
//!   **portable build** (`compute_XY`) on any other GPU of compute capability 8.0 or newer,
//!   or on any GPU with `MXHOST_MX_PORTABLE=1` (or `=compute_XY`).
//! - Portable build: the same quantizers (bit-exact; FP8 conversions in software below
//!   sm_89, no TMA quantizer), and every GEMM pass as dequantize-to-BF16 + cuBLAS
//!   ([`gemm_rows_bf16`](bf16_path::gemm_rows_bf16),
//!   [`wgrad_via_bf16`](bf16_path::wgrad_via_bf16)): the MX values are exact in bf16,
//!   cuBLAS accumulates in FP32, so results match the FP8 kernels up to summation order.
//!   It needs cuBLAS; without it GEMMs return Unsupported.
//! - Quantize: 1×32 along the last axis = `ROWS`; 1×32 along axis rank−2 = a `COLS`
//!   pass (written transposed) and a byte transpose back; 32×32 = `TILE`. Bit-exact with
//!   the CPU backend.
//! - Dequantize: `mx_dequantize` (cuda/mx_dequantize.cu), every layout.
//! - Grouped GEMM: operands are brought to the K-major FP8 layouts the GEMM reads
//!   (quantizing dense operands in the canonical layouts of docs/numerics.md, transposing
//!   where needed), E8M0 scales become FP32 tables (`mx_scales_to_f32`), then one
//!   GEMM launch: `mx_tgemm_*` (TMA, the default) or `mx_gemm_*` (cp.async), chosen by
//!   `MXHOST_MX_GEMM_KERNEL=tgemm|gemm` (see [`launch_gemm`](gemm::launch_gemm); a launch
//!   the TMA kernels cannot take runs on `mx_gemm_*`, same results;
//!   `MXHOST_MX_GEMM_TRACE=1` logs every GEMM launch and any fallback to stderr). Forward/dgrad with large experts
//!   ([`cublas::bf16_rows_faster`]) and wgrad ([`cublas::wgrad_path`]) run as
//!   dequantize-to-BF16 + cuBLAS instead, which measured faster there
//!   (`MXHOST_MX_FWD_DGRAD` / `MXHOST_MX_WGRAD` = `fp8` force the FP8 kernel).
//!   Forward/dgrad on two operands quantized for a GEMM (their annexes filled) go to the
//!   chained GEMM first ([`chain`], gated on the device; `MXHOST_MX_CHAIN`: `auto` by
//!   default, `off`, or `on`/`always`, which also re-encode operands without one per call).
//!   Requests the kernels cannot run exactly
//!   (reduction length not a multiple of 16, pre-quantized layouts with scales along the
//!   wrong axis, more than 1024 experts, ...) return Unsupported with the reason, never a
//!   wrong result.
//!
//! Where things live (`cuda/`): `params` (the kernels' `#[repr(C)]` parameter blocks),
//! `device` (per-device state, kernel loading, `Call` and its launch helpers),
//! `quantize`, `gemm` (forward/dgrad operands and the GEMM launch), `chain` (the opt-in
//! chained forward/dgrad; `chain_form` its operands' layouts, `chain_quant` X's and dY's
//! annexes in the quantizer's pass, `chain_block` an A operand's form in one pass over its
//! bytes, `chain_pair` a weight's and its transposed copy's annexes in one pass,
//! `chain_verify` the device-side check of both, `chain_memory` which operands get no annex
//! because their last gate closed), `wgrad` (wgrad on the FP8 kernels), `tma` (tensor maps)
//! and `bf16_path` (dequantize-to-BF16 + cuBLAS); this file keeps the constants and small
//! helpers they share and the [`Backend`] entry points.

use super::cublas;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::{DType, MxFormat, ScaleMode};
use mxhost_plugin_common::args::{
    AnnexSpec, Blocking, DequantizeArgs, FillBytesArgs, GemmArgs, MxArg, QuantizeArgs, TensorArg,
};
use mxhost_plugin_common::entry::Backend;
use std::ffi::c_void;

mod at_need;
mod bf16_path;
mod bytes_on_demand;
mod chain;
mod chain_annex;
mod chain_block;
mod chain_form;
mod chain_memory;
mod chain_pair;
mod chain_quant;
mod chain_verify;
mod chain_wgrad;
mod device;
mod gemm;
mod kernel_trace;
mod params;
mod quantize;
mod tma;
mod wgrad;
mod wgrad_values;

use bf16_path::dequantize_into;
use device::Call;
use gemm::gemm;
pub(crate) use gemm::gemm_trace;
use quantize::{FlatOut, QuantJob};

const ROWS: i32 = 1;
const COLS: i32 = 2;
const TILE: i32 = 4;
const TILE_T: i32 = 8;
const GRID_YZ_MAX: usize = 65535;

pub struct CudaBackend;

pub use mxhost_plugin_common::cuda::driver_present;

/// Whether forward and dgrad can take the chained GEMM in this process: `MXHOST_MX_CHAIN=on`
/// or `always`, or `auto` (the default) on a machine with a device that fills annexes (for
/// operands quantized for a GEMM).
pub fn chained_gemm_requested() -> bool {
    chain::mode().is_ok_and(|m| {
        m.forced() || (m == chain::ChainMode::Auto && chain_annex::some_device_fills_annexes())
    })
}

/// This backend's boolean environment switches (the `MXHOST_MX_*` A/B and diagnostic
/// switches), by the plugins' one rule.
pub(crate) use mxhost_plugin_common::switch::{env_flag, flag_value};

fn cdiv(a: usize, b: usize) -> usize {
    a.div_ceil(b)
}
fn rup(a: usize, b: usize) -> usize {
    a.div_ceil(b) * b
}
fn fmt_code(f: MxFormat) -> u8 {
    match f {
        MxFormat::E4m3 => 0,
        MxFormat::E5m2 => 1,
    }
}
fn mode_code(m: ScaleMode) -> i32 {
    match m {
        ScaleMode::Rceil => 0,
        ScaleMode::Floor => 1,
        ScaleMode::Even => 2,
    }
}
fn i32_of(what: &str, v: usize) -> PluginResult<i32> {
    i32::try_from(v).map_err(|_| {
        PluginError::unsupported(format!(
            "CUDA backend: {what} = {v} exceeds the kernels' 32-bit index range"
        ))
    })
}
fn ptr(t: &TensorArg) -> u64 {
    t.ptr as u64
}

fn arg<T>(v: &T) -> *mut c_void {
    v as *const T as *mut c_void
}

fn leading(shape: &[u64]) -> usize {
    shape[..shape.len().saturating_sub(2)]
        .iter()
        .product::<u64>() as usize
}

/// The results of a quantize call that come with an annex (ABI 1.3): each annex, its tensor,
/// the call's other result (the partner a B annex may refer to) and whether the tensor is the
/// transposed one.
fn annexed_results(args: &QuantizeArgs) -> Vec<(&TensorArg, &MxArg, Option<&MxArg>, bool)> {
    let mut v = Vec::with_capacity(2);
    if let Some(a) = &args.annex {
        v.push((a, &args.output, args.transposed.as_ref(), false));
    }
    if let (Some(t), Some(a)) = (&args.transposed, &args.transposed_annex) {
        v.push((a, t, Some(&args.output), true));
    }
    v
}

impl CudaBackend {
    /// The quantize request but its wgrad values: the MX tensor(s), kept values and
    /// annexes; `wv` as for [`Self::quantize_tensors`].
    fn quantize_with_annexes(
        &self,
        call: &mut Call,
        args: &QuantizeArgs,
        wv: &mut Option<u64>,
    ) -> PluginResult<()> {
        // Under `on`, operands whose last chained GEMM closed its gate get no annex.
        if self.quantize_without_annexes(call, args, wv)? {
            return Ok(());
        }
        // X or dY with its annex: the tensor and its chain form in one pass.
        if chain_quant::quantize_a_with_annex(call, args, wv)? {
            return Ok(());
        }
        // A bf16 weight with both annexes: everything in one pass (opt-in).
        if chain_pair::quantize_b_pair(call, args)? {
            if chain_verify::enabled() {
                self.verify_pair_quantizer(call, args)?;
            }
            return Ok(());
        }
        self.quantize_tensors(call, args, wv)?;
        // The annexes (ABI 1.3) read the bytes just written: after them on the stream. A
        // weight's and its transposed copy's together when the call writes both.
        if chain_pair::fill_b_pair(call, args)? {
            return Ok(());
        }
        for (annex, m, partner, _) in annexed_results(args) {
            chain_annex::fill_annex(call, m, annex, partner)?;
        }
        Ok(())
    }

    /// The gate memory's part of a quantize call with annexes ([`chain_memory`]): each annex
    /// is remembered with its operand; when the memory says an operand's gate closed last
    /// time, the call quantizes plainly, fills only the other annexes and marks the skipped
    /// ones not filled. Returns whether it ran the call (else the usual paths fill them all).
    fn quantize_without_annexes(
        &self,
        call: &mut Call,
        args: &QuantizeArgs,
        wv: &mut Option<u64>,
    ) -> PluginResult<bool> {
        let mode = chain::mode()?;
        if !chain_memory::active(mode) || !chain_annex::annex_filled_here(call) {
            return Ok(false);
        }
        let annexes = annexed_results(args);
        let mut plan = Vec::with_capacity(annexes.len());
        for (annex, m, partner, transposed) in annexes {
            let of = (ptr(&args.input), transposed);
            let (key, base, status) =
                chain_annex::annex_operand(call, m, annex, of, partner.is_some())?;
            let fill = chain_memory::wants_annex(mode, key);
            chain_memory::note_annex(base, key, fill);
            plan.push((annex, m, partner, status, fill));
        }
        if plan.iter().all(|&(.., fill)| fill) {
            return Ok(false);
        }
        self.quantize_tensors(call, args, wv)?;
        for (annex, m, partner, status, fill) in plan {
            if fill {
                chain_annex::fill_annex(call, m, annex, partner)?;
            } else {
                // (the GEMM leaves this operand to the default path; the flag closes the gate
                // should a chained kernel read the annex anyway)
                call.put_u64(status, chain_memory::STATUS_NOT_FILLED)?;
            }
        }
        Ok(true)
    }

    /// The quantize request's tensors: `output` and, when asked for, its transposed copy
    /// and the values in bf16; the wgrad values at `wv` too where one kernel writes both
    /// (`wv` is then taken).
    fn quantize_tensors(
        &self,
        call: &mut Call,
        args: &QuantizeArgs,
        wv: &mut Option<u64>,
    ) -> PluginResult<()> {
        let (x, o) = (&args.input, &args.output);
        let job = QuantJob::new(args)?;
        if let Some(v) = *wv {
            if wgrad_values::quantize_rows_fused(call, args, &job, v)? {
                *wv = None;
                return Ok(());
            }
        }
        let QuantJob {
            in_bf16,
            fmt,
            mode,
            rank,
            last,
            block,
            ..
        } = job;
        let shape = &x.shape;
        // The transposed copy (ABI 1.1): the COLS and TILE kernels write it in the same
        // pass; after ROWS it is a byte transpose of data and scales.
        let tr = args.transposed.as_ref();
        // The MX values in bf16 (ABI 1.2): written by the flat 1×32 kernel in the same
        // pass where it takes the tensor, else expanded from the bytes just written.
        let vals = args.values.as_ref().map(ptr);
        let flat_vals = vals.filter(|&v| {
            matches!(block, Blocking::Vector { axis } if axis + 1 == rank)
                && last.is_multiple_of(32)
                && ptr(x).is_multiple_of(16)
                && ptr(&o.data).is_multiple_of(8)
                && v.is_multiple_of(16)
        });
        if let Some(v) = flat_vals {
            let nblocks = x.numel / 32;
            let (q, s) = (ptr(&o.data), ptr(&o.scales));
            let what = FlatOut::QuantizedAndValues(v);
            call.flat_rows(ptr(x), in_bf16, nblocks, fmt, mode, (q, s), what)?;
            if let Some(t) = tr {
                let (batch, r, c) = (leading(shape), shape[rank - 2] as usize, last);
                call.transpose(q, ptr(&t.data), batch, r, c)?;
                call.transpose(s, ptr(&t.scales), batch, r, c / 32)?;
            }
            return Ok(());
        }
        // 32×32 tiles from bf16 rows of whole 16-byte chunks: the tile kernel writes the
        // values in its pass; anything else expands them from the bytes just written.
        let tile_vals = vals.filter(|&v| {
            matches!(block, Blocking::Tile)
                && in_bf16
                && last.is_multiple_of(8)
                && v.is_multiple_of(16)
        });
        self.quantize_bytes(call, &job, tile_vals)?;
        if let (Some(v), None) = (vals, tile_vals) {
            dequantize_into(call, o, v, true)?;
        }
        Ok(())
    }

    /// `MXHOST_MX_CHAIN_VERIFY` after [`chain_pair::quantize_b_pair`]: the tensor and its
    /// transposed copy (bytes and scales) against the tile quantizer's, written into scratch.
    fn verify_pair_quantizer(&self, call: &mut Call, args: &QuantizeArgs) -> PluginResult<()> {
        let mut plain = args.clone();
        (plain.annex, plain.transposed_annex) = (None, None);
        let mut regions = Vec::new();
        let what = [("W's bytes", "W's scales"), ("Wᵀ's bytes", "Wᵀ's scales")];
        for (m, (bytes, scales)) in [Some(&mut plain.output), plain.transposed.as_mut()]
            .into_iter()
            .flatten()
            .zip(what)
        {
            for (t, what) in [(&mut m.data, bytes), (&mut m.scales, scales)] {
                let want = call.alloc(t.numel)?;
                regions.push(chain_verify::Region {
                    what,
                    got: ptr(t),
                    want,
                    bytes: t.numel,
                });
                t.ptr = want as *mut c_void;
            }
        }
        self.quantize_tensors(call, &plain, &mut None)?;
        chain_verify::require_equal(
            call,
            (&regions, &[]),
            "mx_quantize_pair_bf16_e4m3",
            "the tile quantizer",
        )
    }
}

impl Backend for CudaBackend {
    fn quantize(&self, args: &QuantizeArgs) -> PluginResult<()> {
        if args.input.numel == 0 {
            return Ok(());
        }
        let mut call = Call::entered(args.ordinal, args.stream, || {
            let t = if args.transposed.is_some() { " +T" } else { "" };
            format!("quantize {:?}{t}", args.input.shape)
        })?;
        // (an annex's address may have been another tensor's: its bytes start complete, and
        // its `at` whole unless the A-side path notes otherwise; each gets a new generation)
        for (annex, ..) in annexed_results(args) {
            bytes_on_demand::forget(ptr(annex));
            at_need::note_handed(ptr(annex));
        }
        // ABI 1.5: the wgrad values, from the quantizer's own pass where a kernel writes
        // both (it takes `wv`), else by a pass of their own after it.
        let mut wv = wgrad_values::fusable(args);
        let offered = wv.is_some();
        self.quantize_with_annexes(&mut call, args, &mut wv)?;
        let fused = offered && wv.is_none();
        if let (Some(w), false) = (&args.wgrad_values, fused) {
            wgrad_values::write_separately(&mut call, args, w)?;
        }
        Ok(())
    }

    fn annex_words(&self, spec: &AnnexSpec) -> PluginResult<u64> {
        chain_annex::annex_words(spec)
    }

    fn fill_bytes(&self, args: &FillBytesArgs) -> PluginResult<()> {
        bytes_on_demand::fill(args)
    }

    fn dequantize(&self, args: &DequantizeArgs) -> PluginResult<()> {
        if args.output.numel == 0 {
            return Ok(());
        }
        let call = Call::entered(args.ordinal, args.stream, || {
            format!("dequantize {:?}", args.output.shape)
        })?;
        let out_bf16 = args.output.dtype == DType::Bf16;
        dequantize_into(&call, &args.input, ptr(&args.output), out_bf16)
    }

    fn grouped_gemm(&self, args: &GemmArgs) -> PluginResult<()> {
        let mut call = Call::entered(args.ordinal, args.stream, || {
            let (m, n, k) = (args.rows, args.n, args.k);
            format!("{:?} M{m} N{n} K{k}", args.pass)
        })?;
        gemm(&mut call, args)
    }
}

/// A CUDA tensor description for the backend's unit tests (E4M3 bytes at `ptr`; nothing is
/// allocated or read).
#[cfg(test)]
fn test_tensor(shape: Vec<u64>, ptr: usize) -> TensorArg {
    TensorArg {
        what: "t".into(),
        ptr: ptr as *mut c_void,
        dtype: DType::E4m3,
        device: mxhost_plugin_abi::DeviceKind::Cuda,
        ordinal: 0,
        numel: shape.iter().product::<u64>() as usize,
        shape,
    }
}
