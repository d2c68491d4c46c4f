//! The chained wgrad (`MXHOST_MX_CHAIN=on|always`, E4M3, EXPERIMENTAL: opt in with
//! `MXHOST_MX_CHAIN_WGRAD=1`). wgrad's operands, quantized 1×32 along M into the padded
//! transposed layout `[P][Mpad]` (each expert whole 128-row stages), are both re-encoded per
//! row and stage as forward's A is ([`chain_block::form_a`]): B then has a scale per output
//! column and stage, the layout `examples/wgrad_stage_residuals.rs` shows activations need.
//! The chained kernel runs batched over experts (`mx_cgemm_w_*`: stages of each expert's
//! segment only, tensor-core B corrections) and adds the residual corrections of each expert's
//! segment; `tests/chain_wgrad.rs` pins that arithmetic on the CPU. The per-k32 kernel follows,
//! gated as for forward/dgrad: exactly one of the two computes the output.

use super::chain::{self, Gate};
use super::chain_block;
use super::chain_form::{self, a_layout};
use super::device::Call;
use super::gemm::AMat;
use super::params::{ChainFix, ChainParams, GemmParams, TGemmParams};
use super::{i32_of, rup};
use mxhost_plugin_abi::plugin_support::PluginResult;
use std::sync::OnceLock;

/// `MXHOST_MX_CHAIN_WGRAD=1`: wgrad goes to the chained kernel under `MXHOST_MX_CHAIN`.
pub(super) fn enabled() -> PluginResult<bool> {
    static W: OnceLock<bool> = OnceLock::new();
    let on = *W.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_WGRAD", false));
    Ok(on && chain::mode()?.forced())
}

/// Why the chained wgrad cannot take `e` experts with GEMM rows `pr` (the A operand's rows)
/// and columns `qc` in formats `fa`, `fb`; `None` when it can.
pub(super) fn refusal(
    call: &Call,
    (fa, fb): (u8, u8),
    (e, pr, qc): (usize, usize, usize),
) -> Option<String> {
    if let Some(why) = chain::device_refusal(call) {
        return Some(why);
    }
    if (fa, fb) != (0, 0) {
        return Some("the chained wgrad is built for E4M3 operands only".into());
    }
    chain::shape_refusal(e, pr, qc)
}

fn kernel_name(out_bf16: bool) -> &'static str {
    if out_bf16 {
        "mx_cgemm_w_e4m3e4m3_bf16_s3"
    } else {
        "mx_cgemm_w_e4m3e4m3_f32_s3"
    }
}

/// Enqueues the chained wgrad on `a` (`(bytes [pr][mpad], scales [pr][mpad / 32])`, the rows
/// of the output) and `b` (`[qc][mpad]`, its columns), output `[E][pr][qc]`, and returns the
/// gate the per-k32 launch of the same GEMM must carry, or why it was not taken (nothing
/// enqueued then).
pub(super) fn launch(
    call: &mut Call,
    (a, b): ((u64, u64), (u64, u64)),
    (out, out_bf16): (u64, bool),
    offs: u64,
    (e, pr, qc, mpad): (usize, usize, usize, usize),
) -> PluginResult<Result<Gate, String>> {
    if let Some(why) = refusal(call, (0, 0), (e, pr, qc)) {
        return Ok(Err(why));
    }
    let name = kernel_name(out_bf16);
    if let Some(why) = chain::kernel_refusal(call, name)? {
        return Ok(Err(why));
    }
    let mp = mpad / 32;
    let form = |call: &mut Call,
                (q, s): (u64, u64),
                rows: usize|
     -> PluginResult<(u64, chain_form::ALayout)> {
        let base = call.alloc(a_layout(rows, mpad).bytes)?;
        let m = AMat {
            q,
            s,
            fmt: 0,
            rdiv: 1,
        };
        Ok((base, chain_block::form_a(call, &m, (rows, mpad), base)?))
    };
    let (abase, la) = form(call, a, pr)?;
    let (bbase, lb) = form(call, b, qc)?;
    let (pa, pb) = (|o: usize| abase + o as u64, |o: usize| bbase + o as u64);
    let status = chain::merged_status(call, pa(la.status), pb(lb.status), 0)?;
    // B's stage scales, one float per column and 32-row block (the kernel reads the stage's
    // first), as the per-k32 wgrad's table of B's own scales.
    let qp = rup(qc, 128);
    let sb = call.scales_f32(pb(lb.s2), 0, (1, 1), mp as i64, mp, qc, mp, qp, 1, false)?;
    // What an A-residual entry reads: B's original bytes and scales at its m, `[mpad][qc]` and
    // `[mpad / 32][qc]`.
    let bt = call.alloc(mpad * qc)?;
    call.transpose(b.0, bt, 1, qc, mpad)?;
    let sbo = call.alloc(mp * qc)?;
    call.transpose(b.1, sbo, 1, qc, mp)?;
    let g = GemmParams {
        a: pa(la.q2),
        lda: mpad as i64,
        b: pb(lb.q2),
        ldb: mpad as i64,
        b_es: 0,
        sa: pa(la.sa),
        ldsa: 4 * pr as i64,
        sb,
        ldsb: qp as i64,
        sb_es: 0,
        out,
        ldo: qc as i64,
        o_es: (pr * qc) as i64,
        offs,
        e: e as i32,
        m: i32_of("rows", pr)?,
        n: i32_of("cols", qc)?,
        k: 0,
        batched: 1,
        out_t: 0,
    };
    let maps = chain::tensor_maps((pa(la.q2), pr), (pb(lb.q2), qc), mpad);
    let (tm_a, tm_b) = match maps {
        Ok(m) => m,
        Err(why) => return Ok(Err(why)),
    };
    let limit = chain::residual_limit(((pr + qc) * mpad) as f64)?;
    let mut b_params = TGemmParams::new(tm_a, tm_b, g);
    b_params.gate = status;
    b_params.limit = limit;
    let p = ChainParams {
        b: b_params,
        f: ChainFix {
            res_a: pa(la.res),
            cnt_a: pa(la.cnt),
            res_b: pb(lb.res),
            cnt_b: pb(lb.cnt),
            bt,
            sbo,
            at: pa(la.at),
            sat: pa(la.sat),
            bt_es: 0,
            ise: 0,
            isr: qc as i64,
            isc: 1,
            ldt: pr as i64,
            slots: chain_form::slots(mpad) as i32,
            terms: 3,
            mc_ss: 0,
            mc_es: 0,
        },
        // (the batched wgrad keeps the register epilogue)
        tm_o: [0; 16],
        o_tma: 0,
        _pad: [0; 60],
    };
    chain::launch_kernel(call, name, &p)?;
    Ok(Ok(Gate::three_stage_only(status, limit)))
}
