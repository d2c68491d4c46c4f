//! A measured algorithm choice for the strided-batch BF16 GEMMs of [`super::cublas`] (the
//! wgrad on every path; forward/dgrad on kept values): cuBLAS's own pick
//! (`cublasGemmStridedBatchedEx`, `CUBLAS_GEMM_DEFAULT`) or one of the candidates cuBLASLt's
//! heuristic offers for the same problem, whichever ran fastest when the problem was first
//! seen. Why: cuBLAS's pick is not always its fastest on these problems at the power cap. On
//! an H100 (docs/perf.md, runs 165–167) the chosen candidates ran the anchors' kept-value
//! forwards 1.5–5.5 % and the wgrads on a and b 1–3.6 % faster; where none beat cuBLAS by 2 %
//! (the dgrads on W of b and c, c's wgrad) the default stays.
//!
//! The choice is timed once per problem (shape, operations, leading dimensions, strides,
//! batch, output type), on the call's own stream and buffers (the data matters: at the power
//! cap an algorithm's speed follows its operands' switching, run 166): after 1.2 s of the
//! default (the power limiter's burst over, see [`SETTLE`]), each candidate three times,
//! interleaved with the default, three times over, keeping its fastest round; a candidate is
//! taken only when it beats the default by 2 %. For a GEMM of ~1.5 ms that is ~1.4 s once per
//! problem, synchronizing the stream; the call's output is then written by the chosen one.
//! The choice is kept for the process and in `cublas-choices.txt` in the kernel cache
//! directory (`choices.rs`; keyed also by the GPU's name and cuBLASLt's version), so later
//! processes on the machine run the same algorithm, i.e. the same summation order, without
//! timing again. The cuBLASLt calls are in `lt.rs`.
//!
//! Only reductions in FP32 are offered (no split-K partials in the output type) and every
//! candidate accumulates in FP32 with FP32 scaling, as the default does
//! (`CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`). Any cuBLASLt failure makes the
//! problem's choice the default, with one message: tuning never fails a call.
//! `MXHOST_CUBLAS_TUNE=0` turns the choice off (cuBLAS's pick always).

mod choices;
mod lt;

use super::cuda::{env_flag, gemm_trace};
pub use choices::Choice;
use choices::{keep, known};
use cudarc::driver::result as cr;
use cudarc::driver::sys as cu;
use lt::LtProblem;
use mxhost_plugin_abi::plugin_support::PluginResult;
use mxhost_plugin_common::cuda::drv;
use std::sync::OnceLock;

/// One strided-batch GEMM in cuBLAS's column-major terms: `C_i[m×n] = op_a(A_i) · op_b(B_i)`,
/// `X_i = X + i · stride_x` (elements), A and B bf16, C bf16 or f32, FP32 accumulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StridedGemm {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub lda: i32,
    pub ldb: i32,
    pub ldc: i32,
    pub strides: (i64, i64, i64),
    pub batch: i32,
    pub out_bf16: bool,
}

impl StridedGemm {
    /// The problem as one line of the choices file (no `|`, no spaces).
    fn key_text(&self) -> String {
        let t = |b: bool| if b { 'T' } else { 'N' };
        format!(
            "{}{}:{}x{}x{}:ld{},{},{}:s{},{},{}:b{}:{}",
            t(self.trans_a),
            t(self.trans_b),
            self.m,
            self.n,
            self.k,
            self.lda,
            self.ldb,
            self.ldc,
            self.strides.0,
            self.strides.1,
            self.strides.2,
            self.batch,
            if self.out_bf16 { "bf16" } else { "f32" }
        )
    }
}
/// Whether the choice is made at all (`MXHOST_CUBLAS_TUNE`, on by default, the backend's
/// switch rule) and cuBLASLt loads.
pub fn enabled() -> bool {
    static E: OnceLock<bool> = OnceLock::new();
    *E.get_or_init(|| {
        // SAFETY: only tries to dlopen the library candidates.
        env_flag("MXHOST_CUBLAS_TUNE", true) && unsafe { cudarc::cublaslt::sys::is_culib_present() }
    })
}

