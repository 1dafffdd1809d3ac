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
//!
//! This file holds the slot and its lifecycle (`RequestSlot`, `Request`,
//! `RqState`, `TagRelease`); the pool of slots and the two ends of a
//! request's life that reach into a slot (starting one, ending one) are in
//! pool.rs, the one place besides the token's own accessors that does; the
//! driver's token `Rq` (accessors, segments) is in rq.rs, and `RqList` in
//! rq_list.rs.
//!
//! Relies on: completion.rs for the client sinks and merged bios' slots;
//! hctx/, which points slots at their queue and ends requests (end.rs).

mod pool;
mod rq;
mod rq_list;
mod segs;

use crate::buf::{BioVec, SegArrayRaw};
use crate::completion::{BioSlot, ClientShared};
use crate::segment::{Phys, SegLimits};
use crate::sync::{AtomicU32, AtomicU64, AtomicU8, Ordering};

pub(crate) use pool::{Ending, Owner, Pool};
pub use rq::Rq;
pub use rq_list::RqList;
pub(crate) use segs::phys as request_phys;
pub use segs::{Segments, SegmentsMut};

/// Marks the last piece of a split bio in `Request::split`.
pub(crate) const SPLIT_LAST: u32 = 1 << 31;

pub(crate) use crate::bio::NR_OPS;
pub(crate) use crate::bio::{op_is_sync, Bio, IoPrio, IoPrioClass, Op, ReqFlags, SECTOR_SHIFT};

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

pub(crate) use crate::completion::{ORIGIN_BLOCKING, ORIGIN_POLLED, ORIGIN_USER};

/// The mutable part of a request slot: only the tag holder touches it.
pub(crate) struct Request {
    pub(crate) tag: u32,
    /// The hardware context the slot belongs to (hctx/), type-erased so
    /// that request/ stays below hctx/ in the module order; only hctx/
    /// turns it back into its type (`HwCtx::of`).
    pub(crate) hctx: *const (),
    /// That hardware context's index.
    pub(crate) hctx_index: u32,
    pub(crate) op: Op,
    pub(crate) flags: ReqFlags,
    pub(crate) sector: u64,
    pub(crate) nr_sectors: u32,
    /// The request's own bio's segments (not a split piece's: see `view`).
    pub(crate) segs: BioVec,
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
    /// parent's segments, as the kernel's `bvec_iter`: the parent's array
    /// (None: not a piece, or a piece without data), the first segment it
    /// touches, the bytes of that segment before it, its bytes.
    pub(crate) split: u32,
    pub(crate) view: Option<SegArrayRaw>,
    pub(crate) view_index: u32,
    pub(crate) view_skip: u32,
    pub(crate) view_len: u32,
    /// The queue's segment limits (set once, with `hctx`).
    pub(crate) seg_limits: SegLimits,
    /// Physical segments, counted when a merge first looks at the request
    /// (`nr` 0: not counted; the plain path never counts). A request that
    /// was counted ends on the general path, which resets it.
    pub(crate) phys: Phys,
    /// Bios this request carries: its own (above) plus those merged in.
    pub(crate) nr_bios: u32,
    /// One bio, not a split piece, not the scheduler's, not a zone append:
    /// `end_request` takes its plain path (set at issue, cleared by a merge).
    pub(crate) plain_end: bool,
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
    pub(crate) sched: Option<DoneInfo>,
}

impl TagRelease {
    /// A request without a scheduler: its slot's tag, which is its driver
    /// tag too.
    #[inline(always)]
    pub(crate) fn plain(tag: u32) -> Self {
        Self { tag, driver_tag: tag, sched: None }
    }

    #[inline(always)]
    fn of(rq: &Request, driver_tag: u32) -> Self {
        // Built only with a scheduler: this is the hot completion path.
        let sched = if rq.in_sched {
            Some(DoneInfo {
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
        Self { tag: rq.tag, driver_tag, sched }
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
            hctx_index: 0,
            op: Op::Read,
            flags: ReqFlags::NONE,
            sector: 0,
            nr_sectors: 0,
            segs: BioVec::new(),
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
            view: None,
            view_index: 0,
            view_skip: 0,
            view_len: 0,
            seg_limits: SegLimits { max_segments: 1, max_segment_size: 0, seg_boundary_mask: 0, virt_boundary_mask: 0 },
            phys: Phys::default(),
            nr_bios: 1,
            plain_end: false,
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

/// What a completed request looked like, for `Elevator::finish_request`
/// (example: [`Elevator`](crate::sched::Elevator)); the fields are the
/// request's (see [`Rq`]).
#[derive(Debug, Clone, Copy)]
pub struct DoneInfo {
    /// [`Rq::sched_tag`].
    pub sched_tag: u32,
    /// [`Rq::op`].
    pub op: Op,
    /// [`Rq::flags`].
    pub flags: ReqFlags,
    /// [`Rq::nr_sectors`].
    pub nr_sectors: u32,
    /// [`Rq::client_id`].
    pub client_id: u32,
    /// [`Rq::ioprio`].
    pub ioprio: IoPrio,
    /// `Rq::sched_time_ns` as the scheduler set it (kyber: insertion).
    pub inserted_ns: u64,
}

impl DoneInfo {
    /// See [`op_is_sync`].
    pub fn is_sync(&self) -> bool {
        op_is_sync(self.op, self.flags)
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
