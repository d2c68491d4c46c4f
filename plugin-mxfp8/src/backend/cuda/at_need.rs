//! Which part of an A annex's transposed copy (`at`) a quantize call wrote (plugin ABI 1.9).
//!
//! The chained GEMM's B-residual corrections read `at` (X's or dY's stage-uniform copy,
//! transposed) only at the reduction indices where the weight has a residual, and only for
//! the rows of the experts whose weight has one there: about a tenth of it on Gaussian
//! weights, all of which the one-pass form kernel used to write (17 % of its time on shape c,
//! docs/perf.md run 193). A quantize call told its GEMM's weight (`QuantizeDesc::weight`)
//! builds that weight's need map from the residual lists in its annex (`mx_chain_need_map`)
//! and stores only the needed 16-row chunks of `at` ([`super::chain_quant`]). This module
//! remembers, per A annex written so, which weight annex it was written for and in which
//! fill of that annex: every quantize call gives each annex it is handed a new generation.
//! A chained GEMM whose A annex was written for another weight, or for an older fill of its
//! own, transposes the whole copy first ([`super::chain`]'s `launch_chained`), so results
//! never depend on the hint: a wrong or stale weight costs one transpose, never a bit.
//!
//! Annexes are known by device address (unified addressing: unique across devices). An
//! entry is dropped only when its annex is handed to a quantize call again, never to save
//! room: a partial `at` forgotten would read as whole.

use super::chain_annex::{b_annex_layout, checked_annex, AnnexRole};
use super::chain_form;
use super::chain_memory;
use super::chain_verify;
use super::device::Call;
use super::params::NeedMapParams;
use super::{arg, cdiv, i32_of};
use crate::kernels::Unit;
use mxhost_plugin_abi::plugin_support::PluginResult;
use mxhost_plugin_common::args::QuantizeArgs;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Whether a quantize call that names the weight stores only the needed part of `at`: on by
/// default since docs/perf.md run 198 (the selftest's named-weight cases passed on an H100;
/// b's dY call −42 µs, a's X and dY −10 each, c unchanged); `MXHOST_MX_CHAIN_AT_NEED=0`
/// writes it whole, for A/B timing.
pub(super) fn enabled() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_AT_NEED", true))
}

#[derive(Default)]
struct Book {
    /// The last generation handed out.
    last: u64,
    /// Each annex's generation: that of the last quantize call it was handed to.
    fills: HashMap<u64, u64>,
    /// A annexes whose `at` holds only the part a weight's GEMM reads: that weight's annex
    /// and its generation when the A annex was written.
    partial: HashMap<u64, (u64, u64)>,
}

impl Book {
    fn note_handed(&mut self, annex: u64) {
        self.last += 1;
        self.fills.insert(annex, self.last);
        self.partial.remove(&annex);
    }

    fn generation(&self, annex: u64) -> Option<u64> {
        self.fills.get(&annex).copied()
    }

    fn note_partial(&mut self, a: u64, (weight, generation): (u64, u64)) {
        self.partial.insert(a, (weight, generation));
    }

    fn note_whole(&mut self, a: u64) {
        self.partial.remove(&a);
    }

    fn needs_whole(&self, a: u64, b: Option<u64>) -> bool {
        match self.partial.get(&a) {
            None => false,
            Some(&(w, g)) => b != Some(w) || self.generation(w) != Some(g),
        }
    }
}

fn book() -> MutexGuard<'static, Book> {
    static B: OnceLock<Mutex<Book>> = OnceLock::new();
    // (a poisoned lock still holds consistent maps: every update is one insert or remove)
    B.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// A quantize call was handed the annex at `annex` (it writes it, or marks it not filled):
/// a new generation, and its `at` is whole until [`note_partial`] says otherwise.
pub(super) fn note_handed(annex: u64) {
    book().note_handed(annex);
}

/// The generation of the annex at `annex`: `None` when no quantize call has handed it out in
/// this process (such a weight's residual lists are never read for a need map).
fn generation(annex: u64) -> Option<u64> {
    book().generation(annex)
}

/// The A annex at `a` holds only the part of `at` that a GEMM reads with the weight annex and
/// fill `map` was built from.
pub(super) fn note_partial(a: u64, map: &NeedMap) {
    book().note_partial(a, (map.weight, map.generation));
}

/// Whether a chained GEMM over the A annex at `a` and the B annex at `b` (`None`: B's form
/// made in the call) must write `a`'s `at` whole first.
pub(super) fn needs_whole(a: u64, b: Option<u64>) -> bool {
    book().needs_whole(a, b)
}

/// The A annex at `a` had its `at` written whole (by a GEMM that needed it so).
pub(super) fn note_whole(a: u64) {
    book().note_whole(a);
}

