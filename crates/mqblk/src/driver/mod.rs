//! The driver interface: what a block device implements, shaped like the
//! kernel's `struct blk_mq_ops`.
//!
//! # Writing a driver
//! 1. Say how many hardware queues and tags you want ([`Driver::tag_set`])
//!    and what the device looks like ([`Driver::limits`]).
//! 2. Implement [`Driver::queue_rq`]: you receive an [`Rq`] token and own the
//!    request until you call [`Rq::complete`]. Complete inline, or move the
//!    token to your completion thread and complete it there.
//! 3. If you batch submissions (ring a doorbell once per batch), do it when
//!    `last` is set or in [`Driver::commit_rqs`].
//! 4. Stop your threads in [`Driver::shutdown`]; every token they hold must
//!    be completed before it returns.
//! 5. Hand it to [`crate::Device::with_driver`] (or `Device::builder().driver`),
//!    or register a factory by name ([`register_driver`](crate::driver::register_driver)) so that
//!    specs such as `mine:key=value,sched=bfq` open it.
//!
//! ```
//! use mqblk::driver::{Driver, QueueRqResult};
//! use mqblk::{Hctx, QueueLimits, Rq, Status, TagSetConfig};
//!
//! /// Completes every request at once, successfully: the smallest driver.
//! struct Nop;
//!
//! impl Driver for Nop {
//!     fn name(&self) -> &str { "nop" }
//!     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 64) }
//!     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 30, 512) }
//!     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
//!         rq.complete(Status::Ok);
//!         QueueRqResult::Queued
//!     }
//! }
//!
//! let dev = mqblk::Device::with_driver(Box::new(Nop)).unwrap();
//! let mut client = dev.client();
//! client.write_at(&[7u8; 512], 4096).unwrap();
//! ```
//!
//! Threads: completion entry points may be called from any thread, but only
//! from threads the driver owns (joined in `shutdown`) or from a thread that
//! is inside a call from the block layer (inline completion, `poll`). That is
//! what keeps the queue alive while a completion runs.

mod caps;
mod config;
mod registry;

use std::time::Duration;

pub use caps::{
    extents_by, Attributes, BlockStatus, Capabilities, DirectAccess, FixedBuffers, PowerControl, ReadFn, Zoned,
    MAX_EXTENTS,
};
pub use config::{DriverConfig, DriverConfigObject, OpenFn, SpecConfig};
pub(crate) use registry::driver as registered;
pub use registry::{driver_names, register_driver, register_driver_config, DriverFactory};

// What a driver works with, from the block layer's own modules.
pub use crate::bio::op_is_sync;
pub use crate::limits::{QueueLimits, DEFAULT_MAX_SECTORS, DEFAULT_MAX_SEGMENTS};
pub use crate::request::{Rq, RqList};
pub use crate::tag::TagSetConfig;

/// A hardware queue as its driver sees it (the kernel's
/// `struct blk_mq_hw_ctx *hctx`): which one, its depth, and whether it is a
/// poll queue. Every call about one hardware queue gets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hctx {
    index: usize,
    queue_depth: u32,
    is_poll: bool,
}

impl Hctx {
    pub(crate) fn new(index: usize, queue_depth: u32, is_poll: bool) -> Self {
        Self { index, queue_depth, is_poll }
    }

    /// The hardware queue's index: 0 to `nr_hw_queues - 1`, the poll
    /// queues last.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Driver tags of the queue (the tag set's `queue_depth`).
    pub fn queue_depth(&self) -> u32 {
        self.queue_depth
    }

    /// Whether this is a poll queue: its requests are hipri, completed
    /// only when their submitter polls (`Driver::poll`), never by an
    /// interrupt-style completion.
    pub fn is_poll(&self) -> bool {
        self.is_poll
    }
}

/// What `queue_rq` did with a request.
#[derive(Debug)]
pub enum QueueRqResult {
    /// The driver owns the request now (it may already have completed it).
    Queued,
    /// The device is busy: the request comes back and the block layer
    /// retries it when a request of this hardware queue completes (or after
    /// a short delay if none is in flight), keeping its place in line.
    Busy(Rq),
}

/// What the timeout handler decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutAction {
    /// Keep waiting: the deadline is pushed out by another `rq_timeout`.
    ResetTimer,
    /// The driver has completed, or will complete, the request itself.
    Done,
}

