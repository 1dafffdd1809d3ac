//! Where pages come from and where unpublished pages go: the arena
//! (arena.rs), and the grace period a retired page waits out before it may
//! be written again.
//!
//! Production uses crossbeam-epoch's global collector: readers and writers
//! pin around their table accesses; retired pages are handed back to the
//! arena by a deferred function that runs once every thread pinned at the
//! retirement has unpinned (the kernel's RCU `call_rcu`, in effect). The
//! function holds an `Arc` of the arena, so it may run after the store is
//! gone.
//!
//! Retired pages are deferred by the batch, not one by one. crossbeam runs
//! deferred functions at its own pace: a thread's bag of 64 goes to the
//! global queue when full or flushed, and a collection (every 128th pin of
//! a thread, or a flush) frees at most 8 bags, 512 functions. One function
//! a page, a zone reset of 1 GiB (262,144 pages) was freed at that pace
//! while the next fill pinned once per 8 MiB write, so the fill took new
//! memory and the process grew by about the device's size with every
//! write-and-reset cycle (null_blk frees a reset zone's or a discarded
//! range's pages at once: null_free_sector from null_handle_discard and
//! null_zone_reset). So:
//!
//! - a call that retires one page (a 4 KiB overwrite) defers it alone, as
//!   before: two words, stored inline in crossbeam's bag, nothing
//!   allocated;
//! - a call that retires more gathers them in batches of up to
//!   `BATCH_PAGES`, a 4 KiB box each, one deferred function a batch, freed
//!   under one lock of the arena; emptied boxes are kept for reuse
//!   (`SPARE_BATCHES`), so steady overwrites allocate none;
//! - a thread that has deferred `FLUSH_PAGES` pages since it last did
//!   flushes: its bag goes to the global queue (else up to 64 batches
//!   could wait in an idle thread's bag) and a collection runs, so
//!   collections keep pace with retirements of any size;
//! - after a discard, once `DRAIN_PAGES` batched pages wait, the
//!   discarding thread waits the grace period out itself (`settle`): a few
//!   pins and flushes, each of which may advance the epoch, until the
//!   batches are freed, at most `DRAIN_ROUNDS` of them (a reader pinned
//!   for long, such as a lending NBD reply, may hold the epoch back; its
//!   batches are then freed by later collections).
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

/// Pages a batch holds: with its length, a 4 KiB box (3 under Miri, so
/// its tests fill several batches).
#[cfg(not(loom))]
const BATCH_PAGES: usize = if cfg!(miri) { 3 } else { 511 };
/// Pages a thread defers before it flushes (module doc): 4 MiB (a few
/// under Miri, so its tests flush).
#[cfg(not(loom))]
pub(super) const FLUSH_PAGES: usize = if cfg!(miri) { 8 } else { 1024 };
/// Batched pages waiting for their grace period above which a discard
/// waits it out (module doc): 8 MiB (a batch under Miri).
#[cfg(not(loom))]
const DRAIN_PAGES: usize = if cfg!(miri) { BATCH_PAGES } else { 2048 };
/// The bound on a discard's pins and flushes while it waits: each round
/// may advance the epoch once and frees at most 8 bags of 64 functions,
/// so 64 rounds free 32,768 batches (64 GiB) when no reader holds the
/// epoch back.
#[cfg(not(loom))]
const DRAIN_ROUNDS: usize = 64;
/// Emptied batch boxes kept for reuse (256 KiB).
#[cfg(not(loom))]
const SPARE_BATCHES: usize = 64;

#[cfg(not(loom))]
thread_local! {
    /// Pages this thread deferred since it last flushed (module doc).
    static UNFLUSHED_PAGES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
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

/// Retired pages freed together by one deferred function.
#[cfg(not(loom))]
struct Batch {
    len: usize,
    pages: [*mut Page; BATCH_PAGES],
}

// SAFETY: the pages a batch lists were retired into it: no slot refers to
// them, so the batch (whoever holds it, on any thread) is their only owner
// besides readers pinned before their retirement, which only read.
#[cfg(not(loom))]
unsafe impl Send for Batch {}

/// What the deferred functions need: the arena, the count of batched pages
/// still waiting, and the emptied boxes.
#[cfg(not(loom))]
struct Shared {
    arena: Arena,
    /// Pages in deferred batches not yet freed (`settle` reads it; single
    /// pages are not counted, so overwrites touch no shared counter).
    waiting: mqblk_sync::AtomicUsize,
    spare_batches: parking_lot::Mutex<Vec<Box<Batch>>>,
}

#[cfg(not(loom))]
impl Shared {
    /// Runs after the batch's grace period: its pages go back to the
    /// arena, the box to the spares.
    fn free_batch(&self, mut batch: Box<Batch>) {
        let n = batch.len;
        let pages = batch.pages[..n].iter().map(|&p| {
            // SAFETY: each page was taken out of its slot and retired once
            // (`WriteGuard::retire`), and its grace period is over: it is
            // ours.
            unsafe { OwnedPage::from_raw(p) }
        });
        self.arena.free_all(pages);
        batch.len = 0;
        // Relaxed: a heuristic for `settle`, ordering nothing.
        self.waiting.fetch_sub(n, mqblk_sync::Ordering::Relaxed);
        let mut spares = self.spare_batches.lock();
        if spares.len() < SPARE_BATCHES {
            spares.push(batch);
        }
    }
}

/// A pin that may retire pages: what it retired is deferred when it is
/// dropped, before it unpins (module doc).
pub(crate) struct WriteGuard<'a> {
    reclaim: &'a Reclaim,
    /// The call's first retired page, while it is the only one.
    #[cfg(not(loom))]
    single: *mut Page,
    #[cfg(not(loom))]
    batch: Option<Box<Batch>>,
    /// Pages this pin retired.
    #[cfg(not(loom))]
    retired: usize,
    /// Declared last: it unpins after `drop` has deferred the pages.
    #[cfg_attr(loom, allow(dead_code))]
    guard: Guard,
}

