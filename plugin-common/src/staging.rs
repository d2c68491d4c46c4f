//! Small host-to-device copies that never make the host wait on the GPU.
//!
//! `cuMemcpyHtoDAsync` from pageable memory is allowed to synchronize with its stream before
//! it stages the bytes (CUDA's "API synchronization behavior": "if pageable memory must first
//! be staged to pinned memory, the driver may synchronize with the stream"). In a training step
//! that is one wait per call that uploads something (a GEMM's expert offsets, an annex's
//! partner words, a need map's offsets), after which the GPU idles while the host enqueues the
//! rest of the call. [`Ring`] plans copies through one pinned buffer instead: each copy takes
//! the next free bytes, and only a copy that wraps onto bytes an unfinished copy still reads
//! waits (for that copy alone). The CUDA half, [`upload`], is behind the `cuda` feature and
//! `MXHOST_PINNED_UPLOADS=1` (opt-in: run 199 timed it with no gain, docs/perf.md).

use std::collections::VecDeque;
use std::ops::Range;

/// A ring of `cap` bytes handed out in order; `E` marks when a copy out of it has finished
/// (a CUDA event), so that its bytes may be written again.
pub struct Ring<E> {
    cap: usize,
    head: usize,
    inflight: VecDeque<(Range<usize>, E)>,
}

/// Copies are placed on this alignment (a cache line).
const ALIGN: usize = 64;

impl<E> Ring<E> {
    pub fn new(cap: usize) -> Self {
        Ring {
            cap,
            head: 0,
            inflight: VecDeque::new(),
        }
    }

    /// Where the next `len` bytes go, with the in-flight copies whose bytes they overlap
    /// (oldest first), which the caller must wait for before writing; `None` when `len` does
    /// not fit the ring at all (copy it another way).
    pub fn place(&mut self, len: usize) -> Option<(Range<usize>, Vec<E>)> {
        let len = len.max(1).next_multiple_of(ALIGN);
        if len > self.cap {
            return None;
        }
        let start = if self.head + len <= self.cap {
            self.head
        } else {
            0
        };
        let at = start..start + len;
        // (every copy in flight is checked: after a wrap, the oldest ones, near the end, need
        // not be those the new bytes overlap)
        let mut wait = Vec::new();
        let mut keep = VecDeque::with_capacity(self.inflight.len());
        for (r, e) in self.inflight.drain(..) {
            if r.start < at.end && at.start < r.end {
                wait.push(e);
            } else {
                keep.push_back((r, e));
            }
        }
        self.inflight = keep;
        self.head = at.end;
        Some((at, wait))
    }

    /// Records the copy out of `at` (from [`Ring::place`]) as in flight until `done`.
    pub fn push(&mut self, at: Range<usize>, done: E) {
        self.inflight.push_back((at, done));
    }

    /// Drops the oldest in-flight copies for which `finished` says so, returning their
    /// markers (for reuse); stops at the first unfinished one.
    pub fn retire(&mut self, mut finished: impl FnMut(&E) -> bool) -> Vec<E> {
        let mut out = Vec::new();
        while self.inflight.front().is_some_and(|(_, e)| finished(e)) {
            out.push(self.inflight.pop_front().expect("front exists").1);
        }
        out
    }

    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }
}

#[cfg(feature = "cuda")]
pub use cuda_upload::{upload, upload_slice};

#[cfg(feature = "cuda")]
mod cuda_upload {
    use super::Ring;
    use cudarc::driver::result as cr;
    use cudarc::driver::sys as cu;
    use std::sync::{Mutex, OnceLock};

    /// Bytes of the pinned ring; larger copies go pageable (they are tensors, not offsets).
    const CAP: usize = 1 << 20;
    /// The largest copy taken through the ring.
    const SMALL: usize = 64 << 10;

    /// `MXHOST_PINNED_UPLOADS` (off by default: no gain in docs/perf.md run 199).
    fn enabled() -> bool {
        static F: OnceLock<bool> = OnceLock::new();
        *F.get_or_init(|| crate::switch::env_flag("MXHOST_PINNED_UPLOADS", false))
    }

    struct Pinned {
        base: *mut u8,
        ring: Ring<cu::CUevent>,
        spare: Vec<cu::CUevent>,
    }
    // SAFETY: the pinned buffer and events are process-wide; only touched under the mutex.
    unsafe impl Send for Pinned {}

