//! Loans (loan.rs): pages lent past a read keep their bytes while the
//! kernel holds them, whatever the store does meanwhile. The holder is
//! the kernel itself (a pipe the pages are vmspliced into, read after the
//! store has overwritten and reused its pages); under Miri, which has no
//! vmsplice, raw pointers kept past the lend stand in for it.

use super::loan::Lending;
#[cfg(not(miri))]
use super::loan::QUARANTINE_PAGES;
use super::tests::{flush_until, Rng};
use super::*;

const PAGE: usize = PAGE_SIZE as usize;

/// Holds lent slices by reference past the lend, as a socket would.
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

/// Under Miri: the slices' pointers, read later.
#[cfg(miri)]
struct Holder(Vec<(*const u8, usize)>);

#[cfg(miri)]
impl Holder {
    fn new() -> Self {
        Self(Vec::new())
    }

    fn hold(&mut self, slices: &[std::io::IoSlice<'_>]) -> std::io::Result<()> {
        self.0.extend(slices.iter().map(|s| (s.as_ptr(), s.len())));
        Ok(())
    }

    fn read_all(&mut self) -> Vec<u8> {
        // SAFETY: the lend is outstanding, so the pages are neither reused
        // nor freed (that is what the tests check).
        self.0.drain(..).flat_map(|(p, n)| unsafe { std::slice::from_raw_parts(p, n) }.to_vec()).collect()
    }
}

/// Pages `0..4` written with a pattern and lent to a holder.
fn lend_four(m: &MemStore, loan: &mut Loan, holder: &mut Holder) -> (LendId, Vec<u8>) {
    let data: Vec<u8> = (0..4 * PAGE).map(|i| (i % 253) as u8).collect();
    m.write(0, &data);
    let id = m.lend_to(loan, 0, 4 * PAGE_SIZE, &mut |s| holder.hold(s)).expect("room").expect("lent");
    (id, data)
}

/// Overwrites the lent pages and then every other page, `rounds` times,
/// moving retirements on: without loans the lent pages would be reused by
/// these writes (free pages go out before untouched ones).
fn churn(m: &MemStore, pages: u64, rounds: usize) {
    m.write(0, &[0xbb; 4 * PAGE]);
    let mut rng = Rng(11);
    for round in 0..rounds {
        let page = 4 + rng.below(pages - 4);
        m.write(page * PAGE_SIZE, &[round as u8; PAGE]);
        if round % 64 == 0 {
            m.reclaim.flush();
        }
    }
}

fn pages_back(m: &MemStore, quarantined: impl Fn(usize) -> bool) -> bool {
    let arena = m.reclaim.arena();
    flush_until(|| quarantined(arena.nr_quarantined()), || m.reclaim.flush())
}

#[test]
fn a_lent_page_keeps_its_bytes_until_given_back() {
    // Under Miri fewer overwrites than the quarantine holds: past it the
    // oldest pages are discarded, which Miri emulates by overwriting them,
    // where the kernel would keep the old frame for the holder.
    let (pages, rounds) = if cfg!(miri) { (24, 40) } else { (64, 4000) };
    let m = MemStore::new(pages * PAGE_SIZE);
    let mut loan = m.loan();
    let mut holder = Holder::new();
    let (id, data) = lend_four(&m, &mut loan, &mut holder);
    assert!(loan.is_outstanding());
    churn(&m, pages, rounds);
    assert!(pages_back(&m, |q| q >= 4), "the four retired lent pages wait in the quarantine");
    assert!(holder.read_all() == data, "the holder reads the bytes of the read, not the store's later writes");
    loan.give_back_through(id);
    assert!(!loan.is_outstanding());
    // The next allocation reuses what waited.
    churn(&m, pages, 64);
    assert!(pages_back(&m, |q| q == 0), "given back, nothing waits");
}

/// Frees that no lend can have touched do not wait: a lend given back, or
/// pages freed while no borrower has anything outstanding.
#[test]
fn an_idle_borrower_holds_nothing_back() {
    let m = MemStore::new(64 * PAGE_SIZE);
    let mut loan = m.loan();
    let mut holder = Holder::new();
    let (id, _) = lend_four(&m, &mut loan, &mut holder);
    holder.read_all();
    loan.give_back_through(id);
    churn(&m, 64, 400);
    m.reclaim.flush();
    assert_eq!(m.reclaim.arena().nr_quarantined(), 0);
    drop(loan);
}

/// A borrower gone with its lend outstanding: its pages' frames go to the
/// kernel before the addresses are reused, so the holder keeps the old
/// bytes and nothing waits.
#[cfg(not(miri))]
#[test]
fn a_borrower_gone_with_lends_outstanding_leaves_them_to_the_kernel() {
    let m = MemStore::new(64 * PAGE_SIZE);
    let mut loan = m.loan();
    let mut holder = Holder::new();
    let (_, data) = lend_four(&m, &mut loan, &mut holder);
    drop(loan);
    let chunks = m.reclaim.arena().nr_chunks();
    churn(&m, 64, 4000);
    m.reclaim.flush();
    assert_eq!(m.reclaim.arena().nr_quarantined(), 0, "no borrower left: nothing waits");
    assert_eq!(m.reclaim.arena().nr_chunks(), chunks, "the tainted pages were reused, not leaked");
    assert!(holder.read_all() == data, "the holder still reads the old bytes");
}

/// A borrower that never gives back costs page faults, not memory: the
/// quarantine stays within its bound, and the pages over it are reused
/// with fresh frames, so the holder still reads its bytes.
#[cfg(not(miri))]
#[test]
fn the_quarantine_is_bounded_when_a_borrower_never_gives_back() {
    let m = MemStore::new(64 * PAGE_SIZE);
    let mut loan = m.loan();
    let mut holder = Holder::new();
    let (_, data) = lend_four(&m, &mut loan, &mut holder);
    churn(&m, 64, 3 * QUARANTINE_PAGES);
    // Once every retirement is back: each page held is published or waits
    // in the quarantine, which is full and no fuller.
    let arena = m.reclaim.arena();
    let settled = flush_until(
        || arena.nr_quarantined() == QUARANTINE_PAGES && arena.nr_live() == m.nr_pages() + QUARANTINE_PAGES,
        || m.reclaim.flush(),
    );
    assert!(settled, "{} pages held, {} published, {} waiting", arena.nr_live(), m.nr_pages(), arena.nr_quarantined());
    assert!(holder.read_all() == data);
    assert!(loan.is_outstanding());
}

/// A loan is its own store's: another store refuses it.
#[test]
fn a_loan_from_another_store_is_refused() {
    let (a, b) = (MemStore::new(8 * PAGE_SIZE), MemStore::new(8 * PAGE_SIZE));
    let mut loan = a.loan();
    let err = b.lend_to(&mut loan, 0, PAGE_SIZE, &mut |_| Ok(())).unwrap().unwrap_err();
    assert!(err.to_string().contains("another device"), "{err}");
    assert!(!loan.is_outstanding());
}

/// A loan with no room declines (the caller copies instead).
#[test]
fn a_full_loan_declines() {
    let pages = super::loan::LOAN_PAGES as u64;
    let m = MemStore::new((pages + 1) * PAGE_SIZE);
    m.write(0, &vec![1; (pages + 1) as usize * PAGE]);
    let mut loan = m.loan();
    let id = m.lend_to(&mut loan, 0, pages * PAGE_SIZE, &mut |_| Ok(())).unwrap().unwrap();
    assert!(m.lend_to(&mut loan, 0, PAGE_SIZE, &mut |_| Ok(())).is_none());
    loan.give_back_through(id);
    assert!(m.lend_to(&mut loan, 0, PAGE_SIZE, &mut |_| Ok(())).is_some());
}

/// The quarantine's rule alone: a page waits while some borrower's oldest
/// outstanding lend is at or below its stamp.
#[test]
fn lending_rule() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let mut l = Lending::default();
    assert!(!l.holds(0x1000, 7), "no borrower: nothing waits");
    let slot = Arc::new(AtomicU64::new(5));
    l.register(slot.clone());
    assert!(!l.holds(0x2000, 4), "stamped before the oldest outstanding lend");
    assert!(l.holds(0x3000, 5) && l.holds(0x4000, 9));
    assert_eq!(l.next_ready(), None);
    slot.store(9, Ordering::SeqCst);
    assert_eq!(l.next_ready(), Some((0x3000, false)), "lend 5 given back");
    assert_eq!(l.next_ready(), None, "lend 9 is not");
    l.deregister(&slot, [0x4000, 0x5000].into_iter());
    assert_eq!(l.next_ready(), Some((0x4000, false)));
    assert!(l.untaint(0x4000) && !l.untaint(0x4000), "tainted once, until reused");
    assert!(l.untaint(0x5000));
}
