//! The driver contract through small test drivers: Busy requeues keep order
//! and lose nothing, timeouts reach the driver, a dropped request token
//! completes with an error, and the client's waiting and notification
//! paths work.

#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::ram::open;
use common::{Forward, Held};
use mqblk::driver::{Driver, QueueRqResult, TimedOutRq, TimeoutAction};
use mqblk::driver::{Hctx, Rq};
use mqblk::{Bio, Buf, Device, QueueLimits, Status, TagSetConfig};

/// Answers Busy to every other `queue_rq`, completing the rest inline, and
/// records the order in which requests were accepted.
struct Flaky {
    calls: AtomicU32,
    accepted: Mutex<Vec<u64>>,
}

impl Driver for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, 8)
    }
    fn limits(&self) -> QueueLimits {
        QueueLimits::new(1 << 20, 512)
    }
    fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
        if self.calls.fetch_add(1, Ordering::Relaxed) % 2 == 0 {
            return QueueRqResult::Busy(rq);
        }
        self.accepted.lock().unwrap().push(rq.sector());
        rq.complete(Status::Ok);
        QueueRqResult::Queued
    }
}

#[test]
fn busy_requests_are_retried_in_order_and_none_lost() {
    let driver = Arc::new(Flaky { calls: AtomicU32::new(0), accepted: Mutex::new(Vec::new()) });
    let dev = Device::with_driver(Box::new(Forward(driver.clone()))).unwrap();
    let mut c = dev.client_with_capacity(8);
    let mut done = Vec::new();
    for i in 0..200u64 {
        c.submit(Bio::read(i * 512, Buf::new(512)), i).unwrap();
        if c.in_flight() == 8 {
            c.do_io(&mut done, 1, 8, Some(Duration::from_secs(10))).unwrap();
        }
    }
    while c.in_flight() > 0 {
        c.do_io(&mut done, 1, 8, Some(Duration::from_secs(10))).unwrap();
    }
    assert_eq!(done.len(), 200);
    assert!(done.iter().all(|d| d.status.is_ok()));
    let accepted = driver.accepted.lock().unwrap().clone();
    assert_eq!(accepted, (0..200u64).collect::<Vec<_>>(), "Busy requests keep their place in line");
    let stats = dev.stats();
    assert!(stats.busy >= 100, "half the calls were Busy: {stats:?}");
    assert_eq!(stats.completed, 200);
    assert_eq!(dev.busy_tags(), 0);
}

/// Holds every request until its timeout handler runs, then completes it
/// with `Timeout`.
struct Sleepy {
    held: Mutex<Vec<Rq>>,
    timeouts: AtomicUsize,
}

impl Driver for Sleepy {
    fn name(&self) -> &str {
        "sleepy"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, 4)
    }
    fn limits(&self) -> QueueLimits {
        QueueLimits::new(1 << 20, 512)
    }
    fn rq_timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(50))
    }
    fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
        self.held.lock().unwrap().push(rq);
        QueueRqResult::Queued
    }
    fn timeout(&self, _hctx: &Hctx, rq: TimedOutRq) -> TimeoutAction {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
        let mut held = self.held.lock().unwrap();
        if let Some(pos) = held.iter().position(|r| r.tag() == rq.tag) {
            held.swap_remove(pos).complete(Status::Timeout);
        }
        TimeoutAction::Done
    }
    fn shutdown(&self) {
        for rq in self.held.lock().unwrap().drain(..) {
            rq.complete(Status::IoErr);
        }
    }
}

#[test]
fn timed_out_requests_reach_the_timeout_handler() {
    let dev =
        Device::with_driver(Box::new(Sleepy { held: Mutex::new(Vec::new()), timeouts: AtomicUsize::new(0) })).unwrap();
    let mut c = dev.client();
    c.submit(Bio::read(0, Buf::new(512)), 42).unwrap();
    let mut done = Vec::new();
    let n = c.do_io(&mut done, 1, 1, Some(Duration::from_secs(20))).unwrap();
    assert_eq!(n, 1);
    assert_eq!(done[0].user_data, 42);
    assert_eq!(done[0].status, Status::Timeout);
    assert_eq!(dev.stats().timeouts, 1);
}

/// Drops every request token without completing it.
struct Leaky;

