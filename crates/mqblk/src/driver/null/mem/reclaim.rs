//! Where pages come from and where unpublished pages go: a small bounded
//! pool of free pages, and the grace period a retired page waits out before
//! it may be written again.
//!
//! Production uses crossbeam-epoch's global collector: readers and writers
//! pin around their table accesses; a retired page is handed to the pool by
//! a deferred function that runs once every thread pinned at the retirement
//! has unpinned (the kernel's RCU `call_rcu`, in effect). The function holds
//! an `Arc` of the pool, so it may run after the store is gone; it captures
//! two words, which crossbeam stores inline in its per-thread bag (one
//! allocation per 64 retirements when a full bag moves to the global queue;
//! there is no allocation per I/O).
//!
//! Under loom, crossbeam-epoch's atomics are invisible to the model, so
//! pinning does nothing and retired pages are kept until the store is
//! dropped: the models check the publish protocol, not the collector.

use crossbeam_queue::ArrayQueue;

use super::arena::Arena;
use super::page::{OwnedPage, Page};

/// Free pages kept for reuse (4 MiB): enough to absorb a few collections'
/// worth of retired pages (crossbeam frees up to 8 bags of 64 at once), so a
/// steady overwrite workload stops allocating. Beyond it pages go back to
/// the allocator.
pub(crate) const POOL_PAGES: usize = 1024;

/// Free pages, bounded; lock-free (crossbeam's ArrayQueue); beyond it,
/// the arena the pages come from.
pub(crate) struct Pool {
    free: ArrayQueue<OwnedPage>,
    arena: Arena,
    /// Pages taken from the allocator (tests). std's atomic even under loom:
    /// a statistic, not part of any protocol.
    #[cfg(test)]
    allocated: std::sync::atomic::AtomicUsize,
    /// Pages handed back to the allocator because the pool was full
    /// (tests): with `allocated`, what makes the accounting exact.
    #[cfg(all(test, not(loom)))]
    freed: std::sync::atomic::AtomicUsize,
}

impl Pool {
    fn new() -> Self {
        Self {
            free: ArrayQueue::new(POOL_PAGES),
            arena: Arena::new(),
            #[cfg(test)]
            allocated: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(all(test, not(loom)))]
            freed: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// A page to fill: a pooled one, else one from the arena.
    fn take(&self) -> OwnedPage {
        self.free.pop().unwrap_or_else(|| {
            #[cfg(test)]
            self.allocated.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.arena.alloc()
        })
    }

    /// Keeps `page` for reuse, or frees it if the pool is full. Not under
    /// loom, where pages are dropped or kept instead (`give_back`, `retire`).
    #[cfg(not(loom))]
    fn give(&self, page: OwnedPage) {
        // A full pool hands the page back to the arena.
        if let Err(page) = self.free.push(page) {
            #[cfg(test)]
            self.freed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.arena.free(page);
        }
    }
}

/// A pin: while it lives, no page loaded from the table is reused.
pub(crate) struct Guard {
    #[cfg(not(loom))]
    epoch: crossbeam_epoch::Guard,
    /// Under Miri: the registration with the store's collector, for this
    /// pin only (declared after `epoch`, so dropped after it).
    #[cfg(all(miri, not(loom)))]
    _handle: crossbeam_epoch::LocalHandle,
}

/// The pool plus the grace period.
pub(crate) struct Reclaim {
    #[cfg(not(loom))]
    pool: std::sync::Arc<Pool>,
    #[cfg(loom)]
    pool: Pool,
    /// Retired pages, kept until the store is dropped. A plain lock, not
    /// loom's: it is never held across a model step, and modelling it would
    /// only add interleavings that say nothing about the protocol.
    #[cfg(loom)]
    kept: parking_lot::Mutex<Vec<OwnedPage>>,
    /// Under Miri, a collector of the store's own instead of the global
    /// one: the same epochs and deferred functions, but everything still
    /// retired runs when the store is dropped (the global collector keeps
    /// garbage and thread registrations past the end of a test, which Miri
    /// reports as leaks). Each pin registers anew, slow but Miri-only.
    #[cfg(all(miri, not(loom)))]
    collector: crossbeam_epoch::Collector,
}

impl Reclaim {
    pub(crate) fn new() -> Self {
        Self {
            #[cfg(not(loom))]
            pool: std::sync::Arc::new(Pool::new()),
            #[cfg(loom)]
            pool: Pool::new(),
            #[cfg(loom)]
            kept: parking_lot::Mutex::new(Vec::new()),
            #[cfg(all(miri, not(loom)))]
            collector: crossbeam_epoch::Collector::new(),
        }
    }

    #[cfg(not(any(miri, loom)))]
    pub(crate) fn pin(&self) -> Guard {
        Guard { epoch: crossbeam_epoch::pin() }
    }

    #[cfg(all(miri, not(loom)))]
    pub(crate) fn pin(&self) -> Guard {
        let handle = self.collector.register();
        Guard { epoch: handle.pin(), _handle: handle }
    }

    #[cfg(loom)]
    pub(crate) fn pin(&self) -> Guard {
        Guard {}
    }

    /// Moves this thread's retired pages on and runs those whose grace
    /// period is over (tests: waiting for the pool to fill).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn flush(&self) {
        self.pin().epoch.flush();
    }

    pub(crate) fn take(&self) -> OwnedPage {
        self.pool.take()
    }

    /// Returns a page that was never published (a lost race): no reader can
    /// have seen it, so it is free at once. Under loom it is dropped instead:
    /// the pool's atomics are not loom's, so a reuse through it would look
    /// like an unordered write to the model.
    pub(crate) fn give_back(&self, page: OwnedPage) {
        #[cfg(not(loom))]
        self.pool.give(page);
        #[cfg(loom)]
        drop(page);
    }

    /// Pages taken from the allocator so far.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn nr_allocated(&self) -> usize {
        self.pool.allocated.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Pages freed to the allocator because the pool was full.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn nr_freed(&self) -> usize {
        self.pool.freed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Free pages waiting in the pool.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn nr_pooled(&self) -> usize {
        self.pool.free.len()
    }

    /// Hands an unpublished page to the pool once no reader can see it.
    ///
    /// # Safety
    /// `page` was a published page (a box owned by the table) and the
    /// caller took it out of its slot with a successful swap or
    /// compare_exchange while holding `guard`: the caller owns it, except
    /// for readers pinned before the exchange.
    pub(crate) unsafe fn retire(&self, guard: &Guard, page: *mut Page) {
        #[cfg(not(loom))]
        {
            let pool = self.pool.clone();
            // SAFETY: the page is unreachable from the table, so only
            // threads pinned now can hold it; crossbeam runs the function
            // after all of them have unpinned, and then only the function
            // has it. The function touches nothing but its own `Arc` of
            // the pool and that page, so running it late, on any thread,
            // even after the store is dropped, is sound.
            unsafe {
                guard.epoch.defer_unchecked(move || pool.give(OwnedPage::from_raw(page)));
            }
        }
        #[cfg(loom)]
        {
            let _ = guard;
            // SAFETY: per the contract the caller owns the page's box; it
            // is kept, never written, until the store is dropped.
            self.kept.lock().push(unsafe { OwnedPage::from_raw(page) });
        }
    }
}
