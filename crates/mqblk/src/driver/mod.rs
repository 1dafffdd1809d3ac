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
//! 5. Hand it to [`Device::with_driver`](crate::Device::with_driver) (or
//!    give [`Device::builder`](crate::Device::builder) its typed
//!    [`DriverConfig`]), or register it by name ([`register_driver`]) so
//!    that specs such as `mine:key=value,sched=bfq` open it.
//! 6. Offer what it can do besides requests (zone reports, direct access,
//!    block status, live attributes, power control, registered buffers, a
//!    backing file) through [`Driver::capabilities`] ([`Capabilities`]).
//!
//! ```
//! use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq};
//! use mqblk::{QueueLimits, Status, TagSetConfig};
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
//! assert_eq!(dev.stats().dispatched, 1);
//! ```
//!
//! [`Driver`] shows a driver that completes on a thread of its own,
//! [`Rq`] the request's fields and data, [`QueueRqResult`] a busy device,
//! [`TimeoutAction`] a timeout handler, and [`register_driver`] opening a
//! driver from a spec.
//!
//! Threads: completion entry points may be called from any thread, but only
//! from threads the driver owns (joined in `shutdown`) or from a thread that
//! is inside a call from the block layer (inline completion, `poll`). That is
//! what keeps the queue alive while a completion runs.

mod backing;
mod caps;
mod config;
mod extents;
mod registry;

use std::time::Duration;

pub use backing::BackingFile;
pub use caps::{Attributes, BlockStatus, Capabilities, DirectAccess, FixedBuffers, PowerControl, ReadFn, Zoned};
pub use config::{DriverConfig, DriverConfigObject, OpenFn, SpecConfig};
pub use extents::{extents_by, MAX_EXTENTS};
pub(crate) use registry::driver as registered;
pub use registry::{driver_names, register_driver, register_driver_config, DriverFactory};

// What a driver works with, from the block layer's own modules.
pub use crate::bio::op_is_sync;
pub use crate::completion::CompletionBatch;
pub use crate::limits::{
    QueueLimits, DEFAULT_MAX_SECTORS, DEFAULT_MAX_SEGMENTS, DEFAULT_MAX_SEGMENT_SIZE, DEFAULT_SEG_BOUNDARY_MASK,
    MIN_SEGMENT_SIZE,
};
pub use crate::request::{Rq, RqList, Segments, SegmentsMut};
pub use crate::tag::TagSetConfig;

/// A hardware queue as its driver sees it (the kernel's
/// `struct blk_mq_hw_ctx *hctx`): which one, its depth, and whether it is a
/// poll queue. Every call about one hardware queue gets it (example:
/// [`Driver`]).
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
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq};
/// use mqblk::{Device, QueueLimits, Status, TagSetConfig};
///
/// /// Busy once, then fine: the block layer keeps the request and retries it.
/// struct BusyOnce(AtomicBool);
///
/// impl Driver for BusyOnce {
///     fn name(&self) -> &str { "busy-once" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 4) }
///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
///     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
///         if !self.0.swap(true, Ordering::Relaxed) {
///             return QueueRqResult::Busy(rq);
///         }
///         rq.complete(Status::Ok);
///         QueueRqResult::Queued
///     }
/// }
///
/// let dev = Device::with_driver(Box::new(BusyOnce(AtomicBool::new(false))))?;
/// dev.client().write_at(&[0; 512], 0)?;
/// let stats = dev.stats();
/// assert_eq!((stats.busy, stats.dispatched, stats.completed), (1, 2, 1));
/// # Ok::<(), mqblk::Error>(())
/// ```
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
///
/// ```
/// use std::sync::Mutex;
/// use std::time::Duration;
/// use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq, TimedOutRq, TimeoutAction};
/// use mqblk::{Device, Error, QueueLimits, Status, TagSetConfig};
///
/// /// Never answers: the timeout handler ends what it holds.
/// struct Lost(Mutex<Vec<Rq>>);
///
/// impl Driver for Lost {
///     fn name(&self) -> &str { "lost" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 4) }
///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
///     fn rq_timeout(&self) -> Option<Duration> { Some(Duration::from_millis(10)) }
///     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
///         self.0.lock().unwrap().push(rq);
///         QueueRqResult::Queued
///     }
///     fn timeout(&self, _hctx: &Hctx, timed_out: TimedOutRq) -> TimeoutAction {
///         let mut held = self.0.lock().unwrap();
///         // The driver finds its request by driver tag.
///         match held.iter().position(|rq| rq.tag() == timed_out.tag) {
///             Some(i) => held.swap_remove(i).complete(Status::Timeout),
///             None => return TimeoutAction::ResetTimer,
///         }
///         TimeoutAction::Done
///     }
/// }
///
/// let dev = Device::with_driver(Box::new(Lost(Mutex::new(Vec::new()))))?;
/// let err = dev.client().write_at(&[0; 512], 0).unwrap_err();
/// assert!(matches!(err, Error::Status(Status::Timeout)));
/// assert_eq!(dev.stats().timeouts, 1);
/// # Ok::<(), mqblk::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutAction {
    /// Keep waiting: the deadline is pushed out by another `rq_timeout`.
    ResetTimer,
    /// The driver has completed, or will complete, the request itself.
    Done,
}

