//! The chain form of a forward/dgrad operand: what the chained GEMM (`mx_chain_gemm.cu`)
//! reads besides the MX operand itself. That is the operand re-encoded to one scale per
//! 128-deep stage with its residual lists and status words, plus the relaid copies and FP32
//! scale tables the kernel takes. Each role has one layout, as byte offsets into one buffer.
//! The same code therefore fills this call's scratch (`MXHOST_MX_CHAIN`, per call) or the
//! annex (ABI 1.3) that the quantize call writing the tensor fills. A GEMM given an annex
//! reads it instead of re-encoding: that takes the re-encoding's 200–370 µs per call off
//! forward and dgrad (docs/perf.md runs 104–107) and puts them on the quantizer, once per
//! tensor.
//!
//! An annex is only an accelerator: the GEMM computes the same bits with or without one, and
//! the status words inside it let the gate pick the per-k32 kernel exactly as a per-call
//! re-encoding would.

use super::device::Call;
use super::gemm::{AMat, BMat};
use super::params::{ChainListParams, ReencodeParams};
use super::{arg, cdiv, i32_of, rup};
use crate::kernels::Unit;
use mxhost_plugin_abi::plugin_support::PluginResult;

/// Offsets are aligned to this many bytes (TMA needs 16; 256 keeps each region on its own
/// cache lines).
const ALIGN: usize = 256;

/// The slack after each transposed row: the corrections read aligned 272-byte windows
/// (mx_tgemm_chain.cuh).
const WINDOW_SLACK: usize = 272;

/// Residual slots per row for a reduction of `red` (bench/chain.py's rule: 16, plus one per
/// 256 of the reduction).
pub(super) fn slots(red: usize) -> usize {
    16 + red / 256
}

/// Hands out consecutive aligned regions; the total is the layout's size.
struct Bump(usize);

impl Bump {
    fn take(&mut self, bytes: usize) -> usize {
        let at = self.0;
        self.0 = rup(at + bytes, ALIGN);
        at
    }
}

/// The A side (X of forward, dY of dgrad): `[rows][red]` in 1×32 blocks along `red`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ALayout {
    /// The stage-uniform copy `[rows][red]` and its scale bytes `[rows][kb]`.
    pub q2: usize,
    pub s2: usize,
    /// Residual lists `[rows][slots]` (8-byte records) and their lengths `[rows]`.
    pub res: usize,
    pub cnt: usize,
    /// The copy and its scales transposed (`[red][rows]`, `[kb][rows]`), for the corrections.
    pub at: usize,
    pub sat: usize,
    /// The copy's scales as the kernel's FP32 table.
    pub sa: usize,
    /// The re-encoding's two status words (flags, residual count).
    pub status: usize,
    /// Residuals per row and stage, `mc[(k / 128) * rows + r]` (one byte each): written by
    /// the one-block form kernels, read by their lists and by `mx_plain_from_form`, which
    /// writes back the bytes a NOQ build left out ([`super::bytes_on_demand`]).
    pub mc: usize,
    pub bytes: usize,
}

pub(super) fn a_layout(rows: usize, red: usize) -> ALayout {
    let (kb, sl) = (cdiv(red, 32), slots(red));
    let mut b = Bump(0);
    // (Field initializers run in the order written: the regions follow one another.)
    ALayout {
        q2: b.take(rows * red),
        s2: b.take(rows * kb),
        res: b.take(rows * sl * 8),
        cnt: b.take(rows * 4),
        at: b.take(red * rows + WINDOW_SLACK),
        sat: b.take(kb * rows + WINDOW_SLACK),
        sa: b.take(Call::scales_f32_bytes(rows, rup(kb, 4), 1)),
        status: b.take(8),
        mc: b.take(cdiv(red, 128) * rows),
        bytes: b.0,
    }
}

