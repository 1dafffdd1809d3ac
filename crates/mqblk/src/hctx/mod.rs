//! The hardware context (`struct blk_mq_hw_ctx`): one per hardware queue,
//! and the submit path of a request into it.
//!
//! It owns the queue's tags and request pool and hands requests to the
//! driver: straight (`issue`), as a plug's list (`issue_list`), or through
//! the scheduler (`submit`: insert, or dispatch at once when the scheduler
//! would pick it next). The rest of the hardware queue is in:
//! - dispatch.rs: the dispatch list of requests the driver bounced back
//!   (`Busy`), run again when a request completes (the kernel's restart),
//!   and the scheduler's dispatch with driver tags;
//! - end.rs: the completion entry point (`end_request`).
//!
//! Relies on: tag.rs for tags and request slots, the driver's `queue_rq`,
//! sched/ for the elevator, timeout.rs for arming deadlines.

mod dispatch;
pub(crate) use dispatch::Kblockd;
mod end;
pub(crate) mod timeout;

use std::collections::VecDeque;
use std::fmt;

use crossbeam_utils::CachePadded;

use crate::driver::{Driver, Hctx, QueueRqResult};
use crate::request::{Rq, RqList};
use std::sync::Arc;

use crate::sched::SchedCtx;
use crate::sync::{AtomicU32, AtomicU64, Mutex, Ordering, SerialRun};
use crate::tag::{AllocData, Tags};
use crate::trace::{Action, Tracer};
use std::sync::atomic::AtomicPtr;
use timeout::TimeoutClock;

/// Requests taken from a scheduler per dispatch batch (the kernel's
/// max_dispatch is the queue depth; a bound keeps `last` batches short).
pub(crate) const SCHED_BATCH: usize = 32;

/// Counters of one hardware context (the debugfs files of the same names).
#[derive(Debug, Default)]
pub(crate) struct HctxStats {
    /// Requests handed to `queue_rq` (re-issues after Busy included).
    pub(crate) queued: CachePadded<AtomicU64>,
    /// Requests the driver completed.
    pub(crate) completed: CachePadded<AtomicU64>,
    /// `queue_rq` calls that returned Busy.
    pub(crate) busy: AtomicU64,
    /// Runs of the dispatch list.
    pub(crate) run: AtomicU64,
    /// Delayed runs the queue's worker made when they fell due.
    pub(crate) delayed_runs: AtomicU64,
}

/// `HwCtx::delayed_run_ns` when no delayed run is pending.
pub(crate) const NO_DELAYED_RUN: u64 = u64::MAX;

/// A hardware queue of a device.
///
/// `Sync` by hand for one field: `sched_dispatch` is an `UnsafeCell` used
/// only by the thread that runs the dispatch list (`dispatch_run`).
pub(crate) struct HwCtx {
    index: usize,
    /// What the driver sees of this hardware queue.
    pub(crate) hw: Hctx,
    pub(crate) tags: Tags,
    driver: Arc<dyn Driver>,
    /// Requests waiting to be re-issued after `Busy`, in order.
    dispatch: Mutex<VecDeque<Rq>>,
    /// Requests on the dispatch list, plus the one a runner has taken off
    /// it and not yet handed over: while it is not zero, a new request goes
    /// behind them. Counting the one in hand keeps the order when the
    /// driver bounces it back (with only the list's length, a submission in
    /// that window found 0 and overtook it; Miri found it).
    dispatch_nr: AtomicU32,
    /// One thread at a time runs the dispatch list (so the list's order is
    /// the issue order); a run asked for meanwhile (a completion freed
    /// resources) makes the runner go round once more.
    dispatch_run: SerialRun,
    /// When the dispatch list must be run again though nothing in flight
    /// will complete to restart it (ns on `clock::now_ns`; `NO_DELAYED_RUN`:
    /// none): the kernel's blk_mq_delay_run_hw_queue, served by the
    /// queue's worker (queue/worker.rs), which `kblockd` wakes.
    pub(crate) delayed_run_ns: AtomicU64,
    pub(crate) kblockd: Arc<Kblockd>,
    /// The scheduler (null: none). Changed only while the queue is frozen;
    /// every context ever installed lives as long as the queue
    /// (`RequestQueue::sched_contexts`), so a reference never dangles.
    pub(crate) sched: AtomicPtr<SchedCtx>,
    /// Driver-tag allocation and the batch being dispatched from the
    /// scheduler: used only by the thread running the queue, which
    /// `dispatch_run` makes exclusive (see `dispatch_sched`).
    pub(crate) sched_dispatch: std::cell::UnsafeCell<(AllocData, RqList)>,
    /// A poll queue (HCTX_TYPE_POLL): its requests complete when polled.
    pub(crate) is_poll: bool,
    pub(crate) stats: HctxStats,
    /// The queue's timeout clock: a request's deadline is armed when it is
    /// handed to the driver.
    clock: Arc<TimeoutClock>,
    /// The queue's blktrace, if it is traced (trace/).
    pub(crate) trace: Option<Arc<Tracer>>,
}