/// The arena plus the grace period.
pub(crate) struct Reclaim {
    #[cfg(not(loom))]
    shared: std::sync::Arc<Shared>,
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
            shared: std::sync::Arc::new(Shared {
                arena: Arena::new(),
                waiting: mqblk_sync::AtomicUsize::new(0),
                spare_batches: parking_lot::Mutex::new(Vec::with_capacity(SPARE_BATCHES)),
            }),
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

    /// A pin for a call that may retire pages (writes, discards).
    pub(crate) fn pin_writer(&self) -> WriteGuard<'_> {
        WriteGuard {
            reclaim: self,
            #[cfg(not(loom))]
            single: std::ptr::null_mut(),
            #[cfg(not(loom))]
            batch: None,
            #[cfg(not(loom))]
            retired: 0,
            guard: self.pin(),
        }
    }

    /// The arena, shared with the deferred functions.
    #[cfg(not(loom))]
    fn arena_ref(&self) -> &Arena {
        &self.shared.arena
    }

    #[cfg(loom)]
    fn arena_ref(&self) -> &Arena {
        &self.arena
    }

    /// Moves this thread's retired pages on and runs those whose grace
    /// period is over (tests: waiting for retired pages to come back).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn flush(&self) {
        self.pin().epoch.flush();
    }

    /// A page to fill.
    pub(crate) fn take(&self) -> OwnedPage {
        self.arena_ref().alloc()
    }

    /// Returns a page no reader can see (a lost race's, never published; or
    /// any, once the store is being dropped): free at once.
    pub(crate) fn give_back(&self, page: OwnedPage) {
        self.arena_ref().free(page);
    }

    /// The store is gone: from now on the arena releases every chunk as
    /// soon as it empties (arena.rs).
    pub(crate) fn close(&self) {
        self.arena_ref().close();
    }

    /// The arena (lending marks its pages, lent.rs; the stats and tests
    /// read its page and chunk counts, tests also after the store is
    /// dropped).
    #[cfg(not(loom))]
    pub(crate) fn arena(&self) -> ArenaRef {
        ArenaRef(self.shared.clone())
    }

    /// The arena's pages handed out, chunks resident and chunks mapped
    /// (the device's stats).
    #[cfg(not(loom))]
    pub(crate) fn usage(&self) -> (usize, usize, usize) {
        let a = &self.shared.arena;
        (a.nr_live(), a.nr_resident_chunks(), a.nr_chunks())
    }

    /// Under loom the arena is boxes and counts none (no model reads stats).
    #[cfg(loom)]
    pub(crate) fn usage(&self) -> (usize, usize, usize) {
        (0, 0, 0)
    }

    /// Pages in deferred batches whose grace period has not ended (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn nr_waiting(&self) -> usize {
        self.shared.waiting.load(mqblk_sync::Ordering::Relaxed)
    }

    /// After a discard, with the caller unpinned: once `DRAIN_PAGES`
    /// batched pages wait, pins and flushes until none does, at most
    /// `DRAIN_ROUNDS` times (module doc).
    pub(crate) fn settle(&self) {
        #[cfg(not(loom))]
        {
            // Relaxed: a heuristic; a stale value costs a round or ends early.
            let waiting = || self.shared.waiting.load(mqblk_sync::Ordering::Relaxed);
            if waiting() < DRAIN_PAGES {
                return;
            }
            for round in 0..DRAIN_ROUNDS {
                // Each flush moves this thread's bag to the global queue and
                // collects: the epoch advances when no thread is pinned in
                // an older one, and a bag sealed two epochs back is freed.
                // Alone, the second round frees everything: the first
                // seals the bag at epoch e and advances to e + 1, the
                // second advances to e + 2, where the bag has expired.
                self.pin().epoch.flush();
                if waiting() == 0 {
                    return;
                }
                if round >= 1 {
                    // Some thread is pinned in an older epoch: let it run.
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Defers one page.
    ///
    /// # Safety
    /// `WriteGuard::retire`'s contract, under `guard`.
    #[cfg(not(loom))]
    unsafe fn defer_page(&self, guard: &Guard, page: *mut Page) {
        let shared = self.shared.clone();
        // The page is unreachable from the table, so only threads pinned
        // now can hold it; crossbeam runs the function after all of them
        // have unpinned, and then only the function has it.
        // SAFETY: the function touches only its own `Arc` and that page,
        // so it may run late, on any thread, even after the store is
        // dropped. Two words: crossbeam stores it inline.
        unsafe { guard.epoch.defer_unchecked(move || shared.arena.free(OwnedPage::from_raw(page))) };
    }

    /// Defers a batch.
    ///
    /// # Safety
    /// `WriteGuard::retire`'s contract for each of its pages, under `guard`.
    #[cfg(not(loom))]
    unsafe fn defer_batch(&self, guard: &Guard, batch: Box<Batch>) {
        debug_assert!(batch.len > 0);
        // Relaxed: a heuristic for `settle`, ordering nothing.
        self.shared.waiting.fetch_add(batch.len, mqblk_sync::Ordering::Relaxed);
        let shared = self.shared.clone();
        // SAFETY: as in `defer_page`, for each page of the batch; the box
        // is the function's own.
        unsafe { guard.epoch.defer_unchecked(move || shared.free_batch(batch)) };
    }

    /// An empty batch: a spare one, else a new box (a call's second
    /// retirement; not per I/O once the spares are stocked).
    #[cfg(not(loom))]
    fn empty_batch(&self) -> Box<Batch> {
        let spare = self.shared.spare_batches.lock().pop();
        spare.unwrap_or_else(|| Box::new(Batch { len: 0, pages: [std::ptr::null_mut(); BATCH_PAGES] }))
    }
}

impl WriteGuard<'_> {
    /// Hands an unpublished page back to the arena once no reader can see
    /// it: deferred when this pin ends.
    ///
    /// # Safety
    /// `page` was a published page (owned by the table) and the caller
    /// took it out of its slot with a successful swap or compare_exchange
    /// while holding this pin: the caller owns it, except for readers
    /// pinned before the exchange (so before this pin's deferral).
    pub(crate) unsafe fn retire(&mut self, page: *mut Page) {
        #[cfg(not(loom))]
        {
            self.retired += 1;
            if self.retired == 1 {
                self.single = page;
                return;
            }
            let reclaim = self.reclaim;
            let batch = self.batch.get_or_insert_with(|| reclaim.empty_batch());
            if !self.single.is_null() {
                batch.pages[0] = std::mem::replace(&mut self.single, std::ptr::null_mut());
                batch.len = 1;
            }
            batch.pages[batch.len] = page;
            batch.len += 1;
            if batch.len == BATCH_PAGES {
                let full = self.batch.take().expect("the batch just filled");
                // SAFETY: the caller's contract, for every page gathered.
                unsafe { self.reclaim.defer_batch(&self.guard, full) };
            }
        }
        #[cfg(loom)]
        {
            // SAFETY: per the contract the caller owns the page's box; it
            // is kept, never written, until the store is dropped.
            self.reclaim.kept.lock().push(unsafe { OwnedPage::from_raw(page) });
        }
    }
}

#[cfg(not(loom))]
impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        if self.retired == 0 {
            return;
        }
        if !self.single.is_null() {
            // SAFETY: retired under this pin (`retire`'s contract), which
            // is still held.
            unsafe { self.reclaim.defer_page(&self.guard, self.single) };
        }
        if let Some(batch) = self.batch.take() {
            // SAFETY: as above, for every page of the batch.
            unsafe { self.reclaim.defer_batch(&self.guard, batch) };
        }
        let unflushed = UNFLUSHED_PAGES.get() + self.retired;
        if unflushed >= FLUSH_PAGES {
            self.guard.epoch.flush();
            UNFLUSHED_PAGES.set(0);
        } else {
            UNFLUSHED_PAGES.set(unflushed);
        }
    }
}

/// The arena, kept alive by a reference to what the deferred functions
/// share (tests hold it past the store's drop).
#[cfg(not(loom))]
pub(crate) struct ArenaRef(std::sync::Arc<Shared>);

#[cfg(not(loom))]
impl std::ops::Deref for ArenaRef {
    type Target = Arena;
    fn deref(&self) -> &Arena {
        &self.0.arena
    }
}
