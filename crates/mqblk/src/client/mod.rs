//! `Client`: the per-thread handle on a device (the kernel's software
//! context, `struct blk_mq_ctx`, plus the submitter's side of libblkio's
//! queue API).
//!
//! A client submits bios with a `user_data` cookie and reaps completions from
//! its own completion ring with [`Client::do_io`]. Buffers move into the bio
//! and come back in the [`Completion`], so no one can touch them while the
//! device owns them. A client is `Send` but not `Sync`: it belongs to one
//! thread at a time.
//!
//! Waking: a completion delivered from another thread wakes the client only
//! if it is really asleep in `do_io` (a `sleeping` flag checked after the
//! push; the client sets it before its last look at the ring: a Dekker pair,
//! so no wakeup is lost and no syscall is made when nobody sleeps). An
//! optional eventfd lets event loops wait instead.
//!
//! Relies on: queue.rs for limits, tags and dispatch; ring.rs for the
//! completion ring; sync.rs for sleeping. The blocking helpers
//! (`read_at`, `write_at`, `submit_and_wait`) are in blocking.rs.

mod blocking;

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crate::buf::Buf;
use crate::completion::ClientShared;
pub use crate::completion::{Completion, RwCount};
use crate::error::{Error, Rejected, SubmitError};
use crate::merge::{self, BioPos, MergedBio};
use crate::plug::{Plug, PlugState};
use crate::queue::RequestQueue;
use crate::request::{Bio, ReqFlags, RqState, ORIGIN_BLOCKING, ORIGIN_POLLED, ORIGIN_USER, SECTOR_SHIFT, SPLIT_LAST};
use crate::tag::{AllocData, TagGot};
use std::sync::Arc;

use crate::sync::{dekker_fence, door, Ordering};

/// The scalar part of what a request is initialised from: a whole bio, or
/// one piece of a split bio (`view` into the parent's buffer, `split` =
/// slot + 1). The buffer travels separately so nothing large is moved.
#[derive(Clone, Copy)]
struct RqHead {
    op: crate::request::Op,
    flags: ReqFlags,
    sector: u64,
    nr_sectors: u32,
    view: Option<(*mut u8, usize)>,
    split: u32,
    user_data: u64,
    origin: u8,
    ioprio: crate::request::IoPrio,
}

/// Per-client counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClientStats {
    pub submitted: u64,
    pub completed: u64,
    /// Times this client slept waiting for a tag.
    pub tag_waits: u64,
    /// Times this client slept in `do_io` waiting for completions.
    pub completion_sleeps: u64,
}

