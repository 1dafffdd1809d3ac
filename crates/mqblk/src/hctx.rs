//! The hardware context (`struct blk_mq_hw_ctx`): one per hardware queue.
//!
//! It owns the queue's tags and request pool, hands requests to the driver,
//! keeps the requests the driver bounced back (`Busy`) on its dispatch list
//! and re-runs that list when a request completes (the kernel's restart), and
//! is the completion entry point (`end_request`).
//!
//! Relies on: tag.rs for tags and request slots, the driver's `queue_rq`,
//! and the client's completion sink for delivering completions.

use std::collections::VecDeque;
use std::fmt;
use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

use crate::completion::{BioSlot, ClientShared, Completion};
use crate::driver::{Driver, QueueRqResult};
use crate::request::{Request, RequestSlot, Rq, RqList, RqState, TagRelease, SECTOR_SHIFT};
use crate::status::Status;
use std::sync::Arc;

use crate::sched::SchedCtx;
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Mutex, Ordering, SerialRun};
use crate::tag::{AllocData, Tags};
use crate::timeout::TimeoutClock;
use std::sync::atomic::AtomicPtr;

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
}

/// A hardware queue of a device.
///
/// `Sync` by hand for one field: `sched_dispatch` is an `UnsafeCell` used
/// only by the thread that runs the dispatch list (`dispatch_run`).
pub struct Hctx {
    index: usize,
    pub(crate) tags: Tags,
    driver: Arc<dyn Driver>,
    /// Requests waiting to be re-issued after `Busy`, in order.
    dispatch: Mutex<VecDeque<Rq>>,
    dispatch_nr: AtomicU32,
    /// One thread at a time runs the dispatch list (so the list's order is
    /// the issue order); a run asked for meanwhile (a completion freed
    /// resources) makes the runner go round once more.
    dispatch_run: SerialRun,
    /// Set when the dispatch list must be run after a delay (nothing in
    /// flight will complete to restart it); served by the queue's worker.
    pub(crate) need_delayed_run: AtomicBool,
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
}

// SAFETY: every field is Sync except `sched_dispatch`, which only the
// thread that won `dispatch_run`'s `running` swap touches (SeqCst swap to
// take, SeqCst store to release: the next runner sees its writes).
unsafe impl Sync for Hctx {}
// SAFETY: nothing in an Hctx is tied to a thread.
unsafe impl Send for Hctx {}

impl fmt::Debug for Hctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hctx").field("index", &self.index).field("nr_tags", &self.tags.nr_tags()).finish()
    }
}

impl Hctx {
    pub(crate) fn new(
        index: usize,
        tags: Tags,
        driver: Arc<dyn Driver>,
        is_poll: bool,
        clock: Arc<TimeoutClock>,
    ) -> Self {
        let depth = tags.nr_tags() as usize;
        Self {
            index,
            tags,
            driver,
            dispatch: Mutex::new(VecDeque::with_capacity(depth)),
            dispatch_nr: AtomicU32::new(0),
            dispatch_run: SerialRun::default(),
            need_delayed_run: AtomicBool::new(false),
            sched: AtomicPtr::new(std::ptr::null_mut()),
            sched_dispatch: std::cell::UnsafeCell::new((
                AllocData::new(index as u32, index),
                RqList::with_capacity(SCHED_BATCH),
            )),
            is_poll,
            stats: HctxStats::default(),
            clock,
        }
    }

    /// Whether this is a poll queue (hipri requests, completed by polling).
    pub fn is_poll(&self) -> bool {
        self.is_poll
    }

    /// Reaps due completions of this queue on the calling thread (the
    /// driver's `poll`); returns how many.
    pub(crate) fn poll(&self) -> usize {
        self.driver.poll(self)
    }

    /// As `poll`, never sleeping (the driver's `reap`).
    pub(crate) fn reap(&self) -> usize {
        self.driver.reap(self)
    }

    /// The driver's fd that is readable when `reap` finds completions.
    pub(crate) fn poll_fd(&self) -> Option<std::os::fd::RawFd> {
        self.driver.poll_fd(self)
    }

    /// This queue's index (`hctx->queue_num`).
    pub fn index(&self) -> usize {
        self.index
    }

    /// Tags of this queue (reserved included).
    pub fn queue_depth(&self) -> u32 {
        self.tags.nr_tags()
    }

    /// Requests issued to the driver and not yet completed (a snapshot).
    pub fn nr_in_flight(&self) -> u64 {
        let queued = self.stats.queued.load(Ordering::Relaxed);
        let completed = self.stats.completed.load(Ordering::Relaxed);
        let busy = self.stats.busy.load(Ordering::Relaxed);
        queued.saturating_sub(completed).saturating_sub(busy)
    }

