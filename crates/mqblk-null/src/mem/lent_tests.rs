//! Pages lent past a read (lent.rs) keep their bytes for whoever holds
//! them, whatever the store does meanwhile. The holder is the kernel
//! itself: a pipe the pages are vmspliced into, read after the store has
//! overwritten, discarded and reused its pages. Under Miri, which has no
//! vmsplice, the tests check the marking and the discard instead.

use super::tests::{flush_until, Rng};
use super::*;

const PAGE: usize = PAGE_SIZE as usize;

/// Holds lent slices by reference past the read, as a socket would.
#[cfg(not(miri))]
struct Holder {
    pipe: [libc::c_int; 2],
    bytes: usize,
}

#[cfg(not(miri))]
impl Holder {
    fn new() -> Self {
        let mut pipe = [0; 2];
        // SAFETY: a two-int array for pipe(2) to fill.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        // SAFETY: resizing our own pipe (1 MiB is the unprivileged limit).
        unsafe { libc::fcntl(pipe[1], libc::F_SETPIPE_SZ, 1 << 20) };
        Self { pipe, bytes: 0 }
    }

    /// Takes the slices by reference (vmsplice without SPLICE_F_GIFT: the
    /// pipe holds the page frames, not copies).
    fn hold(&mut self, slices: &[std::io::IoSlice<'_>]) -> std::io::Result<()> {
        for s in slices {
            let iov = libc::iovec { iov_base: s.as_ptr() as *mut libc::c_void, iov_len: s.len() };
            // SAFETY: one iovec over a live slice; the kernel only reads it.
            let n = unsafe { libc::vmsplice(self.pipe[1], &iov, 1, libc::SPLICE_F_NONBLOCK) };
            assert_eq!(n, s.len() as isize, "vmsplice: {}", std::io::Error::last_os_error());
            self.bytes += s.len();
        }
        Ok(())
    }

    /// What a reader of the held pages reads now.
    fn read_all(&mut self) -> Vec<u8> {
        let mut out = vec![0u8; self.bytes];
        let mut at = 0;
        while at < out.len() {
            // SAFETY: reads into the unfilled rest of `out`.
            let n = unsafe { libc::read(self.pipe[0], out[at..].as_mut_ptr().cast(), out.len() - at) };
            assert!(n > 0, "read: {}", std::io::Error::last_os_error());
            at += n as usize;
        }
        self.bytes = 0;
        out
    }
}

#[cfg(not(miri))]
impl Drop for Holder {
    fn drop(&mut self) {
        // SAFETY: our own pipe's fds, closed once.
        unsafe {
            libc::close(self.pipe[0]);
            libc::close(self.pipe[1]);
        }
    }
}

/// Pages `0..4` written with a pattern; returns it.
fn write_four(m: &MemStore) -> Vec<u8> {
    let data: Vec<u8> = (0..4 * PAGE).map(|i| (i % 253) as u8).collect();
    m.write(0, &data);
    data
}

/// Overwrites pages `0..4` and discards them, then writes the others
/// `rounds` times over, moving retirements on: free pages go out before
/// untouched ones, so the lent pages' addresses are reused by these writes.
fn churn(m: &MemStore, pages: u64, rounds: usize) {
    m.write(0, &[0xbb; 4 * PAGE]);
    m.zero(0, 4 * PAGE_SIZE);
    let mut rng = Rng(11);
    for round in 0..rounds {
        let page = 4 + rng.below(pages - 4);
        m.write(page * PAGE_SIZE, &[round as u8; PAGE]);
        if round % 64 == 0 {
            m.reclaim.flush();
        }
    }
}

/// Every retirement back in the arena, lent pages' frames handed back
/// (the pages held are the published ones, and those never reused).
fn settle(m: &MemStore) {
    let arena = m.reclaim.arena();
    let back = flush_until(
        || arena.nr_live() == m.nr_pages() + arena.nr_stranded(),
        || {
            m.reclaim.flush();
            arena.flush_discards();
        },
    );
    assert!(back, "{} pages held, {} published", arena.nr_live(), m.nr_pages());
}

/// The holder reads the bytes of the read, not what the store wrote into
/// those addresses since; and the addresses were reused (no memory kept
/// for the holder's sake: the kernel keeps the old frames).
#[cfg(not(miri))]
#[test]
fn a_lent_page_keeps_its_bytes_through_overwrites_and_reuse() {
    let m = MemStore::new(64 * PAGE_SIZE);
    let data = write_four(&m);
    let mut holder = Holder::new();
    m.lend_past(0, 4 * PAGE_SIZE, &mut |s| holder.hold(s)).expect("a memory store lends").unwrap();
    let chunks = m.reclaim.arena().nr_chunks();
    // Twice: freed lent pages come back in batches (`settle` sends the
    // last one), so the second pass reuses their addresses.
    for _ in 0..2 {
        churn(&m, 64, 4000);
        settle(&m);
    }
    assert_eq!(m.reclaim.arena().nr_chunks(), chunks, "the lent pages' addresses were reused, no chunk added");
    assert_eq!(m.reclaim.arena().nr_stranded(), 0);
    assert!(holder.read_all() == data, "the holder reads the bytes of the read");
}

/// The same for a holder that takes the pages over from another holder
/// (a client splicing from its socket into a pipe of its own): the frames
/// are what is kept, whoever holds them.
#[cfg(not(miri))]
#[test]
fn a_lent_page_passed_on_keeps_its_bytes() {
    let m = MemStore::new(64 * PAGE_SIZE);
    let data = write_four(&m);
    let (mut first, mut second) = (Holder::new(), Holder::new());
    m.lend_past(0, 4 * PAGE_SIZE, &mut |s| first.hold(s)).unwrap().unwrap();
    // SAFETY: splice between our own pipes.
    let moved =
        unsafe { libc::splice(first.pipe[0], std::ptr::null_mut(), second.pipe[1], std::ptr::null_mut(), 4 * PAGE, 0) };
    assert_eq!(moved, 4 * PAGE as isize);
    (first.bytes, second.bytes) = (0, 4 * PAGE);
    for _ in 0..2 {
        churn(&m, 64, 4000);
        settle(&m);
    }
    assert!(second.read_all() == data);
}

/// A page lent and then freed gets a fresh frame before reuse; a page
/// never lent is reused as it is (no system call, no fault).
#[test]
fn only_lent_pages_are_discarded_when_freed() {
    let m = MemStore::new(8 * PAGE_SIZE);
    m.write(0, &[7; 2 * PAGE]);
    let addr = |page: u64| m.table.slot(page).unwrap().load(Ordering::Acquire) as usize;
    let (lent, kept) = (addr(0), addr(1));
    m.lend_past(0, PAGE_SIZE, &mut |_| Ok(())).unwrap().unwrap();
    m.zero(0, 2 * PAGE_SIZE);
    settle(&m);
    // SAFETY: both pages are free in the arena, still mapped, and no one
    // writes them until the next allocation.
    let (a, b) = unsafe { (*(lent as *const u8), *(kept as *const u8)) };
    assert_ne!(a, 7, "the lent page's frame went back (zeros; 0xa5 under Miri)");
    assert_eq!(b, 7, "the other page was not touched");
}

/// Unwritten pages lend the shared page of zeros, which is never freed:
/// nothing to mark.
#[test]
fn lending_unwritten_blocks_marks_nothing() {
    let m = MemStore::new(8 * PAGE_SIZE);
    let mut got = Vec::new();
    m.lend_past(0, 8 * PAGE_SIZE, &mut |s| {
        // Slice copies and one comparison: Miri interprets a loop over
        // the 32 KiB byte by byte.
        s.iter().for_each(|s| got.extend_from_slice(s));
        Ok(())
    })
    .unwrap()
    .unwrap();
    assert!(got == vec![0u8; 8 * PAGE]);
    assert_eq!(m.reclaim.arena().nr_live(), 0);
}

/// Where the kernel will not take a lent frame back (here: the page is
/// locked with mlock), the page is never reused, and the store stops
/// lending; reads by copy go on.
#[cfg(not(miri))]
#[test]
fn a_frame_the_kernel_keeps_strands_its_page_and_stops_lending() {
    let m = MemStore::new(8 * PAGE_SIZE);
    m.write(0, &[9; PAGE]);
    let page = m.table.slot(0).unwrap().load(Ordering::Acquire) as usize;
    // SAFETY: one page of the arena's mapping; locking changes no byte.
    let locked = unsafe { libc::mlock(page as *const libc::c_void, PAGE) };
    assert_eq!(locked, 0, "mlock: {}", std::io::Error::last_os_error());
    m.lend_past(0, PAGE_SIZE, &mut |_| Ok(())).unwrap().unwrap();
    m.zero(0, PAGE_SIZE);
    settle(&m);
    assert_eq!(m.reclaim.arena().nr_stranded(), 1, "the locked page is kept out of use");
    assert!(!m.lends());
    assert!(m.lend_past(0, PAGE_SIZE, &mut |_| Ok(())).is_none(), "no more lending");
    m.write(0, &[3; PAGE]);
    let mut out = [0u8; PAGE];
    m.read(0, &mut out);
    assert!(out.iter().all(|&b| b == 3));
    // SAFETY: the page locked above.
    unsafe { libc::munlock(page as *const libc::c_void, PAGE) };
}

/// The kernel's release as (major, minor), from uname.
#[cfg(not(miri))]
fn kernel_release() -> (u32, u32) {
    // SAFETY: a zeroed utsname is valid (plain byte arrays).
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname fills the struct it is given.
    assert_eq!(unsafe { libc::uname(&mut u) }, 0);
    // SAFETY: uname NUL-terminates the release string.
    let release = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }.to_string_lossy().into_owned();
    let mut parts = release.split(|c: char| !c.is_ascii_digit()).map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// A batch of freed lent pages goes back by one process_madvise where the
/// kernel takes MADV_DONTNEED that way for its own process (6.13 and
/// later), by one madvise each before; either way every frame goes.
#[cfg(not(miri))]
#[test]
fn a_batch_of_frames_goes_back_in_one_system_call_where_the_kernel_allows() {
    let m = MemStore::new(64 * PAGE_SIZE);
    m.write(0, &[5; 64 * PAGE]);
    let pages: Vec<*mut u8> = (0..64).map(|p| m.table.slot(p).unwrap().load(Ordering::Acquire).cast::<u8>()).collect();
    let together = super::lent::discard_together_for_tests(&pages);
    let expected = if kernel_release() >= (6, 13) { 64 } else { 0 };
    assert_eq!(together, expected, "kernel {:?}", kernel_release());
    // Discarding published pages is what a test may do, not the store: it
    // reads them back as zeros now (fresh frames), which shows they went.
    let mut out = [1u8; PAGE];
    m.read(63 * PAGE_SIZE, &mut out);
    assert_eq!(out[0], if together == 64 { 0 } else { 5 });
}
