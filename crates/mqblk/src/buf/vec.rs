//! `BioVec`: a bio's segments (the kernel's `bi_io_vec`), each a [`Buf`]:
//! none, one, or a vector of them, in the three words of an `Option<Buf>`;
//! or a caller's array of iovecs, borrowed as it is (the kernel's
//! `bio_iov_bvec_set`, a bio over its caller's bio_vec array).
//!
//! Why three words and not a few segments inline: a bio's data travels by
//! value from the client into its request slot and back in its completion,
//! and every move copies it. Measured on the perf gate's jobs (callgrind,
//! docs/results/bio-vec-layout.txt), one word more in `Bio` and
//! `Completion` costs 9 to 14 instructions per I/O (1.4-2.5%), four inline
//! segments (ten words more) 32 to 70 (4-13%). So the one-buffer case stays
//! a `Buf` in place, and a vector of segments travels as the `Vec<Buf>`
//! its caller built: a pointer, a count and a capacity, the kernel's
//! bio_vec array allocated apart from the bio. The completion gives the
//! `Vec` back with its capacity ([`BioVec::into_vec`]), so a caller that
//! reuses it allocates nothing per I/O, as the kernel's biovec slabs do.
//!
//! Layout (`#[repr(C)]`, the same words as `Buf`): `ptr` null is "no
//! segments"; `owner`'s two low bits `VEC` make the words a vector
//! (`ptr`: its array of `Buf`s, `len`: their count, `owner >> 3`: the
//! `Vec`'s capacity, bit 2 clear), or, with every bit of `owner` set or
//! every bit but bit 3 (bit 2 set: no vector's), a borrowed array of `len`
//! iovecs at `ptr`, unchecked or checked by its caller; with every bit
//! but bit 4 set, a kernel buffer (kernel.rs: `ptr` the packed
//! `KernelBuf`, `len` its bytes, nothing owned); any other value of the two bits makes the words one `Buf` (its pointer,
//! length and owner, buf/mod.rs). So the three low bits tell a vector of
//! `Buf`s (`VEC`, bit 2 clear) from everything else in one test
//! ([`BioVec::owns_vec`]).
//!
//! The block layer walks segments through `SegArray` (seg_array.rs), which
//! reads either array (or a kernel buffer's one segment) as (address,
//! length) pairs.
//!
//! Relies on: `Buf` being `#[repr(C)]` with `ptr`, `len`, `owner` in this
//! order, its owner kinds using only the values 0-2 of the two low bits.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use super::seg_array::{SegArray, SegArrayRaw};
use super::{Buf, OWNER_KIND};

/// `owner`'s kind bits of a vector of segments (`Buf` uses 0-2).
const OWNER_VEC: usize = 3;
/// A vector's capacity is `owner >> VEC_CAPACITY_SHIFT`: bit 2 stays
/// clear, and set marks an iovec array.
const VEC_CAPACITY_SHIFT: u32 = 3;
/// `owner`'s three low bits: the kind, and bit 2 of kind `VEC`.
const OWNER_LOW3: usize = 7;
/// `owner` of a borrowed iovec array: the kind bits `VEC` and bit 2.
const OWNER_IOVECS: usize = usize::MAX;
/// `owner` of a borrowed iovec array its caller has checked
/// (`from_iovecs_checked`): `OWNER_IOVECS` but bit 3; `owner | 8 ==
/// OWNER_IOVECS` holds for both and for nothing else of kind `VEC` (a
/// vector's bit 2 is clear).
const OWNER_IOVECS_CHECKED: usize = usize::MAX - 8;
const _: () = assert!(OWNER_IOVECS & OWNER_LOW3 == 7 && OWNER_IOVECS_CHECKED & OWNER_LOW3 == 7);
/// `owner` of a kernel buffer (`BioVec::kernel`): the kind bits `VEC`,
/// bit 2 set and bit 4 clear, so neither a vector's nor an iovec array's
/// (`owner_is_iovecs` is false: bit 4 stays clear under `| 8`). `ptr` is
/// the packed `KernelBuf` (never null), `len` its bytes.
const OWNER_KERNEL: usize = usize::MAX - 16;
const _: () = assert!(OWNER_KERNEL & OWNER_LOW3 == 7 && !owner_is_iovecs(OWNER_KERNEL));

