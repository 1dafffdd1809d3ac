//! Where the store's pages live: 2 MiB chunks of anonymous memory, carved
//! into 4 KiB pages. Chunks are made huge pages where that costs the I/O
//! path nothing: every chunk after the first is mapped and faulted in as
//! one transparent huge page by a thread of the arena's own (prepare.rs);
//! a chunk the writer maps itself, when that thread is behind, and a chunk
//! once released stay in 4 KiB pages.
//!
//! Why not one allocation per page: a store of 4 KiB heap blocks costs a TLB
//! entry (and, cold, a page walk) per 4 KiB a large read copies, and every
//! block straddles two of the kernel's pages, since the heap puts a header
//! before it. A 1 MiB read from a huge chunk is one TLB entry; the NBD
//! export of a RAM disk copies each reply from here into the socket, and
//! that copy is its connection thread's main cost (BENCHMARKS.md, "The
//! store in huge pages").
//!
//! Memory goes back as null_blk's does on discard, by whole chunks: a
//! chunk whose pages are all free again is returned to the kernel
//! (`MADV_DONTNEED` of the 2 MiB; the mapping stays, and is advised
//! `MADV_NOHUGEPAGE` so that its next faults, in the I/O path, never wait
//! for a compaction), except one empty chunk kept as a spare; a
//! chunk with one live page keeps its 2 MiB. The arena's free pages are
//! the store's only pool (reclaim.rs), so nothing else keeps a chunk
//! resident. Free pages are handed out before untouched ones, and
//! untouched ones in order, so a filled device lays consecutive writes out
//! in consecutive memory. Released chunks are reused before new ones are
//! mapped, so after much discarding more of the store is in 4 KiB pages.
//! When the store is dropped it gives every page back and closes the
//! arena, which then keeps no spare and stops its preparing thread.
//!
//! Each chunk is a mapping of its own: a store with more than about
//! 120 GiB written would meet `vm.max_map_count` (65,530 mappings by
//! default), and a chunk that cannot be mapped aborts the process as the
//! global allocator does when memory runs out.
//!
//! Allocation and free take a mutex: they run on a page's first write,
//! on an overwrite (the new page) and after a retired page's grace period,
//! never per read. Under Miri chunks are small heap blocks (same code,
//! quick to check) and a released chunk is overwritten, so a reader still
//! holding one of its pages is a race Miri reports; under loom, whose
//! cells are not plain bytes, every page is its own box.
//!
//! Relies on: `Page` being exactly 4 KiB of plain bytes (asserted), and on
//! its callers for ownership: a page is freed once, by its owner, after its
//! grace period (reclaim.rs).

#[cfg(loom)]
pub(crate) use boxed::Arena;
#[cfg(not(any(loom, miri)))]
pub(crate) use chunked::map_chunk;
#[cfg(not(loom))]
pub(crate) use chunked::Arena;

#[cfg(not(loom))]
pub(super) mod chunked {
    use std::collections::HashMap;
    use std::ptr::NonNull;

    use super::super::lent::{discard_frames, Discards};
    use super::super::page::{OwnedPage, Page, PAGE_SIZE};

    /// One transparent huge page on x86-64 and 4 KiB-page arm64; small
    /// under Miri, so its tests run a few chunks quickly.
    pub(crate) const CHUNK_BYTES: usize = if cfg!(miri) { 64 << 10 } else { 2 << 20 };
    const PAGE_BYTES: usize = PAGE_SIZE as usize;
    pub(crate) const CHUNK_PAGES: usize = CHUNK_BYTES / PAGE_BYTES;
    const WORDS: usize = CHUNK_PAGES.div_ceil(64);

    const _: () = assert!(std::mem::size_of::<Page>() == PAGE_BYTES);