    /// Issues a freshly initialised request. Requests already bounced keep
    /// their place: a new one goes behind them.
    #[inline]
    pub(crate) fn issue(&self, rq: Rq, last: bool) {
        if self.dispatch_nr.load(Ordering::Acquire) != 0 {
            self.push_dispatch(rq);
            self.run_dispatch_list();
            return;
        }
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        self.start_request(&rq);
        if let QueueRqResult::Busy(rq) = self.driver.queue_rq(self, rq, last) {
            self.stats.busy.fetch_add(1, Ordering::Relaxed);
            self.push_dispatch(rq);
            if !last {
                self.driver.commit_rqs(self);
            }
            self.restart_if_idle();
        }
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
        self.driver.queue_rqs(self, rqs);
        if rqs.is_empty() {
            return false;
        }
        // Accounted like one `queue_rq` answered Busy; the rest were never
        // handed over.
        self.stats.queued.fetch_sub(rqs.len() as u64 - 1, Ordering::Relaxed);
        self.stats.busy.fetch_add(1, Ordering::Relaxed);
        self.push_dispatch_all(rqs);
        self.restart_if_idle();
        true
    }

    /// Arms `rq`'s timeout as it goes to the driver (`blk_mq_start_request`).
    #[inline(always)]
    fn start_request(&self, rq: &Rq) {
        rq.slot().deadline.store(self.clock.deadline(), Ordering::Release);
    }

    fn push_dispatch_all(&self, rqs: &mut RqList) {
        let mut list = self.dispatch.lock();
        // Back with the block layer: not timed until handed over again.
        list.extend(rqs.inspect(|rq| rq.slot().deadline.store(0, Ordering::Relaxed)));
        self.dispatch_nr.store(list.len() as u32, Ordering::Release);
    }

    fn push_dispatch(&self, rq: Rq) {
        rq.slot().deadline.store(0, Ordering::Relaxed);
        let mut list = self.dispatch.lock();
        list.push_back(rq);
        self.dispatch_nr.store(list.len() as u32, Ordering::Release);
    }

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
                let Some(rq) = list.pop_front() else { break };
                self.dispatch_nr.store(list.len() as u32, Ordering::Release);
                (rq, list.is_empty())
            };
            self.stats.queued.fetch_add(1, Ordering::Relaxed);
            self.start_request(&rq);
            match self.driver.queue_rq(self, rq, last) {
                QueueRqResult::Queued => issued_without_last = !last,
                QueueRqResult::Busy(rq) => {
                    self.stats.busy.fetch_add(1, Ordering::Relaxed);
                    rq.slot().deadline.store(0, Ordering::Relaxed);
                    let mut list = self.dispatch.lock();
                    list.push_front(rq);
                    self.dispatch_nr.store(list.len() as u32, Ordering::Release);
                    busy = true;
                    break;
                }
            }
        }
        if issued_without_last || busy {
            self.driver.commit_rqs(self);
        }
        busy
    }

    /// With nothing in flight no completion will restart the queue: ask the
    /// queue's worker for a delayed run instead.
    fn restart_if_idle(&self) {
        if self.nr_in_flight() == 0 {
            self.need_delayed_run.store(true, Ordering::Release);
        }
    }

    pub(crate) fn dispatch_len(&self) -> u32 {
        self.dispatch_nr.load(Ordering::Relaxed)
    }

    /// Completes a request: delivers the completion of each of its bios to
    /// the submitting client and frees its tag (`blk_mq_end_request`). With
    /// `status` an error, bios wholly within the first `ok_bytes` of the
    /// request still complete with `Ok` (a partial transfer).
    ///
    /// Everything needed is copied out of the slot before its tags go back:
    /// from then on another thread may initialise the slot for a new
    /// request, so no reference into it may be live (the kernel likewise
    /// reads what it needs before `blk_mq_put_tag`).
    ///
    /// # Safety
    /// `ptr` is the slot of an in-flight request and the caller owns it (it
    /// consumed the request's `Rq` token).
    pub(crate) unsafe fn end_request(ptr: NonNull<RequestSlot>, status: Status, ok_bytes: u64) {
        // SAFETY: slots live as long as the queue (see the Driver trait's
        // thread rules); the consumed token makes the request ours until
        // its tags go back, and this block ends every reference into it.
        let slot = unsafe { ptr.as_ref() };
        let (hctx, release, owner, split, completion) = {
            // SAFETY: as above.
            let rq = unsafe { &mut *slot.rq.get() };
            // SAFETY: slots point at their hctx, which outlives them.
            let hctx = unsafe { &*rq.hctx };
            if rq.nr_bios > 1 {
                let merged = MergedEnd::take(rq, status, ok_bytes);
                let release = TagRelease::of(slot, rq);
                hctx.release_slot(slot, release);
                // SAFETY: forwarded contract: the chain's bios are ours
                // until each is delivered.
                unsafe { merged.deliver() };
                hctx.restart_after_completion();
                return;
            }
            let mut completion = crate::completion::Completion::new(rq.user_data, status, rq.buf.take(), rq.origin);
            if rq.op == crate::request::Op::ZoneAppend && status.is_ok() {
                completion.append_offset = Some(rq.sector << SECTOR_SHIFT);
            }
            // (`split` and `view` are set on every issue: no need to reset them.)
            (hctx, TagRelease::of(slot, rq), rq.owner, rq.split, completion)
        };
        // Free the tag before telling the client: a client that submits again
        // as soon as it sees this completion then finds a free tag.
        hctx.release_slot(slot, release);
        // SAFETY: owners are client completion sinks kept alive by the queue
        // for its whole life; requests are only submitted with a valid one.
        let owner = unsafe { &*owner };
        if split != 0 {
            let last = split & crate::request::SPLIT_LAST != 0;
            owner.piece_done((split & !crate::request::SPLIT_LAST) - 1, status, last);
        } else {
            owner.deliver(completion);
        }
        hctx.restart_after_completion();
    }

    /// Marks a finished request's slot free and frees its tags, unless the
    /// timeout scanner holds it: then the release is stashed in the slot and
    /// the scanner frees the tags once the driver's handler has returned.
    #[inline(always)]
    fn release_slot(&self, slot: &RequestSlot, release: TagRelease) {
        slot.deadline.store(0, Ordering::Relaxed);
        self.stats.completed.fetch_add(1, Ordering::Relaxed);
        loop {
            if slot.try_complete() {
                slot.set_state(RqState::Idle);
                self.put_tags(release);
                return;
            }
            // SAFETY: the request is still ours: its tags are held and the
            // scanner reads the stash only after `hand_over` below.
            unsafe { (*slot.rq.get()).held_release = Some(release) };
            if slot.hand_over() {
                return;
            }
        }
    }

    /// The timeout scanner's end of a hold on `slot`: if the request
    /// completed while held, frees it (its stashed release) and restarts
    /// the queue, as the completer would have.
    pub(crate) fn end_timeout_hold(&self, slot: &RequestSlot) {
        if !slot.end_hold() {
            return;
        }
        // SAFETY: Complete | HELD: the completer stashed the release and
        // gave the request up; its tags are still held, so it is ours.
        let release = unsafe { (*slot.rq.get()).held_release.take() };
        slot.set_state(RqState::Idle);
        self.put_tags(release.expect("a held request hands over its release"));
        self.restart_after_completion();
    }

    /// A completion freed resources: re-run a waiting dispatch list, or a
    /// scheduler with requests left (they may have waited for a driver tag).
    #[inline(always)]
    fn restart_after_completion(&self) {
        if self.dispatch_nr.load(Ordering::Acquire) != 0 || self.sched_has_work() {
            self.run_dispatch_list();
        }
    }

    /// Frees a finished request's tags: its slot's tag, and with a
    /// scheduler (after telling it) the driver tag too.
    #[inline(always)]
    fn put_tags(&self, release: TagRelease) {
        match (self.sched(), release.sched) {
            (Some(s), Some(done)) => self.finish_sched(s, &done, release.driver_tag),
            _ => self.tags.put(release.tag),
        }
    }
}

