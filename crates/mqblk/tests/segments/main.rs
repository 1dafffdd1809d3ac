//! Vectored bios against the segment limits, as block/blk-merge.c applies
//! them: a bio of several segments is one request unless a limit cuts it
//! (`bio_split_rw_at`: max_sectors, max_segments physical segments, a gap
//! at a virt boundary), contiguous memory counts as one physical segment
//! up to max_segment_size and never across seg_boundary_mask
//! (`get_max_segment_size`), and a merge never passes max_segments or
//! makes a gap (`ll_back_merge_fn`, `bio_will_gap`). A checking driver
//! verifies every request it is given against the limits and keeps the
//! data (segments/checker.rs), and a byte model says what the device
//! must hold (segments/props.rs: any bios under any limits).
//!
//! Runs under Miri (both borrow models, scripts/miri.sh): the segment
//! vector's ownership, a split piece's view of its parent's segments, a
//! merged bio's segments and the completion that gives the vector back;
//! the tests of a limit's rule alone run natively only.
#![cfg(not(loom))]

use mqblk::{Bio, BioVec, Buf, Device, QueueLimits, SubmitError, BIO_MAX_VECS};

mod checker;
mod props;

use checker::{device, limits, spaced, writev, Arena, Seen, State, DEVICE_BYTES};

#[test]
fn a_vectored_bio_is_one_request_within_the_limits() {
    let (dev, state) = device(limits(|_| {}));
    let mut arena = Arena::new(256 << 10);
    let seen = writev(&dev, &state, &mut arena, 8192, &spaced(8, 4096, 8192));
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    assert_eq!((s.pos, s.len, s.nr_bios, s.nr_segments, s.phys.len()), (8192, 32768, 1, 8, 8));
}

#[test]
fn max_segments_splits_a_bio_of_separate_segments() {
    let (dev, state) = device(limits(|l| l.max_segments = 4));
    let mut arena = Arena::new(256 << 10);
    let seen = writev(&dev, &state, &mut arena, 0, &spaced(10, 4096, 8192));
    let shape: Vec<(u64, u64, usize)> = seen.iter().map(|s| (s.pos, s.len, s.phys.len())).collect();
    assert_eq!(shape, [(0, 16384, 4), (16384, 16384, 4), (32768, 8192, 2)]);
}

#[test]
#[cfg_attr(miri, ignore = "the limits' rules, no unsafe code of their own: natively only")]
fn contiguous_segments_count_as_one_physical_segment() {
    let (dev, state) = device(limits(|l| l.max_segments = 1));
    let mut arena = Arena::new(256 << 10);
    // Ten 4 KiB segments back to back: 40 KiB of contiguous memory.
    let seen = writev(&dev, &state, &mut arena, 0, &spaced(10, 4096, 4096));
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].nr_segments, seen[0].phys.clone()), (10, vec![40960]));
}

#[test]
#[cfg_attr(miri, ignore = "the limits' rules, no unsafe code of their own: natively only")]
fn max_segment_size_makes_a_long_run_several_segments() {
    let (dev, state) = device(limits(|l| {
        l.max_segments = 2;
        l.max_segment_size = 65536;
    }));
    let mut arena = Arena::new(512 << 10);
    // 256 KiB contiguous in two segments: four 64 KiB physical segments,
    // two to a request.
    let seen = writev(&dev, &state, &mut arena, 0, &[(0, 128 << 10), (128 << 10, 128 << 10)]);
    let shape: Vec<(u64, Vec<usize>)> = seen.iter().map(|s| (s.len, s.phys.clone())).collect();
    assert_eq!(shape, [(131072, vec![65536, 65536]), (131072, vec![65536, 65536])]);
}