/// The B side (the weight): `[E][cols][red]` in 32×32 tiles, scale bytes `scale_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BLayout {
    pub q2: usize,
    pub s2: usize,
    pub res: usize,
    pub cnt: usize,
    /// The original bytes transposed, `[E][red][cols]`, when the layout holds them
    /// ([`BtAt::Held`]).
    pub bt: Option<usize>,
    /// [`BtAt::Partner`]: four 8-byte words ([`PARTNER_WORDS`]): the device address of the
    /// partner tensor's bytes, which are this tensor's bytes transposed (the chained GEMM
    /// reads it on the device: `MXC_BT_REF` in mx_tgemm_chain.cuh), then those of the
    /// partner's own form, its scale bytes and its residual counts per row and stage, or
    /// zeros where the annexes were not filled together (`MXC_BT_FORM`: where the partner's
    /// form is its bytes exactly, the corrections read the form, so the partner may leave
    /// its bytes out there).
    pub bt_ref: Option<usize>,
    pub sb: usize,
    pub status: usize,
    /// Residuals per row and stage, `mc[(k / 128) * E cols + e cols + c]` (one byte each):
    /// written by the pair kernel (chain_pair), read by the partner's chained GEMMs
    /// (`MXC_BT_FORM`) and by `mx_plain_from_form`, which writes back the bytes a NOQ build
    /// left out ([`super::bytes_on_demand`]).
    pub mc: usize,
    pub bytes: usize,
}

/// The words of [`BLayout::bt_ref`]: the partner's bytes, its form's bytes, scale bytes and
/// residual counts.
pub(super) const PARTNER_WORDS: usize = 4;

/// Where the chained GEMM's A_res corrections find B's original bytes transposed
/// (`[E][red][cols]`, one 128-byte row per k).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BtAt {
    /// In the layout (an annex of ABI 1.3, or scratch made per call).
    Held,
    /// Passed by the caller, which has them stored so (the weight of a pass whose
    /// reduction is not its last axis).
    Caller,
    /// In the other result of the transposing quantize that wrote this annex (ABI 1.4,
    /// `AnnexQuery::partner_kept`: the host keeps it alive as long as the annex): the layout
    /// holds its address only, which saves the annex a copy of every byte.
    Partner,
}

pub(super) fn b_layout(
    (e, cols, red): (usize, usize, usize),
    scale_bytes: usize,
    bt: BtAt,
) -> BLayout {
    let (kb, nb, sl) = (cdiv(red, 32), cdiv(cols, 32), slots(red));
    let mut b = Bump(0);
    BLayout {
        q2: b.take(e * cols * red),
        s2: b.take(scale_bytes),
        res: b.take(e * cols * sl * 8),
        cnt: b.take(e * cols * 4),
        bt: (bt == BtAt::Held).then(|| b.take(e * cols * red)),
        bt_ref: (bt == BtAt::Partner).then(|| b.take(8 * PARTNER_WORDS)),
        sb: b.take(Call::scales_f32_bytes(rup(kb, 4), b_table_cols(nb), e)),
        status: b.take(8),
        mc: b.take(cdiv(red, 128) * e * cols),
        bytes: b.0,
    }
}

/// Columns of B's FP32 scale table: whole groups of four column blocks, plus four of slack.
pub(super) fn b_table_cols(nb: usize) -> usize {
    rup(nb, 4) + 4
}

/// The scale strides of a weight stored `[E][cols][red]` in 32×32 tiles (the quantizer's
/// layout, `s[e][cols / 32][red / 32]`): `(ise, isr, isc)` as [`BMat`] reads them.
pub(super) fn tile_strides(cols: usize, red: usize) -> (i64, i64, i64) {
    let (kb, nb) = (cdiv(red, 32), cdiv(cols, 32));
    ((nb * kb) as i64, 1, kb as i64)
}

/// An annex's size in i32 words for a layout of `bytes`.
pub(super) fn annex_words(bytes: usize) -> usize {
    bytes.div_ceil(4)
}

/// The re-encoding's outputs for one operand.
struct ReencodeOut {
    q2: u64,
    s2: u64,
    res: u64,
    cnt: u64,
    status: u64,
}

impl ReencodeOut {
    /// The regions at these offsets (q2, s2, res, cnt, status) of a layout at `base`.
    fn at(base: u64, [q2, s2, res, cnt, status]: [usize; 5]) -> ReencodeOut {
        let at = |o: usize| base + o as u64;
        ReencodeOut {
            q2: at(q2),
            s2: at(s2),
            res: at(res),
            cnt: at(cnt),
            status: at(status),
        }
    }
}