/// The bios of a request that carries merged ones, taken out of its slot
/// (the slot is freed before they are delivered).
struct MergedEnd {
    front: *const BioSlot,
    back: *const BioSlot,
    /// The request's own bio (delivered between the front and back ones).
    own: Option<Completion>,
    owner: *const ClientShared,
    start: u64,
    status: Status,
    ok_bytes: u64,
}

impl MergedEnd {
    /// Each bio completes in device order, with `Ok` if it lies within
    /// `ok_bytes` (or `status` is `Ok`), else with `status`.
    #[cold]
    #[inline(never)]
    fn take(rq: &mut Request, status: Status, ok_bytes: u64) -> Self {
        debug_assert_eq!(rq.split, 0, "split pieces are never merged");
        let start = rq.sector;
        let own_end = if rq.back.is_null() {
            start + u64::from(rq.nr_sectors)
        } else {
            // SAFETY: `back` is a live slot of the chain, which the
            // request's owner (our caller) uses.
            unsafe { (*rq.back).with_data(|d| d.sector) }
        };
        let mut end = Self { front: rq.front, back: rq.back, own: None, owner: rq.owner, start, status, ok_bytes };
        end.own = Some(Completion::new(rq.user_data, end.bio_status(own_end), rq.buf.take(), rq.origin));
        rq.nr_bios = 1;
        end
    }

    fn bio_status(&self, end_sector: u64) -> Status {
        if self.status == Status::Ok || (end_sector - self.start) << SECTOR_SHIFT <= self.ok_bytes {
            Status::Ok
        } else {
            self.status
        }
    }

    /// Delivers every bio's completion, in device order.
    ///
    /// # Safety
    /// The caller ended the request that carried these bios; their slots
    /// are its until each is delivered.
    #[cold]
    #[inline(never)]
    unsafe fn deliver(mut self) {
        // SAFETY: forwarded contract; `complete_merged` reads the link
        // before delivering, after which the client may reuse the slot.
        unsafe {
            let mut p = self.front;
            while !p.is_null() {
                let end = (*p).with_data(|d| d.sector + u64::from(d.nr_sectors));
                p = (*p).complete_merged(self.bio_status(end));
            }
            (*self.owner).deliver(self.own.take().expect("taken with the request"));
            let mut p = self.back;
            while !p.is_null() {
                let end = (*p).with_data(|d| d.sector + u64::from(d.nr_sectors));
                p = (*p).complete_merged(self.bio_status(end));
            }
        }
    }
}