#[test]
#[cfg_attr(miri, ignore = "the limits' rules, no unsafe code of their own: natively only")]
fn the_segment_boundary_cuts_a_physical_segment() {
    let (dev, state) = device(limits(|l| {
        l.seg_boundary_mask = 0xffff;
        l.max_segment_size = u32::MAX;
    }));
    let mut arena = Arena::new(256 << 10);
    // 8 KiB from 4 KiB below a 64 KiB line: two physical segments.
    let seen = writev(&dev, &state, &mut arena, 0, &[(60 << 10, 8192)]);
    assert_eq!(seen[0].phys, [4096, 4096]);
}

#[test]
#[cfg_attr(miri, ignore = "the limits' rules, no unsafe code of their own: natively only")]
fn a_gap_at_the_virt_boundary_splits_the_bio() {
    let (dev, state) = device(limits(|l| {
        l.virt_boundary_mask = 4095;
        l.max_segment_size = u32::MAX;
    }));
    let mut arena = Arena::new(256 << 10);
    // 4 KiB, then 1 KiB ending off the boundary, then 4 KiB elsewhere: a
    // gap before the third.
    let seen = writev(&dev, &state, &mut arena, 0, &[(0, 4096), (16384, 1024), (32768, 4096)]);
    let shape: Vec<(u64, u64, u32)> = seen.iter().map(|s| (s.pos, s.len, s.nr_segments)).collect();
    assert_eq!(shape, [(0, 5120, 2), (5120, 4096, 1)]);
    // Starting off the boundary is a gap too.
    let seen = writev(&dev, &state, &mut arena, 0, &[(0, 4096), (16384 + 512, 4096)]);
    assert_eq!(seen.len(), 2);
}

#[test]
fn max_sectors_cuts_inside_a_segment() {
    let (dev, state) = device(limits(|l| l.max_sectors = 16));
    let mut arena = Arena::new(256 << 10);
    arena.fill(0, 20480, 3);
    let seen = writev(&dev, &state, &mut arena, 4096, &[(0, 12288), (65536, 8192)]);
    let shape: Vec<(u64, u64, u32)> = seen.iter().map(|s| (s.pos, s.len, s.nr_segments)).collect();
    // 8 KiB pieces: the second straddles the two segments.
    assert_eq!(shape, [(4096, 8192, 1), (12288, 8192, 2), (20480, 4096, 1)]);
    let mem = state.mem.lock().unwrap();
    assert_eq!(&mem[4096..16384], arena.bytes(0, 12288));
    assert_eq!(&mem[16384..24576], arena.bytes(65536, 8192));
}

/// Bios of buffers at `ats` (4 KiB each), written back to back on the
/// device under one plug: the requests the driver saw.
fn plugged_writes(dev: &Device, state: &State, arena: &mut Arena, ats: &[usize]) -> Vec<Seen> {
    state.seen.lock().unwrap().clear();
    let mut c = dev.client();
    {
        let mut plug = c.plug();
        for (i, &at) in ats.iter().enumerate() {
            plug.submit(Bio::writev(i as u64 * 4096, vec![arena.seg(at, 4096)]), i as u64).unwrap();
        }
    }
    c.drain();
    assert_eq!(*state.violations.lock().unwrap(), Vec::<String>::new());
    state.seen.lock().unwrap().clone()
}

#[test]
fn merges_count_physical_segments() {
    let (dev, state) = device(limits(|l| l.max_segments = 2));
    let mut arena = Arena::new(256 << 10);
    // Contiguous buffers coalesce: six bios, one physical segment.
    let seen = plugged_writes(&dev, &state, &mut arena, &[0, 4096, 8192, 12288, 16384, 20480]);
    assert_eq!(seen.iter().map(|s| (s.nr_bios, s.phys.len())).collect::<Vec<_>>(), [(6, 1)]);
    // Apart: two bios a request.
    let seen = plugged_writes(&dev, &state, &mut arena, &[0, 8192, 16384, 24576, 32768, 40960]);
    assert_eq!(seen.iter().map(|s| s.nr_bios).collect::<Vec<_>>(), [2, 2, 2]);
}