/// Zeroes `out.status`, then launches `mx_reencode_<fmt>` over `r` rows of `k` bytes (scales
/// as [`ReencodeParams`] describes them), which ORs its flags into `status[0]` and adds its
/// count to `status[1]`.
fn reencode(
    call: &Call,
    (q, s, fmt): (u64, u64, u8),
    (r, k, rpe, rdv): (usize, usize, usize, i32),
    (ise, isr, isc): (i64, i64, i64),
    out: &ReencodeOut,
) -> PluginResult<()> {
    call.zero(out.status, 8)?;
    let p = ReencodeParams {
        q,
        s,
        q2: out.q2,
        s2: out.s2,
        res: out.res,
        cnt: out.cnt,
        status: out.status,
        r: r as i64,
        ise,
        isr,
        isc,
        k: i32_of("reduction", k)?,
        rpe: i32_of("rows", rpe)?,
        rdv,
        slots: slots(k) as i32,
    };
    // One warp per row, grid-stride (bench/launch.cu's mx_launch_reencode).
    let grid = cdiv(r, 8).min(16 * call.dev.sms as usize);
    let name = if fmt == 0 {
        "mx_reencode_e4m3"
    } else {
        "mx_reencode_e5m2"
    };
    call.launch(
        Unit::Chain,
        name,
        (grid, 1, 1),
        (256, 1, 1),
        0,
        &mut [arg(&p)],
    )
}

/// Rows per warp of `mx_chain_lists_*` for `rows` rows on `sms` SMs: the fewest (1, 2, 4, 8 or
/// 16; 8 per CTA of 256 threads) that keep the grid within one wave of 8 CTAs per SM. The
/// kernel's time is its waves' latency (a W of shape c, 92160 rows: 11 waves, 26 µs with a warp
/// per row, docs/perf.md run 136), while a warp lists its rows one after another, so no more
/// rows per warp than the wave needs.
pub(super) fn lists_rows_per_warp(rows: usize, sms: usize) -> i32 {
    let wave = 8 * sms.max(1);
    let mut rpw = 1;
    while rpw < 16 && cdiv(rows, 8 * rpw) > wave {
        rpw *= 2;
    }
    rpw as i32
}

/// Launches `mx_chain_lists_<fmt>` with `p` (rows `p.r`): 8 × [`lists_rows_per_warp`] rows
/// per CTA, no grid-stride loop. Follows each one-pass kernel that leaves per-row, per-stage
/// residual counts (`chain_block`, `chain_pair`).
pub(super) fn launch_lists(call: &Call, fmt: u8, p: &ChainListParams) -> PluginResult<()> {
    let rows = p.r as usize;
    let rpw = lists_rows_per_warp(rows, call.dev.sms as usize);
    let p = ChainListParams { rpw, ..*p };
    let grid = cdiv(rows, 8 * rpw as usize);
    let name = if fmt == 0 {
        "mx_chain_lists_e4m3"
    } else {
        "mx_chain_lists_e5m2"
    };
    call.launch(
        Unit::Chain,
        name,
        (grid, 1, 1),
        (256, 1, 1),
        0,
        &mut [arg(&p)],
    )
}

/// Fills the A-side chain form of `a` (`[rows][red]`, 1×32) at `base` ([`a_layout`] bytes).
pub(super) fn prepare_a(
    call: &Call,
    a: &AMat,
    (rows, red): (usize, usize),
    base: u64,
) -> PluginResult<ALayout> {
    let l = a_layout(rows, red);
    let at = |o: usize| base + o as u64;
    let kb = cdiv(red, 32);
    let out = ReencodeOut::at(base, [l.q2, l.s2, l.res, l.cnt, l.status]);
    reencode(
        call,
        (a.q, a.s, a.fmt),
        (rows, red, rows, 1),
        (0, 1, kb as i64),
        &out,
    )?;
    call.transpose(out.q2, at(l.at), 1, rows, red)?;
    call.transpose(out.s2, at(l.sat), 1, rows, kb)?;
    a_scale_table(call, &l, (rows, red), base)?;
    Ok(l)
}

/// The A-side chain form's FP32 scale table (`sa`), from its stage scales (`s2`).
pub(super) fn a_scale_table(
    call: &Call,
    l: &ALayout,
    (rows, red): (usize, usize),
    base: u64,
) -> PluginResult<()> {
    let kb = cdiv(red, 32);
    let dims = (rows, kb, rows, rup(kb, 4), 1);
    let (sa, s2) = (base + l.sa as u64, base + l.s2 as u64);
    call.scales_f32_into(sa, s2, 0, (kb as i64, 1), 1, dims, true, None)
}