/// Is `owner` a borrowed iovec array's (checked or not)?
#[inline(always)]
const fn owner_is_iovecs(owner: usize) -> bool {
    owner | 8 == OWNER_IOVECS
}

/// The most segments one bio may carry (the kernel's BIO_MAX_VECS); a bio
/// with more is refused at submission
/// ([`SubmitError::TooManySegments`](crate::SubmitError::TooManySegments)).
pub const BIO_MAX_VECS: usize = 256;

/// A bio's data segments: none, one [`Buf`], or a vector of them (the
/// kernel's `bi_io_vec`), as a [`Bio`](crate::Bio) carries them and its
/// [`Completion`](crate::Completion) gives them back.
///
/// One buffer is held in place; several travel as the `Vec<Buf>` they
/// came in, by pointer, and come back in it with its capacity: reuse it
/// and a vectored bio allocates nothing per I/O.
///
/// ```
/// use mqblk::{BioVec, Buf};
///
/// let one = BioVec::from(Buf::new(4096));
/// assert_eq!((one.nr_segs(), one.len_bytes(), one.is_vectored()), (1, 4096, false));
/// assert_eq!(one.into_buf().unwrap().len(), 4096);
///
/// let mut segs = Vec::with_capacity(8);
/// segs.push(Buf::new(4096));
/// segs.push(Buf::new(8192));
/// let two = BioVec::from(segs);
/// assert_eq!((two.nr_segs(), two.len_bytes(), two.is_vectored()), (2, 12288, true));
/// assert_eq!(two.as_slice()[1].len(), 8192);
/// let mut back = two.into_vec();
/// assert_eq!(back.capacity(), 8, "the caller's vector, capacity and all");
/// back.clear(); // ready for the next bio
///
/// assert!(BioVec::new().is_empty());
/// assert!(BioVec::new().into_buf().is_err(), "no buffer");
/// ```
#[repr(C)]
pub struct BioVec {
    ptr: *mut u8,
    len: usize,
    owner: usize,
}

// The same three words as `Buf` (and as `Option<Buf>`): see the module header.
const _: () = assert!(std::mem::size_of::<BioVec>() == std::mem::size_of::<Buf>());
const _: () = assert!(std::mem::align_of::<BioVec>() == std::mem::align_of::<Buf>());

// SAFETY: a `BioVec` owns its `Buf`s (one in place, or a `Vec`'s array)
// exclusively, and `Buf` is `Send`.
unsafe impl Send for BioVec {}
// SAFETY: shared references only give `&Buf`s, and `Buf` is `Sync`.
unsafe impl Sync for BioVec {}

impl BioVec {
    /// No segments (the data of a flush, discard or zone op).
    #[inline(always)]
    pub const fn new() -> Self {
        Self { ptr: std::ptr::null_mut(), len: 0, owner: 0 }
    }

