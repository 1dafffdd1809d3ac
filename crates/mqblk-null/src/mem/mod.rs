//! The null device's memory backing: sparse 4 KiB pages made on first
//! write, so never written blocks read as zeros and an untouched 250 GB
//! device costs only a 238 KiB top array.
//!
//! The kernel's equivalent is null_blk's radix tree of pages
//! (`null_lookup_page` / `null_insert_page` in
//! drivers/block/null_blk/main.c): writers take the device's spinlock,
//! readers look pages up under RCU, and bytes are copied in place, so a
//! read racing a write to the same page may see a mix. Here:
//!
//! - table.rs: a two-level table sized from the capacity (top array of
//!   atomic leaf pointers, leaves of atomic page pointers), leaves made on
//!   first write and installed with compare_exchange.
//! - page.rs: the pages, copy-on-write. A published page is immutable. A
//!   write builds a new page (a full-page write copies only its own bytes;
//!   a partial one copies the old page around its piece) and publishes it
//!   with one atomic exchange on the slot, retrying on a lost race with the
//!   newer page as its base. Readers are lock-free: a pin, two Acquire
//!   loads and one memcpy per page piece, straight into the caller's buffer;
//!   no byte is ever written while a reader may read it, so there are no
//!   data races in Rust's memory model.
//! - reclaim.rs: a replaced or discarded page is retired; it goes back to
//!   the arena once every pinned reader has left (crossbeam-epoch, RCU's
//!   role in the kernel), so steady overwrites reuse pages instead of
//!   allocating. Pages a call retires go in batches, and a discard or zone
//!   reset waits the grace period out itself, so their memory is free when
//!   it returns, as null_blk's null_free_sector frees it at once.
//! - arena.rs: the pages' memory, 2 MiB huge-page chunks carved into
//!   pages; a chunk whose pages are all free goes back to the kernel.
//!
//! Resident memory thus follows the data held: the data's pages, pages
//! waiting out a grace period (a few MiB a writing thread), the chunks'
//! unused pages, and one spare chunk. The device's stats show the counts
//! (`describe`).
//!
//! Guarantee: concurrent writes to one page are per-page atomic (each page
//! shows one whole write or another, never a torn mix), stronger than
//! null_blk's. A multi-page write is atomic only page by page, as in the
//! kernel.
//!
//! Relies on: crossbeam-epoch (grace periods), libc (the arena's mmap and
//! madvise), `sync` (atomics, swapped for loom's in the models:
//! mem/loom_tests.rs).

mod arena;
#[cfg(not(loom))]
mod lent;
mod page;
#[cfg(not(any(miri, loom)))]
mod prepare;
mod reclaim;
mod table;

#[cfg(all(test, not(loom)))]
mod lent_tests;
#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod release_tests;
#[cfg(all(test, not(loom)))]
mod tests;

use std::ptr::null_mut;

pub(crate) use page::PAGE_SIZE;

/// Slices handed to `lend`'s callee at a time: 1 MiB of pages (well
/// under IOV_MAX, so one writev each).
pub(crate) const LEND_SLICES: usize = 256;
use page::{lend_shared, read_shared, OwnedPage, Page, Piece};
use reclaim::{Reclaim, WriteGuard};
use table::{Slot, Table};

use mqblk_sync::{AtomicUsize, Ordering};

pub(crate) struct MemStore {
    table: Table,
    reclaim: Reclaim,
    /// Pages published in the table: +1 when a write fills an empty slot,
    /// -1 when a discard empties one; overwrites and reads leave it alone.
    /// Wrapping: a discard may subtract before the racing write that made
    /// the page has added (`nr_pages` reads that as 0).
    pages: AtomicUsize,
}

impl Drop for MemStore {
    fn drop(&mut self) {
        // `&mut self`: no reader or writer is left, so the published pages
        // go back to the arena now, and with the arena closed each chunk is
        // released as it empties: the device's memory goes when the device
        // does, not when the last retirement's grace period ends (the
        // arena outlives the store in those deferred functions' `Arc`s).
        let reclaim = &self.reclaim;
        // SAFETY: each page was published, so the table owned it, and
        // `take_pages` took it out of its slot: it is ours, unseen by anyone.
        self.table.take_pages(|page| reclaim.give_back(unsafe { OwnedPage::from_raw(page) }));
        reclaim.close();
    }
}

/// What `lend` hands out for a page never written: one page, aligned as
/// one, so that a slice of it spans one page frame as a store page's does
/// (a borrower that vmsplices it needs a pipe slot per frame).
#[repr(align(4096))]
struct ZeroPage([u8; PAGE_SIZE as usize]);
static ZEROS: ZeroPage = ZeroPage([0; PAGE_SIZE as usize]);

