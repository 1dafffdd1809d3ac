//! Extents of a range by fixed units (pages, chunks): the helper a
//! driver's `BlockStatus` answers with, and the bound on an answer.
//!
//! Relies on: nothing but std.

/// Most extents one block-status answer carries (a prefix of the range).
pub const MAX_EXTENTS: usize = 256;

/// Extents of `[offset, offset + len)` by fixed `unit`s (pages), each
/// unit a hole or not; neighbours of the same kind merge, and at most
/// [`MAX_EXTENTS`] are appended (a prefix of the range). A helper for
/// [`BlockStatus::block_status`](super::BlockStatus::block_status).
///
/// ```
/// use mqblk::driver::extents_by;
///
/// // Pages 1 and 2 of 4 KiB hold data; the range starts mid-page.
/// let mut out = Vec::new();
/// extents_by(2048, 4 * 4096, 4096, &mut out, |pos| !(4096..3 * 4096).contains(&pos));
/// assert_eq!(out, [(2048, true), (8192, false), (6144, true)]);
/// ```
pub fn extents_by(offset: u64, len: u64, unit: u64, out: &mut Vec<(u64, bool)>, is_hole: impl Fn(u64) -> bool) {
    let end = offset + len;
    let mut pos = offset;
    while pos < end {
        let n = (unit - pos % unit).min(end - pos);
        let hole = is_hole(pos);
        let full = out.len() == MAX_EXTENTS;
        match out.last_mut() {
            Some((bytes, h)) if *h == hole => *bytes += n,
            _ if full => return,
            _ => out.push((n, hole)),
        }
        pos += n;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn extents_merge_neighbours_and_stop_at_the_cap() {
        let mut out = Vec::new();
        // Pages 1 and 2 hold data; the range starts mid-page.
        extents_by(2048, 4 * 4096, 4096, &mut out, |pos| !(4096..3 * 4096).contains(&pos));
        assert_eq!(out, vec![(2048, true), (8192, false), (6144, true)]);
        out.clear();
        extents_by(0, 4096 * 1000, 4096, &mut out, |pos| (pos / 4096) % 2 == 0);
        assert_eq!(out.len(), MAX_EXTENTS, "a prefix of the range, no more extents than the cap");
        assert!(out.iter().all(|e| e.0 == 4096));
    }
}