    /// The ring, its pinned buffer allocated on first use (`None`: pinned memory refused,
    /// and copies go pageable).
    fn pinned() -> &'static Mutex<Option<Pinned>> {
        static P: OnceLock<Mutex<Option<Pinned>>> = OnceLock::new();
        P.get_or_init(|| {
            // SAFETY: a fresh portable pinned allocation, never freed (process lifetime).
            let base = unsafe { cr::malloc_host(CAP, cu::CU_MEMHOSTALLOC_PORTABLE) }.ok();
            Mutex::new(base.map(|b| Pinned {
                base: b as *mut u8,
                ring: Ring::new(CAP),
                spare: Vec::new(),
            }))
        })
    }

    /// Enqueues a copy of `bytes` to the device address `dst` on `stream`: through the pinned
    /// ring when `MXHOST_PINNED_UPLOADS=1` and it is small (the host never waits for the
    /// stream, only, rarely, for an older copy of the ring's), else as a pageable copy.
    /// `bytes` may be dropped when this returns either way.
    ///
    /// # Safety
    /// `dst` addresses at least `bytes.len()` writable device bytes that stay allocated until
    /// the copy has run in stream order; the calling thread has `stream`'s context current.
    pub unsafe fn upload(
        stream: cu::CUstream,
        dst: u64,
        bytes: &[u8],
    ) -> Result<(), cr::DriverError> {
        if bytes.is_empty() {
            return Ok(());
        }
        if enabled() && bytes.len() <= SMALL {
            let mut guard = pinned().lock().unwrap_or_else(|e| e.into_inner());
            if let Some(p) = guard.as_mut() {
                // SAFETY: the caller's contract; see `through_ring`.
                if unsafe { through_ring(p, stream, dst, bytes) }.is_ok() {
                    return Ok(());
                }
            }
        }
        // SAFETY: the caller's contract; pageable sources are staged before this returns.
        unsafe { cr::memcpy_htod_async(dst, bytes, stream) }
    }

    /// [`upload`] of a slice of plain numbers (`i32`, `u64`: no padding bytes).
    ///
    /// # Safety
    /// As [`upload`], for `size_of_val(values)` bytes at `dst`.
    pub unsafe fn upload_slice<T: Copy>(
        stream: cu::CUstream,
        dst: u64,
        values: &[T],
    ) -> Result<(), cr::DriverError> {
        // SAFETY: `values` is initialized memory of that many bytes (T: plain numbers).
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        // SAFETY: the caller's contract.
        unsafe { upload(stream, dst, bytes) }
    }

    /// # Safety
    /// As [`upload`].
    unsafe fn through_ring(
        p: &mut Pinned,
        stream: cu::CUstream,
        dst: u64,
        bytes: &[u8],
    ) -> Result<(), cr::DriverError> {
        // (recycle the events of finished copies; SAFETY: live events)
        let done = p.ring.retire(|&e| unsafe { cr::event::query(e) }.is_ok());
        p.spare.extend(done);
        let Some((at, wait)) = p.ring.place(bytes.len()) else {
            return Err(cr::DriverError(cu::CUresult::CUDA_ERROR_INVALID_VALUE));
        };
        for e in wait {
            // SAFETY: a live event recorded after an earlier copy out of these bytes.
            unsafe { cr::event::synchronize(e) }?;
            p.spare.push(e);
        }
        let ev = match p.spare.pop() {
            Some(e) => e,
            None => cr::event::create(cu::CUevent_flags::CU_EVENT_DISABLE_TIMING)?,
        };
        // SAFETY: `at` lies inside the CAP pinned bytes at `base`, and no copy in flight reads
        // it (waited for above); the slice lives as long as the ring (never freed).
        let staged = unsafe {
            let s = std::slice::from_raw_parts_mut(p.base.add(at.start), bytes.len());
            s.copy_from_slice(bytes);
            &*s
        };
        // SAFETY: pinned source (truly asynchronous), `dst` per the caller's contract.
        let copied = unsafe { cr::memcpy_htod_async(dst, staged, stream) }
            // SAFETY: a live event, recorded on the stream the copy went to.
            .and_then(|()| unsafe { cr::event::record(ev, stream) });
        match copied {
            Ok(()) => {
                p.ring.push(at, ev);
                Ok(())
            }
            Err(e) => {
                // (the bytes at `at` are not read by anything: the copy failed to enqueue,
                // or enqueued with no event; wait for the stream so they may be reused)
                // SAFETY: a valid stream of the current context.
                let _ = unsafe { cr::stream::synchronize(stream) };
                p.spare.push(ev);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_take_the_next_bytes_in_order_and_wait_only_when_they_wrap_onto_a_live_one() {
        let mut r: Ring<u32> = Ring::new(256);
        let (a, w) = r.place(10).unwrap();
        assert_eq!((a.clone(), w), (0..64, vec![]), "aligned to 64 bytes");
        r.push(a, 1);
        let (b, w) = r.place(100).unwrap();
        assert_eq!((b.clone(), w), (64..192, vec![]));
        r.push(b, 2);
        // 100 more bytes do not fit before the end: back to 0, onto copies 1 and 2
        let (c, w) = r.place(100).unwrap();
        assert_eq!((c.clone(), w), (0..128, vec![1, 2]));
        r.push(c, 3);
        let (d, w) = r.place(64).unwrap();
        assert_eq!((d.clone(), w), (128..192, vec![]));
        r.push(d, 4);
        assert_eq!(r.in_flight(), 2);
        assert!(
            r.place(257).is_none(),
            "larger than the ring: copied another way"
        );
    }

    #[test]
    fn a_wrap_waits_for_the_newer_copies_it_overlaps_even_behind_an_older_one_it_does_not() {
        let mut r: Ring<u32> = Ring::new(256);
        // copy 1 near the end, then a wrap: copies 2 and 3 at the start (newer than 1)
        for (len, id) in [(192, 0), (64, 1)] {
            let (at, _) = r.place(len).unwrap();
            r.push(at, id);
        }
        assert_eq!(r.retire(|&e| e == 0), vec![0]);
        for id in [2, 3] {
            let (at, w) = r.place(64).unwrap();
            assert!(w.is_empty());
            r.push(at, id);
        }
        // 192 bytes from 128 do not fit: back to 0..192, over 2 and 3 but not 1 (192..256)
        let (at, w) = r.place(192).unwrap();
        assert_eq!((at, w), (0..192, vec![2, 3]));
        assert_eq!(r.in_flight(), 1);
    }

    #[test]
    fn finished_copies_retire_oldest_first_and_stop_at_an_unfinished_one() {
        let mut r: Ring<u32> = Ring::new(1024);
        for id in 1..=4 {
            let (at, _) = r.place(64).unwrap();
            r.push(at, id);
        }
        assert_eq!(r.retire(|&e| e != 3), vec![1, 2]);
        assert_eq!(r.in_flight(), 2);
        assert_eq!(r.retire(|_| true), vec![3, 4]);
        // an empty ring places from where it left off, waiting on nothing
        assert_eq!(r.place(64).unwrap(), (256..320, vec![]));
    }
}