    /// The segments of a caller's iovec array, borrowed as they are: no
    /// `Buf` is made and nothing is copied or allocated (the C library's
    /// readv and writev: libblkio keeps the array valid until the
    /// completion). Each iovec is one segment. The completion gives the
    /// borrow back; [`BioVec::iovecs`] shows the array, and [`as_slice`]
    /// has no `Buf`s to show (it panics).
    ///
    /// # Safety
    ///
    /// Until the completion of the bio that carries it is returned (or the
    /// `BioVec` is dropped unsubmitted): `iov` is valid for reads of `nr`
    /// iovecs, which nothing changes, and each iovec's `iov_base` is valid
    /// for reads and writes of `iov_len` bytes, initialised, and not
    /// accessed through any other pointer (as for [`Buf::borrowed`]).
    /// `iov` may be null only if `nr` is 0.
    ///
    /// [`as_slice`]: BioVec::as_slice
    ///
    /// ```
    /// use mqblk::BioVec;
    ///
    /// let mut memory = vec![0u8; 8192];
    /// let base = memory.as_mut_ptr();
    /// // SAFETY: in bounds; `memory` outlives the vector, untouched meanwhile.
    /// let iov = unsafe { [libc::iovec { iov_base: base.cast(), iov_len: 4096 },
    ///                     libc::iovec { iov_base: base.add(4096).cast(), iov_len: 4096 }] };
    /// // SAFETY: `iov` and `memory` outlive `segs`, untouched meanwhile.
    /// let segs = unsafe { BioVec::from_iovecs(iov.as_ptr(), iov.len()) };
    /// assert_eq!((segs.nr_segs(), segs.len_bytes(), segs.is_vectored()), (2, 8192, true));
    /// assert_eq!(segs.iovecs().unwrap().len(), 2);
    /// assert!(segs.into_vec().is_empty(), "nothing was owned");
    /// ```
    #[inline(always)]
    pub unsafe fn from_iovecs(iov: *const libc::iovec, nr: usize) -> Self {
        if nr == 0 {
            return Self::new();
        }
        assert!(!iov.is_null(), "BioVec::from_iovecs of a null array");
        Self { ptr: iov.cast_mut().cast(), len: nr, owner: OWNER_IOVECS }
    }

    /// One segment of `len` bytes in a kernel buffer (`Bio::read_kernel`,
    /// `Bio::write_kernel`): no memory of this process; nothing is owned.
    #[inline]
    pub fn kernel(kbuf: crate::KernelBuf, len: usize) -> Self {
        Self { ptr: kbuf.pack() as *mut u8, len, owner: OWNER_KERNEL }
    }

    /// The kernel buffer, if that is what it holds (`BioVec::kernel`).
    #[inline(always)]
    pub fn kernel_buf(&self) -> Option<crate::KernelBuf> {
        self.is_kernel().then(|| crate::KernelBuf::unpack(self.ptr as usize))
    }

    #[inline(always)]
    pub(crate) fn is_kernel(&self) -> bool {
        !self.ptr.is_null() && self.owner == OWNER_KERNEL
    }

    /// Does it borrow an iovec array (`from_iovecs`)?
    #[inline(always)]
    fn is_iovecs(&self) -> bool {
        !self.ptr.is_null() && owner_is_iovecs(self.owner)
    }

    /// A bio over its caller's iovec array whose lengths the caller has
    /// checked already, as [`from_iovecs`](Self::from_iovecs) otherwise:
    /// submission takes the bio's length as their sum without a pass of
    /// its own over them (the C library's `blkioq_readv` checks its
    /// iovecs once, for its own rules, and these follow from them).
    ///
    /// # Safety
    /// As `from_iovecs`; and at most [`BIO_MAX_VECS`] iovecs, each length
    /// a positive multiple of the logical block size of the queue the bio
    /// is submitted to, their sum the bio's `len`. (Debug builds check.)
    #[inline(always)]
    pub unsafe fn from_iovecs_checked(iov: *const libc::iovec, nr: usize) -> Self {
        // SAFETY: the caller's contract includes `from_iovecs`'.
        let mut segs = unsafe { Self::from_iovecs(iov, nr) };
        if !segs.ptr.is_null() {
            segs.owner = OWNER_IOVECS_CHECKED;
        }
        segs
    }

    /// Does it borrow an iovec array its caller has checked
    /// (`from_iovecs_checked`)?
    #[inline(always)]
    pub(crate) fn iovecs_checked(&self) -> bool {
        !self.ptr.is_null() && self.owner == OWNER_IOVECS_CHECKED
    }

    /// The borrowed iovec array, if that is what it holds.
    #[inline(always)]
    pub fn iovecs(&self) -> Option<&[libc::iovec]> {
        // SAFETY: `from_iovecs`' contract: `len` iovecs at `ptr`, valid and
        // unchanged while this lives.
        self.is_iovecs().then(|| unsafe { std::slice::from_raw_parts(self.ptr.cast::<libc::iovec>(), self.len) })
    }

