//! X's and dY's MX bytes made on demand (plugin ABI 1.7, `QuantizeDesc::bytes_on_demand`).
//! In a chained training step nobody reads them: the chained GEMM reads the annex's chain form
//! and wgrad the wgrad values. So where the host promises to ask before it reads them
//! (`PluginApi::fill_bytes`), the one-pass quantizer's NOQ builds
//! (`mx_quantize_rows_form_noq_*`, `mx_quantize_rows_form_wv_noq_*`) store them only in the
//! row-stages the form cannot give back, one byte per element less (docs/perf.md run 173), and
//! `mx_plain_from_form_*` (cuda/include/mx_plain_from_form.cuh) writes the rest back, exactly,
//! when someone reads them:
//! - the host, through [`fill`] (the ABI entry), before it hands the bytes to anyone else;
//! - this plugin's forward/dgrad, before its per-k32 kernel reads them: gated like that
//!   kernel on the chained GEMM's gate, so it runs only when the chained GEMM did not take the
//!   output ([`LeftOut::write_before_read`]).
//!
//! A weight quantized with its transposed copy leaves bytes out too (both axes multiples of
//! 32; `MXHOST_MX_CHAIN_NOQ_W=0` turns it off; chain_pair.rs: `mx_quantize_pair_bf16_noq_e4m3`):
//! each copy's bytes are its partner's A_res corrections' operand at any k, so the chained
//! GEMM reads the partner's form where it equals the bytes (`MXC_BT_FORM`), and everything
//! else that reads a weight's bytes asks here first, as for X and dY ([`LeftOut`] covers both
//! layouts).
//!
//! Where the host promises the same for the scales (ABI 1.8, `scales_on_demand`), X's and
//! dY's NOQ builds leave out their scales too and write them transposed into the annex's
//! `s2` region instead (whole sectors: the row-major scale bytes, each a partial sector, cost
//! 8 % of the form kernel's time for 1.6 % of its bytes, docs/perf.md run 193); the lists read
//! them there, and `mx_plain_from_form` writes them back with the bytes.
//!
//! Which annexes belong to a tensor with bytes left out is remembered here by the annex's
//! device address: every quantize call first forgets its annexes ([`forget`]), then the NOQ
//! path notes its own ([`note_left_out`]), so a reused address never carries a stale mark.
//! `MXHOST_MX_CHAIN_NOQ=0` writes every byte (for A/B timing); so does
//! `MXHOST_MX_CHAIN_VERIFY=1`, which compares them.

use super::chain::Gate;
use super::chain_annex::{b_annex_layout, checked_annex, AnnexRole};
use super::chain_form::a_layout;
use super::chain_verify;
use super::device::Call;
use super::params::PlainFromFormParams;
use super::{arg, cdiv, i32_of, ptr};
use crate::kernels::Unit;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_common::args::{Blocking, FillBytesArgs, MxArg, OperandArg, TensorArg};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Whether a quantize call the host asked with `bytes_on_demand` may leave bytes out.
pub(super) fn enabled() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_NOQ", true)) && !chain_verify::enabled()
}

/// Whether a quantize call the host asked with the scales on demand too (ABI 1.8) may leave
/// them out (`MXHOST_MX_CHAIN_NOQ_S=0` writes them, for A/B timing).
pub(super) fn scales_enabled() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_NOQ_S", true))
}

/// Annex addresses whose tensor's bytes are partly left out, each with whether its scales are
/// left out too.
fn left_out() -> std::sync::MutexGuard<'static, HashMap<u64, bool>> {
    static SET: OnceLock<Mutex<HashMap<u64, bool>>> = OnceLock::new();
    SET.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The tensor of the annex at `annex` has all its bytes (a quantize call starts so).
pub(super) fn forget(annex: u64) {
    left_out().remove(&annex);
}

/// The tensor of the annex at `annex` was written by a NOQ build; `scales`: one that left out
/// the scales too (X or dY only), writing them transposed into the annex's `s2` region.
pub(super) fn note_left_out(annex: u64, scales: bool) {
    left_out().insert(annex, scales);
}

/// Whether the tensor of the annex at `annex` may miss bytes: `Some(scales)` with whether it
/// may miss its scales too, `None` when it has all of them.
fn noted(annex: u64) -> Option<bool> {
    left_out().get(&annex).copied()
}