/// A request whose deadline passed, as the timeout handler sees it. The
/// driver finds its own state for the request by `tag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedOutRq {
    pub hctx_index: usize,
    pub tag: u32,
}

/// A block device driver (`struct blk_mq_ops`).
pub trait Driver: Send + Sync + 'static {
    /// Short name for stats and errors ("null", "uring").
    fn name(&self) -> &str;

    /// Hardware queues and tags per queue. Read once at device creation.
    fn tag_set(&self) -> TagSetConfig;

    /// Capacity, block sizes and transfer limits. Read once at creation.
    fn limits(&self) -> QueueLimits;

    /// Issue one request on hardware queue `hctx`. The driver owns `rq`
    /// unless it returns it in `Busy`. `last` is false when more requests of
    /// the same batch follow at once: a driver that batches doorbells may
    /// wait for `last` (or `commit_rqs`) before starting the hardware.
    fn queue_rq(&self, hctx: &Hctx, rq: Rq, last: bool) -> QueueRqResult;

    /// A batch ended without a `last == true` request reaching the driver
    /// (the last one was returned `Busy`): start whatever was queued.
    fn commit_rqs(&self, _hctx: &Hctx) {}

    /// Issue a plug's batch of requests for `hctx` at once (the kernel's
    /// `queue_rqs`). Take requests from the front of `rqs`; anything left in
    /// it on return (the driver was busy) is kept, in order, on the
    /// dispatch list and retried later. The default hands each request to
    /// `queue_rq`, `last` set on the final one, stops at the first `Busy`
    /// and calls `commit_rqs` if a request went in without `last`.
    fn queue_rqs(&self, hctx: &Hctx, rqs: &mut RqList) {
        let mut uncommitted = false;
        while let Some(rq) = rqs.pop_front() {
            let last = rqs.is_empty();
            match self.queue_rq(hctx, rq, last) {
                QueueRqResult::Queued => uncommitted = !last,
                QueueRqResult::Busy(rq) => {
                    rqs.push_front(rq);
                    break;
                }
            }
        }
        if uncommitted {
            self.commit_rqs(hctx);
        }
    }

    /// Reap completions of polled (hipri) requests on `hctx` from the
    /// calling thread; returns how many completed. Drivers without polling
    /// keep the default.
    fn poll(&self, _hctx: &Hctx) -> usize {
        0
    }

    /// As `poll`, but never sleeps: a driver whose `poll` may wait in the
    /// kernel for a completion (the file driver's `reap=client` rings)
    /// reaps only what is there. Others keep the default.
    fn reap(&self, hctx: &Hctx) -> usize {
        self.poll(hctx)
    }

    /// An fd that becomes readable when `reap` on `hctx` would find
    /// completions (an io_uring's fd), so that a client can wait for its
    /// polled I/O in poll(2) beside other fds. None: no such fd.
    fn poll_fd(&self, _hctx: &Hctx) -> Option<std::os::fd::RawFd> {
        None
    }

    /// Has the eventfd `fd` signalled whenever completions arrive on `hctx`
    /// that only a `reap` would collect (the file driver's `reap=client`
    /// rings register it with io_uring), or stops that (None). A client
    /// whose submitters reap calls it when it is given a completion fd, so
    /// an event loop can wait on that fd alone. Drivers that deliver
    /// completions themselves keep the default (nothing to do).
    fn set_notify_fd(&self, _hctx: &Hctx, _fd: Option<std::os::fd::RawFd>) -> Result<(), crate::Error> {
        Ok(())
    }

    /// A request has been in flight longer than `rq_timeout`.
    fn timeout(&self, _hctx: &Hctx, _rq: TimedOutRq) -> TimeoutAction {
        TimeoutAction::ResetTimer
    }

    /// How long a request may be in flight before `timeout` is called
    /// (None: never). The kernel's default is 30 s.
    fn rq_timeout(&self) -> Option<Duration> {
        Some(Duration::from_secs(30))
    }

    /// Stop the driver's threads. Every request token the driver holds must
    /// be completed before this returns. Called once, when the device goes.
    fn shutdown(&self) {}

    /// Driver lines for the debugfs-like stats dump.
    fn show(&self, _out: &mut String) {}

    /// The optional abilities this driver offers beside the request path
    /// (zone reports, direct access, block status, live attributes, power
    /// control, registered buffers: caps.rs). None by default.
    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities::none()
    }
}