    struct Chunk {
        base: NonNull<u8>,
        /// Pages handed out at least once since the chunk was last
        /// released: the first `carved`, the rest never touched.
        carved: usize,
        /// Bit k: page k is held by an owner (always checked, so a page
        /// freed twice or never handed out panics instead of getting two
        /// owners).
        held: [u64; WORDS],
        /// Bits set in `held`.
        live: usize,
        /// Listed in `Inner::avail`.
        listed: bool,
        /// Advised `MADV_HUGEPAGE` (a prepared chunk, until released).
        huge: bool,
        /// Bit k: page k was lent past a read (lent.rs) since it was last
        /// handed out: its frame goes to the kernel before it is reused.
        lent: [u64; WORDS],
    }

    impl Chunk {
        /// A page of this chunk for a new owner: one given back first,
        /// else the next never touched.
        fn take(&mut self) -> Option<usize> {
            let k = if self.live < self.carved {
                // Some page below `carved` is free, so the lowest clear bit is.
                (0..WORDS).find_map(|w| {
                    (self.held[w] != u64::MAX).then(|| w * 64 + (!self.held[w]).trailing_zeros() as usize)
                })?
            } else if self.carved < CHUNK_PAGES {
                self.carved += 1;
                self.carved - 1
            } else {
                return None;
            };
            debug_assert!(k < self.carved && self.held[k / 64] & (1 << (k % 64)) == 0);
            self.held[k / 64] |= 1 << (k % 64);
            self.live += 1;
            Some(k)
        }

        fn give(&mut self, k: usize) {
            let bit = 1u64 << (k % 64);
            assert!(
                k < self.carved && self.held[k / 64] & bit != 0,
                "page {k} of a chunk freed twice or never handed out"
            );
            self.held[k / 64] &= !bit;
            self.live -= 1;
        }
    }

    struct Inner {
        chunks: Vec<Chunk>,
        /// Chunk by base address (chunks are `CHUNK_BYTES`-aligned).
        by_base: HashMap<usize, usize>,
        /// Chunks that may have room; the last is taken from first, and a
        /// chunk gets a page back is listed last, so freed pages are reused
        /// before untouched ones are carved.
        avail: Vec<usize>,
        /// An empty chunk kept resident (its memory not released), so
        /// pages freed and taken again around a chunk's last page do not
        /// fault 2 MiB in each time.
        spare: Option<usize>,
        /// The store is gone: an emptied chunk is released at once.
        closed: bool,
        /// A lent page's frame could not be handed to the kernel (memory
        /// locked, or a kernel page size other than 4 KiB): such pages are
        /// never reused, and nothing is lent any more (lent.rs).
        discard_failed: bool,
        /// Lent pages kept out of use for that reason.
        stranded: usize,
        /// Freed lent pages waiting for their frames to go back, a batch
        /// at a time (lent.rs).
        discards: Discards,
    }

    // SAFETY: the chunk pointers are only followed by the holder of a page
    // (who owns those 4 KiB) or by `Drop` (which owns everything); `Inner`
    // itself is only touched under the arena's mutex.
    unsafe impl Send for Inner {}

    pub(crate) struct Arena {
        inner: parking_lot::Mutex<Inner>,
        /// The kernel's pages are 4 KiB, as the store's: one can be handed
        /// back alone (lent.rs).
        small_pages: bool,
        /// Makes the next chunk ready off the I/O path (prepare.rs); not
        /// under Miri, whose chunks are heap blocks.
        #[cfg(not(miri))]
        preparer: super::super::prepare::Preparer,
    }

    impl Arena {
        pub(crate) fn new() -> Self {
            let inner = Inner {
                chunks: Vec::new(),
                by_base: HashMap::new(),
                avail: Vec::new(),
                spare: None,
                closed: false,
                discard_failed: false,
                stranded: 0,
                discards: Discards::new(),
            };
            // SAFETY: sysconf has no preconditions.
            let page_bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            Self {
                inner: parking_lot::Mutex::new(inner),
                small_pages: page_bytes == PAGE_BYTES as libc::c_long,
                #[cfg(not(miri))]
                preparer: super::super::prepare::Preparer::new(),
            }
        }