/// What `mx_plain_from_form` reads and writes for one tensor whose bytes a NOQ build left out:
/// its bytes and scales, its own chain form's bytes, scales and residual counts, its shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LeftOut {
    q: u64,
    s: u64,
    fmt: u8,
    q2: u64,
    /// The stage scales: as `s` for a weight, transposed (`[red / 32][rows]`, the annex's
    /// `sat`) for X or dY.
    s2: u64,
    mc: u64,
    /// X's or dY's scales transposed (`[red / 32][rows]`, the annex's `s2` region) when they
    /// were left out too (ABI 1.8); else 0.
    st: u64,
    /// Rows (`E * cols` for a weight) of `red` bytes.
    rows: usize,
    red: usize,
    /// 0: X or dY (1×32 blocks along rows); else a weight's rows per expert (32×32 tiles).
    rpe: usize,
    base: u64,
}

impl LeftOut {
    /// The tensor `m` with its annex `annex` (noted by a NOQ build, `scales`: with its scales
    /// left out too): X or dY `[rows, red]` in 1×32 blocks along `red`
    /// (mx_quant_block_form.cuh), or a weight `[E][cols][red]` in 32×32 tiles
    /// (mx_reencode_pair.cuh), with an annex of that role's size.
    fn of(m: &MxArg, annex: &TensorArg, scales: bool) -> PluginResult<LeftOut> {
        let base = ptr(annex);
        let at = |o: usize| base + o as u64;
        let (q, s, fmt) = (ptr(&m.data), ptr(&m.scales), super::fmt_code(m.format));
        let shape: Vec<usize> = m.data.shape.iter().map(|&d| d as usize).collect();
        // (each layout's form regions: bytes, scale bytes, residual counts)
        let (regions, rows, red, rpe, st) = match (shape.as_slice(), Blocking::from_abi(m.block)) {
            (&[rows, red], Some(Blocking::Vector { axis: 1 })) if red.is_multiple_of(32) => {
                let l = a_layout(rows, red);
                if annex.numel * 4 < l.bytes {
                    return Err(PluginError::invalid(format!(
                        "fill_bytes: the annex ({} words) is smaller than this tensor's form",
                        annex.numel
                    )));
                }
                // (the stage scales transposed: NOQ builds write no row-major s2; that region
                // holds the scales, transposed, where they were left out too)
                let st = if scales { at(l.s2) } else { 0 };
                ([l.q2, l.sat, l.mc], rows, red, 0, st)
            }
            (&[_, cols, red], Some(Blocking::Tile))
                if cols.is_multiple_of(32) && red.is_multiple_of(32) =>
            {
                let (role, _, bt) = checked_annex(m, annex, true)?;
                let AnnexRole::B { e, cols, red } = role else {
                    unreachable!("a rank-3 tile tensor's annex is a B form")
                };
                let l = b_annex_layout((e, cols, red), bt);
                ([l.q2, l.s2, l.mc], e * cols, red, cols, 0)
            }
            _ => return Err(PluginError::invalid(format!(
                "fill_bytes: an annex noted for a tensor [rows, red] in 1×32 blocks along its last axis or [E, cols, red] in 32×32 tiles (axes multiples of 32), got shape {:?}",
                m.data.shape
            ))),
        };
        let [q2, s2, mc] = regions.map(at);
        Ok(LeftOut {
            q,
            s,
            fmt,
            q2,
            s2,
            mc,
            st,
            rows,
            red,
            rpe,
            base,
        })
    }

    /// Writes the left-out bytes; with `gate`, only if the chained GEMM behind it does not
    /// take the output.
    fn launch(&self, call: &mut Call, gate: Option<Gate>) -> PluginResult<()> {
        let p = PlainFromFormParams {
            q: self.q,
            s: self.s,
            q2: self.q2,
            s2: self.s2,
            mc: self.mc,
            gate: gate.map_or(0, |g| g.status),
            limit: gate.map_or(0, |g| g.limit),
            r: i32_of("rows", self.rows)?,
            c: i32_of("reduction", self.red)?,
            rpe: i32_of("rows per expert", self.rpe)?,
            st: self.st,
        };
        let name = if self.fmt == 0 {
            "mx_plain_from_form_e4m3"
        } else {
            "mx_plain_from_form_e5m2"
        };
        // (a grid-stride loop over 32-byte blocks: a few waves of 256 threads)
        let blocks =
            cdiv(self.rows * (self.red / 32), 256).clamp(1, 8 * call.dev.sms.max(1) as usize);
        call.launch(
            Unit::Chain,
            name,
            (blocks, 1, 1),
            (256, 1, 1),
            0,
            &mut [arg(&p)],
        )
    }

