//! The pool of segment vectors (`Vec<Buf>`) a queue's vectored requests
//! travel in: the kernel's biovec slab, per queue. A readv/writev takes a
//! vector from here, fills it with borrowed segments, and the completion
//! gives the very vector back (`BioVec::into_vec` keeps its capacity), so
//! in steady state a vectored request allocates nothing.
//!
//! Bounds: each vector holds at most `BIO_MAX_VECS` segments; the pool
//! holds at most one vector per request in flight (a vector is taken for
//! a request and comes back once), so its own array, reserved for the
//! queue's capacity up front, never grows on the hot path.
//!
//! Relies on: mqblk's Buf (`Buf::borrowed` segments only).

use mqblk::{Buf, BIO_MAX_VECS};

/// Capacity of a vector made when the pool has none: enough for common
/// iovec arrays, so most vectors never grow.
const FIRST_CAPACITY: usize = 16;

pub(crate) struct SegVecs {
    free: Vec<Vec<Buf>>,
}

impl SegVecs {
    /// A pool for a queue with `capacity` requests in flight at most.
    pub(crate) fn new(capacity: usize) -> Self {
        Self { free: Vec::with_capacity(capacity + 1) }
    }

    /// An empty vector with room for `nr_segs` segments: a pooled one
    /// (growing it the first time it is asked for more), or a new one.
    #[inline(always)]
    pub(crate) fn take(&mut self, nr_segs: usize) -> Vec<Buf> {
        debug_assert!(nr_segs <= BIO_MAX_VECS);
        let mut v = self.free.pop().unwrap_or_else(Self::first);
        debug_assert!(v.is_empty());
        if v.capacity() < nr_segs {
            Self::grow(&mut v, nr_segs);
        }
        v
    }

    #[cold]
    fn first() -> Vec<Buf> {
        Vec::with_capacity(FIRST_CAPACITY)
    }

    #[cold]
    fn grow(v: &mut Vec<Buf>, nr_segs: usize) {
        v.reserve_exact(nr_segs.next_power_of_two().min(BIO_MAX_VECS));
    }

    /// Takes back a vector of borrowed segments, emptied. One without
    /// capacity (a bio of no segments may travel as one) is not kept.
    #[inline(always)]
    pub(crate) fn give_back(&mut self, mut v: Vec<Buf>) {
        debug_assert!(v.iter().all(Buf::is_borrowed), "only borrowed segments travel in pooled vectors");
        // SAFETY: shrinking to 0 exposes no uninitialised element; the
        // segments left behind are borrowed `Buf`s, whose drop frees
        // nothing, so skipping it (a loop per segment) leaks nothing.
        unsafe { v.set_len(0) };
        if v.capacity() != 0 && self.free.len() < self.free.capacity() {
            self.free.push(v);
        }
    }

    /// Vectors waiting in the pool.
    #[cfg(test)]
    pub(crate) fn pooled(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_comes_back_with_its_capacity() {
        let mut pool = SegVecs::new(4);
        let mut v = pool.take(3);
        assert!(v.capacity() >= 3);
        let array = v.as_ptr();
        let mut memory = [0u8; 1024];
        // SAFETY: `memory` outlives the segments, which are never used for I/O.
        v.push(unsafe { Buf::borrowed(memory.as_mut_ptr(), 512) });
        pool.give_back(v);
        assert_eq!(pool.pooled(), 1);
        let again = pool.take(2);
        assert_eq!((again.as_ptr(), again.len()), (array, 0), "the same vector, emptied");
    }

    #[test]
    fn a_pooled_vector_grows_once_for_a_larger_request() {
        let mut pool = SegVecs::new(4);
        let small = pool.take(2);
        pool.give_back(small);
        let big = pool.take(100);
        assert!(big.capacity() >= 100 && big.capacity() <= BIO_MAX_VECS);
        pool.give_back(big);
        assert!(pool.take(100).capacity() >= 100, "kept its growth");
    }

    #[test]
    fn the_pool_never_holds_more_than_its_bound() {
        let mut pool = SegVecs::new(1);
        for _ in 0..3 {
            pool.give_back(Vec::with_capacity(4));
        }
        assert_eq!(pool.pooled(), 2, "capacity 1 plus the one being filled");
        pool.give_back(Vec::new());
        assert_eq!(pool.pooled(), 2);
    }
}
