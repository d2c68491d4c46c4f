//! The A-side annex in the quantizer's own pass (ABI 1.3, `MXHOST_MX_CHAIN`). A quantize
//! call that writes X or dY (bf16 rows, 1×32 blocks along them) together with its annex runs
//! one kernel that writes the MX tensor and its chain form:
//! - by default `mx_quantize_rows_form_*` (cuda/include/mx_quant_block_form.cuh): one 128 × 128
//!   block per CTA, the copy's transpose through shared memory, per row and stage a residual
//!   count, then `mx_chain_lists_*` for the lists ([`chain_block::finish`]). 5 bytes moved per
//!   element, against 6 for the flat quantizer followed by [`chain_block::form_a`] (run 120);
//!   `MXHOST_MX_CHAIN_FORM4=1` takes four blocks per CTA (`mx_quantize_rows_form4_*`: a
//!   row's scale bytes in one store per four blocks, opt-in until timed);
//!   `MXHOST_MX_CHAIN_FORM=0` turns it off (the flat quantizer, then `form_a`),
//!   `MXHOST_MX_CHAIN_BLOCK=0` both one-pass paths (the flat quantizer, then the re-encoding
//!   and two transposes of [`chain_form::prepare_a`]);
//! - with `MXHOST_MX_CHAIN_FUSED=1`, `mx_quantize_rows_chain_*` (cuda/include/mx_quant_chain.cuh,
//!   runs 113–117): a 32-row tile walking its stages in order and listing as it goes. Exact,
//!   but issue-bound at ~2 TB/s (ncu, run 114): kept for comparison.
//!
//! The same kernels quantize a dense bf16 A that a chained forward/dgrad gets (guest-sdk's
//! GroupedLinear passes X so), and the GEMM reads the form from scratch as from an annex.
//!
//! `MXHOST_MX_CHAIN_VERIFY=1` checks that on the device for every such call: it runs the
//! flat quantizer and [`chain_form::prepare_a`] too, into scratch, compares every region byte
//! for byte (the residual lists up to each row's count) and fails the call on any difference.
//! It synchronizes: for tests (`scripts/gpu-chain.sh` runs the selftests with it).

use super::at_need::{self, NeedMap};
use super::bytes_on_demand;
use super::chain;
use super::chain_annex::{annex_filled_here, checked_annex, AnnexRole};
use super::chain_block;
use super::chain_form::{self, a_layout, ALayout};
use super::chain_verify::{self, Region};
use super::device::Call;
use super::gemm::{AMat, BMat, RowsA};
use super::params::{QuantBlockFormParams, QuantChainParams};
use super::quantize::FlatOut;
use super::{arg, cdiv, fmt_code, i32_of, mode_code, ptr};
use crate::kernels::Unit;
use mxhost_plugin_abi::plugin_support::PluginResult;
use mxhost_plugin_abi::DType;
use mxhost_plugin_common::args::QuantizeArgs;
use std::sync::OnceLock;

/// CTAs of `mx_quantize_rows_chain_*` resident per SM that the grid rule counts on (63
/// registers per thread and 9 KB of shared memory per 256-thread CTA allow four).
const CTAS_PER_SM: usize = 4;

fn fused_enabled() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_FUSED", false))
}

/// The one-pass kernels for a bf16 A with `red % 32 == 0` and a 16-byte aligned input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnePass {
    /// `mx_quantize_rows_chain_*` (`MXHOST_MX_CHAIN_FUSED=1`).
    Tile32,
    /// `mx_quantize_rows_form_*` (the default; whole 16-row groups).
    Block,
}

/// `MXHOST_MX_CHAIN_FORM=0`: the flat quantizer, then [`chain_block::form_a`] (for A/B
/// timing of the one-pass quantizer alone).
fn form_enabled() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_FORM", true))
}

/// Blocks of 128 columns per CTA of `mx_quantize_rows_form*`: 4 with `MXHOST_MX_CHAIN_FORM4=1`
/// (`mx_quantize_rows_form4_*`: a row's scale bytes of four blocks in one store instead of
/// four; off by default until timed on a GPU, docs/perf.md run 138), else 1.
fn form_blocks_per_cta() -> usize {
    static F: OnceLock<bool> = OnceLock::new();
    if *F.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_FORM4", false)) {
        4
    } else {
        1
    }
}

/// `MXHOST_MX_FORM_PREFETCH=1`: the WV NOQ form kernel (X's and dY's default) as its
/// prefetching build (`mx_quantize_rows_form_wv_noq_pf_*`: a few CTAs per row block walk its
/// column blocks with the next one's loads in flight). Same bytes; off until a GPU run times it
/// (docs/perf.md run 201).
fn form_prefetch() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| super::env_flag("MXHOST_MX_FORM_PREFETCH", false))
}

