//! `blkioq_readv` / `blkioq_writev`: an iovec array becomes one vectored
//! bio over the caller's memory: no bounce buffer, no copy, no allocation.
//! The common array (every iovec a segment on its own) is the bio's
//! segment vector as it is (`BioVec::from_iovecs`: libblkio keeps the
//! iovecs until the completion is returned, blkio(3)), so nothing is
//! built per iovec; other shapes become borrowed buffers (`Buf::borrowed`)
//! in a vector from the queue's pool (segvecs.rs), which the completion
//! gives back.
//!
//! What an iovec array may be is libblkio's contract (blkio(3)): at most
//! `max-segments` iovecs, here `BIO_MAX_VECS`, the most one mqblk bio
//! carries; each iovec's address and length multiples of `buf-alignment`,
//! here the logical block size. So every array the contract allows is one
//! bio the block layer takes (each segment a whole number of logical
//! blocks), and one it does not allow is refused with EINVAL and a message
//! naming the iovec: there is nothing to bounce. Zero-length iovecs add no
//! segment. Contiguous neighbours are gathered into one segment, so an
//! array that is one range is a plain one-buffer bio, as `blkioq_read`'s.
//! The block layer splits the bio by the device's limits and completes it
//! once.
//!
//! Relies on: mqblk's Bio, BioVec, Buf::borrowed; segvecs.rs; iovec_pass.rs.

use std::ffi::{c_int, c_void};

use mqblk::{Bio, BioVec, Buf, IoPrio, Op, ReqFlags, MAX_BIO_BYTES};

use super::iovec_pass::each_a_segment;
use super::{fua, Queue, BLKIO_REQ_FUA};
use crate::props::MAX_SEGMENTS;

impl Queue {
    /// # Safety
    /// `iov` is null or points to `iovcnt` readable iovecs; they and their
    /// buffers stay valid until the completion is returned.
    #[inline(always)]
    pub(super) unsafe fn readv(
        &mut self,
        start: u64,
        iov: *const libc::iovec,
        iovcnt: c_int,
        user_data: *mut c_void,
        flags: u32,
    ) {
        if !self.check_flags(user_data, flags, 0, "blkioq_readv") {
            return;
        }
        // SAFETY: by the caller's contract.
        if let Some((segs, len)) = unsafe { self.scattered(iov, iovcnt) } {
            return self.submit(bio(Op::Read, start, len, segs, ReqFlags::NONE), user_data);
        }
        // SAFETY: by the caller's contract.
        match unsafe { self.iovec_segs(iov, iovcnt, "blkioq_readv") } {
            Ok((segs, len)) => self.submit(bio(Op::Read, start, len, segs, ReqFlags::NONE), user_data),
            Err(msg) => self.refuse(user_data, libc::EINVAL, msg),
        }
    }

    /// # Safety
    /// As `readv`; a write only reads the buffers.
    #[inline(always)]
    pub(super) unsafe fn writev(
        &mut self,
        start: u64,
        iov: *const libc::iovec,
        iovcnt: c_int,
        user_data: *mut c_void,
        flags: u32,
    ) {
        if !self.check_flags(user_data, flags, BLKIO_REQ_FUA, "blkioq_writev")
            || !self.check_writable(user_data, "blkioq_writev")
        {
            return;
        }
        // SAFETY: by the caller's contract.
        if let Some((segs, len)) = unsafe { self.scattered(iov, iovcnt) } {
            return self.submit(bio(Op::Write, start, len, segs, fua(flags)), user_data);
        }
        // SAFETY: by the caller's contract.
        match unsafe { self.iovec_segs(iov, iovcnt, "blkioq_writev") } {
            Ok((segs, len)) => self.submit(bio(Op::Write, start, len, segs, fua(flags)), user_data),
            Err(msg) => self.refuse(user_data, libc::EINVAL, msg),
        }
    }

    /// The common array at once: two iovecs or more, each a segment on its
    /// own, the array itself the bio's segments; and their total length.
    /// None for anything else (`iovec_segs` then looks again). Its own
    /// branch up to the submission, so the compiler knows what kind of
    /// segments the bio carries there and folds the block layer's tests
    /// of their kind away: 21 instructions per readv8 (qd1.c, callgrind)
    /// fewer than with one submission after both kinds of array.
    ///
    /// # Safety
    /// As `readv`.
    #[inline(always)]
    unsafe fn scattered(&self, iov: *const libc::iovec, iovcnt: c_int) -> Option<(BioVec, u64)> {
        if iov.is_null() || !(2..=MAX_SEGMENTS).contains(&iovcnt) {
            return None;
        }
        // SAFETY: non-null, `iovcnt` elements by the caller's contract.
        let iovecs = unsafe { std::slice::from_raw_parts(iov, iovcnt as usize) };
        let total = each_a_segment(iovecs, self.buf_align_mask)?;
        // Checked as `from_iovecs_checked` asks: at most MAX_SEGMENTS
        // (BIO_MAX_VECS), each length positive and a multiple of
        // buf-alignment (the logical block size), `total` their sum.
        // SAFETY: that, and libblkio's contract: the iovecs and their
        // memory stay valid until the completion is returned.
        Some((unsafe { BioVec::from_iovecs_checked(iov, iovecs.len()) }, total))
    }

