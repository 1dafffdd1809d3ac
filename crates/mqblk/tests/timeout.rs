//! Request timeouts as the kernel arms them: the deadline starts when the
//! driver receives the request (`blk_mq_start_request`), so requests held in
//! a plug or queued in a scheduler never time out; the driver's handler is
//! given the driver tag (`Rq::tag`), never a scheduler tag.

#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Forward;
use mqblk::driver::{Driver, QueueRqResult, TimedOutRq, TimeoutAction};
use mqblk::driver::{Hctx, Rq};
use mqblk::{Bio, Buf, Device, QueueConfig, QueueLimits, Status, TagSetConfig};

/// Holds every request until its timeout handler runs, then completes it
/// with `Timeout`; counts handler calls whose tag it does not hold.
struct Sitter {
    depth: u32,
    held: Mutex<Vec<Rq>>,
    timeouts: AtomicUsize,
    unknown_tags: AtomicUsize,
}

impl Sitter {
    fn new(depth: u32) -> Self {
        Self { depth, held: Mutex::new(Vec::new()), timeouts: AtomicUsize::new(0), unknown_tags: AtomicUsize::new(0) }
    }
}

impl Driver for Sitter {
    fn name(&self) -> &str {
        "sitter"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, self.depth)
    }
    fn limits(&self) -> QueueLimits {
        QueueLimits::new(1 << 20, 512)
    }
    fn rq_timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(40))
    }
    fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
        assert!(rq.tag() < self.depth, "the driver sees driver tags");
        self.held.lock().unwrap().push(rq);
        QueueRqResult::Queued
    }
    fn timeout(&self, _hctx: &Hctx, rq: TimedOutRq) -> TimeoutAction {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
        let mut held = self.held.lock().unwrap();
        match held.iter().position(|r| r.tag() == rq.tag) {
            Some(pos) => held.swap_remove(pos).complete(Status::Timeout),
            None => {
                self.unknown_tags.fetch_add(1, Ordering::Relaxed);
            }
        }
        TimeoutAction::Done
    }
    fn shutdown(&self) {
        for rq in self.held.lock().unwrap().drain(..) {
            rq.complete(Status::IoErr);
        }
    }
}

fn wait_one(c: &mut mqblk::Client) -> mqblk::Completion {
    let mut done = Vec::new();
    let n = c.do_io(&mut done, 1, 1, Some(Duration::from_secs(30))).unwrap();
    assert_eq!(n, 1, "the request timed out and completed");
    done.pop().unwrap()
}

#[test]
fn a_plugged_request_does_not_time_out() {
    let driver = Arc::new(Sitter::new(4));
    let dev = Device::with_driver(Box::new(Forward(driver.clone()))).unwrap();
    let mut plugged = dev.client();
    let mut direct = dev.client();
    let mut plug = plugged.plug();
    // Allocated first, but kept in the plug: not the driver's yet.
    plug.submit(Bio::read(0, Buf::new(512)), 1).unwrap();
    direct.submit(Bio::read(512, Buf::new(512)), 2).unwrap();
    let c = wait_one(&mut direct);
    assert_eq!((c.user_data, c.status), (2, Status::Timeout));
    assert_eq!(driver.timeouts.load(Ordering::Relaxed), 1, "only the request the driver had timed out");
    assert_eq!(dev.stats().timeouts, 1);
    drop(plug); // the outermost plug flushes: now the driver has it
    let c = wait_one(&mut plugged);
    assert_eq!((c.user_data, c.status), (1, Status::Timeout));
    assert_eq!(driver.timeouts.load(Ordering::Relaxed), 2);
    assert_eq!(driver.unknown_tags.load(Ordering::Relaxed), 0);
}

#[test]
fn with_a_scheduler_the_handler_gets_driver_tags_and_queued_requests_wait() {
    let driver = Arc::new(Sitter::new(2));
    let opts = QueueConfig { sched: mqblk::Sched::MqDeadline(Default::default()), ..QueueConfig::default() };
    let dev = Device::with_driver_options(Box::new(Forward(driver.clone())), opts).unwrap();
    let mut c = dev.client_with_capacity(8);
    // Two requests reach the driver; the other four wait in the scheduler
    // for a driver tag and must not time out there.
    for i in 0..6u64 {
        c.submit(Bio::read(i * 4096, Buf::new(512)), i).unwrap();
    }
    let mut seen = Vec::new();
    for _ in 0..6 {
        let done = wait_one(&mut c);
        assert_eq!(done.status, Status::Timeout);
        seen.push(done.user_data);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..6).collect::<Vec<_>>());
    assert_eq!(driver.unknown_tags.load(Ordering::Relaxed), 0, "every handler call named a request the driver held");
    assert_eq!(driver.timeouts.load(Ordering::Relaxed), 6, "each request timed out once, at the driver");
    // The scanner frees a request the handler completed after the handler
    // returns (it held it), which may be just after its client saw the
    // completion: a scheduler switch waits until every tag is back.
    dev.set_scheduler(mqblk::Sched::None).expect("every tag comes back");
    assert_eq!(dev.busy_tags(), 0);
}