impl Driver for Leaky {
    fn name(&self) -> &str {
        "leaky"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, 2)
    }
    fn limits(&self) -> QueueLimits {
        QueueLimits::new(1 << 20, 512)
    }
    fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
        drop(rq);
        QueueRqResult::Queued
    }
}

#[test]
fn a_dropped_request_completes_with_ioerr_and_frees_its_tag() {
    let dev = Device::with_driver(Box::new(Leaky)).unwrap();
    let mut c = dev.client();
    for i in 0..10 {
        let err = c.write_at(&[1u8; 512], 0).unwrap_err();
        assert_eq!(err.errno(), libc::EIO, "round {i}");
    }
    assert_eq!(dev.busy_tags(), 0);
}

#[test]
fn do_io_times_out_without_completions() {
    let held = Arc::new(Mutex::new(Vec::new()));
    let dev = Device::with_driver(Box::new(Held::new(held.clone(), 4))).unwrap();
    let mut c = dev.client();
    c.submit(Bio::read(0, Buf::new(512)), 1).unwrap();
    let mut done = Vec::new();
    let n = c.do_io(&mut done, 1, 1, Some(Duration::from_millis(5))).unwrap();
    assert_eq!(n, 0, "the driver holds the only request");
    assert_eq!(held.lock().unwrap().len(), 1, "queued to the driver, not lost");
    for rq in held.lock().unwrap().drain(..) {
        rq.complete(Status::Ok);
    }
    let n = c.do_io(&mut done, 1, 1, Some(Duration::from_secs(30))).unwrap();
    assert_eq!(n, 1);
    assert!(done[0].status.is_ok());
    assert!(c.do_io(&mut done, 1, 1, None).is_err(), "min beyond the in-flight count is refused");
}

#[test]
fn eventfd_signals_completions() {
    let dev = open("ram:gb=1,irqmode=2,completion_nsec=1000000").unwrap();
    let mut c = dev.client();
    let fd = c.completion_fd().unwrap();
    c.submit(Bio::read(0, Buf::new(4096)), 9).unwrap();
    // Miri has no poll(2): there the test retries the (non-blocking) read
    // until the completion makes the eventfd readable.
    #[cfg(not(miri))]
    {
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, 10_000) };
        assert_eq!(ready, 1, "the eventfd becomes readable when the completion arrives");
    }
    let mut val = 0u64;
    let mut read = || {
        // SAFETY: reads 8 bytes into a u64 from our eventfd.
        unsafe { libc::read(fd, (&mut val as *mut u64).cast(), 8) }
    };
    let mut n = read();
    while cfg!(miri) && n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
        std::thread::yield_now();
        n = read();
    }
    assert_eq!(n, 8);
    let mut done = Vec::new();
    assert_eq!(c.do_io(&mut done, 0, 8, None).unwrap(), 1);
    assert_eq!(done[0].user_data, 9);
}

/// A completer may signal a client's eventfd just after the client saw the
/// completion and went away: the fd must still be the device's then, never
/// a number the process has reused for another file. The next client gets
/// it quiet: checked where the signal is written before the client goes
/// (irqmode=0: inline, on the client's thread); with a completion thread
/// (irqmode=1) its write may land after the client went, which is the
/// spurious wakeup eventfd users tolerate, so there only the fd is checked.
#[test]
#[cfg_attr(miri, ignore = "Miri emulates neither poll(2) nor fcntl")]
fn the_completion_fd_outlives_its_client_and_is_quiet_for_the_next() {
    for irqmode in [0, 1] {
        let dev = open(&format!("ram:gb=1,irqmode={irqmode}")).unwrap();
        let fd = {
            let mut c = dev.client();
            let fd = c.completion_fd().unwrap();
            c.submit(Bio::read(0, Buf::new(4096)), 1).unwrap();
            let mut done = Vec::new();
            assert_eq!(c.do_io(&mut done, 1, 1, None).unwrap(), 1);
            fd // dropped with the eventfd signalled and unread
        };
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        assert!(unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0, "irqmode={irqmode}: the device keeps the eventfd open");
        let mut next = dev.client();
        assert_eq!(next.completion_fd().unwrap(), fd, "irqmode={irqmode}: the sink and its eventfd are recycled");
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        if irqmode == 0 {
            // SAFETY: one valid pollfd; timeout 0 only looks.
            assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 0, "the previous client's signal was consumed");
        }
        next.submit(Bio::read(0, Buf::new(4096)), 2).unwrap();
        // SAFETY: one valid pollfd, waiting up to 10 s.
        let ready = unsafe { libc::poll(&mut pfd, 1, 10_000) };
        assert_eq!(ready, 1, "irqmode={irqmode}: it signals the new client's completions");
    }
}