/// A per-thread handle on a device. See the module docs.
pub struct Client {
    q: Arc<RequestQueue>,
    shared: Arc<ClientShared>,
    /// The hardware queue of the submission in progress (the default one
    /// between submissions).
    cur_hctx: usize,
    /// This client's default queue, and its poll queue if the device has
    /// poll queues (hipri bios go there: the kernel's HCTX_TYPE_POLL map).
    default_hctx: usize,
    poll_hctx: Option<usize>,
    /// Bios on the poll queue not yet reaped: while any, waiting polls.
    polled_outstanding: usize,
    /// This wait already took its hybrid-polling sleep (reset when a
    /// completion is reaped).
    hybrid_slept: bool,
    alloc: AllocData,
    /// Submitted and not yet handed back (by `do_io` or a blocking helper).
    in_flight: usize,
    /// Completions collected while a blocking helper waited.
    backlog: VecDeque<Completion>,
    /// The blocking helper's completion, once it arrives.
    blocking_done: Option<Completion>,
    bounce: Option<Buf>,
    /// This client asked for the completion eventfd (`completion_fd`).
    notify: bool,
    /// Free bio slots of `shared` (only this client touches the list).
    free_slots: Vec<u32>,
    /// Identity for schedulers (the kernel's process).
    client_id: u32,
    /// An empty request list to hand single requests to a scheduler.
    scratch: crate::request::RqList,
    plug: PlugState,
    stats: ClientStats,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("hctx", &self.cur_hctx)
            .field("in_flight", &self.in_flight)
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl Client {
    pub(crate) fn new(q: Arc<RequestQueue>, shared: Arc<ClientShared>, seq: usize) -> Self {
        let hctx_index = seq % q.nr_default_queues();
        let poll_hctx = if q.shared_poll() || q.submitter_reaps() {
            Some(hctx_index)
        } else {
            (q.nr_poll_queues() > 0).then(|| q.nr_default_queues() + seq % q.nr_poll_queues())
        };
        let capacity = shared.capacity();
        // Spread clients' hints, and their waits over the 8 wait queues (as
        // hctxs spread over them).
        let alloc = AllocData::new((seq as u32).wrapping_mul(0x9e37_79b9), seq);
        *shared.waiter.lock() = Some(alloc.waiter.clone());
        Self {
            cur_hctx: hctx_index,
            default_hctx: hctx_index,
            poll_hctx,
            polled_outstanding: 0,
            hybrid_slept: false,
            alloc,
            shared,
            in_flight: 0,
            backlog: VecDeque::with_capacity(capacity),
            blocking_done: None,
            bounce: None,
            notify: false,
            plug: PlugState::new(q.plug_nesting()),
            q,
            free_slots: (0..capacity as u32).rev().collect(),
            client_id: seq as u32,
            scratch: crate::request::RqList::with_capacity(1),
            stats: ClientStats::default(),
        }
    }

    /// The hardware queue this client submits to.
    pub fn hctx_index(&self) -> usize {
        self.default_hctx
    }

    /// The poll queue this client's hipri bios go to, if the device has
    /// poll queues.
    pub fn poll_hctx_index(&self) -> Option<usize> {
        self.poll_hctx
    }

    /// The most I/Os this client may have outstanding (submitted and not yet
    /// reaped).
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// I/Os submitted and not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// Submits `bio`; its completion comes back from `do_io` with
    /// `user_data`. Sleeps for a tag if all are busy (unless the bio has
    /// `NOWAIT`). A refused bio comes back in the error, untouched.
    #[inline]
    pub fn submit(&mut self, bio: Bio, user_data: u64) -> Result<(), Box<Rejected>> {
        self.submit_inner(bio, user_data, ORIGIN_USER, false)
    }

    /// Submits `bio` on one of the driver's reserved tags (the kernel's
    /// BLK_MQ_REQ_RESERVED): for I/O that must not wait behind normal
    /// traffic. Refused with `NoReservedTags` if the device has no
    /// reserved tags at all.
    pub fn submit_reserved(&mut self, bio: Bio, user_data: u64) -> Result<(), Box<Rejected>> {
        self.submit_inner(bio, user_data, ORIGIN_USER, true)
    }

    /// Submits inside the queue's door (`enter`/`exit`: a scheduler switch
    /// waits for submissions in progress and holds new ones back).
    fn submit_inner(&mut self, bio: Bio, user_data: u64, origin: u8, reserved: bool) -> Result<(), Box<Rejected>> {
        if !door::enter(&self.shared.counters.entered, &self.q.frozen) {
            self.wait_at_door();
        }
        // Queue map: hipri bios go to the poll queue when there is one;
        // on a device whose submitters reap, every bio is polled.
        let polled = match self.poll_hctx {
            Some(poll) if self.q.submitter_reaps() || (bio.flags.contains(ReqFlags::HIPRI) && !reserved) => {
                self.cur_hctx = poll;
                true
            }
            _ => false,
        };
        let origin = if polled { origin | ORIGIN_POLLED } else { origin };
        let result = self.submit_entered(bio, user_data, origin, reserved);
        if polled {
            self.cur_hctx = self.default_hctx;
            self.polled_outstanding += usize::from(result.is_ok());
        }
        door::leave(&self.shared.counters.entered);
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
            self.plug.flush(&self.q, &self.shared.counters);
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
        let max = self.q.max_request_bytes(bio.op);
        if bio.len > max || (bio.len > 0 && bio.len > self.q.bytes_to_zone_end(bio.offset)) {
            return self.submit_split(bio, user_data, origin, reserved, max);
        }
        let head = RqHead {
            op: bio.op,
            flags: bio.flags,
            sector: bio.offset >> SECTOR_SHIFT,
            nr_sectors: (bio.len >> SECTOR_SHIFT) as u32,
            view: None,
            split: 0,
            user_data,
            origin,
            ioprio: bio.ioprio,
        };
        if self.plug.is_plugged()
            && self.plug.touches_last(head.sector, head.nr_sectors)
            && merge::mergeable(bio.op, bio.flags)
            && self.plug_merge(&head, &mut bio.buf)
        {
            self.note_submitted(bio.op);
            return Ok(());
        }
        if !reserved
            && merge::mergeable(bio.op, bio.flags)
            && self.q.hctx(self.cur_hctx).sched().is_some()
            && self.sched_merge(&head, &mut bio.buf)
        {
            self.note_submitted(bio.op);
            return Ok(());
        }
        let nowait = bio.flags.contains(ReqFlags::NOWAIT);
        if !self.issue(&head, &mut bio.buf, reserved, nowait) {
            return Err(Box::new(Rejected { error: SubmitError::Again, bio }));
        }
        self.note_submitted(bio.op);
        Ok(())
    }

    #[inline(always)]
    fn note_submitted(&mut self, op: crate::request::Op) {
        self.shared.counters.bio(op);
        self.in_flight += 1;
        self.stats.submitted += 1;
    }

    /// Tries to merge the bio described by `head` into the plug's last
    /// request (merge.rs); on success the bio's buffer moves into one of
    /// this client's bio slots and the bio completes on its own.
    #[inline(never)]
    fn plug_merge(&mut self, head: &RqHead, buf: &mut Option<Buf>) -> bool {
        let max_sectors = self.q.max_request_bytes(head.op) >> SECTOR_SHIFT;
        let max_segments = self.q.max_segments();
        let pos = BioPos { op: head.op, flags: head.flags, sector: head.sector, nr_sectors: head.nr_sectors };
        let Some(rq) = self.plug.merge_candidate(self.cur_hctx) else { return false };
        let Some(kind) = merge::try_merge(rq.rq(), &pos, max_sectors, max_segments) else { return false };
        if !self.q.zone_merge_ok(rq.sector(), rq.nr_sectors(), &pos, kind == merge::MergeKind::Front) {
            return false;
        }
        let index = self.free_slots.pop().expect("a free bio slot per outstanding bio");
        let bio = MergedBio { pos, buf: buf.take(), user_data: head.user_data, origin: head.origin };
        // SAFETY: the slot was on our free list, so it is ours and unused;
        // the plug holds the request's token, so we own the request.
        unsafe { merge::attach(rq.rq_mut(), kind, self.shared.slot(index), &self.shared, bio) };
        let (sector, len_bytes) = (rq.sector(), rq.len_bytes());
        self.plug.last_grew(sector, len_bytes);
        self.shared.counters.merge(head.op, kind == merge::MergeKind::Front);
        true
    }

    /// Tries to merge the bio into a request queued in the scheduler
    /// (`Elevator::bio_merge`), with the same rules and bookkeeping as a
    /// plug merge.
    #[inline(never)]
    fn sched_merge(&mut self, head: &RqHead, buf: &mut Option<Buf>) -> bool {
        let Some(s) = self.q.hctx(self.cur_hctx).sched() else { return false };
        if s.queued.load(Ordering::Relaxed) == 0 {
            return false; // nothing queued to merge with
        }
        let max_sectors = self.q.max_request_bytes(head.op) >> SECTOR_SHIFT;
        let max_segments = self.q.max_segments();
        let pos = BioPos { op: head.op, flags: head.flags, sector: head.sector, nr_sectors: head.nr_sectors };
        let (shared, free_slots, q) = (&self.shared, &mut self.free_slots, &self.q);
        let mut front = false;
        let merged = s.elevator.bio_merge(self.cur_hctx, &pos, &mut |rq, kind| {
            if merge::try_merge(rq.rq(), &pos, max_sectors, max_segments) != Some(kind) {
                return false;
            }
            if !q.zone_merge_ok(rq.sector(), rq.nr_sectors(), &pos, kind == merge::MergeKind::Front) {
                return false;
            }
            let index = free_slots.pop().expect("a free bio slot per outstanding bio");
            let bio = MergedBio { pos, buf: buf.take(), user_data: head.user_data, origin: head.origin };
            // SAFETY: the slot was on our free list; the elevator holds the
            // queued request's token under its lock while we attach.
            unsafe { merge::attach(rq.rq_mut(), kind, shared.slot(index), shared, bio) };
            front = kind == merge::MergeKind::Front;
            true
        });
        if merged {
            self.shared.counters.merge(head.op, front);
        }
        merged
    }

    /// Splits a bio larger than a request into pieces of at most `max`
    /// bytes that do not cross a zone boundary, each its own request (the
    /// kernel's `bio_split`, with chunk_sectors); the bio completes once,
    /// when its last piece does, with the first error.
    fn submit_split(
        &mut self,
        mut bio: Bio,
        user_data: u64,
        origin: u8,
        reserved: bool,
        max: u64,
    ) -> Result<(), Box<Rejected>> {
        let index = self.free_slots.pop().expect("a free bio slot per outstanding bio");
        let shared = self.shared.clone();
        let slot = shared.slot(index);
        let (q, bio_offset, bio_len) = (self.q.clone(), bio.offset, bio.len);
        let piece_len = |offset: u64| max.min(q.bytes_to_zone_end(bio_offset + offset)).min(bio_len - offset);
        let mut pieces = 0u64;
        let mut offset = 0;
        while offset < bio.len {
            offset += piece_len(offset);
            pieces += 1;
        }
        debug_assert!(pieces > 1 && pieces <= u64::from(u32::MAX));
        let base = bio.buf.as_mut().map(|b| b.as_mut_ptr());
        // SAFETY: no piece is issued yet, so the client owns the slot. The
        // buffer's heap block does not move when the Buf value moves.
        unsafe { slot.start_split(pieces as u32, user_data, origin, bio.buf.take()) };
        let nowait = bio.flags.contains(ReqFlags::NOWAIT);
        let mut offset = 0;
        for i in 0..pieces {
            let len = piece_len(offset);
            // SAFETY: offset + len <= bio.len == the buffer's length
            // (check_bio), so the view stays inside the buffer.
            let view = base.map(|p| (unsafe { p.add(offset as usize) }, len as usize));
            let head = RqHead {
                op: bio.op,
                flags: bio.flags,
                sector: (bio.offset + offset) >> SECTOR_SHIFT,
                nr_sectors: (len >> SECTOR_SHIFT) as u32,
                view,
                // The last piece is marked: the kernel's parent bio, whose
                // own error wins over its children's (completion.rs).
                split: (index + 1) | if i + 1 == pieces { SPLIT_LAST } else { 0 },
                user_data,
                origin,
                ioprio: bio.ioprio,
            };
            // If it must wait, it waits for the tags of all pieces left, so
            // they are issued back to back (locality on rotational media).
            self.alloc.want = (pieces - i).min(u64::from(u32::MAX)) as u32;
            // NOWAIT can only refuse the first piece: later ones wait for a
            // tag, so a bio is never left half issued.
            let issued = self.issue(&head, &mut None, reserved, nowait && i == 0);
            self.alloc.want = 1;
            if !issued {
                // SAFETY: nothing was issued: the client still owns the slot.
                bio.buf = unsafe { slot.with_data_mut(|d| d.buf.take()) };
                self.free_slots.push(index);
                return Err(Box::new(Rejected { error: SubmitError::Again, bio }));
            }
            offset += len;
        }
        self.q.note_split();
        self.note_submitted(bio.op);
        Ok(())
    }

    /// Takes a tag, initialises its request from `head` (taking `buf`) and
    /// issues it, or adds it to the plug. Returns false, leaving `buf`
    /// alone, only if NOWAIT found no tag. Always inlined: the hot path then
    /// writes the request's fields directly (measured: tens of instructions
    /// per I/O otherwise).
    #[inline(always)]
    fn issue(&mut self, head: &RqHead, buf: &mut Option<Buf>, reserved: bool, nowait: bool) -> bool {
        // Reserved requests bypass a scheduler (and the plug): they take a
        // driver tag and go straight to the driver.
        let use_sched = !reserved && self.q.hctx(self.cur_hctx).sched().is_some();
        let Some(got) = self.get_tag(head, use_sched, reserved, nowait) else {
            return false;
        };
        if got.slept {
            self.stats.tag_waits += 1;
            self.q.note_tag_wait();
        }
        let hctx = self.q.hctx(self.cur_hctx);
        // (The scheduler cannot change meanwhile: switching freezes the
        // queue, which waits for this submission.)
        let sched = if use_sched { hctx.sched() } else { None };
        let pool = sched.map_or(&hctx.tags, |s| &s.tags);
        let ptr = pool.rq_ptr(got.tag);
        {
            // SAFETY: slots live as long as the queue.
            let slot = unsafe { ptr.as_ref() };
            debug_assert_eq!(slot.state(), RqState::Idle);
            // SAFETY: holding the tag gives us the request exclusively until
            // we hand it to the driver below.
            let rq = unsafe { &mut *slot.rq.get() };
            rq.op = head.op;
            rq.flags = head.flags;
            rq.sector = head.sector;
            rq.nr_sectors = head.nr_sectors;
            rq.buf = buf.take();
            (rq.view, rq.view_len) = head.view.unwrap_or((std::ptr::null_mut(), 0));
            rq.split = head.split;
            rq.user_data = head.user_data;
            rq.origin = head.origin;
            rq.owner = Arc::as_ptr(&self.shared);
            rq.driver_data = 0;
            rq.client_id = self.client_id;
            rq.ioprio = head.ioprio;
            rq.in_sched = sched.is_some();
            debug_assert_eq!(rq.nr_bios, 1, "a finished request leaves no merged bios behind");
            rq.front = std::ptr::null();
            rq.back = std::ptr::null();
            slot.set_state(RqState::InFlight);
        }
        self.shared.counters.request(head.op);
        // SAFETY: the slot is initialised and we give up access to it.
        let mut rq = unsafe { crate::request::Rq::from_raw(ptr) };
        if let Some(s) = sched {
            s.elevator.prepare_request(self.cur_hctx, &mut rq);
        }
        if reserved {
            hctx.issue(rq, true);
        } else if self.plug.is_plugged() {
            let len_bytes = u64::from(head.nr_sectors) << SECTOR_SHIFT;
            self.plug.add(&self.q, &self.shared.counters, rq, self.cur_hctx, len_bytes);
        } else if sched.is_some() {
            hctx.submit(rq, &mut self.scratch, Some(&mut self.alloc));
        } else {
            hctx.issue(rq, true);
        }
        true
    }

    /// A tag on this client's hardware queue: from the plug's cache, a
    /// batch for the plug's `nr_ios` hint, or one at a time (sleeping for
    /// it unless `nowait`, after flushing the plug). With a scheduler, a
    /// scheduler tag within the depth it allows this op.
    #[inline(always)]
    fn get_tag(&mut self, head: &RqHead, sched: bool, reserved: bool, nowait: bool) -> Option<TagGot> {
        let hctx = self.q.hctx(self.cur_hctx);
        let (pool, limit) = match hctx.sched() {
            Some(s) if sched => (&s.tags, s.elevator.limit_depth(self.cur_hctx, head.op, head.flags)),
            _ => (&hctx.tags, None),
        };
        self.alloc.shallow_depth = limit.unwrap_or(u32::MAX);
        if self.plug.is_plugged() && !reserved && limit.is_none() {
            if let Some(tag) = self.plug.take_cached(self.cur_hctx) {
                return Some(TagGot { tag, slept: false });
            }
            if self.plug.nr_ios > 1 {
                let nr = std::mem::replace(&mut self.plug.nr_ios, 1);
                if let Some((base, mask)) = pool.get_batch(&mut self.alloc, nr) {
                    self.plug.cache(self.cur_hctx, base, mask);
                    return self.plug.take_cached(self.cur_hctx).map(|tag| TagGot { tag, slept: false });
                }
            }
        }
        let (plug, q, counters) = (&mut self.plug, &self.q, &self.shared.counters);
        let polled_here = self.polled_outstanding > 0 && self.poll_hctx == Some(self.cur_hctx);
        if (hctx.is_poll() || polled_here) && !nowait {
            // Tags of a poll queue free only when someone polls: poll while
            // waiting instead of sleeping (nobody would wake us). On a
            // hybrid queue the same holds while our hipri requests are in
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
        pool.get(&mut self.alloc, reserved, nowait, || plug.flush(q, counters))
    }

    /// Starts a plug (`blk_start_plug`): until the returned guard drops,
    /// requests are held so adjacent bios merge and reach the driver in one
    /// batch. Submit through the guard (it derefs to the client); nested
    /// plugs only count levels, and only the outermost one flushes (see
    /// plug.rs for every flush rule).
    ///
    /// ```
    /// use mqblk::{Bio, Buf, Device};
    /// let dev = Device::open("null:gb=1,irqmode=0").unwrap();
    /// let mut client = dev.client();
    /// {
    ///     let mut plug = client.plug();
    ///     for i in 0..4u64 {
    ///         plug.submit(Bio::read(i * 4096, Buf::new(4096)), i).unwrap();
    ///     }
    ///     assert_eq!(plug.plugged_requests(), 1, "four adjacent reads, one request");
    /// } // flushed here
    /// let mut done = Vec::new();
    /// client.do_io(&mut done, 4, 4, None).unwrap();
    /// assert_eq!(dev.stats().merges.read, 3);
    /// ```
    pub fn plug(&mut self) -> Plug<'_> {
        Plug::new(self, 1)
    }

    /// Starts a plug expecting `nr_ios` requests (`blk_start_plug_nr_ios`):
    /// the first one takes tags for up to that many (at most 32) in one
    /// batch. Ignored by an inner plug.
    pub fn plug_nr_ios(&mut self, nr_ios: u32) -> Plug<'_> {
        Plug::new(self, nr_ios)
    }

