//! loom models of the store's atomic protocols: copy-on-write publishing
//! (racing writers and a reader, page bytes checked by loom's cell
//! tracking), leaf installation, and page counting.
//!
//! What is modelled: everything that is ours. The slots and top entries
//! are `sync::AtomicPtr` (loom's here), so loom explores the publishing
//! swap and compare_exchange, the lost-race retry, the leaf install by
//! compare_exchange and the page counter, and the page bytes live in
//! `sync::UnsafeCell`, so a reader copying a page that was not published
//! with Release (or a writer touching a published page) is reported as a
//! causality violation.
//!
//! What is not: the grace period. crossbeam-epoch's atomics are std's,
//! invisible to loom, so under
//! loom pinning does nothing, a retired page is kept until the store is
//! dropped and a lost race's page is dropped (reclaim.rs): a page is never
//! reused inside a model. Reuse is covered by the epoch's own guarantee
//! (crossbeam-epoch, itself tested) plus the contract of `retire` (the
//! page is unreachable from the table before it is deferred), which the
//! models do check: every model reads through the table only.

use super::*;
use mqblk_sync::Arc;

const PAGE: usize = PAGE_SIZE as usize;
/// The partial writer's piece: bytes [1024, 2048) of page 0.
const PIECE_AT: usize = 1024;
const PIECE_LEN: usize = 1024;
const OLD: u8 = 0x11;
const FULL: u8 = 0xaa;
const PART: u8 = 0xbb;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// A page as (value outside the piece, value inside it), or None if either
/// part is not uniform (a torn page).
fn shape(page: &[u8]) -> Option<(u8, u8)> {
    let uniform = |s: &[u8]| s.iter().all(|&b| b == s[0]).then_some(s[0]);
    let (head, rest) = page.split_at(PIECE_AT);
    let (piece, tail) = rest.split_at(PIECE_LEN);
    let outside = uniform(head).filter(|&v| uniform(tail) == Some(v))?;
    Some((outside, uniform(piece)?))
}

fn read_page(m: &MemStore) -> Option<(u8, u8)> {
    let mut page = vec![0u8; PAGE];
    m.read(0, &mut page);
    shape(&page)
}

#[test]
fn loom_mem_racing_full_and_partial_writes_publish_whole_pages() {
    model(|| {
        let m = Arc::new(MemStore::new(2 * PAGE_SIZE));
        m.write(0, &[OLD; PAGE]);
        let full = {
            let m = m.clone();
            loom::thread::spawn(move || m.write(0, &[FULL; PAGE]))
        };
        let part = {
            let m = m.clone();
            loom::thread::spawn(move || m.write(PIECE_AT as u64, &[PART; PIECE_LEN]))
        };
        // Old, either write alone, or both in either order: never a mix.
        let states = [(OLD, OLD), (FULL, FULL), (OLD, PART), (FULL, PART)];
        let seen = read_page(&m);
        assert!(seen.is_some_and(|s| states.contains(&s)), "reader saw {seen:?}");
        full.join().unwrap();
        part.join().unwrap();
        // Serial orders: full then partial, or partial then full.
        let last = read_page(&m);
        assert!(last == Some((FULL, PART)) || last == Some((FULL, FULL)), "final page {last:?}");
        assert_eq!(m.nr_pages(), 1);
    });
}

#[test]
fn loom_mem_discard_racing_a_partial_write_counts_pages_exactly() {
    model(|| {
        let m = Arc::new(MemStore::new(2 * PAGE_SIZE));
        m.write(0, &[OLD; PAGE]);
        let discard = {
            let m = m.clone();
            loom::thread::spawn(move || m.zero(0, PAGE_SIZE))
        };
        m.write(PIECE_AT as u64, &[PART; PIECE_LEN]);
        discard.join().unwrap();
        // Discard last: no page. Partial write last: zeros around its piece.
        let last = read_page(&m);
        match m.is_present(0) {
            false => assert_eq!(last, Some((0, 0))),
            true => assert_eq!(last, Some((0, PART))),
        }
        assert_eq!(m.nr_pages(), usize::from(m.is_present(0)));
    });
}

#[test]
fn loom_mem_leaf_install_race_installs_one_leaf() {
    model(|| {
        // Two pages, one leaf under loom: both writers find it missing.
        let m = Arc::new(MemStore::new(2 * PAGE_SIZE));
        let writers: Vec<_> = (0..2u8)
            .map(|i| {
                let m = m.clone();
                loom::thread::spawn(move || m.write(u64::from(i) * PAGE_SIZE, &[i + 1; 16]))
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(m.table.nr_leaves(), 1);
        assert_eq!(m.nr_pages(), 2);
        for i in 0..2u8 {
            let mut got = [0u8; 16];
            m.read(u64::from(i) * PAGE_SIZE, &mut got);
            assert_eq!(got, [i + 1; 16], "neither write lost to the losing leaf");
        }
    });
}

#[test]
fn loom_mem_discard_racing_the_first_write_never_counts_below_zero() {
    model(|| {
        // The discard may empty the slot before the writer has counted the
        // page it put there: the counter wraps for a moment, and
        // `nr_pages` must read that as 0, never as a huge count.
        let m = Arc::new(MemStore::new(2 * PAGE_SIZE));
        // The leaf, made before the race; no page left in it.
        m.write(0, &[OLD; 16]);
        m.zero(0, PAGE_SIZE);
        assert_eq!(m.nr_pages(), 0);
        let write = {
            let m = m.clone();
            loom::thread::spawn(move || m.write(0, &[FULL; PAGE]))
        };
        let discard = {
            let m = m.clone();
            loom::thread::spawn(move || m.zero(0, PAGE_SIZE))
        };
        let seen = m.nr_pages();
        assert!(seen <= 1, "nr_pages {seen} during the race");
        write.join().unwrap();
        discard.join().unwrap();
        assert_eq!(m.nr_pages(), usize::from(m.is_present(0)));
        let mut page = vec![0u8; PAGE];
        m.read(0, &mut page);
        let want = if m.is_present(0) { FULL } else { 0 };
        assert!(page.iter().all(|&b| b == want), "page 0 is the write or zeros");
    });
}
