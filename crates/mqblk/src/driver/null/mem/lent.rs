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
//! per 256 pages); a page fault and a system call when a lent page is
//! replaced or discarded, and the split of its chunk's huge page. Where
//! the kernel refuses to take a frame back (locked memory), the page is
//! never reused and lending stops (`Arena::lends`): reads copy again.
//!
//! Relies on: the arena marking and discarding (arena.rs: `mark_lent`,
//! `free`), reclaim.rs's grace period (a page is freed only after every
//! reader pinned at its retirement has left, so after the marking, which
//! happens while pinned), and published pages being immutable.

use super::{MemStore, ZEROS};

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
