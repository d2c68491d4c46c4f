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
//!   output ([`write_before_read`]).
//!
//! Which annexes belong to a tensor with bytes left out is remembered here by the annex's
//! device address: every quantize call first forgets its annexes ([`forget`]), then the NOQ
//! path notes its own ([`note_left_out`]), so a reused address never carries a stale mark.
//! `MXHOST_MX_CHAIN_NOQ=0` writes every byte (for A/B timing); so does
//! `MXHOST_MX_CHAIN_VERIFY=1`, which compares them.

use super::chain::Gate;
use super::chain_form::a_layout;
use super::chain_verify;
use super::device::Call;
use super::params::PlainFromFormParams;
use super::{arg, cdiv, i32_of, ptr};
use crate::kernels::Unit;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_common::args::{Blocking, FillBytesArgs, OperandArg};
use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

/// Whether a quantize call the host asked with `bytes_on_demand` may leave bytes out.
pub(super) fn enabled() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_NOQ", true)) && !chain_verify::enabled()
}

/// Annex addresses whose tensor's bytes are partly left out.
fn left_out() -> std::sync::MutexGuard<'static, HashSet<u64>> {
    static SET: OnceLock<Mutex<HashSet<u64>>> = OnceLock::new();
    SET.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The tensor of the annex at `annex` has all its bytes (a quantize call starts so).
pub(super) fn forget(annex: u64) {
    left_out().remove(&annex);
}

/// The tensor of the annex at `annex` was written by a NOQ build.
pub(super) fn note_left_out(annex: u64) {
    left_out().insert(annex);
}

/// Whether the tensor of the annex at `annex` may miss bytes.
pub(super) fn is_left_out(annex: u64) -> bool {
    left_out().contains(&annex)
}

/// Writes the left-out bytes of the A operand `(q, s)` (`[rows][red]`, 1×32 along `red`, format
/// `fmt`) from its annex at `base`; with `gate`, only if the chained GEMM behind it does not
/// take the output.
fn launch(
    call: &mut Call,
    (q, s, fmt): (u64, u64, u8),
    (rows, red): (usize, usize),
    base: u64,
    gate: Option<Gate>,
) -> PluginResult<()> {
    let l = a_layout(rows, red);
    let at = |o: usize| base + o as u64;
    let p = PlainFromFormParams {
        q,
        s,
        q2: at(l.q2),
        s2: at(l.s2),
        mc: at(l.mc),
        gate: gate.map_or(0, |g| g.status),
        limit: gate.map_or(0, |g| g.limit),
        r: i32_of("rows", rows)?,
        c: i32_of("reduction", red)?,
    };
    let name = if fmt == 0 {
        "mx_plain_from_form_e4m3"
    } else {
        "mx_plain_from_form_e5m2"
    };
    // (a grid-stride loop over 32-byte blocks: a few waves of 256 threads)
    let blocks = cdiv(rows * (red / 32), 256).clamp(1, 8 * call.dev.sms.max(1) as usize);
    call.launch(
        Unit::Chain,
        name,
        (blocks, 1, 1),
        (256, 1, 1),
        0,
        &mut [arg(&p)],
    )
}

/// A GEMM operand whose bytes a NOQ build left out: an MX tensor `[rows, red]` in 1×32 blocks
/// along `red` with its annex at `base`.
#[derive(Clone, Copy, Debug)]
pub(super) struct LeftOut {
    a: (u64, u64, u8),
    dims: (usize, usize),
    base: u64,
}

/// The operand `o`, if its bytes are partly left out.
pub(super) fn left_out_of(o: &OperandArg) -> Option<LeftOut> {
    let OperandArg::Mx(m) = o else { return None };
    let base = ptr(m.annex.as_ref()?);
    match (m.data.shape.as_slice(), is_left_out(base)) {
        (&[rows, red], true) => Some(LeftOut {
            a: (ptr(&m.data), ptr(&m.scales), super::fmt_code(m.format)),
            dims: (rows as usize, red as usize),
            base,
        }),
        _ => None,
    }
}

impl LeftOut {
    /// Before a kernel that reads the operand's bytes: writes the left-out ones, gated on
    /// `gate` (the per-k32 kernel's) when there is one. Once written without a gate the
    /// tensor has all its bytes.
    pub(super) fn write_before_read(
        &self,
        call: &mut Call,
        gate: Option<Gate>,
    ) -> PluginResult<()> {
        launch(call, self.a, self.dims, self.base, gate)?;
        if gate.is_none() {
            forget(self.base);
        }
        Ok(())
    }
}

/// The ABI entry (`PluginApi::fill_bytes`): the tensor's left-out bytes, if any.
pub(super) fn fill(args: &FillBytesArgs) -> PluginResult<()> {
    let base = ptr(&args.annex);
    if !is_left_out(base) {
        return Ok(());
    }
    let m = &args.tensor;
    let (&[rows, red], Some(Blocking::Vector { axis: 1 })) =
        (m.data.shape.as_slice(), Blocking::from_abi(m.block))
    else {
        return Err(PluginError::invalid(format!(
            "fill_bytes: an annex noted for a tensor [rows, red] in 1×32 blocks along its last axis, got shape {:?}",
            m.data.shape
        )));
    };
    let (rows, red) = (rows as usize, red as usize);
    if args.annex.numel * 4 < a_layout(rows, red).bytes {
        return Err(PluginError::invalid(format!(
            "fill_bytes: the annex ({} words) is smaller than this tensor's form",
            args.annex.numel
        )));
    }
    let mut call = Call::new(args.ordinal, args.stream)?;
    let a = (ptr(&m.data), ptr(&m.scales), super::fmt_code(m.format));
    launch(&mut call, a, (rows, red), base, None)?;
    forget(base);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mxhost_plugin_abi::{BlockLayout, MxFormat, ScaleMode};
    use mxhost_plugin_common::args::MxArg;

    fn operand(shape: Vec<u64>, annex: Option<u64>) -> OperandArg {
        let tensor = super::super::test_tensor;
        OperandArg::Mx(MxArg {
            scales: tensor(vec![shape[0], 2], 0x2000),
            data: tensor(shape, 0x1000),
            format: MxFormat::E5m2,
            mode: ScaleMode::Rceil,
            block: BlockLayout::vector(1),
            values: None,
            annex: annex.map(|a| tensor(vec![4096], a as usize)),
        })
    }

    /// A GEMM operand is left out exactly while its annex's address is noted: the mark is
    /// the address's (a quantize call forgets its annexes first), an operand without an annex
    /// or of another rank never is, and what it carries is the tensor's bytes, scales, format
    /// and shape.
    #[test]
    fn an_operand_is_left_out_while_its_annex_is_noted() {
        let (annex, other) = (0x7000_0100u64, 0x7000_0200u64);
        forget(annex);
        let o = operand(vec![32, 64], Some(annex));
        assert!(left_out_of(&o).is_none(), "not noted");
        note_left_out(annex);
        let l = left_out_of(&o).expect("noted");
        assert_eq!(
            (l.a, l.dims, l.base),
            ((0x1000, 0x2000, 1), (32, 64), annex)
        );
        assert!(left_out_of(&operand(vec![32, 64], Some(other))).is_none());
        assert!(left_out_of(&operand(vec![32, 64], None)).is_none());
        assert!(
            left_out_of(&operand(vec![2, 32, 64], Some(annex))).is_none(),
            "rank 3"
        );
        forget(annex);
        assert!(left_out_of(&o).is_none(), "forgotten");
    }
}