    /// The segments of an iovec array `scattered` did not take, each a
    /// borrowed buffer over one contiguous run of it (one run: that buffer
    /// in place, no vector), and their total length; or why the array is
    /// refused. Every vector taken from the pool goes back to it unless it
    /// is returned in the segments.
    ///
    /// # Safety
    /// As `readv`.
    #[inline(always)]
    unsafe fn iovec_segs(
        &mut self,
        iov: *const libc::iovec,
        iovcnt: c_int,
        what: &str,
    ) -> Result<(BioVec, u64), String> {
        if iov.is_null() || !(1..=MAX_SEGMENTS).contains(&iovcnt) {
            return Err(bad_iovcnt(iov, iovcnt, what));
        }
        // SAFETY: non-null, `iovcnt` elements by the caller's contract.
        let iovecs = unsafe { std::slice::from_raw_parts(iov, iovcnt as usize) };
        if let [one] = iovecs {
            let (addr, len) = (one.iov_base as usize, one.iov_len);
            if !self.buf_ok(addr, len) {
                return Err(self.bad_iovec(iovecs, 0, what));
            }
            // SAFETY: the caller's memory, valid until the completion.
            return Ok((BioVec::from(unsafe { Buf::borrowed(addr as *mut u8, len) }), len as u64));
        }
        self.other_shapes(iovecs, what)
    }

    /// The segments of an array `scattered` did not take: one with
    /// an iovec to refuse, back-to-back iovecs (one buffer), or zero-length
    /// iovecs and contiguous neighbours (runs gathered). Out of line: the
    /// uncommon shapes.
    #[inline(never)]
    fn other_shapes(&mut self, iovecs: &[libc::iovec], what: &str) -> Result<(BioVec, u64), String> {
        let scan = Scan::of(iovecs);
        if scan.suspect(self.buf_align_mask) {
            if let Some(index) = refused_iovec(iovecs, self.buf_align_mask) {
                return Err(self.bad_iovec(iovecs, index, what));
            }
        }
        if scan.one_range() {
            // SAFETY: one range of the caller's memory (the iovecs back to
            // back), valid until the completion.
            let one = unsafe { Buf::borrowed(iovecs[0].iov_base.cast(), scan.total as usize) };
            return Ok((BioVec::from(one), scan.total));
        }
        self.gathered(iovecs, scan.total, what)
    }

    /// The segments of an array with zero-length iovecs or contiguous
    /// neighbours: its runs gathered.
    fn gathered(&mut self, iovecs: &[libc::iovec], total: u64, what: &str) -> Result<(BioVec, u64), String> {
        let mut segs = self.inflight.seg_vecs.take(iovecs.len());
        // SAFETY: the caller's memory, valid until the completion.
        unsafe { gather_runs(&mut segs, iovecs) };
        if segs.len() > 1 {
            return Ok((BioVec::from(segs), total));
        }
        // One range, or none: a plain bio, the vector unused.
        let one = segs.pop();
        self.inflight.seg_vecs.give_back(segs);
        match one {
            Some(one) => Ok((BioVec::from(one), total)),
            None => Err(format!("{what}: the {} iovecs are all of length 0 (nothing to transfer)", iovecs.len())),
        }
    }

    /// Why `iovecs[index]` is refused (out of line: formatted only then).
    #[cold]
    #[inline(never)]
    fn bad_iovec(&self, iovecs: &[libc::iovec], index: usize, what: &str) -> String {
        let (addr, len) = (iovecs[index].iov_base as usize, iovecs[index].iov_len);
        self.bad_buf(addr, len, &format!("{what}: iovec[{index}]"))
    }
}

/// A read or write bio of `segs`, whose total `len` the caller has summed
/// (so the bio's constructor need not walk them again).
#[inline(always)]
fn bio(op: Op, offset: u64, len: u64, segs: BioVec, flags: ReqFlags) -> Bio {
    debug_assert_eq!(len, segs.len_bytes());
    Bio { op, flags, offset, len, segs, ioprio: IoPrio::default() }
}

#[cold]
#[inline(never)]
fn bad_iovcnt(iov: *const libc::iovec, iovcnt: c_int, what: &str) -> String {
    if iov.is_null() {
        return format!("{what}: iovec is NULL");
    }
    format!("{what}: iovcnt={iovcnt} outside 1..={MAX_SEGMENTS} (max-segments)")
}