/// Column-block walkers per row block of the prefetching form kernel: as many as fit in one
/// wave of two CTAs per SM over `row_blocks` row blocks (a second wave would walk its blocks
/// after the first's), at most one per column block, at least one.
pub(super) fn prefetch_grid_x(col_blocks: usize, row_blocks: usize, sms: usize) -> usize {
    (2 * sms / row_blocks.max(1)).clamp(1, col_blocks.max(1))
}

/// The one-pass kernel for an A of `rows` rows: `None` when neither is enabled or takes it.
fn one_pass(rows: usize) -> Option<OnePass> {
    if fused_enabled() {
        Some(OnePass::Tile32)
    } else if chain_block::block_enabled() && form_enabled() && rows.is_multiple_of(16) {
        Some(OnePass::Block)
    } else {
        None
    }
}

/// Grid of the fused kernel over `tiles` 32-row tiles: the fewest grid-stride rounds the
/// resident CTAs allow, then the fewest CTAs that do them (no CTA idles a round).
fn grid(tiles: usize, sms: usize) -> usize {
    let resident = (CTAS_PER_SM * sms).max(1);
    let rounds = tiles.div_ceil(resident).max(1);
    tiles.div_ceil(rounds)
}

/// Runs the quantize request `args` as one fused launch when it is an A-side tensor with an
/// annex the kernel takes (bf16 `[rows, red]`, `red % 32 == 0`, no transposed copy, no kept
/// values, aligned buffers, a device that fills annexes); returns whether it did. The
/// one-block form kernel also writes the wgrad values at `wv` (ABI 1.5) and takes it.
pub(super) fn quantize_a_with_annex(
    call: &mut Call,
    args: &QuantizeArgs,
    wv: &mut Option<u64>,
) -> PluginResult<bool> {
    let (Some(annex), None, None) = (&args.annex, &args.transposed, &args.values) else {
        return Ok(false);
    };
    let (x, o) = (&args.input, &args.output);
    if x.dtype != DType::Bf16 || !annex_filled_here(call) {
        return Ok(false);
    }
    let (AnnexRole::A { rows, red }, base, _) = checked_annex(o, annex, false)? else {
        return Ok(false);
    };
    if !red.is_multiple_of(32) || !ptr(x).is_multiple_of(16) || !ptr(&o.data).is_multiple_of(8) {
        return Ok(false);
    }
    let Some(kernel) = one_pass(rows) else {
        return Ok(false);
    };
    let (fmt, mode) = (fmt_code(o.format), mode_code(o.mode));
    let (q, s) = (ptr(&o.data), ptr(&o.scales));
    if chain_verify::enabled() {
        call.zero(base, a_layout(rows, red).bytes)?;
    }
    // ABI 1.7: the bytes the form gives back are left out where the host fills them on demand
    // (the one-block form kernel's NOQ builds); 1.8: the scales too, where it asks for those
    let noq = args.bytes_on_demand
        && bytes_on_demand::enabled()
        && kernel == OnePass::Block
        && form_blocks_per_cta() == 1;
    let on_demand = match (
        noq,
        args.scales_on_demand && bytes_on_demand::scales_enabled(),
    ) {
        (false, _) => OnDemand::Nothing,
        (true, false) => OnDemand::Bytes,
        (true, true) => OnDemand::BytesAndScales,
    };
    // ABI 1.9: only the part of `at` that the named weight's GEMM reads (one-block builds)
    let need = if kernel == OnePass::Block && form_blocks_per_cta() == 1 {
        at_need::need_map(call, args, red)?
    } else {
        None
    };
    let l = fused(
        call,
        kernel,
        ptr(x),
        (q, s, fmt, mode),
        (rows, red),
        (base, wv, on_demand, need),
    )?;
    if let Some(n) = &need {
        at_need::note_partial(base, n);
    }
    if noq {
        bytes_on_demand::note_left_out(base, on_demand == OnDemand::BytesAndScales);
    }
    if chain_verify::enabled() {
        verify(call, ptr(x), (q, s, fmt, mode), (rows, red), (&l, base))?;
    }
    Ok(true)
}

