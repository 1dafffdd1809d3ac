//! The request queue (`struct request_queue`): one per device. It ties the
//! driver, the queue limits, the hardware contexts with their tags, and the
//! clients' completion sinks together, and validates bios against the
//! limits.
//!
//! [`Device`](crate::Device) is the public, cloneable handle on a queue.
//!
//! The rest of the queue is in this folder, one concept a file:
//! sched_switch.rs installs a scheduler and switches it on a live queue
//! (freezing it); worker.rs runs the queue's worker (the kernel's kblockd
//! duties: delayed dispatch runs and request timeouts); stats.rs sums the
//! counters and writes the debugfs-like dump.
//!
//! Relies on: hctx/, tag.rs, client/, limits.rs, and a [`Driver`].

mod config;
mod sched_switch;
mod stats;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use crate::completion::ClientShared;
use crate::driver::Driver;
use crate::error::{Error, SubmitError};
use crate::hctx::timeout::TimeoutClock;
use crate::hctx::HwCtx;
pub(crate) use crate::limits::QueueLimits;
use crate::request::{Bio, Op};
use crate::sched::SchedCtx;
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::tag::{TagSetConfig, Tags};
use crate::trace::Tracer;

pub use config::{PlugNesting, QueueConfig, Wake};
pub use stats::DeviceStats;
pub(crate) use worker::Kblockd;
use worker::Worker;

pub(crate) struct RequestQueue {
    pub(crate) driver: Arc<dyn Driver>,
    pub(crate) limits: QueueLimits,
    /// `limits.max_request_bytes(op)` for each op, indexed by `Op as usize`.
    max_request_bytes: [u64; crate::request::NR_OPS],
    /// The segment limits may bind a request of one buffer (not
    /// `one_buffer_splits_by_size`): such bios are counted too.
    pub(crate) segments_bind_one_buffer: bool,
    pub(crate) tag_set: TagSetConfig,
    pub(crate) hctxs: Box<[HwCtx]>,
    /// Client completion sinks not in use, for recycling: every sink lives
    /// as long as the queue so a completer can never reach a freed one.
    free_clients: Mutex<Vec<Arc<ClientShared>>>,
    /// Every sink ever made (their counters make up the stats).
    all_clients: Mutex<Vec<Arc<ClientShared>>>,
    plug_nesting: PlugNesting,
    /// `plug_sync` (QueueConfig), read once by each new client.
    pub(crate) plug_sync: bool,
    hybrid_poll_delay: Duration,
    /// The wakeup policy, for scheduler tags made later.
    wake: Wake,
    /// Every scheduler context ever installed: hctxs point into these, and
    /// they live as long as the queue (see `HwCtx::sched`). Shared (`Arc`)
    /// so that the pointers the hctxs hold are derived from a shared
    /// reference that nothing reborrows mutably later.
    sched_contexts: Mutex<Vec<Arc<SchedCtx>>>,
    pub(crate) sched_name: Mutex<String>,
    /// Submissions wait at the door while the queue is frozen (a scheduler
    /// switch drains it).
    pub(crate) frozen: AtomicBool,
    switch_lock: Mutex<()>,
    pub(crate) client_seq: AtomicUsize,
    tag_waits: AtomicU64,
    /// Of those, waits for a scheduler tag.
    sched_tag_waits: AtomicU64,
    tag_wait_ns: AtomicU64,
    /// Scheduler tags per hardware queue (0: no scheduler).
    nr_requests: AtomicU32,
    /// The configured nr_requests (None: the default), for every
    /// scheduler installed, at creation or by a live switch.
    nr_requests_config: Option<u32>,
    timeouts: AtomicU64,
    splits: AtomicU64,
    /// Reads served by the driver's direct access (`Device::read_direct`).
    pub(crate) direct_reads: AtomicU64,
    /// Of those, reads lent past the call (`Device::read_direct_lent`).
    pub(crate) direct_reads_lent: AtomicU64,
    clock: Arc<TimeoutClock>,
    /// Wakes the worker (delayed runs, timeout ticks).
    kblockd: Arc<Kblockd>,
    worker: Mutex<Option<Worker>>,
    /// Device handles and clients alive. The last one to go shuts the
    /// queue down on its own thread (`put_user`): the worker thread holds
    /// the queue for a moment on each run, and were it left to drop the
    /// last reference, the shutdown (the driver's threads, a backing
    /// file's flush and lock) would finish on the worker, after the user's
    /// drop had returned.
    users: AtomicUsize,
    shut_down: AtomicBool,
    /// The blktrace of this queue (`blktrace=DIR`), if it is traced.
    pub(crate) trace: Option<Arc<Tracer>>,
}

