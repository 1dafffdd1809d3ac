//! One page of the store and the copies into and out of it.
//!
//! A page is written only while one owner holds it (fresh, from the pool,
//! or reclaimed); once published in the table it is read-only until it is
//! unpublished and every reader that could see it has left (mod.rs). The
//! bytes sit in `sync::UnsafeCell`, so under loom every copy is an access
//! the race detector checks against the publish protocol.

use std::ptr::{self, NonNull};

use mqblk_sync::UnsafeCell;

pub(crate) const PAGE_SIZE: u64 = 4096;
const PAGE_BYTES: usize = PAGE_SIZE as usize;

/// A page's bytes, cache-line aligned so whole-page copies run on aligned
/// lines.
#[repr(align(64))]
pub(crate) struct Page {
    bytes: UnsafeCell<[u8; PAGE_BYTES]>,
}

/// A page no other thread can reach: only its owner reads or writes it.
/// Its memory is the arena's (arena.rs): dropping one without freeing it
/// to the arena leaks it into the arena (its chunk stays resident until
/// the arena goes; under loom, where pages are boxes, dropping frees it).
pub(crate) struct OwnedPage(NonNull<Page>);

// SAFETY: an owned page is plain bytes reachable by its owner alone, so
// ownership may move between threads.
unsafe impl Send for OwnedPage {}

impl OwnedPage {
    /// Gives up ownership: the page is published or retired by pointer.
    pub(crate) fn into_raw(self) -> *mut Page {
        // Not dropped: under loom that would free the box (`Drop` below).
        std::mem::ManuallyDrop::new(self).0.as_ptr()
    }

    /// Takes ownership of a page by pointer.
    ///
    /// # Safety
    /// `p` is an arena's page (under loom, a box) that no one else holds:
    /// never published, or taken out of its slot and past its grace period.
    pub(crate) unsafe fn from_raw(p: *mut Page) -> Self {
        debug_assert!(!p.is_null());
        // SAFETY: the caller passes an arena's page, never null.
        Self(unsafe { NonNull::new_unchecked(p) })
    }
}

impl std::ops::Deref for OwnedPage {
    type Target = Page;
    fn deref(&self) -> &Page {
        // SAFETY: a live page that only the owner (`self`) reaches.
        unsafe { self.0.as_ref() }
    }
}

impl std::ops::DerefMut for OwnedPage {
    fn deref_mut(&mut self) -> &mut Page {
        // SAFETY: as in `deref`, and `&mut self` is the only access.
        unsafe { self.0.as_mut() }
    }
}

#[cfg(loom)]
impl Drop for OwnedPage {
    fn drop(&mut self) {
        // SAFETY: under loom every page is a box (arena.rs) and this owner
        // the only holder.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// What a write puts into its piece of a page.
#[derive(Clone, Copy)]
pub(crate) enum Piece<'a> {
    Bytes(&'a [u8]),
    Zeros(usize),
}

impl Piece<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Piece::Bytes(b) => b.len(),
            Piece::Zeros(n) => *n,
        }
    }
}

impl Page {
    /// A fresh zeroed page in a box of its own (loom's arena, tests; release
    /// builds turn this into a zeroing allocation, no 4 KiB stack copy).
    #[cfg(any(test, loom))]
    pub(crate) fn new_zeroed() -> Box<Page> {
        Box::new(Page { bytes: UnsafeCell::new([0; PAGE_BYTES]) })
    }