    /// Runs `f` under a plug of `nr_ios` and ends the plug.
    pub fn with_plug<R>(&mut self, nr_ios: u32, f: impl FnOnce(&mut Client) -> R) -> R {
        let mut plug = self.plug_nr_ios(nr_ios);
        f(&mut plug)
    }

    /// Issues everything the plug holds now (`blk_flush_plug`); the plug
    /// stays active.
    pub fn flush_plug(&mut self) {
        self.plug.flush(&self.q, &self.shared.counters);
    }

    /// Plug levels active on this client (0: not plugged).
    pub fn plug_depth(&self) -> u32 {
        self.plug.depth
    }

    /// Requests held in the plug, not yet issued to the driver.
    pub fn plugged_requests(&self) -> usize {
        self.plug.rqs.len()
    }

    /// Tags the plug has cached for its next requests.
    pub fn plug_cached_tags(&self) -> u32 {
        self.plug.nr_cached()
    }

    #[inline(always)]
    pub(crate) fn plug_state(&mut self) -> &mut PlugState {
        &mut self.plug
    }

    #[inline(always)]
    pub(crate) fn finish_plug(&mut self, outermost: bool, prev_start: usize) {
        self.plug.finish(&self.q, &self.shared.counters, outermost, prev_start);
    }

    /// Gives back tags a handoff wakeup granted to this client and it did
    /// not use, to whichever tags granted them (driver or scheduler).
    fn release_granted(&self) {
        for index in std::iter::once(self.default_hctx).chain(self.poll_hctx) {
            let hctx = self.q.hctx(index);
            hctx.tags.release_granted(&self.alloc);
            if let Some(s) = hctx.sched() {
                s.tags.release_granted(&self.alloc);
            }
        }
    }

