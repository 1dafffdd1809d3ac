//! `Buf`: an owned, page-aligned I/O buffer (or, for a C caller that
//! keeps its own memory, a borrowed one: `Buf::borrowed`).
//!
//! Buffers move into a submitted I/O and come back in its completion, so the
//! block layer owns a buffer for exactly as long as the I/O is in flight:
//! safe Rust cannot touch or free it meanwhile. Alignment is 4096 bytes so
//! the same buffers work for O_DIRECT drivers.
//!
//! Registered ("fixed") buffers are `Buf`s taken from one region
//! (fixed.rs, [`FixedBufs`]): a fixed `Buf` gives its slot back on drop.
//!
//! Relies on: `std::alloc` (one allocation per buffer, made by the user up
//! front and reused across I/Os; nothing here allocates per I/O).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

mod fixed;
mod kernel;
mod seg_array;
mod vec;

pub use fixed::FixedBufs;
use fixed::Region;
pub use kernel::KernelBuf;
pub(crate) use seg_array::{SegArray, SegArrayRaw};
pub use vec::{BioVec, BIO_MAX_VECS};

/// Alignment of every `Buf` (but a borrowed one): a page, enough for
/// O_DIRECT on any device.
///
/// ```
/// use mqblk::{Buf, BUF_ALIGN};
///
/// assert_eq!(Buf::new(512).as_ptr() as usize % BUF_ALIGN, 0);
/// ```
pub const BUF_ALIGN: usize = 4096;

/// An owned, zero-initialised, page-aligned byte buffer: its own
/// allocation, or a slot of a registered region (`FixedBufs::take`).
///
/// Three words, since buffers travel by value in every bio, request and
/// completion (each move copies them): the pointer, the length, and
/// `owner`, which says who frees the bytes in its low two bits.
///
/// A `Buf` derefs to `[u8]`. Its length may shrink and grow back within
/// the allocation ([`Buf::set_len`]), so one buffer can serve I/Os of
/// different sizes.
///
/// ```
/// use mqblk::Buf;
///
/// let mut buf = Buf::new(8192);
/// assert_eq!((buf.len(), buf.capacity()), (8192, 8192));
/// assert!(buf.iter().all(|&b| b == 0), "zeroed");
/// buf[..4].copy_from_slice(b"mqbk");
///
/// buf.set_len(512); // a 512-byte I/O in the same allocation
/// assert_eq!((buf.len(), buf.capacity()), (512, 8192));
/// assert_eq!(&buf[..4], b"mqbk");
///
/// let copy = Buf::from_slice(&buf[..4]);
/// assert_eq!(&copy[..], b"mqbk");
/// assert!(Buf::new(0).is_empty());
/// ```
// `#[repr(C)]`: a `BioVec` (vec.rs) holds one `Buf` as these same words.
#[repr(C)]
pub struct Buf {
    ptr: NonNull<u8>,
    len: usize,
    /// `capacity << 2 | OWNER_HEAP`: our allocation of `capacity` bytes;
    /// `capacity << 2 | OWNER_BORROWED`: the caller's memory, never freed
    /// here; the address of a registered region (`Arc::into_raw`, whose
    /// reference this buffer holds) `| OWNER_FIXED`: a slot of it, whose
    /// capacity is the region's slot size. `len` may shrink below the
    /// capacity and grow back (`set_len`); the allocation never changes.
    owner: usize,
}

const OWNER_HEAP: usize = 0;
const OWNER_BORROWED: usize = 1;
const OWNER_FIXED: usize = 2;
const OWNER_KIND: usize = 3;

// Three words, and `None` costs nothing (the pointer's niche).
const _: () = assert!(std::mem::size_of::<Option<Buf>>() == 3 * std::mem::size_of::<usize>());

// SAFETY: `Buf` owns its allocation exclusively (like `Box<[u8]>`), so moving
// it to another thread or sharing `&Buf` across threads is sound.
unsafe impl Send for Buf {}
// SAFETY: shared references only allow reads of the bytes.
unsafe impl Sync for Buf {}

