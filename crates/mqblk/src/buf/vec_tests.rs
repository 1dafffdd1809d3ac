//! Unit tests of `BioVec` (buf/vec.rs): its words for none, one and a
//! vector of segments, borrowed iovec arrays, and giving each back.

use super::*;

/// Two 4 KiB iovecs over `memory` (12 KiB at least), 8 KiB apart.
fn two_pages_apart(memory: &mut [u8]) -> [libc::iovec; 2] {
    assert!(memory.len() >= 12288);
    let base = memory.as_mut_ptr();
    // SAFETY: offsets within `memory`.
    let second = unsafe { base.add(8192) };
    [libc::iovec { iov_base: base.cast(), iov_len: 4096 }, libc::iovec { iov_base: second.cast(), iov_len: 4096 }]
}

#[test]
fn one_buffer_round_trips_in_place() {
    let mut buf = Buf::new(4096);
    buf[7] = 7;
    let addr = buf.as_ptr();
    let mut v = BioVec::from(buf);
    assert!(!v.is_vectored());
    assert_eq!(v.one_len(), Some(4096));
    v.as_mut_slice()[0][8] = 8;
    assert_eq!(v.seg_array_raw().unwrap().base, v.as_mut_slice().as_mut_ptr().cast_const().cast());
    let back = v.into_buf().unwrap();
    assert_eq!((back.as_ptr(), back[7], back[8]), (addr, 7, 8));
}

#[test]
fn vector_round_trips_with_its_capacity() {
    let mut segs = Vec::with_capacity(5);
    for i in 0..3u8 {
        segs.push(Buf::from_slice(&[i; 512]));
    }
    let array = segs.as_ptr();
    let mut v = BioVec::from(segs);
    assert_eq!((v.nr_segs(), v.len_bytes(), v.one_len()), (3, 1536, None));
    v.as_mut_slice()[2][0] = 9;
    assert_eq!(v.seg_array_raw().unwrap().base, array.cast());
    let back = v.into_vec();
    assert_eq!((back.as_ptr(), back.capacity(), back.len()), (array, 5, 3));
    assert_eq!((back[0][0], back[1][0], back[2][0]), (0, 1, 9));
}

#[test]
fn borrowed_and_fixed_segments_keep_their_kind() {
    let mut memory = vec![3u8; 8192];
    // SAFETY: `memory` outlives the buffer and is not touched meanwhile.
    let borrowed = unsafe { Buf::borrowed(memory.as_mut_ptr(), 4096) };
    let pool = crate::FixedBufs::new(1, 4096);
    let fixed = pool.take(4096).unwrap();
    let v = BioVec::from(vec![borrowed, fixed]);
    assert!(v.as_slice()[0].is_borrowed());
    assert_eq!(pool.free_slots(), 0);
    drop(v);
    assert_eq!(pool.free_slots(), 1, "the fixed segment gave its slot back");
    let one = BioVec::from(pool.take(512).unwrap());
    assert_eq!(one.as_slice()[0].capacity(), 4096);
    drop(one);
    assert_eq!(pool.free_slots(), 1);
    assert_eq!(memory[0], 3);
}

#[test]
fn empty_forms() {
    let none = BioVec::new();
    assert_eq!((none.nr_segs(), none.as_slice().len(), none.len_bytes()), (0, 0, 0));
    let mut empty_vec = BioVec::from(Vec::with_capacity(4));
    assert!(empty_vec.is_empty() && empty_vec.is_vectored());
    assert!(empty_vec.seg_array_raw().is_none());
    assert_eq!(empty_vec.into_vec().capacity(), 4);
    assert!(BioVec::from(None).into_vec().is_empty());
    let mut taken = BioVec::from(Buf::new(512));
    let out = taken.take();
    assert!(taken.is_empty());
    assert_eq!(out.len_bytes(), 512);
}

#[test]
fn a_vector_of_one_gives_its_buffer() {
    let v = BioVec::from(vec![Buf::new(1024)]);
    assert_eq!(v.into_buf().unwrap().len(), 1024);
    let v = BioVec::from(vec![Buf::new(1024), Buf::new(512)]);
    let v = v.into_buf().unwrap_err();
    assert_eq!(format!("{v:?}"), "BioVec(2 segments, 1536 bytes)");
}

#[test]
fn a_borrowed_iovec_array_is_read_in_place_and_owns_nothing() {
    let mut memory = vec![7u8; 12288];
    let base = memory.as_mut_ptr();
    let iov = two_pages_apart(&mut memory);
    // SAFETY: `iov` and `memory` outlive `v`, untouched meanwhile.
    let mut v = unsafe { BioVec::from_iovecs(iov.as_ptr(), 2) };
    assert!(v.is_vectored() && v.one_len().is_none());
    assert_eq!((v.nr_segs(), v.len_bytes()), (2, 8192));
    let spans: Vec<(usize, usize)> = v.seg_array().spans().collect();
    assert_eq!(spans, [(base as usize, 4096), (base as usize + 8192, 4096)]);
    let raw = v.seg_array_raw().unwrap();
    assert!(raw.iovecs && raw.base == iov.as_ptr().cast());
    assert_eq!(format!("{v:?}"), "BioVec(2 borrowed iovecs, 8192 bytes)");
    let v = v.into_buf().unwrap_err();
    assert!(v.into_vec().is_empty());
    // SAFETY: nr 0: the pointer is never read.
    assert!(unsafe { BioVec::from_iovecs(std::ptr::null(), 0) }.is_empty());
    assert_eq!(memory[0], 7);
}

