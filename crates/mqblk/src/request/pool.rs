//! The request pool and the two ends of a request's life that reach into
//! a slot: the one place that touches a slot's `Request` through its
//! `UnsafeCell` (besides the `Rq` token's accessors, rq.rs). The rest of
//! the crate works with what this module hands out:
//!
//! - [`Pool::start`]: the holder of a tag fills the slot's request
//!   ([`Starting`]) and gets the `Rq` token that owns it;
//! - [`Ending`]: a consumed token (the driver completed the request); its
//!   fields are taken out and the slot given back ([`Ending::finish`]),
//!   or handed to the timeout scanner holding it;
//! - [`RequestSlot::end_hold_release`]: the scanner's end of that hold.
//!
//! Relies on: the slot and its lifecycle (mod.rs), completion.rs's client
//! sinks (each outlives every request of its queue: the queue keeps them).

use std::ptr::NonNull;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::{Request, RequestSlot, Rq, RqState, TagRelease};
use crate::completion::ClientShared;
use crate::sync::Ordering;

/// One pre-allocated request slot per tag of a tag set, each on its own
/// cache line(s) so that requests completed on different threads do not
/// share lines (the kernel's `static_rqs`).
pub(crate) struct Pool {
    slots: Box<[CachePadded<RequestSlot>]>,
}

impl Pool {
    pub(crate) fn new(nr_tags: u32) -> Self {
        Self { slots: (0..nr_tags).map(|tag| CachePadded::new(RequestSlot::new(tag))).collect() }
    }

    /// Points every slot at its hardware context. Called once, before any
    /// tag is handed out, with a pointer derived from a shared reference to
    /// the hctx at its final address (one no one later reborrows mutably:
    /// Miri checks it). `hctx` is type-erased (request/ sits below hctx/).
    pub(crate) fn bind(&self, hctx: *const (), hctx_index: u32, seg_limits: crate::segment::SegLimits) {
        for slot in self.slots.iter() {
            debug_assert_eq!(slot.state(), RqState::Idle, "a pool is bound before its first request");
            // SAFETY: no tag of this set has been handed out yet, so no one
            // else can be using any slot's request.
            let rq = unsafe { &mut *slot.rq.get() };
            rq.hctx = hctx;
            rq.hctx_index = hctx_index;
            rq.seg_limits = seg_limits;
        }
    }

    /// The slot of `tag`, for its atomics (the timeout scanner).
    pub(crate) fn slot(&self, tag: u32) -> &RequestSlot {
        &self.slots[tag as usize]
    }

    /// Starts the request of `tag` for the client `owner`: the caller
    /// fills its fields (`Starting::request`), then `Starting::issue`
    /// puts it in flight and hands back the token that owns it.
    ///
    /// # Safety
    /// The caller holds `tag` (a bitmap of its tag set gave it to the
    /// caller, and it has not been freed since) and starts one request on
    /// it: holding the tag is what makes the slot's request exclusively
    /// the caller's.
    #[inline(always)]
    pub(crate) unsafe fn start(&self, tag: u32, owner: &Arc<ClientShared>) -> Starting<'_> {
        let slot = &*self.slots[tag as usize];
        debug_assert_eq!(slot.state(), RqState::Idle, "tag {tag}: started while its request is live");
        let mut starting = Starting { slot };
        // Client sinks live as long as the queue (`RequestQueue::
        // all_clients`): the pointer stays valid for any request.
        starting.request().owner = Arc::as_ptr(owner);
        starting
    }
}

/// A request being started: its tag is held, its fields are being filled.
pub(crate) struct Starting<'a> {
    slot: &'a RequestSlot,
}

impl Starting<'_> {
    /// The request to fill.
    #[inline(always)]
    pub(crate) fn request(&mut self) -> &mut Request {
        // SAFETY: `Pool::start`'s caller holds the tag (its contract), and
        // `&mut self` keeps this the only reference.
        unsafe { &mut *self.slot.rq.get() }
    }

    /// Puts the filled request in flight: the token that owns it.
    #[inline(always)]
    pub(crate) fn issue(self) -> Rq {
        debug_assert_eq!(self.slot.state(), RqState::Idle);
        self.slot.set_state(RqState::InFlight);
        // SAFETY: the request is initialised and the starter gives up its
        // access to the token.
        unsafe { Rq::from_raw(NonNull::from(self.slot)) }
    }
}