/// Splits `[pos, pos + len)` into (page, offset in page, length) pieces.
fn pieces(pos: u64, len: u64) -> impl Iterator<Item = (u64, usize, usize)> {
    let end = pos + len;
    let mut at = pos;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let page = at / PAGE_SIZE;
        let offset = at % PAGE_SIZE;
        let n = (PAGE_SIZE - offset).min(end - at);
        at += n;
        Some((page, offset as usize, n as usize))
    })
}

impl MemStore {
    /// A store for a device of `capacity_bytes`; nothing but the top array
    /// is allocated until the first write.
    pub(crate) fn new(capacity_bytes: u64) -> Self {
        Self { table: Table::new(capacity_bytes), reclaim: Reclaim::new(), pages: AtomicUsize::new(0) }
    }

    /// Copies `[pos, pos + out.len())` into `out`; unwritten bytes are zero.
    pub(crate) fn read(&self, pos: u64, out: &mut [u8]) {
        let _guard = self.reclaim.pin();
        let mut done = 0;
        for (page, offset, n) in pieces(pos, out.len() as u64) {
            let dst = &mut out[done..done + n];
            done += n;
            // Acquire: pairs with the publishing exchange, so the page's
            // bytes are visible.
            let p = self.table.slot(page).map_or(null_mut(), |s| s.load(Ordering::Acquire));
            if p.is_null() {
                dst.fill(0);
                continue;
            }
            // SAFETY: `p` was published when loaded and we are pinned, so
            // it is neither reused nor freed (reclaim.rs) and, published
            // pages being immutable, not written while we copy.
            unsafe { read_shared(p, offset, dst) };
        }
    }

