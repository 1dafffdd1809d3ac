//! Pages lent past a read. `MemStore::lend` hands its callee slices of the
//! store's pages that stay valid only while the callee runs. A borrower
//! that gives them to the kernel by reference instead of copying them
//! (vmsplice into a pipe, then splice into a Unix socket: `mqblk serve`'s
//! zero-copy read replies) keeps the bytes in use until its client has
//! read them, long after the read returned and perhaps after the page was
//! replaced and retired. The kernel holds the page frames themselves, so
//! what must not happen meanwhile is the arena handing such a page out
//! again, to be overwritten in place with another block's data.
//!
//! The protocol, a grace period driven by the borrowers as reclaim.rs's is
//! driven by pinned readers:
//! - Every lend takes a number from the arena's counter (`Loan::begin`),
//!   and its borrower publishes the number of its oldest lend not yet
//!   given back (its slot; IDLE when none) before it loads a page.
//! - A page freed while some slot is at or below the counter (read at the
//!   free: the page's stamp) may be held by the kernel: it waits in the
//!   quarantine, and is reused once every slot is past its stamp. Any
//!   lend that loaded the page did so before the page was retired, hence
//!   took its number before the free (the grace period orders the two),
//!   so its number is at most the stamp.
//! - A borrower gives lends back in order, once it knows the kernel has
//!   let go of them (`Loan::give_back_through`; for a Unix socket, once
//!   the client has read the bytes: see mqblk-nbd's splice.rs).
//! - A borrower that goes with lends outstanding (a client that stopped
//!   reading) cannot tell when they end: the pages it lent are tainted,
//!   and a tainted page's frame is handed to the kernel (MADV_DONTNEED of
//!   its 4 KiB) before the arena reuses the address, so the socket keeps
//!   the old frame and the store writes into a fresh one.
//! - The quarantine is bounded: past `QUARANTINE_PAGES` its oldest pages
//!   are handed back the same way, so a client that never reads costs the
//!   store page faults, never unbounded memory.
//!
//! The kernel's nearest relative is the page pinning of MSG_ZEROCOPY
//! (completion notifications on the socket's error queue), which Unix
//! sockets do not offer; the consumption signal here is SIOCOUTQ.
//!
//! Relies on: the arena (arena.rs) calling `Lending` under its mutex on
//! every free and before every allocation; reclaim.rs's grace period
//! (a page is freed only after every reader pinned at its retirement has
//! left); `MemStore::lend_to` calling `Loan::begin` before it pins.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::arena::Arena;
use super::page::PAGE_SIZE;

/// A slot's value when its borrower has nothing outstanding.
const IDLE: u64 = u64::MAX;
/// Freed pages that may wait for borrowers (16 MiB; small under Miri, so
/// its tests reach the bound quickly); past it the oldest are reused after
/// their frames go back to the kernel.
pub(crate) const QUARANTINE_PAGES: usize = if cfg!(miri) { 64 } else { 4096 };
/// Pages one borrower may have outstanding (16 MiB, far more than a
/// socket's send buffer and a pipe hold; small under Miri); past it
/// `begin` declines and the borrower copies instead.
pub(crate) const LOAN_PAGES: usize = if cfg!(miri) { 64 } else { 4096 };
/// Lends one borrower may have outstanding.
const LOAN_LENDS: usize = 256;

/// The number of one lend, for `Loan::give_back_through`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LendId(u64);

/// The arena's side: borrowers' slots, the quarantine and the tainted
/// pages. Lives in the arena's `Inner`, under its mutex.
#[derive(Default)]
pub(crate) struct Lending {
    /// Each borrower's oldest outstanding lend number, or IDLE.
    borrowers: Vec<Arc<AtomicU64>>,
    /// Freed pages that some borrower may still hold: (stamp, address),
    /// stamps rising.
    quarantine: VecDeque<(u64, usize)>,
    /// Pages lent by borrowers that went with the lend outstanding.
    tainted: HashSet<usize>,
}

impl Lending {
    /// The smallest slot: every lend numbered below it is given back.
    fn oldest(&self) -> u64 {
        // SeqCst: pairs with `Loan::begin`'s store (see the module doc).
        self.borrowers.iter().map(|s| s.load(Ordering::SeqCst)).min().unwrap_or(IDLE)
    }

    /// A page at `addr` is being freed when the lend counter reads
    /// `stamp`: true if it must wait in the quarantine (it is then there).
    pub(crate) fn holds(&mut self, addr: usize, stamp: u64) -> bool {
        if self.borrowers.is_empty() || self.oldest() > stamp {
            return false;
        }
        self.quarantine.push_back((stamp, addr));
        true
    }

    /// The next quarantined page the arena may reuse, and whether its frame
    /// must go back to the kernel first (quarantine over its bound); None
    /// when the rest must wait.
    pub(crate) fn next_ready(&mut self) -> Option<(usize, bool)> {
        let &(stamp, addr) = self.quarantine.front()?;
        let over = self.quarantine.len() > QUARANTINE_PAGES;
        if !over && stamp >= self.oldest() {
            return None;
        }
        self.quarantine.pop_front();
        Some((addr, over))
    }

