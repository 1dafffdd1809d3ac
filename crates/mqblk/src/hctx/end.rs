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

use std::ptr::NonNull;

use super::HwCtx;
use crate::completion::{BioSlot, ClientShared, Completion};
use crate::request::{Request, RequestSlot, Rq, RqState, TagRelease, SECTOR_SHIFT};
use crate::sched::{DoneInfo, SchedCtx};
use crate::status::Status;
use crate::sync::Ordering;

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
    /// request, so no reference into it may be live (the kernel likewise
    /// reads what it needs before `blk_mq_put_tag`).
    ///
    /// # Safety
    /// `ptr` is the slot of an in-flight request and the caller owns it (it
    /// consumed the request's `Rq` token).
    #[inline(always)]
    pub(crate) unsafe fn end_request(ptr: NonNull<RequestSlot>, status: Status, ok_bytes: u64) {
        // SAFETY: slots live as long as the queue (see the Driver trait's
        // thread rules); the consumed token makes the request ours until
        // its tags go back, and this block ends every reference into it.
        let slot = unsafe { ptr.as_ref() };
        let (hctx, tag, owner, completion) = {
            // SAFETY: as above.
            let rq = unsafe { &*slot.rq.get() };
            if !rq.plain_end {
                debug_assert!(
                    rq.nr_bios > 1 || rq.split != 0 || rq.in_sched || rq.op == crate::request::Op::ZoneAppend
                );
                // SAFETY: forwarded contract.
                return unsafe { Self::end_request_general(ptr, status, ok_bytes) };
            }
            debug_assert!(rq.nr_bios == 1 && rq.split == 0 && !rq.in_sched);
            // SAFETY: as above; the shared borrow above has ended.
            let rq = unsafe { &mut *slot.rq.get() };
            // SAFETY: slots point at their hctx, which outlives them.
            let hctx = unsafe { HwCtx::of(rq.hctx) };
            // SAFETY: owners are client completion sinks kept alive by the
            // queue for its whole life; requests are only submitted with a
            // valid one.
            let owner = unsafe { &*rq.owner };
            // Completed inline on the submitter's own thread: straight into
            // its local queue (no one can take the tag and reuse the slot
            // before we free it, so the order does not matter here).
            if owner.deliver_local(|| Completion::new(rq.user_data, status, rq.buf.take(), rq.origin)) {
                let tag = rq.tag;
                hctx.release_slot(slot, TagRelease { tag, driver_tag: tag, sched: None });
                hctx.restart_after_completion();
                return;
            }
            (hctx, rq.tag, owner, Completion::new(rq.user_data, status, rq.buf.take(), rq.origin))
        };
        // One bio, no split, no scheduler: the tag is the slot's own and the
        // only one to free, before telling the client (see below).
        hctx.release_slot(slot, TagRelease { tag, driver_tag: tag, sched: None });
        owner.deliver(completion);
        hctx.restart_after_completion();
    }

    /// `end_request` for a request with merged bios, a piece of a split
    /// bio, a scheduler's request or a zone append.
    ///
    /// # Safety
    /// As `end_request`.
    #[inline(never)]
    unsafe fn end_request_general(ptr: NonNull<RequestSlot>, status: Status, ok_bytes: u64) {
        // SAFETY: as in `end_request`.
        let slot = unsafe { ptr.as_ref() };
        let (hctx, release, owner, split, completion) = {
            // SAFETY: as above.
            let rq = unsafe { &mut *slot.rq.get() };
            // SAFETY: slots point at their hctx, which outlives them.
            let hctx = unsafe { HwCtx::of(rq.hctx) };
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

/// Ending a request is the driver's side of the token (request/rq.rs):
/// here, where the hardware context frees its tags and delivers its bios.
impl Rq {
    /// Ends the request: every bio completes to its client with `status`,
    /// and the tag is freed. Callable from any thread (examples: [`Rq`],
    /// [`Driver`](crate::driver::Driver)).
    #[inline]
    pub fn complete(self, status: Status) {
        let ptr = self.into_raw();
        // SAFETY: we consumed the unique token for this slot.
        unsafe { HwCtx::end_request(ptr, status, 0) }
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
        let ptr = self.into_raw();
        // SAFETY: we consumed the unique token for this slot.
        unsafe { HwCtx::end_request(ptr, status, ok_bytes) }
    }
}

/// A token dropped without `complete` ends its request with an error, so a
/// driver cannot leak a tag.
impl Drop for Rq {
    fn drop(&mut self) {
        // SAFETY: the token is being destroyed and owns the slot.
        unsafe { HwCtx::end_request(self.as_raw(), Status::IoErr, 0) }
    }
}
