//! The store gives memory back as null_blk does (null_free_sector, from
//! null_handle_discard and null_zone_reset): a discard or a zone reset
//! (both `MemStore::zero`) has freed its pages to the arena when it
//! returns, emptied chunks go back to the kernel, the next fill reuses
//! them, and large overwrites free their old pages as fast as they retire
//! them. Counts of the arena's pages and chunks, read straight after the
//! calls: the tests never flush or wait. Each runs alone in its process
//! under nextest, the project's runner, so no other test's pin holds the
//! epoch back (the store's own waiting is bounded: reclaim.rs).

use super::arena::chunked::CHUNK_PAGES;
use super::reclaim::FLUSH_PAGES;
use super::tests::filled;
use super::*;

const PAGE: usize = PAGE_SIZE as usize;
/// A zone: 8 chunks (16 MiB), 2 under Miri (32 pages).
const ZONE_PAGES: usize = if cfg!(miri) { 2 * CHUNK_PAGES } else { 8 * CHUNK_PAGES };
/// Pages a write carries: 1 MiB (4 under Miri).
const WRITE_PAGES: usize = if cfg!(miri) { 4 } else { 256 };
/// Cycles and passes of the loops below: 10, 3 under Miri (the first
/// cycle maps, the second and third must reuse; each cycle cost Miri a
/// second of the suite).
const CYCLES: u8 = if cfg!(miri) { 3 } else { 10 };

/// Fills pages `[first, first + n)` with `byte`, a `WRITE_PAGES` write at
/// a time.
fn fill(m: &MemStore, first: usize, n: usize, byte: u8) {
    let data = vec![byte; WRITE_PAGES * PAGE];
    for page in (first..first + n).step_by(WRITE_PAGES) {
        m.write((page * PAGE) as u64, &data[..WRITE_PAGES.min(first + n - page) * PAGE]);
    }
}

/// Zeroes `n` pages from `first`, as a zone reset or a discard does.
fn zero_pages(m: &MemStore, first: usize, n: usize) {
    m.zero((first * PAGE) as u64, (n * PAGE) as u64);
}

/// The arena holds exactly the published pages: nothing waits for a grace
/// period.
fn assert_held_is_data(m: &MemStore, what: &str) {
    let held = m.reclaim.arena().nr_live();
    assert_eq!((held, m.reclaim.nr_waiting()), (m.nr_pages(), 0), "{what}: pages held, batched pages waiting");
}

#[test]
fn a_discard_has_freed_its_pages_when_it_returns() {
    let m = MemStore::new((2 * ZONE_PAGES * PAGE) as u64);
    fill(&m, 0, ZONE_PAGES, 7);
    let arena = m.reclaim.arena();
    assert_eq!((m.nr_pages(), arena.nr_live()), (ZONE_PAGES, ZONE_PAGES));
    zero_pages(&m, 0, ZONE_PAGES);
    assert_eq!(m.nr_pages(), 0);
    assert_held_is_data(&m, "after the discard");
    assert!(arena.nr_resident_chunks() <= 1, "{} chunks resident, only the spare may stay", arena.nr_resident_chunks());
    let mut out = vec![1u8; ZONE_PAGES * PAGE];
    m.read(0, &mut out);
    assert!(filled(&out, 0), "a freed range reads as zeros");
}

/// Two zones filled one after the other: resetting the first frees its
/// pages and gives its chunks back (one kept as the spare); the second's
/// data stays.
#[test]
fn a_zone_reset_frees_that_zone_only() {
    let m = MemStore::new((2 * ZONE_PAGES * PAGE) as u64);
    fill(&m, 0, ZONE_PAGES, 1);
    fill(&m, ZONE_PAGES, ZONE_PAGES, 2);
    let arena = m.reclaim.arena();
    let zone_chunks = ZONE_PAGES / CHUNK_PAGES;
    zero_pages(&m, 0, ZONE_PAGES);
    assert_eq!(m.nr_pages(), ZONE_PAGES);
    assert_held_is_data(&m, "after resetting zone 0");
    assert!(
        arena.nr_resident_chunks() <= zone_chunks + 1,
        "{} chunks resident for one zone of {zone_chunks} chunks and the spare",
        arena.nr_resident_chunks()
    );
    let mut out = vec![0u8; ZONE_PAGES * PAGE];
    m.read((ZONE_PAGES * PAGE) as u64, &mut out);
    assert!(filled(&out, 2), "zone 1 keeps its data");
    m.read(0, &mut out);
    assert!(filled(&out, 0), "zone 0 reads as zeros");
}

/// `CYCLES` cycles of filling two zones and zeroing them (zone by zone, as a
/// reset all does): after each the arena holds no page and at most the
/// spare chunk, and no cycle maps memory the first did not.
#[test]
fn fill_and_reset_cycles_reuse_the_same_memory() {
    let m = MemStore::new((2 * ZONE_PAGES * PAGE) as u64);
    let arena = m.reclaim.arena();
    let mut mapped = None;
    for cycle in 0..CYCLES {
        fill(&m, 0, 2 * ZONE_PAGES, cycle);
        assert_eq!(m.nr_pages(), 2 * ZONE_PAGES);
        zero_pages(&m, 0, ZONE_PAGES);
        zero_pages(&m, ZONE_PAGES, ZONE_PAGES);
        assert_held_is_data(&m, &format!("cycle {cycle}"));
        assert!(arena.nr_resident_chunks() <= 1, "cycle {cycle}: {} chunks resident", arena.nr_resident_chunks());
        let now = arena.nr_chunks();
        assert_eq!(*mapped.get_or_insert(now), now, "cycle {cycle} mapped new chunks");
    }
}

/// Overwriting a zone's worth of pages over and over, a `WRITE_PAGES`
/// write at a time: the pages each write replaces come back within a few
/// flushes (a thread flushes every `FLUSH_PAGES` retired pages), so the
/// arena never holds more than the data and that much again.
#[test]
fn large_overwrites_free_pages_as_fast_as_they_retire_them() {
    let m = MemStore::new((ZONE_PAGES * PAGE) as u64);
    let arena = m.reclaim.arena();
    for pass in 0..CYCLES {
        fill(&m, 0, ZONE_PAGES, pass);
        let held = arena.nr_live();
        assert!(
            held <= ZONE_PAGES + 3 * FLUSH_PAGES,
            "pass {pass}: {held} pages held for {ZONE_PAGES} of data (flushes every {FLUSH_PAGES})"
        );
    }
    assert_eq!(m.nr_pages(), ZONE_PAGES);
}

/// A call retiring several pages gathers them in batches whose boxes come
/// back for reuse: once warm, multi-page overwrites allocate only
/// crossbeam's queue node of each flush (one per `FLUSH_PAGES` retired
/// pages), not one per 64 pages as deferring them one by one did.
#[cfg(not(miri))]
#[test]
fn multi_page_overwrites_allocate_only_a_node_per_flush() {
    let m = MemStore::new((ZONE_PAGES * PAGE) as u64);
    for pass in 0..4 {
        fill(&m, 0, ZONE_PAGES, pass);
    }
    let writes = 4 * ZONE_PAGES / WRITE_PAGES;
    let allocations = super::tests::counting::allocations_in(|| {
        for pass in 0..4 {
            fill(&m, 0, ZONE_PAGES, 10 + pass);
        }
    });
    let flushes = writes * WRITE_PAGES / FLUSH_PAGES;
    assert!(
        allocations <= flushes + 4,
        "{allocations} allocations for {writes} writes of {WRITE_PAGES} pages ({flushes} flushes)"
    );
}
