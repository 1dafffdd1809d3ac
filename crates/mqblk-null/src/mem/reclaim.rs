//! Where pages come from and where unpublished pages go: the arena
//! (arena.rs), and the grace period a retired page waits out before it may
//! be written again.
//!
//! Production uses crossbeam-epoch's global collector: readers and writers
//! pin around their table accesses; a retired page is handed back to the
//! arena by a deferred function that runs once every thread pinned at the
//! retirement has unpinned (the kernel's RCU `call_rcu`, in effect). The
//! function holds an `Arc` of the arena, so it may run after the store is
//! gone; it captures two words, which crossbeam stores inline in its
//! per-thread bag (one allocation per 64 retirements when a full bag moves
//! to the global queue; there is no allocation per I/O).
//!
//! The arena's free pages are the store's only pool: a steady overwrite
//! workload takes back the pages it retired, and a discard empties chunks
//! that go back to the kernel. (A separate lock-free pool in front of it,
//! as before the arena, would hold scattered pages, each keeping its whole
//! chunk resident after a discard.)
//!
//! Under loom, crossbeam-epoch's atomics are invisible to the model, so
//! pinning does nothing and retired pages are kept until the store is
//! dropped: the models check the publish protocol, not the collector.

use super::arena::Arena;
use super::page::{OwnedPage, Page};

/// A pin: while it lives, no page loaded from the table is reused.
pub(crate) struct Guard {
    #[cfg(not(loom))]
    epoch: crossbeam_epoch::Guard,
    /// Under Miri: the registration with the store's collector, for this
    /// pin only (declared after `epoch`, so dropped after it).
    #[cfg(all(miri, not(loom)))]
    _handle: crossbeam_epoch::LocalHandle,
}

/// The arena plus the grace period.
pub(crate) struct Reclaim {
    #[cfg(not(loom))]
    arena: std::sync::Arc<Arena>,
    #[cfg(loom)]
    arena: Arena,
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
            arena: std::sync::Arc::new(Arena::new()),
            #[cfg(loom)]
            arena: Arena::new(),
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
    /// period is over (tests: waiting for retired pages to come back).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn flush(&self) {
        self.pin().epoch.flush();
    }

    /// A page to fill.
    pub(crate) fn take(&self) -> OwnedPage {
        self.arena.alloc()
    }

    /// Returns a page no reader can see (a lost race's, never published; or
    /// any, once the store is being dropped): free at once.
    pub(crate) fn give_back(&self, page: OwnedPage) {
        self.arena.free(page);
    }

    /// The store is gone: from now on the arena releases every chunk as
    /// soon as it empties (arena.rs).
    pub(crate) fn close(&self) {
        self.arena.close();
    }

    /// The arena (lending marks its pages, lent.rs; tests read its page
    /// and chunk counts, also after the store is dropped).
    #[cfg(not(loom))]
    pub(crate) fn arena(&self) -> std::sync::Arc<Arena> {
        self.arena.clone()
    }

    /// Hands an unpublished page back to the arena once no reader can see it.
    ///
    /// # Safety
    /// `page` was a published page (owned by the table) and the
    /// caller took it out of its slot with a successful swap or
    /// compare_exchange while holding `guard`: the caller owns it, except
    /// for readers pinned before the exchange.
    pub(crate) unsafe fn retire(&self, guard: &Guard, page: *mut Page) {
        #[cfg(not(loom))]
        {
            let arena = self.arena.clone();
            // The page is unreachable from the table, so only threads
            // pinned now can hold it; crossbeam runs the function after all
            // of them have unpinned, and then only the function has it.
            // SAFETY: the function touches only its own `Arc` of the arena
            // and that page, so it may run late, on any thread, even after
            // the store is dropped.
            unsafe {
                guard.epoch.defer_unchecked(move || arena.free(OwnedPage::from_raw(page)));
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
