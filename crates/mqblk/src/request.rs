//! Requests and the request lifecycle.
//!
//! A [`Bio`] (bio.rs) is what a client submits. A `Request` is the block layer's
//! unit of work: one pre-allocated slot per tag, initialised from a bio when
//! a tag is taken, handed to the driver as an [`Rq`] token and recycled when
//! the driver completes it. Nothing here allocates per I/O.
//!
//! Ownership: exactly one party owns a request slot at a time. The submitter
//! owns it from tag allocation until `queue_rq`; the driver owns the `Rq`
//! token until it calls [`Rq::complete`] (or drops it, which completes it
//! with `IoErr` so that a buggy driver cannot leak a tag). The tag being held
//! is what makes that exclusive access sound.
//!
//! Lifecycle (checked in debug builds):
//!
//! | from     | to       | when                                   |
//! |----------|----------|----------------------------------------|
//! | Idle     | InFlight | tag taken, slot initialised            |
//! | InFlight | Complete | driver calls `complete`                |
//! | Complete | Idle     | tags about to be freed                 |
//!
//! The timeout scanner may hold an InFlight request (`HELD`, the kernel's
//! reference taken in `blk_mq_check_expired`) while the driver's timeout
//! handler runs: a request completed meanwhile goes Complete | HELD and
//! the scanner, not the completer, frees its tags when the handler returns,
//! so the tag the handler was given cannot name a newer request.

use std::fmt;
use std::ptr::NonNull;

use crate::buf::Buf;
use crate::completion::{BioSlot, ClientShared};
use crate::hctx::Hctx;
use crate::status::Status;
use crate::sync::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Marks the last piece of a split bio in `Request::split`.
pub(crate) const SPLIT_LAST: u32 = 1 << 31;

pub(crate) use crate::bio::NR_OPS;
pub use crate::bio::{op_is_sync, Bio, IoPrio, IoPrioClass, Op, ReqFlags, SECTOR_SHIFT, SECTOR_SIZE};

/// Lifecycle state of a request slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum RqState {
    Idle = 0,
    InFlight = 1,
    Complete = 2,
}

/// Or-ed into the state while the timeout scanner holds the request.
const HELD: u8 = 0x4;
const IN_FLIGHT: u8 = RqState::InFlight as u8;
const COMPLETE: u8 = RqState::Complete as u8;

impl RqState {
    fn from_u8(v: u8) -> RqState {
        match v & !HELD {
            0 => RqState::Idle,
            1 => RqState::InFlight,
            _ => RqState::Complete,
        }
    }

    /// The transition table of the module header.
    pub(crate) fn can_become(self, next: RqState) -> bool {
        matches!(
            (self, next),
            (RqState::Idle, RqState::InFlight)
                | (RqState::InFlight, RqState::Complete)
                | (RqState::Complete, RqState::Idle)
        )
    }
}

/// Marks completions of the blocking helpers (`read_at`/`write_at`), which
/// the client consumes itself and never returns from `do_io`.
pub(crate) const ORIGIN_USER: u8 = 0;
pub(crate) const ORIGIN_BLOCKING: u8 = 1;
/// Or-ed into the origin of a bio submitted to a poll queue: its
/// completion arrives only when its client polls.
pub(crate) const ORIGIN_POLLED: u8 = 0x80;