/// A weight's need map in a call's scratch, as the form kernel takes it
/// (`MxQuantBlockFormParams::need`, `offs`, `E`, `nw`), and the weight's annex.
#[derive(Clone, Copy, Debug)]
pub(super) struct NeedMap {
    pub(super) need: u64,
    pub(super) offs: u64,
    pub(super) experts: i32,
    pub(super) words: i32,
    /// The weight's annex and its generation when the map was read from its lists.
    weight: u64,
    generation: u64,
}

/// The need map of the weight named at this quantize call of an A of reduction `red`, built
/// in the call's scratch from the residual lists in the weight's annex, with the experts'
/// row offsets beside it; `None` where `at` is to be written whole: no weight named or no
/// wgrad offsets, `MXHOST_MX_CHAIN_AT_NEED=0`, under `MXHOST_MX_CHAIN_VERIFY` (it compares
/// `at` whole), or a weight whose annex this process did not fill as a B form of this
/// reduction and expert count.
pub(super) fn need_map(
    call: &mut Call,
    args: &QuantizeArgs,
    red: usize,
) -> PluginResult<Option<NeedMap>> {
    let (Some(w), Some(values)) = (&args.weight, &args.wgrad_values) else {
        return Ok(None);
    };
    let Some(annex) = w
        .annex
        .as_ref()
        .filter(|_| enabled() && !chain_verify::enabled())
    else {
        return Ok(None);
    };
    // (a weight the host passed that this plugin gave no B annex is a hint to ignore)
    let Ok((
        AnnexRole::B {
            e,
            cols,
            red: w_red,
        },
        weight,
        bt,
    )) = checked_annex(w, annex, true)
    else {
        return Ok(None);
    };
    let unfilled = matches!(chain_memory::annex(weight), Some((_, false)));
    if w_red != red || e != values.offs.len() || e == 0 || unfilled {
        return Ok(None);
    }
    let Some(generation) = generation(weight) else {
        return Ok(None);
    };
    let lb = b_annex_layout((e, cols, red), bt);
    let words = cdiv(red, 32);
    let offs = values
        .offs
        .iter()
        .map(|&o| i32_of("expert offset", o))
        .collect::<PluginResult<Vec<i32>>>()?;
    let offs_at = call.alloc(4 * e)?;
    // SAFETY: `offs_at` holds e i32 (this call's scratch).
    unsafe { call.upload(offs_at, &offs) }?;
    let need = call.alloc(4 * e * words)?;
    call.zero(need, 4 * e * words)?;
    let p = NeedMapParams {
        res: weight + lb.res as u64,
        cnt: weight + lb.cnt as u64,
        need,
        rows: (e * cols) as i64,
        n: i32_of("weight rows", cols)?,
        slots: chain_form::slots(red) as i32,
        nw: i32_of("need words", words)?,
        _pad: 0,
    };
    // (one thread per weight row, grid-stride: a few waves at most)
    let grid = cdiv(e * cols, 256).min(4 * call.dev.sms as usize).max(1);
    call.launch(
        Unit::Chain,
        "mx_chain_need_map",
        (grid, 1, 1),
        (256, 1, 1),
        0,
        &mut [arg(&p)],
    )?;
    Ok(Some(NeedMap {
        need,
        offs: offs_at,
        experts: i32_of("experts", e)?,
        words: i32_of("need words", words)?,
        weight,
        generation,
    }))
}

#[cfg(test)]
mod tests {
    use super::Book;

    #[test]
    fn a_partial_copy_serves_only_its_weights_fill() {
        let mut b = Book::default();
        let (x, w, wt) = (0x1000, 0x2000, 0x3000);
        b.note_handed(w);
        b.note_handed(wt);
        b.note_handed(x);
        assert!(!b.needs_whole(x, Some(w)), "whole until noted partial");
        b.note_partial(x, (w, b.generation(w).unwrap()));
        assert!(!b.needs_whole(x, Some(w)));
        assert!(b.needs_whole(x, Some(wt)), "another weight");
        assert!(b.needs_whole(x, None), "B's form made in the call");
        b.note_handed(w);
        assert!(b.needs_whole(x, Some(w)), "the weight quantized again");
        b.note_handed(x);
        assert!(!b.needs_whole(x, Some(wt)), "X quantized again, whole");
    }

    #[test]
    fn an_unknown_weight_has_no_generation() {
        let mut b = Book::default();
        b.note_handed(0x10);
        assert_eq!(
            b.generation(0x20),
            None,
            "never handed out: need_map reads no lists"
        );
        assert!(!b.needs_whole(0x10, Some(0x20)));
    }

    #[test]
    fn a_copy_written_whole_serves_any_weight() {
        let mut b = Book::default();
        b.note_handed(0x20);
        b.note_handed(0x10);
        b.note_partial(0x10, (0x20, b.generation(0x20).unwrap()));
        assert!(b.needs_whole(0x10, Some(0x30)));
        b.note_whole(0x10);
        assert!(!b.needs_whole(0x10, Some(0x30)));
    }
}