#[test]
#[cfg_attr(miri, ignore = "the limits' rules, no unsafe code of their own: natively only")]
fn a_merge_that_would_make_a_gap_is_refused() {
    let (dev, state) = device(limits(|l| {
        l.virt_boundary_mask = 4095;
        l.max_segment_size = u32::MAX;
    }));
    let mut arena = Arena::new(256 << 10);
    let seen = plugged_writes(&dev, &state, &mut arena, &[0, 16384]);
    assert_eq!(seen.len(), 1, "both on the boundary: they merge");
    let seen = plugged_writes(&dev, &state, &mut arena, &[0, 16384 + 512]);
    assert_eq!(seen.len(), 2, "the second starts off the boundary");
}

#[test]
fn a_bio_the_limits_cannot_split_is_refused_whole() {
    let mut l = QueueLimits::new(DEVICE_BYTES as u64, 4096);
    (l.max_segments, l.seg_boundary_mask) = (1, 0xfff);
    let (dev, _state) = device(l);
    let mut arena = Arena::new(64 << 10);
    let segs = vec![arena.seg(512, 4096)];
    let array = segs.as_ptr();
    let refused = dev.client().submit(Bio::writev(0, segs), 1).unwrap_err();
    assert!(matches!(refused.error, SubmitError::Unsplittable { at: 0, max_segments: 1, .. }), "{:?}", refused.error);
    let back = refused.bio.segs.into_vec();
    assert_eq!(back.as_ptr(), array, "the caller's vector back");
    assert_eq!(dev.busy_tags(), 0);
}

#[test]
#[cfg_attr(miri, ignore = "the limits' rules, no unsafe code of their own: natively only")]
fn bad_segments_are_refused_by_name() {
    let (dev, _state) = device(limits(|_| {}));
    let mut arena = Arena::new(256 << 10);
    let mut c = dev.client();
    let odd = Bio::writev(0, vec![arena.seg(0, 4096), arena.seg(8192, 100)]);
    let e = c.submit(odd, 1).unwrap_err().error;
    assert_eq!(e, SubmitError::BadSegment { index: 1, len: 100, logical_block_size: 512 });
    let many: Vec<Buf> = (0..=BIO_MAX_VECS).map(|i| arena.seg(i * 512, 512)).collect();
    let e = c.submit(Bio::readv(0, many), 2).unwrap_err().error;
    assert_eq!(e, SubmitError::TooManySegments { nr: BIO_MAX_VECS + 1, max: BIO_MAX_VECS });
    let mut short = Bio::writev(0, vec![arena.seg(0, 4096)]);
    short.len = 8192;
    assert!(matches!(c.submit(short, 3).unwrap_err().error, SubmitError::BadBuffer { .. }));
    assert!(matches!(c.submit(Bio::readv(0, Vec::new()), 4).unwrap_err().error, SubmitError::BadBuffer { .. }));
}

#[test]
fn the_completion_gives_the_callers_vector_back() {
    let (dev, _state) = device(limits(|l| l.max_segments = 2));
    let mut arena = Arena::new(256 << 10);
    let mut segs = Vec::with_capacity(BIO_MAX_VECS);
    segs.extend((0..5).map(|i| arena.seg(i * 8192, 4096)));
    let (array, capacity) = (segs.as_ptr(), segs.capacity());
    // Split in three pieces (two segments a request), completed once.
    let done = dev.client().submit_and_wait_completion(Bio::readv(0, segs)).unwrap();
    assert!(done.status.is_ok());
    let back = done.segs.into_vec();
    assert_eq!((back.as_ptr(), back.capacity(), back.len()), (array, capacity, 5));
}

