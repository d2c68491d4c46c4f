//! The chained forward/dgrad (`mx_chain_gemm.cu`; docs/perf.md runs 89–104), opt-in with
//! `MXHOST_MX_CHAIN`. Both operands are re-encoded in the call to one scale per 128-deep
//! stage. This is exact: the elements that do not survive the shift go to per-row residual
//! lists. Then the 256 × 128 chained GEMM runs: it promotes once per stage instead of per
//! k32 block, and adds the residual products to its FP32 accumulators before the epilogue.
//!
//! It is off by default because, run per call, the re-encoding and the transposes cost
//! about what the faster GEMM gains on the anchor shapes (run 104: 0.89–0.91× torch BF16
//! on a and b, where the default paths read 0.96–1.13×), and because the corrections grow
//! with the residual count, which depends on where the blocks' maxima fall relative to
//! powers of two: 32×32 tiles of N(0, 1) weights carry 4.3e-5 residuals per element, ten
//! times those of N(0, 1)·0.05, and there `always` read +15–60 % over the default paths
//! (run 105).
//!
//! No host synchronization: the per-k32 kernel is enqueued right after the chained one,
//! with the same gate (the re-encoding's two status words, `MxGemmTmaParams::gate`), so
//! exactly one of them writes the output. The per-k32 kernel runs when a row's list
//! overflowed, a block is NaN/Inf, or the operands have more residuals than the limit.
//! Heavy-tailed data lands there: on Student-t(3) the corrections cost more than the
//! chained main loop saves (run 104: 0.45–0.54× v2t). So does structured data: activations
//! with outlier channels give X's form 3–6e-4 residuals per element and weights with
//! lognormal(0, 0.5) input channels 1.2e-4, against the gate's 1e-4 (docs/perf.md, "Residuals
//! on structured activations", `examples/wgrad_stage_residuals.rs`): the annexes are then
//! paid for nothing, which is why `on` is not the default even where it wins on the anchors.
//! The gate memory ([`chain_memory`], opt-in until run on a GPU) stops paying them after the
//! first closed gate of an operand, re-trying every 16th call.

use super::chain_form::BtAt;
use super::chain_memory::{self, OperandKey};
use super::device::{chain_smem, Call};
use super::gemm::{AMat, BMat};
use super::params::{ChainFix, ChainParams, GemmParams, TGemmParams};
use super::tma::{encode_2d, encode_2d_box, tensor_map_available};
use super::{arg, cdiv, fmt_code, i32_of, rup};
use super::{chain_block, chain_form};
use crate::kernels::{self, Unit, TGEMM_THREADS};
use cudarc::driver::result as cr;
use cudarc::driver::sys as drv_sys;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::{DeviceKind, MxFormat};
use mxhost_plugin_common::args::{AnnexSpec, Blocking, MxArg, TensorArg};
use mxhost_plugin_common::cuda::{driver_present, drv};
use std::sync::OnceLock;

/// `MXC_MAX_E` of mx_tgemm_chain.cuh: experts per chained launch.
const MAX_E: usize = 256;

/// `MXC_BT_REF` of mx_tgemm_chain.cuh: `ChainFix::bt` is the address of a word that holds Bᵀ's
/// address (a B annex referring to its partner's bytes), not Bᵀ itself.
const MXC_BT_REF: i32 = 4;

/// `MX_RES_UNALIGNED` of mx_reencode.cuh, as the status words' first i32 (the residual count,
/// the second, 0): a B annex whose partner's bytes the chained GEMM cannot copy.
const STATUS_UNALIGNED: u64 = 4;

/// Residuals per element (both operands) up to which the 4-stage build computes the GEMM;
/// above, the 3-stage build (larger correction rounds, its A′·B_res terms on the tensor
/// cores) does. 0: the 4-stage build takes only GEMMs with no residual at all. Run 111 timed
/// the builds in interleaved rounds: the 3-stage one takes 10–14 % less time than the 4-stage
/// one at 5–6e-6 and 30–39 % less at 2–3.4e-5 (run 110, before its corrections moved to the
/// tensor cores: within ±3.5 % at 2–4e-6).
const SPLIT_RESIDUALS_PER_ELEMENT: f64 = 0.0;

/// Where a GEMM with no 3-stage build (E5M2 A) stops going to the 4-stage one under `on`: run
/// 110's sweep (E4M3 operands, builds timed one after the other) had the 4-stage build at
/// 1.26 / 1.13 / 1.16× v2t on a / b / c at 1.6–1.9e-5 residuals per element, 1.10 / 0.83 /
/// 1.03× at 2.6–3.4e-5.
const FOUR_STAGE_ONLY_RESIDUALS_PER_ELEMENT: f64 = 1.5e-5;

/// Residuals per element above which `on` leaves a GEMM to the per-k32 kernel. The gate
/// decides after the re-encoding has been paid, so this compares the chained GEMM alone with
/// v2t. With its A′·B_res terms on the tensor cores (run 111) the 3-stage build reads 1212 /
/// 1256 / 668 µs on a / b / c at 2.5–3.4e-5 (v2t 1650–2090 / 1650–1930 / 960–1000 µs in the
/// harness runs 105–110) and 1841 / 1966 / 991 µs on Student-t(3) at 2.2–2.7e-4, about v2t's
/// time; the limit sits between, at 1e-4.
const MAX_RESIDUALS_PER_ELEMENT: f64 = 1e-4;

