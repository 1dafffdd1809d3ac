//! Where the store's pages live: 2 MiB chunks of anonymous memory, each
//! advised to be one transparent huge page (`MADV_HUGEPAGE`), carved into
//! 4 KiB pages.
//!
//! Why not one allocation per page: a store of 4 KiB heap blocks costs a TLB
//! entry (and, cold, a page walk) per 4 KiB a large read copies, and every
//! block straddles two of the kernel's pages, since the heap puts a header
//! before it. A 1 MiB read from a chunk is one huge-page mapping; the NBD
//! export of a RAM disk copies each reply from here into the socket, and
//! that copy is its connection thread's main cost (BENCHMARKS.md, "The
//! store in huge pages").
//!
//! Memory goes back as null_blk's does on discard: a chunk whose pages are
//! all free again is returned to the kernel whole (`MADV_DONTNEED` of the
//! 2 MiB, so the mapping stays and the next fault can be a huge page
//! again); a chunk with one live page keeps its 2 MiB. Pages are handed out
//! from the most recently listed chunk with room, so a filled device lays
//! consecutive writes out in consecutive memory.
//!
//! Allocation and free take a mutex: they run on a page's first write and
//! when the reclaim pool (reclaim.rs) is full, never per read. Under Miri
//! chunks are small heap blocks (same code, quick to check); under loom,
//! whose cells are not plain bytes, every page is its own box.
//!
//! Relies on: `Page` being exactly 4 KiB of plain bytes (asserted), and on
//! its callers for ownership: a page is freed once, by its owner, after its
//! grace period (reclaim.rs).

#[cfg(loom)]
pub(crate) use boxed::Arena;
#[cfg(not(loom))]
pub(crate) use chunked::Arena;

#[cfg(not(loom))]
mod chunked {
    use std::collections::HashMap;
    use std::ptr::NonNull;

    use super::super::page::{OwnedPage, Page, PAGE_SIZE};

    /// One transparent huge page on x86-64 and 4 KiB-page arm64; small
    /// under Miri, so its tests run a few chunks quickly.
    pub(crate) const CHUNK_BYTES: usize = if cfg!(miri) { 64 << 10 } else { 2 << 20 };
    const PAGE_BYTES: usize = PAGE_SIZE as usize;
    pub(crate) const CHUNK_PAGES: usize = CHUNK_BYTES / PAGE_BYTES;

    const _: () = assert!(std::mem::size_of::<Page>() == PAGE_BYTES && CHUNK_PAGES <= u16::MAX as usize + 1);

    struct Chunk {
        base: NonNull<u8>,
        /// Pages handed out at least once since the chunk was last
        /// returned to the kernel: the first `carved`.
        carved: usize,
        /// Indices (below `carved`) of the pages given back since.
        free: Vec<u16>,
        /// Listed in `Inner::avail`.
        listed: bool,
    }

    impl Chunk {
        fn live(&self) -> usize {
            self.carved - self.free.len()
        }
    }

    struct Inner {
        chunks: Vec<Chunk>,
        /// Chunk by base address (chunks are `CHUNK_BYTES`-aligned).
        by_base: HashMap<usize, usize>,
        /// Chunks that may have room; the last is carved from first.
        avail: Vec<usize>,
    }

    // SAFETY: the chunk pointers are only followed by the holder of a page
    // (who owns those 4 KiB) or by `Drop` (which owns everything); `Inner`
    // itself is only touched under the arena's mutex.
    unsafe impl Send for Inner {}

    pub(crate) struct Arena {
        inner: parking_lot::Mutex<Inner>,
    }

    impl Arena {
        pub(crate) fn new() -> Self {
            Self {
                inner: parking_lot::Mutex::new(Inner {
                    chunks: Vec::new(),
                    by_base: HashMap::new(),
                    avail: Vec::new(),
                }),
            }
        }

        /// A page no one else holds. Fresh pages read as zeros; reused ones
        /// hold old bytes (the store writes every byte before publishing).
        pub(crate) fn alloc(&self) -> OwnedPage {
            let mut g = self.inner.lock();
            loop {
                let Some(&i) = g.avail.last() else {
                    g.grow();
                    continue;
                };
                let c = &mut g.chunks[i];
                let k = if let Some(k) = c.free.pop() {
                    usize::from(k)
                } else if c.carved < CHUNK_PAGES {
                    c.carved += 1;
                    c.carved - 1
                } else {
                    c.listed = false;
                    g.avail.pop();
                    continue;
                };
                // SAFETY: page `k` of a live chunk is inside its mapping,
                // 4 KiB-aligned, and free: no other holder until freed.
                return unsafe { OwnedPage::from_raw(c.base.as_ptr().add(k * PAGE_BYTES).cast()) };
            }
        }

        /// Takes `page` back; a chunk left with no live page is returned to
        /// the kernel.
        ///
        /// # Panics
        /// If `page` did not come from this arena.
        pub(crate) fn free(&self, page: OwnedPage) {
            let addr = page.into_raw() as usize;
            let base = addr & !(CHUNK_BYTES - 1);
            let mut g = self.inner.lock();
            let i = *g.by_base.get(&base).expect("a page freed to the arena it came from");
            let c = &mut g.chunks[i];
            let k = (addr - base) / PAGE_BYTES;
            debug_assert!(k < c.carved && !c.free.contains(&(k as u16)), "page {k} freed twice");
            c.free.push(k as u16);
            if c.live() == 0 {
                release(c.base);
                c.carved = 0;
                c.free.clear();
            }
            if !c.listed {
                c.listed = true;
                g.avail.push(i);
            }
        }