impl RequestQueue {
    pub(crate) fn new(driver: Box<dyn Driver>, opts: QueueConfig) -> Result<Arc<Self>, Error> {
        let driver: Arc<dyn Driver> = Arc::from(driver);
        let tag_set = driver.tag_set();
        tag_set.validate()?;
        let limits = driver.limits();
        limits.validate().map_err(Error::Setup)?;
        let rq_timeout = match opts.io_timeout_ms {
            Some(ms) => Some(std::time::Duration::from_millis(ms)),
            None => driver.rq_timeout(),
        };
        let clock = Arc::new(TimeoutClock::new(rq_timeout));
        let kblockd = Arc::new(Kblockd::new());
        let trace = match &opts.blktrace {
            Some(dir) => Some(Tracer::start(dir, driver.name())?),
            None => None,
        };
        let hctxs: Box<[HwCtx]> = (0..tag_set.nr_hw_queues)
            .map(|i| {
                let policy = opts.wake.policy()?;
                let is_poll = i >= tag_set.nr_hw_queues - tag_set.poll_queues;
                let tags = Tags::new(&tag_set, policy);
                let hctx = HwCtx::new(i, tags, driver.clone(), is_poll, clock.clone(), kblockd.clone());
                Ok(hctx.traced(trace.clone()))
            })
            .collect::<Result<Vec<_>, Error>>()?
            .into_iter()
            .collect();
        let max_request_bytes = Op::ALL.map(|op| limits.max_request_bytes(op));
        let max_rw = max_request_bytes[Op::Read as usize].max(max_request_bytes[Op::Write as usize]);
        let segments_bind_one_buffer = !limits.one_buffer_splits_by_size(max_rw);
        let q = Arc::new(Self {
            driver,
            max_request_bytes,
            segments_bind_one_buffer,
            limits,
            tag_set,
            hctxs,
            free_clients: Mutex::new(Vec::new()),
            all_clients: Mutex::new(Vec::new()),
            plug_nesting: opts.plug_nesting,
            plug_sync: opts.plug_sync,
            hybrid_poll_delay: Duration::from_micros(opts.hybrid_poll_delay_us.into()),
            wake: opts.wake.clone(),
            sched_contexts: Mutex::new(Vec::new()),
            sched_name: Mutex::new("none".to_string()),
            frozen: AtomicBool::new(false),
            switch_lock: Mutex::new(()),
            client_seq: AtomicUsize::new(0),
            tag_waits: AtomicU64::new(0),
            sched_tag_waits: AtomicU64::new(0),
            tag_wait_ns: AtomicU64::new(0),
            nr_requests: AtomicU32::new(0),
            nr_requests_config: opts.nr_requests,
            timeouts: AtomicU64::new(0),
            splits: AtomicU64::new(0),
            direct_reads: AtomicU64::new(0),
            direct_reads_lent: AtomicU64::new(0),
            clock,
            kblockd,
            worker: Mutex::new(None),
            // The Device that `Device::with_driver_options` makes of it.
            users: AtomicUsize::new(1),
            shut_down: AtomicBool::new(false),
            trace,
        });
        // Bind each hctx's request slots to it only now, through the queue's
        // final shared reference: a pointer taken before the hctxs moved
        // into the queue would be invalidated by the move.
        for hctx in q.hctxs.iter() {
            hctx.tags.pool.bind(hctx.erased(), hctx.index() as u32, q.limits.seg_limits());
        }
        q.start_worker()?;
        q.install_scheduler(&opts.sched, opts.nr_requests)?;
        Ok(q)
    }

    pub(crate) fn nr_hw_queues(&self) -> usize {
        self.hctxs.len()
    }

    /// Default (non-poll) hardware queues: the first ones.
    pub(crate) fn nr_default_queues(&self) -> usize {
        self.hctxs.len() - self.tag_set.poll_queues
    }

    /// Whether every request is reaped by its submitter's polls.
    pub(crate) fn submitter_reaps(&self) -> bool {
        self.tag_set.submitter_reaps
    }

    /// Whether hipri requests are polled on the default queues (notification
    /// toggling, null `poll_mode=toggle`).
    pub(crate) fn shared_poll(&self) -> bool {
        self.tag_set.shared_poll
    }

    pub(crate) fn nr_poll_queues(&self) -> usize {
        self.tag_set.poll_queues
    }

    #[inline(always)]
    pub(crate) fn hctx(&self, index: usize) -> &HwCtx {
        &self.hctxs[index]
    }

    #[inline(always)]
    pub(crate) fn check_bio(&self, bio: &Bio) -> Result<(), SubmitError> {
        self.limits.check_bio(bio)
    }

    /// A read or write no longer than `plain_max_bytes` that passes
    /// `check_bio` as it is (limits.rs); `fit_segs` as there.
    #[inline(always)]
    pub(crate) fn plain_rw_ok(&self, bio: &Bio, fit_segs: u64) -> bool {
        self.limits.plain_rw_ok_within_max(bio, fit_segs)
    }

