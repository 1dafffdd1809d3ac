//! The hardware context's side of scheduling (block/blk-mq-sched.c):
//! inserting requests into the elevator, dispatching from it with driver
//! tags taken without sleeping, and finishing requests.
//!
//! Restart without lost runs: a dispatcher that finds no driver tag stops;
//! every completion frees its driver tag (a SeqCst read-modify-write in the
//! bitmap) and then checks `has_work` (a SeqCst load of the elevator's
//! queued count); an inserter increments that count (SeqCst) before it
//! looks for a driver tag. In the single order of those operations, either
//! the completer sees the inserted request and runs the queue, or the
//! inserter's search sees the freed tag.

use super::{DoneInfo, SchedCtx};
use crate::hctx::{Hctx, SCHED_BATCH};
use crate::request::{Rq, RqList};
use crate::sync::Ordering;
use crate::tag::AllocData;

impl SchedCtx {
    /// Whether the elevator has a request to dispatch now: one load when
    /// nothing is queued.
    #[inline(always)]
    fn has_work(&self, hctx: usize) -> bool {
        self.queued.load(Ordering::SeqCst) != 0 && self.elevator.has_work(hctx)
    }
}

impl Hctx {
    /// The scheduler of this hardware queue, if any.
    #[inline(always)]
    pub(crate) fn sched(&self) -> Option<&SchedCtx> {
        let p = self.sched.load(Ordering::Acquire);
        // SAFETY: a non-null pointer names a context the queue keeps alive
        // for its whole life (see `Hctx::sched`).
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
        s.elevator.insert_requests(self.index(), rqs);
        debug_assert!(rqs.is_empty(), "the elevator took every request");
        self.run_dispatch_list();
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
                        // out of tokens): a completion or, if none is due,
                        // the worker's delayed run brings it back.
                        self.tags.put(got.tag);
                        self.need_delayed_run.store(true, Ordering::Release);
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

    /// A request of the scheduler completed: tell it, then free the
    /// driver tag and the scheduler tag (copied out of the slot already:
    /// once the scheduler tag is free another client may reuse the slot).
    #[inline]
    pub(crate) fn finish_sched(&self, s: &SchedCtx, done: &DoneInfo, driver_tag: u32) {
        s.elevator.finish_request(self.index(), done);
        self.tags.put(driver_tag);
        s.tags.put(done.sched_tag);
    }
}