        /// Chunks holding at least one page handed out (tests: memory
        /// really goes back).
        #[cfg(test)]
        pub(crate) fn nr_resident_chunks(&self) -> usize {
            self.inner.lock().chunks.iter().filter(|c| c.carved > 0).count()
        }
    }

    impl Inner {
        fn grow(&mut self) {
            let base = map_chunk();
            let i = self.chunks.len();
            self.chunks.push(Chunk { base, carved: 0, free: Vec::with_capacity(CHUNK_PAGES), listed: true });
            self.by_base.insert(base.as_ptr() as usize, i);
            self.avail.push(i);
        }
    }

    impl Drop for Arena {
        fn drop(&mut self) {
            // `&mut self`: every page handed out is gone with its owners
            // (the table is dropped, the grace periods are over).
            for c in self.inner.get_mut().chunks.drain(..) {
                unmap_chunk(c.base);
            }
        }
    }

    /// A `CHUNK_BYTES`-aligned chunk of zeroed memory; aborts as the global
    /// allocator does when the memory is not there.
    #[cfg(not(miri))]
    fn map_chunk() -> NonNull<u8> {
        let span = 2 * CHUNK_BYTES;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            std::alloc::handle_alloc_error(std::alloc::Layout::from_size_align(CHUNK_BYTES, CHUNK_BYTES).unwrap());
        }
        let head = (p as usize).next_multiple_of(CHUNK_BYTES) - p as usize;
        // SAFETY: the aligned chunk and the slack before and after it are
        // all inside the mapping just made; unmapping the slack touches
        // nothing else. The advice only changes how faults are served (a
        // kernel without THP, or with it off, ignores it).
        unsafe {
            let base = p.cast::<u8>().add(head);
            if head > 0 {
                libc::munmap(p, head);
            }
            libc::munmap(base.add(CHUNK_BYTES).cast(), CHUNK_BYTES - head);
            libc::madvise(base.cast(), CHUNK_BYTES, libc::MADV_HUGEPAGE);
            NonNull::new_unchecked(base)
        }
    }

    #[cfg(not(miri))]
    fn release(base: NonNull<u8>) {
        // SAFETY: the whole chunk is free (no live page, so no reader or
        // writer); its next faults read zeros, which the store overwrites.
        unsafe { libc::madvise(base.as_ptr().cast(), CHUNK_BYTES, libc::MADV_DONTNEED) };
    }

    #[cfg(not(miri))]
    fn unmap_chunk(base: NonNull<u8>) {
        // SAFETY: a chunk this arena mapped, with no page in use.
        unsafe { libc::munmap(base.as_ptr().cast(), CHUNK_BYTES) };
    }

    #[cfg(miri)]
    fn layout() -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(CHUNK_BYTES, CHUNK_BYTES).unwrap()
    }

    #[cfg(miri)]
    fn map_chunk() -> NonNull<u8> {
        // SAFETY: a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout()) };
        NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout()))
    }

    /// Under Miri nothing to give back: the block is freed with the arena.
    #[cfg(miri)]
    fn release(_base: NonNull<u8>) {}

    #[cfg(miri)]
    fn unmap_chunk(base: NonNull<u8>) {
        // SAFETY: allocated by `map_chunk` with this layout, freed once.
        unsafe { std::alloc::dealloc(base.as_ptr(), layout()) };
    }
}

/// Under loom a page is a box of loom cells, allocated one by one; it is
/// freed by dropping its `OwnedPage` (page.rs), since under loom the pool
/// never reuses pages (reclaim.rs).
#[cfg(loom)]
mod boxed {
    use super::super::page::{OwnedPage, Page};

    pub(crate) struct Arena;

    impl Arena {
        pub(crate) fn new() -> Self {
            Self
        }

        pub(crate) fn alloc(&self) -> OwnedPage {
            // SAFETY: a fresh box, owned by the caller from now on.
            unsafe { OwnedPage::from_raw(Box::into_raw(Page::new_zeroed())) }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::chunked::{CHUNK_BYTES, CHUNK_PAGES};
    use super::Arena;
    use crate::driver::null::mem::page::{OwnedPage, PAGE_SIZE};

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
        // All but one page of the middle chunk: it stays.
        let keep = pages.remove(CHUNK_PAGES + 7);
        let first: Vec<usize> = pages.iter().map(addr).collect();
        pages.into_iter().for_each(|p| a.free(p));
        assert_eq!(a.nr_resident_chunks(), 1, "only the chunk with a live page stays");
        // Free pages are reused before any new chunk is mapped.
        let again: Vec<OwnedPage> = (0..3 * CHUNK_PAGES - 1).map(|_| a.alloc()).collect();
        assert!(again.iter().all(|p| first.contains(&addr(p))), "no page from a new chunk");
        assert_eq!(a.nr_resident_chunks(), 3);
        a.free(keep);
        again.into_iter().for_each(|p| a.free(p));
        assert_eq!(a.nr_resident_chunks(), 0);
    }

    #[test]
    #[should_panic(expected = "the arena it came from")]
    fn a_page_from_another_arena_is_refused() {
        let (a, b) = (Arena::new(), Arena::new());
        let p = a.alloc();
        let _keep = b.alloc();
        b.free(p);
    }
}