/// Runs `g` on `(a, b, c)`: with the problem's choice, timed first if it has none.
/// `run_default` issues the default algorithm for the same problem and pointers.
///
/// # Safety
/// `a`, `b`, `c` address the batch's operands and output in the current context's device
/// memory (live until the enqueued work is done), `stream` is a valid stream of that
/// context, and `run_default` issues exactly this GEMM.
pub unsafe fn run(
    stream: cu::CUstream,
    g: &StridedGemm,
    (a, b, c): (u64, u64, u64),
    run_default: &mut dyn FnMut() -> PluginResult<()>,
) -> PluginResult<()> {
    if !enabled() {
        return run_default();
    }
    let choice = match known(g) {
        Some(ch) => ch,
        None => {
            // SAFETY: the caller's contract.
            let ch = match unsafe { tune(stream, g, (a, b, c), run_default) } {
                Ok(ch) => ch,
                Err(e) => {
                    eprintln!(
                        "mxhost-plugin-mxfp8: cuBLASLt tuning of {} failed ({e}); cuBLAS's own algorithm stays",
                        g.key_text()
                    );
                    Choice::Default
                }
            };
            keep(g, ch, true);
            ch
        }
    };
    match choice {
        Choice::Default => run_default(),
        // SAFETY: the caller's contract.
        Choice::Lt(d, ws) => match unsafe { LtProblem::new(g) }.and_then(|p| unsafe {
            p.run(
                stream,
                (a, b, c),
                &cudarc::cublaslt::sys::cublasLtMatmulAlgo_t { data: d },
                ws,
            )
        }) {
            Ok(()) => Ok(()),
            Err(e) => {
                // (e.g. a choice from the file that this library no longer accepts)
                eprintln!(
                    "mxhost-plugin-mxfp8: cuBLASLt algorithm for {} failed ({e}); back to cuBLAS's own",
                    g.key_text()
                );
                keep(g, Choice::Default, false);
                run_default()
            }
        },
    }
}
/// Workspace a candidate may ask for.
const MAX_WORKSPACE: usize = 32 << 20;
/// Runs of each candidate per timed round, and rounds (a candidate keeps its fastest).
const REPS: usize = 3;
const ROUNDS: usize = 3;
/// A GEMM this long or longer is run for [`SETTLE`] before the candidates are timed.
const SETTLE_FROM_US: f32 = 100.0;
const SETTLE: std::time::Duration = std::time::Duration::from_millis(1200);

