//! `SbqWaiter`: a thread that may sleep on an `SbitmapQueue` (queue.rs),
//! with what its wakers need to know of it: how many bits its next wait
//! needs together, the shallow depth it allocates within, and the bits a
//! handoff policy granted it while it slept.
//!
//! Relies on the crate's sync shims (`Parker`, `Mutex`, atomics), so loom
//! models it with the queue.

use super::SbitmapQueue;
use crate::sync::{Arc, AtomicU32, AtomicU64, Mutex, Ordering, Parker};

/// One waiter: a thread that may sleep on an `SbitmapQueue`. Allocate it once
/// per thread or client and reuse it (waiting allocates nothing after the
/// first waits).
///
/// ```
/// use mqblk::sbitmap::{HandoffWake, SbitmapQueue, SbqWaiter};
///
/// let sbq = SbitmapQueue::with_policy(8, None, false, 8, Box::new(HandoffWake::default()));
/// let waiter = SbqWaiter::new();
/// waiter.set_want(2); // its next wait needs 2 bits together (a split bio)
/// // Bits a handoff policy granted it while it slept, not yet taken:
/// assert_eq!(waiter.nr_granted(), 0);
/// assert_eq!(waiter.take_granted(&sbq), None);
/// assert_eq!(waiter.wakeups(), 0);
/// sbq.release_granted(&waiter); // gives back leftovers: none here
/// ```
#[derive(Debug, Default)]
pub struct SbqWaiter {
    pub(super) parker: Parker,
    /// Bits handed to this waiter by a handoff policy and not yet used.
    /// Checked without the lock on every allocation, so it is atomic.
    nr_granted: AtomicU32,
    /// How many bits the waiter needs at once (its pending I/O, e.g. the
    /// pieces of a split bio); a handoff policy wakes it when it has them.
    want: AtomicU32,
    /// When a waker last unparked this waiter (ns), to measure wakeup
    /// latency for policies that care (slow path only).
    pub(super) unparked_at_ns: AtomicU64,
    /// How many times a waker unparked this waiter (tests observe with
    /// it that a wakeup did or did not happen, instead of sleeping).
    wakeups: AtomicU64,
    /// The shallow depth the waiter allocates within (0: never set, the
    /// whole bitmap): a handoff grants it only bits it could take itself.
    shallow_depth: AtomicU32,
    grants: Mutex<Grants>,
}

#[derive(Debug, Default)]
struct Grants {
    bits: Vec<u32>,
    /// Address of the SbitmapQueue the bits belong to.
    from: usize,
}

impl SbqWaiter {
    /// A waiter, shared with the wait queues it sleeps on.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Wakes the waiter, noting when (for the wakeup-latency estimate).
    pub(super) fn wake(&self) {
        self.unparked_at_ns.store(crate::clock::now_ns(), Ordering::Relaxed);
        self.wakeups.fetch_add(1, Ordering::Relaxed);
        self.parker.unpark();
    }

    /// How many times a waker has unparked this waiter. A waker that
    /// decided not to wake it has returned with this unchanged, so a test
    /// can check "not woken" without sleeping.
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Declares how many bits the next waits need together (at least 1).
    pub fn set_want(&self, want: u32) {
        self.want.store(want.max(1), Ordering::Relaxed);
    }

    pub(super) fn want(&self) -> u32 {
        self.want.load(Ordering::Relaxed).max(1)
    }

    pub(super) fn set_shallow_depth(&self, shallow_depth: u32) {
        self.shallow_depth.store(shallow_depth, Ordering::Relaxed);
    }

    pub(super) fn shallow_depth(&self) -> u32 {
        match self.shallow_depth.load(Ordering::Relaxed) {
            0 => u32::MAX,
            d => d,
        }
    }

    /// Bits granted to this waiter and not yet taken.
    pub fn nr_granted(&self) -> u32 {
        self.nr_granted.load(Ordering::Acquire)
    }

    /// Adds a granted bit; returns how many are now pending.
    pub(super) fn grant(&self, sbq: &SbitmapQueue, bit: u32) -> u32 {
        let mut g = self.grants.lock();
        debug_assert!(g.bits.is_empty() || g.from == sbq as *const _ as usize);
        g.from = sbq as *const _ as usize;
        g.bits.push(bit);
        let n = g.bits.len() as u32;
        self.nr_granted.store(n, Ordering::Release);
        n
    }

    /// Takes one bit granted by `sbq`, if any.
    #[inline]
    pub fn take_granted(&self, sbq: &SbitmapQueue) -> Option<u32> {
        if self.nr_granted.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut g = self.grants.lock();
        if g.from != sbq as *const _ as usize {
            return None;
        }
        let bit = g.bits.pop();
        self.nr_granted.store(g.bits.len() as u32, Ordering::Release);
        bit
    }
}
