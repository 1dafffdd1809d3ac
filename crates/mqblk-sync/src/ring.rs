//! `MpscRing`: a bounded multi-producer, single-consumer ring with no
//! allocation after construction.
//!
//! It carries completions to a client (producers: whatever thread completes a
//! request; consumer: the client) and requests to a driver's completion
//! thread. The algorithm is Dmitry Vyukov's bounded queue: each slot has a
//! sequence number telling whose turn it is. With one consumer, popping needs
//! no compare-and-swap.
//!
//! Slot protocol for position `pos` (slot `pos & mask`):
//! - `seq == pos`: free for the producer that claims `pos` (CAS on `tail`);
//! - `seq == pos + 1`: holds a value for the consumer at `pos`;
//! - the consumer frees it by storing `seq = pos + capacity`.
//!
//! Publishing is a SeqCst RMW (`swap`) rather than a plain store so that a
//! producer's later SeqCst load of a "consumer is sleeping" flag is ordered
//! after it (the completion side of the client's lost-wakeup argument).

use std::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use crate::{AtomicUsize, Ordering, UnsafeCell};

struct Slot<T> {
    seq: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// A bounded multi-producer, single-consumer ring (see the module docs).
///
/// ```
/// use mqblk_sync::ring::MpscRing;
/// use mqblk_sync::Arc;
///
/// let ring = Arc::new(MpscRing::new(3));
/// assert_eq!(ring.capacity(), 4, "a power of two");
/// let producers: Vec<_> = (0..2u32)
///     .map(|p| {
///         let ring = ring.clone();
///         std::thread::spawn(move || ring.push(p).unwrap())
///     })
///     .collect();
/// producers.into_iter().for_each(|t| t.join().unwrap());
/// assert_eq!(ring.len(), 2);
/// assert!(ring.has_ready() && !ring.is_empty());
///
/// let mut got = Vec::new();
/// // SAFETY: this thread is the only consumer.
/// while let Some(v) = unsafe { ring.pop() } {
///     got.push(v);
/// }
/// got.sort();
/// assert_eq!(got, [0, 1]);
/// for i in 0..4 {
///     ring.push(i).unwrap();
/// }
/// assert_eq!(ring.push(9), Err(9), "full: the value comes back");
/// ```
pub struct MpscRing<T> {
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
    mask: usize,
    slots: Box<[Slot<T>]>,
}

// SAFETY: values of T move between threads through the ring (T: Send), and
// each slot's value is accessed by one party at a time per the sequence
// protocol.
unsafe impl<T: Send> Send for MpscRing<T> {}
// SAFETY: as above; shared access is mediated by the atomics.
unsafe impl<T: Send> Sync for MpscRing<T> {}

impl<T> MpscRing<T> {
    /// A ring with room for at least `min_capacity` values.
    pub fn new(min_capacity: usize) -> Self {
        let capacity = min_capacity.max(1).next_power_of_two();
        let slots = (0..capacity)
            .map(|i| Slot { seq: AtomicUsize::new(i), value: UnsafeCell::new(MaybeUninit::uninit()) })
            .collect();
        Self {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            mask: capacity - 1,
            slots,
        }
    }

