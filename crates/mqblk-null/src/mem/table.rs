//! The two-level sparse page table: a top array sized from the device
//! capacity, of atomic pointers to leaves; each leaf an array of atomic page
//! pointers. Leaves appear on the first write in their range and stay until
//! the table is dropped (a leaf is 16 KiB per 8 MiB of device, so a fully
//! written device pays 0.2% for them; a never written one pays only the top
//! array: 8 bytes per 8 MiB, 238 KiB for 250 GB).
//!
//! Ownership: a non-null slot holds a page from the arena (arena.rs, by
//! `OwnedPage::into_raw`), owned by the table. Whoever takes it out of the slot (a successful swap or
//! compare_exchange) owns it from then on, except that pinned readers may
//! still be reading it: it must be retired, not freed (mod.rs, reclaim.rs).

use std::ptr::null_mut;

use super::page::{Page, PAGE_SIZE};
use mqblk_sync::{AtomicPtr, Ordering};

/// Pages per leaf (log2). Small under loom so a model's table is a few
/// atomics, and under Miri so that both arrays stay short: each slot is an
/// interpreted step when a leaf or the top array is made (256 slots a leaf,
/// 1,024 top entries for the 1 GB devices of the tests, where 64-page
/// leaves made a top array that cost Miri seconds to build for every
/// memory-backed device); the code is the same at every size.
const LEAF_SHIFT: u32 = if cfg!(loom) {
    1
} else if cfg!(miri) {
    8
} else {
    11
};
const LEAF_PAGES: usize = 1 << LEAF_SHIFT;

/// One page's slot: null (never written, or discarded) or a published page.
pub(crate) type Slot = AtomicPtr<Page>;

type Leaf = [Slot; LEAF_PAGES];

pub(crate) struct Table {
    top: Box<[AtomicPtr<Leaf>]>,
    capacity_pages: u64,
}

/// A leaf of empty slots, built in place on the heap: a 16 KiB array made
/// on the stack and moved into a box costs Miri half a minute.
fn new_leaf() -> Box<Leaf> {
    let slots: Box<[Slot]> = (0..LEAF_PAGES).map(|_| AtomicPtr::new(null_mut())).collect();
    slots.try_into().unwrap_or_else(|_| unreachable!("LEAF_PAGES slots"))
}

impl Table {
    /// A table for a device of `capacity_bytes` (rounded up to pages).
    pub(crate) fn new(capacity_bytes: u64) -> Self {
        let capacity_pages = capacity_bytes.div_ceil(PAGE_SIZE);
        let nr_leaves = capacity_pages.div_ceil(LEAF_PAGES as u64);
        let top = (0..nr_leaves).map(|_| AtomicPtr::new(null_mut())).collect();
        Self { top, capacity_pages }
    }

    fn split(&self, page: u64) -> Option<(&AtomicPtr<Leaf>, usize)> {
        if page >= self.capacity_pages {
            return None;
        }
        let top = &self.top[(page >> LEAF_SHIFT) as usize];
        Some((top, page as usize & (LEAF_PAGES - 1)))
    }

    /// The slot of `page`, or None if its leaf was never made (or the page
    /// is past the device's end): the page reads as zeros.
    pub(crate) fn slot(&self, page: u64) -> Option<&Slot> {
        let (top, index) = self.split(page)?;
        // Acquire: pairs with the Release install, so the leaf's
        // initialised slots are visible.
        let leaf = top.load(Ordering::Acquire);
        // SAFETY: a non-null top entry is a leaf from `new_leaf`, installed
        // once and freed only by `drop` (which has `&mut self`), so it
        // outlives this `&self` borrow.
        (!leaf.is_null()).then(|| unsafe { &(*leaf)[index] })
    }

    /// The slot of `page`, making its leaf if needed.
    ///
    /// # Panics
    /// If `page` is past the device's end (the queue refuses such I/O, so
    /// reaching here is a bug).
    pub(crate) fn slot_or_install(&self, page: u64) -> &Slot {
        let (top, index) = self
            .split(page)
            .unwrap_or_else(|| panic!("null: page {page} past the end ({} pages)", self.capacity_pages));
        let mut leaf = top.load(Ordering::Acquire);
        if leaf.is_null() {
            leaf = Self::install(top);
        }
        // SAFETY: as in `slot`: installed leaves live as long as the table.
        unsafe { &(*leaf)[index] }
    }

    /// Installs a fresh leaf in an empty top entry; a racing thread may win,
    /// then ours is dropped and the winner's returned: exactly one leaf per
    /// entry (loom: `loom_mem_leaf_install_race_installs_one_leaf`).
    fn install(top: &AtomicPtr<Leaf>) -> *mut Leaf {
        let fresh = Box::into_raw(new_leaf());
        // Release publishes the leaf's initialised slots; Acquire on failure
        // makes the winner's visible to us.
        match top.compare_exchange(null_mut(), fresh, Ordering::Release, Ordering::Acquire) {
            Ok(_) => fresh,
            Err(winner) => {
                // SAFETY: the exchange failed, so `fresh` was never
                // published: we still own the box we made above.
                drop(unsafe { Box::from_raw(fresh) });
                winner
            }
        }
    }

    /// Empties every slot, handing each published page to `f` (the store
    /// being dropped: `&mut self`, so no reader or writer is left and the
    /// pages are the caller's).
    pub(crate) fn take_pages(&mut self, mut f: impl FnMut(*mut Page)) {
        for top in self.top.iter() {
            let leaf = top.load(Ordering::Acquire);
            if leaf.is_null() {
                continue;
            }
            // SAFETY: installed leaves live as long as the table, which
            // `&mut self` keeps alive and to ourselves.
            for slot in unsafe { (*leaf).iter() } {
                let page = slot.swap(null_mut(), Ordering::Acquire);
                if !page.is_null() {
                    f(page);
                }
            }
        }
    }

    /// Leaves made so far.
    #[cfg(test)]
    pub(crate) fn nr_leaves(&self) -> usize {
        self.top.iter().filter(|t| !t.load(Ordering::Relaxed).is_null()).count()
    }

    /// Bytes of table (top array and leaves), pages not counted.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn table_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.top) + self.nr_leaves() * std::mem::size_of::<Leaf>()
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        // `&mut self`: no reader or writer is left, every leaf is ours to
        // free. The store has taken the pages out first (`take_pages`,
        // mod.rs): a page is the arena's memory, not the table's.
        for top in self.top.iter() {
            let leaf = top.load(Ordering::Acquire);
            if !leaf.is_null() {
                // SAFETY: a non-null entry is a leaf we installed from a box
                // and nothing else frees; no one can reach it any more.
                drop(unsafe { Box::from_raw(leaf) });
            }
        }
    }
}
