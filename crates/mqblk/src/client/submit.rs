//! Submission: how a bio becomes a request (steps 1-7 of the path of one
//! I/O in ARCHITECTURE.md). The queue's door (a scheduler switch holds new
//! submissions back), the bio checks, plug merges and scheduler merges
//! (a merged bio takes no tag), splits at `max_sectors` and zone
//! boundaries, getting a tag (plug cache, batch, or sleeping for one),
//! initialising the tag's request slot and issuing it or adding it to the
//! plug.
//!
//! Relies on: queue/ for limits and hctxs; tag.rs for tags; merge.rs for
//! the merge rules; plug.rs for the plug; request/ for the slot and the
//! `Rq` token; sync.rs for the door.

use std::time::Duration;

use crate::buf::{BioVec, SegArrayRaw};
use crate::error::{Rejected, SubmitError};
use crate::merge::{self, BioPos, MergedBio};
use crate::request::{Bio, ReqFlags, Rq, ORIGIN_POLLED, ORIGIN_USER, SECTOR_SHIFT};
use crate::sync::{door, Ordering};
use crate::tag::{TagGot, Tags};
use crate::trace::Action;

use super::Client;

/// The scalar part of what a request is initialised from: a whole bio, or
/// one piece of a split bio (`view` of the parent's segments, `split` =
/// slot + 1). The segments travel separately so nothing large is moved.
#[derive(Clone, Copy)]
pub(super) struct RqHead {
    pub(super) op: crate::request::Op,
    pub(super) flags: ReqFlags,
    pub(super) sector: u64,
    pub(super) nr_sectors: u32,
    pub(super) view: Option<SegView>,
    pub(super) split: u32,
    pub(super) user_data: u64,
    pub(super) origin: u8,
    pub(super) ioprio: crate::request::IoPrio,
}

/// A split piece's part of its parent's segments (the kernel's
/// `bvec_iter`): the parent's array, the first segment it touches, the
/// bytes of it before the piece, the piece's bytes.
#[derive(Clone, Copy)]
pub(super) struct SegView {
    pub(super) array: SegArrayRaw,
    pub(super) index: u32,
    pub(super) skip: u32,
    pub(super) len: u32,
}

impl RqHead {
    /// The head of a request that carries all of `bio`.
    #[inline(always)]
    fn whole(bio: &Bio, user_data: u64, origin: u8) -> Self {
        Self {
            op: bio.op,
            flags: bio.flags,
            sector: bio.offset >> SECTOR_SHIFT,
            nr_sectors: (bio.len >> SECTOR_SHIFT) as u32,
            view: None,
            split: 0,
            user_data,
            origin,
            ioprio: bio.ioprio,
        }
    }
}

impl Client {
    /// Submits `bio`; its completion comes back from `do_io` with
    /// `user_data`. Sleeps for a tag if all are busy (unless the bio has
    /// `NOWAIT`). A refused bio comes back in the error, untouched.
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use mqblk::{Bio, Buf, Device, SubmitError};
    ///
    /// let dev = Device::open("ram:size=64,irqmode=0")?;
    /// let mut client = dev.client();
    /// client.submit(Bio::write(0, Buf::new(4096)), 1)?;
    ///
    /// // Past the end of the device: refused, the bio and its buffer given back.
    /// let refused = client.submit(Bio::read(64 << 20, Buf::new(4096)), 2).unwrap_err();
    /// assert!(matches!(refused.error, SubmitError::OutOfRange { .. }));
    /// assert_eq!(refused.bio.segs.into_buf().unwrap().len(), 4096);
    ///
    /// let mut done = Vec::new();
    /// client.do_io(&mut done, 1, 1, None)?;
    /// assert_eq!(done[0].user_data, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline(always)]
    pub fn submit(&mut self, bio: Bio, user_data: u64) -> Result<(), Box<Rejected>> {
        self.submit_inner(bio, user_data, ORIGIN_USER, false)
    }