/// A request whose deadline passed, as the timeout handler sees it. The
/// driver finds its own state for the request by `tag` (example:
/// [`TimeoutAction`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedOutRq {
    /// Its hardware queue ([`Hctx::index`]).
    pub hctx_index: usize,
    /// Its driver tag ([`Rq::tag`]).
    pub tag: u32,
}

/// A block device driver (`struct blk_mq_ops`). The module docs list the
/// steps of writing one. Here a driver that completes on a thread of its
/// own, as a device's interrupt would, and stops it in `shutdown`:
///
/// ```
/// use std::sync::mpsc::{channel, Sender};
/// use std::sync::Mutex;
/// use std::thread::JoinHandle;
/// use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq};
/// use mqblk::{Device, QueueLimits, Status, TagSetConfig};
///
/// struct Threaded {
///     to_irq: Mutex<Option<Sender<Rq>>>,
///     irq: Mutex<Option<JoinHandle<()>>>,
/// }
///
/// impl Threaded {
///     fn new() -> Self {
///         let (to_irq, requests) = channel::<Rq>();
///         // The "interrupt": completes each request it receives.
///         let irq = std::thread::spawn(move || requests.into_iter().for_each(|rq| rq.complete(Status::Ok)));
///         Self { to_irq: Mutex::new(Some(to_irq)), irq: Mutex::new(Some(irq)) }
///     }
/// }
///
/// impl Driver for Threaded {
///     fn name(&self) -> &str { "threaded" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(2, 32) }
///     fn limits(&self) -> QueueLimits { QueueLimits::new(64 << 20, 4096) }
///     fn queue_rq(&self, hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
///         assert!(hctx.index() < 2 && hctx.queue_depth() == 32 && !hctx.is_poll());
///         let to_irq = self.to_irq.lock().unwrap();
///         to_irq.as_ref().expect("not shut down").send(rq).expect("the thread runs");
///         QueueRqResult::Queued
///     }
///     /// Closes the channel and joins the thread, which completes all it
///     /// was sent first: no request is left behind.
///     fn shutdown(&self) {
///         drop(self.to_irq.lock().unwrap().take());
///         if let Some(irq) = self.irq.lock().unwrap().take() {
///             irq.join().unwrap();
///         }
///     }
/// }
///
/// let dev = Device::with_driver(Box::new(Threaded::new()))?;
/// assert_eq!((dev.nr_hw_queues(), dev.limits().logical_block_size), (2, 4096));
/// let mut client = dev.client();
/// client.write_at(&[1; 8192], 0)?;
/// drop(client);
/// drop(dev); // the last handle: shutdown runs, and returns before the drop does
/// # Ok::<(), mqblk::Error>(())
/// ```
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