    /// A vectored bio the plain path may take (limits.rs).
    #[inline(always)]
    pub(crate) fn plain_vectored_ok(&self, bio: &Bio) -> bool {
        self.limits.plain_vectored_ok(bio)
    }

    /// The largest read or write that is one request as it is: no split at
    /// `max_sectors` and, on zoned devices, none at a zone boundary (so 0:
    /// every zoned bio takes the general path, which checks its zone).
    /// A traced queue takes the general path for every bio too (its event
    /// points are there: trace/), and so does every bio of a queue whose
    /// segment limits could bind a request of one buffer (segment.rs: the
    /// plain path counts no segments).
    pub(crate) fn plain_max_bytes(&self) -> u64 {
        if self.limits.zoned.is_some() || self.trace.is_some() {
            return 0;
        }
        if self.segments_bind_one_buffer {
            return 0;
        }
        // Within the largest bio too: the plain path's checks leave that
        // bound to this one (`plain_rw_ok`).
        self.max_request_bytes(Op::Read).min(self.max_request_bytes(Op::Write)).min(crate::limits::MAX_BIO_BYTES)
    }

    /// The queue's segment limits (segment.rs).
    #[inline(always)]
    pub(crate) fn seg_limits(&self) -> crate::segment::SegLimits {
        self.limits.seg_limits()
    }

    /// The logical block size in bytes.
    #[inline(always)]
    pub(crate) fn logical_block_size(&self) -> u64 {
        u64::from(self.limits.logical_block_size)
    }

    /// Bytes from `offset` to the end of its zone (u64::MAX: not zoned).
    #[inline(always)]
    pub(crate) fn bytes_to_zone_end(&self, offset: u64) -> u64 {
        self.limits.bytes_to_zone_end(offset)
    }

    /// Whether a merge keeps a zoned device's rules: the request stays in
    /// one zone, and writes only grow at the back (a front merge would
    /// reach the zone before a bio submitted earlier). Always true when not
    /// zoned.
    #[inline]
    pub(crate) fn zone_merge_ok(
        &self,
        rq_sector: u64,
        rq_sectors: u32,
        bio: &crate::merge::BioPos,
        front: bool,
    ) -> bool {
        let Some(z) = &self.limits.zoned else { return true };
        if front && bio.op.is_write() {
            return false;
        }
        let start = rq_sector.min(bio.sector);
        let end = (rq_sector + u64::from(rq_sectors)).max(bio.sector + u64::from(bio.nr_sectors));
        z.zone_no(start) == z.zone_no(end - 1)
    }

    /// The largest request of `op` in bytes (precomputed per op).
    #[inline(always)]
    pub(crate) fn max_request_bytes(&self, op: Op) -> u64 {
        self.max_request_bytes[op as usize]
    }

    /// A completion sink with room for `capacity` completions, recycled if
    /// one is free.
    pub(crate) fn acquire_client(&self, capacity: usize) -> Arc<ClientShared> {
        let mut free = self.free_clients.lock();
        if let Some(pos) = free.iter().position(|c| c.capacity() >= capacity) {
            return free.swap_remove(pos);
        }
        let shared = Arc::new(ClientShared::new(capacity));
        self.all_clients.lock().push(shared.clone());
        shared
    }

    pub(crate) fn plug_nesting(&self) -> PlugNesting {
        self.plug_nesting
    }

    /// How long a client waiting for polled I/O sleeps before spinning.
    pub(crate) fn hybrid_poll_delay(&self) -> Duration {
        self.hybrid_poll_delay
    }

    pub(crate) fn release_client(&self, shared: Arc<ClientShared>) {
        self.free_clients.lock().push(shared);
    }

    /// A new device handle or client.
    pub(crate) fn get_user(&self) {
        self.users.fetch_add(1, Ordering::Relaxed);
    }

    /// A device handle or client is gone; the last one shuts the queue
    /// down here, before its drop returns.
    pub(crate) fn put_user(&self) {
        if self.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shutdown();
        }
    }

    /// Stops the driver, then the worker (joining both), once.
    fn shutdown(&self) {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        // Stop the driver first: its threads complete every request they
        // hold while the hctxs and client sinks are still alive.
        self.driver.shutdown();
        self.stop_worker();
        if let Some(trace) = &self.trace {
            // Errors were the user's to see through `Device::blktrace_stop`.
            let _ = trace.stop();
        }
    }

    /// The blktrace of this queue, if it is traced.
    #[inline(always)]
    pub(crate) fn trace(&self) -> Option<&Tracer> {
        self.trace.as_deref()
    }
}

impl Drop for RequestQueue {
    fn drop(&mut self) {
        // Normally done by the last user already (`put_user`).
        self.shutdown();
    }
}