#[test]
fn vectored_reads_and_writes_through_a_bio_vec() {
    let (dev, _state) = device(limits(|_| {}));
    let mut c = dev.client();
    let segs = BioVec::from(vec![Buf::from_slice(&[1; 512]), Buf::from_slice(&[2; 1024])]);
    c.submit_and_wait(Bio::writev(0, segs)).unwrap();
    let back = c.submit_and_wait(Bio::readv(0, vec![Buf::new(1024), Buf::new(512)])).unwrap().into_vec();
    assert_eq!((back[0][0], back[0][600], back[1][0], back[1][511]), (1, 2, 2, 2));
}

/// A caller's iovec array, borrowed as it is (`BioVec::from_iovecs`, the C
/// library's readv and writev): split by max_sectors and max_segments,
/// merged under a plug, read back into another array.
#[test]
fn a_borrowed_iovec_array_is_split_merged_and_read_back() {
    let (dev, state) = device(limits(|l| {
        l.max_sectors = 16;
        l.max_segments = 2;
    }));
    let mut arena = Arena::new(64 << 10);
    arena.fill(0, 16384, 9);
    let at = |arena: &mut Arena, off: usize| arena.bytes[arena.start + off..].as_mut_ptr();
    let iov = |base: *mut u8, len| libc::iovec { iov_base: base.cast(), iov_len: len };
    // Three segments apart, 12 KiB: pieces of 8 KiB and 4 KiB.
    let out = [iov(at(&mut arena, 0), 4096), iov(at(&mut arena, 8192), 2048), iov(at(&mut arena, 12288), 6144)];
    let mut c = dev.client();
    {
        let mut plug = c.plug();
        // SAFETY: `out` and the arena outlive the I/O, untouched meanwhile.
        plug.submit(Bio::writev(0, unsafe { BioVec::from_iovecs(out.as_ptr(), 3) }), 1).unwrap();
        // A bio right after it merges where the limits allow.
        plug.submit(Bio::writev(12288, vec![arena.seg(32768, 512)]), 2).unwrap();
    }
    c.drain();
    assert_eq!(*state.violations.lock().unwrap(), Vec::<String>::new());
    let back = [iov(at(&mut arena, 40960), 8192), iov(at(&mut arena, 49152), 4608)];
    // SAFETY: as above; the read's segments do not overlap.
    let done = c.submit_and_wait_completion(Bio::readv(0, unsafe { BioVec::from_iovecs(back.as_ptr(), 2) })).unwrap();
    assert!(done.status.is_ok() && done.segs.iovecs().is_some_and(|v| v.len() == 2));
    drop(done);
    let mut want = arena.bytes(0, 4096).to_vec();
    want.extend_from_slice(arena.bytes(8192, 2048));
    want.extend_from_slice(arena.bytes(12288, 6144));
    want.extend_from_slice(arena.bytes(32768, 512));
    assert!(arena.bytes(40960, 12800) == &want[..]);
    assert_eq!(dev.busy_tags(), 0);
}

