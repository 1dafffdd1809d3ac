//! Pages lent past a read. `MemStore::lend` hands its callee slices of the
//! store's pages that stay valid only while the callee runs. A reader that
//! gives them to the kernel by reference instead of copying them
//! (vmsplice into a pipe, then splice into a Unix socket: `mqblk serve`'s
//! zero-copy read replies) leaves the kernel holding the page frames until
//! someone reads them: the client, or whoever the client passed them on
//! to, for a client may itself splice from the socket into a pipe or
//! another socket (a proxy does), and nothing tells the server when that
//! last reference goes.
//!
//! So the rule does not depend on the reader: a page lent past a read is
//! marked in its chunk (arena.rs), and when it is freed, after its grace
//! period like any page, its frame goes to the kernel (`MADV_DONTNEED` of
//! its 4 KiB) before the arena hands the address out again. The kernel
//! frees the old frame only once the last reference is gone, with the
//! bytes of the read in it; the store's next write there faults in a
//! fresh zeroed frame. Published pages are immutable (mod.rs), so until it
//! is freed a lent page is never written either.
//!
//! What it costs: nothing per read but the marking (one lock of the arena
//! per 256 pages); when a lent page is replaced or discarded, its share of
//! a system call (freed lent pages go back 64 at a time, by one
//! process_madvise where the kernel takes it for its own process, 6.13 and
//! later, else one madvise each), a page fault when the address is next
//! written, and the split of its chunk's huge page. Where the kernel
//! refuses to take a frame back (locked memory), the page is never reused
//! and lending stops (`Arena::lends`): reads copy again.
//!
//! Relies on: the arena marking and discarding (arena.rs: `mark_lent`,
//! `free`), reclaim.rs's grace period (a page is freed only after every
//! reader pinned at its retirement has left, so after the marking, which
//! happens while pinned), and published pages being immutable.

use super::page::PAGE_SIZE;
use super::{MemStore, ZEROS};

/// Freed lent pages whose frames go back to the kernel together.
const DISCARD_BATCH: usize = 64;

impl MemStore {
    /// As `lend`, but the pages stay as they are after `f` returns, for as
    /// long as anyone holds them by reference (module doc): `f` may hand
    /// them to the kernel. None, with `f` not called, where lending has
    /// stopped (`lends`).
    pub(crate) fn lend_past(
        &self,
        pos: u64,
        len: u64,
        f: &mut dyn FnMut(&[std::io::IoSlice<'_>]) -> std::io::Result<()>,
    ) -> Option<std::io::Result<()>> {
        let arena = self.reclaim.arena();
        if !arena.lends() {
            return None;
        }
        let (mut refused, mut batches) = (false, 0);
        let result = self.lend(pos, len, &mut |slices| {
            // Marked while pinned, before `f` sees them: the pages are live,
            // and none can be freed before the mark is in (module doc).
            if !arena.mark_lent(slices, ZEROS.0.as_ptr()) {
                refused = true;
                return Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "lending stopped during the read"));
            }
            batches += 1;
            f(slices)
        });
        // Lending stopped between the check and the first mark: nothing
        // reached `f`, so the caller may still copy.
        if refused && batches == 0 {
            return None;
        }
        Some(result)
    }

    /// Whether this store may lend pages past a read (module doc).
    pub(crate) fn lends(&self) -> bool {
        self.reclaim.arena().lends()
    }
}

/// Freed lent pages waiting for their frames to go back (held meanwhile:
/// not free in their chunks), in batches of `DISCARD_BATCH`; two buffers,
/// so batching allocates nothing once made. Lives under the arena's lock.
pub(crate) struct Discards {
    pending: Vec<*mut u8>,
    spare: Vec<*mut u8>,
}

impl Discards {
    pub(crate) fn new() -> Self {
        Self { pending: Vec::with_capacity(DISCARD_BATCH), spare: Vec::with_capacity(DISCARD_BATCH) }
    }

    /// Adds a page; a full batch comes back for the caller to discard
    /// (outside the lock) and `recycle`.
    pub(crate) fn push(&mut self, page: *mut u8) -> Option<Vec<*mut u8>> {
        self.pending.push(page);
        (self.pending.len() == DISCARD_BATCH).then(|| self.take())
    }

    /// Whatever waits, as a batch.
    pub(crate) fn take(&mut self) -> Vec<*mut u8> {
        let next = std::mem::take(&mut self.spare);
        std::mem::replace(&mut self.pending, next)
    }

    /// A discarded batch's buffer, for the next batch.
    pub(crate) fn recycle(&mut self, mut batch: Vec<*mut u8>) {
        batch.clear();
        if self.spare.capacity() < batch.capacity() {
            self.spare = batch;
        }
    }
}

/// Hands the frames of the free pages in `pages` (4 KiB each) to the kernel:
/// whoever holds a frame by reference (a pipe, a socket) keeps its bytes,
/// and the page's next touch faults in a zeroed frame. A page whose frame
/// the kernel kept (locked memory, a page size other than 4 KiB) is set
/// to null.
#[cfg(not(miri))]
pub(crate) fn discard_frames(pages: &mut [*mut u8]) {
    let done = discard_together(pages);
    for page in &mut pages[done..] {
        // SAFETY: a free 4 KiB page of the arena's mapping (no owner reads
        // or writes it); the store writes every byte before publishing.
        if unsafe { libc::madvise(page.cast(), PAGE_SIZE as usize, libc::MADV_DONTNEED) } != 0 {
            *page = std::ptr::null_mut();
        }
    }
}

/// The first pages of `pages` discarded by one process_madvise on our own
/// process (how many; 0 where the kernel does not take MADV_DONTNEED that
/// way). A pidfd per call: one kept would name the parent after a fork.
#[cfg(not(miri))]
fn discard_together(pages: &[*mut u8]) -> usize {
    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; DISCARD_BATCH];
    let n = pages.len().min(DISCARD_BATCH);
    for (v, &page) in iov.iter_mut().zip(&pages[..n]) {
        *v = libc::iovec { iov_base: page.cast(), iov_len: PAGE_SIZE as usize };
    }
    // SAFETY: pidfd_open of our own pid; the fd is closed below.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    if pidfd < 0 {
        return 0;
    }
    // SAFETY: n iovecs over free pages of the arena's mapping (as in
    // `discard_frames`); the pidfd is our own process.
    let bytes = unsafe { libc::syscall(libc::SYS_process_madvise, pidfd, iov.as_ptr(), n, libc::MADV_DONTNEED, 0) };
    // SAFETY: the fd opened above, closed once.
    unsafe { libc::close(pidfd as libc::c_int) };
    // Whole pages only: a partial count stops at the page that failed.
    usize::try_from(bytes).map_or(0, |b| b / PAGE_SIZE as usize)
}

/// `discard_together`, for the tests.
#[cfg(all(test, not(miri)))]
pub(crate) fn discard_together_for_tests(pages: &[*mut u8]) -> usize {
    discard_together(pages)
}

/// Under Miri the pages are overwritten instead, so a reader still holding
/// one (a broken grace period) is a race Miri reports.
#[cfg(miri)]
pub(crate) fn discard_frames(pages: &mut [*mut u8]) {
    for &page in pages.iter() {
        // SAFETY: a free page inside one of the arena's blocks.
        unsafe { std::ptr::write_bytes(page, 0xa5, PAGE_SIZE as usize) };
    }
}
