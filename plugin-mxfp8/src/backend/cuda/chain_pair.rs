//! Both B-side annexes of one quantize call (ABI 1.3, `MXHOST_MX_CHAIN`): a weight in 32×32
//! tiles written with its transposed copy, each with an annex (forward reads the weight's,
//! dgrad the copy's). Filled one at a time ([`fill_annex`](super::chain_annex::fill_annex)),
//! each annex costs a re-encoding and a transpose of the original bytes: four reads and four
//! writes of the weight's bytes, which made the weight's quantize call 3.3× the plain one
//! (docs/perf.md run 112: 471 against 144 µs on shape a). But the two forms hold the same information: a 32×32
//! tile has one scale, so each copy's transposed original bytes are the other copy's bytes,
//! and a 128 × 128 block of the weight holds every stage scale both re-encodings need.
//! `mx_reencode_pair_e4m3` therefore reads the weight once and writes both copies, both
//! transposed originals and both stage scale sets, with per-row residual counts per stage;
//! `mx_chain_lists_e4m3` turns the counts into the lists, re-reading only the stages with
//! residuals (cuda/include/mx_reencode_pair.cuh). The bytes are those of the two
//! [`chain_form::prepare_b`] calls; `MXHOST_MX_CHAIN_VERIFY=1` checks every region.
//! With a host of ABI 1.4 (`AnnexQuery::partner_kept`) the annexes hold no transposed bytes
//! at all, only the partner's address ([`BtAt::Partner`]): the kernel then writes 2 bytes per
//! element instead of 4.
//! `MXHOST_MX_CHAIN_PAIR=0` turns the path off (the two calls instead), for A/B timing.
//! For a bf16 weight the same kernel also quantizes W itself (`mx_quantize_pair_bf16_e4m3`), so
//! the call is one launch instead of the tile quantizer's and this one ([`quantize_b_pair`]);
//! `MXHOST_MX_CHAIN_QPAIR=0` goes back to the two launches.

use super::bytes_on_demand;
use super::chain_annex::{annex_filled_here, checked_annex, AnnexRole};
use super::chain_form::{self, b_layout, tile_strides, BLayout, BtAt, PARTNER_WORDS};
use super::chain_verify::{self, Lists, Region};
use super::device::Call;
use super::gemm::BMat;
use super::params::{ChainListParams, QuantPairParams, ReencodePairParams};
use super::{arg, cdiv, fmt_code, i32_of, mode_code};
use crate::kernels::Unit;
use mxhost_plugin_abi::plugin_support::PluginResult;
use mxhost_plugin_abi::DType;
use mxhost_plugin_common::args::{MxArg, QuantizeArgs};
use std::sync::OnceLock;

fn pair_enabled() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    *P.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_PAIR", true))
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

/// What both pair launches share: the weight `[e][r][c]` and its transposed copy as the chained
/// GEMM reads them, their annexes' layouts and addresses.
struct PairPlan {
    dims: (usize, usize, usize),
    bw: BMat,
    bwt: BMat,
    lw: BLayout,
    lt: BLayout,
    base: u64,
    base_t: u64,
}

/// The pair plan of `args` when it writes a weight and its transposed copy, each with a B-side
/// annex, on a device that fills annexes; `None`: the caller fills them one at a time.
fn plan(call: &Call, args: &QuantizeArgs) -> PluginResult<Option<PairPlan>> {
    let (Some(annex), Some(t), Some(t_annex)) =
        (&args.annex, &args.transposed, &args.transposed_annex)
    else {
        return Ok(None);
    };
    if !pair_enabled() || !annex_filled_here(call) {
        return Ok(None);
    }
    let (w, base, bt_w) = checked_annex(&args.output, annex, true)?;
    let (wt, base_t, bt_t) = checked_annex(t, t_annex, true)?;
    let (AnnexRole::B { e, cols: r, red: c }, AnnexRole::B { e: e2, cols, red }) = (w, wt) else {
        return Ok(None);
    };
    let aligned = [&args.output, t]
        .iter()
        .all(|m| (m.data.ptr as u64).is_multiple_of(16));
    if (e2, cols, red) != (e, c, r) || !aligned || bt_w != bt_t {
        return Ok(None);
    }
    let (bw, bwt) = (tile_mat(&args.output, (r, c)), tile_mat(t, (c, r)));
    let (lw, lt) = (layout(&bw, (e, r, c), bt_w), layout(&bwt, (e, c, r), bt_t));
    Ok(Some(PairPlan {
        dims: (e, r, c),
        bw,
        bwt,
        lw,
        lt,
        base,
        base_t,
    }))
}

