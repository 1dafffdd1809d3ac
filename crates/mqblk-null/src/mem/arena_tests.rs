//! The arena's unit tests: chunk layout, release and reuse, what the
//! kernel says of released and prepared chunks, foreign pages refused.

use super::chunked::{CHUNK_BYTES, CHUNK_PAGES};
use super::Arena;
#[cfg_attr(miri, allow(unused_imports))]
use crate::mem::page::{OwnedPage, Piece, PAGE_SIZE};

fn addr(p: &OwnedPage) -> usize {
    &**p as *const _ as usize
}

#[test]
fn consecutive_pages_are_consecutive_memory_in_aligned_chunks() {
    let a = Arena::new();
    let pages: Vec<OwnedPage> = (0..CHUNK_PAGES + 3).map(|_| a.alloc()).collect();
    for w in pages[..CHUNK_PAGES].windows(2) {
        assert_eq!(addr(&w[1]), addr(&w[0]) + PAGE_SIZE as usize);
    }
    assert_eq!(addr(&pages[0]) % CHUNK_BYTES, 0);
    assert_eq!(addr(&pages[CHUNK_PAGES]) % CHUNK_BYTES, 0, "the next chunk starts aligned");
    assert_eq!(a.nr_resident_chunks(), 2);
    pages.into_iter().for_each(|p| a.free(p));
}

#[test]
fn a_chunk_goes_back_when_its_last_page_does_and_is_carved_again() {
    let a = Arena::new();
    let mut pages: Vec<OwnedPage> = (0..3 * CHUNK_PAGES).map(|_| a.alloc()).collect();
    assert_eq!(a.nr_resident_chunks(), 3);
    // All but one page of the middle chunk: it stays, the first chunk
    // to empty is kept as the spare, the other is released.
    let keep = pages.remove(CHUNK_PAGES + 7);
    let first: Vec<usize> = pages.iter().map(addr).collect();
    pages.into_iter().for_each(|p| a.free(p));
    assert_eq!(a.nr_live(), 1);
    assert_eq!(a.nr_resident_chunks(), 2, "the chunk with a live page and the spare");
    // Free pages are reused before any new chunk is mapped.
    let again: Vec<OwnedPage> = (0..3 * CHUNK_PAGES - 1).map(|_| a.alloc()).collect();
    assert!(again.iter().all(|p| first.contains(&addr(p))), "no page from a new chunk");
    assert_eq!((a.nr_chunks(), a.nr_resident_chunks()), (3, 3));
    a.free(keep);
    again.into_iter().for_each(|p| a.free(p));
    assert_eq!((a.nr_live(), a.nr_resident_chunks()), (0, 1), "only the spare stays");
    a.close();
    assert_eq!(a.nr_resident_chunks(), 0, "a closed arena keeps no spare");
    let p = a.alloc();
    a.free(p);
    assert_eq!(a.nr_resident_chunks(), 0, "nor makes a new one");
}

/// What the kernel says: a released chunk's memory is really gone.
#[cfg(not(miri))]
#[test]
fn a_released_chunk_is_no_longer_resident() {
    let resident_pages = |p: usize| {
        let mut vec = vec![0u8; CHUNK_PAGES];
        // SAFETY: a CHUNK_BYTES-aligned range inside one of the arena's
        // mappings (chunks stay mapped until the arena is dropped), and
        // `vec` has a byte per 4 KiB page of it.
        let r = unsafe { libc::mincore(p as *mut libc::c_void, CHUNK_BYTES, vec.as_mut_ptr()) };
        assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count()
    };
    let a = Arena::new();
    a.close();
    let mut pages: Vec<OwnedPage> = (0..CHUNK_PAGES).map(|_| a.alloc()).collect();
    let base = addr(&pages[0]);
    for p in &mut pages {
        // Write every page, as the store does before publishing one.
        // SAFETY: a null base is never read; the piece is one page.
        unsafe { p.compose(std::ptr::null(), 0, Piece::Bytes(&[1; PAGE_SIZE as usize])) };
    }
    assert_eq!(resident_pages(base), CHUNK_PAGES);
    pages.into_iter().for_each(|p| a.free(p));
    assert_eq!(resident_pages(base), 0);
}

/// The AnonHugePages of the mapping that holds `addr`, in kB.
#[cfg(not(miri))]
fn anon_huge_kb(addr: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = head.split_once('-').filter(|_| !head.ends_with(':')) {
            let (a, b) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16));
            if let (Ok(a), Ok(b)) = (a, b) {
                inside = a <= addr && addr < b;
                continue;
            }
        }
        if inside && line.starts_with("AnonHugePages:") {
            return line.split_whitespace().nth(1).unwrap().parse().unwrap();
        }
    }
    panic!("no mapping holds {addr:#x}");
}

/// The first chunk is mapped by the allocating thread (in 4 KiB pages
/// where THP is `madvise`, as here); the next comes from the preparing
/// thread, faulted in as a huge page (THP not `never`).
#[cfg(not(miri))]
#[test]
fn the_next_chunk_comes_prepared_in_a_huge_page() {
    let a = Arena::new();
    let first: Vec<OwnedPage> = (0..CHUNK_PAGES).map(|_| a.alloc()).collect();
    a.wait_for_prepared_chunk();
    let next = a.alloc();
    assert_eq!(addr(&next) % CHUNK_BYTES, 0);
    let sysfs =
        |f: &str| std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{f}")).unwrap_or_default();
    let (enabled, pmd_bytes) = (sysfs("enabled"), sysfs("hpage_pmd_size"));
    if enabled.contains("[never]") || pmd_bytes.trim() != CHUNK_BYTES.to_string() {
        // The documented fallback: 4 KiB pages, and nothing breaks.
        assert_eq!(anon_huge_kb(addr(&next)), 0, "THP {} with {pmd_bytes} byte huge pages", enabled.trim());
    } else {
        assert!(
            anon_huge_kb(addr(&next)) >= (CHUNK_BYTES >> 10) as u64,
            "the prepared chunk is not a huge page (transparent_hugepage/enabled: {})",
            enabled.trim()
        );
    }
    a.close();
    assert!(a.preparer_stopped(), "closing stops the preparing thread and unmaps its chunk");
    first.into_iter().for_each(|p| a.free(p));
    a.free(next);
}

#[test]
#[should_panic(expected = "the arena it came from")]
fn a_page_from_another_arena_is_refused() {
    let (a, b) = (Arena::new(), Arena::new());
    let p = a.alloc();
    let _keep = b.alloc();
    b.free(p);
}
