//! The chained forward/dgrad (`mx_chain_gemm.cu`; docs/perf.md runs 89–115): by default
//! (`MXHOST_MX_CHAIN` unset or `auto`) for operands quantized for a GEMM (WIT
//! `quantize-options.for-gemm`), with `MXHOST_MX_CHAIN=on` wherever it applies. Both operands
//! come re-encoded to one scale per 128-deep stage: from
//! the annexes their quantize calls filled ([`super::chain_annex`]), or re-encoded in the call
//! when an operand has none. This is exact: the elements that do not survive the shift go to
//! per-row residual lists. Then the 256 × 128 chained GEMM runs: it promotes once per stage
//! instead of per k32 block, and adds the residual products to its FP32 accumulators before
//! the epilogue.
//!
//! No host synchronization: the per-k32 kernel is enqueued right after the chained one,
//! with the same gate (the re-encoding's two status words, `MxGemmTmaParams::gate`), so
//! exactly one of them writes the output. The per-k32 kernel runs when a row's list
//! overflowed, a block is NaN/Inf, or the operands have more residuals than the limit.
//! Heavy-tailed data lands there: on Student-t(3) the corrections cost more than the
//! chained main loop saves (run 104: 0.45–0.54× v2t). So does structured data: activations
//! with outlier channels give X's form 3–6e-4 residuals per element and weights with
//! lognormal(0, 0.5) input channels 1.2e-4, against the gate's 1e-4 (docs/perf.md, "Residuals
//! on structured activations", `examples/wgrad_stage_residuals.rs`). The gate memory
//! ([`chain_memory`], on under `on` and `auto`) stops paying for the annexes after an
//! operand's first closed gate, re-trying every 16th call (runs 141–143).
//!
//! `on` is not the default for the annexes' memory (at least 2 bytes per element of X and dY,
//! held as long as the tensor): `auto` gives annexes only to the tensors a guest quantizes for
//! a GEMM, so a plain quantize call costs what it cost without the chain (docs/perf.md run
//! 170: forward and dgrad 1.24–1.35× torch BF16 with nothing set).

use super::at_need;
use super::chain_annex::{b_annex_layout, Annexes};
use super::chain_form::BtAt;
use super::chain_memory::{self, OperandKey};
use super::device::{chain_smem, Call};
use super::gemm::{AMat, BMat};
use super::params::{ChainFix, ChainParams, GemmParams, TGemmParams};
use super::tma::{encode_2d, encode_2d_box, out_map, tensor_map_available};
use super::{arg, cdiv, i32_of, rup};
use super::{chain_block, chain_form};
use crate::kernels::{Unit, TGEMM_THREADS};
use cudarc::driver::result as cr;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_common::cuda::drv;
use std::sync::OnceLock;

/// `MXC_MAX_E` of mx_tgemm_chain.cuh: experts per chained launch.
pub(super) const MAX_E: usize = 256;

/// `MXC_BT_REF` of mx_tgemm_chain.cuh: `ChainFix::bt` is the address of a word that holds Bᵀ's
/// address (a B annex referring to its partner's bytes), not Bᵀ itself.
const MXC_BT_REF: i32 = 4;

/// `MXC_BT_FORM` of mx_tgemm_chain.cuh (with [`MXC_BT_REF`]): the annex's words also address
/// the partner's form, which the corrections read where it equals the partner's bytes (the
/// words are zero, and the kernel reads the bytes, where the annexes were not filled together).
const MXC_BT_FORM: i32 = 8;

/// `MX_RES_UNALIGNED` of mx_reencode.cuh, as the status words' first i32 (the residual count,
/// the second, 0): a B annex whose partner's bytes the chained GEMM cannot copy.
pub(super) const STATUS_UNALIGNED: u64 = 4;

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

/// `MXHOST_MX_CHAIN_TMA_STORE=1`: the 3-stage builds store full tiles of a bf16 output through
/// shared memory and TMA (mx_tgemm_chain.cuh's TMA-store epilogue), so that the stores run
/// under the next tile's main loop. Off until timed against the register epilogue (run 183).
fn tma_store_enabled() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_TMA_STORE", false))
}