    /// Submits `bio` on one of the driver's reserved tags (the kernel's
    /// BLK_MQ_REQ_RESERVED): for I/O that must not wait behind normal
    /// traffic. Refused with `NoReservedTags` if the device has no
    /// reserved tags at all (a driver reserves them in its
    /// [`TagSetConfig::reserved_tags`](crate::TagSetConfig::reserved_tags)).
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use mqblk::{Bio, Device, SubmitError};
    ///
    /// let dev = Device::open("ram:size=64,irqmode=0")?;
    /// assert_eq!(dev.tag_set().reserved_tags, 0);
    /// let refused = dev.client().submit_reserved(Bio::flush(), 1).unwrap_err();
    /// assert_eq!(refused.error, SubmitError::NoReservedTags);
    /// # Ok::<(), mqblk::Error>(())
    /// ```
    pub fn submit_reserved(&mut self, bio: Bio, user_data: u64) -> Result<(), Box<Rejected>> {
        self.submit_inner(bio, user_data, ORIGIN_USER, true)
    }

    /// Submits inside the queue's door (`enter`/`exit`: a scheduler switch
    /// waits for submissions in progress and holds new ones back). Inlined
    /// into the caller with the plain path; the general path is a call.
    #[inline(always)]
    pub(super) fn submit_inner(
        &mut self,
        mut bio: Bio,
        user_data: u64,
        origin: u8,
        reserved: bool,
    ) -> Result<(), Box<Rejected>> {
        if !door::enter(&self.shared.counters.entered, &self.q.frozen) {
            self.wait_at_door();
        }
        // Requests that complete inline meanwhile come back to us without
        // the ring's atomics (completion.rs `deliver`).
        let _mark = self.shared.mark_owner();
        let result = if !reserved && self.is_plain(&bio) && self.submit_plain(&mut bio, user_data, origin) {
            Ok(())
        } else {
            self.submit_mapped(bio, user_data, origin, reserved)
        };
        door::leave(&self.shared.counters.entered);
        result
    }

    /// The common case, which `submit_plain` serves in one straight line: a
    /// read or write that passes the checks as it is and needs no split,
    /// that the queue map sends to `plain.hctx` (not a hipri bio, unless
    /// every bio is polled), with no plug active and room in the completion
    /// ring. Anything else (and a plain bio that finds no tag at hand or a
    /// scheduler) takes the general path, which would do the same with it.
    #[inline(always)]
    fn is_plain(&self, bio: &Bio) -> bool {
        self.plain_but_data(bio) && self.q.plain_rw_ok(bio, self.plain_fit_segs)
    }

    /// `is_plain` for a vectored bio: the same conditions, its segments
    /// checked in one pass and fitting a request wherever they lie
    /// (limits.rs `plain_vectored_ok`).
    #[inline(always)]
    fn is_plain_vectored(&self, bio: &Bio) -> bool {
        self.plain_but_data(bio) && self.q.plain_vectored_ok(bio)
    }

    /// `is_plain`'s conditions but the bio's data and place.
    #[inline(always)]
    fn plain_but_data(&self, bio: &Bio) -> bool {
        self.plug.depth == 0
            && (self.plain.hipri || !bio.flags.contains(ReqFlags::HIPRI))
            && self.in_flight < self.capacity()
            && bio.len <= self.plain_max_bytes
    }

    /// The queue map (the kernel's HCTX_TYPE_POLL): the poll queue a bio
    /// goes to, if any: every bio on a device whose submitters reap, hipri
    /// bios (not reserved ones) where the device polls.
    #[inline(always)]
    fn poll_queue_for(&self, flags: ReqFlags, reserved: bool) -> Option<usize> {
        self.poll_hctx.filter(|_| self.q.submitter_reaps() || (flags.contains(ReqFlags::HIPRI) && !reserved))
    }