/// What `MXHOST_MX_CHAIN` asks for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum ChainMode {
    /// The per-k32 kernels only (the default).
    Off,
    /// The chained GEMM where it applies, unless the operands have more than
    /// [`MAX_RESIDUALS_PER_ELEMENT`] residuals.
    On,
    /// The chained GEMM wherever the re-encoding is exact, whatever the residual count. This
    /// mode exists for tests and experiments: it puts every correction through the GEMM.
    Always,
}

fn parse_mode(v: Option<&str>) -> PluginResult<ChainMode> {
    match v.map(str::trim) {
        None | Some("") | Some("off") | Some("0") => Ok(ChainMode::Off),
        Some("on") | Some("1") => Ok(ChainMode::On),
        Some("always") => Ok(ChainMode::Always),
        Some(other) => Err(PluginError::invalid(format!(
            "MXHOST_MX_CHAIN={other:?}: expected off (the default), on, or always (no residual limit)"
        ))),
    }
}

/// `MXHOST_MX_CHAIN`, read once per process like the other path variables.
pub(super) fn mode() -> PluginResult<ChainMode> {
    static M: OnceLock<PluginResult<ChainMode>> = OnceLock::new();
    M.get_or_init(|| parse_mode(std::env::var("MXHOST_MX_CHAIN").ok().as_deref()))
        .clone()
}

/// The 4-stage kernel for these operand formats and output type, if it was built: E4M3 ×
/// E4M3 with bf16 or f32 output, E5M2 × E4M3 (dgrad with an E5M2 gradient) with bf16 output.
fn kernel_name(fa: u8, fb: u8, out_bf16: bool) -> Option<&'static str> {
    match (fa, fb, out_bf16) {
        (0, 0, true) => Some("mx_cgemm_e4m3e4m3_w2d_bf16"),
        (0, 0, false) => Some("mx_cgemm_e4m3e4m3_w2d_f32"),
        (1, 0, true) => Some("mx_cgemm_e5m2e4m3_w2d_bf16"),
        _ => None,
    }
}

/// The 3-stage build (`_s3`), built for E4M3 × E4M3 only.
fn kernel_name_s3(fa: u8, fb: u8, out_bf16: bool) -> Option<&'static str> {
    match (fa, fb, out_bf16) {
        (0, 0, true) => Some("mx_cgemm_e4m3e4m3_w2d_bf16_s3"),
        (0, 0, false) => Some("mx_cgemm_e4m3e4m3_w2d_f32_s3"),
        _ => None,
    }
}

/// Which chained build takes which residual counts, both ranges inclusive: the 4-stage build
/// `[0, split]` (all of `[0, limit]` when `split` is `None`), the 3-stage one
/// `[split + 1, limit]`; above `limit`, or with a status flag, the per-k32 kernel.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Ranges {
    split: Option<i32>,
    limit: i32,
}

fn ranges(mode: ChainMode, elements: f64, has_s3: bool) -> Ranges {
    let count = |per_element: f64| (per_element * elements).min(i32::MAX as f64) as i32;
    let limit = match mode {
        ChainMode::Always => i32::MAX,
        _ => count(MAX_RESIDUALS_PER_ELEMENT),
    };
    let split = count(SPLIT_RESIDUALS_PER_ELEMENT);
    match (has_s3, mode) {
        (true, _) if split < limit => Ranges {
            split: Some(split),
            limit,
        },
        // Without a 3-stage build, `on` keeps the 4-stage one to the counts where it is the
        // faster kernel; `always` gives it everything.
        (_, ChainMode::Always) => Ranges { split: None, limit },
        _ => Ranges {
            split: None,
            limit: count(FOUR_STAGE_ONLY_RESIDUALS_PER_ELEMENT).min(limit),
        },
    }
}

/// The most residuals (both operands) a single-build chained GEMM over `elements` operand
/// elements takes under the current mode (the chained wgrad's gate).
pub(super) fn residual_limit(elements: f64) -> PluginResult<i32> {
    Ok(match mode()? {
        ChainMode::Always => i32::MAX,
        _ => (MAX_RESIDUALS_PER_ELEMENT * elements).min(i32::MAX as f64) as i32,
    })
}

/// Why the chained GEMM cannot take a forward/dgrad of `rows` × `cols` over `red` with `e`
/// experts, or `None` when it can. The shape-only part, which the caller can ask before it
/// builds the operands (to keep such a GEMM off the dequantize-to-BF16 path).
pub(super) fn shape_refusal(e: usize, rows: usize, cols: usize) -> Option<String> {
    if e > MAX_E {
        return Some(format!("{e} experts (the chained kernel takes {MAX_E})"));
    }
    if !cols.is_multiple_of(16) {
        return Some(format!("{cols} output columns (needs a multiple of 16)"));
    }
    if rows == 0 || !rows.is_multiple_of(16) {
        return Some(format!(
            "{rows} rows (A' transposed needs a multiple of 16)"
        ));
    }
    None
}