impl PairPlan {
    /// Under `MXHOST_MX_CHAIN_VERIFY`, both annexes zeroed first (their alignment padding too,
    /// which the reference leaves zero); before anything is written into them.
    fn clear_for_verify(&self, call: &mut Call) -> PluginResult<()> {
        if chain_verify::enabled() {
            call.zero(self.base, self.lw.bytes)?;
            call.zero(self.base_t, self.lt.bytes)?;
        }
        Ok(())
    }

    /// The pair kernel's parameters for the forms (status words zeroed, count buffers
    /// allocated), with `bt`/`btt` where it writes W transposed and W's bytes (0: nowhere).
    fn forms(&self, call: &mut Call, (bt, btt): (u64, u64)) -> PluginResult<ReencodePairParams> {
        let (_, r, c) = self.dims;
        let (l, lt, base, base_t) = (&self.lw, &self.lt, self.base, self.base_t);
        let at = |b: u64, o: usize| b + o as u64;
        call.zero(at(base, l.status), 8)?;
        call.zero(at(base_t, lt.status), 8)?;
        Ok(ReencodePairParams {
            q: self.bw.q,
            s: self.bw.s,
            q2: at(base, l.q2),
            s2: at(base, l.s2),
            qt2: at(base_t, lt.q2),
            st2: at(base_t, lt.s2),
            bt,
            btt,
            mc: at(base, l.mc),
            mct: at(base_t, lt.mc),
            status: at(base, l.status),
            status_t: at(base_t, lt.status),
            r: i32_of("rows", r)?,
            c: i32_of("reduction", c)?,
        })
    }

    /// ABI 1.4 annexes: each annex's words (at `slot`, `slot_t`) take the addresses of the
    /// other copy's bytes, which the annex then reads instead of holding a copy, and, with
    /// `forms` (the bytes left out), of the other copy's form, scale bytes and residual counts
    /// (`MXC_BT_FORM`: the corrections read the form where it equals the bytes); without,
    /// zeros, and the corrections read the bytes everywhere, as before ABI 1.7.
    fn link_partners(
        &self,
        call: &Call,
        (slot, slot_t): (usize, usize),
        forms: bool,
    ) -> PluginResult<()> {
        let words = |m: &BMat, l: &BLayout, base: u64| -> [u64; PARTNER_WORDS] {
            let at = |o: usize| base + o as u64;
            match forms {
                true => [m.q, at(l.q2), at(l.s2), at(l.mc)],
                false => [m.q, 0, 0, 0],
            }
        };
        call.put_u64s(
            self.base + slot as u64,
            &words(&self.bwt, &self.lt, self.base_t),
        )?;
        call.put_u64s(
            self.base_t + slot_t as u64,
            &words(&self.bw, &self.lw, self.base),
        )
    }

    /// Launches `kernel` (one of the pair kernels) with `param` over the weight's 128 × 128
    /// blocks, then [`Self::finish`] on the forms `f` it writes.
    fn run(
        &self,
        call: &mut Call,
        kernel: &str,
        param: *mut std::ffi::c_void,
        f: &ReencodePairParams,
    ) -> PluginResult<()> {
        let (e, r, c) = self.dims;
        let grid = (cdiv(c, 128), cdiv(r, 128), e);
        call.launch(Unit::Chain, kernel, grid, (256, 1, 1), 0, &mut [param])?;
        self.finish(call, f)
    }