    /// True if the page at `addr` was tainted (its frame must go back to
    /// the kernel before reuse); it is not any more.
    pub(crate) fn untaint(&mut self, addr: usize) -> bool {
        !self.tainted.is_empty() && self.tainted.remove(&addr)
    }

    /// Pages waiting in the quarantine.
    pub(crate) fn quarantined(&self) -> usize {
        self.quarantine.len()
    }

    pub(crate) fn register(&mut self, slot: Arc<AtomicU64>) {
        self.borrowers.push(slot);
    }

    /// A borrower goes; `lent` are the pages of its outstanding lends,
    /// tainted from now on.
    pub(crate) fn deregister(&mut self, slot: &Arc<AtomicU64>, lent: impl Iterator<Item = usize>) {
        self.tainted.extend(lent);
        self.borrowers.retain(|s| !Arc::ptr_eq(s, slot));
    }
}

/// A borrower of a memory-backed device's pages past a read: what
/// `Device::read_direct_lent` lends stays as it was until given back with
/// `give_back_through`, so the slices may be handed to the kernel by
/// reference (vmsplice) and read by someone else later. Made by
/// `Device::loan`; one per connection, used by one thread at a time.
/// Dropped with lends outstanding, it marks their pages so that the
/// device never writes into them again (see the module doc of
/// mem/loan.rs): safe, at the price of a page fault per such page.
pub struct Loan {
    arena: Arc<Arena>,
    /// Our oldest outstanding lend number, or IDLE (read by the arena).
    slot: Arc<AtomicU64>,
    /// Outstanding lends, oldest first: number and pages recorded.
    lends: VecDeque<(u64, usize)>,
    /// The outstanding lends' page addresses, a ring: `count` of them
    /// from `head`.
    pages: Box<[usize]>,
    head: usize,
    count: usize,
}

impl Loan {
    pub(crate) fn new(arena: Arc<Arena>) -> Self {
        let slot = Arc::new(AtomicU64::new(IDLE));
        arena.register_borrower(slot.clone());
        Self {
            arena,
            slot,
            lends: VecDeque::with_capacity(LOAN_LENDS),
            pages: vec![0; LOAN_PAGES].into_boxed_slice(),
            head: 0,
            count: 0,
        }
    }

    /// Whether some lend is not given back yet.
    pub fn is_outstanding(&self) -> bool {
        !self.lends.is_empty()
    }

    /// Every lend up to and including `id` is over: the kernel (or whoever
    /// held the slices) no longer reads those pages.
    pub fn give_back_through(&mut self, id: LendId) {
        while let Some(&(n, pages)) = self.lends.front() {
            if n > id.0 {
                break;
            }
            self.lends.pop_front();
            self.head = (self.head + pages) % LOAN_PAGES;
            self.count -= pages;
        }
        let oldest = self.lends.front().map_or(IDLE, |&(n, _)| n);
        // SeqCst: the arena reads it with SeqCst (`Lending::oldest`).
        self.slot.store(oldest, Ordering::SeqCst);
    }

    /// Opens a lend of up to `pages` pages, before the store is pinned;
    /// None when this borrower has no room left (it should copy instead).
    pub(crate) fn begin(&mut self, pages: usize) -> Option<LendId> {
        if self.lends.len() == LOAN_LENDS || self.count + pages > LOAN_PAGES {
            return None;
        }
        let id = self.arena.next_lend();
        if self.lends.is_empty() {
            // SeqCst, and before any page is loaded: a free that comes
            // after this lend's pin ends sees either this slot or a later
            // give-back (module doc).
            self.slot.store(id, Ordering::SeqCst);
        }
        self.lends.push_back((id, 0));
        Some(LendId(id))
    }

    /// Records a page of the lend just begun (its address, for the taint).
    pub(crate) fn note(&mut self, addr: usize) {
        let last = self.lends.back_mut().expect("a lend is open");
        assert!(self.count < LOAN_PAGES, "more pages noted than begun");
        self.pages[(self.head + self.count) % LOAN_PAGES] = addr;
        self.count += 1;
        last.1 += 1;
    }

    /// Whether this loan was made by `arena`'s store.
    pub(crate) fn is_of(&self, arena: &Arc<Arena>) -> bool {
        Arc::ptr_eq(&self.arena, arena)
    }

    /// Pages a lend of `len` bytes at `pos` touches.
    pub(crate) fn pages_of(pos: u64, len: u64) -> usize {
        ((pos + len).div_ceil(PAGE_SIZE) - pos / PAGE_SIZE) as usize
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        let lent = (0..self.count).map(|i| self.pages[(self.head + i) % LOAN_PAGES]);
        self.arena.deregister_borrower(&self.slot, lent);
    }
}

impl std::fmt::Debug for Loan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loan").field("lends", &self.lends.len()).field("pages", &self.count).finish()
    }
}