/// The mutable part of a request slot: only the tag holder touches it.
pub(crate) struct Request {
    pub(crate) tag: u32,
    pub(crate) hctx: *const Hctx,
    pub(crate) op: Op,
    pub(crate) flags: ReqFlags,
    pub(crate) sector: u64,
    pub(crate) nr_sectors: u32,
    pub(crate) buf: Option<Buf>,
    pub(crate) user_data: u64,
    pub(crate) origin: u8,
    /// The submitting client's completion sink; lives as long as the queue.
    pub(crate) owner: *const ClientShared,
    /// Scratch space for the driver (its per-request "pdu").
    pub(crate) driver_data: u64,
    /// What to free when a request the timeout scanner held completed:
    /// written by the completer before it hands the request over.
    pub(crate) held_release: Option<TagRelease>,
    /// The submitting client (its "process" for schedulers) and priority.
    pub(crate) client_id: u32,
    pub(crate) ioprio: IoPrio,
    /// Scratch time for the scheduler (kyber: when it was inserted, ns).
    pub(crate) sched_time_ns: u64,
    /// The request holds a scheduler tag (its slot is the scheduler's).
    pub(crate) in_sched: bool,
    /// A piece of a split bio: its split slot + 1 in the owner's table
    /// (0: not split), `SPLIT_LAST` on the last piece; and its part of the
    /// parent's buffer.
    pub(crate) split: u32,
    pub(crate) view: *mut u8,
    pub(crate) view_len: usize,
    /// Bios this request carries: its own (above) plus those merged in.
    pub(crate) nr_bios: u32,
    /// Bios front-merged (lower sectors, in order) and back-merged (higher
    /// sectors, in order, with the tail for appending); null when none.
    pub(crate) front: *const BioSlot,
    pub(crate) back: *const BioSlot,
    pub(crate) back_tail: *const BioSlot,
}

/// A request slot: one per tag, allocated with the tag set. The atomics are
/// outside the `UnsafeCell` because the timeout scanner reads them while the
/// tag holder owns the request.
pub(crate) struct RequestSlot {
    /// Lifecycle state (`RqState`).
    pub(crate) state: AtomicU8,
    /// Timeout deadline in queue ticks (0: none): armed when the request
    /// is handed to the driver (`blk_mq_start_request`), never while it
    /// waits in a plug or a scheduler.
    pub(crate) deadline: AtomicU64,
    /// The tag the driver sees: the slot's own tag without a scheduler;
    /// with one (the slot's tag is then a scheduler tag) the driver tag
    /// taken at dispatch. Atomic so that the timeout scanner can read it
    /// while the driver owns the request.
    pub(crate) driver_tag: AtomicU32,
    pub(crate) rq: std::cell::UnsafeCell<Request>,
}

/// The tags a finished request gives back, copied out of its slot before
/// any is freed (once the slot's tag is free, another thread may reuse it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TagRelease {
    pub(crate) tag: u32,
    pub(crate) driver_tag: u32,
    /// With a scheduler: what it is told (`Elevator::finish_request`).
    pub(crate) sched: Option<crate::sched::DoneInfo>,
}

impl TagRelease {
    #[inline(always)]
    pub(crate) fn of(slot: &RequestSlot, rq: &Request) -> Self {
        // Built only with a scheduler: this is the hot completion path.
        let sched = if rq.in_sched {
            Some(crate::sched::DoneInfo {
                sched_tag: rq.tag,
                op: rq.op,
                flags: rq.flags,
                nr_sectors: rq.nr_sectors,
                client_id: rq.client_id,
                ioprio: rq.ioprio,
                inserted_ns: rq.sched_time_ns,
            })
        } else {
            None
        };
        Self { tag: rq.tag, driver_tag: slot.driver_tag.load(Ordering::Relaxed), sched }
    }
}

// SAFETY: the `UnsafeCell<Request>` is only accessed by whoever holds the
// slot's tag (the submitter, then the `Rq` token's owner), one at a time,
// with the handover ordered by the tag bitmap's atomics; the raw pointers
// point at the hctx and a client sink, both Sync and kept alive by the queue.
// Other threads only read the atomics.
unsafe impl Sync for RequestSlot {}
// SAFETY: as above; nothing in a slot is tied to a thread.
unsafe impl Send for RequestSlot {}