/// An iovec array its caller checked (`BioVec::from_iovecs_checked`, what
/// the C library's readv/writev build): the same requests and bytes as
/// unchecked, on the plain path (one request) and split (`max_sectors`).
#[test]
fn a_checked_iovec_array_is_served_as_an_unchecked_one() {
    for max_sectors in [2048, 16] {
        let (dev, state) = device(limits(|l| l.max_sectors = max_sectors));
        let mut arena = Arena::new(64 << 10);
        arena.fill(0, 16384, 3);
        let at = |arena: &mut Arena, off: usize| arena.bytes[arena.start + off..].as_mut_ptr();
        let iov = |base: *mut u8, len| libc::iovec { iov_base: base.cast(), iov_len: len };
        let out = [iov(at(&mut arena, 0), 4096), iov(at(&mut arena, 8192), 8192)];
        let mut c = dev.client();
        // SAFETY: `out` and the arena outlive the I/O, untouched meanwhile;
        // two lengths, multiples of 512, 12 KiB: the bio's length.
        let w =
            c.submit_and_wait_completion(Bio::writev(4096, unsafe { BioVec::from_iovecs_checked(out.as_ptr(), 2) }));
        assert!(w.unwrap().status.is_ok());
        let back = [iov(at(&mut arena, 32768), 6144), iov(at(&mut arena, 40960), 6144)];
        // SAFETY: as above.
        let r =
            c.submit_and_wait_completion(Bio::readv(4096, unsafe { BioVec::from_iovecs_checked(back.as_ptr(), 2) }));
        assert!(r.unwrap().status.is_ok());
        assert_eq!(*state.violations.lock().unwrap(), Vec::<String>::new());
        let seen = state.seen.lock().unwrap();
        let sizes: Vec<usize> = seen.iter().map(|s| s.len as usize).collect();
        let want: &[usize] = if max_sectors == 16 { &[8192, 4096, 8192, 4096] } else { &[12288, 12288] };
        assert_eq!(sizes, want, "max_sectors {max_sectors}");
        drop(seen);
        let mut data = arena.bytes(0, 4096).to_vec();
        data.extend_from_slice(arena.bytes(8192, 8192));
        let mut read = arena.bytes(32768, 6144).to_vec();
        read.extend_from_slice(arena.bytes(40960, 6144));
        assert!(read == data);
        assert_eq!(dev.busy_tags(), 0);
    }
}

/// A checked iovec array of more segments than a request may carry is
/// split by `max_segments` as any vectored bio is (never the plain path).
#[test]
fn a_checked_iovec_array_over_max_segments_is_split() {
    let (dev, state) = device(limits(|l| l.max_segments = 2));
    let mut arena = Arena::new(64 << 10);
    arena.fill(0, 24576, 5);
    let at = |arena: &mut Arena, off: usize| arena.bytes[arena.start + off..].as_mut_ptr();
    let iov = |base: *mut u8, len| libc::iovec { iov_base: base.cast(), iov_len: len };
    let out = [iov(at(&mut arena, 0), 4096), iov(at(&mut arena, 8192), 4096), iov(at(&mut arena, 16384), 4096)];
    let mut c = dev.client();
    // SAFETY: `out` and the arena outlive the I/O; three lengths, multiples
    // of 512, summing to the bio's 12 KiB.
    let w = c.submit_and_wait_completion(Bio::writev(0, unsafe { BioVec::from_iovecs_checked(out.as_ptr(), 3) }));
    assert!(w.unwrap().status.is_ok());
    assert_eq!(*state.violations.lock().unwrap(), Vec::<String>::new());
    let sizes: Vec<u64> = state.seen.lock().unwrap().iter().map(|s| s.len).collect();
    assert_eq!(sizes, [8192, 4096]);
    let mem = state.mem.lock().unwrap();
    assert!(mem[..4096] == *arena.bytes(0, 4096) && mem[4096..8192] == *arena.bytes(8192, 4096));
    assert!(mem[8192..12288] == *arena.bytes(16384, 4096));
    drop(mem);
    assert_eq!(dev.busy_tags(), 0);
}

/// `from_iovecs_checked`'s contract is checked in debug builds: a length
/// that is not a whole number of blocks is caught at submission.
#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "from_iovecs_checked's contract")]
fn a_checked_iovec_array_that_breaks_its_contract_is_caught_in_debug_builds() {
    let (dev, _state) = device(limits(|_| {}));
    let mut arena = Arena::new(16 << 10);
    let base = arena.bytes[arena.start..].as_mut_ptr();
    let iov =
        [libc::iovec { iov_base: base.cast(), iov_len: 1000 }, libc::iovec { iov_base: base.cast(), iov_len: 24 }];
    let mut c = dev.client();
    // SAFETY: the memory outlives the I/O; the lengths break the contract
    // on purpose (1000 is no multiple of 512), which is what is tested.
    let _ = c.submit_and_wait_completion(Bio::readv(0, unsafe { BioVec::from_iovecs_checked(iov.as_ptr(), 2) }));
}