    /// After the pair kernel: both lists from its counts, both FP32 scale tables, and under
    /// `MXHOST_MX_CHAIN_VERIFY` every region against [`chain_form::prepare_b`].
    fn finish(&self, call: &mut Call, p: &ReencodePairParams) -> PluginResult<()> {
        let (e, r, c) = self.dims;
        let (bw, bwt) = (&self.bw, &self.bwt);
        // (one launch for both lists, grid y = 2, took 0–9 µs longer than these two: run 132)
        lists(call, bw, (e, r, c), p.mc, (&self.lw, self.base))?;
        lists(call, bwt, (e, c, r), p.mct, (&self.lt, self.base_t))?;
        chain_form::b_scale_table(call, &self.lw, bw, (e, r, c), self.base)?;
        chain_form::b_scale_table(call, &self.lt, bwt, (e, c, r), self.base_t)?;
        if chain_verify::enabled() {
            verify(call, bw, (e, r, c), (&self.lw, self.base), bwt.q)?;
            verify(call, bwt, (e, c, r), (&self.lt, self.base_t), bw.q)?;
        }
        Ok(())
    }
}

/// Fills both annexes of `args` in one pass when it writes a weight and its transposed copy,
/// each with a B-side annex, on a device that fills annexes; returns whether it did (else the
/// caller fills them one at a time). Runs after the quantizer, on the same stream.
pub(super) fn fill_b_pair(call: &mut Call, args: &QuantizeArgs) -> PluginResult<bool> {
    let Some(plan) = plan(call, args)? else {
        return Ok(false);
    };
    let (lw, lt) = (&plan.lw, &plan.lt);
    let at = |b: u64, o: usize| b + o as u64;
    plan.clear_for_verify(call)?;
    // Held: the kernel writes each annex's copy of the other's bytes; Partner: the annex
    // words take the partner's address instead, and the kernel writes no copy (null).
    let (bt, btt, kernel) = match (lw.bt, lt.bt, lw.bt_ref, lt.bt_ref) {
        (Some(bt), Some(btt), _, _) => (
            at(plan.base, bt),
            at(plan.base_t, btt),
            "mx_reencode_pair_e4m3",
        ),
        (None, None, Some(slot), Some(slot_t)) => {
            plan.link_partners(call, (slot, slot_t), false)?;
            (0, 0, "mx_reencode_pair_ref_e4m3")
        }
        _ => unreachable!("both annexes are Held or both Partner"),
    };
    let p = plan.forms(call, (bt, btt))?;
    plan.run(call, kernel, arg(&p), &p)?;
    Ok(true)
}

/// A bf16 weight's quantize call with both annexes in one launch (`mx_quantize_pair_bf16_e4m3`:
/// W and Wᵀ in 32×32 tiles and both forms from one read of W, 6 bytes moved per element against
/// 7 in the tile quantizer and the pair kernel). On by default since runs 138–139 (H100): the
/// call 4 % faster on every anchor shape, the `on` step on c 1.5–2 % (docs/perf.md);
/// `MXHOST_MX_CHAIN_QPAIR=0` turns it off for A/B timing.
fn qpair_enabled() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    *P.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_QPAIR", true))
}

/// The whole quantize call of a bf16 weight with its transposed copy and both annexes (ABI
/// 1.4: the annexes refer to each other's bytes), in one launch; returns whether it took the
/// call (else the caller quantizes, then [`fill_b_pair`]). Under `MXHOST_MX_CHAIN_VERIFY` the
/// caller checks W and Wᵀ against the tile quantizer, and [`PairPlan::finish`] the forms.
pub(super) fn quantize_b_pair(call: &mut Call, args: &QuantizeArgs) -> PluginResult<bool> {
    if !qpair_enabled() || args.values.is_some() || args.input.dtype != DType::Bf16 {
        return Ok(false);
    }
    let Some(plan) = plan(call, args)? else {
        return Ok(false);
    };
    let (Some(slot), Some(slot_t)) = (plan.lw.bt_ref, plan.lt.bt_ref) else {
        return Ok(false); // Held annexes want copies of the bytes too: the two launches
    };
    if !(args.input.ptr as u64).is_multiple_of(16) {
        return Ok(false);
    }
    // ABI 1.7: with the host's promise to ask before it reads them, W's and Wᵀ's bytes only
    // where their forms cannot give them back (mx_plain_from_form writes the rest, whose
    // tile rows it takes whole: both axes multiples of 32).
    let (_, r, c) = plan.dims;
    let noq = args.bytes_on_demand
        && bytes_on_demand::enabled()
        && weight_noq_enabled()
        && r.is_multiple_of(32)
        && c.is_multiple_of(32);
    plan.clear_for_verify(call)?;
    plan.link_partners(call, (slot, slot_t), noq)?;
    let f = plan.forms(call, (plan.bwt.q, plan.bw.q))?;
    let p = QuantPairParams {
        f,
        inp: args.input.ptr as u64,
        s: plan.bw.s,
        st: plan.bwt.s,
        mode: mode_code(args.output.mode),
        pad: 0,
    };
    let kernel = match noq {
        true => "mx_quantize_pair_bf16_noq_e4m3",
        false => "mx_quantize_pair_bf16_e4m3",
    };
    plan.run(call, kernel, arg(&p), &f)?;
    if noq {
        bytes_on_demand::note_left_out(plan.base, false);
        bytes_on_demand::note_left_out(plan.base_t, false);
    }
    Ok(true)
}