impl RequestSlot {
    pub(crate) fn new(tag: u32) -> Self {
        let rq = Request {
            tag,
            hctx: std::ptr::null(),
            op: Op::Read,
            flags: ReqFlags::NONE,
            sector: 0,
            nr_sectors: 0,
            buf: None,
            user_data: 0,
            origin: ORIGIN_USER,
            owner: std::ptr::null(),
            driver_data: 0,
            held_release: None,
            client_id: 0,
            ioprio: IoPrio { class: IoPrioClass::Be, level: 4 },
            sched_time_ns: 0,
            in_sched: false,
            split: 0,
            view: std::ptr::null_mut(),
            view_len: 0,
            nr_bios: 1,
            front: std::ptr::null(),
            back: std::ptr::null(),
            back_tail: std::ptr::null(),
        };
        Self {
            state: AtomicU8::new(RqState::Idle as u8),
            deadline: AtomicU64::new(0),
            driver_tag: AtomicU32::new(tag),
            rq: std::cell::UnsafeCell::new(rq),
        }
    }

    pub(crate) fn state(&self) -> RqState {
        RqState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// The driver completed the request: InFlight -> Complete. False if
    /// the timeout scanner holds it; then `held_release` must be stashed
    /// and the request handed over with `hand_over`.
    #[inline]
    pub(crate) fn try_complete(&self) -> bool {
        match self.state.compare_exchange(IN_FLIGHT, COMPLETE, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(cur) => {
                assert_eq!(cur, IN_FLIGHT | HELD, "request: completed in state {cur:#x}");
                false
            }
        }
    }

    /// A held request completed: Complete | HELD, leaving the release to
    /// the scanner (`end_hold`). False if the hold ended meanwhile (retry
    /// `try_complete`).
    pub(crate) fn hand_over(&self) -> bool {
        self.state.compare_exchange(IN_FLIGHT | HELD, COMPLETE | HELD, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Timeout scanner: holds an in-flight request so that it cannot be
    /// freed and reused while the driver's timeout handler runs.
    pub(crate) fn try_hold(&self) -> bool {
        self.state.compare_exchange(IN_FLIGHT, IN_FLIGHT | HELD, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// Ends a hold. True if the request completed meanwhile: the caller
    /// then frees it (its `held_release`), the slot being Complete.
    pub(crate) fn end_hold(&self) -> bool {
        match self.state.compare_exchange(IN_FLIGHT | HELD, IN_FLIGHT, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => false,
            Err(cur) => {
                assert_eq!(cur, COMPLETE | HELD, "request: hold ended in state {cur:#x}");
                self.state.store(COMPLETE, Ordering::Relaxed);
                true
            }
        }
    }

    /// Moves the lifecycle on; asserts the transition in debug builds.
    #[inline]
    pub(crate) fn set_state(&self, next: RqState) {
        if cfg!(debug_assertions) {
            let prev = RqState::from_u8(self.state.swap(next as u8, Ordering::AcqRel));
            assert!(prev.can_become(next), "request: illegal transition {prev:?} -> {next:?}");
        } else {
            self.state.store(next as u8, Ordering::Release);
        }
    }
}

/// The driver's handle on one in-flight request: a move-only token. Hand it
/// back with [`Rq::complete`]; dropping it completes the request with
/// [`Status::IoErr`].
pub struct Rq {
    ptr: NonNull<RequestSlot>,
}

// SAFETY: an `Rq` is the unique owner of its request slot while it exists
// (the held tag guarantees no one else touches the slot), and everything in
// the slot is `Send`. Moving the token to a completion thread is the point.
unsafe impl Send for Rq {}

impl Rq {
    /// # Safety
    /// The caller holds the tag of `ptr`'s slot, has initialised it, and
    /// gives up all access to it to this token.
    pub(crate) unsafe fn from_raw(ptr: NonNull<RequestSlot>) -> Self {
        Self { ptr }
    }

    #[inline(always)]
    pub(crate) fn rq(&self) -> &Request {
        // SAFETY: the token owns the slot's request exclusively (see the
        // type's Send impl); the slot lives as long as the queue.
        unsafe { &*self.ptr.as_ref().rq.get() }
    }

    /// The request's slot (its atomics).
    #[inline(always)]
    pub(crate) fn slot(&self) -> &RequestSlot {
        // SAFETY: slots live as long as the queue.
        unsafe { self.ptr.as_ref() }
    }

    #[inline(always)]
    pub(crate) fn rq_mut(&mut self) -> &mut Request {
        // SAFETY: as in `rq`, and `&mut self` makes the access exclusive.
        unsafe { &mut *self.ptr.as_ref().rq.get() }
    }

    /// The request's driver tag (unique among the requests the driver
    /// holds on this hardware queue). Not the slot's `tag` field, which is
    /// the scheduler tag when there is a scheduler.
    pub fn tag(&self) -> u32 {
        self.slot().driver_tag.load(Ordering::Relaxed)
    }

    /// Sets the driver tag taken for a scheduler's request at dispatch.
    #[inline(always)]
    pub(crate) fn set_driver_tag(&mut self, tag: u32) {
        self.slot().driver_tag.store(tag, Ordering::Relaxed);
    }

    /// The request's slot tag: the scheduler tag when the queue has a
    /// scheduler (what a scheduler indexes its per-request state with),
    /// else the same as [`Rq::tag`].
    pub fn sched_tag(&self) -> u32 {
        self.rq().tag
    }

    /// The submitting client, for schedulers that serve clients in
    /// proportion (bfq).
    pub fn client_id(&self) -> u32 {
        self.rq().client_id
    }

    pub fn ioprio(&self) -> IoPrio {
        self.rq().ioprio
    }

    /// See [`op_is_sync`].
    pub fn is_sync(&self) -> bool {
        op_is_sync(self.rq().op, self.rq().flags)
    }

    /// The scheduler's time stamp of the request (kyber: insertion, ns).
    pub fn sched_time_ns(&self) -> u64 {
        self.rq().sched_time_ns
    }

    pub fn op(&self) -> Op {
        self.rq().op
    }

    pub fn flags(&self) -> ReqFlags {
        self.rq().flags
    }

    /// First sector (512-byte units).
    pub fn sector(&self) -> u64 {
        self.rq().sector
    }

    pub fn nr_sectors(&self) -> u32 {
        self.rq().nr_sectors
    }

    pub fn pos_bytes(&self) -> u64 {
        self.rq().sector << SECTOR_SHIFT
    }

    pub fn len_bytes(&self) -> u64 {
        u64::from(self.rq().nr_sectors) << SECTOR_SHIFT
    }

    /// Index of the hardware queue the request was dispatched to.
    pub fn hctx_index(&self) -> usize {
        // SAFETY: `hctx` points into the queue's hctx array, which outlives
        // every request of the queue.
        unsafe { (*self.rq().hctx).index() }
    }

    /// Bios (data segments) the request carries: 1 unless bios were
    /// merged into it.
    pub fn nr_segments(&self) -> u32 {
        self.rq().nr_bios
    }

    /// The data of a write (empty for ops without data). Only for a request
    /// of one segment: use [`Rq::for_each_segment`] for merged requests.
    pub fn data(&self) -> &[u8] {
        let rq = self.rq();
        assert_eq!(rq.nr_bios, 1, "Rq::data on a merged request: use for_each_segment");
        inline_data(rq)
    }

    /// The buffer a read fills (empty for ops without data). Only for a
    /// request of one segment: use [`Rq::for_each_segment_mut`] otherwise.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let rq = self.rq_mut();
        assert_eq!(rq.nr_bios, 1, "Rq::data_mut on a merged request: use for_each_segment_mut");
        inline_data_mut(rq)
    }

    /// Calls `f(pos_bytes, data)` for each segment, in device order.
    pub fn for_each_segment(&self, mut f: impl FnMut(u64, &[u8])) {
        let rq = self.rq();
        let mut pos = rq.sector << SECTOR_SHIFT;
        let mut emit = |data: &[u8]| {
            f(pos, data);
            pos += data.len() as u64;
        };
        // SAFETY: the token owns the request, and with it the merged bios'
        // slots (see BioSlot), for as long as it lives; `&self` admits only
        // readers, so `f` may even walk the segments again.
        unsafe { walk_chain(rq.front, |d| emit(d.buf.as_deref().unwrap_or(&[]))) };
        emit(inline_data(rq));
        // SAFETY: as above.
        unsafe { walk_chain(rq.back, |d| emit(d.buf.as_deref().unwrap_or(&[]))) };
    }

    /// Calls `f(pos_bytes, buffer)` for each segment, in device order, with
    /// the buffer to fill (reads).
    pub fn for_each_segment_mut(&mut self, mut f: impl FnMut(u64, &mut [u8])) {
        let rq = self.rq_mut();
        let mut pos = rq.sector << SECTOR_SHIFT;
        let mut emit = |data: &mut [u8]| {
            let len = data.len() as u64;
            f(pos, data);
            pos += len;
        };
        // SAFETY: as in `for_each_segment`; `&mut self` makes it exclusive
        // (`f` cannot reach this request while it runs).
        unsafe { walk_chain_mut(rq.front, |d| emit(d.buf.as_deref_mut().unwrap_or(&mut []))) };
        emit(inline_data_mut(rq));
        // SAFETY: as above.
        unsafe { walk_chain_mut(rq.back, |d| emit(d.buf.as_deref_mut().unwrap_or(&mut []))) };
    }

    /// A word of per-request driver state.
    pub fn driver_data(&mut self) -> &mut u64 {
        &mut self.rq_mut().driver_data
    }

    /// Zone append: records where the data went (the zone's write pointer
    /// when the driver wrote it), reported in the completion.
    pub fn set_append_sector(&mut self, sector: u64) {
        debug_assert_eq!(self.op(), Op::ZoneAppend);
        self.rq_mut().sector = sector;
    }

    /// Ends the request: every bio completes to its client with `status`,
    /// and the tag is freed. Callable from any thread.
    #[inline]
    pub fn complete(self, status: Status) {
        let ptr = self.ptr;
        std::mem::forget(self);
        // SAFETY: we consumed the unique token for this slot.
        unsafe { Hctx::end_request(ptr, status, 0) }
    }

    /// Ends the request after a partial transfer (the kernel's
    /// `blk_update_request` + `blk_mq_end_request`): bios that lie wholly
    /// within the first `ok_bytes` complete with `Ok`, the rest with
    /// `status`.
    pub fn complete_bytes(self, ok_bytes: u64, status: Status) {
        let status = if self.rq().nr_bios == 1 && ok_bytes >= self.len_bytes() { Status::Ok } else { status };
        let ptr = self.ptr;
        std::mem::forget(self);
        // SAFETY: we consumed the unique token for this slot.
        unsafe { Hctx::end_request(ptr, status, ok_bytes) }
    }
}

/// The request's own bio's data: its buffer, or its view into a split
/// parent's buffer.
fn inline_data(rq: &Request) -> &[u8] {
    if !rq.view.is_null() {
        // SAFETY: a split piece views its own disjoint part of the parent
        // bio's buffer, which the owner's bio slot keeps alive until the
        // last piece completes; the token gives exclusive access.
        return unsafe { std::slice::from_raw_parts(rq.view, rq.view_len) };
    }
    rq.buf.as_deref().unwrap_or(&[])
}

fn inline_data_mut(rq: &mut Request) -> &mut [u8] {
    if !rq.view.is_null() {
        // SAFETY: as in `inline_data`; `&mut` makes the access exclusive and
        // no other piece overlaps this range.
        return unsafe { std::slice::from_raw_parts_mut(rq.view, rq.view_len) };
    }
    rq.buf.as_deref_mut().unwrap_or(&mut [])
}

/// Calls `f` on each merged bio of a chain, in order, reading.
///
/// # Safety
/// The caller owns the request the chain belongs to (no one writes the
/// chain's slots meanwhile).
unsafe fn walk_chain(mut p: *const BioSlot, mut f: impl FnMut(&crate::completion::BioSlotData)) {
    while !p.is_null() {
        // SAFETY: chain links point at live slots of queue-owned sinks, and
        // the request's owner is their user (forwarded contract).
        p = unsafe {
            (*p).with_data(|d| {
                f(d);
                d.next
            })
        };
    }
}

/// As `walk_chain`, with each bio's data to change.
///
/// # Safety
/// The caller owns the request exclusively (`&mut`), and `f` does not reach
/// the chain's slots.
unsafe fn walk_chain_mut(mut p: *const BioSlot, mut f: impl FnMut(&mut crate::completion::BioSlotData)) {
    while !p.is_null() {
        // SAFETY: as in `walk_chain`, exclusively (forwarded contract).
        p = unsafe {
            (*p).with_data_mut(|d| {
                f(d);
                d.next
            })
        };
    }
}

impl Drop for Rq {
    fn drop(&mut self) {
        // SAFETY: the token is being destroyed and owns the slot.
        unsafe { Hctx::end_request(self.ptr, Status::IoErr, 0) }
    }
}

/// An ordered list of requests (the kernel's `struct rq_list`): what a
/// plug holds and what `Driver::queue_rqs` receives. Taking from the front
/// is O(1) and moves nothing; the storage is reused, so a plug never
/// allocates once its list has grown to its largest size.
#[derive(Default)]
pub struct RqList {
    /// Requests from `head` on; slots before it were taken.
    rqs: Vec<Option<Rq>>,
    head: usize,
}

impl RqList {
    pub fn with_capacity(capacity: usize) -> Self {
        Self { rqs: Vec::with_capacity(capacity), head: 0 }
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.rqs.len() - self.head
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline(always)]
    pub fn push_back(&mut self, rq: Rq) {
        self.rqs.push(Some(rq));
    }

    /// Takes the first request.
    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<Rq> {
        let rq = self.rqs.get_mut(self.head)?.take();
        self.head += 1;
        if self.head == self.rqs.len() {
            self.reset();
        }
        rq
    }

    /// Every request was taken: reuse the storage from the start.
    #[inline(always)]
    fn reset(&mut self) {
        debug_assert!(self.rqs.iter().all(Option::is_none));
        // SAFETY: shrinking the length only forgets elements, which is
        // always sound; here every one is `None` (all were taken), so
        // nothing is even leaked, and `clear` would just walk them.
        unsafe { self.rqs.set_len(0) };
        self.head = 0;
    }

    /// Puts a request back in front (a driver that was busy).
    pub fn push_front(&mut self, rq: Rq) {
        if self.head > 0 {
            self.head -= 1;
            self.rqs[self.head] = Some(rq);
        } else {
            self.rqs.insert(0, Some(rq));
        }
    }

    /// The requests, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Rq> {
        self.rqs[self.head..].iter().flatten()
    }

    pub fn front(&self) -> Option<&Rq> {
        self.rqs.get(self.head).and_then(Option::as_ref)
    }

    pub fn back_mut(&mut self) -> Option<&mut Rq> {
        if self.is_empty() {
            return None;
        }
        self.rqs.last_mut().and_then(Option::as_mut)
    }

    /// Moves the requests from position `at` on to the back of `other`.
    pub(crate) fn move_tail_to(&mut self, at: usize, other: &mut RqList) {
        let start = (self.head + at).min(self.rqs.len());
        other.rqs.extend(self.rqs.drain(start..));
        if self.head == self.rqs.len() {
            self.rqs.clear();
            self.head = 0;
        }
    }
}

impl Iterator for RqList {
    type Item = Rq;
    fn next(&mut self) -> Option<Rq> {
        self.pop_front()
    }
}

impl fmt::Debug for RqList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.rqs[self.head..].iter().flatten()).finish()
    }
}

impl fmt::Debug for Rq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rq = self.rq();
        f.debug_struct("Rq")
            .field("tag", &rq.tag)
            .field("op", &rq.op)
            .field("flags", &rq.flags)
            .field("sector", &rq.sector)
            .field("nr_sectors", &rq.nr_sectors)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_table() {
        use RqState::*;
        assert!(Idle.can_become(InFlight));
        assert!(InFlight.can_become(Complete));
        assert!(Complete.can_become(Idle));
        assert!(!Idle.can_become(Complete));
        assert!(!InFlight.can_become(Idle));
        assert!(!Complete.can_become(InFlight));
    }
}