/// A dense bf16 A of a forward/dgrad under `MXHOST_MX_CHAIN`, quantized with its chain
/// form in one pass into this call's scratch when the chained GEMM will take the GEMM:
/// the FP8 operand and the form's address (read as an annex). `None`: the caller quantizes
/// A as usual.
pub(super) fn quantize_dense_a(
    call: &mut Call,
    a: &RowsA,
    b: &BMat,
    out_bf16: bool,
    (e, rows, cols, red): (usize, usize, usize, usize),
) -> PluginResult<Option<(AMat, u64)>> {
    let RowsA::Dense {
        x,
        in_bf16: true,
        fmt,
        mode,
    } = *a
    else {
        return Ok(None);
    };
    let Some(kernel) = one_pass(rows) else {
        return Ok(None);
    };
    // (`auto` makes no chain form inside a GEMM call: only annexes from quantize calls)
    if !chain::mode()?.forced()
        || !red.is_multiple_of(32)
        || !x.is_multiple_of(16)
        || !chain::would_take(call, fmt, b, out_bf16, (e, rows, cols))?
    {
        return Ok(None);
    }
    let q = call.alloc(rows * red)?;
    let s = call.alloc(rows * red / 32)?;
    let l = a_layout(rows, red);
    let base = call.alloc(l.bytes)?;
    if chain_verify::enabled() {
        call.zero(base, l.bytes)?;
    }
    fused(
        call,
        kernel,
        x,
        (q, s, fmt, mode),
        (rows, red),
        (base, &mut None, OnDemand::Nothing, None),
    )?;
    if chain_verify::enabled() {
        verify(call, x, (q, s, fmt, mode), (rows, red), (&l, base))?;
    }
    Ok(Some((AMat { q, s, fmt, rdiv: 1 }, base)))
}

/// What a quantize call leaves out of the MX tensor for `fill_bytes` to write (the one-block
/// form kernel's NOQ builds; [`bytes_on_demand`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnDemand {
    Nothing,
    /// The bytes the form gives back (ABI 1.7).
    Bytes,
    /// Those and the scales, written transposed into the form's `s2` region (ABI 1.8).
    BytesAndScales,
}

/// `kernel` over bf16 `x` (`[rows][red]`): the MX tensor at `q`, `s` and its chain form at
/// `base`, with the form's FP32 scale table; with the one-block form kernel also the wgrad
/// values at `wv` (taken then), as `on_demand` says part of the MX tensor left out, and with
/// `need` only the part of `at` a GEMM with that weight reads (the caller notes it).
fn fused(
    call: &mut Call,
    kernel: OnePass,
    x: u64,
    (q, s, fmt, mode): (u64, u64, u8, i32),
    (rows, red): (usize, usize),
    (base, wv, on_demand, need): (u64, &mut Option<u64>, OnDemand, Option<NeedMap>),
) -> PluginResult<ALayout> {
    let noq = on_demand != OnDemand::Nothing;
    let scales_out = on_demand == OnDemand::BytesAndScales;
    let l = a_layout(rows, red);
    let at = |o: usize| base + o as u64;
    call.zero(at(l.status), 8)?;
    if kernel == OnePass::Block {
        let mc = at(l.mc);
        let bpc = form_blocks_per_cta();
        // (the values ride only on the one-block build; 0 tells the kernel there are none)
        let wv_at = if bpc == 1 { wv.take() } else { None };
        let p = QuantBlockFormParams {
            inp: x,
            q,
            // (null: the NOQ build writes the scales transposed into s2's region instead)
            s: if scales_out { 0 } else { s },
            q2: at(l.q2),
            s2: at(l.s2),
            at: at(l.at),
            sat: at(l.sat),
            mc,
            status: at(l.status),
            sa: at(l.sa),
            r: i32_of("rows", rows)?,
            c: i32_of("reduction", red)?,
            mode,
            wv: wv_at.unwrap_or(0),
            need: need.map_or(0, |n| n.need),
            offs: need.map_or(0, |n| n.offs),
            e: need.map_or(0, |n| n.experts),
            nw: need.map_or(0, |n| n.words),
        };
        let pf = bpc == 1 && noq && wv_at.is_some() && form_prefetch();
        let name = match (bpc, fmt, wv_at.is_some()) {
            (1, 0, true) if pf => "mx_quantize_rows_form_wv_noq_pf_e4m3",
            (1, _, true) if pf => "mx_quantize_rows_form_wv_noq_pf_e5m2",
            (1, 0, true) if noq => "mx_quantize_rows_form_wv_noq_e4m3",
            (1, _, true) if noq => "mx_quantize_rows_form_wv_noq_e5m2",
            (1, 0, _) if noq => "mx_quantize_rows_form_noq_e4m3",
            (1, _, _) if noq => "mx_quantize_rows_form_noq_e5m2",
            (1, 0, true) => "mx_quantize_rows_form_wv_e4m3",
            (1, _, true) => "mx_quantize_rows_form_wv_e5m2",
            (1, 0, _) => "mx_quantize_rows_form_e4m3",
            (1, ..) => "mx_quantize_rows_form_e5m2",
            (_, 0, _) => "mx_quantize_rows_form4_e4m3",
            _ => "mx_quantize_rows_form4_e5m2",
        };
        let (col_blocks, row_blocks) = (cdiv(red, 128 * bpc), cdiv(rows, 128));
        let grid_x = match pf {
            true => prefetch_grid_x(col_blocks, row_blocks, call.dev.sms as usize),
            false => col_blocks,
        };
        let grid = (grid_x, row_blocks, 1);
        call.launch(Unit::Chain, name, grid, (256, 1, 1), 0, &mut [arg(&p)])?;
        let a = AMat { q, s, fmt, rdiv: 1 };
        // (the kernel wrote the FP32 scale table too)
        chain_block::lists(call, &a, (rows, red), mc, (&l, base), scales_out)?;
        return Ok(l);
    }
    let p = QuantChainParams {
        inp: x,
        q,
        s,
        q2: at(l.q2),
        s2: at(l.s2),
        res: at(l.res),
        cnt: at(l.cnt),
        status: at(l.status),
        at: at(l.at),
        sat: at(l.sat),
        r: i32_of("rows", rows)?,
        c: i32_of("reduction", red)?,
        slots: chain_form::slots(red) as i32,
        mode,
    };
    let name = if fmt == 0 {
        "mx_quantize_rows_chain_e4m3"
    } else {
        "mx_quantize_rows_chain_e5m2"
    };
    let g = grid(cdiv(rows, 32), call.dev.sms as usize);
    call.launch(Unit::Chain, name, (g, 1, 1), (256, 1, 1), 0, &mut [arg(&p)])?;
    chain_form::a_scale_table(call, &l, (rows, red), base)?;
    Ok(l)
}

