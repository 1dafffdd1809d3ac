//! The hardware queue's dispatch side (block/blk-mq.c's
//! `blk_mq_dispatch_rq_list` and block/blk-mq-sched.c's dispatch): the list
//! of requests the driver bounced back, run again in order when resources
//! free up, and the scheduler's requests moved to the driver with driver
//! tags taken without sleeping.
//!
//! Restart without lost runs: a dispatcher that finds no driver tag stops;
//! every completion frees its driver tag (a SeqCst read-modify-write in the
//! bitmap) and then checks `has_work` (a SeqCst load of the elevator's
//! queued count); an inserter increments that count (SeqCst) before it
//! looks for a driver tag. In the single order of those operations, either
//! the completer sees the inserted request and runs the queue, or the
//! inserter's search sees the freed tag. One runner at a time, without
//! losing a run asked for meanwhile: `SerialRun` (sync.rs). Both are
//! loom-checked (loom_models.rs).
//!
//! Delayed runs: when nothing in flight will restart the queue (the driver
//! was busy with an empty queue, or the scheduler holds work back) the
//! queue's worker runs it at a due time, woken for it (queue/worker.rs).
//!
//! Relies on: sched/ for the elevator, tag.rs for driver tags, the queue's
//! worker for delayed runs.

use super::{HwCtx, NO_DELAYED_RUN, SCHED_BATCH};

/// The delay of a run nothing else will make: the kernel's 3 ms
/// (BLK_MQ_RESOURCE_DELAY in blk_mq_dispatch_rq_list; kyber and others
/// rely on the same).
pub(crate) const DELAYED_RUN_NS: u64 = 3_000_000;
use crate::driver::QueueRqResult;
use crate::sync::{AtomicBool, Ordering, Parker};

impl HwCtx {
    /// Re-issues the dispatch list in order until it is empty or the driver
    /// is busy again (the kernel's `blk_mq_dispatch_rq_list`), then feeds
    /// the driver from the scheduler.
    ///
    /// The list lock is never held across `queue_rq`: a driver may complete
    /// inline, and completion runs the list again. `SerialRun` keeps one
    /// runner at a time without losing a completion's restart.
    pub(crate) fn run_dispatch_list(&self) {
        let pass = || {
            let busy = self.dispatch_once();
            busy || self.dispatch_sched()
        };
        let more_work = || self.dispatch_len() != 0 || self.sched_has_work();
        if self.dispatch_run.run(pass, more_work) == Some(true) {
            self.restart_if_idle();
        }
    }

    /// One pass over the list; returns true if the driver was busy.
    fn dispatch_once(&self) -> bool {
        if self.dispatch_nr.load(Ordering::Acquire) == 0 {
            return false; // nothing bounced: no lock, no count
        }
        self.stats.run.fetch_add(1, Ordering::Relaxed);
        let mut issued_without_last = false;
        let mut busy = false;
        loop {
            let (rq, last) = {
                let mut list = self.dispatch.lock();
                // Still counted in `dispatch_nr` while in hand (see there).
                let Some(rq) = list.pop_front() else { break };
                (rq, list.is_empty())
            };
            self.stats.queued.fetch_add(1, Ordering::Relaxed);
            self.start_request(&rq);
            match self.driver.queue_rq(&self.hw, rq, last) {
                QueueRqResult::Queued => {
                    self.dispatch_nr.fetch_sub(1, Ordering::Release);
                    issued_without_last = !last;
                }
                QueueRqResult::Busy(rq) => {
                    self.stats.busy.fetch_add(1, Ordering::Relaxed);
                    self.trace_rq(&rq, crate::trace::Action::Requeue);
                    rq.slot().deadline.store(0, Ordering::Relaxed);
                    // Back in front, still counted.
                    self.dispatch.lock().push_front(rq);
                    busy = true;
                    break;
                }
            }
        }
        if issued_without_last || busy {
            self.driver.commit_rqs(&self.hw);
        }
        busy
    }