/// Times cuBLAS's default against cuBLASLt's candidates on the call's buffers and returns
/// the faster (the default unless a candidate beats it by 2 %). The timing runs overwrite
/// the call's output; the caller runs the chosen algorithm once more afterwards.
///
/// # Safety
/// As [`run`]'s.
unsafe fn tune(
    stream: cu::CUstream,
    g: &StridedGemm,
    ptrs: (u64, u64, u64),
    run_default: &mut dyn FnMut() -> PluginResult<()>,
) -> PluginResult<Choice> {
    // SAFETY: a context is current (the caller's).
    let p = unsafe { LtProblem::new(g) }?;
    let cands = p.candidates(MAX_WORKSPACE)?;
    if cands.is_empty() {
        return Ok(Choice::Default);
    }
    let e0 =
        cr::event::create(cu::CUevent_flags::CU_EVENT_DEFAULT).map_err(drv("cuEventCreate"))?;
    let e1 =
        cr::event::create(cu::CUevent_flags::CU_EVENT_DEFAULT).map_err(drv("cuEventCreate"))?;
    // µs per run of candidate i (0: the default) over `reps` runs
    let mut time_runs = |i: usize, reps: usize| -> PluginResult<f32> {
        // SAFETY: events created above; the caller's stream.
        (unsafe { cr::event::record(e0, stream) }).map_err(drv("cuEventRecord"))?;
        for _ in 0..reps {
            if i == 0 {
                run_default()?;
            } else {
                let h = &cands[i - 1];
                // SAFETY: the caller's contract; `h` came from the heuristic for `p`.
                unsafe { p.run(stream, ptrs, &h.algo, h.workspaceSize) }?;
            }
        }
        // SAFETY: as above.
        (unsafe { cr::event::record(e1, stream) }).map_err(drv("cuEventRecord"))?;
        (unsafe { cr::event::synchronize(e1) }).map_err(drv("cuEventSynchronize"))?;
        let ms = unsafe { cr::event::elapsed(e0, e1) }.map_err(drv("cuEventElapsedTime"))?;
        Ok(ms * 1000.0 / reps as f32)
    };
    // per candidate (0: the default), the fastest round's µs per run
    let mut best = vec![f32::INFINITY; cands.len() + 1];
    let result = (|| -> PluginResult<()> {
        // Settle first: for its first ~1 s of load the card's power limiter lets it run at
        // burst clocks, where candidates rank by speed, not by work per watt at the cap as
        // they run afterwards (run 166: choices made there ran up to 5 % slower settled).
        // Small GEMMs never reach the cap and skip this.
        let one = time_runs(0, 1)?;
        if one >= SETTLE_FROM_US {
            let t0 = std::time::Instant::now();
            let batch = (20_000.0 / one).ceil().max(1.0) as usize;
            while t0.elapsed() < SETTLE {
                time_runs(0, batch)?;
            }
        }
        for _round in 0..ROUNDS {
            for (i, slot) in best.iter_mut().enumerate() {
                *slot = slot.min(time_runs(i, REPS)?);
            }
        }
        Ok(())
    })();
    // SAFETY: the events are complete (synchronized) or unused.
    unsafe {
        let _ = cr::event::destroy(e0);
        let _ = cr::event::destroy(e1);
    }
    result?;
    let picked = pick(&best);
    let choice = match picked {
        Some(i) => Choice::Lt(cands[i].algo.data, cands[i].workspaceSize),
        None => Choice::Default,
    };
    if gemm_trace() {
        let all: Vec<String> = best.iter().map(|t| format!("{t:.0}")).collect();
        eprintln!(
            "mxhost-plugin-mxfp8: cuBLAS tuning {}: default {:.0} µs, cuBLASLt candidates [{}] µs → {}",
            g.key_text(),
            best[0],
            all[1..].join(", "),
            picked.map_or("default".to_string(), |i| format!("candidate {i}"))
        );
    }
    Ok(choice)
}

/// The fastest candidate's index in `times[1..]` (µs per run; `times[0]` is the default's)
/// when it beats the default by [`MARGIN`], else `None`: a near tie keeps cuBLAS's pick.
fn pick(times: &[f32]) -> Option<usize> {
    let (&dflt, cands) = times.split_first()?;
    let (i, &t) = cands.iter().enumerate().min_by(|x, y| x.1.total_cmp(y.1))?;
    (t < (1.0 - MARGIN) * dflt).then_some(i)
}

/// How much faster than cuBLAS's pick a candidate must run to be taken.
const MARGIN: f32 = 0.02;
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidate_is_taken_only_clearly_faster_than_the_default() {
        // run 167's b wgrad (µs): #6 at 1450 against 1552
        let b = [
            1552.0, 1536.0, 1481.0, 1496.0, 1502.0, 1545.0, 1477.0, 1450.0, 1659.0,
        ];
        assert_eq!(pick(&b), Some(6));
        // c's: #4 at 759 against 767 is within the margin
        let c = [
            767.0, 762.0, 775.0, 849.0, 823.0, 759.0, 823.0, 827.0, 804.0,
        ];
        assert_eq!(pick(&c), None);
        assert_eq!(
            pick(&[100.0, f32::INFINITY]),
            None,
            "a candidate that never ran"
        );
        assert_eq!(pick(&[100.0]), None);
        assert_eq!(pick(&[]), None);
    }
}