    /// Lends `[pos, pos + len)` to `f` without copying, as slices of the
    /// store's pages (a shared page of zeros for unwritten ones), in order,
    /// at most `LEND_SLICES` per call of `f`; stops at `f`'s first error.
    /// The pages stay alive and unchanged while `f` runs: the store is
    /// pinned, and published pages are immutable (a write that lands
    /// meanwhile publishes a new page, which this read may or may not see,
    /// as with `read`).
    pub(crate) fn lend(
        &self,
        pos: u64,
        len: u64,
        f: &mut dyn FnMut(&[std::io::IoSlice<'_>]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let _guard = self.reclaim.pin();
        let mut slices = [std::io::IoSlice::new(&[]); LEND_SLICES];
        let mut n = 0;
        for (page, offset, bytes) in pieces(pos, len) {
            let p = self.table.slot(page).map_or(null_mut(), |s| s.load(Ordering::Acquire));
            slices[n] = std::io::IoSlice::new(if p.is_null() {
                &ZEROS.0[..bytes]
            } else {
                // SAFETY: `p` was published when loaded (Acquire, as in
                // `read`) and we stay pinned until `f` has returned for
                // the last time, so it is neither reused nor written.
                unsafe { lend_shared(p, offset, bytes) }
            });
            n += 1;
            if n == LEND_SLICES {
                f(&slices)?;
                n = 0;
            }
        }
        if n > 0 {
            f(&slices[..n])?;
        }
        Ok(())
    }

    /// Stores `data` at `pos`, making pages as needed.
    ///
    /// # Panics
    /// If the range runs past the device's end (the queue refuses that).
    pub(crate) fn write(&self, pos: u64, data: &[u8]) {
        let mut guard = self.reclaim.pin_writer();
        let mut done = 0;
        for (page, offset, n) in pieces(pos, data.len() as u64) {
            let slot = self.table.slot_or_install(page);
            self.update(&mut guard, slot, offset, Piece::Bytes(&data[done..done + n]));
            done += n;
        }
    }

    /// Makes `[pos, pos + len)` read as zeros: whole pages are freed,
    /// partial ones rewritten with the piece zeroed (discard, write zeroes
    /// and zone reset alike, as null_blk's null_handle_discard and
    /// null_zone_reset free a range's pages with null_free_sector). Once
    /// enough freed pages wait for their grace period, this waits it out
    /// (reclaim.rs, `settle`), so the memory is the arena's again when the
    /// call returns (unless a reader held the epoch back).
    pub(crate) fn zero(&self, pos: u64, len: u64) {
        self.zero_range(pos, len, true);
    }

    /// Makes `[pos, pos + len)` read as zeros and keeps its pages (a write
    /// zeroes with REQ_NOUNMAP): each present page is rewritten with its
    /// piece zeroed, never freed; an absent page already reads as zeros
    /// and stays absent (nothing was provisioned to keep).
    pub(crate) fn zero_in_place(&self, pos: u64, len: u64) {
        self.zero_range(pos, len, false);
    }

    /// `zero` (`free_whole`: whole pages freed) and `zero_in_place`.
    fn zero_range(&self, pos: u64, len: u64, free_whole: bool) {
        let mut guard = self.reclaim.pin_writer();
        for (page, offset, n) in pieces(pos, len) {
            let Some(slot) = self.table.slot(page) else { continue };
            if free_whole && n as u64 == PAGE_SIZE {
                self.free(&mut guard, slot);
            } else {
                self.update(&mut guard, slot, offset, Piece::Zeros(n));
            }
        }
        // Unpinned first: a pinned thread holds the epoch back itself.
        drop(guard);
        self.reclaim.settle();
    }

    /// Whether the page holding byte `pos` was written and not discarded
    /// since: absent pages read as zeros.
    pub(crate) fn is_present(&self, pos: u64) -> bool {
        // Only the pointer is compared, never followed: no pin needed.
        self.table.slot(pos / PAGE_SIZE).is_some_and(|s| !s.load(Ordering::Acquire).is_null())
    }

    /// Pages currently allocated (published in the table).
    pub(crate) fn nr_pages(&self) -> usize {
        let n = self.pages.load(Ordering::Relaxed);
        // A transient wrap below zero (field doc) reads as none.
        if n > isize::MAX as usize {
            0
        } else {
            n
        }
    }

    /// The lines for the device's stats: the data pages (published) and
    /// the memory under them: pages the arena has handed out (the data,
    /// pages waiting out a grace period, pages being written) and its
    /// 2 MiB chunks, resident (some page handed out since the chunk was
    /// last given back to the kernel, or kept as the spare) and mapped.
    pub(crate) fn describe(&self) -> String {
        let (held, resident, mapped) = self.reclaim.usage();
        format!(
            "null/pages={} ({} MiB of data)\nnull/store_pages_held={held}\n\
             null/store_chunks_resident={resident} of {mapped} mapped (2 MiB each)",
            self.nr_pages(),
            (self.nr_pages() as u64 * PAGE_SIZE) >> 20,
        )
    }

    /// Publishes `piece` at `offset` of the slot's page, copy-on-write: a
    /// new page is built from the current one and exchanged in; a lost race
    /// rebuilds on the winner's page. A zeros piece leaves an empty slot
    /// empty (it reads as zeros already).
    fn update(&self, guard: &mut WriteGuard<'_>, slot: &Slot, offset: usize, piece: Piece<'_>) {
        if piece.len() as u64 == PAGE_SIZE && matches!(piece, Piece::Bytes(_)) {
            return self.replace_whole(guard, slot, piece);
        }
        let mut new = self.reclaim.take();
        let mut cur = slot.load(Ordering::Acquire);
        loop {
            if cur.is_null() && matches!(piece, Piece::Zeros(_)) {
                return self.reclaim.give_back(new);
            }
            // SAFETY: `cur` is null or was published when loaded, and we are
            // pinned, so it stays allocated and unwritten; the piece fits
            // the page (`pieces`).
            unsafe { new.compose(cur, offset, piece) };
            let raw = new.into_raw();
            // AcqRel: Release publishes the new bytes; Acquire orders the
            // old page's creation before its reuse after we retire it.
            // Acquire on failure: the winner's page is our next base.
            match slot.compare_exchange(cur, raw, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return self.published(guard, cur),
                Err(now) => {
                    // SAFETY: the exchange failed, so `raw` was never
                    // published: it is still the page we own.
                    new = unsafe { OwnedPage::from_raw(raw) };
                    cur = now;
                }
            }
        }
    }

    /// A full-page write needs nothing of the old page: build once, swap
    /// in (the swap orders racing writers as a serial history would).
    fn replace_whole(&self, guard: &mut WriteGuard<'_>, slot: &Slot, piece: Piece<'_>) {
        let mut new = self.reclaim.take();
        // SAFETY: a null base is never read; the piece is exactly a page.
        unsafe { new.compose(std::ptr::null(), 0, piece) };
        // AcqRel: as in `update`.
        let old = slot.swap(new.into_raw(), Ordering::AcqRel);
        self.published(guard, old);
    }

    /// After a page went in in place of `old`: count a new page, or retire
    /// the one replaced.
    fn published(&self, guard: &mut WriteGuard<'_>, old: *mut Page) {
        if old.is_null() {
            self.pages.fetch_add(1, Ordering::Relaxed);
        } else {
            // SAFETY: our exchange took `old` out of the slot while pinned.
            unsafe { guard.retire(old) };
        }
    }

    /// Empties the slot (a whole-page discard): the page is retired.
    fn free(&self, guard: &mut WriteGuard<'_>, slot: &Slot) {
        // AcqRel: Acquire orders the page's creation before its reuse.
        let old = slot.swap(null_mut(), Ordering::AcqRel);
        if !old.is_null() {
            self.pages.fetch_sub(1, Ordering::Relaxed);
            // SAFETY: our swap took `old` out of the slot while pinned.
            unsafe { guard.retire(old) };
        }
    }
}
