//! Sparse read replies: which parts of a read go out as NBD_REPLY_TYPE_
//! OFFSET_HOLE chunks (no payload) and which as OFFSET_DATA, from the
//! device's block status.
//!
//! Relies on: `Device::block_status` extents, (bytes, hole) pairs that
//! cover a prefix of the range; what they leave out counts as data.

/// Holes shorter than this go out as data: a chunk header costs more than
/// a few zeros.
pub const MIN_HOLE_BYTES: u64 = 4096;

/// Fills `runs` with (offset within the read, bytes, hole) for a read of
/// `len` bytes whose extents are `extents`: alternating hole and data,
/// adjacent extents of one kind merged, holes under `MIN_HOLE_BYTES`
/// counted as data. Returns whether any hole is left.
pub fn read_runs(extents: &[(u64, bool)], len: u64, runs: &mut Vec<(u64, u64, bool)>) -> bool {
    runs.clear();
    // Adjacent extents of one kind become one run; the sentinel makes
    // whatever the extents leave out a data run.
    let mut pos = 0;
    for &(bytes, hole) in extents.iter().chain(std::iter::once(&(u64::MAX, false))) {
        let bytes = bytes.min(len - pos);
        if bytes == 0 {
            break;
        }
        merge_push(runs, pos, bytes, hole);
        pos += bytes;
    }
    debug_assert_eq!(pos, len, "the runs cover the read");
    // Then short holes become data, merging with their neighbours.
    // (In place: the write index never passes the read index.)
    let mut w = 0;
    for r in 0..runs.len() {
        let (off, bytes, hole) = runs[r];
        let hole = hole && bytes >= MIN_HOLE_BYTES;
        if w > 0 && runs[w - 1].2 == hole {
            runs[w - 1].1 += bytes;
        } else {
            runs[w] = (off, bytes, hole);
            w += 1;
        }
    }
    runs.truncate(w);
    runs.iter().any(|r| r.2)
}

fn merge_push(runs: &mut Vec<(u64, u64, bool)>, off: u64, bytes: u64, hole: bool) {
    match runs.last_mut() {
        Some(last) if last.2 == hole => last.1 += bytes,
        _ => runs.push((off, bytes, hole)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_alternate_and_cover_the_read() {
        let mut runs = Vec::new();
        // data 4k, hole 8k, hole 4k, data 512 (short), rest uncovered.
        let any = read_runs(&[(4096, false), (8192, true), (4096, true), (512, false)], 65536, &mut runs);
        assert!(any);
        assert_eq!(runs, [(0, 4096, false), (4096, 12288, true), (16384, 49152, false)]);
        assert_eq!(runs.iter().map(|r| r.1).sum::<u64>(), 65536);
    }

    #[test]
    fn short_holes_are_data_and_extents_past_the_read_are_cut() {
        let mut runs = Vec::new();
        assert!(!read_runs(&[(4096, false), (512, true), (4096, false)], 8704, &mut runs));
        assert_eq!(runs, [(0, 8704, false)]);
        // Two hole extents that together are long enough stay a hole.
        assert!(read_runs(&[(2048, true), (2048, true), (4096, false)], 8192, &mut runs));
        assert_eq!(runs, [(0, 4096, true), (4096, 4096, false)]);
        assert!(read_runs(&[(1 << 20, true)], 65536, &mut runs));
        assert_eq!(runs, [(0, 65536, true)]);
    }
}
