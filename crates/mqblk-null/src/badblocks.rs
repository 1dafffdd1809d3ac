//! null_blk's bad blocks: sector ranges whose I/O fails with EIO, given
//! by the `badblocks` spec key or changed on a live device through the
//! `badblocks` attribute (`+START-END` adds, `-START-END` clears: null_blk's
//! configfs syntax, inclusive 512-byte sectors).
//!
//! What an I/O touching a bad range gets (null_blk's `null_handle_badblocks`
//! with "null_blk: introduce badblocks_once parameter" and
//! "null_blk: introduce badblocks_partial_io parameter"):
//! - the request ends with EIO;
//! - `badblocks_once=1`: the bad range it hit is cleared as it fails, so
//!   the next I/O there succeeds (a sector that goes bad once, as a
//!   remapped medium error would);
//! - `badblocks_partial_io=1`: the sectors before the first bad one
//!   (rounded down to the logical block) are transferred and completed,
//!   the rest fails; without it nothing is transferred.
//!
//! The list is empty on most devices, so the hot path reads one flag
//! (`is_empty`); the ranges sit behind a reader-writer lock that only
//! I/O near a set flag and attribute writes take.
//!
//! Relies on: parking_lot (the lock); the null driver applies the outcome
//! (mod.rs `handle`).

use parking_lot::RwLock;

use mqblk_sync::{AtomicBool, Ordering};

/// Sector ranges, sorted, disjoint and not touching: (start, end) with the
/// end exclusive.
pub(crate) struct BadBlocks {
    ranges: RwLock<Vec<(u64, u64)>>,
    empty: AtomicBool,
    once: bool,
    partial_io: bool,
    /// The logical block in sectors (partial I/O stops on a block edge).
    block_sectors: u64,
    /// The device's sectors: ranges must lie below.
    capacity_sectors: u64,
}

impl BadBlocks {
    pub(crate) fn new(once: bool, partial_io: bool, block_sectors: u64, capacity_sectors: u64) -> Self {
        assert!(block_sectors.is_power_of_two());
        Self {
            ranges: RwLock::new(Vec::new()),
            empty: AtomicBool::new(true),
            once,
            partial_io,
            block_sectors,
            capacity_sectors,
        }
    }

    /// Whether no sector is bad (one load: the hot path's only cost).
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.empty.load(Ordering::Acquire)
    }

    /// The I/O at `[sector, sector + nr_sectors)`: None if it touches no
    /// bad sector, else how many of its leading sectors still transfer
    /// (0 unless `badblocks_partial_io`). With `badblocks_once` the bad
    /// range it touched is cleared.
    pub(crate) fn check(&self, sector: u64, nr_sectors: u64) -> Option<u64> {
        if nr_sectors == 0 || self.is_empty() {
            return None;
        }
        let end = sector + nr_sectors;
        let hit = {
            let ranges = self.ranges.read();
            first_overlap(&ranges, sector, end).map(|i| ranges[i])
        }?;
        if self.once {
            // Another I/O may have cleared it meanwhile; clearing twice is
            // harmless.
            self.clear(hit.0, hit.1);
        }
        if !self.partial_io {
            return Some(0);
        }
        let first_bad = hit.0 & !(self.block_sectors - 1);
        Some(first_bad.saturating_sub(sector))
    }

    /// Marks `[start, end)` bad.
    pub(crate) fn set(&self, start: u64, end: u64) {
        debug_assert!(start < end);
        let mut ranges = self.ranges.write();
        // Everything overlapping or touching [start, end) merges into one.
        let lo = ranges.partition_point(|&(_, e)| e < start);
        let hi = ranges.partition_point(|&(s, _)| s <= end);
        let (mut s, mut e) = (start, end);
        if lo < hi {
            s = s.min(ranges[lo].0);
            e = e.max(ranges[hi - 1].1);
        }
        ranges.splice(lo..hi, [(s, e)]);
        self.empty.store(false, Ordering::Release);
    }

    /// Marks `[start, end)` good again.
    pub(crate) fn clear(&self, start: u64, end: u64) {
        let mut ranges = self.ranges.write();
        let lo = ranges.partition_point(|&(_, e)| e <= start);
        let hi = ranges.partition_point(|&(s, _)| s < end);
        if lo >= hi {
            return;
        }
        let mut kept = Vec::with_capacity(2);
        if ranges[lo].0 < start {
            kept.push((ranges[lo].0, start));
        }
        if ranges[hi - 1].1 > end {
            kept.push((end, ranges[hi - 1].1));
        }
        ranges.splice(lo..hi, kept);
        self.empty.store(ranges.is_empty(), Ordering::Release);
    }

    /// The bad ranges as `START-END` (inclusive sectors), `:`-separated.
    pub(crate) fn list(&self) -> String {
        let ranges = self.ranges.read();
        ranges.iter().map(|&(s, e)| format!("{s}-{}", e - 1)).collect::<Vec<_>>().join(":")
    }

    /// Applies a `badblocks` attribute write: `+START-END` or `-START-END`.
    pub(crate) fn store(&self, value: &str) -> Result<(), String> {
        let value = value.trim();
        let (add, range) = match value.split_at_checked(1) {
            Some(("+", r)) => (true, r),
            Some(("-", r)) => (false, r),
            _ => return Err(format!("badblocks: '{value}' is not +START-END (add) or -START-END (clear)")),
        };
        let (start, end) = self.parse_range(range)?;
        if add {
            self.set(start, end);
        } else {
            self.clear(start, end);
        }
        Ok(())
    }

    fn parse_range(&self, range: &str) -> Result<(u64, u64), String> {
        parse_range(range, self.capacity_sectors)
    }
}