impl Buf {
    /// A zeroed buffer of `len` bytes (`len` may be 0).
    pub fn new(len: usize) -> Self {
        if len == 0 {
            return Self { ptr: NonNull::dangling(), len: 0, owner: OWNER_HEAP };
        }
        let layout = Self::layout(len);
        // SAFETY: `layout` has a non-zero size (len > 0).
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else { std::alloc::handle_alloc_error(layout) };
        Self { ptr, len, owner: Self::owned_capacity(len, OWNER_HEAP) }
    }

    /// `capacity` with `kind` in the low bits (a capacity above 2^62 bytes
    /// is no allocation's).
    #[inline(always)]
    fn owned_capacity(capacity: usize, kind: usize) -> usize {
        assert!(capacity <= usize::MAX >> 2, "buffer of {capacity} bytes");
        capacity << 2 | kind
    }

    /// A buffer over `len` bytes of the caller's memory at `ptr`, which it
    /// keeps owning: dropping the `Buf` frees nothing. This is how the C
    /// library (mqblk-blkio) hands the block layer an application's buffer
    /// without a copy or an allocation per I/O. Unlike other buffers it is
    /// aligned only as the caller aligned it (drivers that need more, such
    /// as O_DIRECT files, must be given suitably aligned memory).
    ///
    /// # Safety
    ///
    /// For as long as the returned `Buf` (or its completion) lives, `ptr`
    /// must be valid for reads and writes of `len` bytes, initialised, and
    /// not accessed through any other pointer: the block layer reads it
    /// (writes) or fills it (reads) from whichever thread completes the I/O.
    /// `ptr` may be null only if `len` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use mqblk::Buf;
    ///
    /// let mut memory = vec![0u8; 4096];
    /// // SAFETY: `memory` outlives `buf` and is not touched while it lives.
    /// let mut buf = unsafe { Buf::borrowed(memory.as_mut_ptr(), memory.len()) };
    /// assert!(buf.is_borrowed());
    /// buf[0] = 42;
    /// assert!(buf.end_borrow().is_ok(), "nothing to free");
    /// assert_eq!(memory[0], 42);
    ///
    /// // Any other buffer comes back from `end_borrow`.
    /// assert!(Buf::new(512).end_borrow().is_err());
    /// ```
    #[inline]
    pub unsafe fn borrowed(ptr: *mut u8, len: usize) -> Self {
        let ptr =
            if len == 0 { NonNull::dangling() } else { NonNull::new(ptr).expect("Buf::borrowed of a null pointer") };
        Self { ptr, len, owner: Self::owned_capacity(len, OWNER_BORROWED) }
    }

    /// Does this buffer borrow the caller's memory (`Buf::borrowed`)?
    #[inline]
    pub fn is_borrowed(&self) -> bool {
        self.owner & OWNER_KIND == OWNER_BORROWED
    }

    /// Ends a buffer made by [`Buf::borrowed`] without running its drop
    /// glue (there is nothing to free; on a hot path the glue is a call);
    /// any other buffer comes back as `Err`.
    #[inline]
    pub fn end_borrow(self) -> Result<(), Buf> {
        if self.is_borrowed() {
            std::mem::forget(self);
            return Ok(());
        }
        Err(self)
    }

    /// A slot of a registered region (fixed.rs hands each slot out once).
    pub(crate) fn from_fixed(ptr: NonNull<u8>, len: usize, region: Arc<Region>) -> Self {
        assert!(len <= region.slot_bytes());
        let region = Arc::into_raw(region) as usize;
        debug_assert_eq!(region & OWNER_KIND, 0, "a Region is word-aligned");
        Self { ptr, len, owner: region | OWNER_FIXED }
    }

    /// The region of a fixed buffer.
    fn region(&self) -> Option<&Region> {
        if self.owner & OWNER_KIND != OWNER_FIXED {
            return None;
        }
        // SAFETY: `owner` holds a reference of the region's `Arc` (taken in
        // `from_fixed`, given back only in drop), so it is alive.
        Some(unsafe { &*((self.owner & !OWNER_KIND) as *const Region) })
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> Self {
        let mut buf = Self::new(data.len());
        buf.copy_from_slice(data);
        buf
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, BUF_ALIGN).expect("buffer length overflows a Layout")
    }