/// A request its driver is done with: the consumed `Rq` token. Owns the
/// slot's request until [`Ending::finish`] gives the slot back.
pub(crate) struct Ending {
    slot: NonNull<RequestSlot>,
}

impl Rq {
    /// Consumes the token: the request is ending.
    #[inline(always)]
    pub(crate) fn into_ending(self) -> Ending {
        Ending { slot: self.into_raw() }
    }

    /// The ending of a token being dropped.
    ///
    /// # Safety
    /// Called once, from the token's `Drop`, which uses the token no more.
    #[inline]
    pub(crate) unsafe fn ending_on_drop(&mut self) -> Ending {
        Ending { slot: self.as_raw() }
    }
}

/// A client sink a request completes to: it outlives every request of its
/// queue (the queue keeps every sink it made), so it may be reached after
/// the request's slot is given back.
#[derive(Clone, Copy)]
pub(crate) struct Owner(NonNull<ClientShared>);

impl Owner {
    #[inline(always)]
    pub(crate) fn get(&self) -> &ClientShared {
        // SAFETY: sinks live as long as the queue (`Pool::start` set it from
        // a live `Arc` the queue also holds, in `all_clients`).
        unsafe { self.0.as_ref() }
    }
}

impl Ending {
    /// The slot, for its atomics.
    #[inline(always)]
    pub(crate) fn slot(&self) -> &RequestSlot {
        // SAFETY: slots live as long as the queue.
        unsafe { self.slot.as_ref() }
    }

    /// The request, ours until `finish`.
    #[inline(always)]
    pub(crate) fn request(&mut self) -> &mut Request {
        // SAFETY: the consumed token made the request ours alone; `&mut
        // self` keeps this the only reference.
        unsafe { &mut *self.slot.as_ref().rq.get() }
    }

    /// The client the request completes to.
    #[inline(always)]
    pub(crate) fn owner(&mut self) -> Owner {
        let owner = self.request().owner;
        Owner(NonNull::new(owner.cast_mut()).expect("a started request has an owner"))
    }

    /// The tags to give back, with the scheduler's view of the request.
    #[inline(always)]
    pub(crate) fn release(&mut self) -> TagRelease {
        let driver_tag = self.slot().driver_tag.load(Ordering::Relaxed);
        TagRelease::of(self.request(), driver_tag)
    }

    /// Gives the slot back: Complete, then Idle, and the release comes back
    /// for the caller to free the tags. Unless the timeout scanner holds
    /// the request: then the release is stashed in the slot and the
    /// scanner frees the tags once the driver's handler has returned
    /// (`RequestSlot::end_hold_release`), and None comes back. Nothing of
    /// the slot may be used after this.
    #[inline(always)]
    pub(crate) fn finish(mut self, release: TagRelease) -> Option<TagRelease> {
        self.slot().deadline.store(0, Ordering::Relaxed);
        loop {
            if self.slot().try_complete() {
                self.slot().set_state(RqState::Idle);
                return Some(release);
            }
            // The request is still ours: its tags are held, and the scanner
            // reads the stash only after `hand_over`.
            self.request().held_release = Some(release);
            if self.slot().hand_over() {
                return None;
            }
        }
    }
}

impl RequestSlot {
    /// The timeout scanner ends its hold: if the request completed while
    /// held, the slot goes Idle and the release its completer stashed
    /// comes back, for the scanner to free the tags.
    pub(crate) fn end_hold_release(&self) -> Option<TagRelease> {
        if !self.end_hold() {
            return None;
        }
        // SAFETY: Complete | HELD: the completer stashed the release and
        // gave the request up; its tags are still held, so it is ours.
        let release = unsafe { (*self.rq.get()).held_release.take() };
        self.set_state(RqState::Idle);
        Some(release.expect("a held request hands over its release"))
    }
}