// SAFETY: every field is Sync except `sched_dispatch`, which only the
// thread that won `dispatch_run`'s `running` swap touches (SeqCst swap to
// take, SeqCst store to release: the next runner sees its writes).
unsafe impl Sync for HwCtx {}
// SAFETY: nothing in an HwCtx is tied to a thread.
unsafe impl Send for HwCtx {}

impl fmt::Debug for HwCtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HwCtx").field("index", &self.index).field("nr_tags", &self.tags.nr_tags()).finish()
    }
}

impl HwCtx {
    pub(crate) fn new(
        index: usize,
        tags: Tags,
        driver: Arc<dyn Driver>,
        is_poll: bool,
        clock: Arc<TimeoutClock>,
        kblockd: Arc<Kblockd>,
    ) -> Self {
        let depth = tags.nr_tags() as usize;
        Self {
            index,
            hw: Hctx::new(index, tags.nr_tags(), is_poll),
            tags,
            driver,
            dispatch: Mutex::new(VecDeque::with_capacity(depth)),
            dispatch_nr: AtomicU32::new(0),
            dispatch_run: SerialRun::default(),
            delayed_run_ns: AtomicU64::new(NO_DELAYED_RUN),
            kblockd,
            sched: AtomicPtr::new(std::ptr::null_mut()),
            sched_dispatch: std::cell::UnsafeCell::new((
                AllocData::new(index as u32, index),
                RqList::with_capacity(SCHED_BATCH),
            )),
            is_poll,
            stats: HctxStats::default(),
            clock,
            trace: None,
        }
    }

    /// This hardware queue, recording its events in `trace`.
    pub(crate) fn traced(mut self, trace: Option<Arc<Tracer>>) -> Self {
        self.trace = trace;
        self
    }

    /// Records a request event (I, D, R) if the queue is traced.
    #[inline(always)]
    fn trace_rq(&self, rq: &Rq, action: Action) {
        if let Some(t) = &self.trace {
            t.request(action, rq.op(), rq.flags(), rq.sector(), rq.nr_sectors(), 0);
        }
    }

    /// Whether this is a poll queue (hipri requests, completed by polling).
    pub(crate) fn is_poll(&self) -> bool {
        self.is_poll
    }

    /// Reaps due completions of this queue on the calling thread (the
    /// driver's `poll`); returns how many.
    pub(crate) fn poll(&self) -> usize {
        self.driver.poll(&self.hw)
    }

    /// As `poll`, never sleeping (the driver's `reap`).
    pub(crate) fn reap(&self) -> usize {
        self.driver.reap(&self.hw)
    }

    /// The driver's fd that is readable when `reap` finds completions.
    pub(crate) fn poll_fd(&self) -> Option<std::os::fd::RawFd> {
        self.driver.poll_fd(&self.hw)
    }

    /// The driver's `set_notify_fd` for this queue.
    pub(crate) fn set_notify_fd(&self, fd: Option<std::os::fd::RawFd>) -> Result<(), crate::Error> {
        self.driver.set_notify_fd(&self.hw, fd)
    }

    /// This queue's index (`hctx->queue_num`).
    /// This hctx as request slots point at it (`Tags::bind`): type-erased,
    /// derived from a shared reference at its final address.
    pub(crate) fn erased(&self) -> *const () {
        (self as *const HwCtx).cast()
    }

    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Requests issued to the driver and not yet completed (a snapshot).
    pub(crate) fn nr_in_flight(&self) -> u64 {
        let queued = self.stats.queued.load(Ordering::Relaxed);
        let completed = self.stats.completed.load(Ordering::Relaxed);
        let busy = self.stats.busy.load(Ordering::Relaxed);
        queued.saturating_sub(completed).saturating_sub(busy)
    }