/// What one look at an iovec array finds: enough to tell whether an
/// iovec may be refused, and whether the array is one range.
struct Scan {
    /// The lengths' sum (meaningful when no length is over the largest bio).
    total: u64,
    /// Every address and length OR-ed: one alignment test for all.
    bits: usize,
    /// Every length OR-ed: at least the longest.
    lens: usize,
    lowest_addr: usize,
    shortest: usize,
    /// Iovecs that do not continue the one before (the first counts).
    starts: usize,
}

impl Scan {
    fn of(iovecs: &[libc::iovec]) -> Self {
        let mut s = Scan { total: 0, bits: 0, lens: 0, lowest_addr: usize::MAX, shortest: usize::MAX, starts: 0 };
        let mut prev_end = usize::MAX;
        for v in iovecs {
            let (addr, len) = (v.iov_base as usize, v.iov_len);
            s.bits |= addr | len;
            s.lens |= len;
            s.lowest_addr = s.lowest_addr.min(addr);
            s.shortest = s.shortest.min(len);
            s.starts += usize::from(addr != prev_end);
            s.total = s.total.wrapping_add(len as u64);
            prev_end = addr.wrapping_add(len);
        }
        s
    }

    /// Might an iovec be refused (a null address, a length over the
    /// largest bio, an address or length off buf-alignment)? Then
    /// `refused_iovec` looks at each.
    fn suspect(&self, align_mask: usize) -> bool {
        self.lowest_addr == 0 || self.lens as u64 > MAX_BIO_BYTES || self.bits & align_mask != 0
    }

    /// Back to back, none empty?
    fn one_range(&self) -> bool {
        self.shortest != 0 && self.starts == 1
    }
}

/// The first iovec refused, if any: a null address with a length, a
/// length over the largest bio, or an address or length not a multiple of
/// buf-alignment (`align_mask` + 1). A null address of a zero-length iovec
/// is no error (it names no memory).
#[cold]
#[inline(never)]
fn refused_iovec(iovecs: &[libc::iovec], align_mask: usize) -> Option<usize> {
    iovecs.iter().position(|v| {
        let (addr, len) = (v.iov_base as usize, v.iov_len);
        (addr == 0 && len != 0) || len as u64 > MAX_BIO_BYTES || (addr | len) & align_mask != 0
    })
}

/// Fills `segs` (empty, room for every iovec) with the contiguous runs of
/// `iovecs` (checked: `Scan`), each a borrowed buffer; zero-length iovecs
/// add none.
///
/// # Safety
/// Each iovec's memory stays valid until the bio's completion.
unsafe fn gather_runs(segs: &mut Vec<Buf>, iovecs: &[libc::iovec]) {
    debug_assert!(segs.is_empty() && segs.capacity() >= iovecs.len());
    // The run being gathered, [start, end) (empty: none yet).
    let (mut start, mut end) = (0usize, 0usize);
    for v in iovecs.iter().filter(|v| v.iov_len != 0) {
        let (addr, len) = (v.iov_base as usize, v.iov_len);
        if addr == end && end != start {
            end += len;
            continue;
        }
        if end != start {
            // SAFETY: a run of the caller's iovecs, by the caller's contract.
            segs.push(unsafe { Buf::borrowed(start as *mut u8, end - start) });
        }
        (start, end) = (addr, addr + len);
    }
    if end != start {
        // SAFETY: as above.
        segs.push(unsafe { Buf::borrowed(start as *mut u8, end - start) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An array `each_a_segment` turns down only for its addresses in the
    /// upper half is still one bio of its iovecs (`other_shapes`' exact
    /// look), and one with a null address is still refused.
    #[test]
    fn an_array_in_the_upper_half_takes_the_exact_look() {
        mqblk_null::register();
        let device = mqblk::Device::open("null:gb=1,irqmode=0").expect("a null device");
        let mut q = Queue::new(&device, false, false);
        let iov = |addr: usize, len| libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len };
        let high = [iov((1 << 63) + 4096, 4096), iov((1 << 63) + 16384, 8192)];
        // SAFETY: the addresses are never dereferenced: the segments are
        // looked at and given back, not submitted.
        assert!(unsafe { q.scattered(high.as_ptr(), 2) }.is_none());
        // SAFETY: as above.
        let (segs, len) = unsafe { q.iovec_segs(high.as_ptr(), 2, "test") }.expect("taken");
        assert_eq!((len, segs.nr_segs(), segs.iovecs().is_none()), (12288, 2, true));
        let lens: Vec<usize> = segs.iter().map(Buf::len).collect();
        assert_eq!(lens, [4096, 8192]);
        q.inflight.end_segments(segs);
        let null = [iov(4096, 4096), iov(0, 4096)];
        // SAFETY: as above.
        assert!(unsafe { q.scattered(null.as_ptr(), 2) }.is_none());
        // SAFETY: as above.
        let refused = unsafe { q.iovec_segs(null.as_ptr(), 2, "test") }.expect_err("refused");
        assert!(refused.contains("iovec[1]: buffer is NULL"), "{refused}");
    }
}
