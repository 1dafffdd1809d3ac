//! The block layer's own synchronisation protocols: the queue's door
//! (freeze) and one-runner-at-a-time dispatch, both Dekker pairs built on
//! mqblk-sync's loom-swappable primitives, which this module re-exports for
//! the rest of the crate.
//!
//! Relies on: mqblk-sync (atomics, locks, parking, `dekker_fence`).

pub(crate) use mqblk_sync::{dekker_fence, Arc, Mutex, Ordering, Parker, SleepGate, UnsafeCell};
pub(crate) use mqblk_sync::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};

/// The queue's door (the kernel's queue freeze): submitters pass it, a
/// freezer closes it and waits until no one is inside. Each submitter has
/// its own `entered` flag; the door is one `frozen` flag. A Dekker pair:
/// the submitter stores `entered` then reads `frozen`, the freezer stores
/// `frozen` then reads every `entered`, all SeqCst, so at least one of them
/// sees the other: no submitter is inside while the freezer believes the
/// queue empty. Model-checked in loom_models.rs.
pub(crate) mod door {
    use super::{dekker_fence, AtomicBool, Ordering};

    /// Tries to enter; false (and not inside) if the door is closed.
    #[inline(always)]
    pub(crate) fn enter(entered: &AtomicBool, frozen: &AtomicBool) -> bool {
        entered.store(true, Ordering::SeqCst);
        dekker_fence();
        if frozen.load(Ordering::SeqCst) {
            entered.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    #[inline(always)]
    pub(crate) fn leave(entered: &AtomicBool) {
        entered.store(false, Ordering::Release);
    }

    /// Closes the door; then `is_inside` on every submitter tells whether
    /// the freezer must still wait.
    pub(crate) fn close(frozen: &AtomicBool) {
        frozen.store(true, Ordering::SeqCst);
        dekker_fence();
    }

    pub(crate) fn is_inside(entered: &AtomicBool) -> bool {
        entered.load(Ordering::SeqCst)
    }

    pub(crate) fn open(frozen: &AtomicBool) {
        frozen.store(false, Ordering::SeqCst);
    }
}

/// One runner at a time, and no run lost: what the hardware queue's
/// dispatch list (and the scheduler behind it) needs. A run asked for while
/// another thread runs makes that runner go round once more instead of
/// running in parallel: the requester stores `rerun` then reads `running`,
/// the runner stores `running = false` then reads `rerun` (all SeqCst), so
/// one of them sees the other. Uncontended, a run costs two locked
/// instructions. loom: `loom_models::loom_dispatch_rerun_*`.
#[derive(Debug, Default)]
pub(crate) struct SerialRun {
    running: AtomicBool,
    rerun: AtomicBool,
}

impl SerialRun {
    /// Runs `pass` (which returns whether the driver was busy) until no run
    /// was asked for meanwhile or `more_work` finds nothing left. Returns
    /// the last pass's result, or None if another thread took the run over.
    pub(crate) fn run(&self, mut pass: impl FnMut() -> bool, more_work: impl Fn() -> bool) -> Option<bool> {
        loop {
            if self.running.swap(true, Ordering::SeqCst) {
                // Someone runs: ask for another round. If it released before
                // our request became visible it may not see it, so check:
                // still running means it will (it reads `rerun` after
                // releasing), else run ourselves.
                // RMWs on both sides of the Dekker pair (a SeqCst store is
                // an xchg on x86 anyway): loom models the pair faithfully
                // only with RMWs and fences.
                self.rerun.swap(true, Ordering::SeqCst);
                dekker_fence();
                if self.running.load(Ordering::SeqCst) {
                    return None;
                }
                continue;
            }
            // Acquire: a request we clear here must be served by this pass,
            // so the pass must see what the requester did before asking
            // (pairs with its SeqCst store). A Relaxed load let loom find a
            // lost run: the request cleared, the work it announced unseen.
            if self.rerun.load(Ordering::Acquire) {
                self.rerun.store(false, Ordering::SeqCst);
            }
            let busy = pass();
            self.running.swap(false, Ordering::SeqCst);
            dekker_fence();
            if !(self.rerun.load(Ordering::SeqCst) && more_work()) {
                return Some(busy);
            }
        }
    }
}