    /// The scheduler of this hardware queue, if any.
    #[inline(always)]
    pub(crate) fn sched(&self) -> Option<&SchedCtx> {
        let p = self.sched.load(Ordering::Acquire);
        // SAFETY: a non-null pointer names a context the queue keeps alive
        // for its whole life (see `HwCtx::sched`).
        unsafe { p.as_ref() }
    }

    /// The tags whose slots hold this queue's requests: the scheduler tags
    /// with a scheduler, else the driver tags.
    #[inline(always)]
    pub(crate) fn pool(&self) -> &crate::tag::Tags {
        self.sched().map_or(&self.tags, |s| &s.tags)
    }

    #[inline(always)]
    pub(crate) fn sched_has_work(&self) -> bool {
        self.sched().is_some_and(|s| s.has_work(self.index()))
    }

    /// Hands a new request on: into the scheduler (then runs the queue),
    /// or straight to the driver. `scratch` is an empty list to carry it;
    /// with `alloc` (the submitter's), a request the scheduler would
    /// dispatch next anyway goes to the driver at once (`dispatch_direct`).
    #[inline]
    pub(crate) fn submit(&self, rq: Rq, scratch: &mut RqList, alloc: Option<&mut AllocData>) {
        let Some(s) = self.sched() else { return self.issue(rq, true) };
        let rq = match alloc {
            Some(alloc) => match self.try_dispatch_direct(s, rq, alloc) {
                Ok(()) => return,
                Err(rq) => rq,
            },
            None => rq,
        };
        scratch.push_back(rq);
        self.insert(s, scratch);
    }

    /// The direct path: nothing queued, nothing bounced, a driver tag free,
    /// and the elevator agrees.
    fn try_dispatch_direct(&self, s: &SchedCtx, rq: Rq, alloc: &mut AllocData) -> Result<(), Rq> {
        if s.queued.load(Ordering::SeqCst) != 0 || self.dispatch_len() != 0 {
            return Err(rq);
        }
        let saved = std::mem::replace(&mut alloc.shallow_depth, u32::MAX);
        let got = self.tags.get(alloc, false, true, || {});
        alloc.shallow_depth = saved;
        let Some(got) = got else { return Err(rq) };
        match s.elevator.dispatch_direct(self.index(), rq) {
            Ok(mut rq) => {
                rq.set_driver_tag(got.tag);
                self.issue(rq, true);
                Ok(())
            }
            Err(rq) => {
                self.tags.put(got.tag);
                Err(rq)
            }
        }
    }

    /// `submit` for a plug's list of requests of this queue.
    pub(crate) fn submit_list(&self, rqs: &mut RqList) {
        match self.sched() {
            None => self.issue_list(rqs),
            Some(s) => self.insert(s, rqs),
        }
    }

    fn insert(&self, s: &SchedCtx, rqs: &mut RqList) {
        // SeqCst: the inserter's half of the restart argument (module docs).
        s.queued.fetch_add(rqs.len() as u32, Ordering::SeqCst);
        crate::sync::dekker_fence();
        if let Some(t) = &self.trace {
            for rq in rqs.iter() {
                t.request(Action::Insert, rq.op(), rq.flags(), rq.sector(), rq.nr_sectors(), 0);
            }
        }
        s.elevator.insert_requests(self.index(), rqs);
        debug_assert!(rqs.is_empty(), "the elevator took every request");
        self.run_dispatch_list();
    }

    /// Issues a freshly initialised request. Requests already bounced keep
    /// their place: a new one goes behind them.
    #[inline(always)]
    pub(crate) fn issue(&self, rq: Rq, last: bool) {
        self.issue_as(rq, last, true);
    }

    /// `issue` for the plain path (client/submit.rs `submit_plain`), which
    /// a traced queue never takes (`RequestQueue::plain_max_bytes` is 0
    /// there): no test for a D event. That load and branch cost the plain
    /// path 2 instructions per I/O, and the code around them 2 more.
    #[inline(always)]
    pub(crate) fn issue_plain(&self, rq: Rq, last: bool) {
        debug_assert!(self.trace.is_none(), "a traced queue's bios take the general path");
        self.issue_as(rq, last, false);
    }