    /// The segments as (address, length) pairs, whichever array holds them:
    /// what the block layer's walks read.
    #[inline(always)]
    pub(crate) fn seg_array(&self) -> SegArray<'_> {
        if self.is_kernel() {
            return SegArray::Kernel(self.len);
        }
        match self.iovecs() {
            Some(iov) => SegArray::Iovecs(iov),
            None => SegArray::Bufs(self.as_slice()),
        }
    }

    /// Does it hold a `Vec<Buf>` of its own (rather than nothing, one
    /// `Buf` in place, or a borrowed iovec array)? One test of the owner
    /// word's three low bits (the module header), for a completion's end
    /// of its segments (the C library's): the kind test and then the
    /// iovecs' one, which the compiler merged into seven instructions
    /// without a branch, cost each one-buffer completion 4 more (callgrind,
    /// qd1.c read32k).
    ///
    /// ```
    /// use mqblk::{BioVec, Buf};
    ///
    /// assert!(BioVec::from(vec![Buf::new(512), Buf::new(512)]).owns_vec());
    /// assert!(!BioVec::from(Buf::new(512)).owns_vec());
    /// assert!(!BioVec::new().owns_vec());
    /// ```
    #[inline(always)]
    pub fn owns_vec(&self) -> bool {
        !self.ptr.is_null() && self.owner & OWNER_LOW3 == OWNER_VEC
    }

    /// Does it hold a vector (rather than nothing or one `Buf` in place)?
    #[inline(always)]
    pub fn is_vectored(&self) -> bool {
        !self.ptr.is_null() && self.owner & OWNER_KIND == OWNER_VEC
    }

    /// The byte length of its one `Buf` held in place, if that is what it
    /// holds: the bio checks' fast path (limits.rs), a load and two tests.
    #[inline(always)]
    pub(crate) fn one_len(&self) -> Option<usize> {
        if self.ptr.is_null() || self.owner & OWNER_KIND == OWNER_VEC {
            return None;
        }
        Some(self.len)
    }

    /// No segment at all (also a vector of none)?
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.nr_segs() == 0
    }

    /// How many segments.
    #[inline(always)]
    pub fn nr_segs(&self) -> usize {
        if self.ptr.is_null() {
            0
        } else if self.owner & OWNER_KIND == OWNER_VEC && self.owner != OWNER_KERNEL {
            self.len
        } else {
            1
        }
    }

    /// The segments in order. Panics for a borrowed iovec array, which has
    /// no `Buf`s ([`BioVec::iovecs`] shows it).
    #[inline(always)]
    pub fn as_slice(&self) -> &[Buf] {
        if self.ptr.is_null() {
            return &[];
        }
        assert!(!owner_is_iovecs(self.owner), "BioVec::as_slice of a borrowed iovec array (see BioVec::iovecs)");
        assert_ne!(self.owner, OWNER_KERNEL, "BioVec::as_slice of a kernel buffer (see BioVec::kernel_buf)");
        if self.owner & OWNER_KIND != OWNER_VEC {
            // SAFETY: these words are one `Buf` (module header), and `Buf` is
            // `#[repr(C)]` with the same fields: `self` is a valid `Buf`.
            return std::slice::from_ref(unsafe { &*(self as *const BioVec).cast::<Buf>() });
        }
        // SAFETY: a vector's words are a `Vec<Buf>`'s array and length.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<Buf>(), self.len) }
    }

    /// The segments in order, to change (a segment's bytes, or its length
    /// within its capacity).
    #[inline(always)]
    pub fn as_mut_slice(&mut self) -> &mut [Buf] {
        if self.ptr.is_null() {
            return &mut [];
        }
        assert!(!owner_is_iovecs(self.owner), "BioVec::as_mut_slice of a borrowed iovec array");
        assert_ne!(self.owner, OWNER_KERNEL, "BioVec::as_mut_slice of a kernel buffer");
        if self.owner & OWNER_KIND != OWNER_VEC {
            // SAFETY: as in `as_slice`, exclusively (`&mut self`).
            return std::slice::from_mut(unsafe { &mut *(self as *mut BioVec).cast::<Buf>() });
        }
        // SAFETY: as in `as_slice`, exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<Buf>(), self.len) }
    }

    /// The segment array as a split piece's view keeps it (it stays where
    /// it is while the bio is in flight: in place in a bio slot, a `Vec`'s
    /// heap array, or the caller's iovecs). None if empty.
    #[inline(always)]
    pub(crate) fn seg_array_raw(&mut self) -> Option<SegArrayRaw> {
        if self.is_empty() {
            return None;
        }
        if self.is_iovecs() {
            return Some(SegArrayRaw { base: self.ptr.cast_const(), iovecs: true, nr: self.len });
        }
        // Submission refuses a kernel buffer a request cannot hold whole.
        assert!(!self.is_kernel(), "a bio over a kernel buffer is never split");
        let segs = self.as_mut_slice();
        Some(SegArrayRaw { base: segs.as_mut_ptr().cast_const().cast(), iovecs: false, nr: segs.len() })
    }

    /// Iterates over the segments (panics for a borrowed iovec array, as
    /// [`BioVec::as_slice`] does).
    pub fn iter(&self) -> std::slice::Iter<'_, Buf> {
        self.as_slice().iter()
    }

    /// Total bytes of all segments (for a bio: its length).
    pub fn len_bytes(&self) -> u64 {
        if let Some(len) = self.one_len() {
            return len as u64;
        }
        self.seg_array().spans().map(|(_, len)| len as u64).sum()
    }

    /// Takes the segments out, leaving none.
    #[inline(always)]
    pub fn take(&mut self) -> BioVec {
        // One store on the hot path, as `Option::take` of a `Buf`.
        // SAFETY: the words move out once; nulling `ptr` makes what stays
        // behind "no segments" (its other words never read): no double owner.
        let out = unsafe { std::ptr::read(self) };
        self.ptr = std::ptr::null_mut();
        out
    }

    /// The one buffer, if there is exactly one segment (held in place, or
    /// the only element of a vector, whose array is then freed); otherwise
    /// the segments come back unchanged.
    ///
    /// ```
    /// use mqblk::{BioVec, Buf};
    ///
    /// let one = BioVec::from(vec![Buf::new(512)]);
    /// assert_eq!(one.into_buf().unwrap().len(), 512);
    /// let two = BioVec::from(vec![Buf::new(512), Buf::new(512)]);
    /// assert_eq!(two.into_buf().unwrap_err().nr_segs(), 2);
    /// ```
    #[inline(always)]
    pub fn into_buf(self) -> Result<Buf, BioVec> {
        let this = ManuallyDrop::new(self);
        let (ptr, len, owner) = (this.ptr, this.len, this.owner);
        if !ptr.is_null() && owner & OWNER_KIND != OWNER_VEC {
            // SAFETY: the words are one `Buf` (module header), and `this`
            // is not dropped: ownership moves to the result exactly once.
            return Ok(unsafe { Buf { ptr: NonNull::new_unchecked(ptr), len, owner } });
        }
        // SAFETY: the words of `this`, which is not used again.
        unsafe { Self::vec_into_buf(ptr, len, owner) }
    }

    /// `into_buf` of no segments or of a vector (by the words, see `drop`).
    ///
    /// # Safety
    /// The words are a live `BioVec`'s that is not used again.
    #[inline(never)]
    unsafe fn vec_into_buf(ptr: *mut u8, len: usize, owner: usize) -> Result<Buf, BioVec> {
        let this = BioVec { ptr, len, owner };
        if this.is_vectored() && !owner_is_iovecs(owner) && owner != OWNER_KERNEL && len == 1 {
            let mut v = this.into_vec();
            return Ok(v.pop().expect("one element"));
        }
        Err(this)
    }

    /// The segments as a `Vec`: the very vector a vectored bio was built
    /// from (its capacity too); one buffer in place becomes a new vector
    /// of one (an allocation); a borrowed iovec array, an empty one (it
    /// owned nothing).
    pub fn into_vec(self) -> Vec<Buf> {
        if self.is_iovecs() || self.is_kernel() {
            std::mem::forget(self);
            return Vec::new();
        }
        if self.is_vectored() {
            let this = ManuallyDrop::new(self);
            // SAFETY: a vector's words are exactly what `from(Vec<Buf>)`
            // took apart (pointer, length, capacity), not yet given back.
            return unsafe { Vec::from_raw_parts(this.ptr.cast::<Buf>(), this.len, this.owner >> VEC_CAPACITY_SHIFT) };
        }
        match self.into_buf() {
            Ok(buf) => vec![buf],
            Err(_) => Vec::new(),
        }
    }
}

