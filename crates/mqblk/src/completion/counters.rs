//! A client's block-layer counters (bios, requests, merges, plug flushes),
//! written by its owning client alone and summed by `Device::stats`.
//!
//! Relies on: the loom-swappable atomics (sync.rs).

use crate::bio::Op;
use crate::sync::{AtomicBool, AtomicU64, Ordering};

/// Per-direction counts (fio's disk stats: read, and everything else).
///
/// ```
/// use mqblk::RwCount;
///
/// let bios = RwCount { read: 3, write: 2 };
/// assert_eq!(bios.total(), 5);
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RwCount {
    /// Reads.
    pub read: u64,
    /// Everything else: writes, flushes, discards, zone operations.
    pub write: u64,
}

impl RwCount {
    /// Both directions.
    pub fn total(&self) -> u64 {
        self.read + self.write
    }
}

/// A client's block-layer counters. Only the owning client writes them
/// (plain load + store, no read-modify-write); `Device::stats` sums them.
#[derive(Debug, Default)]
pub(crate) struct ClientCounters {
    /// Bios submitted (a split bio counts once).
    bios: [AtomicU64; 2],
    /// Requests made (one per unmerged bio or split piece).
    requests: [AtomicU64; 2],
    /// Bios merged into another bio's request.
    merges: [AtomicU64; 2],
    front_merges: AtomicU64,
    /// Plug lists issued to the driver.
    plug_flushes: AtomicU64,
    /// The client is inside a submission (a queue freeze waits for it).
    pub(crate) entered: AtomicBool,
}

/// What `ClientCounters` adds up to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CounterTotals {
    pub(crate) bios: RwCount,
    pub(crate) requests: RwCount,
    pub(crate) merges: RwCount,
    pub(crate) front_merges: u64,
    pub(crate) plug_flushes: u64,
}

#[inline(always)]
fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

#[inline(always)]
fn dir(op: Op) -> usize {
    usize::from(op != Op::Read)
}

impl ClientCounters {
    #[inline(always)]
    pub(crate) fn bio(&self, op: Op) {
        bump(&self.bios[dir(op)]);
    }

    #[inline(always)]
    pub(crate) fn request(&self, op: Op) {
        bump(&self.requests[dir(op)]);
    }

    pub(crate) fn merge(&self, op: Op, front: bool) {
        bump(&self.merges[dir(op)]);
        if front {
            bump(&self.front_merges);
        }
    }

    pub(crate) fn plug_flush(&self) {
        bump(&self.plug_flushes);
    }

    pub(crate) fn add_to(&self, t: &mut CounterTotals) {
        let rw =
            |a: &[AtomicU64; 2]| RwCount { read: a[0].load(Ordering::Relaxed), write: a[1].load(Ordering::Relaxed) };
        let (bios, requests, merges) = (rw(&self.bios), rw(&self.requests), rw(&self.merges));
        t.bios.read += bios.read;
        t.bios.write += bios.write;
        t.requests.read += requests.read;
        t.requests.write += requests.write;
        t.merges.read += merges.read;
        t.merges.write += merges.write;
        t.front_merges += self.front_merges.load(Ordering::Relaxed);
        t.plug_flushes += self.plug_flushes.load(Ordering::Relaxed);
    }
}