/// Whether [`launch_chained`] would take a GEMM of these sizes whose A, in `a_fmt`, is
/// quantized 1×32 into 16-byte aligned scratch (it may still fall back to the per-k32
/// kernel on the device, by the gate).
pub(super) fn would_take(
    call: &Call,
    a_fmt: u8,
    b: &BMat,
    out_bf16: bool,
    (e, rows, cols): (usize, usize, usize),
) -> PluginResult<bool> {
    let a = AMat {
        q: 0,
        s: 0,
        fmt: a_fmt,
        rdiv: 1,
    };
    if shape_refusal(e, rows, cols).is_some() || operand_refusal(call, &a, b, out_bf16).is_some() {
        return Ok(false);
    }
    let name = kernel_name(a_fmt, b.fmt, out_bf16).expect("checked by operand_refusal");
    Ok(call.dev.func_opt(Unit::Chain, name)?.is_some())
}

/// Why no chained kernel can run on this device at all, or `None`.
pub(super) fn device_refusal(call: &Call) -> Option<String> {
    (call.dev.portable || !tensor_map_available(call.dev))
        .then(|| "no sm_90a kernels or no cuTensorMapEncodeTiled".into())
}

/// Why the chained kernel `name` cannot be launched here (more shared memory than the device
/// gives a block), or `None`.
pub(super) fn kernel_refusal(call: &Call, name: &str) -> PluginResult<Option<String>> {
    Ok(call
        .dev
        .func_opt(Unit::Chain, name)?
        .is_none()
        .then(|| format!("{name} needs more shared memory than the device gives a block")))
}

/// The operand part of the refusal: layouts, formats, alignment, driver.
fn operand_refusal(call: &Call, a: &AMat, b: &BMat, out_bf16: bool) -> Option<String> {
    if let Some(why) = device_refusal(call) {
        return Some(why);
    }
    if a.rdiv != 1 {
        return Some("A in 32×32 tiles (the re-encoding takes 1×32 rows)".into());
    }
    if !b.w2d {
        return Some("the weight in 1×32 blocks (the kernel takes 32×32 tiles)".into());
    }
    if kernel_name(a.fmt, b.fmt, out_bf16).is_none() {
        return Some("no chained kernel for these formats and output type".into());
    }
    if !a.q.is_multiple_of(16) || !b.q.is_multiple_of(16) {
        return Some("operand bytes not 16-byte aligned (TMA)".into());
    }
    None
}

/// The gate the per-k32 launch of the same GEMM must carry ([`TGemmParams::gate`]).
#[derive(Clone, Copy)]
pub(super) struct Gate {
    pub(super) status: u64,
    /// The most residuals any chained build takes: the per-k32 kernel runs above it.
    pub(super) limit: i32,
    /// Where the 4-stage build hands over to the 3-stage one, if it does (-1: the 3-stage
    /// build takes every count).
    split: Option<i32>,
}

impl Gate {
    /// The gate of a GEMM whose one chained build is a 3-stage one (the chained wgrad).
    pub(super) fn three_stage_only(status: u64, limit: i32) -> Gate {
        Gate {
            status,
            limit,
            split: Some(-1),
        }
    }

    /// Which kernel the gate let compute the output, read back from the re-encoding's
    /// status words. It synchronizes the stream, so only `MXHOST_MX_GEMM_TRACE=1` calls it.
    pub(super) fn report(&self, call: &Call) -> PluginResult<String> {
        let mut st = [0i32; 2];
        // SAFETY: `status` is this call's live scratch of two i32 (freed stream-ordered
        // after the call); the copy completes before the synchronize returns.
        unsafe {
            cr::memcpy_dtoh_async(&mut st, self.status, call.stream)
                .map_err(drv("cuMemcpyDtoHAsync"))?;
            cr::stream::synchronize(call.stream).map_err(drv("cuStreamSynchronize"))?;
        }
        Ok(describe_gate(st, self.limit, self.split))
    }
}

/// The gate's decision as `mxt_chain_open` (mx_tgemm_pipeline.cuh) takes it.
fn describe_gate([flags, listed]: [i32; 2], limit: i32, split: Option<i32>) -> String {
    let mut why = Vec::new();
    if flags & 1 != 0 {
        why.push("a residual list overflowed".to_string());
    }
    if flags & 2 != 0 {
        why.push("a NaN/Inf block".to_string());
    }
    if flags & STATUS_UNALIGNED as i32 != 0 {
        why.push("the weight's partner bytes are not 16-byte aligned".to_string());
    }
    if flags & chain_memory::STATUS_NOT_FILLED as i32 != 0 {
        why.push("an annex the gate memory left unfilled".to_string());
    }
    if flags & !(1 | 2 | STATUS_UNALIGNED as i32 | chain_memory::STATUS_NOT_FILLED as i32) != 0 {
        why.push(format!("status flags {flags:#x}"));
    }
    if (listed as u32) > limit as u32 {
        why.push(format!("{listed} residuals > limit {limit}"));
    }
    if why.is_empty() {
        let build = match split {
            Some(split) if listed as i64 > split as i64 => "3-stage",
            _ => "4-stage",
        };
        format!("chained gate open ({listed} residuals, limit {limit}): the {build} chained GEMM computed the output")
    } else {
        format!(
            "chained gate closed ({}): the per-k32 kernel computed the output",
            why.join(", ")
        )
    }
}

/// Which chained-GEMM operand a quantized tensor can be, from its shape alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AnnexRole {
    /// `[rows][red]` in 1×32 blocks along `red`: X of forward, dY of dgrad.
    A { rows: usize, red: usize },
    /// `[E][cols][red]` in 32×32 tiles, E4M3: the weight as forward (or, for a transposed
    /// copy, dgrad) reads it.
    B { e: usize, cols: usize, red: usize },
}