/// The completion fd is the user's to configure: fio's libblkio engine
/// makes it blocking. Dropping the client (which quiets the fd for the next
/// one) must then not block on an empty eventfd, as it once did, hanging
/// every fio job at its end.
#[test]
#[cfg_attr(miri, ignore = "Miri emulates neither poll(2) nor fcntl")]
fn dropping_a_client_whose_completion_fd_was_made_blocking_does_not_hang() {
    let dev = open("ram:gb=1,irqmode=1").unwrap();
    let mut c = dev.client();
    let fd = c.completion_fd().unwrap();
    // SAFETY: F_GETFL/F_SETFL on our open eventfd.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        assert!(flags >= 0);
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK), 0);
    }
    c.submit(Bio::read(0, Buf::new(4096)), 1).unwrap();
    let mut done = Vec::new();
    assert_eq!(c.do_io(&mut done, 1, 1, None).unwrap(), 1);
    let mut val = 0u64;
    // SAFETY: reads 8 bytes into a u64; the completion signalled the fd.
    assert_eq!(unsafe { libc::read(fd, (&mut val as *mut u64).cast(), 8) }, 8, "signalled, and now empty");
    // The drop runs on another thread so that a hang fails the test (after
    // a generous bound, for the failure case only) instead of the suite.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(c);
        tx.send(()).unwrap();
    });
    assert!(rx.recv_timeout(Duration::from_secs(60)).is_ok(), "dropping the client blocked on its empty eventfd");
}

/// An awake event loop disarms the eventfd: inline completions then leave
/// it quiet (no write, no wakeup), and the next `do_io` that drains the ring
/// arms it again.
#[test]
#[cfg_attr(miri, ignore = "Miri does not emulate poll(2)")]
fn a_disarmed_completion_fd_stays_quiet_until_do_io_rearms_it() {
    let dev = open("ram:gb=1,irqmode=0").unwrap();
    let mut c = dev.client();
    let fd = c.completion_fd().unwrap();
    let readable = |timeout_ms: i32| {
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, timeout_ms) == 1 }
    };
    let mut done = Vec::new();
    // Armed (a fresh client drains an empty ring on its first do_io).
    assert_eq!(c.do_io(&mut done, 0, 8, None).unwrap(), 0);
    c.disarm_completion_fd();
    c.submit(Bio::read(0, Buf::new(4096)), 1).unwrap();
    assert!(!readable(0), "an inline completion after disarm does not signal");
    assert_eq!(c.do_io(&mut done, 0, 8, None).unwrap(), 1, "but it is delivered");
    c.submit(Bio::read(0, Buf::new(4096)), 2).unwrap();
    assert!(readable(10_000), "do_io drained the ring and armed the eventfd again");
}

/// Holds every request whose sector is odd; an even one completes inline,
/// after everything held (as a driver completing a batch from its
/// submission path would).
struct HoldOdd {
    held: Mutex<Vec<Rq>>,
}

impl Driver for HoldOdd {
    fn name(&self) -> &str {
        "hold-odd"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, 16)
    }
    fn limits(&self) -> QueueLimits {
        QueueLimits::new(1 << 20, 512)
    }
    fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
        if rq.sector() % 2 == 1 {
            self.held.lock().unwrap().push(rq);
            return QueueRqResult::Queued;
        }
        let held: Vec<Rq> = self.held.lock().unwrap().drain(..).collect();
        for h in held {
            h.complete(Status::Ok);
        }
        rq.complete(Status::Ok);
        QueueRqResult::Queued
    }
}

