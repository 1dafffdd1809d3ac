//! The completion entry point (`blk_mq_end_request`): a request's bios
//! complete to their clients and its tags go back.
//!
//! Everything the completion needs is copied out of the request slot before
//! its tags are freed (`TagRelease`, `MergedEnd`): once a tag is free another
//! thread may initialise the slot. A request the timeout scanner holds is
//! freed by the scanner instead (`end_timeout_hold`, timeout.rs).
//!
//! Relies on: request/ for the slot and its lifecycle, completion.rs for
//! delivering to clients, sched/ for `finish_request`.

use super::HwCtx;
use crate::completion::{BioSlot, Completion};
use crate::request::{Ending, Owner, Request, RequestSlot, Rq, TagRelease, SECTOR_SHIFT};
use crate::sched::{DoneInfo, SchedCtx};
use crate::status::Status;
use crate::sync::Ordering;
use crate::trace::Action;

impl HwCtx {
    /// The hardware context a request slot belongs to (request/'s
    /// type-erased `hctx`, set once by `Tags::bind`).
    ///
    /// # Safety
    /// `hctx` is a slot's request's `hctx`: it points at the hctx of the
    /// tag set holding the slot, which outlives every request of the queue
    /// (so any lifetime the caller needs while it owns the request).
    #[inline(always)]
    unsafe fn of<'a>(hctx: *const ()) -> &'a HwCtx {
        debug_assert!(!hctx.is_null(), "a request slot not bound to its hctx");
        // SAFETY: forwarded contract; the pointer was made from a `&HwCtx`.
        unsafe { &*hctx.cast::<HwCtx>() }
    }

    /// Completes a request: delivers the completion of each of its bios to
    /// the submitting client and frees its tag (`blk_mq_end_request`). With
    /// `status` an error, bios wholly within the first `ok_bytes` of the
    /// request still complete with `Ok` (a partial transfer).
    ///
    /// Everything needed is copied out of the slot before its tags go back:
    /// from then on another thread may initialise the slot for a new
    /// request, so nothing of it may be used (the kernel likewise reads
    /// what it needs before `blk_mq_put_tag`): `Ending::finish` takes the
    /// ending by value.
    #[inline(always)]
    pub(crate) fn end_request(mut ending: Ending, status: Status, ok_bytes: u64) {
        let owner = ending.owner();
        let rq = ending.request();
        if !rq.plain_end {
            debug_assert!(
                rq.nr_bios > 1
                    || rq.split != 0
                    || rq.in_sched
                    || rq.op == crate::request::Op::ZoneAppend
                    // SAFETY: slots point at their hctx, which outlives them.
                    || unsafe { HwCtx::of(rq.hctx) }.trace.is_some()
            );
            return Self::end_request_general(ending, owner, status, ok_bytes);
        }
        debug_assert!(rq.nr_bios == 1 && rq.split == 0 && !rq.in_sched);
        // SAFETY: slots point at their hctx, which outlives them.
        let hctx = unsafe { HwCtx::of(rq.hctx) };
        // One bio, no split, no scheduler: the tag is the slot's own and the
        // only one to free.
        let release = TagRelease::plain(rq.tag);
        // Completed inline on the submitter's own thread: straight into its
        // local queue (no one can take the tag and reuse the slot before we
        // free it, so the order does not matter here).
        if owner.get().deliver_local(|| Completion::new(rq.user_data, status, rq.segs.take(), rq.origin)) {
            hctx.release_slot(ending, release);
            hctx.restart_after_completion();
            return;
        }
        let completion = Completion::new(rq.user_data, status, rq.segs.take(), rq.origin);
        // Free the tag before telling the client: a client that submits
        // again as soon as it sees this completion then finds a free tag.
        hctx.release_slot(ending, release);
        owner.get().deliver(completion);
        hctx.restart_after_completion();
    }

    /// `end_request` for a request with merged bios, a piece of a split
    /// bio, a scheduler's request or a zone append.
    #[inline(never)]
    fn end_request_general(mut ending: Ending, owner: Owner, status: Status, ok_bytes: u64) {
        let release = ending.release();
        let rq = ending.request();
        // SAFETY: slots point at their hctx, which outlives them.
        let hctx = unsafe { HwCtx::of(rq.hctx) };
        // A traced queue ends every request here (`plain_end` is false).
        if let Some(t) = &hctx.trace {
            t.request(Action::Complete, rq.op, rq.flags, rq.sector, rq.nr_sectors, status.errno());
        }
        if rq.nr_bios > 1 {
            let merged = MergedEnd::take(rq, owner, status, ok_bytes);
            hctx.release_slot(ending, release);
            // SAFETY: the chain's bios are ours until each is delivered.
            unsafe { merged.deliver() };
            hctx.restart_after_completion();
            return;
        }
        let mut completion = Completion::new(rq.user_data, status, rq.segs.take(), rq.origin);
        if rq.op == crate::request::Op::ZoneAppend && status.is_ok() {
            completion.append_offset = Some(rq.sector << SECTOR_SHIFT);
        }
        // (`split` and `view` are set on every issue: no need to reset them.)
        let split = rq.split;
        hctx.release_slot(ending, release);
        if split != 0 {
            let last = split & crate::request::SPLIT_LAST != 0;
            owner.get().piece_done((split & !crate::request::SPLIT_LAST) - 1, status, last);
        } else {
            owner.get().deliver(completion);
        }
        hctx.restart_after_completion();
    }

