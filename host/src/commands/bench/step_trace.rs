//! `MXHOST_BENCH_STEP_TRACE=1`: where a training-step row's time goes. Each call of the step
//! records a [`crate::cuda::StreamMark`] before its first call and after each of its
//! quantize and GEMM calls; the row then prints, per call, the median GPU time between
//! marks (kernels and the gaps between them) and the host's time to enqueue it. The ncu
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
        if spans.is_empty() {
            return Ok(());
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2] * 1e6
        };
        let (mut gpu_sum, mut host_sum) = (0.0, 0.0);
        let mut line = String::new();
        for (label, v) in spans {
            let n = v.len();
            let gpu = median(v.iter().map(|s| s.0).collect());
            let host = median(v.iter().map(|s| s.1).collect());
            (gpu_sum, host_sum) = (gpu_sum + gpu, host_sum + host);
            line += &format!(" | {label} {gpu:.0} ({host:.0}) ×{n}");
        }
        eprintln!(
            "step trace [{} {row}]: GPU µs (host enqueue µs){line} | sum {gpu_sum:.0} ({host_sum:.0})",
            self.shape
        );
        Ok(())
    }
}
