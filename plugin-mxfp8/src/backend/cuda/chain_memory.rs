//! Gate memory for the chained GEMM (`MXHOST_MX_CHAIN` `auto` or `on`): annexes are not
//! filled for an operand whose last chained GEMM had its gate closed.
//!
//! The chained GEMM's gate is decided on the device after the quantizers have paid for the
//! annexes (about twice a plain quantizer's time). On data whose residuals close it (outlier
//! channels, heavy tails: docs/perf.md runs 104 and 138) that cost buys nothing, step after
//! step, and the `on` step read 7–9 % slower than the default path on shape c. The gate closes
//! for the data, not for one call, so this module remembers it per operand: each chained GEMM's
//! status-merge kernel also writes its two status words into a slot of mapped pinned host
//! memory (no synchronization: the host reads the slot whenever it next quantizes that
//! operand, and keeps its previous verdict while the slot is still pending). An operand whose
//! last verdict is "closed" is quantized without its annex — the plain quantizer, and the
//! annex's status word set to [`STATUS_NOT_FILLED`] so no chained kernel could take it — and
//! its GEMM runs the default path. Every [`REPROBE_EVERY`]th call fills the annex again, so
//! the chained GEMM comes back when the data changes.
//!
//! An operand is known by its device, the address of the buffer it is quantized from and its
//! role (shape, transposed copy or not): a training loop quantizes X, dY and W from the same
//! buffers step after step. A buffer at a new address starts with no verdict (the annex is
//! filled). Results never depend on this: both paths compute the same exact product.
//!
//! On by default under `on` since docs/perf.md runs 141–142 (H200, H100), and under `auto` since
//! run 170: it made the `on` step
//! with outlier channels 4–6 % faster than without it on a, b and c, and changed nothing
//! measurable where the gates stay open. `MXHOST_MX_CHAIN_MEMORY=0` turns it off (A/B timing).
//! Off under `always` (tests want the chained GEMM wherever it can run) and under
//! `MXHOST_MX_CHAIN_VERIFY` (it checks the annexes).

use super::chain::ChainMode;
use super::chain_annex::AnnexRole;
use super::device::Call;
use cudarc::driver::sys as drv_sys;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

/// The status flag a skipped annex carries (beside mx_reencode.cuh's `MX_RES_*` 1, 2 and 4):
/// any flag closes the gate.
pub(super) const STATUS_NOT_FILLED: u64 = 8;

/// Every how many calls an operand whose gate closed gets its annex again.
pub(super) const REPROBE_EVERY: u32 = 16;

/// Operands remembered (least recently used forgotten first).
const ENTRIES: usize = 128;

/// Status slots of mapped pinned memory, used round-robin by chained GEMMs.
const SLOTS: usize = 256;

/// Annex addresses remembered with their operand (ABI 1.3 annexes live as long as their
/// tensor; a training step holds a few).
const ANNEXES: usize = 256;

/// An operand as the gate memory knows it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct OperandKey {
    /// The device (its `Dev`'s address).
    pub(super) dev: usize,
    /// The buffer the tensor was quantized from.
    pub(super) input: u64,
    pub(super) role: AnnexRole,
    /// The transposed result of a quantize call (Wᵀ for dgrad), not the tensor itself.
    pub(super) transposed: bool,
}

