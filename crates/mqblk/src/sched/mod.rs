//! I/O schedulers (the kernel's elevators, block/elevator.c and
//! blk-mq-sched.c).
//!
//! With a scheduler, a request takes a *scheduler tag* when it is allocated
//! (one of `nr_requests` per hardware queue, default 2 x min(queue_depth,
//! 128)), possibly limited to a shallow depth the scheduler chooses per op
//! (`limit_depth`: the fix of "bfq: limit tags for writes and async I/O", which keeps async writes from taking
//! every tag), and is inserted into the scheduler. The hardware queue then
//! asks the scheduler for requests to dispatch and gives each a *driver tag*
//! without ever sleeping; when driver tags run out, the queue is run again
//! when a request completes (hctx/dispatch.rs `run_dispatch_list`).
//!
//! An [`Elevator`] keeps its queued requests (their `Rq` tokens) per
//! hardware queue and decides the order. `none` means no elevator at all.
//! A request that arrives at an empty elevator with a driver tag free may
//! go to the driver at once if the elevator agrees (`dispatch_direct`):
//! the order is the same, the insert/dispatch round trip is saved.
//!
//! Relies on: hctx/ for dispatch, tag.rs for the scheduler tags,
//! merge.rs for merging bios into queued requests.

mod bfq;
mod choice;
mod deadline;
mod kyber;
pub(crate) mod registry;

use std::fmt;

use crate::config::SpecParams;
pub use crate::merge::{BioPos, MergeKind};
pub use crate::request::DoneInfo;
use crate::tag::Tags;

pub(crate) use bfq::Bfq;
pub use choice::{BfqTunables, DeadlineTunables, KyberTunables, Sched};
pub(crate) use deadline::MqDeadline;
pub(crate) use kyber::Kyber;
// What an elevator works with, from the block layer's own modules.
pub use crate::bio::{op_is_sync, IoPrio, IoPrioClass, Op, ReqFlags};
pub use crate::request::{Rq, RqList};
pub use registry::{elevator_names, register_elevator, ElevatorFactory};

/// Scheduler names `sched=` accepts.
pub const SCHEDULERS: &[&str] = &["none", "mq-deadline", "kyber", "bfq"];

