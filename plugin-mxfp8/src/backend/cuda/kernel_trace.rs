//! `MXHOST_MX_KERNEL_TRACE=FILE`: every kernel this plugin launches, timed where it runs (in
//! a training step, its neighbours around it), not alone as ncu times it. ncu serializes
//! launches, so it cannot show the gaps between a call's kernels (memsets, copies, launch
//! latency, gated kernels that exit at once) nor the clocks of a step under the power limit:
//! in docs/perf.md run 197 c's chained forward took 638 µs under ncu and 710–724 µs in the
//! step's trace, and nothing said where the difference went.
//!
//! Each launch is bracketed by two events on its stream. Completed pairs are read back without
//! blocking as later launches come (blocking only past [`MAX_PENDING`] pending pairs), and FILE
//! is rewritten at most every [`WRITE_EVERY`] with, per kernel name: launches, mean time, the
//! mean gap since the previous kernel of the same plugin call, and, for a call's first kernel,
//! the mean gap since the previous mxfp8 kernel of an earlier call (what lies between two
//! calls: the host's enqueueing where it waited on the GPU, other libraries' kernels). Gaps
//! over [`CALL_GAP_MAX`] (between a bench's reps, one-time costs) are left out. The events'
//! own cost, about a microsecond, is included. Besides kernels, each plugin call's memsets
//! (`(memset)`) and host-to-device copies (`(upload)`) are timed the same way, and empty marks
//! at its entry and exit (`(entry quantize [32, 2880, 2880] +T)`, `(exit …)`, `Call::entered`)
//! make the time before its first kernel (the GPU waiting for the host to enqueue it) and
//! between calls rows of their own. A diagnostic: off by default. It perturbs what it measures:
//! the GPU by that microsecond per launch, the host's enqueueing about threefold (docs/perf.md
//! run 200), so a call's idle under the trace is not its idle without it.

use cudarc::driver::result as cr;
use cudarc::driver::sys as cu;
use mxhost_plugin_abi::plugin_support::PluginResult;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Pending event pairs past which a launch waits for the oldest to complete.
const MAX_PENDING: usize = 1024;
/// How often FILE is rewritten (at most).
const WRITE_EVERY: Duration = Duration::from_millis(500);
/// Gaps longer than this (ms) are not counted: between calls a bench's sync and L2 flush,
/// within one a one-time cost (docs/perf.md run 200: cuBLAS's algorithm search in wgrad's
/// first call read as a 4 ms mean gap).
const CALL_GAP_MAX: f64 = 1.0;

/// The trace file, when `MXHOST_MX_KERNEL_TRACE` names one.
fn file() -> Option<&'static str> {
    static F: OnceLock<Option<String>> = OnceLock::new();
    F.get_or_init(|| {
        std::env::var("MXHOST_MX_KERNEL_TRACE")
            .ok()
            .filter(|v| !v.trim().is_empty())
    })
    .as_deref()
}

/// Whether launches are traced in this process.
pub(super) fn enabled() -> bool {
    file().is_some()
}

/// One kernel name's totals.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct KernelStats {
    launches: u64,
    kernel_ms: f64,
    gaps: u64,
    gap_ms: f64,
    call_gaps: u64,
    call_gap_ms: f64,
}

/// The gap before a launch: since the previous kernel of its call, or, for a call's first
/// kernel, since the previous kernel of an earlier call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Gap {
    InCall(f64),
    CallStart(f64),
    Unknown,
}

/// Adds one completed launch of `name` to `stats`: its time (ms) and the gap before it.
pub(super) fn note(
    stats: &mut BTreeMap<String, KernelStats>,
    name: &str,
    kernel_ms: f64,
    gap: Gap,
) {
    let s = stats.entry(name.to_string()).or_default();
    s.launches += 1;
    s.kernel_ms += kernel_ms;
    match gap {
        // (an in-call gap over the cut is a one-time cost: cuBLAS's first algorithm search)
        Gap::InCall(g) if g <= CALL_GAP_MAX => {
            s.gaps += 1;
            s.gap_ms += g;
        }
        Gap::CallStart(g) if g <= CALL_GAP_MAX => {
            s.call_gaps += 1;
            s.call_gap_ms += g;
        }
        _ => {}
    }
}

/// The table FILE holds: one row per kernel, the largest total (kernel and gaps) first.
pub(super) fn table(stats: &BTreeMap<String, KernelStats>) -> String {
    let mut rows: Vec<(&String, &KernelStats)> = stats.iter().collect();
    rows.sort_by(|a, b| (b.1.kernel_ms + b.1.gap_ms).total_cmp(&(a.1.kernel_ms + a.1.gap_ms)));
    let mut out = String::from(
        "kernel\tlaunches\tmean µs\tmean gap before µs (within a call)\tgaps\tmean gap before µs (call start)\tcall starts\ttotal ms (kernel + in-call gaps)\n",
    );
    for (name, s) in rows {
        let mean = |ms: f64, n: u64| if n == 0 { 0.0 } else { 1e3 * ms / n as f64 };
        let _ = writeln!(
            out,
            "{name}\t{}\t{:.2}\t{:.2}\t{}\t{:.2}\t{}\t{:.3}",
            s.launches,
            mean(s.kernel_ms, s.launches),
            mean(s.gap_ms, s.gaps),
            s.gaps,
            mean(s.call_gap_ms, s.call_gaps),
            s.call_gaps,
            s.kernel_ms + s.gap_ms
        );
    }
    out
}

struct Launch {
    call: u64,
    name: String,
    start: cu::CUevent,
    end: cu::CUevent,
}

struct Trace {
    pending: VecDeque<Launch>,
    stats: BTreeMap<String, KernelStats>,
    /// The last launch read back: its call and end event (kept for the next one's gap).
    last: Option<(u64, cu::CUevent)>,
    written: Option<Instant>,
}