        /// A page no one else holds. Fresh pages read as zeros; reused ones
        /// hold old bytes (the store writes every byte before publishing).
        pub(crate) fn alloc(&self) -> OwnedPage {
            let mut g = self.inner.lock();
            let g = &mut *g;
            loop {
                let Some(&i) = g.avail.last() else {
                    let (base, huge) = self.next_chunk();
                    g.grow(base, huge);
                    continue;
                };
                let c = &mut g.chunks[i];
                let Some(k) = c.take() else {
                    c.listed = false;
                    g.avail.pop();
                    continue;
                };
                if g.spare == Some(i) {
                    g.spare = None;
                }
                // SAFETY: page `k` of a live chunk is inside its mapping,
                // 4 KiB-aligned, and was free: its holder is the caller alone.
                return unsafe { OwnedPage::from_raw(c.base.as_ptr().add(k * PAGE_BYTES).cast()) };
            }
        }

        /// The prepared chunk (true: advised huge), or one mapped here in
        /// 4 KiB pages when the preparing thread has none ready
        /// (prepare.rs says why not huge).
        #[cfg(not(miri))]
        fn next_chunk(&self) -> (NonNull<u8>, bool) {
            if let Some(base) = self.preparer.take() {
                return (base, true);
            }
            let base = map_chunk(false).unwrap_or_else(|| {
                std::alloc::handle_alloc_error(std::alloc::Layout::from_size_align(CHUNK_BYTES, CHUNK_BYTES).unwrap())
            });
            (base, false)
        }

        #[cfg(miri)]
        fn next_chunk(&self) -> (NonNull<u8>, bool) {
            (map_chunk(), false)
        }

        /// Takes `page` back. A chunk left with no live page is released to
        /// the kernel, unless it becomes the one spare the arena keeps.
        ///
        /// # Panics
        /// If `page` did not come from this arena, or is already free.
        ///
        /// A page lent past a read (lent.rs) is reused only once its frame
        /// went back to the kernel: it waits for a batch of them, whose
        /// frames go back outside the lock.
        pub(crate) fn free(&self, page: OwnedPage) {
            self.free_all(std::iter::once(page));
        }

        /// `free` of every page, under one lock (a retired batch:
        /// reclaim.rs), let go only while a batch of lent pages' frames
        /// goes back.
        pub(crate) fn free_all(&self, pages: impl Iterator<Item = OwnedPage>) {
            let mut g = self.inner.lock();
            for page in pages {
                let (i, k) = g.locate(page.into_raw() as usize);
                let c = &mut g.chunks[i];
                if c.lent[k / 64] & (1 << (k % 64)) == 0 {
                    g.give(i, k);
                    continue;
                }
                assert!(c.held[k / 64] & (1 << (k % 64)) != 0, "page {k} of a chunk freed twice");
                c.lent[k / 64] &= !(1 << (k % 64));
                // SAFETY: page k is inside the chunk's mapping.
                let page = unsafe { c.base.as_ptr().add(k * PAGE_BYTES) };
                if let Some(batch) = g.discards.push(page) {
                    parking_lot::MutexGuard::unlocked(&mut g, || self.discard(batch));
                }
            }
        }

        /// Hands the frames of a batch of freed lent pages to the kernel,
        /// then takes the pages back (those whose frame the kernel kept
        /// are never reused, and lending stops).
        fn discard(&self, mut batch: Vec<*mut u8>) {
            discard_frames(&mut batch);
            let mut g = self.inner.lock();
            for &page in &batch {
                if page.is_null() {
                    g.discard_failed = true;
                    g.stranded += 1;
                } else {
                    let (i, k) = g.locate(page as usize);
                    g.give(i, k);
                }
            }
            g.discards.recycle(batch);
        }

        /// Hands back the frames of the freed lent pages waiting for a full
        /// batch (the store closing; tests).
        pub(crate) fn flush_discards(&self) {
            let batch = self.inner.lock().discards.take();
            self.discard(batch);
        }