/// An I/O scheduler (`struct elevator_mq_ops`). One instance serves a whole
/// device; `hctx` arguments are hardware queue indexes. Every method may be
/// called from any thread; implementations lock their per-queue state.
///
/// A first-in, first-out elevator whose async requests may hold only
/// `async_depth` scheduler tags, registered as `fifo`:
///
/// ```
/// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
/// # ram::register();
/// use std::fmt::Write as _;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Mutex;
/// use mqblk::sched::{elevator_names, op_is_sync, register_elevator, DoneInfo, Elevator, ElevatorArgs};
/// use mqblk::sched::{Op, ReqFlags, Rq, RqList};
/// use mqblk::{Device, Sched};
///
/// /// Sync requests completed by every `fifo` of the process.
/// static SYNC_DONE: AtomicU64 = AtomicU64::new(0);
///
/// struct Fifo {
///     queues: Vec<Mutex<RqList>>, // one per hardware queue
///     async_depth: u32,
/// }
///
/// impl Elevator for Fifo {
///     fn limit_depth(&self, _hctx: usize, op: Op, flags: ReqFlags) -> Option<u32> {
///         (!op_is_sync(op, flags)).then_some(self.async_depth)
///     }
///     fn min_shallow_depth(&self) -> u32 {
///         self.async_depth
///     }
///     fn insert_requests(&self, hctx: usize, rqs: &mut RqList) {
///         let mut queue = self.queues[hctx].lock().unwrap();
///         while let Some(rq) = rqs.pop_front() {
///             queue.push_back(rq);
///         }
///     }
///     fn dispatch_request(&self, hctx: usize) -> Option<Rq> {
///         self.queues[hctx].lock().unwrap().pop_front()
///     }
///     fn has_work(&self, hctx: usize) -> bool {
///         !self.queues[hctx].lock().unwrap().is_empty()
///     }
///     fn finish_request(&self, _hctx: usize, done: &DoneInfo) {
///         if done.is_sync() {
///             SYNC_DONE.fetch_add(1, Ordering::Relaxed);
///         }
///     }
///     fn show(&self, out: &mut String) {
///         let _ = writeln!(out, "async_depth={}", self.async_depth);
///     }
/// }
///
/// /// Builds a `fifo` for a device: `sched=fifo,async_depth=N` in a spec.
/// fn fifo(args: &ElevatorArgs) -> Result<Box<dyn Elevator>, mqblk::Error> {
///     let async_depth = args.tunables.u64_in("async_depth", 8, 1, args.nr_requests.into())? as u32;
///     let queues = (0..args.nr_hw_queues).map(|_| Mutex::new(RqList::with_capacity(args.nr_requests as usize)));
///     Ok(Box::new(Fifo { queues: queues.collect(), async_depth }))
/// }
///
/// register_elevator("fifo", &["async_depth"], fifo);
/// assert!(elevator_names().iter().any(|name| name == "fifo"));
///
/// let dev = Device::open("ram:size=64,irqmode=0,sched=fifo,async_depth=4")?;
/// assert_eq!(dev.scheduler(), "fifo");
/// let mut client = dev.client();
/// client.write_at(&[1; 4096], 0)?; // async: limited to 4 scheduler tags
/// client.read_at(&mut [0; 4096], 0)?; // sync
/// assert_eq!(SYNC_DONE.load(Ordering::Relaxed), 1);
/// assert!(dev.show_stats().contains("async_depth=4"));
///
/// // Chosen by name, with its tunables, like the built-in ones.
/// dev.set_scheduler("fifo,async_depth=2".parse()?)?;
/// assert!(Sched::custom("fifo").validate().is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Merging bios into queued requests: see [`MergeKind`].
pub trait Elevator: Send + Sync + 'static {
    /// The most scheduler tags an allocation of this op and flags may use
    /// (a shallow depth), or None for all of them.
    fn limit_depth(&self, _hctx: usize, _op: Op, _flags: ReqFlags) -> Option<u32> {
        None
    }

    /// The smallest depth `limit_depth` may return (sizes the tag wakeup
    /// batch, as the kernel's `depth_updated` does).
    fn min_shallow_depth(&self) -> u32 {
        u32::MAX
    }

    /// The scheduler tags per hardware queue changed (at installation, and
    /// whenever nr_requests would change): recompute depth-derived limits.
    fn depth_updated(&self, _nr_requests: u32) {}

    /// A request was allocated for this scheduler and initialised, before
    /// it is plugged or inserted (the kernel's `prepare_request`).
    fn prepare_request(&self, _hctx: usize, _rq: &mut Rq) {}

    /// A request arrives while nothing is queued in this elevator, no
    /// request waits on the dispatch list and a driver tag is free: return
    /// `Ok(rq)` to have it dispatched at once (the elevator accounts it as
    /// inserted and dispatched: the order it would have chosen anyway), or
    /// `Err(rq)` to have it inserted. Default: always insert.
    fn dispatch_direct(&self, _hctx: usize, rq: Rq) -> Result<Rq, Rq> {
        Err(rq)
    }

    /// Takes requests (in order) into the scheduler. `rqs` is empty after.
    fn insert_requests(&self, hctx: usize, rqs: &mut RqList);

    /// The next request to hand to the driver, if any.
    fn dispatch_request(&self, hctx: usize) -> Option<Rq>;

    /// Whether `dispatch_request` would return a request. Asked only while
    /// the framework counts requests queued in this elevator (so "none
    /// queued" never reaches it); an elevator whose every queued request
    /// is dispatchable answers true. Called on every completion: be cheap.
    fn has_work(&self, hctx: usize) -> bool;

    /// When a scheduler that just refused to dispatch (`dispatch_request`
    /// gave None with work queued) will dispatch again on its own, in ns
    /// on `clock::now_ns`: bfq's idle slice timer. The framework runs the
    /// queue then; None: after the kernel's 3 ms delayed run.
    fn next_dispatch_ns(&self, _hctx: usize) -> Option<u64> {
        None
    }

    /// Merges a bio into a queued request if one is contiguous: finds a
    /// candidate and calls `attach(rq, kind)`, which applies the merge
    /// rules and returns whether it merged. Default: no merging.
    fn bio_merge(&self, _hctx: usize, _bio: &BioPos, _attach: &mut dyn FnMut(&mut Rq, MergeKind) -> bool) -> bool {
        false
    }

    /// A request of this scheduler completed (before its tags are freed).
    fn finish_request(&self, _hctx: usize, _done: &DoneInfo) {}

    /// Tunables and state for the stats dump.
    fn show(&self, _out: &mut String) {}
}