fn annex_role(shape: &[u64], block: Blocking, format: MxFormat) -> Option<AnnexRole> {
    let ok = |v: u64| v > 0 && v.is_multiple_of(16);
    match (shape, block) {
        (&[rows, red], Blocking::Vector { axis: 1 }) if ok(rows) && ok(red) => Some(AnnexRole::A {
            rows: rows as usize,
            red: red as usize,
        }),
        (&[e, cols, red], Blocking::Tile)
            if format == MxFormat::E4m3 && e > 0 && e as usize <= MAX_E && ok(cols) && ok(red) =>
        {
            Some(AnnexRole::B {
                e: e as usize,
                cols: cols as usize,
                red: red as usize,
            })
        }
        _ => None,
    }
}

/// The chain form's size in bytes for a tensor of this role (a B form holding its
/// transposed bytes, or referring to its partner's: [`BtAt`]).
fn role_bytes(role: AnnexRole, bt: BtAt) -> usize {
    match role {
        AnnexRole::A { rows, red } => chain_form::a_layout(rows, red).bytes,
        AnnexRole::B { e, cols, red } => b_annex_layout((e, cols, red), bt).bytes,
    }
}

/// The layout of a B-side annex (`[E][cols][red]`, 32×32 tiles in the quantizer's layout).
fn b_annex_layout((e, cols, red): (usize, usize, usize), bt: BtAt) -> chain_form::BLayout {
    let (ise, _, _) = chain_form::tile_strides(cols, red);
    chain_form::b_layout((e, cols, red), e * ise as usize, bt)
}

/// Which layout an annex of `words` i32 words has for a tensor of this role: holding Bᵀ (any
/// role), or, for a B form where `partner` allows it, referring to the partner's bytes. The
/// sizes differ, so the size alone tells them apart.
fn annex_bt_of(role: AnnexRole, words: usize, partner: bool) -> Option<BtAt> {
    [BtAt::Held, BtAt::Partner]
        .into_iter()
        .filter(|&bt| bt == BtAt::Held || (partner && matches!(role, AnnexRole::B { .. })))
        .find(|&bt| words == chain_form::annex_words(role_bytes(role, bt)))
}

/// The B annex layout a quantize call asks for: referring to the partner's bytes when the
/// host keeps the partner alive (ABI 1.4), else holding a copy. `MXHOST_MX_CHAIN_PARTNER=0`
/// keeps the copies (for A/B timing).
fn b_annex_bt(partner_kept: bool) -> BtAt {
    static REFER: OnceLock<bool> = OnceLock::new();
    let refer = *REFER.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_PARTNER", true));
    if partner_kept && refer {
        BtAt::Partner
    } else {
        BtAt::Held
    }
}

/// ABI 1.3: the annex, in i32 words, that a quantize call fills with the tensor's chain form.
/// It is 0 when `MXHOST_MX_CHAIN` is off, when the call keeps the values (such a weight stays
/// on cuBLAS), and when no chained GEMM could read the tensor.
pub(super) fn annex_words(spec: &AnnexSpec) -> PluginResult<u64> {
    if mode()? == ChainMode::Off
        || spec.keeps_values
        || spec.device != DeviceKind::Cuda
        || !some_device_fills_annexes()
    {
        return Ok(0);
    }
    let bt = b_annex_bt(spec.partner_kept);
    Ok(annex_role(&spec.shape, spec.block, spec.format)
        .map_or(0, |r| chain_form::annex_words(role_bytes(r, bt)) as u64))
}

/// Whether any CUDA device of this machine gets the sm_90a build ([`kernels::select_arch`],
/// as the backend chooses it, `MXHOST_MX_PORTABLE` included) with a driver that has tensor
/// maps, i.e. could fill annexes and run the chained GEMM. Without one an annex would be
/// allocated and never written, so `annex_words` asks for none. (The query names no device:
/// on a machine that mixes Hopper with other GPUs the others' tensors still get annexes,
/// unused.) Asked of the driver without creating a context.
fn some_device_fills_annexes() -> bool {
    static S: OnceLock<bool> = OnceLock::new();
    *S.get_or_init(|| {
        if !driver_present() || cr::init().is_err() {
            return false;
        }
        let mut driver = 0;
        // SAFETY: plain out-parameter.
        unsafe { drv_sys::cuDriverGetVersion(&mut driver) };
        let forced = std::env::var("MXHOST_MX_PORTABLE").ok();
        let count = cr::device::get_count().unwrap_or(0);
        driver >= 12000
            && (0..count).any(|i| {
                let Ok(dev) = cr::device::get(i) else {
                    return false;
                };
                use drv_sys::CUdevice_attribute::*;
                // SAFETY: a device handle from cuDeviceGet; plain attribute queries.
                let attr = |a| unsafe { cr::device::get_attribute(dev, a) }.unwrap_or(0);
                let cc = (
                    attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                    attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
                );
                // (only Hopper gets the sm_90a build; asking no further spares loading NVRTC)
                cc == (9, 0)
                    && kernels::select_arch(cc, forced.as_deref(), kernels::nvrtc_supported_archs)
                        .is_ok_and(|arch| !kernels::is_portable(&arch))
            })
    })
}

