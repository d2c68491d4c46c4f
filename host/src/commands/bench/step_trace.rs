//! `MXHOST_BENCH_STEP_TRACE=1`: where a training-step row's time goes. Each call of the step
//! records a [`crate::cuda::StreamMark`] before its first call and after each of its
//! quantize and GEMM calls; the row then prints, per call, the median GPU time between
//! marks (kernels and the gaps between them) and the host's time to enqueue it, then the
//! median and 90th percentile of the whole steps' GPU sums ([`summary_line`]). The ncu
//! breakdowns (docs/perf.md run 169) sum a step's kernels to 5–8 % under the bench's row:
//! this says whether the rest is gaps, and where, at the clocks of a sustained run.
//! A no-op without the `cuda` feature, off a GPU, or unset.

use crate::device::Device;
use crate::error::OpResult;
use std::cell::RefCell;

/// One call's span: GPU and host seconds.
type Span = (f64, f64);

/// One step call's marks, then each call's spans over the row's step calls.
#[derive(Default)]
pub(super) struct StepTrace {
    on: bool,
    /// The shape's key, which each printed line names.
    shape: &'static str,
    #[cfg(feature = "cuda")]
    marks: RefCell<Vec<(&'static str, crate::cuda::StreamMark)>>,
    spans: RefCell<Vec<(&'static str, Vec<Span>)>>,
}

impl StepTrace {
    pub(super) fn from_env(device: Device, shape: &'static str) -> StepTrace {
        let set = std::env::var("MXHOST_BENCH_STEP_TRACE").as_deref() == Ok("1");
        StepTrace {
            on: set && matches!(device, Device::Cuda(_)) && cfg!(feature = "cuda"),
            shape,
            ..StepTrace::default()
        }
    }

    /// Start a step call: the previous call's marks (complete: `timing::time` synchronizes
    /// between calls, and `since` waits otherwise) become spans, and a new first mark.
    pub(super) fn begin(&self) -> OpResult<()> {
        if !self.on {
            return Ok(());
        }
        self.collect()?;
        self.mark("start")
    }

    /// A mark after the call named `label`.
    pub(super) fn mark(&self, label: &'static str) -> OpResult<()> {
        #[cfg(feature = "cuda")]
        if self.on {
            let m = crate::cuda::device()?.mark()?;
            self.marks.borrow_mut().push((label, m));
        }
        let _ = label;
        Ok(())
    }

    fn collect(&self) -> OpResult<()> {
        #[cfg(feature = "cuda")]
        {
            let marks = std::mem::take(&mut *self.marks.borrow_mut());
            let mut spans = self.spans.borrow_mut();
            for pair in marks.windows(2) {
                let span = pair[1].1.since(&pair[0].1)?;
                match spans.iter_mut().find(|(l, _)| *l == pair[1].0) {
                    Some((_, v)) => v.push(span),
                    None => spans.push((pair[1].0, vec![span])),
                }
            }
        }
        Ok(())
    }

    /// Print the row's spans (medians, µs) to stderr and start over.
    pub(super) fn report(&self, row: &str) -> OpResult<()> {
        if !self.on {
            return Ok(());
        }
        self.collect()?;
        let spans = std::mem::take(&mut *self.spans.borrow_mut());
        if !spans.is_empty() {
            eprintln!("{}", summary_line(self.shape, row, &spans));
        }
        Ok(())
    }
}

/// The trace's line for one row: per call, the median GPU and host µs and the number of step
/// calls; then the sum of those medians, and the median and 90th percentile of the whole
/// steps' GPU sums (the i-th span of every call belongs to step i). A row's own median (of
/// whole steps, timed around them) can read above the sum of the per-call medians when slow
/// calls fall in different steps (docs/perf.md run 180); the steps' own sums show that here.
fn summary_line(shape: &str, row: &str, spans: &[(&str, Vec<Span>)]) -> String {
    let quantile = |mut v: Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        let at = (v.len().saturating_sub(1) as f64 * q).round() as usize;
        v.get(at).map_or(0.0, |x| x * 1e6)
    };
    let (mut gpu_sum, mut host_sum) = (0.0, 0.0);
    let mut line = String::new();
    for (label, v) in spans {
        let gpu = quantile(v.iter().map(|s| s.0).collect(), 0.5);
        let host = quantile(v.iter().map(|s| s.1).collect(), 0.5);
        (gpu_sum, host_sum) = (gpu_sum + gpu, host_sum + host);
        line += &format!(" | {label} {gpu:.0} ({host:.0}) ×{}", v.len());
    }
    let steps = spans.iter().map(|(_, v)| v.len()).min().unwrap_or(0);
    let whole: Vec<f64> = (0..steps)
        .map(|i| spans.iter().map(|(_, v)| v[i].0).sum())
        .collect();
    let whole = match whole.is_empty() {
        true => String::new(),
        false => format!(
            "; steps {:.0} median, {:.0} p90",
            quantile(whole.clone(), 0.5),
            quantile(whole, 0.9)
        ),
    };
    format!("step trace [{shape} {row}]: GPU µs (host enqueue µs){line} | sum {gpu_sum:.0} ({host_sum:.0}){whole}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_gives_per_call_medians_and_the_whole_steps_spread() {
        // three steps of two calls; the slow call falls in a different step each time, so
        // every call's median is fast while two of three whole steps are slow
        let us = |g: f64| (g * 1e-6, 10e-6);
        let spans = vec![
            ("quantize X", vec![us(100.0), us(150.0), us(100.0)]),
            ("forward", vec![us(200.0), us(200.0), us(260.0)]),
        ];
        let line = summary_line("b", "step", &spans);
        assert_eq!(
            line,
            "step trace [b step]: GPU µs (host enqueue µs) | quantize X 100 (10) ×3 | forward 200 (10) ×3 \
             | sum 300 (20); steps 350 median, 360 p90"
        );
    }

    #[test]
    fn calls_with_fewer_spans_bound_the_steps() {
        // (of an even count, the upper median)
        let spans = vec![
            ("a", vec![(1e-6, 0.0), (3e-6, 0.0)]),
            ("b", vec![(1e-6, 0.0)]),
        ];
        let line = summary_line("c", "r", &spans);
        assert!(
            line.ends_with("| a 3 (0) ×2 | b 1 (0) ×1 | sum 4 (0); steps 2 median, 2 p90"),
            "{line}"
        );
        assert!(!summary_line("c", "r", &[]).contains("steps"));
    }
}