/// What an elevator factory (see [`register_elevator`]) builds for:
/// the device's hardware queues, the scheduler tags of each (the most
/// requests the elevator holds per hardware queue), and the tunables given
/// with its name (`"sstf,key=value"`; example: [`Elevator`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct ElevatorArgs {
    /// The device's hardware queues (`hctx` arguments run below it).
    pub nr_hw_queues: usize,
    /// Scheduler tags per hardware queue: the most requests the elevator
    /// holds in one.
    pub nr_requests: u32,
    /// The tunables given with the elevator's name, each one it
    /// registered.
    pub tunables: SpecParams,
}

/// The default scheduler tag depth: 2 x min(queue_depth, 128).
///
/// ```
/// assert_eq!(mqblk::sched::default_nr_requests(64), 128);
/// assert_eq!(mqblk::sched::default_nr_requests(1024), 256);
/// ```
pub fn default_nr_requests(queue_depth: u32) -> u32 {
    2 * queue_depth.min(128)
}

/// A hardware queue's scheduler: the elevator and the scheduler tags with
/// their request slots.
pub(crate) struct SchedCtx {
    /// The name `sched=` chose it by (the registry's, not the elevator's).
    pub(crate) name: String,
    pub(crate) elevator: std::sync::Arc<dyn Elevator>,
    pub(crate) tags: Tags,
    /// Requests inserted and not yet dispatched (kept by the framework, so
    /// the common "nothing queued" check is one load, no call).
    pub(crate) queued: crate::sync::AtomicU32,
}

impl SchedCtx {
    /// Whether the elevator has a request to dispatch now: one load when
    /// nothing is queued.
    #[inline(always)]
    pub(crate) fn has_work(&self, hctx: usize) -> bool {
        self.queued.load(crate::sync::Ordering::SeqCst) != 0 && self.elevator.has_work(hctx)
    }
}

impl fmt::Debug for SchedCtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedCtx").field("elevator", &self.name).finish()
    }
}

/// A fixed-capacity table of queued request tokens, indexed by scheduler
/// tag: where elevators keep requests without allocating per I/O.
pub(crate) struct RqTable {
    slots: Vec<Option<Rq>>,
}

impl RqTable {
    pub(crate) fn new(nr_requests: u32) -> Self {
        Self { slots: (0..nr_requests).map(|_| None).collect() }
    }

    pub(crate) fn put(&mut self, rq: Rq) -> u32 {
        let tag = rq.sched_tag();
        let slot = &mut self.slots[tag as usize];
        assert!(slot.is_none(), "scheduler tag {tag} queued twice");
        *slot = Some(rq);
        tag
    }

    pub(crate) fn take(&mut self, tag: u32) -> Rq {
        self.slots[tag as usize].take().expect("a queued request")
    }

    pub(crate) fn get_mut(&mut self, tag: u32) -> &mut Rq {
        self.slots[tag as usize].as_mut().expect("a queued request")
    }
}
