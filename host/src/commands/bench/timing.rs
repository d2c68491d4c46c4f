//! How a row is timed: after warm-up, on a GPU as bench_peers.py times torch (L2 flushed,
//! CUDA events, the median), on the CPU (or back to back) the mean wall time.

#[cfg(doc)]
use super::BenchArgs;
use crate::device::{self, Device};
use crate::error::OpResult;
use std::time::Instant;

/// Bytes overwritten before every timed call on a GPU to evict the L2 cache: Triton's
/// `do_bench` (which bench_peers.py times torch with) zeroes 256 MB the same way.
#[cfg(feature = "cuda")]
const L2_FLUSH_BYTES: usize = 256_000_000;

/// How rows are timed ([`BenchArgs::reps`], [`BenchArgs::back_to_back`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    pub(super) reps: u32,
    /// Read only where a GPU can be timed by events (the `cuda` feature).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(super) back_to_back: bool,
    pub(super) cooldown: std::time::Duration,
    pub(super) warmup: std::time::Duration,
    /// [`BenchArgs::only`], lower-cased: the rows to time (every row when empty).
    pub(super) only: &'static [String],
}

/// `--only`'s words: the value split at commas outside square brackets (so a label's
/// `[E,K,N]` can be given whole), trimmed, lower-cased, empty words dropped.
pub(super) fn only_words(values: &[String]) -> Vec<String> {
    let mut words = Vec::new();
    for v in values {
        let (mut depth, mut word) = (0usize, String::new());
        for c in v.chars() {
            match c {
                '[' => depth += 1,
                ']' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    words.push(std::mem::take(&mut word));
                    continue;
                }
                _ => {}
            }
            word.push(c);
        }
        words.push(word);
    }
    words
        .into_iter()
        .map(|w| w.trim().to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

impl Timing {
    /// Whether the row `label` is timed: every row without `--only`, else those whose
    /// label contains one of its words (case-insensitive).
    pub(super) fn wants(&self, label: &str) -> bool {
        let label = label.to_lowercase();
        self.only.is_empty() || self.only.iter().any(|w| label.contains(w.as_str()))
    }
}

/// `MXHOST_BENCH_QUEUED_REPS=1`: a GPU row's reps are enqueued back to back and synchronized
/// once, each timed by its own events, as Triton's `do_bench` times torch
/// ([`crate::cuda::CudaDevice::time_queued_on_stream`]); by default each rep is synchronized
/// before the next is enqueued, so the host cannot run ahead of it. The default stays: the
/// queued step rows read −0.6…+1.0 % of the default's on an H100 (docs/perf.md run 197).
#[cfg(feature = "cuda")]
fn queued_reps() -> bool {
    matches!(
        std::env::var("MXHOST_BENCH_QUEUED_REPS").as_deref(),
        Ok("1")
    )
}

/// Seconds per call of `f` after 2 warm-up calls. On a GPU, the protocol bench_peers.py
/// times torch with (Triton's `do_bench`): the L2 cache flushed before each call, each
/// call timed by CUDA events, the median of `reps`. On the CPU (or with `back_to_back`),
/// the mean wall time of `reps` calls in a row.
pub(super) fn time(
    device: Device,
    timing: Timing,
    mut f: impl FnMut() -> OpResult<()>,
) -> anyhow::Result<f64> {
    let reps = timing.reps;
    std::thread::sleep(timing.cooldown);
    for _ in 0..2 {
        f()?;
    }
    device::synchronize(device)?;
    // Sustained state: one call in flight at a time, so the warm-up lasts what it says.
    let warm = Instant::now();
    while warm.elapsed() < timing.warmup {
        f()?;
        device::synchronize(device)?;
    }
    #[cfg(feature = "cuda")]
    if let (Device::Cuda(_), false) = (device, timing.back_to_back) {
        let dev = crate::cuda::device()?;
        let flush = dev.alloc(L2_FLUSH_BYTES)?;
        let mut times = if queued_reps() {
            dev.time_queued_on_stream(Some(&flush), reps.max(1) as usize, &mut f)?
        } else {
            (0..reps.max(1))
                .map(|_| dev.time_on_stream(Some(&flush), &mut f))
                .collect::<OpResult<Vec<f64>>>()?
        };
        times.sort_by(f64::total_cmp);
        return Ok(times[times.len() / 2]);
    }
    let start = Instant::now();
    for _ in 0..reps {
        f()?;
    }
    device::synchronize(device)?;
    Ok(start.elapsed().as_secs_f64() / reps.max(1) as f64)
}

/// How a shape's rows are recorded: label, peer pass, seconds, FLOP (GEMM rows), bytes.
pub(super) type PushRow<'a> = dyn FnMut(&str, &str, f64, Option<f64>, f64) + 'a;

/// One row, unless [`Timing::wants`] skips it: `f` timed by [`time`], recorded through
/// `push` with its FLOP (GEMM rows) and bytes.
pub(super) fn push_timed_row(
    (device, timing): (Device, Timing),
    push: &mut PushRow<'_>,
    (label, pass): (&str, &str),
    f: &mut dyn FnMut() -> OpResult<()>,
    (flops, bytes): (Option<f64>, f64),
) -> anyhow::Result<()> {
    if !timing.wants(label) {
        return Ok(());
    }
    let t = time(device, timing, f)?;
    push(label, pass, t, flops, bytes);
    Ok(())
}

/// One GEMM row ([`push_timed_row`] with its FLOP).
pub(super) fn push_gemm_row(
    dt: (Device, Timing),
    push: &mut PushRow<'_>,
    names: (&str, &str),
    f: &mut dyn FnMut() -> OpResult<()>,
    (flops, bytes): (f64, f64),
) -> anyhow::Result<()> {
    push_timed_row(dt, push, names, f, (Some(flops), bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(v: &[&str]) -> Vec<String> {
        only_words(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn only_splits_at_commas_outside_brackets() {
        assert_eq!(words(&["quantize, Step: "]), ["quantize", "step:"]);
        assert_eq!(
            words(&["forward X,dgrad dY 1x32 · W 32x32 [E,K,N] (transposed copy)"]),
            [
                "forward x",
                "dgrad dy 1x32 · w 32x32 [e,k,n] (transposed copy)"
            ]
        );
        assert_eq!(words(&["a,,b", "c"]), ["a", "b", "c"]);
        assert_eq!(words(&["x]y,z"]), ["x]y", "z"], "a stray ] opens nothing");
        assert!(words(&[" , "]).is_empty());
    }
}
