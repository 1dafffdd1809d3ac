//! Test drivers shared by the integration tests: one that holds every
//! request until the test completes it, a forwarder that lets a test
//! keep a handle on a driver the device owns, and a RAM disk that `ram:`
//! specs open (ram.rs).
#![allow(dead_code)] // each test binary uses what it needs

pub mod ram;
pub mod stress;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mqblk::driver::{Driver, QueueRqResult, TimedOutRq, TimeoutAction};
use mqblk::driver::{Hctx, Rq};
use mqblk::{QueueLimits, Status, TagSetConfig};

/// True if every byte of `buf` is `byte`. A slice comparison (one memcmp)
/// rather than a loop over the bytes: Miri interprets such a loop byte by
/// byte, and 4 KiB reads checked that way cost a zoned test a minute.
pub fn filled(buf: &[u8], byte: u8) -> bool {
    buf == vec![byte; buf.len()].as_slice()
}

/// `len` bytes of `byte_at(i)`, a function of period `period` in `i`: the
/// first period is computed and the rest copied (`repeat`, a memcpy), since
/// Miri interprets a byte-by-byte generator at tens of steps a byte.
pub fn periodic(len: usize, period: usize, byte_at: impl Fn(usize) -> u8) -> Vec<u8> {
    let one: Vec<u8> = (0..period.min(len)).map(byte_at).collect();
    let mut bytes = one.repeat(len.div_ceil(period.max(1)));
    bytes.truncate(len);
    bytes
}

/// Holds every request until the test completes it: "nothing has
/// completed yet" or "every tag is taken" is then a fact, not a race
/// against a completion timer. Held requests end with `IoErr` at shutdown.
pub struct Held {
    pub rqs: Arc<Mutex<Vec<Rq>>>,
    pub queue_depth: u32,
    pub limits: QueueLimits,
}

impl Held {
    /// One hardware queue of `queue_depth` tags over 1 MiB of 512-byte
    /// sectors; `rqs` is where the held requests go.
    pub fn new(rqs: Arc<Mutex<Vec<Rq>>>, queue_depth: u32) -> Self {
        Self { rqs, queue_depth, limits: QueueLimits::new(1 << 20, 512) }
    }
}

impl Driver for Held {
    fn name(&self) -> &str {
        "held"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, self.queue_depth)
    }
    fn limits(&self) -> QueueLimits {
        self.limits.clone()
    }
    fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
        self.rqs.lock().unwrap().push(rq);
        QueueRqResult::Queued
    }
    fn shutdown(&self) {
        for rq in self.rqs.lock().unwrap().drain(..) {
            rq.complete(Status::IoErr);
        }
    }
}

/// Forwards the driver calls these tests use to a driver the test keeps a
/// handle on (to read its counters while the device owns the forwarder).
pub struct Forward<D>(pub Arc<D>);

impl<D: Driver> Driver for Forward<D> {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn tag_set(&self) -> TagSetConfig {
        self.0.tag_set()
    }
    fn limits(&self) -> QueueLimits {
        self.0.limits()
    }
    fn rq_timeout(&self) -> Option<Duration> {
        self.0.rq_timeout()
    }
    fn queue_rq(&self, hctx: &Hctx, rq: Rq, last: bool) -> QueueRqResult {
        self.0.queue_rq(hctx, rq, last)
    }
    fn timeout(&self, hctx: &Hctx, rq: TimedOutRq) -> TimeoutAction {
        self.0.timeout(hctx, rq)
    }
    fn shutdown(&self) {
        self.0.shutdown()
    }
}

/// `cases` random cases natively; two under Miri (each costs it 20 s or
/// more), which also has no getcwd in its isolation for proptest's file of
/// failing cases.
pub fn proptest_config(cases: u32) -> proptest::prelude::ProptestConfig {
    let mut config = proptest::prelude::ProptestConfig::with_cases(if cfg!(miri) { 2 } else { cases });
    if cfg!(miri) {
        config.failure_persistence = None;
    }
    config
}
