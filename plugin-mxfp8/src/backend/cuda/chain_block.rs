//! An A operand's chain form (X of forward, dY of dgrad) in one pass over its bytes. The
//! re-encoding and the two transposes of [`chain_form::prepare_a`] read the FP8 bytes twice and
//! write them twice; `mx_reencode_block_*` (cuda/include/mx_reencode_block.cuh) reads them
//! once per 128 × 128 block (one 128-deep stage of 128 rows) and writes the copy, its
//! transpose, both scale sets and per row and stage the count of residuals, and
//! `mx_chain_lists_*` turns the counts into the lists (reading again only the stages that
//! have residuals). Used for an annex the quantizer fills and for a form made in a GEMM call.
//! The bytes are [`chain_form::prepare_a`]'s; `MXHOST_MX_CHAIN_VERIFY=1` checks every region.
//! `MXHOST_MX_CHAIN_BLOCK=0` turns the path off (the three launches instead), for A/B timing.

use super::chain_form::{self, a_layout, ALayout};
use super::chain_verify::{self, Lists, Region};
use super::device::Call;
use super::gemm::AMat;
use super::params::{ChainListParams, ReencodeBlockParams};
use super::{arg, cdiv, i32_of};
use crate::kernels::Unit;
use mxhost_plugin_abi::plugin_support::PluginResult;
use std::sync::OnceLock;

/// Whether the one-pass kernels for A operands run (`MXHOST_MX_CHAIN_BLOCK`, on by default):
/// this module's and `mx_quantize_rows_form_*` ([`super::chain_quant`]).
pub(super) fn block_enabled() -> bool {
    static B: OnceLock<bool> = OnceLock::new();
    *B.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_BLOCK", true))
}

/// Whether the one-pass kernel takes an A of `rows × red` at `q`: whole 16-row groups (a warp's
/// rows, and 16-byte transposed stores), whole 4-byte words, word-aligned bytes.
fn takes(q: u64, (rows, red): (usize, usize)) -> bool {
    rows.is_multiple_of(16) && red.is_multiple_of(4) && q.is_multiple_of(4)
}

/// Fills the A-side chain form of `a` (`[rows][red]`, 1×32) at `base` ([`a_layout`] bytes):
/// in one pass when the kernel takes it, else by [`chain_form::prepare_a`].
pub(super) fn form_a(
    call: &mut Call,
    a: &AMat,
    (rows, red): (usize, usize),
    base: u64,
) -> PluginResult<ALayout> {
    if !block_enabled() || !takes(a.q, (rows, red)) {
        return chain_form::prepare_a(call, a, (rows, red), base);
    }
    let l = a_layout(rows, red);
    let at = |o: usize| base + o as u64;
    if chain_verify::enabled() {
        // (the regions' alignment padding too, which the reference leaves zero)
        call.zero(base, l.bytes)?;
    }
    call.zero(at(l.status), 8)?;
    let mc = at(l.mc);
    let fmt = if a.fmt == 0 { "e4m3" } else { "e5m2" };
    let p = ReencodeBlockParams {
        q: a.q,
        s: a.s,
        q2: at(l.q2),
        s2: at(l.s2),
        at: at(l.at),
        sat: at(l.sat),
        mc,
        status: at(l.status),
        r: i32_of("rows", rows)?,
        c: i32_of("reduction", red)?,
    };
    call.launch(
        Unit::Chain,
        &format!("mx_reencode_block_{fmt}"),
        (cdiv(red, 128), cdiv(rows, 128), 1),
        (256, 1, 1),
        0,
        &mut [arg(&p)],
    )?;
    lists(call, a, (rows, red), mc, (&l, base), false)?;
    chain_form::a_scale_table(call, &l, (rows, red), base)?;
    if chain_verify::enabled() {
        verify(call, a, (rows, red), (&l, base))?;
    }
    Ok(l)
}

