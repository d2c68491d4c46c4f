//! `MXHOST_MX_CHAIN_VERIFY=1`: the one-pass writers of chain forms (the fused A-side quantizer,
//! [`super::chain_quant`]; the weight pair, [`super::chain_pair`]) checked on the device
//! against the launches they replace. The caller runs the reference path into scratch; this
//! module counts the bytes that differ in each region, and the records that differ among each
//! row's listed residuals. It synchronizes: for tests (`scripts/gpu-chain.sh` runs the
//! selftests with it).

use super::device::Call;
use super::{arg, cdiv};
use crate::kernels::Unit;
use cudarc::driver::result as cr;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_common::cuda::drv;
use std::sync::OnceLock;

/// Whether `MXHOST_MX_CHAIN_VERIFY` asks for the check (read once).
pub(super) fn enabled() -> bool {
    static V: OnceLock<bool> = OnceLock::new();
    *V.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_VERIFY", false))
}

/// A region written by the path under test (`got`) and by the reference (`want`).
pub(super) struct Region {
    pub what: &'static str,
    pub got: u64,
    pub want: u64,
    pub bytes: usize,
}

/// Residual lists (`[rows][slots]` records), compared up to the counts at `cnt` (the counts
/// themselves are a [`Region`]).
pub(super) struct Lists {
    pub what: &'static str,
    pub got: u64,
    pub want: u64,
    pub cnt: u64,
    pub rows: usize,
    pub slots: usize,
}

/// Fails with an error naming every region or list set of `subject` that differs from
/// `reference` (`MXHOST_MX_CHAIN_VERIFY`'s verdict).
pub(super) fn require_equal(
    call: &mut Call,
    (regions, lists): (&[Region], &[Lists]),
    subject: &str,
    reference: &str,
) -> PluginResult<()> {
    let bad = differences(call, regions, lists)?;
    if bad.is_empty() {
        return Ok(());
    }
    Err(PluginError::backend(format!(
        "MXHOST_MX_CHAIN_VERIFY: {subject} differs from {reference} in {}",
        bad.join(", ")
    )))
}

/// "what: n" for each region or list set that differs (empty: all equal).
pub(super) fn differences(
    call: &mut Call,
    regions: &[Region],
    lists: &[Lists],
) -> PluginResult<Vec<String>> {
    let count = call.alloc(8)?;
    let mut bad = Vec::new();
    for r in regions {
        call.zero(count, 8)?;
        let n64 = r.bytes as i64;
        let g = cdiv(r.bytes, 256).clamp(1, 4 * call.dev.sms as usize);
        call.launch(
            Unit::Chain,
            "mx_bytes_diff",
            (g, 1, 1),
            (256, 1, 1),
            0,
            &mut [arg(&r.got), arg(&r.want), arg(&n64), arg(&count)],
        )?;
        let n = read_count(call, count)?;
        if n != 0 {
            bad.push(format!("{}: {n}", r.what));
        }
    }
    for l in lists {
        call.zero(count, 8)?;
        let (rows64, slots) = (l.rows as i64, l.slots as i32);
        call.launch(
            Unit::Chain,
            "mx_chain_res_diff",
            (cdiv(l.rows, 256), 1, 1),
            (256, 1, 1),
            0,
            &mut [
                arg(&l.got),
                arg(&l.want),
                arg(&l.cnt),
                arg(&rows64),
                arg(&slots),
                arg(&count),
            ],
        )?;
        let n = read_count(call, count)?;
        if n != 0 {
            bad.push(format!("{}: {n}", l.what));
        }
    }
    Ok(bad)
}

/// The u64 at `count`, after the stream's work so far.
fn read_count(call: &Call, count: u64) -> PluginResult<u64> {
    let mut n = [0u64; 1];
    // SAFETY: `count` is this call's live 8-byte scratch; the copy completes before the
    // synchronize returns.
    unsafe {
        cr::memcpy_dtoh_async(&mut n, count, call.stream).map_err(drv("cuMemcpyDtoHAsync"))?;
        cr::stream::synchronize(call.stream).map_err(drv("cuStreamSynchronize"))?;
    }
    Ok(n[0])
}