    /// Before a kernel that reads the operand's bytes: writes the left-out ones, gated on
    /// `gate` (the per-k32 kernel's) when there is one. Once written without a gate the
    /// tensor has all its bytes.
    pub(super) fn write_before_read(
        &self,
        call: &mut Call,
        gate: Option<Gate>,
    ) -> PluginResult<()> {
        self.launch(call, gate)?;
        if gate.is_none() {
            forget(self.base);
        }
        Ok(())
    }
}

/// The operand `o`, if its bytes are partly left out.
pub(super) fn left_out_of(o: &OperandArg) -> PluginResult<Option<LeftOut>> {
    let OperandArg::Mx(m) = o else {
        return Ok(None);
    };
    match &m.annex {
        Some(annex) => match noted(ptr(annex)) {
            Some(scales) => LeftOut::of(m, annex, scales).map(Some),
            None => Ok(None),
        },
        None => Ok(None),
    }
}

/// The ABI entry (`PluginApi::fill_bytes`): the tensor's left-out bytes, if any.
pub(super) fn fill(args: &FillBytesArgs) -> PluginResult<()> {
    let Some(scales) = noted(ptr(&args.annex)) else {
        return Ok(());
    };
    let l = LeftOut::of(&args.tensor, &args.annex, scales)?;
    let mut call = Call::entered(args.ordinal, args.stream, || {
        format!("fill_bytes {:?}", args.tensor.shape())
    })?;
    l.write_before_read(&mut call, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mxhost_plugin_abi::{BlockLayout, MxFormat, ScaleMode};

    fn operand(shape: Vec<u64>, annex: Option<u64>) -> OperandArg {
        let tensor = super::super::test_tensor;
        OperandArg::Mx(MxArg {
            scales: tensor(vec![shape[0], 2], 0x2000),
            data: tensor(shape, 0x1000),
            format: MxFormat::E5m2,
            mode: ScaleMode::Rceil,
            block: BlockLayout::vector(1),
            values: None,
            annex: annex.map(|a| tensor(vec![1 << 16], a as usize)),
        })
    }

    /// A GEMM operand is left out exactly while its annex's address is noted: the mark is
    /// the address's (a quantize call forgets its annexes first), an operand without an annex
    /// never is, one noted for a tensor of neither NOQ layout is refused, and what it carries
    /// is the tensor's bytes, scales, format, shape and its form's regions.
    #[test]
    fn an_operand_is_left_out_while_its_annex_is_noted() {
        let (annex, other) = (0x7000_0100u64, 0x7000_0200u64);
        forget(annex);
        let o = operand(vec![32, 64], Some(annex));
        assert!(left_out_of(&o).unwrap().is_none(), "not noted");
        note_left_out(annex, false);
        let l = left_out_of(&o).unwrap().expect("noted");
        let form = a_layout(32, 64);
        assert_eq!(
            l,
            LeftOut {
                q: 0x1000,
                s: 0x2000,
                fmt: 1,
                q2: annex + form.q2 as u64,
                s2: annex + form.sat as u64,
                mc: annex + form.mc as u64,
                st: 0,
                rows: 32,
                red: 64,
                rpe: 0,
                base: annex
            }
        );
        assert!(left_out_of(&operand(vec![32, 64], Some(other)))
            .unwrap()
            .is_none());
        assert!(left_out_of(&operand(vec![32, 64], None)).unwrap().is_none());
        // (noted, but neither X/dY's layout nor a weight's: refused, not read as complete)
        assert!(
            left_out_of(&operand(vec![2, 32, 64], Some(annex))).is_err(),
            "rank 3, 1×32"
        );
        // (the scales left out too: their transposed copy in the form's s2 region)
        note_left_out(annex, true);
        assert_eq!(
            left_out_of(&o).unwrap().expect("noted").st,
            annex + form.s2 as u64
        );
        forget(annex);
        assert!(left_out_of(&o).unwrap().is_none(), "forgotten");
    }
}