/// The role of the tensor `m` that `annex` is for, the annex's address and, for a B form,
/// where it keeps the transposed bytes, checked: a size this plugin's `annex_words` asks for
/// (a B annex that refers to its partner only when the call writes one), 256-byte aligned.
pub(super) fn checked_annex(
    m: &MxArg,
    annex: &TensorArg,
    has_partner: bool,
) -> PluginResult<(AnnexRole, u64, BtAt)> {
    let block = Blocking::from_abi(m.block).expect("checked by MxArg::parse");
    let role = annex_role(&m.data.shape, block, m.format).ok_or_else(|| {
        PluginError::invalid(format!(
            "quantize: an annex for a tensor of shape {:?} that no chained GEMM reads (this plugin's annex_words gives 0 words for it)",
            m.data.shape
        ))
    })?;
    let base = annex.ptr as u64;
    match annex_bt_of(role, annex.numel, has_partner) {
        Some(bt) if base.is_multiple_of(256) => Ok((role, base, bt)),
        _ => Err(PluginError::invalid(format!(
            "quantize: annex of {} words at {base:#x}; this tensor's needs {} words, 256-byte aligned",
            annex.numel,
            chain_form::annex_words(role_bytes(role, BtAt::Held))
        ))),
    }
}

/// The gate memory's view of an annex a quantize call got for `m` (quantized from `input`;
/// `transposed`: the call's transposed result): the operand, the annex's address and that
/// of its status words.
pub(super) fn annex_operand(
    call: &Call,
    m: &MxArg,
    annex: &TensorArg,
    (input, transposed): (u64, bool),
    has_partner: bool,
) -> PluginResult<(OperandKey, u64, u64)> {
    let (role, base, bt) = checked_annex(m, annex, has_partner)?;
    let status = match role {
        AnnexRole::A { rows, red } => chain_form::a_layout(rows, red).status,
        AnnexRole::B { e, cols, red } => b_annex_layout((e, cols, red), bt).status,
    };
    let key = OperandKey::new(call, input, role, transposed);
    Ok((key, base, base + status as u64))
}

/// Whether this device's quantize calls fill annexes: only where the chained GEMM runs
/// (sm_90a kernels and tensor maps).
pub(super) fn annex_filled_here(call: &Call) -> bool {
    !call.dev.portable && tensor_map_available(call.dev)
}

/// Fills `annex` with the chain form of `m`, which this quantize call has just written (on
/// the same stream, so in order); `partner`: the other result of a transposing quantize
/// (its bytes are `m`'s transposed), which a B annex of ABI 1.4 refers to. Skipped on
/// devices the chained GEMM never runs on (no sm_90a kernels or tensor maps): there
/// `operand_refusal` turns every GEMM away before it reads an annex.
pub(super) fn fill_annex(
    call: &mut Call,
    m: &MxArg,
    annex: &TensorArg,
    partner: Option<&MxArg>,
) -> PluginResult<()> {
    let (role, base, bt) = checked_annex(m, annex, partner.is_some())?;
    if !annex_filled_here(call) {
        return Ok(());
    }
    let (q, s, fmt) = (m.data.ptr as u64, m.scales.ptr as u64, fmt_code(m.format));
    match role {
        AnnexRole::A { rows, red } => {
            let a = AMat { q, s, fmt, rdiv: 1 };
            chain_block::form_a(call, &a, (rows, red), base)?;
        }
        AnnexRole::B { e, cols, red } => {
            let (ise, isr, isc) = chain_form::tile_strides(cols, red);
            let b = BMat {
                q,
                s,
                ise,
                isr,
                isc,
                w2d: true,
                fmt,
            };
            let partner = partner.map_or(0, |t| t.data.ptr as u64);
            let l = chain_form::prepare_b(call, &b, (e, cols, red), (bt, partner), base)?;
            if bt == BtAt::Partner && !partner.is_multiple_of(16) {
                // The gatherers' bulk copies read Bᵀ in 16-byte aligned pieces: close the gate
                // of every GEMM that reads this annex (the per-k32 kernel computes them).
                call.put_u64(base + l.status as u64, STATUS_UNALIGNED)?;
            }
        }
    }
    Ok(())
}

/// The operands' annexes (ABI 1.3) that hold their chain forms, as device addresses.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(super) struct Annexes {
    pub(super) a: Option<u64>,
    /// B's annex and where it keeps the transposed bytes (held, or its partner's address).
    pub(super) b: Option<(u64, BtAt)>,
    /// A dense A quantized with its form in the call: the operand the gate memory follows.
    pub(super) dense_a: Option<OperandKey>,
}

impl Annexes {
    /// The annexes of this GEMM's operands that hold a chain form it can read: A's when it is
    /// the tensor passed (`[rows][red]`, 1×32), B's when the weight is read as stored
    /// (`[E][cols][red]` in 32×32 tiles, no transposed copy made: `bt` is `None`). Each must
    /// have exactly its layout's size and a 256-byte aligned address (the layout's
    /// alignment); anything else is left alone and made per call.
    pub(super) fn pick(
        (a_annex, b_annex): (Option<&TensorArg>, Option<&TensorArg>),
        b: &BMat,
        b_as_stored: bool,
        (e, rows, cols, red): (usize, usize, usize, usize),
    ) -> Annexes {
        let fits = |t: &TensorArg, bytes: usize| {
            t.numel == chain_form::annex_words(bytes) && (t.ptr as u64).is_multiple_of(256)
        };
        let a = a_annex
            .filter(|t| fits(t, chain_form::a_layout(rows, red).bytes))
            .map(|t| t.ptr as u64);
        let b = b_annex
            .filter(|_| b_as_stored && b.w2d)
            .filter(|_| (b.ise, b.isr, b.isc) == chain_form::tile_strides(cols, red))
            .filter(|t| (t.ptr as u64).is_multiple_of(256))
            .and_then(|t| {
                let role = AnnexRole::B { e, cols, red };
                annex_bt_of(role, t.numel, true).map(|bt| (t.ptr as u64, bt))
            });
        Annexes {
            a,
            b,
            dense_a: None,
        }
    }
}