/// A request completed on the thread of a submission reaches its own
/// client whoever submits: the submitter's own completions come back
/// without the completion ring (completion.rs `deliver_local`), another
/// client's, completed on the same thread, through that client's ring.
#[test]
fn completions_inside_a_submission_reach_their_own_clients() {
    let dev = Device::with_driver(Box::new(HoldOdd { held: Mutex::new(Vec::new()) })).unwrap();
    let (mut a, mut b) = (dev.client(), dev.client());
    let mut done = Vec::new();
    for round in 0..4u64 {
        // a's odd sectors wait in the driver; b's even one ends them all.
        a.submit(Bio::read(512, Buf::new(512)), 10 + round).unwrap();
        b.submit(Bio::read(512, Buf::new(512)), 20 + round).unwrap();
        b.submit(Bio::read(0, Buf::new(512)), 30 + round).unwrap();
        done.clear();
        assert_eq!(b.do_io(&mut done, 2, 8, Some(Duration::from_secs(10))).unwrap(), 2);
        let mut got: Vec<u64> = done.iter().map(|c| c.user_data).collect();
        got.sort_unstable();
        assert_eq!(got, [20 + round, 30 + round], "b reaps its own two, not a's");
        done.clear();
        assert_eq!(a.do_io(&mut done, 1, 8, Some(Duration::from_secs(10))).unwrap(), 1);
        assert_eq!(done[0].user_data, 10 + round, "a's completion, ended in b's submission");
        // a's own even read ends inline in a's submission, in order.
        a.submit(Bio::read(0, Buf::new(512)), 40 + round).unwrap();
        a.submit(Bio::read(1024, Buf::new(512)), 50 + round).unwrap();
        done.clear();
        assert_eq!(a.do_io(&mut done, 2, 8, Some(Duration::from_secs(10))).unwrap(), 2);
        assert_eq!(done.iter().map(|c| c.user_data).collect::<Vec<_>>(), [40 + round, 50 + round]);
    }
    assert_eq!(dev.stats().completed, 20);
    assert_eq!(dev.busy_tags(), 0);
}

#[test]
fn dropping_a_client_waits_for_its_io() {
    let dev = open("ram:gb=1,irqmode=2,completion_nsec=2000000").unwrap();
    {
        let mut c = dev.client();
        for i in 0..16 {
            c.submit(Bio::write(i * 4096, Buf::new(4096)), i).unwrap();
        }
    }
    let stats = dev.stats();
    assert_eq!(stats.completed, 16, "the client's drop waited for every I/O");
    assert_eq!(dev.busy_tags(), 0);
}

#[test]
fn blocking_helpers_leave_other_completions_for_do_io() {
    let dev = open("ram:gb=1,irqmode=1,memory_backed=1").unwrap();
    let mut c = dev.client();
    c.submit(Bio::write(0, Buf::from_slice(&[3u8; 4096])), 77).unwrap();
    c.write_at(&[4u8; 4096], 8192).unwrap();
    let mut back = [0u8; 4096];
    c.read_at(&mut back, 8192).unwrap();
    assert_eq!(back, [4u8; 4096]);
    let mut done = Vec::new();
    assert_eq!(c.do_io(&mut done, 1, 8, None).unwrap(), 1);
    assert_eq!(done[0].user_data, 77);
}

/// A tag set with 2 reserved tags out of 6, completing inline.
struct Reserving;

impl Driver for Reserving {
    fn name(&self) -> &str {
        "reserving"
    }
    fn tag_set(&self) -> TagSetConfig {
        let mut t = TagSetConfig::new(1, 6);
        t.reserved_tags = 2;
        t
    }
    fn limits(&self) -> QueueLimits {
        QueueLimits::new(1 << 20, 512)
    }
    fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
        rq.complete(Status::Ok);
        QueueRqResult::Queued
    }
}

#[test]
fn reserved_tags_are_separate_and_refused_without_them() {
    let dev = Device::with_driver(Box::new(Reserving)).unwrap();
    let mut c = dev.client();
    c.submit_reserved(Bio::read(0, Buf::new(512)), 1).unwrap();
    c.submit(Bio::read(0, Buf::new(512)), 2).unwrap();
    let mut done = Vec::new();
    c.do_io(&mut done, 2, 2, None).unwrap();
    assert!(done.iter().all(|d| d.status.is_ok()));
    let dump = dev.show_stats();
    assert!(dump.contains("hctx0/tags/nr_reserved_tags=2"), "{dump}");
    assert!(dump.contains("hctx0/tags/breserved_tags/depth=2"), "{dump}");
    assert!(dump.contains("hctx0/tags/bitmap_tags/depth=4"), "{dump}");

    let ram = open("ram:gb=1,irqmode=0").unwrap();
    let mut c = ram.client();
    let r = c.submit_reserved(Bio::read(0, Buf::new(4096)), 1).unwrap_err();
    assert_eq!(r.error, mqblk::SubmitError::NoReservedTags);
}