    /// Makes this owned page `base` with `piece` at `offset`: the piece is
    /// copied once, only the bytes around it come from `base` (zeros if
    /// `base` is null), so a full-page piece never touches `base`.
    ///
    /// # Safety
    /// `base` is null or points to a published page that stays allocated
    /// and unwritten for the call (the caller is pinned, mod.rs);
    /// `offset + piece.len() <= PAGE_SIZE`.
    pub(crate) unsafe fn compose(&mut self, base: *const Page, offset: usize, piece: Piece<'_>) {
        let end = offset + piece.len();
        debug_assert!(end <= PAGE_BYTES);
        self.bytes.with_mut(|dst| {
            let dst = dst.cast::<u8>();
            // `dst` is this page, which `&mut self` owns alone; every range
            // written is inside it (`end <= PAGE_BYTES`).
            // SAFETY: `base` is null or a live page no one writes (caller),
            // and an owned page is never published: the two never overlap.
            unsafe {
                if base.is_null() {
                    ptr::write_bytes(dst, 0, offset);
                    ptr::write_bytes(dst.add(end), 0, PAGE_BYTES - end);
                } else {
                    (*base).bytes.with(|src| {
                        let src = src.cast::<u8>();
                        ptr::copy_nonoverlapping(src, dst, offset);
                        ptr::copy_nonoverlapping(src.add(end), dst.add(end), PAGE_BYTES - end);
                    });
                }
                match piece {
                    Piece::Bytes(b) => ptr::copy_nonoverlapping(b.as_ptr(), dst.add(offset), b.len()),
                    Piece::Zeros(n) => ptr::write_bytes(dst.add(offset), 0, n),
                }
            }
        });
    }
}

/// Copies `out.len()` bytes at `offset` of a published page into `out`.
///
/// # Safety
/// `page` points to a published page that stays allocated and unwritten
/// for the call (the caller is pinned); `offset + out.len() <= PAGE_SIZE`.
pub(crate) unsafe fn read_shared(page: *const Page, offset: usize, out: &mut [u8]) {
    debug_assert!(offset + out.len() <= PAGE_BYTES);
    // SAFETY: the caller keeps `page` alive and read-only for the call, and
    // the range is inside it; `out` is a distinct buffer the caller lends us
    // mutably, so the copy neither races nor overlaps.
    unsafe {
        (*page).bytes.with(|src| {
            ptr::copy_nonoverlapping(src.cast::<u8>().add(offset), out.as_mut_ptr(), out.len());
        });
    }
}

/// The bytes `offset..offset + len` of a published page, lent.
///
/// # Safety
/// `page` points to a published page that stays allocated and unwritten
/// for `'a` (the caller is pinned for that long); `offset + len <=
/// PAGE_SIZE`.
pub(crate) unsafe fn lend_shared<'a>(page: *const Page, offset: usize, len: usize) -> &'a [u8] {
    debug_assert!(offset + len <= PAGE_BYTES);
    // SAFETY: the caller keeps `page` alive and read-only for 'a, and the
    // range is inside it, so a shared slice of it is valid that long.
    unsafe { (*page).bytes.with(|src| std::slice::from_raw_parts(src.cast::<u8>().add(offset), len)) }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::tests::filled;
    use super::*;

    fn bytes_of(page: &Page) -> Vec<u8> {
        let mut out = vec![0u8; PAGE_BYTES];
        // SAFETY: the test owns `page`; nothing writes it during the copy.
        unsafe { read_shared(page, 0, &mut out) };
        out
    }

    #[test]
    fn compose_keeps_the_base_around_the_piece() {
        let mut base = Page::new_zeroed();
        // SAFETY: a null base; the piece fits the page.
        unsafe { base.compose(ptr::null(), 0, Piece::Bytes(&[7; PAGE_BYTES])) };
        let mut page = Page::new_zeroed();
        // SAFETY: `base` is alive and unwritten during the call.
        unsafe { page.compose(&*base, 100, Piece::Bytes(&[9; 50])) };
        let got = bytes_of(&page);
        assert!(filled(&got[..100], 7));
        assert!(filled(&got[100..150], 9));
        assert!(filled(&got[150..], 7));
        // SAFETY: as above; zeros in the middle of the base.
        unsafe { page.compose(&*base, 4000, Piece::Zeros(96)) };
        let got = bytes_of(&page);
        assert!(filled(&got[..4000], 7) && filled(&got[4000..], 0));
    }
}