    /// Issues a plain bio (`is_plain`) to the driver on a tag at hand:
    /// the general path's steps 6-9 without what cannot apply. Returns
    /// false, leaving the bio untouched, if the queue has a scheduler or no
    /// tag is free without waiting.
    #[inline(always)]
    fn submit_plain(&mut self, bio: &mut Bio, user_data: u64, origin: u8) -> bool {
        let hctx = self.q.hctx(self.plain.hctx);
        if hctx.sched().is_some() {
            return false;
        }
        self.alloc.shallow_depth = u32::MAX;
        let Some(got) = hctx.tags.get(&mut self.alloc, false, true, || {}) else { return false };
        let head = RqHead::whole(bio, user_data, origin | self.plain.origin);
        let rq = self.start_request(&hctx.tags, got, &head, bio.segs.take(), false, true);
        self.shared.counters.request(head.op);
        // Counted before the issue: a request completed at once is reaped
        // (and uncounted) only later, by do_io.
        self.polled_outstanding += usize::from(self.plain.origin != 0);
        hctx.issue_plain(rq, true);
        self.note_submitted(head.op);
        true
    }

    /// The general path: the queue map (`poll_queue_for`), then
    /// `submit_entered`.
    #[inline(never)]
    fn submit_mapped(&mut self, mut bio: Bio, user_data: u64, origin: u8, reserved: bool) -> Result<(), Box<Rejected>> {
        // A vectored bio takes the plain path too when it needs no split
        // (looked at here, not in `is_plain`: a call there would cost the
        // one-buffer plain path its bio in registers). A checked iovec
        // array had its try in `is_plain` already (`checked_iovecs_fit`).
        if bio.segs.is_vectored()
            && !bio.segs.iovecs_checked()
            && !reserved
            && self.is_plain_vectored(&bio)
            && self.submit_plain(&mut bio, user_data, origin)
        {
            return Ok(());
        }
        let poll = self.poll_queue_for(bio.flags, reserved);
        if let Some(poll) = poll {
            self.cur_hctx = poll;
        }
        let origin = if poll.is_some() { origin | ORIGIN_POLLED } else { origin };
        let result = self.submit_entered(bio, user_data, origin, reserved);
        if poll.is_some() {
            self.cur_hctx = self.default_hctx;
            self.polled_outstanding += usize::from(result.is_ok());
        }
        result
    }

    /// The queue is frozen (a scheduler switch): give back what we hold,
    /// as before any sleep, and wait until the door opens.
    #[cold]
    #[inline(never)]
    fn wait_at_door(&mut self) {
        loop {
            // The freeze waits for every tag: give back the plug's requests
            // and cached tags, and tags a handoff granted us in advance.
            self.plug.flush_before_sleep(&self.q, &self.shared.counters);
            self.release_granted();
            while self.q.frozen.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            if door::enter(&self.shared.counters.entered, &self.q.frozen) {
                return;
            }
        }
    }