/// `MXHOST_MX_CHAIN_VERIFY`: the flat quantizer and [`chain_form::prepare_a`] into scratch,
/// every region compared with what the fused kernel wrote; an error names the differences.
fn verify(
    call: &mut Call,
    x: u64,
    (q, s, fmt, mode): (u64, u64, u8, i32),
    (rows, red): (usize, usize),
    (l, base): (&ALayout, u64),
) -> PluginResult<()> {
    let kb = red / 32;
    let q_ref = call.alloc(rows * red)?;
    let s_ref = call.alloc(rows * kb)?;
    let base_ref = call.alloc(l.bytes)?;
    call.zero(base_ref, l.bytes)?;
    call.flat_rows(
        x,
        true,
        rows * kb,
        fmt,
        mode,
        (q_ref, s_ref),
        FlatOut::Quantized,
    )?;
    let a = AMat {
        q: q_ref,
        s: s_ref,
        fmt,
        rdiv: 1,
    };
    chain_form::prepare_a(call, &a, (rows, red), base_ref)?;
    let (form, lists) = chain_block::a_form_checks(l, (rows, red), (base, base_ref));
    let tensor = [
        Region {
            what: "the FP8 bytes",
            got: q,
            want: q_ref,
            bytes: rows * red,
        },
        Region {
            what: "the scales",
            got: s,
            want: s_ref,
            bytes: rows * kb,
        },
    ];
    let regions: Vec<Region> = tensor.into_iter().chain(form).collect();
    chain_verify::require_equal(
        call,
        (&regions, &lists),
        &format!("the one-pass quantizer (rows {rows}, reduction {red})"),
        "the flat quantizer + re-encoding + transposes",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefetching_grid_fills_two_ctas_per_sm_within_the_column_blocks() {
        // c's X (32768 rows, 2880 columns) on 132 SMs: 256 row blocks, one walker each (one
        // wave of 264 slots)
        assert_eq!(prefetch_grid_x(23, 256, 132), 1);
        assert_eq!(prefetch_grid_x(23, 512, 132), 1);
        // few rows: as many walkers as the wave and the columns allow
        assert_eq!(prefetch_grid_x(23, 1, 132), 23);
        assert_eq!(prefetch_grid_x(23, 8, 132), 23);
        assert_eq!(prefetch_grid_x(32, 16, 132), 16);
        assert_eq!(prefetch_grid_x(1, 0, 0), 1);
    }

    #[test]
    fn the_grid_covers_every_tile_in_the_fewest_rounds() {
        for sms in [1, 78, 132] {
            for tiles in [1, 31, 527, 528, 529, 1024, 5000] {
                let g = grid(tiles, sms);
                let rounds = tiles.div_ceil(g);
                assert!(g <= CTAS_PER_SM * sms, "{tiles} tiles, {sms} SMs: grid {g}");
                assert_eq!(rounds, tiles.div_ceil(CTAS_PER_SM * sms), "{tiles} {sms}");
                // every tile is covered, and one CTA fewer would need another round
                assert!(
                    g * rounds >= tiles && (g - 1) * rounds < tiles,
                    "{tiles} {sms}"
                );
            }
        }
        assert_eq!(grid(1024, 132), 512);
    }
}