/// Whether a weight's pair call may leave bytes out (with [`bytes_on_demand::enabled`]): on
/// by default since docs/perf.md runs 177 and 179 checked it on a GPU (selftest 202/202 with
/// nothing set and under `on`, poisoned outputs); `MXHOST_MX_CHAIN_NOQ_W=0` writes the
/// weight's bytes whole (for A/B timing).
fn weight_noq_enabled() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    *P.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_NOQ_W", true))
}

fn layout(b: &BMat, (e, cols, red): (usize, usize, usize), bt: BtAt) -> BLayout {
    b_layout((e, cols, red), e * b.ise as usize, bt)
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
        rpw: 0,
        pad: 0,
    };
    chain_form::launch_lists(call, b.fmt, &p)
}

/// `MXHOST_MX_CHAIN_VERIFY`: [`chain_form::prepare_b`] of `b` into scratch (holding the
/// transposed bytes), every region of the annex at `base` compared with it; with
/// [`BtAt::Partner`], the partner's bytes (at `partner`) and the annex word's address too.
fn verify(
    call: &mut Call,
    b: &BMat,
    dims: (usize, usize, usize),
    (l, base): (&BLayout, u64),
    partner: u64,
) -> PluginResult<()> {
    let (e, cols, red) = dims;
    let l_ref = layout(b, dims, BtAt::Held);
    let base_ref = call.alloc(l_ref.bytes)?;
    call.zero(base_ref, l_ref.bytes)?;
    let l_ref = chain_form::prepare_b(call, b, dims, (BtAt::Held, 0), base_ref)?;
    let form = |what, got: usize, want: usize, bytes| Region {
        what,
        got: base + got as u64,
        want: base_ref + want as u64,
        bytes,
    };
    let n = e * cols * red;
    let want_bt = base_ref + l_ref.bt.expect("held") as u64;
    let (bt_got, address) = match (l.bt, l.bt_ref) {
        (Some(o), _) => (base + o as u64, None),
        (None, Some(slot)) => {
            let word = call.alloc(8)?;
            call.put_u64(word, partner)?;
            (partner, Some((base + slot as u64, word)))
        }
        (None, None) => unreachable!("an annex holds Bᵀ or its address"),
    };
    let mut regions = vec![
        form("q2", l.q2, l_ref.q2, n),
        form("s2", l.s2, l_ref.s2, e * b.ise as usize),
        form("the residual counts", l.cnt, l_ref.cnt, e * cols * 4),
        Region {
            what: "the transposed bytes",
            got: bt_got,
            want: want_bt,
            bytes: n,
        },
        form("the FP32 scale table", l.sb, l_ref.sb, l.status - l.sb),
        form("the status words", l.status, l_ref.status, 8),
    ];
    if let Some((got, want)) = address {
        regions.push(Region {
            what: "the partner's address",
            got,
            want,
            bytes: 8,
        });
    }
    let lists = [Lists {
        what: "the residual records",
        got: base + l.res as u64,
        want: base_ref + l_ref.res as u64,
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