    /// `issue`, recording D if `may_trace` and the queue is traced.
    #[inline(always)]
    fn issue_as(&self, rq: Rq, last: bool, may_trace: bool) {
        if self.dispatch_nr.load(Ordering::Acquire) != 0 {
            return self.issue_behind(rq);
        }
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        if may_trace {
            self.trace_rq(&rq, Action::Issue);
        }
        self.arm_deadline(&rq);
        if let QueueRqResult::Busy(rq) = self.driver.queue_rq(&self.hw, rq, last) {
            self.bounced(rq, last);
        }
    }

    /// `issue` with requests waiting on the dispatch list: behind them.
    #[inline(never)]
    fn issue_behind(&self, rq: Rq) {
        self.trace_rq(&rq, Action::Insert);
        self.push_dispatch(rq);
        self.run_dispatch_list();
    }

    /// The driver answered Busy: the request waits on the dispatch list.
    #[inline(never)]
    fn bounced(&self, rq: Rq, last: bool) {
        self.stats.busy.fetch_add(1, Ordering::Relaxed);
        self.trace_rq(&rq, Action::Requeue);
        self.push_dispatch(rq);
        if !last {
            self.driver.commit_rqs(&self.hw);
        }
        self.restart_if_idle();
    }

    /// Issues a plug's batch of requests for this queue: through the
    /// driver's `queue_rqs` (by default `queue_rq` per request, `last` on the
    /// final one). What the driver leaves in `rqs` (it was busy) goes on the
    /// dispatch list, in order. `rqs` is empty on return.
    pub(crate) fn issue_list(&self, rqs: &mut RqList) {
        if rqs.is_empty() {
            return;
        }
        if self.dispatch_nr.load(Ordering::Acquire) != 0 {
            rqs.iter().for_each(|rq| self.trace_rq(rq, Action::Insert));
            self.push_dispatch_all(rqs);
            self.run_dispatch_list();
            return;
        }
        self.queue_list(rqs);
    }

    /// Hands `rqs` to the driver's `queue_rqs`; what it leaves (it was busy)
    /// waits on the dispatch list, in order. Returns true if it was busy.
    pub(crate) fn queue_list(&self, rqs: &mut RqList) -> bool {
        let n = rqs.len() as u64;
        self.stats.queued.fetch_add(n, Ordering::Relaxed);
        for rq in rqs.iter() {
            self.start_request(rq);
        }
        self.driver.queue_rqs(&self.hw, rqs);
        if rqs.is_empty() {
            return false;
        }
        // Accounted like one `queue_rq` answered Busy; the rest were never
        // handed over.
        self.stats.queued.fetch_sub(rqs.len() as u64 - 1, Ordering::Relaxed);
        self.stats.busy.fetch_add(1, Ordering::Relaxed);
        rqs.iter().for_each(|rq| self.trace_rq(rq, Action::Requeue));
        self.push_dispatch_all(rqs);
        self.restart_if_idle();
        true
    }

    /// Arms `rq`'s timeout as it goes to the driver (`blk_mq_start_request`,
    /// where the kernel records D too).
    #[inline(always)]
    pub(super) fn start_request(&self, rq: &Rq) {
        self.trace_rq(rq, Action::Issue);
        self.arm_deadline(rq);
    }

    /// `start_request` without the D event (`issue_plain`).
    #[inline(always)]
    fn arm_deadline(&self, rq: &Rq) {
        rq.slot().deadline.store(self.clock.deadline(), Ordering::Release);
    }

    fn push_dispatch_all(&self, rqs: &mut RqList) {
        let n = rqs.len() as u32;
        let mut list = self.dispatch.lock();
        // Back with the block layer: not timed until handed over again.
        list.extend(rqs.inspect(|rq| rq.slot().deadline.store(0, Ordering::Relaxed)));
        self.dispatch_nr.fetch_add(n, Ordering::Release);
    }

    fn push_dispatch(&self, rq: Rq) {
        rq.slot().deadline.store(0, Ordering::Relaxed);
        let mut list = self.dispatch.lock();
        list.push_back(rq);
        self.dispatch_nr.fetch_add(1, Ordering::Release);
    }
}
