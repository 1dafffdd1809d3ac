//! `SegArray`: a bio's segments as the block layer's walks read them,
//! (address, length) pairs from its `Buf`s, a caller's iovecs, or a
//! kernel buffer's one segment; and `SegArrayRaw`, the same array kept by a
//! split piece's view without a lifetime.
//!
//! Relies on: vec.rs (`BioVec::seg_array`, `seg_array_raw`), `Buf`.

use super::Buf;

/// A bio's segments as (address, length) pairs: its `Buf`s, or the
/// caller's iovecs.
#[derive(Clone, Copy)]
pub(crate) enum SegArray<'a> {
    Bufs(&'a [Buf]),
    Iovecs(&'a [libc::iovec]),
    /// A kernel buffer of this many bytes: one segment at "address" 0, its
    /// offset into the buffer (kernel.rs).
    Kernel(usize),
}

impl<'a> SegArray<'a> {
    #[inline(always)]
    pub(crate) fn len(self) -> usize {
        match self {
            SegArray::Bufs(b) => b.len(),
            SegArray::Iovecs(v) => v.len(),
            SegArray::Kernel(_) => 1,
        }
    }

    /// Segment `i`'s address (its bytes' own pointer, never one derived
    /// from a reference to its `Buf`) and length.
    #[inline(always)]
    pub(crate) fn span(self, i: usize) -> (usize, usize) {
        match self {
            SegArray::Bufs(b) => (b[i].raw_ptr() as usize, b[i].len()),
            SegArray::Iovecs(v) => (v[i].iov_base as usize, v[i].iov_len),
            SegArray::Kernel(len) => {
                assert_eq!(i, 0, "a kernel buffer is one segment");
                (0, len)
            }
        }
    }

    /// Every segment's (address, length), in order.
    #[inline(always)]
    pub(crate) fn spans(self) -> impl Iterator<Item = (usize, usize)> + 'a {
        (0..self.len()).map(move |i| self.span(i))
    }

    /// The segments from `index` on, the first of them `skip` bytes in.
    pub(crate) fn spans_from(self, index: usize, skip: usize) -> impl Iterator<Item = (usize, usize)> + 'a {
        (index..self.len()).map(move |i| {
            let (addr, len) = self.span(i);
            let skip = if i == index { skip } else { 0 };
            (addr + skip, len - skip)
        })
    }
}

/// A segment array kept by a split piece's view, without a lifetime: its
/// start, whether it holds iovecs or `Buf`s, how many.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SegArrayRaw {
    pub(crate) base: *const u8,
    pub(crate) iovecs: bool,
    pub(crate) nr: usize,
}

impl SegArrayRaw {
    /// The array again.
    ///
    /// # Safety
    /// The array is still where it was when `seg_array_raw` was taken, and
    /// nothing changes it for `'a`.
    #[inline(always)]
    pub(crate) unsafe fn get<'a>(self) -> SegArray<'a> {
        // SAFETY: forwarded contract; `base` and `nr` came from a live array
        // of the kind `iovecs` says.
        unsafe {
            if self.iovecs {
                SegArray::Iovecs(std::slice::from_raw_parts(self.base.cast::<libc::iovec>(), self.nr))
            } else {
                SegArray::Bufs(std::slice::from_raw_parts(self.base.cast::<Buf>(), self.nr))
            }
        }
    }
}