    /// Marks a finished request's slot free and frees its tags, unless the
    /// timeout scanner holds it: then the scanner frees them once the
    /// driver's handler has returned.
    #[inline(always)]
    fn release_slot(&self, ending: Ending, release: TagRelease) {
        self.stats.completed.fetch_add(1, Ordering::Relaxed);
        if let Some(release) = ending.finish(release) {
            self.put_tags(release);
        }
    }

    /// The timeout scanner's end of a hold on `slot`: if the request
    /// completed while held, frees it (its stashed release) and restarts
    /// the queue, as the completer would have.
    pub(crate) fn end_timeout_hold(&self, slot: &RequestSlot) {
        if let Some(release) = slot.end_hold_release() {
            self.put_tags(release);
            self.restart_after_completion();
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

/// The bios of a request that carries merged ones, taken out of its slot
/// (the slot is freed before they are delivered).
struct MergedEnd {
    front: *const BioSlot,
    back: *const BioSlot,
    /// The request's own bio (delivered between the front and back ones).
    own: Option<Completion>,
    owner: Owner,
    start: u64,
    status: Status,
    ok_bytes: u64,
}

impl MergedEnd {
    /// Each bio completes in device order, with `Ok` if it lies within
    /// `ok_bytes` (or `status` is `Ok`), else with `status`.
    #[cold]
    #[inline(never)]
    fn take(rq: &mut Request, owner: Owner, status: Status, ok_bytes: u64) -> Self {
        debug_assert_eq!(rq.split, 0, "split pieces are never merged");
        let start = rq.sector;
        let own_end = if rq.back.is_null() {
            start + u64::from(rq.nr_sectors)
        } else {
            // SAFETY: `back` is a live slot of the chain, which the
            // request's owner (our caller) uses.
            unsafe { (*rq.back).with_data(|d| d.sector) }
        };
        let mut end = Self { front: rq.front, back: rq.back, own: None, owner, start, status, ok_bytes };
        end.own = Some(Completion::new(rq.user_data, end.bio_status(own_end), rq.segs.take(), rq.origin));
        rq.nr_bios = 1;
        rq.phys = crate::segment::Phys::default();
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
            self.owner.get().deliver(self.own.take().expect("taken with the request"));
            let mut p = self.back;
            while !p.is_null() {
                let end = (*p).with_data(|d| d.sector + u64::from(d.nr_sectors));
                p = (*p).complete_merged(self.bio_status(end));
            }
        }
    }
}

/// Ending a request is the driver's side of the token (request/rq.rs):
/// here, where the hardware context frees its tags and delivers its bios.
impl Rq {
    /// Ends the request: every bio completes to its client with `status`,
    /// and the tag is freed. Callable from any thread (examples: [`Rq`],
    /// [`Driver`](crate::driver::Driver)).
    #[inline]
    pub fn complete(self, status: Status) {
        HwCtx::end_request(self.into_ending(), status, 0)
    }

    /// Ends the request after a partial transfer (the kernel's
    /// `blk_update_request` + `blk_mq_end_request`): bios that lie wholly
    /// within the first `ok_bytes` complete with `Ok`, the rest with
    /// `status`.
    ///
    /// ```
    /// use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq};
    /// use mqblk::{Bio, Buf, Device, QueueLimits, Status, TagSetConfig};
    ///
    /// /// A medium error 4 KiB into every request.
    /// struct BadAt4k;
    ///
    /// impl Driver for BadAt4k {
    ///     fn name(&self) -> &str { "bad-at-4k" }
    ///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
    ///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
    ///     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
    ///         rq.complete_bytes(4096, Status::Medium);
    ///         QueueRqResult::Queued
    ///     }
    /// }
    ///
    /// let dev = Device::with_driver(Box::new(BadAt4k))?;
    /// let mut client = dev.client();
    /// {
    ///     // Two adjacent 4 KiB writes, merged into one request.
    ///     let mut plug = client.plug();
    ///     plug.submit(Bio::write(0, Buf::new(4096)), 1).unwrap();
    ///     plug.submit(Bio::write(4096, Buf::new(4096)), 2).unwrap();
    /// }
    /// let mut done = Vec::new();
    /// client.do_io(&mut done, 2, 2, None)?;
    /// done.sort_by_key(|c| c.user_data);
    /// assert_eq!((done[0].status, done[1].status), (Status::Ok, Status::Medium));
    /// # Ok::<(), mqblk::Error>(())
    /// ```
    pub fn complete_bytes(self, ok_bytes: u64, status: Status) {
        assert!(
            ok_bytes <= self.len_bytes(),
            "complete_bytes: {ok_bytes} bytes of a {}-byte request",
            self.len_bytes()
        );
        let status = if self.rq().nr_bios == 1 && ok_bytes >= self.len_bytes() { Status::Ok } else { status };
        HwCtx::end_request(self.into_ending(), status, ok_bytes)
    }
}

/// A token dropped without `complete` ends its request with an error, so a
/// driver cannot leak a tag.
impl Drop for Rq {
    fn drop(&mut self) {
        // SAFETY: called once, from the token's drop.
        let ending = unsafe { self.ending_on_drop() };
        HwCtx::end_request(ending, Status::IoErr, 0)
    }
}