        /// Marks the pages holding `slices` as lent past a read (lent.rs):
        /// false, marking nothing, where lending has stopped. The caller
        /// holds the pages (pinned), so they are live.
        pub(crate) fn mark_lent(&self, slices: &[std::io::IoSlice<'_>], zeros: *const u8) -> bool {
            let mut g = self.inner.lock();
            let g = &mut *g;
            if g.discard_failed {
                return false;
            }
            let mut chunk = (usize::MAX, 0);
            for s in slices.iter().filter(|s| !std::ptr::eq(s.as_ptr(), zeros)) {
                let addr = s.as_ptr() as usize;
                let base = addr & !(CHUNK_BYTES - 1);
                if chunk.0 != base {
                    chunk = (base, *g.by_base.get(&base).expect("a lent page of this arena"));
                }
                let c = &mut g.chunks[chunk.1];
                let k = (addr - base) / PAGE_BYTES;
                debug_assert!(c.held[k / 64] & (1 << (k % 64)) != 0, "a lent page is live");
                c.lent[k / 64] |= 1 << (k % 64);
            }
            true
        }

        /// Whether pages may be lent past a read: the kernel's pages are
        /// 4 KiB (so a store page is one frame to hand back) and handing
        /// one back has not failed.
        pub(crate) fn lends(&self) -> bool {
            self.small_pages && !self.inner.lock().discard_failed
        }

        /// Lent pages never reused since their frame could not be handed
        /// back (tests).
        #[cfg(test)]
        pub(crate) fn nr_stranded(&self) -> usize {
            self.inner.lock().stranded
        }

        /// The store is gone: releases the spare, and from now on every
        /// chunk as soon as its last page comes back (pages still waiting
        /// out a grace period keep only their own chunks).
        pub(crate) fn close(&self) {
            // The preparing thread ends now, not when the last retirement
            // lets the arena go, and its ready chunk goes with it.
            #[cfg(not(miri))]
            if let Some(base) = self.preparer.stop() {
                unmap_chunk(base);
            }
            self.flush_discards();
            let mut g = self.inner.lock();
            let g = &mut *g;
            g.closed = true;
            if let Some(i) = g.spare.take() {
                release(&mut g.chunks[i]);
            }
        }

        /// Pages held by owners (published, awaiting their grace period,
        /// or being filled).
        pub(crate) fn nr_live(&self) -> usize {
            self.inner.lock().chunks.iter().map(|c| c.live).sum()
        }

        /// Chunks whose memory is in use (at least one page handed out
        /// since the chunk was last released; the spare among them).
        pub(crate) fn nr_resident_chunks(&self) -> usize {
            self.inner.lock().chunks.iter().filter(|c| c.carved > 0).count()
        }

        /// Blocks until the preparing thread has a chunk ready (tests).
        #[cfg(all(test, not(miri)))]
        pub(crate) fn wait_for_prepared_chunk(&self) {
            self.preparer.wait_ready();
        }

        /// The preparing thread has ended and holds no chunk (tests).
        #[cfg(all(test, not(miri)))]
        pub(crate) fn preparer_stopped(&self) -> bool {
            self.preparer.is_stopped()
        }

        /// Chunks ever mapped (address space; released ones included).
        pub(crate) fn nr_chunks(&self) -> usize {
            self.inner.lock().chunks.len()
        }
    }

    impl Inner {
        /// The chunk and page index of the page at `addr`.
        fn locate(&self, addr: usize) -> (usize, usize) {
            let base = addr & !(CHUNK_BYTES - 1);
            let i = *self.by_base.get(&base).expect("a page freed to the arena it came from");
            (i, (addr - base) / PAGE_BYTES)
        }

        /// Page `k` of chunk `i` is free again. A chunk left with no live
        /// page is released, unless it becomes the spare.
        fn give(&mut self, i: usize, k: usize) {
            let c = &mut self.chunks[i];
            c.give(k);
            if c.live == 0 {
                if self.closed || self.spare.is_some() {
                    release(c);
                } else {
                    self.spare = Some(i);
                }
            }
            if !c.listed {
                c.listed = true;
                self.avail.push(i);
            }
        }