// SAFETY: CUDA event handles are process-wide and usable from any thread; the trace is only
// touched under its mutex.
unsafe impl Send for Trace {}

fn trace() -> std::sync::MutexGuard<'static, Trace> {
    static T: OnceLock<Mutex<Trace>> = OnceLock::new();
    T.get_or_init(|| {
        Mutex::new(Trace {
            pending: VecDeque::new(),
            stats: BTreeMap::new(),
            last: None,
            written: None,
        })
    })
    .lock()
    .unwrap_or_else(|e| e.into_inner())
}

fn event() -> Option<cu::CUevent> {
    cr::event::create(cu::CUevent_flags::CU_EVENT_DEFAULT).ok()
}

fn destroy(e: cu::CUevent) {
    // SAFETY: `e` was created by `event` and is destroyed once, after its last use.
    let _ = unsafe { cr::event::destroy(e) };
}

/// Runs `launch` (one kernel launch of call `call` on `stream`), bracketed by events when
/// tracing is on. Tracing's own failures (no events) leave the launch untimed, never failed.
pub(super) fn traced(
    call: u64,
    stream: cu::CUstream,
    name: &str,
    launch: impl FnOnce() -> PluginResult<()>,
) -> PluginResult<()> {
    if !enabled() {
        return launch();
    }
    let (Some(start), Some(end)) = (event(), event()) else {
        return launch();
    };
    // SAFETY: fresh events, recorded on the stream the launch uses.
    let recorded = unsafe { cr::event::record(start, stream) }.is_ok();
    let result = launch();
    // SAFETY: as above.
    let recorded = recorded && unsafe { cr::event::record(end, stream) }.is_ok();
    if result.is_err() || !recorded {
        destroy(start);
        destroy(end);
        return result;
    }
    let mut t = trace();
    t.pending.push_back(Launch {
        call,
        name: name.to_string(),
        start,
        end,
    });
    read_back(&mut t);
    result
}

/// Reads back the completed pairs at the front, waiting for the oldest only while too many
/// are pending; rewrites FILE when it is due.
fn read_back(t: &mut Trace) {
    while let Some(front) = t.pending.front() {
        // SAFETY: live events recorded on their streams.
        let done = if t.pending.len() > MAX_PENDING {
            unsafe { cr::event::synchronize(front.end) }.is_ok()
        } else {
            unsafe { cr::event::query(front.end) }.is_ok()
        };
        if !done {
            break;
        }
        let l = t.pending.pop_front().expect("front exists");
        // SAFETY: both events completed.
        let kernel_ms = unsafe { cr::event::elapsed(l.start, l.end) }.map_or(0.0, f64::from);
        let gap = match t.last {
            // SAFETY: the previous launch's end event completed before this launch's start
            // (one stream: a process's calls run on the host's stream).
            Some((call, prev_end)) => match unsafe { cr::event::elapsed(prev_end, l.start) } {
                Ok(ms) if call == l.call => Gap::InCall(f64::from(ms)),
                Ok(ms) => Gap::CallStart(f64::from(ms)),
                Err(_) => Gap::Unknown,
            },
            None => Gap::Unknown,
        };
        note(&mut t.stats, &l.name, kernel_ms, gap);
        destroy(l.start);
        if let Some((_, prev_end)) = t.last.replace((l.call, l.end)) {
            destroy(prev_end);
        }
    }
    let due = t.written.is_none_or(|w| w.elapsed() >= WRITE_EVERY);
    if let (true, Some(path)) = (due && !t.stats.is_empty(), file()) {
        // (a diagnostic: a file it cannot write is reported once per rewrite, not fatal)
        if let Err(e) = std::fs::write(path, table(&t.stats)) {
            eprintln!("mxhost-plugin-mxfp8: MXHOST_MX_KERNEL_TRACE: cannot write {path}: {e}");
        }
        t.written = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launches_and_gaps_add_up_per_kernel_and_the_largest_total_comes_first() {
        let mut s = BTreeMap::new();
        note(&mut s, "mx_cgemm", 0.640, Gap::InCall(0.004));
        note(&mut s, "mx_cgemm", 0.660, Gap::CallStart(0.030));
        note(&mut s, "mx_cgemm", 0.650, Gap::CallStart(2.5));
        note(&mut s, "mx_plain_from_form", 0.003, Gap::InCall(0.002));
        note(&mut s, "mx_plain_from_form", 0.003, Gap::InCall(40.0));
        let c = s["mx_cgemm"];
        assert_eq!(
            (c.launches, c.gaps, c.call_gaps),
            (3, 1, 1),
            "a bench's gap left out"
        );
        assert!((c.kernel_ms - 1.95).abs() < 1e-12 && (c.gap_ms - 0.004).abs() < 1e-12);
        let t = table(&s);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("kernel\t"));
        // mean 650 µs over 3 launches, 4 µs in the call, 30 µs at a call's start, 1.954 ms
        assert_eq!(lines[1], "mx_cgemm\t3\t650.00\t4.00\t1\t30.00\t1\t1.954");
        // (the 40 ms gap within a call left out too)
        assert_eq!(
            lines[2],
            "mx_plain_from_form\t2\t3.00\t2.00\t1\t0.00\t0\t0.008"
        );
    }

    #[test]
    fn a_kernel_with_no_gap_reads_zero_not_nan() {
        let mut s = BTreeMap::new();
        note(&mut s, "mx_chain_lists", 0.008, Gap::Unknown);
        assert_eq!(
            table(&s).lines().nth(1),
            Some("mx_chain_lists\t1\t8.00\t0.00\t0\t0.00\t0\t0.008")
        );
    }
}