/// What `MXHOST_MX_CHAIN` asks for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum ChainMode {
    /// The per-k32 kernels only.
    Off,
    /// The default: as `On`, for the tensors whose quantize call asked for a GEMM form
    /// (ABI 1.6 `AnnexQuery::for_gemm`, WIT `quantize-options.for-gemm`): only they get an
    /// annex, and only a forward or dgrad whose two operands carry one takes the chained
    /// GEMM (no chain form is made inside a GEMM call, and wgrad stays off it). A plain
    /// quantize call writes what it writes with the chain off.
    Auto,
    /// The chained GEMM where it applies, unless the operands have more than
    /// [`MAX_RESIDUALS_PER_ELEMENT`] residuals.
    On,
    /// The chained GEMM wherever the re-encoding is exact, whatever the residual count. This
    /// mode exists for tests and experiments: it puts every correction through the GEMM.
    Always,
}

impl ChainMode {
    /// `on` or `always`: the chain wherever it applies, asked for or not (every eligible
    /// quantize call gets an annex, a GEMM call makes a missing form itself).
    pub(super) fn forced(self) -> bool {
        matches!(self, ChainMode::On | ChainMode::Always)
    }

    /// Whether the chain applies to a call that `requested` it: forced, or under `auto` when
    /// requested. A quantize call requests an annex with `for_gemm`; a forward or dgrad
    /// requests the chained GEMM by bringing two annexed operands.
    pub(super) fn applies(self, requested: bool) -> bool {
        self.forced() || (self == ChainMode::Auto && requested)
    }
}

fn parse_mode(v: Option<&str>) -> PluginResult<ChainMode> {
    match v.map(str::trim) {
        None | Some("") | Some("auto") => Ok(ChainMode::Auto),
        Some("off") | Some("0") => Ok(ChainMode::Off),
        Some("on") | Some("1") => Ok(ChainMode::On),
        Some("always") => Ok(ChainMode::Always),
        Some(other) => Err(PluginError::invalid(format!(
            "MXHOST_MX_CHAIN={other:?}: expected auto (the default: for tensors quantized for a GEMM), off, on, or always (no residual limit)"
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
    // ABI 1.9: an A annex written for another weight (or an older fill of this one) holds only
    // part of `at`; the corrections read it for this B's residuals, so all of it first
    if annexes.a.is_some() && at_need::needs_whole(abase, annexes.b.map(|(b, _)| b)) {
        call.transpose(pa(la.q2), pa(la.at), 1, rows, red)?;
        at_need::note_whole(abase);
    }
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
    // (the 3-stage builds' TMA-store epilogue; a map the driver refuses leaves the register one)
    let tm_o = (out_bf16 && tma_store_enabled())
        .then(|| out_map(&g))
        .flatten();
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
            terms: if bt_ref {
                3 | MXC_BT_REF | MXC_BT_FORM
            } else {
                3
            },
            // (the partner `[E][red][cols]`: its rows are this GEMM's reduction)
            mc_ss: (e * red) as i64,
            mc_es: red as i64,
        },
        tm_o: tm_o.unwrap_or([0; 16]),
        o_tma: tm_o.is_some() as i32,
        _pad: [0; 60],
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
    fn auto_applies_the_chain_only_where_requested() {
        use ChainMode::*;
        // (annexes: quantize calls, `requested` = for_gemm)
        for (mode, for_gemm, wanted) in [
            (Off, false, false),
            (Off, true, false),
            (Auto, false, false),
            (Auto, true, true),
            (On, false, true),
            (On, true, true),
            (Always, false, true),
        ] {
            assert_eq!(mode.applies(for_gemm), wanted, "{mode:?} {for_gemm}");
        }
        // (GEMMs: `requested` = both operands annexed)
        for (mode, (a, b), offered) in [
            (Off, (true, true), false),
            (Auto, (true, true), true),
            (Auto, (true, false), false),
            (Auto, (false, true), false),
            (Auto, (false, false), false),
            (On, (false, false), true),
            (Always, (false, true), true),
        ] {
            assert_eq!(mode.applies(a && b), offered, "{mode:?} {:?}", (a, b));
        }
        assert!(On.forced() && Always.forced() && !Auto.forced() && !Off.forced());
    }

    #[test]
    fn the_mode_variable_parses_and_rejects_typos() {
        assert_eq!(parse_mode(None).unwrap(), ChainMode::Auto);
        assert_eq!(parse_mode(Some("")).unwrap(), ChainMode::Auto);
        assert_eq!(parse_mode(Some("auto")).unwrap(), ChainMode::Auto);
        assert_eq!(parse_mode(Some("0")).unwrap(), ChainMode::Off);
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