/// Parses the spec key's value: `START-END` ranges (inclusive sectors)
/// joined by `:`, each below `capacity_sectors`, as [start, end) ranges.
pub(crate) fn parse_list(value: &str, capacity_sectors: u64) -> Result<Vec<(u64, u64)>, String> {
    value.split(':').map(|r| parse_range(r, capacity_sectors)).collect()
}

/// `START-END`, inclusive sectors below the capacity -> [start, end).
fn parse_range(range: &str, capacity_sectors: u64) -> Result<(u64, u64), String> {
    let bad = || format!("badblocks: '{range}' is not START-END (inclusive 512-byte sectors)");
    let (s, e) = range.split_once('-').ok_or_else(bad)?;
    let start: u64 = s.trim().parse().map_err(|_| bad())?;
    let last: u64 = e.trim().parse().map_err(|_| bad())?;
    if start > last {
        return Err(format!("badblocks: range {start}-{last} ends before it starts"));
    }
    if last >= capacity_sectors {
        return Err(format!(
            "badblocks: range {start}-{last} goes past the device's last sector ({})",
            capacity_sectors - 1
        ));
    }
    Ok((start, last + 1))
}

/// The index of the first range overlapping `[start, end)`.
fn first_overlap(ranges: &[(u64, u64)], start: u64, end: u64) -> Option<usize> {
    let i = ranges.partition_point(|&(_, e)| e <= start);
    (i < ranges.len() && ranges[i].0 < end).then_some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(b: &BadBlocks) -> Vec<(u64, u64)> {
        b.ranges.read().clone()
    }

    #[test]
    fn set_merges_overlapping_and_touching_ranges() {
        let b = BadBlocks::new(false, false, 1, 1 << 20);
        b.set(10, 20);
        b.set(30, 40);
        b.set(50, 60);
        assert_eq!(ranges(&b), [(10, 20), (30, 40), (50, 60)]);
        b.set(20, 30); // touches both neighbours
        assert_eq!(ranges(&b), [(10, 40), (50, 60)]);
        b.set(5, 55);
        assert_eq!(ranges(&b), [(5, 60)]);
        b.set(70, 71);
        assert_eq!(b.list(), "5-59:70-70");
    }

    #[test]
    fn clear_splits_and_empties() {
        let b = BadBlocks::new(false, false, 1, 1 << 20);
        b.set(10, 40);
        b.clear(20, 25);
        assert_eq!(ranges(&b), [(10, 20), (25, 40)]);
        b.clear(0, 12);
        b.clear(39, 100);
        assert_eq!(ranges(&b), [(12, 20), (25, 39)]);
        assert!(!b.is_empty());
        b.clear(0, 1000);
        assert!(ranges(&b).is_empty());
        assert!(b.is_empty());
    }

    #[test]
    fn check_finds_only_overlaps() {
        let b = BadBlocks::new(false, false, 1, 1 << 20);
        assert_eq!(b.check(0, 100), None);
        b.set(100, 108);
        assert_eq!(b.check(92, 8), None, "ends where the range starts");
        assert_eq!(b.check(108, 8), None, "starts where it ends");
        assert_eq!(b.check(107, 1), Some(0));
        assert_eq!(b.check(0, 1000), Some(0));
        assert_eq!(b.check(100, 0), None, "an empty I/O touches nothing");
        assert_eq!(ranges(&b), [(100, 108)], "without once the range stays");
    }

    #[test]
    fn once_clears_the_range_it_hit() {
        let b = BadBlocks::new(true, false, 1, 1 << 20);
        b.set(100, 108);
        b.set(200, 201);
        assert_eq!(b.check(96, 8), Some(0));
        assert_eq!(ranges(&b), [(200, 201)], "the whole range hit is cleared, not just the overlap");
        assert_eq!(b.check(96, 8), None);
    }

    #[test]
    fn partial_io_stops_at_the_block_before_the_first_bad_sector() {
        // 4 KiB blocks: 8 sectors.
        let b = BadBlocks::new(false, true, 8, 1 << 20);
        b.set(21, 22);
        assert_eq!(b.check(0, 64), Some(16), "sector 21 lies in the block from 16");
        assert_eq!(b.check(16, 8), Some(0));
        b.clear(0, 1000);
        b.set(10, 100);
        assert_eq!(b.check(40, 8), Some(0), "the bad range starts before the I/O");
    }

    #[test]
    fn attribute_syntax_and_bad_input() {
        let b = BadBlocks::new(false, false, 1, 1000);
        b.store("+10-19").unwrap();
        b.store(" +30-30 ").unwrap();
        assert_eq!(b.list(), "10-19:30-30");
        b.store("-15-30").unwrap();
        assert_eq!(b.list(), "10-14");
        for (input, says) in [
            ("10-19", "is not +START-END"),
            ("", "is not +START-END"),
            ("+10", "is not START-END"),
            ("+a-b", "is not START-END"),
            ("+20-10", "ends before it starts"),
            ("+990-1000", "past the device's last sector (999)"),
        ] {
            let e = b.store(input).unwrap_err();
            assert!(e.contains(says), "{input:?}: {e}");
        }
        assert_eq!(b.list(), "10-14", "a refused write changes nothing");
        assert_eq!(parse_list("1-2:5-9", 1000).unwrap(), [(1, 3), (5, 10)]);
        assert!(parse_list("1-2:", 1000).is_err());
    }
}