    fn submit_entered(
        &mut self,
        mut bio: Bio,
        user_data: u64,
        origin: u8,
        reserved: bool,
    ) -> Result<(), Box<Rejected>> {
        if reserved && self.q.hctx(self.cur_hctx).tags.nr_reserved_tags() == 0 {
            let error = SubmitError::NoReservedTags;
            return Err(Box::new(Rejected { error, bio }));
        }
        if self.in_flight >= self.capacity() {
            let error = SubmitError::TooManyInFlight { max: self.capacity() };
            return Err(Box::new(Rejected { error, bio }));
        }
        if let Err(error) = self.q.check_bio(&bio) {
            return Err(Box::new(Rejected { error, bio }));
        }
        if let Some(t) = self.q.trace() {
            t.bio(Action::Queue, bio.op, bio.flags, bio.offset >> SECTOR_SHIFT, (bio.len >> SECTOR_SHIFT) as u32);
        }
        let max = self.q.max_request_bytes(bio.op);
        if bio.len > max
            || (bio.len > 0 && bio.len > self.q.bytes_to_zone_end(bio.offset))
            || self.needs_segment_split(&bio)
        {
            return self.submit_split(bio, user_data, origin, reserved, max);
        }
        let head = RqHead::whole(&bio, user_data, origin);
        if self.plug.takes(bio.op, bio.flags)
            && self.plug.touches_last(head.sector, head.nr_sectors)
            && merge::mergeable(bio.op, bio.flags)
            && self.plug_merge(&head, &mut bio.segs)
        {
            self.note_submitted(bio.op);
            return Ok(());
        }
        if !reserved
            && merge::mergeable(bio.op, bio.flags)
            && self.q.hctx(self.cur_hctx).sched().is_some()
            && self.sched_merge(&head, &mut bio.segs)
        {
            self.note_submitted(bio.op);
            return Ok(());
        }
        let nowait = bio.flags.contains(ReqFlags::NOWAIT);
        if !self.issue(&head, &mut bio.segs, reserved, nowait) {
            return Err(Box::new(Rejected { error: SubmitError::Again, bio }));
        }
        self.note_submitted(bio.op);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn note_submitted(&mut self, op: crate::request::Op) {
        self.shared.counters.bio(op);
        self.in_flight += 1;
        self.stats.submitted += 1;
    }

    /// Tries to merge the bio described by `head` into the plug's last
    /// request (merge.rs); on success the bio's segments move into one of
    /// this client's bio slots and the bio completes on its own.
    #[inline(never)]
    fn plug_merge(&mut self, head: &RqHead, segs: &mut BioVec) -> bool {
        let max_sectors = self.q.max_request_bytes(head.op) >> SECTOR_SHIFT;
        let pos = BioPos { op: head.op, flags: head.flags, sector: head.sector, nr_sectors: head.nr_sectors };
        let Some(rq) = self.plug.merge_candidate(self.cur_hctx) else { return false };
        let Some(kind) = merge::try_merge(rq.rq(), &pos, max_sectors) else { return false };
        if !self.q.zone_merge_ok(rq.sector(), rq.nr_sectors(), &pos, kind == merge::MergeKind::Front) {
            return false;
        }
        let bio_phys = merge::bio_phys(rq.rq(), segs);
        // SAFETY: the plug holds the request's token, so we own the request.
        let Some(phys) = (unsafe { merge::segments_fit(rq.rq(), kind, &bio_phys) }) else { return false };
        let index = self.free_slots.pop().expect("a free bio slot per outstanding bio");
        let bio = MergedBio { pos, segs: segs.take(), phys, user_data: head.user_data, origin: head.origin };
        // SAFETY: the slot was on our free list, so it is ours and unused;
        // the plug holds the request's token, so we own the request.
        unsafe { merge::attach(rq.rq_mut(), kind, self.shared.slot(index), &self.shared, bio) };
        let (sector, len_bytes) = (rq.sector(), rq.len_bytes());
        self.plug.last_grew(sector, len_bytes);
        self.shared.counters.merge(head.op, kind == merge::MergeKind::Front);
        self.trace_merge(head, kind == merge::MergeKind::Front);
        true
    }

    /// Tries to merge the bio into a request queued in the scheduler
    /// (`Elevator::bio_merge`), with the same rules and bookkeeping as a
    /// plug merge.
    #[inline(never)]
    fn sched_merge(&mut self, head: &RqHead, segs: &mut BioVec) -> bool {
        let Some(s) = self.q.hctx(self.cur_hctx).sched() else { return false };
        if s.queued.load(Ordering::Relaxed) == 0 {
            return false; // nothing queued to merge with
        }
        let max_sectors = self.q.max_request_bytes(head.op) >> SECTOR_SHIFT;
        let pos = BioPos { op: head.op, flags: head.flags, sector: head.sector, nr_sectors: head.nr_sectors };
        let (shared, free_slots, q) = (&self.shared, &mut self.free_slots, &self.q);
        let mut front = false;
        let merged = s.elevator.bio_merge(self.cur_hctx, &pos, &mut |rq, kind| {
            if merge::try_merge(rq.rq(), &pos, max_sectors) != Some(kind) {
                return false;
            }
            if !q.zone_merge_ok(rq.sector(), rq.nr_sectors(), &pos, kind == merge::MergeKind::Front) {
                return false;
            }
            let bio_phys = merge::bio_phys(rq.rq(), segs);
            // SAFETY: the elevator holds the queued request's token under
            // its lock while we look and attach.
            let Some(phys) = (unsafe { merge::segments_fit(rq.rq(), kind, &bio_phys) }) else { return false };
            let index = free_slots.pop().expect("a free bio slot per outstanding bio");
            let bio = MergedBio { pos, segs: segs.take(), phys, user_data: head.user_data, origin: head.origin };
            // SAFETY: the slot was on our free list; the elevator holds the
            // queued request's token under its lock while we attach.
            unsafe { merge::attach(rq.rq_mut(), kind, shared.slot(index), shared, bio) };
            front = kind == merge::MergeKind::Front;
            true
        });
        if merged {
            self.shared.counters.merge(head.op, front);
            self.trace_merge(head, front);
        }
        merged
    }

    /// Records M (or F, `front`) for the bio of `head` if the queue is traced.
    #[inline(always)]
    fn trace_merge(&self, head: &RqHead, front: bool) {
        if let Some(t) = self.q.trace() {
            let action = if front { Action::FrontMerge } else { Action::BackMerge };
            t.bio(action, head.op, head.flags, head.sector, head.nr_sectors);
        }
    }

    /// Takes a tag, initialises its request from `head` (taking `segs`) and
    /// issues it, or adds it to the plug. Returns false, leaving `segs`
    /// alone, only if NOWAIT found no tag. Always inlined: the hot path then
    /// writes the request's fields directly (measured: tens of instructions
    /// per I/O otherwise).
    #[inline(always)]
    pub(super) fn issue(&mut self, head: &RqHead, segs: &mut BioVec, reserved: bool, nowait: bool) -> bool {
        // Reserved requests bypass a scheduler (and the plug): they take a
        // driver tag and go straight to the driver.
        let use_sched = !reserved && self.q.hctx(self.cur_hctx).sched().is_some();
        // Under `plug_sync=0` a sync bio bypasses an active plug (plug.rs).
        let plugged = !reserved && self.plug.takes(head.op, head.flags);
        let Some(got) = self.get_tag(head, use_sched, plugged, reserved, nowait) else {
            return false;
        };
        if let Some(t) = self.q.trace() {
            t.bio(Action::GetRq, head.op, head.flags, head.sector, head.nr_sectors);
        }
        if got.slept {
            self.stats.tag_waits += 1;
            self.stats.tag_wait_ns += got.wait_ns;
            self.q.note_tag_wait(got.wait_ns, use_sched);
        }
        let hctx = self.q.hctx(self.cur_hctx);
        // (The scheduler cannot change meanwhile: switching freezes the
        // queue, which waits for this submission.)
        let sched = if use_sched { hctx.sched() } else { None };
        let tags = sched.map_or(&hctx.tags, |s| &s.tags);
        let traced = self.q.trace.is_some();
        let mut rq = self.start_request(tags, got, head, segs.take(), sched.is_some(), !traced);
        self.shared.counters.request(head.op);
        if let Some(s) = sched {
            s.elevator.prepare_request(self.cur_hctx, &mut rq);
        }
        if reserved {
            hctx.issue(rq, true);
        } else if plugged {
            let len_bytes = u64::from(head.nr_sectors) << SECTOR_SHIFT;
            self.plug.add(&self.q, &self.shared.counters, rq, self.cur_hctx, len_bytes);
        } else if sched.is_some() {
            hctx.submit(rq, &mut self.scratch, Some(&mut self.alloc));
        } else {
            hctx.issue(rq, true);
        }
        true
    }

    /// Starts the request of the tag `got` just took from `tags`, filled
    /// from `head` and `segs`: the token that owns it comes back.
    /// `plain_end_ok`: it may end on the short path (not on a traced
    /// queue, whose completion event is on the general one).
    #[inline(always)]
    fn start_request(
        &self,
        tags: &Tags,
        got: TagGot,
        head: &RqHead,
        segs: BioVec,
        in_sched: bool,
        plain_end_ok: bool,
    ) -> Rq {
        // SAFETY: `got` is the tag the bitmap just gave us, not freed since;
        // we start one request on it.
        let mut starting = unsafe { tags.pool.start(got.tag, &self.shared) };
        let rq = starting.request();
        rq.op = head.op;
        rq.flags = head.flags;
        rq.sector = head.sector;
        rq.nr_sectors = head.nr_sectors;
        rq.segs = segs;
        match head.view {
            None => rq.view = None,
            Some(v) => (rq.view, rq.view_index, rq.view_skip, rq.view_len) = (Some(v.array), v.index, v.skip, v.len),
        }
        rq.split = head.split;
        rq.user_data = head.user_data;
        rq.origin = head.origin;
        rq.driver_data = 0;
        rq.client_id = self.client_id;
        rq.ioprio = head.ioprio;
        rq.in_sched = in_sched;
        rq.plain_end = plain_end_ok && head.split == 0 && !in_sched && head.op != crate::request::Op::ZoneAppend;
        debug_assert_eq!(rq.nr_bios, 1, "a finished request leaves no merged bios behind");
        rq.front = std::ptr::null();
        rq.back = std::ptr::null();
        starting.issue()
    }

    /// A tag on this client's hardware queue: from the plug's cache, a
    /// batch for the plug's `nr_ios` hint, or one at a time (sleeping for
    /// it unless `nowait`, after flushing the plug). With a scheduler, a
    /// scheduler tag within the depth it allows this op. `plugged`: the
    /// request goes to the plug (its cached tags may serve it).
    #[inline(always)]
    fn get_tag(&mut self, head: &RqHead, sched: bool, plugged: bool, reserved: bool, nowait: bool) -> Option<TagGot> {
        let hctx = self.q.hctx(self.cur_hctx);
        let (pool, limit) = match hctx.sched() {
            Some(s) if sched => (&s.tags, s.elevator.limit_depth(self.cur_hctx, head.op, head.flags)),
            _ => (&hctx.tags, None),
        };
        self.alloc.shallow_depth = limit.unwrap_or(u32::MAX);
        if plugged && limit.is_none() {
            if let Some(tag) = self.plug.take_cached(self.cur_hctx) {
                return Some(TagGot { tag, slept: false, wait_ns: 0 });
            }
            if self.plug.nr_ios > 1 {
                let nr = std::mem::replace(&mut self.plug.nr_ios, 1);
                if let Some((base, mask)) = pool.get_batch(&mut self.alloc, nr) {
                    self.plug.cache(self.cur_hctx, base, mask);
                    return self.plug.take_cached(self.cur_hctx).map(|tag| TagGot { tag, slept: false, wait_ns: 0 });
                }
            }
        }
        let (plug, q, counters) = (&mut self.plug, &self.q, &self.shared.counters);
        let polled_here = self.polled_outstanding > 0 && self.poll_hctx == Some(self.cur_hctx);
        if (hctx.is_poll() || polled_here) && !nowait {
            // Tags of a poll queue free only when someone polls: poll while
            // waiting instead of sleeping (nobody would wake us). On a
            // toggling queue the same holds while our hipri requests are in
            // flight (its notifications may be off).
            loop {
                if let Some(got) = pool.get(&mut self.alloc, reserved, true, || {}) {
                    return Some(got);
                }
                plug.flush(q, counters);
                if hctx.poll() == 0 {
                    std::hint::spin_loop();
                }
            }
        }
        // A thread must not sleep on I/O held in its own plug.
        pool.get(&mut self.alloc, reserved, nowait, || plug.flush_before_sleep(q, counters))
    }
}
