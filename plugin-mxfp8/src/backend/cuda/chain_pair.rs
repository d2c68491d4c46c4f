//! Both B-side annexes of one quantize call (ABI 1.3, `MXHOST_MX_CHAIN`): a weight in 32×32
//! tiles written with its transposed copy, each with an annex (forward reads the weight's,
//! dgrad the copy's). Filled one at a time ([`chain::fill_annex`]), each annex costs a
//! re-encoding and a transpose of the original bytes: four reads and four writes of the
//! weight's bytes, which made the weight's quantize call 3.3× the plain one (docs/perf.md run
//! 112: 471 against 144 µs on shape a). But the two forms hold the same information: a 32×32
//! tile has one scale, so each copy's transposed original bytes are the other copy's bytes,
//! and a 128 × 128 block of the weight holds every stage scale both re-encodings need.
//! `mx_reencode_pair_e4m3` therefore reads the weight once and writes both copies, both
//! transposed originals and both stage scale sets, with per-row residual counts per stage;
//! `mx_chain_lists_e4m3` turns the counts into the lists, re-reading only the stages with
//! residuals (cuda/include/mx_reencode_pair.cuh). The bytes are those of the two
//! [`chain_form::prepare_b`] calls; `MXHOST_MX_CHAIN_VERIFY=1` checks every region.
//! `MXHOST_MX_CHAIN_PAIR=0` turns the path off (the two calls instead), for A/B timing.

use super::chain::{annex_filled_here, checked_annex, AnnexRole};
use super::chain_form::{self, b_layout, tile_strides, BLayout};
use super::chain_verify::{self, Lists, Region};
use super::device::Call;
use super::gemm::BMat;
use super::params::{ChainListParams, ReencodePairParams};
use super::{arg, cdiv, fmt_code, i32_of};
use crate::kernels::Unit;
use mxhost_plugin_abi::plugin_support::PluginResult;
use mxhost_plugin_common::args::{MxArg, QuantizeArgs};
use std::sync::OnceLock;

fn pair_enabled() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    *P.get_or_init(|| chain_verify::env_flag("MXHOST_MX_CHAIN_PAIR", true))
}

/// The weight `[E][r][c]` as the chained GEMM reads a B operand stored so (32×32 tiles).
fn tile_mat(m: &MxArg, (r, c): (usize, usize)) -> BMat {
    let (ise, isr, isc) = tile_strides(r, c);
    BMat {
        q: m.data.ptr as u64,
        s: m.scales.ptr as u64,
        ise,
        isr,
        isc,
        w2d: true,
        fmt: fmt_code(m.format),
    }
}

/// Fills both annexes of `args` in one pass when it writes a weight and its transposed copy,
/// each with a B-side annex, on a device that fills annexes; returns whether it did (else the
/// caller fills them one at a time). Runs after the quantizer, on the same stream.
pub(super) fn fill_b_pair(call: &mut Call, args: &QuantizeArgs) -> PluginResult<bool> {
    let (Some(annex), Some(t), Some(t_annex)) =
        (&args.annex, &args.transposed, &args.transposed_annex)
    else {
        return Ok(false);
    };
    if !pair_enabled() || !annex_filled_here(call) {
        return Ok(false);
    }
    let (w, base) = checked_annex(&args.output, annex)?;
    let (wt, base_t) = checked_annex(t, t_annex)?;
    let (AnnexRole::B { e, cols: r, red: c }, AnnexRole::B { e: e2, cols, red }) = (w, wt) else {
        return Ok(false);
    };
    let aligned = [&args.output, t]
        .iter()
        .all(|m| (m.data.ptr as u64).is_multiple_of(16));
    if (e2, cols, red) != (e, c, r) || !aligned {
        return Ok(false);
    }
    let (bw, bwt) = (tile_mat(&args.output, (r, c)), tile_mat(t, (c, r)));
    let (lw, lt) = (layout(&bw, (e, r, c)), layout(&bwt, (e, c, r)));
    let (Some(bt), Some(btt)) = (lw.bt, lt.bt) else {
        unreachable!("annex layouts hold the transposed bytes")
    };
    let at = |b: u64, o: usize| b + o as u64;
    if chain_verify::enabled() {
        // (the regions' alignment padding too, which the reference leaves zero)
        call.zero(base, lw.bytes)?;
        call.zero(base_t, lt.bytes)?;
    }
    call.zero(at(base, lw.status), 8)?;
    call.zero(at(base_t, lt.status), 8)?;
    let (mc, mct) = (
        call.alloc(cdiv(c, 128) * e * r)?,
        call.alloc(cdiv(r, 128) * e * c)?,
    );
    let p = ReencodePairParams {
        q: bw.q,
        s: bw.s,
        q2: at(base, lw.q2),
        s2: at(base, lw.s2),
        qt2: at(base_t, lt.q2),
        st2: at(base_t, lt.s2),
        bt: at(base, bt),
        btt: at(base_t, btt),
        mc,
        mct,
        status: at(base, lw.status),
        status_t: at(base_t, lt.status),
        r: i32_of("rows", r)?,
        c: i32_of("reduction", c)?,
    };
    call.launch(
        Unit::Chain,
        "mx_reencode_pair_e4m3",
        (cdiv(c, 128), cdiv(r, 128), e),
        (256, 1, 1),
        0,
        &mut [arg(&p)],
    )?;
    lists(call, &bw, (e, r, c), mc, (&lw, base))?;
    lists(call, &bwt, (e, c, r), mct, (&lt, base_t))?;
    chain_form::b_scale_table(call, &lw, &bw, (e, r, c), base)?;
    chain_form::b_scale_table(call, &lt, &bwt, (e, c, r), base_t)?;
    if chain_verify::enabled() {
        verify(call, &bw, (e, r, c), (&lw, base))?;
        verify(call, &bwt, (e, c, r), (&lt, base_t))?;
    }
    Ok(true)
}