#[test]
fn a_checked_iovec_array_is_an_iovec_array_that_says_so() {
    let mut memory = vec![7u8; 12288];
    let iov = two_pages_apart(&mut memory);
    for nr in [1, 2] {
        // SAFETY: `iov` and `memory` outlive `v`, untouched meanwhile.
        let v = unsafe { BioVec::from_iovecs_checked(iov.as_ptr(), nr) };
        assert!(v.iovecs_checked() && v.is_vectored() && v.one_len().is_none());
        assert_eq!((v.nr_segs(), v.len_bytes(), v.iovecs().map(<[_]>::len)), (nr, 4096 * nr as u64, Some(nr)));
        assert_eq!(format!("{v:?}"), format!("BioVec({nr} borrowed iovecs, {} bytes)", 4096 * nr));
        let v = v.into_buf().unwrap_err();
        assert!(v.iovecs_checked());
        assert!(v.into_vec().is_empty(), "nothing was owned");
    }
    // SAFETY: as above.
    let unchecked = unsafe { BioVec::from_iovecs(iov.as_ptr(), 2) };
    assert!(!unchecked.iovecs_checked() && unchecked.iovecs().is_some());
    // SAFETY: nr 0: the pointer is never read.
    assert!(unsafe { BioVec::from_iovecs_checked(std::ptr::null(), 0) }.is_empty());
    assert_eq!(memory[0], 7);
}

/// `owns_vec` is true for a vector of `Buf`s whatever its capacity, and
/// for nothing else: none, one `Buf`, an iovec array checked or not, the
/// words a `take` leaves behind.
#[test]
fn owns_vec_is_a_vector_of_bufs_only() {
    for capacity in [0, 1, 2, 3, 16, 255] {
        let v = BioVec::from(Vec::with_capacity(capacity));
        assert!(v.owns_vec(), "capacity {capacity}");
        assert_eq!(v.into_vec().capacity(), capacity);
    }
    let mut v = BioVec::from(vec![Buf::new(512), Buf::new(512)]);
    assert!(v.owns_vec() && !v.iovecs_checked() && v.iovecs().is_none());
    let taken = v.take();
    assert!(!v.owns_vec() && taken.owns_vec());
    assert!(!BioVec::new().owns_vec());
    assert!(!BioVec::from(Buf::new(512)).owns_vec());
    let mut memory = vec![7u8; 12288];
    let iov = two_pages_apart(&mut memory);
    // SAFETY: `iov` and `memory` outlive both, untouched meanwhile.
    let (checked, unchecked) =
        unsafe { (BioVec::from_iovecs_checked(iov.as_ptr(), 2), BioVec::from_iovecs(iov.as_ptr(), 2)) };
    assert!(!checked.owns_vec() && !unchecked.owns_vec());
    assert!(checked.is_vectored() && unchecked.is_vectored());
}

#[test]
#[should_panic(expected = "borrowed iovec array")]
fn a_borrowed_iovec_array_has_no_bufs() {
    let mut memory = [0u8; 512];
    let iov = [libc::iovec { iov_base: memory.as_mut_ptr().cast(), iov_len: 512 }];
    // SAFETY: both outlive `v`.
    let v = unsafe { BioVec::from_iovecs(iov.as_ptr(), 1) };
    let _ = v.as_slice();
}

#[test]
fn a_kernel_buffer_is_one_segment_owning_nothing() {
    use crate::KernelBuf;
    let kbuf = KernelBuf { fd: 12, q_id: 3, tag: 511 };
    let v = BioVec::kernel(kbuf, 1 << 20);
    assert_eq!((v.nr_segs(), v.len_bytes(), v.kernel_buf()), (1, 1 << 20, Some(kbuf)));
    assert!(!v.owns_vec() && v.iovecs().is_none() && v.one_len().is_none() && !v.is_empty());
    assert_eq!(v.seg_array().spans().collect::<Vec<_>>(), [(0, 1 << 20)], "its offset into the buffer");
    assert!(format!("{v:?}").contains("kernel buffer"));
    // Every way out gives nothing back and frees nothing.
    assert!(BioVec::kernel(kbuf, 4096).into_vec().is_empty());
    let back = BioVec::kernel(kbuf, 4096).into_buf().unwrap_err();
    assert_eq!(back.kernel_buf(), Some(kbuf));
    let mut v = BioVec::kernel(kbuf, 512);
    let taken = v.take();
    assert!(v.is_empty() && v.kernel_buf().is_none() && taken.kernel_buf() == Some(kbuf));
    drop(taken);
    // Other kinds are never a kernel buffer.
    assert!(BioVec::from(Buf::new(512)).kernel_buf().is_none());
    assert!(BioVec::from(vec![Buf::new(512), Buf::new(512)]).kernel_buf().is_none());
}

#[test]
#[should_panic(expected = "kernel buffer")]
fn a_kernel_buffer_has_no_bufs() {
    let v = BioVec::kernel(crate::KernelBuf { fd: 3, q_id: 0, tag: 0 }, 512);
    let _ = v.as_slice();
}
