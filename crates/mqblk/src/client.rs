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
//! completion ring; sync.rs for sleeping.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crate::buf::Buf;
use crate::error::{Error, Rejected, SubmitError};
use crate::queue::RequestQueue;
use crate::request::{Bio, ReqFlags, RqState, ORIGIN_BLOCKING, ORIGIN_USER, SECTOR_SHIFT};
use crate::ring::MpscRing;
use crate::status::Status;
use crate::tag::AllocData;
use std::sync::Arc;

use crate::sync::{dekker_fence, AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering, SleepGate};

/// One finished I/O, as `do_io` returns it.
#[derive(Debug)]
pub struct Completion {
    /// The cookie given at submission.
    pub user_data: u64,
    pub status: Status,
    /// The bio's buffer, given back (reads: filled with the data).
    pub buf: Option<Buf>,
    origin: u8,
    /// Split slot + 1 of a split bio (0: not split), recycled at reap.
    split: u32,
}

impl Completion {
    pub(crate) fn new(user_data: u64, status: Status, buf: Option<Buf>, origin: u8) -> Self {
        Self { user_data, status, buf, origin, split: 0 }
    }
}

/// The parent of a split bio: holds its buffer while the pieces are in
/// flight, counts them down, and remembers the first error. One per
/// outstanding bio the client may have, allocated with the client sink.
struct SplitSlot {
    remaining: AtomicU32,
    status: AtomicU8,
    user_data: AtomicU64,
    origin: AtomicU8,
    /// The parent's buffer. Written by the client before the first piece is
    /// issued, taken by the completer of the last piece.
    parent: std::cell::UnsafeCell<Option<Buf>>,
}

// SAFETY: `parent` is accessed by the client before any piece is issued (the
// issue hands the pieces over with Release/Acquire through the driver path)
// and by exactly one completer afterwards: the one whose fetch_sub on
// `remaining` took it to zero (AcqRel, so every piece's writes to the
// buffer happen before). Everything else is atomic.
unsafe impl Sync for SplitSlot {}

impl SplitSlot {
    fn new() -> Self {
        Self {
            remaining: AtomicU32::new(0),
            status: AtomicU8::new(0),
            user_data: AtomicU64::new(0),
            origin: AtomicU8::new(ORIGIN_USER),
            parent: std::cell::UnsafeCell::new(None),
        }
    }
}

/// The part of a client that completers reach: its completion ring and how
/// to wake it. Owned by the queue for the queue's whole life (recycled
/// between clients), so a completer can never touch a freed one.
pub(crate) struct ClientShared {
    ring: MpscRing<Completion>,
    splits: Box<[SplitSlot]>,
    gate: SleepGate,
    /// eventfd to signal, or -1.
    notify_fd: AtomicI32,
    /// The next completion must signal `notify_fd`.
    notify_armed: AtomicBool,
}