/// Fills the B-side chain form of `b` (`[E][cols][red]`, 32×32 tiles) at `base`
/// ([`b_layout`] bytes for `bt`; with [`BtAt::Partner`], `partner` is the address of the
/// transposed bytes, which the layout's word then holds).
pub(super) fn prepare_b(
    call: &Call,
    b: &BMat,
    (e, cols, red): (usize, usize, usize),
    (bt, partner): (BtAt, u64),
    base: u64,
) -> PluginResult<BLayout> {
    let l = b_layout((e, cols, red), e * b.ise as usize, bt);
    let at = |o: usize| base + o as u64;
    let out = ReencodeOut::at(base, [l.q2, l.s2, l.res, l.cnt, l.status]);
    reencode(
        call,
        (b.q, b.s, b.fmt),
        (e * cols, red, cols, 32),
        (b.ise, b.isr, b.isc),
        &out,
    )?;
    if let Some(bt) = l.bt {
        call.transpose(b.q, at(bt), e, cols, red)?;
    }
    if let Some(slot) = l.bt_ref {
        // (no partner form: this annex is filled alone, and its counts are not written)
        let mut words = [0u64; PARTNER_WORDS];
        words[0] = partner;
        call.put_u64s(at(slot), &words)?;
    }
    b_scale_table(call, &l, b, (e, cols, red), base)?;
    Ok(l)
}

/// The B-side chain form's FP32 scale table (`sb`), from its stage scales (`s2`, in `b`'s
/// scale layout).
pub(super) fn b_scale_table(
    call: &Call,
    l: &BLayout,
    b: &BMat,
    (e, cols, red): (usize, usize, usize),
    base: u64,
) -> PluginResult<()> {
    let (kb, nb) = (cdiv(red, 32), cdiv(cols, 32));
    let dims = (kb, nb, rup(kb, 4), b_table_cols(nb), e);
    let (sb, s2) = (base + l.sb as u64, base + l.s2 as u64);
    call.scales_f32_into(sb, s2, b.ise, (b.isr, 1), b.isc, dims, false, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_aligned_disjoint_and_in_order() {
        let l = a_layout(4096, 2880);
        let starts = [l.q2, l.s2, l.res, l.cnt, l.at, l.sat, l.sa, l.status, l.mc];
        assert_eq!(l.q2, 0);
        assert!(starts.windows(2).all(|w| w[0] < w[1]), "{l:?}");
        assert!(starts.iter().all(|s| s.is_multiple_of(ALIGN)), "{l:?}");
        assert_eq!(l.s2 - l.q2, 4096 * 2880);
        assert!(l.bytes >= l.mc + 23 * 4096 && l.bytes.is_multiple_of(ALIGN));
        let (e, cols, red) = (8, 4096, 4096);
        let sb = e * (cdiv(cols, 32) * cdiv(red, 32));
        let with = b_layout((e, cols, red), sb, BtAt::Held);
        let without = b_layout((e, cols, red), sb, BtAt::Caller);
        let partner = b_layout((e, cols, red), sb, BtAt::Partner);
        assert_eq!(with.bt, Some(with.cnt + rup(e * cols * 4, ALIGN)));
        assert_eq!((without.bt, without.bt_ref), (None, None));
        assert_eq!(with.bytes - without.bytes, e * cols * red);
        assert_eq!((partner.bt, partner.bt_ref), (None, with.bt));
        assert_eq!(partner.bytes - without.bytes, ALIGN);
    }

    #[test]
    fn the_slot_rule_and_tile_strides_match_the_quantizer() {
        assert_eq!(slots(4096), 32);
        assert_eq!(slots(2880), 27);
        // [E][cols/32][red/32]: the same strides `weights` gives a stored K-major tile weight
        assert_eq!(tile_strides(2880, 4096), (90 * 128, 1, 128));
    }

    #[test]
    fn lists_take_the_fewest_rows_per_warp_that_fit_one_wave() {
        // the H200's 132 SMs: one wave is 1056 CTAs of 8 rpw rows
        assert_eq!(lists_rows_per_warp(8448, 132), 1); // 1056 CTAs
        assert_eq!(lists_rows_per_warp(8449, 132), 2);
        assert_eq!(lists_rows_per_warp(32768, 132), 4); // X of shape a: 1024 CTAs
        assert_eq!(lists_rows_per_warp(32 * 2880, 132), 16); // W of shape c: 720 CTAs
        assert_eq!(lists_rows_per_warp(1 << 24, 132), 16); // no more than 16: several waves
        assert_eq!(lists_rows_per_warp(5, 0), 1);
        // the kernel's contract: a power of two with 256 / (8 rpw) whole phases
        for rows in [1, 100, 9000, 40000, 70000, 200000] {
            let rpw = lists_rows_per_warp(rows, 132);
            assert!(rpw.count_ones() == 1 && rpw <= 16, "{rows}: {rpw}");
        }
    }
}