impl Default for BioVec {
    fn default() -> Self {
        Self::new()
    }
}

impl From<Buf> for BioVec {
    /// One segment, held in place (no allocation).
    #[inline(always)]
    fn from(buf: Buf) -> Self {
        let buf = ManuallyDrop::new(buf);
        debug_assert_ne!(buf.owner & OWNER_KIND, OWNER_VEC, "Buf's owner kinds are 0-2");
        Self { ptr: buf.ptr.as_ptr(), len: buf.len, owner: buf.owner }
    }
}

impl From<Option<Buf>> for BioVec {
    /// One segment, or none.
    #[inline(always)]
    fn from(buf: Option<Buf>) -> Self {
        buf.map_or(BioVec::new(), BioVec::from)
    }
}

impl From<Vec<Buf>> for BioVec {
    /// The vector's segments, in order; the vector itself travels with
    /// them and comes back from [`BioVec::into_vec`].
    fn from(segs: Vec<Buf>) -> Self {
        let mut segs = ManuallyDrop::new(segs);
        let capacity = segs.capacity();
        assert!(capacity <= usize::MAX >> VEC_CAPACITY_SHIFT, "a segment vector of capacity {capacity}");
        // A `Vec`'s pointer is never null (dangling when it has no capacity).
        let ptr = NonNull::new(segs.as_mut_ptr()).expect("a Vec's pointer is not null");
        Self { ptr: ptr.as_ptr().cast(), len: segs.len(), owner: capacity << VEC_CAPACITY_SHIFT | OWNER_VEC }
    }
}