/// What follows a one-pass kernel that left per-row, per-stage residual counts at `mc`
/// (`mx_reencode_block_*`, `mx_quantize_rows_form_*`): `mx_chain_lists_*` writes the lists,
/// their counts and status word 1. `scales_in_s2`: the kernel wrote A's scales transposed into
/// the form's `s2` region instead of `a.s` (a NOQ build with the scales on demand, ABI 1.8).
pub(super) fn lists(
    call: &Call,
    a: &AMat,
    (rows, red): (usize, usize),
    mc: u64,
    (l, base): (&ALayout, u64),
    scales_in_s2: bool,
) -> PluginResult<()> {
    let at = |o: usize| base + o as u64;
    // (the lists read a row's scale at s + r·isc + (k / 32)·isr)
    let (s, isr, isc) = if scales_in_s2 {
        (at(l.s2), rows as i64, 1)
    } else {
        (a.s, 1, cdiv(red, 32) as i64)
    };
    let lp = ChainListParams {
        q: a.q,
        s,
        mc,
        res: at(l.res),
        cnt: at(l.cnt),
        status: at(l.status),
        r: rows as i64,
        ise: 0,
        isr,
        isc,
        k: i32_of("reduction", red)?,
        rpe: i32_of("rows", rows)?,
        rdv: 1,
        slots: chain_form::slots(red) as i32,
        rpw: 0,
        pad: 0,
    };
    chain_form::launch_lists(call, a.fmt, &lp)
}

/// Every region of the A-side form at `base` paired with the reference form at `base_ref`, and
/// its residual lists (compared up to each row's count): what `MXHOST_MX_CHAIN_VERIFY` checks.
pub(super) fn a_form_checks(
    l: &ALayout,
    (rows, red): (usize, usize),
    (base, base_ref): (u64, u64),
) -> (Vec<Region>, [Lists; 1]) {
    let kb = cdiv(red, 32);
    let form = |what, o: usize, bytes| Region {
        what,
        got: base + o as u64,
        want: base_ref + o as u64,
        bytes,
    };
    let regions = vec![
        form("q2", l.q2, rows * red),
        form("s2", l.s2, rows * kb),
        form("the residual counts", l.cnt, rows * 4),
        form("q2 transposed", l.at, rows * red),
        form("s2 transposed", l.sat, rows * kb),
        form("the FP32 scale table", l.sa, l.status - l.sa),
        form("the status words", l.status, 8),
    ];
    let lists = [Lists {
        what: "the residual records",
        got: base + l.res as u64,
        want: base_ref + l.res as u64,
        cnt: base + l.cnt as u64,
        rows,
        slots: chain_form::slots(red),
    }];
    (regions, lists)
}

/// `MXHOST_MX_CHAIN_VERIFY`: [`chain_form::prepare_a`] of `a` into scratch, every region of
/// the form at `base` compared with it.
fn verify(
    call: &mut Call,
    a: &AMat,
    (rows, red): (usize, usize),
    (l, base): (&ALayout, u64),
) -> PluginResult<()> {
    let base_ref = call.alloc(l.bytes)?;
    call.zero(base_ref, l.bytes)?;
    chain_form::prepare_a(call, a, (rows, red), base_ref)?;
    let (regions, lists) = a_form_checks(l, (rows, red), (base, base_ref));
    chain_verify::require_equal(
        call,
        (&regions, &lists),
        &format!("mx_reencode_block (rows {rows}, reduction {red})"),
        "the re-encoding + transposes",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_kernel_takes_whole_row_groups_and_words_only() {
        assert!(takes(256, (32768, 4096)));
        assert!(takes(4, (16, 2880)));
        assert!(!takes(256, (40, 4096)), "rows not whole 16-row groups");
        assert!(!takes(256, (32, 18)), "reduction not whole words");
        assert!(!takes(2, (32, 4096)), "bytes not word-aligned");
    }
}