    /// Reaps completions into `out`: at least `min` (sleeping as needed,
    /// at most `timeout`) and at most `max`. Returns how many were added;
    /// fewer than `min` only if the timeout passed. `min` may not exceed the
    /// I/Os in flight (it could never be met).
    pub fn do_io(
        &mut self,
        out: &mut Vec<Completion>,
        min: usize,
        max: usize,
        timeout: Option<Duration>,
    ) -> Result<usize, Error> {
        if min > max || min > self.in_flight {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("do_io: min={min} exceeds max={max} or the {} I/Os in flight", self.in_flight),
            )));
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        if min == 0 && self.polled_outstanding > 0 {
            // A pure poll (e.g. after `poll_fd` fired) reaps the queue our
            // polled I/O waits on, without sleeping.
            if let Some(poll) = self.poll_hctx {
                self.q.hctx(poll).reap();
            }
        }
        let mut got = 0;
        while got < max {
            let Some(c) = self.backlog.pop_front() else { break };
            out.push(c);
            got += 1;
        }
        loop {
            got += self.reap_ring(out, max - got);
            if got >= min || got == max {
                break; // min == 0 makes this a pure poll
            }
            let remaining = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(r) if !r.is_zero() => Some(r),
                    _ => break,
                },
                None => None,
            };
            self.sleep_for_completions(remaining);
        }
        self.in_flight -= got;
        self.stats.completed += got as u64;
        Ok(got)
    }

    /// Moves up to `max` user completions from the ring into `out`.
    #[inline]
    fn reap_ring(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        let mut got = 0;
        while got < max {
            // SAFETY: `&mut self`: this client is the ring's only consumer.
            let Some(c) = (unsafe { self.shared.take() }) else {
                if self.rearm_notify() {
                    continue;
                }
                break;
            };
            if c.slot != 0 {
                self.free_slots.push(c.slot - 1);
            }
            if c.origin & ORIGIN_POLLED != 0 {
                self.polled_outstanding -= 1;
                self.hybrid_slept = false;
            }
            if c.origin & !ORIGIN_POLLED == ORIGIN_BLOCKING {
                self.blocking_done = Some(c);
                continue;
            }
            out.push(c);
            got += 1;
        }
        got
    }

    /// With an eventfd, arm it once the ring is drained; returns true if a
    /// completion slipped in meanwhile (so the caller keeps reaping).
    fn rearm_notify(&self) -> bool {
        if !self.notify {
            return false;
        }
        self.shared.notify_armed.store(true, Ordering::SeqCst);
        dekker_fence();
        self.shared.has_ready()
    }

    fn sleep_for_completions(&mut self, timeout: Option<Duration>) {
        // Never sleep on I/O held in our own plug.
        self.plug.flush(&self.q, &self.shared.counters);
        if let (Some(poll), true) = (self.poll_hctx, self.polled_outstanding > 0) {
            // Polled I/O completes only when we poll: reap instead of
            // sleeping (the caller loops, re-checking its ring and timeout).
            // Hybrid polling sleeps first, once per wait, then spins.
            let delay = self.q.hybrid_poll_delay();
            if !delay.is_zero() && !self.hybrid_slept {
                self.hybrid_slept = true;
                self.stats.completion_sleeps += 1;
                // A sleep of a few us is worth it only if it is not
                // stretched by the default 50 us timer slack (the kernel's
                // hybrid poll used an hrtimer without slack): this thread
                // sleeps precisely from now on.
                crate::clock::set_precise_timer_slack();
                std::thread::sleep(delay.min(timeout.unwrap_or(delay)));
            }
            if self.q.hctx(poll).poll() == 0 {
                std::hint::spin_loop();
            }
            return;
        }
        // Never sleep on tags granted to us (handoff policy) and not used.
        self.release_granted();
        if self.shared.sleep_until_delivery(timeout) {
            self.stats.completion_sleeps += 1;
        }
    }

    /// An eventfd that becomes readable when completions are ready. After it
    /// fires, read it and call `do_io` (min 0) until it returns fewer than
    /// asked: draining the ring re-arms the notification. Polled I/O (hipri
    /// on poll queues, or any I/O on a device whose submitters reap, such as
    /// file `reap=client`) completes only inside `do_io`, so it makes the
    /// eventfd fire only when another client reaped it; wait on `poll_fd`
    /// as well.
    ///
    /// The fd belongs to the device (it stays open until the device is
    /// dropped, and a later client may be given it): do not close it.
    pub fn completion_fd(&mut self) -> Result<RawFd, Error> {
        let fd = self.shared.eventfd().map_err(Error::Io)?;
        if !self.notify {
            self.notify = true;
            self.shared.notify_armed.store(true, Ordering::SeqCst);
            // Completions already queued must be signalled too.
            if self.shared.has_ready() && self.shared.notify_armed.swap(false, Ordering::SeqCst) {
                self.shared.signal();
            }
        }
        Ok(fd)
    }

    /// For a client whose I/O is polled (file `reap=client`): an fd that
    /// becomes readable when the queue it polls has completions; when it
    /// does, call `do_io` with min 0, which reaps that queue without
    /// sleeping. Wait on it beside `completion_fd` (a completion another
    /// client reaped for us signals the eventfd). None when the device
    /// has no such fd (polling there means calling `do_io`).
    pub fn poll_fd(&self) -> Option<RawFd> {
        let poll = self.poll_hctx?;
        self.q.submitter_reaps().then(|| self.q.hctx(poll).poll_fd()).flatten()
    }

    /// Waits for every outstanding I/O and drops the completions.
    pub fn drain(&mut self) {
        let mut sink = Vec::with_capacity(self.capacity());
        while self.in_flight > 0 {
            sink.clear();
            let _ = self.do_io(&mut sink, 1, usize::MAX, None);
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // A guard forgotten with mem::forget leaves requests plugged.
        self.plug.flush(&self.q, &self.shared.counters);
        // The device owns our buffers until their I/Os complete: wait.
        self.drain();
        self.release_granted();
        self.shared.quiet_eventfd();
        self.q.release_client(self.shared.clone());
    }
}