impl Drop for BioVec {
    /// Inlined as far as the null test: a bio whose segments moved on
    /// (the hot path) drops with one test and no call. The rest takes the
    /// words by value, so no caller has to keep a `BioVec` in memory for
    /// it (a `&mut self` call would).
    #[inline(always)]
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: the words of a live `BioVec`, dropped once, here.
            unsafe { drop_words(self.ptr, self.len, self.owner) }
        }
    }
}

/// Drops what a `BioVec`'s words own (not "no segments").
///
/// # Safety
/// The words are a live `BioVec`'s with `ptr` non-null, and that
/// `BioVec` is not used again.
#[inline(never)]
unsafe fn drop_words(ptr: *mut u8, len: usize, owner: usize) {
    if owner_is_iovecs(owner) || owner == OWNER_KERNEL {
        return; // borrowed, or the kernel's: nothing is ours
    }
    if owner & OWNER_KIND == OWNER_VEC {
        // SAFETY: a vector's words are what `from(Vec<Buf>)` took apart.
        drop(unsafe { Vec::from_raw_parts(ptr.cast::<Buf>(), len, owner >> VEC_CAPACITY_SHIFT) });
    } else {
        let one = BioVec { ptr, len, owner };
        // SAFETY: the words are one `Buf` (module header), dropped once.
        drop(unsafe { std::ptr::read((&one as *const BioVec).cast::<Buf>()) });
        std::mem::forget(one);
    }
}

impl fmt::Debug for BioVec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_iovecs() {
            return write!(f, "BioVec({} borrowed iovecs, {} bytes)", self.len, self.len_bytes());
        }
        if let Some(kbuf) = self.kernel_buf() {
            return write!(f, "BioVec(kernel buffer {kbuf:?}, {} bytes)", self.len);
        }
        match (self.is_vectored(), self.nr_segs()) {
            (false, 0) => write!(f, "BioVec(none)"),
            (false, _) => write!(f, "BioVec({} bytes)", self.len),
            (true, n) => write!(f, "BioVec({n} segments, {} bytes)", self.len_bytes()),
        }
    }
}

#[cfg(test)]
#[path = "vec_tests.rs"]
mod tests;