        fn grow(&mut self, base: NonNull<u8>, huge: bool) {
            let i = self.chunks.len();
            self.chunks.push(Chunk {
                base,
                carved: 0,
                held: [0; WORDS],
                live: 0,
                listed: true,
                huge,
                lent: [0; WORDS],
            });
            self.by_base.insert(base.as_ptr() as usize, i);
            self.avail.push(i);
        }
    }

    /// Returns an empty chunk's memory to the kernel; its pages are carved
    /// afresh after.
    fn release(c: &mut Chunk) {
        debug_assert_eq!(c.live, 0);
        debug_assert!(c.lent.iter().all(|&w| w == 0), "a lent page gets a fresh frame when freed");
        discard_chunk(c.base, c.carved, c.huge);
        c.carved = 0;
        c.huge = false;
    }

    impl Drop for Arena {
        fn drop(&mut self) {
            // The preparing thread first, and the chunk it had ready.
            #[cfg(not(miri))]
            if let Some(base) = self.preparer.stop() {
                unmap_chunk(base);
            }
            // `&mut self`: every page handed out is gone with its owners
            // (the store is dropped, the grace periods are over).
            for c in self.inner.get_mut().chunks.drain(..) {
                unmap_chunk(c.base);
            }
        }
    }

    /// A `CHUNK_BYTES`-aligned chunk of zeroed memory, advised to be one
    /// huge page if `huge`; None when the memory is not there.
    #[cfg(not(miri))]
    pub(crate) fn map_chunk(huge: bool) -> Option<NonNull<u8>> {
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
            return None;
        }
        let head = (p as usize).next_multiple_of(CHUNK_BYTES) - p as usize;
        // The advice only changes how faults are served (a kernel without
        // THP, or with it off, ignores it).
        // SAFETY: the aligned chunk and the slack around it are inside the
        // mapping just made; unmapping the slack touches nothing else.
        unsafe {
            let base = p.cast::<u8>().add(head);
            if head > 0 {
                libc::munmap(p, head);
            }
            libc::munmap(base.add(CHUNK_BYTES).cast(), CHUNK_BYTES - head);
            if huge {
                libc::madvise(base.cast(), CHUNK_BYTES, libc::MADV_HUGEPAGE);
            }
            NonNull::new(base)
        }
    }

    /// Gives the chunk's memory back; a chunk advised huge is advised
    /// small first, so its next faults (in the I/O path) never compact.
    #[cfg(not(miri))]
    fn discard_chunk(base: NonNull<u8>, _carved: usize, huge: bool) {
        // SAFETY: no page of the chunk is held (no reader or writer); its
        // next faults read zeros, which the store overwrites (the advice
        // only changes how faults are served).
        unsafe {
            if huge {
                libc::madvise(base.as_ptr().cast(), CHUNK_BYTES, libc::MADV_NOHUGEPAGE);
            }
            libc::madvise(base.as_ptr().cast(), CHUNK_BYTES, libc::MADV_DONTNEED);
        }
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

    /// Under Miri the released pages are overwritten instead, so a reader
    /// still holding one (a broken grace period) is a data race Miri reports.
    #[cfg(miri)]
    fn discard_chunk(base: NonNull<u8>, carved: usize, _huge: bool) {
        // SAFETY: the first `carved` pages are inside the block and no
        // one holds any of them.
        unsafe { std::ptr::write_bytes(base.as_ptr(), 0xa5, carved * PAGE_BYTES) };
    }

    #[cfg(miri)]
    fn unmap_chunk(base: NonNull<u8>) {
        // SAFETY: allocated by `map_chunk` with this layout, freed once.
        unsafe { std::alloc::dealloc(base.as_ptr(), layout()) };
    }
}

/// Under loom a page is a box of loom cells, allocated and freed one by
/// one (dropping an `OwnedPage` frees it there: page.rs).
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

        pub(crate) fn free(&self, page: OwnedPage) {
            // Dropping an owned page frees its box under loom (page.rs).
            drop(page);
        }

        pub(crate) fn close(&self) {}
    }
}

#[cfg(all(test, not(loom)))]
#[path = "arena_tests.rs"]
mod tests;