impl ClientShared {
    pub(crate) fn new(capacity: usize) -> Self {
        let ring = MpscRing::new(capacity);
        let splits = (0..ring.capacity()).map(|_| SplitSlot::new()).collect();
        Self {
            ring,
            splits,
            gate: SleepGate::default(),
            notify_fd: AtomicI32::new(-1),
            notify_armed: AtomicBool::new(false),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Consumer: sleeps until a completion is delivered (or `timeout`),
    /// unless one is already there. Returns true if it slept.
    pub(crate) fn sleep_until_delivery(&self, timeout: Option<Duration>) -> bool {
        self.gate.sleep_unless(|| self.ring.has_ready(), timeout)
    }

    /// Consumer: the next completion, if any.
    ///
    /// # Safety
    /// Only the owning client (one thread at a time) may call this.
    pub(crate) unsafe fn take(&self) -> Option<Completion> {
        // SAFETY: forwarded contract: single consumer.
        unsafe { self.ring.pop() }
    }

    /// One piece of split bio `index` completed with `status`; the last one
    /// delivers the bio's completion.
    #[cold]
    #[inline(never)]
    pub(crate) fn piece_done(&self, index: u32, status: Status) {
        let slot = &self.splits[index as usize];
        if status != Status::Ok {
            // First error wins.
            let _ = slot.status.compare_exchange(0, status as u8, Ordering::AcqRel, Ordering::Relaxed);
        }
        if slot.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // SAFETY: the last piece's completer owns the parent (see SplitSlot).
        let buf = unsafe { (*slot.parent.get()).take() };
        let status = Status::from_u8(slot.status.load(Ordering::Acquire));
        let mut c =
            Completion::new(slot.user_data.load(Ordering::Relaxed), status, buf, slot.origin.load(Ordering::Relaxed));
        c.split = index + 1;
        self.deliver(c);
    }

    /// Hands a completion to the client and wakes it if it sleeps.
    #[inline(always)]
    pub(crate) fn deliver(&self, completion: Completion) {
        if self.ring.push(completion).is_err() {
            // The client never has more I/Os outstanding than the ring holds.
            panic!("completion ring overflow: client in-flight accounting is broken");
        }
        self.gate.notify();
        let fd = self.notify_fd.load(Ordering::Relaxed);
        if fd >= 0 && self.notify_armed.swap(false, Ordering::SeqCst) {
            signal_eventfd(fd);
        }
    }
}

fn signal_eventfd(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to an fd we created; an error
    // (counter overflow, impossible in practice) leaves the fd readable.
    unsafe {
        libc::write(fd, (&one as *const u64).cast(), 8);
    }
}

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
    hctx_index: usize,
    alloc: AllocData,
    /// Submitted and not yet handed back (by `do_io` or a blocking helper).
    in_flight: usize,
    /// Completions collected while a blocking helper waited.
    backlog: VecDeque<Completion>,
    /// The blocking helper's completion, once it arrives.
    blocking_done: Option<Completion>,
    bounce: Option<Buf>,
    notify_fd: Option<std::os::fd::OwnedFd>,
    /// Free split slots of `shared` (only this client touches the list).
    free_splits: Vec<u32>,
    stats: ClientStats,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("hctx", &self.hctx_index)
            .field("in_flight", &self.in_flight)
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl Client {
    pub(crate) fn new(q: Arc<RequestQueue>, shared: Arc<ClientShared>, seq: usize) -> Self {
        let hctx_index = seq % q.nr_hw_queues();
        let capacity = shared.capacity();
        Self {
            hctx_index,
            // Spread clients' hints, and their waits over the 8 wait queues
            // (as hctxs spread over them).
            alloc: AllocData::new((seq as u32).wrapping_mul(0x9e37_79b9), seq),
            q,
            shared,
            in_flight: 0,
            backlog: VecDeque::with_capacity(capacity),
            blocking_done: None,
            bounce: None,
            notify_fd: None,
            free_splits: (0..capacity as u32).rev().collect(),
            stats: ClientStats::default(),
        }
    }

    /// The hardware queue this client submits to.
    pub fn hctx_index(&self) -> usize {
        self.hctx_index
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

    fn submit_inner(&mut self, mut bio: Bio, user_data: u64, origin: u8, reserved: bool) -> Result<(), Box<Rejected>> {
        if reserved && self.q.hctx(self.hctx_index).tags.nr_reserved_tags() == 0 {
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
        if bio.len > max {
            return self.submit_split(bio, user_data, origin, reserved, max);
        }
        let nowait = bio.flags.contains(ReqFlags::NOWAIT);
        let head = RqHead {
            op: bio.op,
            flags: bio.flags,
            sector: bio.offset >> SECTOR_SHIFT,
            nr_sectors: (bio.len >> SECTOR_SHIFT) as u32,
            view: None,
            split: 0,
            user_data,
            origin,
        };
        if !self.issue(&head, &mut bio.buf, reserved, nowait) {
            return Err(Box::new(Rejected { error: SubmitError::Again, bio }));
        }
        self.in_flight += 1;
        self.stats.submitted += 1;
        Ok(())
    }

    /// Splits a bio larger than a request into pieces of at most `max`
    /// bytes, each its own request (the kernel's `bio_split`); the bio
    /// completes once, when its last piece does, with the first error.
    fn submit_split(
        &mut self,
        mut bio: Bio,
        user_data: u64,
        origin: u8,
        reserved: bool,
        max: u64,
    ) -> Result<(), Box<Rejected>> {
        let index = self.free_splits.pop().expect("a free split slot per outstanding bio");
        let shared = self.shared.clone();
        let slot = &shared.splits[index as usize];
        let pieces = bio.len.div_ceil(max);
        debug_assert!(pieces > 1 && pieces <= u64::from(u32::MAX));
        slot.remaining.store(pieces as u32, Ordering::Relaxed);
        slot.status.store(0, Ordering::Relaxed);
        slot.user_data.store(user_data, Ordering::Relaxed);
        slot.origin.store(origin, Ordering::Relaxed);
        let base = bio.buf.as_mut().map(|b| b.as_mut_ptr());
        // SAFETY: no piece is issued yet, so the client owns the slot. The
        // buffer's heap block does not move when the Buf value moves.
        unsafe { *slot.parent.get() = bio.buf.take() };
        let nowait = bio.flags.contains(ReqFlags::NOWAIT);
        for i in 0..pieces {
            let offset = i * max;
            let len = max.min(bio.len - offset);
            // SAFETY: offset + len <= bio.len == the buffer's length
            // (check_bio), so the view stays inside the buffer.
            let view = base.map(|p| (unsafe { p.add(offset as usize) }, len as usize));
            let head = RqHead {
                op: bio.op,
                flags: bio.flags,
                sector: (bio.offset + offset) >> SECTOR_SHIFT,
                nr_sectors: (len >> SECTOR_SHIFT) as u32,
                view,
                split: index + 1,
                user_data,
                origin,
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
                bio.buf = unsafe { (*slot.parent.get()).take() };
                self.free_splits.push(index);
                return Err(Box::new(Rejected { error: SubmitError::Again, bio }));
            }
        }
        self.q.note_split();
        self.in_flight += 1;
        self.stats.submitted += 1;
        Ok(())
    }

    /// Takes a tag, initialises its request from `head` (taking `buf`) and
    /// issues it. Returns false, leaving `buf` alone, only if NOWAIT found
    /// no tag. Always inlined: the hot path then writes the request's fields
    /// directly (measured: tens of instructions per I/O otherwise).
    #[inline(always)]
    fn issue(&mut self, head: &RqHead, buf: &mut Option<Buf>, reserved: bool, nowait: bool) -> bool {
        let hctx = self.q.hctx(self.hctx_index);
        let Some(got) = hctx.tags.get(&mut self.alloc, reserved, nowait, || {}) else {
            return false;
        };
        if got.slept {
            self.stats.tag_waits += 1;
            self.q.note_tag_wait();
        }
        let ptr = hctx.tags.rq_ptr(got.tag);
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
            slot.deadline.store(self.q.timeout_deadline(), Ordering::Relaxed);
            slot.set_state(RqState::InFlight);
        }
        // SAFETY: the slot is initialised and we give up access to it.
        let rq = unsafe { crate::request::Rq::from_raw(ptr) };
        hctx.issue(rq, true);
        true
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
            if c.split != 0 {
                self.free_splits.push(c.split - 1);
            }
            if c.origin == ORIGIN_BLOCKING {
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
        if self.notify_fd.is_none() {
            return false;
        }
        self.shared.notify_armed.store(true, Ordering::SeqCst);
        dekker_fence();
        self.shared.ring.has_ready()
    }

    fn sleep_for_completions(&mut self, timeout: Option<Duration>) {
        // Never sleep on tags granted to us (handoff policy) and not used.
        self.q.hctx(self.hctx_index).tags.release_granted(&self.alloc);
        if self.shared.sleep_until_delivery(timeout) {
            self.stats.completion_sleeps += 1;
        }
    }

    /// An eventfd that becomes readable when completions are ready. After it
    /// fires, read it and call `do_io` (min 0) until it returns fewer than
    /// asked: draining the ring re-arms the notification.
    pub fn completion_fd(&mut self) -> Result<RawFd, Error> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        if let Some(fd) = &self.notify_fd {
            return Ok(fd.as_raw_fd());
        }
        // SAFETY: plain syscall; the returned fd is checked below.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(Error::Io(std::io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a new fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        self.shared.notify_armed.store(true, Ordering::SeqCst);
        self.shared.notify_fd.store(raw, Ordering::SeqCst);
        self.notify_fd = Some(fd);
        // Completions already queued must be signalled too.
        if self.shared.ring.has_ready() && self.shared.notify_armed.swap(false, Ordering::SeqCst) {
            signal_eventfd(raw);
        }
        Ok(raw)
    }

    /// Reads `buf.len()` bytes at `offset`, waiting for the result. Other
    /// I/Os of this client keep flowing and are returned by later `do_io`s.
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<(), Error> {
        let bounce = self.take_bounce(buf.len());
        let done = self.blocking(Bio::read(offset, bounce))?;
        let data = done.buf.expect("read completion carries its buffer");
        if done.status.is_ok() {
            buf.copy_from_slice(&data);
        }
        self.bounce = Some(data);
        status_result(done.status)
    }

    /// Writes `buf` at `offset`, waiting for the result.
    pub fn write_at(&mut self, buf: &[u8], offset: u64) -> Result<(), Error> {
        let mut bounce = self.take_bounce(buf.len());
        bounce.copy_from_slice(buf);
        let done = self.blocking(Bio::write(offset, bounce))?;
        self.bounce = done.buf;
        status_result(done.status)
    }

    /// Submits any bio and waits for it (flush, discard, write zeroes ...).
    pub fn submit_and_wait(&mut self, bio: Bio) -> Result<Option<Buf>, Error> {
        let done = self.blocking(bio)?;
        status_result(done.status)?;
        Ok(done.buf)
    }

    fn take_bounce(&mut self, len: usize) -> Buf {
        match self.bounce.take() {
            Some(b) if b.len() == len => b,
            _ => Buf::new(len),
        }
    }

    fn blocking(&mut self, bio: Bio) -> Result<Completion, Error> {
        self.submit_inner(bio, 0, ORIGIN_BLOCKING, false).map_err(|r| Error::Submit(r.error))?;
        let mut scratch = Vec::new();
        loop {
            let n = self.reap_ring(&mut scratch, usize::MAX);
            self.backlog.extend(scratch.drain(..n));
            if let Some(done) = self.blocking_done.take() {
                self.in_flight -= 1;
                return Ok(done);
            }
            self.sleep_for_completions(None);
        }
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

fn status_result(status: Status) -> Result<(), Error> {
    if status.is_ok() {
        Ok(())
    } else {
        Err(Error::Status(status))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // The device owns our buffers until their I/Os complete: wait.
        self.drain();
        self.q.hctx(self.hctx_index).tags.release_granted(&self.alloc);
        self.shared.notify_fd.store(-1, Ordering::SeqCst);
        self.shared.notify_armed.store(false, Ordering::SeqCst);
        self.q.release_client(self.shared.clone());
    }
}