    /// The start of the bytes as a raw pointer, taken from the buffer's
    /// own field (so it carries the allocation's provenance, not that of
    /// `&self`): for a split piece's view and for drivers that write
    /// disjoint parts of one buffer from several threads.
    #[inline(always)]
    pub(crate) fn raw_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes (what an I/O of this buffer moves).
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Is the length 0?
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes allocated: the most `set_len` accepts.
    #[inline]
    pub fn capacity(&self) -> usize {
        match self.region() {
            Some(region) => region.slot_bytes(),
            None => self.owner >> 2,
        }
    }

    /// Makes the buffer `len` bytes long, within its allocation: a server
    /// that keeps one buffer of the largest I/O per tag (ublk) shapes it
    /// to each request without allocating. Bytes past the old length keep
    /// what they held (zeroes or earlier data). Panics if `len` exceeds
    /// `capacity()`.
    pub fn set_len(&mut self, len: usize) {
        let capacity = self.capacity();
        assert!(len <= capacity, "Buf::set_len({len}) beyond its capacity of {capacity} bytes");
        self.len = len;
    }
}

impl Drop for Buf {
    #[inline]
    fn drop(&mut self) {
        match self.owner & OWNER_KIND {
            OWNER_BORROWED => {} // the caller's memory: nothing to give back
            OWNER_FIXED => {
                // SAFETY: the reference `from_fixed` took from the Arc, given
                // back once, here.
                let region = unsafe { Arc::from_raw((self.owner & !OWNER_KIND) as *const Region) };
                region.give_back(self.ptr);
            }
            _ => {
                let capacity = self.owner >> 2;
                if capacity != 0 {
                    // SAFETY: allocated in `new` with exactly this layout (its
                    // capacity is the length it was allocated with), not yet
                    // freed.
                    unsafe { dealloc(self.ptr.as_ptr(), Self::layout(capacity)) }
                }
            }
        }
    }
}

impl Deref for Buf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (or dangling with len 0), the
        // bytes are initialised (zeroed at allocation), and we own them.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for Buf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for Buf {
    fn clone(&self) -> Self {
        Self::from_slice(self)
    }
}

impl fmt::Debug for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let buf = Buf::new(8192);
        assert_eq!(buf.as_ptr() as usize % BUF_ALIGN, 0);
        assert!(buf[..] == [0; 8192], "one comparison: Miri interprets a loop byte by byte");
    }

    #[test]
    fn set_len_shrinks_and_grows_within_capacity() {
        let mut buf = Buf::new(8192);
        buf[4096] = 7;
        buf.set_len(512);
        assert_eq!((buf.len(), buf.capacity()), (512, 8192));
        buf.set_len(8192);
        assert_eq!(buf[4096], 7);
    }

    #[test]
    #[should_panic(expected = "beyond its capacity")]
    fn set_len_past_capacity_panics() {
        Buf::new(512).set_len(513);
    }

    #[test]
    fn borrowed_buffer_reads_and_writes_the_callers_memory_and_frees_nothing() {
        let mut backing = vec![1u8; 100];
        // SAFETY: `backing` outlives `buf` and is not touched while it lives.
        let mut buf = unsafe { Buf::borrowed(backing.as_mut_ptr().wrapping_add(3), 64) };
        assert!(buf.is_borrowed());
        assert_eq!((buf.len(), buf.capacity()), (64, 64));
        assert!(buf.iter().all(|&b| b == 1));
        buf[..4].copy_from_slice(&[9, 8, 7, 6]);
        buf.set_len(16);
        let copy = buf.clone();
        assert!(!copy.is_borrowed(), "a clone owns its bytes");
        drop(buf);
        drop(copy);
        assert_eq!(&backing[..8], &[1, 1, 1, 9, 8, 7, 6, 1]);
        assert_eq!(backing.len(), 100);
    }

    #[test]
    fn borrowed_empty_buffer_may_be_null() {
        // SAFETY: length 0: nothing is ever accessed.
        let buf = unsafe { Buf::borrowed(std::ptr::null_mut(), 0) };
        assert!(buf.is_empty() && buf.is_borrowed());
    }

    #[test]
    fn empty_buffer_is_fine() {
        let buf = Buf::new(0);
        assert!(buf.is_empty());
        assert_eq!(&buf[..], &[] as &[u8]);
    }
}