    /// Moves requests from the scheduler to the driver while both have
    /// some to give (only from `run_dispatch_list`, holding
    /// `dispatch_run`): batches of up to SCHED_BATCH, each with a driver tag,
    /// `last` on the final one. Returns true if the driver was busy (the
    /// rest waits on the dispatch list).
    pub(crate) fn dispatch_sched(&self) -> bool {
        let Some(s) = self.sched() else { return false };
        let index = self.index();
        // SAFETY: only called from `run_dispatch_list` by the thread holding
        // `dispatch_run`, so no one else touches the cell meanwhile.
        let (alloc, batch) = unsafe { &mut *self.sched_dispatch.get() };
        loop {
            let mut out_of_tags = false;
            while batch.len() < SCHED_BATCH && s.has_work(index) {
                let Some(got) = self.tags.get(alloc, false, true, || {}) else {
                    out_of_tags = true;
                    break;
                };
                match s.elevator.dispatch_request(index) {
                    Some(mut rq) => {
                        s.queued.fetch_sub(1, Ordering::Relaxed);
                        rq.set_driver_tag(got.tag);
                        batch.push_back(rq);
                    }
                    None => {
                        // Work the scheduler holds back (bfq idling, kyber
                        // out of tokens): a completion brings it back, and
                        // a delayed run in case none does: at the time the
                        // scheduler names (bfq's idle slice timer), else
                        // after the kernel's 3 ms.
                        self.tags.put(got.tag);
                        match s.elevator.next_dispatch_ns(index) {
                            Some(due_ns) => self.delay_run_at(due_ns),
                            None => self.delay_run(DELAYED_RUN_NS),
                        }
                        break;
                    }
                }
            }
            if batch.is_empty() {
                return false;
            }
            // Requests the driver cannot take keep their driver tags and
            // wait on the dispatch list.
            if self.queue_list(batch) {
                return true;
            }
            if out_of_tags {
                return false;
            }
        }
    }

    /// With nothing in flight no completion will restart the queue: ask the
    /// queue's worker for a delayed run instead.
    pub(super) fn restart_if_idle(&self) {
        if self.nr_in_flight() == 0 {
            self.delay_run(DELAYED_RUN_NS);
        }
    }

    /// Runs the dispatch list again after `delay_ns` (the kernel's
    /// blk_mq_delay_run_hw_queue).
    pub(crate) fn delay_run(&self, delay_ns: u64) {
        self.delay_run_at(crate::clock::now_ns().saturating_add(delay_ns));
    }

    /// Runs the dispatch list again at `due_ns` (`clock::now_ns`), or at the
    /// earlier time a run is already due. The worker is woken only when the
    /// due time moves earlier: a queue that keeps asking for the same run
    /// costs one atomic.
    pub(crate) fn delay_run_at(&self, due_ns: u64) {
        let earlier = self.delayed_run_ns.fetch_min(due_ns, Ordering::AcqRel) > due_ns;
        if earlier {
            self.kblockd.kick();
        }
    }

    /// The worker's side: if a delayed run is due at `now_ns`, take it and
    /// run the dispatch list. Returns when the next one is due (or
    /// `NO_DELAYED_RUN`).
    pub(crate) fn run_delayed(&self, now_ns: u64) -> u64 {
        let due = self.delayed_run_ns.load(Ordering::Acquire);
        if due > now_ns {
            return due;
        }
        if self.delayed_run_ns.compare_exchange(due, NO_DELAYED_RUN, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.stats.delayed_runs.fetch_add(1, Ordering::Relaxed);
            self.run_dispatch_list();
        }
        self.delayed_run_ns.load(Ordering::Acquire)
    }

    /// A completion freed resources: re-run a waiting dispatch list, or a
    /// scheduler with requests left (they may have waited for a driver tag).
    #[inline(always)]
    pub(super) fn restart_after_completion(&self) {
        if self.dispatch_nr.load(Ordering::Acquire) != 0 || self.sched_has_work() {
            self.run_dispatch_list();
        }
    }

    pub(crate) fn dispatch_len(&self) -> u32 {
        self.dispatch_nr.load(Ordering::Relaxed)
    }
}

/// What wakes the worker ("kblockd"): shared by the queue's hardware
/// queues, which kick it when a delayed run falls due earlier.
pub(crate) struct Kblockd {
    pub(crate) stop: AtomicBool,
    pub(crate) parker: Parker,
}

impl Kblockd {
    pub(crate) fn new() -> Self {
        Self { stop: AtomicBool::new(false), parker: Parker::new() }
    }

    /// Wakes the worker to look at the due times again (a wakeup before it
    /// parks is remembered).
    pub(crate) fn kick(&self) {
        self.parker.unpark();
    }
}