fn layout(b: &BMat, (e, cols, red): (usize, usize, usize)) -> BLayout {
    b_layout((e, cols, red), e * b.ise as usize, true)
}

/// `mx_chain_lists_*` over the `e * cols` rows of `b` with the per-stage counts `mc`.
fn lists(
    call: &Call,
    b: &BMat,
    (e, cols, red): (usize, usize, usize),
    mc: u64,
    (l, base): (&BLayout, u64),
) -> PluginResult<()> {
    let rows = e * cols;
    let at = |o: usize| base + o as u64;
    let p = ChainListParams {
        q: b.q,
        s: b.s,
        mc,
        res: at(l.res),
        cnt: at(l.cnt),
        status: at(l.status),
        r: rows as i64,
        ise: b.ise,
        isr: b.isr,
        isc: b.isc,
        k: i32_of("reduction", red)?,
        rpe: i32_of("rows", cols)?,
        rdv: 32,
        slots: chain_form::slots(red) as i32,
    };
    chain_form::launch_lists(call, b.fmt, &p)
}

/// `MXHOST_MX_CHAIN_VERIFY`: [`chain_form::prepare_b`] of `b` into scratch, every region of
/// the annex at `base` compared with it.
fn verify(
    call: &mut Call,
    b: &BMat,
    dims: (usize, usize, usize),
    (l, base): (&BLayout, u64),
) -> PluginResult<()> {
    let (e, cols, red) = dims;
    let base_ref = call.alloc(l.bytes)?;
    call.zero(base_ref, l.bytes)?;
    let l_ref = chain_form::prepare_b(call, b, dims, false, base_ref)?;
    debug_assert_eq!(&l_ref, l);
    let form = |what, o: usize, bytes| Region {
        what,
        got: base + o as u64,
        want: base_ref + o as u64,
        bytes,
    };
    let n = e * cols * red;
    let regions = [
        form("q2", l.q2, n),
        form("s2", l.s2, e * b.ise as usize),
        form("the residual counts", l.cnt, e * cols * 4),
        form("the transposed bytes", l.bt.expect("with bt"), n),
        form("the FP32 scale table", l.sb, l.status - l.sb),
        form("the status words", l.status, 8),
    ];
    let lists = [Lists {
        what: "the residual records",
        got: base + l.res as u64,
        want: base_ref + l.res as u64,
        cnt: base + l.cnt as u64,
        rows: e * cols,
        slots: chain_form::slots(red),
    }];
    chain_verify::require_equal(
        call,
        (&regions, &lists),
        &format!("mx_reencode_pair (E {e}, {cols} × {red})"),
        "the re-encoding + transpose",
    )
}