    /// Values it holds at most.
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Appends `value`, or gives it back if the ring is full.
    #[inline]
    pub fn push(&self, value: T) -> Result<(), T> {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos & self.mask];
            // Acquire pairs with the consumer's Release when it freed the slot.
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq.wrapping_sub(pos) as isize;
            if diff == 0 {
                match self.tail.compare_exchange_weak(pos, pos.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => {
                        // SAFETY: winning the CAS for `pos` while seq == pos
                        // gives this producer sole access to the slot.
                        slot.value.with_mut(|p| unsafe { (*p).write(value) });
                        // SeqCst RMW: publishes the value (Release) and orders
                        // the caller's following SeqCst loads after it.
                        slot.seq.swap(pos.wrapping_add(1), Ordering::SeqCst);
                        return Ok(());
                    }
                    Err(actual) => pos = actual,
                }
            } else if diff < 0 {
                return Err(value); // the consumer has not freed this slot: full
            } else {
                pos = self.tail.load(Ordering::Relaxed); // another producer took it
            }
        }
    }

    /// Takes the oldest value, if one is published.
    ///
    /// # Safety
    /// Only one thread may pop at a time (single consumer).
    #[inline]
    pub unsafe fn pop(&self) -> Option<T> {
        let pos = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[pos & self.mask];
        // SeqCst (a plain load on x86): the consumer's emptiness check must be
        // ordered after its "I am going to sleep" RMW.
        let seq = slot.seq.load(Ordering::SeqCst);
        if seq != pos.wrapping_add(1) {
            return None;
        }
        // SAFETY: seq == pos + 1 means a producer published the slot and no
        // one else reads it (single consumer, per this function's contract).
        let value = slot.value.with(|p| unsafe { (*p).assume_init_read() });
        // Release: the next producer of this slot sees it free after our read.
        slot.seq.store(pos.wrapping_add(self.capacity()), Ordering::Release);
        self.head.store(pos.wrapping_add(1), Ordering::Relaxed);
        Some(value)
    }

    /// Is a value ready for the consumer? (consumer side; a hint elsewhere)
    #[inline]
    pub fn has_ready(&self) -> bool {
        let pos = self.head.load(Ordering::Relaxed);
        self.slots[pos & self.mask].seq.load(Ordering::SeqCst) == pos.wrapping_add(1)
    }

    /// Number of values pushed and not yet popped (a racy snapshot).
    pub fn len(&self) -> usize {
        self.tail.load(Ordering::Relaxed).wrapping_sub(self.head.load(Ordering::Relaxed))
    }

    /// Whether nothing is pushed and not yet popped (a racy snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Drop for MpscRing<T> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other thread can push or pop.
        while unsafe { self.pop() }.is_some() {}
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_and_full() {
        let ring = MpscRing::new(3);
        assert_eq!(ring.capacity(), 4);
        for i in 0..4 {
            ring.push(i).unwrap();
        }
        assert_eq!(ring.push(9), Err(9));
        // SAFETY: single-threaded test.
        unsafe {
            for i in 0..4 {
                assert_eq!(ring.pop(), Some(i));
            }
            assert_eq!(ring.pop(), None);
        }
        ring.push(5).unwrap();
        assert_eq!(ring.len(), 1);
    }

    #[test]
    fn many_producers_exact_accounting() {
        const PER_PRODUCER: u64 = if cfg!(miri) { 200 } else { 10_000 };
        let ring = std::sync::Arc::new(MpscRing::new(64));
        let producers: Vec<_> = (0..4u64)
            .map(|p| {
                let ring = ring.clone();
                std::thread::spawn(move || {
                    for i in 0..PER_PRODUCER {
                        let mut v = p * 1_000_000 + i;
                        while let Err(back) = ring.push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut next = [0u64; 4];
        let mut got = 0;
        while got < 4 * PER_PRODUCER {
            // SAFETY: this thread is the only consumer.
            if let Some(v) = unsafe { ring.pop() } {
                let (p, i) = ((v / 1_000_000) as usize, v % 1_000_000);
                assert_eq!(i, next[p], "per-producer order kept");
                next[p] += 1;
                got += 1;
            } else {
                std::thread::yield_now();
            }
        }
        for t in producers {
            t.join().unwrap();
        }
        assert_eq!(next, [PER_PRODUCER; 4]);
    }

    #[test]
    fn drop_releases_unpopped_values() {
        let value = std::sync::Arc::new(());
        let ring = MpscRing::new(4);
        ring.push(value.clone()).unwrap();
        ring.push(value.clone()).unwrap();
        drop(ring);
        assert_eq!(std::sync::Arc::strong_count(&value), 1);
    }
}