impl OperandKey {
    pub(super) fn new(call: &Call, input: u64, role: AnnexRole, transposed: bool) -> OperandKey {
        OperandKey {
            dev: call.dev as *const _ as usize,
            input,
            role,
            transposed,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Verdict {
    Unknown,
    Open,
    Closed,
}

/// A chained GEMM's status slot that an operand waits on.
#[derive(Clone, Copy, Debug)]
struct Pending {
    slot: usize,
    generation: u64,
    limit: i32,
}

#[derive(Debug)]
struct Entry {
    key: OperandKey,
    verdict: Verdict,
    /// Calls since the verdict was read (the re-probe counter).
    calls: u32,
    pending: Option<Pending>,
    last_used: u64,
}

/// The gate memory's bookkeeping, apart from the pinned slots (read through a closure, so
/// the tests can drive it without a GPU).
#[derive(Debug, Default)]
pub(super) struct Book {
    entries: Vec<Entry>,
    /// Each slot's generation: bumped whenever a GEMM takes the slot, so a waiter whose slot
    /// was taken over reads nothing from it.
    generations: Vec<u64>,
    next_slot: usize,
    /// Annex address → the operand it was last made for, and whether it was filled.
    annexes: Vec<(u64, OperandKey, bool)>,
    clock: u64,
}

impl Book {
    /// The index of `key`'s entry, made (or taking the least recently used one's place) when
    /// there is none, and marked used.
    fn entry(&mut self, key: OperandKey) -> usize {
        self.clock += 1;
        let clock = self.clock;
        let i = match self.entries.iter().position(|e| e.key == key) {
            Some(i) => i,
            None => {
                let fresh = Entry {
                    key,
                    verdict: Verdict::Unknown,
                    calls: 0,
                    pending: None,
                    last_used: clock,
                };
                if self.entries.len() < ENTRIES {
                    self.entries.push(fresh);
                    self.entries.len() - 1
                } else {
                    let oldest = (0..self.entries.len())
                        .min_by_key(|&i| self.entries[i].last_used)
                        .expect("ENTRIES > 0");
                    self.entries[oldest] = fresh;
                    oldest
                }
            }
        };
        self.entries[i].last_used = clock;
        i
    }

    /// Whether this quantize call should fill `key`'s annex. `read(slot)` gives a slot's two
    /// status words once the GEMM that took it has written them.
    pub(super) fn wants_annex(
        &mut self,
        key: OperandKey,
        read: impl Fn(usize) -> Option<[i32; 2]>,
    ) -> bool {
        let i = self.entry(key);
        let e = &mut self.entries[i];
        if let Some(p) = e.pending {
            if self.generations.get(p.slot) != Some(&p.generation) {
                e.pending = None; // taken over by a later GEMM: keep the last verdict
            } else if let Some([flags, count]) = read(p.slot) {
                e.verdict = if flags != 0 || count > p.limit {
                    Verdict::Closed
                } else {
                    Verdict::Open
                };
                e.pending = None;
                e.calls = 0;
            }
        }
        e.calls = e.calls.saturating_add(1);
        e.verdict != Verdict::Closed || e.calls.is_multiple_of(REPROBE_EVERY)
    }

    /// Remembers that the annex at `addr` belongs to `key` and whether it was filled.
    pub(super) fn note_annex(&mut self, addr: u64, key: OperandKey, filled: bool) {
        self.annexes.retain(|(a, _, _)| *a != addr);
        if self.annexes.len() == ANNEXES {
            self.annexes.remove(0);
        }
        self.annexes.push((addr, key, filled));
    }

    /// The operand an annex was made for and whether it was filled, if it is remembered.
    pub(super) fn annex(&self, addr: u64) -> Option<(OperandKey, bool)> {
        self.annexes
            .iter()
            .find(|(a, _, _)| *a == addr)
            .map(|&(_, k, filled)| (k, filled))
    }

    /// Takes the next status slot for a chained GEMM over `keys` with the gate's residual
    /// `limit`; the caller writes the slot's sentinel and hands it to the status merge.
    pub(super) fn take_slot(&mut self, keys: &[OperandKey], limit: i32) -> usize {
        if self.generations.len() < SLOTS {
            self.generations.resize(SLOTS, 0);
        }
        let slot = self.next_slot;
        self.next_slot = (slot + 1) % SLOTS;
        self.generations[slot] += 1;
        let generation = self.generations[slot];
        for &k in keys {
            let i = self.entry(k);
            self.entries[i].pending = Some(Pending {
                slot,
                generation,
                limit,
            });
        }
        slot
    }
}

/// Whether the gate memory runs: `on`, unless `MXHOST_MX_CHAIN_MEMORY=0` or VERIFY.
pub(super) fn active(mode: ChainMode) -> bool {
    static V: OnceLock<Option<String>> = OnceLock::new();
    let v = V.get_or_init(|| std::env::var(MEMORY_VAR).ok());
    wanted(mode, v.as_deref(), super::chain_verify::enabled())
}

const MEMORY_VAR: &str = "MXHOST_MX_CHAIN_MEMORY";

/// [`active`]'s rule: under `on` and `auto` unless the variable turns it off or VERIFY checks
/// the annexes (it needs them all filled); never under `off` or `always`.
fn wanted(mode: ChainMode, var: Option<&str>, verify: bool) -> bool {
    matches!(mode, ChainMode::On | ChainMode::Auto) && super::flag_value(var, true) && !verify
}

/// The mapped pinned slots: `SLOTS` pairs of i32 the status merges write.
struct Slots {
    host: *mut AtomicI32,
    device: u64,
}

// SAFETY: the slots are process-lifetime pinned memory, only touched through atomics.
unsafe impl Send for Slots {}
unsafe impl Sync for Slots {}

impl Slots {
    fn word(&self, slot: usize, i: usize) -> &AtomicI32 {
        debug_assert!(slot < SLOTS && i < 2);
        // SAFETY: `host` holds 2 * SLOTS i32 for the life of the process.
        unsafe { &*self.host.add(2 * slot + i) }
    }

    fn read(&self, slot: usize) -> Option<[i32; 2]> {
        // The kernel writes the count, fences, then the flags: flags ≥ 0 means both are in.
        let flags = self.word(slot, 0).load(Ordering::Acquire);
        let count = self.word(slot, 1).load(Ordering::Acquire);
        (flags >= 0 && count >= 0).then_some([flags, count])
    }
}

/// The slots, allocated on first use (a context is current then); `None` when the driver
/// refuses, and the gate memory then stays off.
fn slots() -> Option<&'static Slots> {
    static S: OnceLock<Option<Slots>> = OnceLock::new();
    S.get_or_init(|| {
        let bytes = SLOTS * 8;
        let flags = drv_sys::CU_MEMHOSTALLOC_PORTABLE | drv_sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: plain allocation; the memory is never freed (process lifetime), so the
        // device may write a slot at any time.
        let host = unsafe { cudarc::driver::result::malloc_host(bytes, flags) }.ok()?;
        let mut device = 0;
        // SAFETY: `host` is mapped pinned memory just allocated with DEVICEMAP.
        let got = unsafe { drv_sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) };
        if got != drv_sys::CUresult::CUDA_SUCCESS {
            return None;
        }
        let host = host as *mut AtomicI32;
        for i in 0..2 * SLOTS {
            // SAFETY: within the allocation; i32-aligned (page-aligned base).
            unsafe { host.add(i).write(AtomicI32::new(-1)) };
        }
        Some(Slots { host, device })
    })
    .as_ref()
}

fn book() -> std::sync::MutexGuard<'static, Book> {
    static B: OnceLock<Mutex<Book>> = OnceLock::new();
    B.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether to fill `key`'s annex in this quantize call (always, when the memory is off).
pub(super) fn wants_annex(mode: ChainMode, key: OperandKey) -> bool {
    match (active(mode), slots()) {
        (true, Some(s)) => book().wants_annex(key, |slot| s.read(slot)),
        _ => true,
    }
}

/// Records an annex this quantize call made for `key`.
pub(super) fn note_annex(addr: u64, key: OperandKey, filled: bool) {
    book().note_annex(addr, key, filled);
}

/// The operand an annex was made for, and whether it was filled (`None`: not made under the
/// gate memory).
pub(super) fn annex(addr: u64) -> Option<(OperandKey, bool)> {
    book().annex(addr)
}

/// A slot for the status merge of a chained GEMM over `keys` (device address; 0 when the
/// memory is off or no operand is known).
pub(super) fn status_slot(mode: ChainMode, keys: &[OperandKey], limit: i32) -> u64 {
    let (true, Some(s), false) = (active(mode), slots(), keys.is_empty()) else {
        return 0;
    };
    let mut book = book();
    let slot = book.take_slot(keys, limit);
    // (under the lock: no reader sees the slot's new owner before its sentinel)
    s.word(slot, 0).store(-1, Ordering::Release);
    s.word(slot, 1).store(-1, Ordering::Release);
    s.device + 8 * slot as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn key(input: u64) -> OperandKey {
        OperandKey {
            dev: 1,
            input,
            role: AnnexRole::A {
                rows: 128,
                red: 256,
            },
            transposed: false,
        }
    }

    /// Slots as the device would leave them: `None` until "written".
    struct FakeSlots(RefCell<Vec<Option<[i32; 2]>>>);

    impl FakeSlots {
        fn new() -> FakeSlots {
            FakeSlots(RefCell::new(vec![None; SLOTS]))
        }
        fn write(&self, slot: usize, words: [i32; 2]) {
            self.0.borrow_mut()[slot] = Some(words);
        }
        fn read(&self, slot: usize) -> Option<[i32; 2]> {
            self.0.borrow()[slot]
        }
    }

    /// One training step of one GEMM over X and W: both quantized (is each annex filled?),
    /// then the GEMM takes a slot if both were, and "runs" with `status`.
    fn step(b: &mut Book, s: &FakeSlots, status: [i32; 2], complete: bool) -> (bool, bool) {
        let (x, w) = (key(0x1000), key(0x2000));
        let fx = b.wants_annex(x, |i| s.read(i));
        let fw = b.wants_annex(w, |i| s.read(i));
        if fx && fw {
            let slot = b.take_slot(&[x, w], 100);
            s.0.borrow_mut()[slot] = None;
            if complete {
                s.write(slot, status);
            }
        }
        (fx, fw)
    }

    #[test]
    fn a_closed_gate_skips_the_annexes_until_the_reprobe() {
        let (mut b, s) = (Book::default(), FakeSlots::new());
        // first step: nothing known, both filled; the gate closes on the residual count
        assert_eq!(step(&mut b, &s, [0, 101], true), (true, true));
        // then skipped, both in step, until the 16th call re-probes
        for i in 1..REPROBE_EVERY {
            assert_eq!(step(&mut b, &s, [0, 0], true), (false, false), "call {i}");
        }
        // the re-probe finds the gate open: filled from then on
        assert_eq!(step(&mut b, &s, [0, 5], true), (true, true));
        for _ in 0..3 * REPROBE_EVERY {
            assert_eq!(step(&mut b, &s, [0, 5], true), (true, true));
        }
        // a flag (overflow, NaN/Inf) closes it as well
        assert_eq!(step(&mut b, &s, [2, 0], true), (true, true));
        assert_eq!(step(&mut b, &s, [0, 0], true), (false, false));
    }

    #[test]
    fn a_pending_slot_keeps_the_last_verdict() {
        let (mut b, s) = (Book::default(), FakeSlots::new());
        // the host runs ahead: the first GEMM's slot is not written yet
        assert_eq!(step(&mut b, &s, [0, 500], false), (true, true));
        assert_eq!(step(&mut b, &s, [0, 500], false), (true, true));
        // a later GEMM writes its slot: closed
        assert_eq!(step(&mut b, &s, [0, 500], true), (true, true));
        assert_eq!(step(&mut b, &s, [0, 500], true), (false, false));
    }

    #[test]
    fn a_slot_taken_over_is_not_read_for_an_older_gemm() {
        let (mut b, s) = (Book::default(), FakeSlots::new());
        let x = key(0x1000);
        assert!(b.wants_annex(x, |i| s.read(i)));
        let slot = b.take_slot(&[x], 100);
        // SLOTS later GEMMs over other operands wrap around onto the same slot
        for i in 0..SLOTS {
            b.take_slot(&[key(0x9000 + (i % 4) as u64)], 100);
        }
        s.write(slot, [1, 0]); // written by the newest owner: closed for it, not for x
        assert!(b.wants_annex(x, |i| s.read(i)));
        assert!(b.wants_annex(x, |i| s.read(i)));
    }

    #[test]
    fn operands_are_told_apart_and_the_oldest_forgotten() {
        let (mut b, s) = (Book::default(), FakeSlots::new());
        let (x, dy) = (key(0x1000), key(0x3000));
        let mut xt = x;
        xt.transposed = true;
        for k in [x, dy, xt] {
            assert!(b.wants_annex(k, |i| s.read(i)));
        }
        let slot = b.take_slot(&[x], 100);
        s.write(slot, [0, 1000]);
        assert!(!b.wants_annex(x, |i| s.read(i)), "x closed");
        assert!(b.wants_annex(dy, |i| s.read(i)), "dY has its own verdict");
        assert!(
            b.wants_annex(xt, |i| s.read(i)),
            "so has the transposed copy"
        );
        for i in 0..ENTRIES as u64 {
            b.wants_annex(key(0x10_0000 + i), |i| s.read(i));
        }
        assert!(b.entries.len() == ENTRIES);
        assert!(b.wants_annex(x, |i| s.read(i)), "forgotten: filled again");
    }

    #[test]
    fn the_memory_runs_under_on_unless_turned_off() {
        for unset in [None, Some(""), Some("1"), Some("on")] {
            assert!(wanted(ChainMode::On, unset, false), "{unset:?}");
        }
        for off in [Some("0"), Some(" off "), Some("false")] {
            assert!(!wanted(ChainMode::On, off, false), "{off:?}");
        }
        assert!(
            !wanted(ChainMode::On, None, true),
            "VERIFY needs every annex filled"
        );
        assert!(!wanted(ChainMode::Always, None, false));
        assert!(wanted(ChainMode::Auto, None, false));
        assert!(!wanted(ChainMode::Off, Some("1"), false));
    }

    #[test]
    fn annexes_remember_their_operand() {
        let mut b = Book::default();
        b.note_annex(0x100, key(1), false);
        b.note_annex(0x200, key(2), true);
        assert_eq!(b.annex(0x100), Some((key(1), false)));
        b.note_annex(0x100, key(3), true);
        assert_eq!(b.annex(0x100), Some((key(3), true)));
        assert_eq!(b.annex(0x300), None);
        for i in 0..ANNEXES as u64 {
            b.note_annex(0x1000 + i, key(i), true);
        }
        assert_eq!(b.annexes.len(), ANNEXES);
        assert_eq!(b.annex(0x100), None, "the oldest forgotten");
    }
}