/// Enqueues the chained GEMM out = A · B_eᵀ per expert (A `[rows][red]` 1×32, B `[E][cols][red]`
/// in 32×32 tiles) and returns the gate for the per-k32 launch that must follow, or why it
/// cannot take this GEMM (then nothing was enqueued). `bt`: B's bytes as `[E][red][cols]` when
/// the caller has them (the stored weight of a pass whose reduction is not its last axis), else
/// they are transposed here.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_chained(
    call: &mut Call,
    mode: ChainMode,
    a: &AMat,
    b: &BMat,
    bt: Option<u64>,
    (out, out_bf16): (u64, bool),
    offs: u64,
    (e, rows, cols, red): (usize, usize, usize, usize),
    annexes: Annexes,
) -> PluginResult<Result<(Gate, &'static str), String>> {
    if let Some(why) =
        shape_refusal(e, rows, cols).or_else(|| operand_refusal(call, a, b, out_bf16))
    {
        return Ok(Err(why));
    }
    let name = kernel_name(a.fmt, b.fmt, out_bf16).expect("checked");
    if let Some(why) = kernel_refusal(call, name)? {
        return Ok(Err(why));
    }
    let name_s3 = match kernel_name_s3(a.fmt, b.fmt, out_bf16) {
        Some(n) if call.dev.func_opt(Unit::Chain, n)?.is_some() => Some(n),
        _ => None,
    };
    let (kb, nb) = (cdiv(red, 32), cdiv(cols, 32));
    let (kb4, nb4) = (rup(kb, 4), chain_form::b_table_cols(nb));
    let slots = chain_form::slots(red);
    let elements = (rows * red + e * cols * red) as f64;
    let Ranges { split, limit } = ranges(mode, elements, name_s3.is_some());
    // Each operand's chain form: read from the annex its quantizer filled, else made here.
    let (la, abase) = match annexes.a {
        Some(base) => (chain_form::a_layout(rows, red), base),
        None => {
            let base = call.alloc(chain_form::a_layout(rows, red).bytes)?;
            (chain_block::form_a(call, a, (rows, red), base)?, base)
        }
    };
    let (lb, bbase) = match annexes.b {
        Some((base, kind)) => (b_annex_layout((e, cols, red), kind), base),
        None => {
            let kind = if bt.is_some() {
                BtAt::Caller
            } else {
                BtAt::Held
            };
            let l = chain_form::b_layout((e, cols, red), e * b.ise as usize, kind);
            let base = call.alloc(l.bytes)?;
            let dims = (e, cols, red);
            (chain_form::prepare_b(call, b, dims, (kind, 0), base)?, base)
        }
    };
    let (pa, pb) = (|o: usize| abase + o as u64, |o: usize| bbase + o as u64);
    // The operands the gate memory follows: annexes filled under it, a dense A by its buffer.
    let filled = |addr: u64| match chain_memory::annex(addr) {
        Some((key, true)) => Some(key),
        _ => None,
    };
    let keys: Vec<OperandKey> = [
        annexes.a.and_then(filled).or(annexes.dense_a),
        annexes.b.and_then(|(b, _)| filled(b)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let host = chain_memory::status_slot(mode, &keys, limit);
    let status = merged_status(call, pa(la.status), pb(lb.status), host)?;
    // (B's annex is only taken for a weight read as stored, where the caller has no Bᵀ.) With
    // `MXC_BT_REF` the kernel reads Bᵀ's address from the annex word at `bt`.
    let (bt, bt_ref) = match (bt, lb.bt, lb.bt_ref) {
        (Some(bt), _, _) => (bt, false),
        (None, Some(o), _) => (pb(o), false),
        (None, None, Some(o)) => (pb(o), true),
        (None, None, None) => {
            unreachable!("b_layout holds Bᵀ or its address when the caller has none")
        }
    };
    let (xq2, wq2) = (pa(la.q2), pb(lb.q2));
    let (sa, sb) = (pa(la.sa), pb(lb.sb));
    let g = GemmParams {
        a: xq2,
        lda: red as i64,
        b: wq2,
        ldb: red as i64,
        b_es: (cols * red) as i64,
        sa,
        ldsa: 4 * rows as i64,
        sb,
        ldsb: nb4 as i64,
        sb_es: (kb4 * nb4) as i64,
        out,
        ldo: cols as i64,
        o_es: 0,
        offs,
        e: e as i32,
        m: i32_of("rows", rows)?,
        n: i32_of("cols", cols)?,
        k: i32_of("reduction", red)?,
        batched: 0,
        out_t: 0,
    };
    let maps = tensor_maps((xq2, rows), (wq2, e * cols), red);
    let (tm_a, tm_b) = match maps {
        Ok(m) => m,
        // (Scratch is 16-byte aligned and red % 16 == 0: the driver refusing is unexpected,
        // but the per-k32 kernel still computes the GEMM; the re-encoding is wasted.)
        Err(why) => return Ok(Err(why)),
    };
    let mut b_params = TGemmParams::new(tm_a, tm_b, g);
    b_params.gate = status;
    b_params.limit = split.unwrap_or(limit);
    let mut p = ChainParams {
        b: b_params,
        f: ChainFix {
            res_a: pa(la.res),
            cnt_a: pa(la.cnt),
            res_b: pb(lb.res),
            cnt_b: pb(lb.cnt),
            bt,
            sbo: b.s,
            at: pa(la.at),
            sat: pa(la.sat),
            bt_es: (red * cols) as i64,
            ise: b.ise,
            isr: b.isr,
            isc: b.isc,
            ldt: rows as i64,
            slots: slots as i32,
            terms: if bt_ref { 3 | MXC_BT_REF } else { 3 },
        },
    };
    // Both builds are enqueued when there are two; the gate lets at most one of them run.
    launch_kernel(call, name, &p)?;
    if let (Some(split), Some(n3)) = (split, name_s3) {
        p.b.limit_lo = split + 1;
        p.b.limit = limit;
        launch_kernel(call, n3, &p)?;
    }
    let gate = Gate {
        status,
        limit,
        split,
    };
    Ok(Ok((
        gate,
        if split.is_some() {
            "mx_cgemm (4-stage, then 3-stage)"
        } else {
            name
        },
    )))
}

/// The chained kernel's two tensor maps: A' `[a_rows][red]` in 256-row boxes, B' `[b_rows][red]`
/// in 128-row ones (128 bytes along the reduction, 128-byte swizzle).
pub(super) fn tensor_maps(
    (a, a_rows): (u64, usize),
    (b, b_rows): (u64, usize),
    red: usize,
) -> Result<([u64; 16], [u64; 16]), String> {
    let tm_a = encode_2d_box(
        a,
        red as u64,
        a_rows as u64,
        red as u64,
        false,
        [128, 256],
        true,
    )?;
    Ok((tm_a, encode_2d(b, red as u64, b_rows as u64, red as u64)?))
}

/// The gate's status words of one GEMM: both operands' (flags ORed, counts added) in new
/// scratch (`mx_chain_status_merge`).
/// `host`: a gate-memory slot that gets a copy of them ([`chain_memory::status_slot`]), or 0.
pub(super) fn merged_status(call: &mut Call, a: u64, b: u64, host: u64) -> PluginResult<u64> {
    let status = call.alloc(8)?;
    call.launch(
        Unit::Chain,
        "mx_chain_status_merge",
        (1, 1, 1),
        (32, 1, 1),
        0,
        &mut [arg(&a), arg(&b), arg(&status), arg(&host)],
    )?;
    Ok(status)
}

/// One launch of the chained kernel `name`: a CTA per SM, its shared memory.
pub(super) fn launch_kernel(call: &Call, name: &str, p: &ChainParams) -> PluginResult<()> {
    call.launch(
        Unit::Chain,
        name,
        (call.dev.sms as usize, 1, 1),
        (TGEMM_THREADS, 1, 1),
        chain_smem(name),
        &mut [arg(p)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_variable_parses_and_rejects_typos() {
        assert_eq!(parse_mode(None).unwrap(), ChainMode::Off);
        assert_eq!(parse_mode(Some(" on ")).unwrap(), ChainMode::On);
        assert_eq!(parse_mode(Some("always")).unwrap(), ChainMode::Always);
        assert_eq!(parse_mode(Some("off")).unwrap(), ChainMode::Off);
        let err = parse_mode(Some("yes")).unwrap_err();
        assert!(
            err.message.contains("MXHOST_MX_CHAIN=\"yes\""),
            "{}",
            err.message
        );
    }

    #[test]
    fn shapes_the_kernel_cannot_take_are_refused_with_the_reason() {
        assert_eq!(shape_refusal(8, 32768, 4096), None);
        assert!(shape_refusal(257, 32768, 4096)
            .unwrap()
            .contains("257 experts"));
        assert!(shape_refusal(8, 32768, 4104)
            .unwrap()
            .contains("4104 output columns"));
        assert!(shape_refusal(8, 1000, 4096).unwrap().contains("1000 rows"));
        assert!(shape_refusal(8, 0, 4096).is_some());
    }

    #[test]
    fn the_gate_report_names_what_closed_it() {
        assert!(describe_gate([0, 12], 100, None).contains("open (12 residuals, limit 100)"));
        assert!(describe_gate([0, 100], 100, None).contains("4-stage"));
        assert!(describe_gate([0, 50], 100, Some(50)).contains("the 4-stage"));
        assert!(describe_gate([0, 51], 100, Some(50)).contains("the 3-stage"));
        assert!(describe_gate([0, 0], 100, Some(-1)).contains("the 3-stage"));
        assert!(describe_gate([4, 0], 100, None).contains("not 16-byte aligned"));
        assert!(describe_gate([8, 0], 100, None).contains("closed (an annex the gate memory"));
        assert!(describe_gate([16, 0], 100, None).contains("closed (status flags 0x10)"));
        let closed = describe_gate([3, 101], 100, Some(50));
        assert!(
            closed.contains("overflowed") && closed.contains("NaN/Inf"),
            "{closed}"
        );
        assert!(closed.contains("101 residuals > limit 100"), "{closed}");
        assert!(describe_gate([0, 0], i32::MAX, None).contains("open"));
    }

    #[test]
    fn the_residual_counts_split_between_the_builds() {
        let el = 1e8;
        let on = ranges(ChainMode::On, el, true);
        assert_eq!(
            on,
            Ranges {
                split: Some(0),
                limit: 10000
            }
        );
        let always = ranges(ChainMode::Always, el, true);
        assert_eq!(
            always,
            Ranges {
                split: Some(0),
                limit: i32::MAX
            }
        );
        // no 3-stage build (E5M2 A): `on` keeps the 4-stage one to its own range
        assert_eq!(
            ranges(ChainMode::On, el, false),
            Ranges {
                split: None,
                limit: 1500
            }
        );
        assert_eq!(
            ranges(ChainMode::Always, el, false),
            Ranges {
                split: None,
                limit: i32::MAX
            }
        );
        // tiny GEMMs: a split of 0 still leaves the zero-residual case to the 4-stage build
        let tiny = ranges(ChainMode::On, 1e3, true);
        assert_eq!(
            tiny,
            Ranges {
                split: None,
                limit: 0
            }
        );
    }

    #[test]
    fn annexes_go_to_tensors_a_chained_gemm_reads() {
        use mxhost_plugin_abi::MxFormat::{E4m3, E5m2};
        let rows = Blocking::Vector { axis: 1 };
        assert_eq!(
            annex_role(&[4096, 2880], rows, E5m2),
            Some(AnnexRole::A {
                rows: 4096,
                red: 2880
            })
        );
        assert_eq!(
            annex_role(&[8, 4096, 2048], Blocking::Tile, E4m3),
            Some(AnnexRole::B {
                e: 8,
                cols: 4096,
                red: 2048
            })
        );
        // no chained kernel reads these
        assert_eq!(annex_role(&[8, 4096, 2048], Blocking::Tile, E5m2), None);
        assert_eq!(annex_role(&[4096, 2880], Blocking::Tile, E4m3), None);
        assert_eq!(
            annex_role(&[4096, 2880], Blocking::Vector { axis: 0 }, E4m3),
            None
        );
        assert_eq!(annex_role(&[4100, 2880], rows, E4m3), None);
        assert_eq!(annex_role(&[0, 2880], rows, E4m3), None);
        assert_eq!(annex_role(&[257, 64, 64], Blocking::Tile, E4m3), None);
        // an annex holds the whole chain form, Bᵀ included unless the host keeps the partner
        // (ABI 1.4): then only its address
        let b = AnnexRole::B {
            e: 8,
            cols: 4096,
            red: 4096,
        };
        let n = 8 * 4096 * 4096;
        assert!(role_bytes(b, BtAt::Held) > 2 * n);
        assert_eq!(
            role_bytes(b, BtAt::Held) - role_bytes(b, BtAt::Partner),
            n - 256
        );
        assert_eq!(b_annex_bt(true), BtAt::Partner);
        assert_eq!(b_annex_bt(false), BtAt::Held);
    }

    /// The annex size says which B layout a quantize call got: the partner-referring one
    /// (ABI 1.4) only where the call writes the partner; anything else is refused.
    #[test]
    fn an_annex_refers_to_its_partner_only_beside_one() {
        let tensor = super::super::test_tensor;
        let (e, cols, red) = (2usize, 64usize, 96usize);
        let w = MxArg {
            data: tensor(vec![e as u64, cols as u64, red as u64], 0x1000),
            scales: tensor(vec![e as u64, 2, 3], 0x2000),
            format: MxFormat::E4m3,
            mode: mxhost_plugin_abi::ScaleMode::Floor,
            block: mxhost_plugin_abi::BlockLayout::tile(),
            values: None,
            annex: None,
        };
        let role = AnnexRole::B { e, cols, red };
        let words = |bt| chain_form::annex_words(role_bytes(role, bt));
        let annex = |numel: usize, ptr: usize| tensor(vec![numel as u64], ptr);
        let held = annex(words(BtAt::Held), 0x10000);
        let partner = annex(words(BtAt::Partner), 0x10000);
        assert_eq!(checked_annex(&w, &held, false).unwrap().2, BtAt::Held);
        assert_eq!(checked_annex(&w, &held, true).unwrap().2, BtAt::Held);
        assert_eq!(checked_annex(&w, &partner, true).unwrap().2, BtAt::Partner);
        assert!(
            checked_annex(&w, &partner, false).is_err(),
            "no partner written"
        );
        let odd = annex(words(BtAt::Held) - 1, 0x10000);
        assert!(checked_annex(&w, &odd, true).is_err());
        let unaligned = annex(words(BtAt::Partner), 0x10080);
        assert!(checked_annex(&w, &unaligned, true).is_err());
    }

    #[test]
    fn only_built_kernels_are_named() {
        assert_eq!(kernel_name_s3(1, 0, true), None);
        assert_eq!(kernel_name(0, 0, true), Some("mx_cgemm_e4m3e4m3_w2d_bf16"));
        assert_eq!(kernel_name(1, 0, false), None);
        assert_eq!(kernel_name(0, 1, true), None);
        for n in [
            kernel_name(0, 0, true),
            kernel_name(0, 0, false),
            kernel_name(1, 0, true),
            kernel_name_s3(0, 0, true),
            kernel_name_s3(0, 0, false),
        ] {
            assert!(Unit::Chain.kernel_names().contains(&n.unwrap().to_string()));
        }
    }
}
