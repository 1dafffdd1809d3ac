//! The request queue (`struct request_queue`): one per device. It ties the
//! driver, the queue limits, the hardware contexts with their tags, and the
//! clients' completion sinks together, and validates bios against the
//! limits.
//!
//! [`Device`] is the public, cloneable handle on a queue.
//!
//! The rest of the queue is in this folder, one concept a file:
//! sched_switch.rs installs a scheduler and switches it on a live queue
//! (freezing it); worker.rs runs the queue's worker (the kernel's kblockd
//! duties: delayed dispatch runs and request timeouts); stats.rs sums the
//! counters and writes the debugfs-like dump.
//!
//! Relies on: hctx/, tag.rs, client/, limits.rs, and a [`Driver`].

mod sched_switch;
mod stats;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::completion::ClientShared;
use crate::config::{QueueOptions, Wake};
use crate::driver::Driver;
use crate::error::{Error, SubmitError};
use crate::hctx::Hctx;
pub use crate::limits::{QueueLimits, DEFAULT_MAX_SECTORS, DEFAULT_MAX_SEGMENTS, MAX_BIO_BYTES};
use crate::plug::PlugNesting;
use crate::request::{Bio, Op, SECTOR_SHIFT};
use crate::sched::{Sched, SchedCtx};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::tag::{TagSetConfig, Tags};
use crate::timeout::TimeoutClock;

pub use stats::DeviceStats;
pub(crate) use worker::Kblockd;
use worker::Worker;

pub(crate) struct RequestQueue {
    driver: Arc<dyn Driver>,
    limits: QueueLimits,
    /// `limits.max_request_bytes(op)` for each op, indexed by `Op as usize`.
    max_request_bytes: [u64; crate::request::NR_OPS],
    tag_set: TagSetConfig,
    hctxs: Box<[Hctx]>,
    /// Client completion sinks not in use, for recycling: every sink lives
    /// as long as the queue so a completer can never reach a freed one.
    free_clients: Mutex<Vec<Arc<ClientShared>>>,
    /// Every sink ever made (their counters make up the stats).
    all_clients: Mutex<Vec<Arc<ClientShared>>>,
    plug_nesting: PlugNesting,
    /// `plug_sync` (QueueOptions), read once by each new client.
    pub(crate) plug_sync: bool,
    hybrid_poll_delay: Duration,
    /// The wakeup policy, for scheduler tags made later.
    wake: Wake,
    /// Every scheduler context ever installed: hctxs point into these, and
    /// they live as long as the queue (see `Hctx::sched`). Shared (`Arc`)
    /// so that the pointers the hctxs hold are derived from a shared
    /// reference that nothing reborrows mutably later.
    sched_contexts: Mutex<Vec<Arc<SchedCtx>>>,
    sched_name: Mutex<String>,
    /// Submissions wait at the door while the queue is frozen (a scheduler
    /// switch drains it).
    pub(crate) frozen: AtomicBool,
    switch_lock: Mutex<()>,
    client_seq: AtomicUsize,
    tag_waits: AtomicU64,
    tag_wait_ns: AtomicU64,
    timeouts: AtomicU64,
    splits: AtomicU64,
    /// Reads served by the driver's direct access (`Device::read_direct`).
    direct_reads: AtomicU64,
    /// Of those, reads lent past the call (`Device::read_direct_lent`).
    direct_reads_lent: AtomicU64,
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
}

impl RequestQueue {
    fn new(driver: Box<dyn Driver>, opts: QueueOptions) -> Result<Arc<Self>, Error> {
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
        let hctxs: Box<[Hctx]> = (0..tag_set.nr_hw_queues)
            .map(|i| {
                let policy = opts.wake.policy()?;
                let is_poll = i >= tag_set.nr_hw_queues - tag_set.poll_queues;
                let tags = Tags::new(&tag_set, policy);
                Ok(Hctx::new(i, tags, driver.clone(), is_poll, clock.clone(), kblockd.clone()))
            })
            .collect::<Result<Vec<_>, Error>>()?
            .into_iter()
            .collect();
        let max_request_bytes = Op::ALL.map(|op| limits.max_request_bytes(op));
        let q = Arc::new(Self {
            driver,
            max_request_bytes,
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
            tag_wait_ns: AtomicU64::new(0),
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
        });
        // Bind each hctx's request slots to it only now, through the queue's
        // final shared reference: a pointer taken before the hctxs moved
        // into the queue would be invalidated by the move.
        for hctx in q.hctxs.iter() {
            hctx.tags.bind(hctx);
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

    /// Whether hipri requests are polled on the default queues (hybrid).
    pub(crate) fn shared_poll(&self) -> bool {
        self.tag_set.shared_poll
    }

    pub(crate) fn nr_poll_queues(&self) -> usize {
        self.tag_set.poll_queues
    }

    #[inline(always)]
    pub(crate) fn hctx(&self, index: usize) -> &Hctx {
        &self.hctxs[index]
    }

    #[inline(always)]
    pub(crate) fn check_bio(&self, bio: &Bio) -> Result<(), SubmitError> {
        self.limits.check_bio(bio)
    }

    /// A read or write that passes `check_bio` as it is (limits.rs).
    #[inline(always)]
    pub(crate) fn plain_rw_ok(&self, bio: &Bio) -> bool {
        self.limits.plain_rw_ok(bio)
    }

    /// The largest read or write that is one request as it is: no split at
    /// `max_sectors` and, on zoned devices, none at a zone boundary (so 0:
    /// every zoned bio takes the general path, which checks its zone).
    pub(crate) fn plain_max_bytes(&self) -> u64 {
        if self.limits.zoned.is_some() {
            return 0;
        }
        self.max_request_bytes(Op::Read).min(self.max_request_bytes(Op::Write))
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
    fn acquire_client(&self, capacity: usize) -> Arc<ClientShared> {
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

    pub(crate) fn max_segments(&self) -> u32 {
        self.limits.max_segments
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
    }
}

impl Drop for RequestQueue {
    fn drop(&mut self) {
        // Normally done by the last user already (`put_user`).
        self.shutdown();
    }
}

/// A block device: a cheap, cloneable handle on a request queue. When the
/// last handle and the last client are gone, the device is shut down
/// (its threads joined, a backing file flushed and unlocked) before that
/// drop returns.
pub struct Device {
    q: Arc<RequestQueue>,
}

impl Clone for Device {
    fn clone(&self) -> Self {
        self.q.get_user();
        Self { q: self.q.clone() }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.q.put_user();
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("driver", &self.q.driver.name())
            .field("limits", &self.q.limits)
            .field("tag_set", &self.q.tag_set)
            .finish()
    }
}

impl Device {
    /// Opens a device from a spec such as
    /// `null:irqmode=2,completion_nsec=20000,memory_backed=1`.
    /// Block-layer keys (`wake=`, `sched=` and its tunables, ...) may appear
    /// in any driver's spec. The driver is a built-in one (`null`, `file`) or
    /// one added with [`crate::register_driver`].
    pub fn open(spec: &str) -> Result<Device, Error> {
        let (driver, opts) = crate::driver::open(spec)?;
        Self::with_driver_options(driver, opts)
    }

    /// A device over any driver, with the default block-layer options.
    pub fn with_driver(driver: Box<dyn Driver>) -> Result<Device, Error> {
        Self::with_driver_options(driver, QueueOptions::default())
    }

    /// A device over any driver with the given block-layer options.
    pub fn with_driver_options(driver: Box<dyn Driver>, opts: QueueOptions) -> Result<Device, Error> {
        Ok(Device { q: RequestQueue::new(driver, opts)? })
    }

    /// A client whose completion ring holds one hardware queue's depth.
    pub fn client(&self) -> Client {
        self.client_with_capacity(self.q.tag_set.queue_depth as usize)
    }

    /// A client that may have up to `capacity` I/Os outstanding (rounded up
    /// to a power of two). Clients are spread over the hardware queues.
    pub fn client_with_capacity(&self, capacity: usize) -> Client {
        assert!(capacity > 0, "client capacity must be positive");
        let shared = self.q.acquire_client(capacity);
        let seq = self.q.client_seq.fetch_add(1, Ordering::Relaxed);
        self.q.get_user();
        Client::new(self.q.clone(), shared, seq)
    }

    pub fn limits(&self) -> &QueueLimits {
        &self.q.limits
    }

    /// Registers a pool of fixed buffers with the driver (fio's
    /// `fixedbufs`): I/O whose buffer is a slot of `bufs` then skips the
    /// per-I/O pinning of its pages. Returns whether the driver uses them
    /// (the `file:` driver does; one pool per device, an error after).
    pub fn register_fixed_bufs(&self, bufs: &crate::FixedBufs) -> Result<bool, Error> {
        self.q.driver.register_buffers(bufs)
    }

    /// Which parts of `[offset, offset + len)` hold data, as (bytes, hole)
    /// extents covering a prefix of the range; None if the driver cannot
    /// tell (then all of it counts as data) or the range is out of bounds.
    pub fn block_status(&self, offset: u64, len: u64) -> Option<Vec<(u64, bool)>> {
        let mut out = Vec::new();
        self.block_status_into(offset, len, &mut out).then_some(out)
    }

    /// Whether `block_status` is cheap enough to run beside every large
    /// read (`Driver::block_status_is_cheap`).
    pub fn block_status_is_cheap(&self) -> bool {
        self.q.driver.block_status_is_cheap()
    }

    /// As `block_status`, into `out` (cleared first; no allocation once it
    /// has room); false where `block_status` gives None.
    pub fn block_status_into(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) -> bool {
        out.clear();
        let in_bounds = offset.checked_add(len).is_some_and(|end| end <= self.q.limits.capacity_bytes);
        in_bounds && len > 0 && self.q.driver.block_status(offset, len, out) && !out.is_empty()
    }

    /// Reads `[offset, offset + len)` by the driver's direct access
    /// (`Driver::read_direct`, the kernel's DAX): `f` gets the bytes as
    /// slices of the device's own memory, in order, in one or more calls,
    /// valid only during the call, and no request is made (so no tag, no
    /// scheduler, no plug: for a server that writes the bytes straight to
    /// a socket, with one copy fewer). None if the driver cannot serve the
    /// read this way (take the bio path then), or if the range is not one
    /// a read bio could have: empty, out of bounds or misaligned (the bio
    /// path refuses it with its error). Counted in `DeviceStats`.
    pub fn read_direct(
        &self,
        offset: u64,
        len: u64,
        f: &mut dyn FnMut(&[std::io::IoSlice<'_>]) -> std::io::Result<()>,
    ) -> Option<std::io::Result<()>> {
        self.direct((offset, len), false, f)
    }

    /// Whether `read_direct_lent` can serve reads (a memory-backed null
    /// device on a kernel with 4 KiB pages; it may still decline one).
    pub fn lends_past_reads(&self) -> bool {
        self.q.driver.lends_past_reads()
    }

    /// As `read_direct`, but what `f` gets stays as it is after the call,
    /// for as long as anyone holds it by reference, whatever is written or
    /// discarded meanwhile: `f` may hand the slices to the kernel
    /// (vmsplice into a pipe, splice into a socket), and whoever reads them
    /// there, whenever, reads the data of this read. None as for
    /// `read_direct`, and where the driver cannot lend past the call.
    /// Counted in `DeviceStats` (`direct_reads`, `direct_reads_lent`).
    pub fn read_direct_lent(
        &self,
        offset: u64,
        len: u64,
        f: &mut dyn FnMut(&[std::io::IoSlice<'_>]) -> std::io::Result<()>,
    ) -> Option<std::io::Result<()>> {
        self.direct((offset, len), true, f)
    }

    /// A direct read, `lent` past the call or not (the two above), after
    /// the range checks. Counted first: `f` may hand the data to a reader
    /// who then looks at the stats; a declined read is taken back.
    fn direct(
        &self,
        (offset, len): (u64, u64),
        lent: bool,
        f: &mut dyn FnMut(&[std::io::IoSlice<'_>]) -> std::io::Result<()>,
    ) -> Option<std::io::Result<()>> {
        if !self.direct_range_ok(offset, len) {
            return None;
        }
        let counters = [&self.q.direct_reads, &self.q.direct_reads_lent];
        let counters = &counters[..1 + usize::from(lent)];
        for c in counters {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let driver = &self.q.driver;
        let result = if lent { driver.read_direct_lent(offset, len, f) } else { driver.read_direct(offset, len, f) };
        if result.is_none() {
            for c in counters {
                c.fetch_sub(1, Ordering::Relaxed);
            }
        }
        result
    }

    /// A range a read bio could have: not empty, inside the device,
    /// aligned to its logical blocks, and not over the largest bio.
    fn direct_range_ok(&self, offset: u64, len: u64) -> bool {
        let limits = &self.q.limits;
        let lbs_mask = u64::from(limits.logical_block_size) - 1;
        let in_bounds = offset.checked_add(len).is_some_and(|end| end <= limits.capacity_bytes);
        len > 0 && in_bounds && (offset | len) & lbs_mask == 0 && len <= crate::limits::MAX_BIO_BYTES
    }

    /// Changes an attribute of the live device, as null_blk's configfs
    /// does: `set_attr("badblocks", "+2048-2055")` makes those sectors fail
    /// with EIO, `"-2048-2055"` heals them. Errors name the key and what is
    /// wrong; a refused write changes nothing.
    pub fn set_attr(&self, key: &str, value: &str) -> Result<(), Error> {
        self.q.driver.set_attr(key, value)
    }

    /// Cuts the power of a device with a volatile write cache (null
    /// `cache_size`): writes no FLUSH or FUA made durable are lost, and the
    /// device goes on at once with the durable state. Returns the cache
    /// pages lost; an error if the device has no such cache.
    pub fn power_cut(&self) -> Result<u64, Error> {
        self.q.driver.power_cut(false)
    }

    /// A power cut that keeps the power off: as `power_cut`, and every
    /// write, discard, write zeroes and flush after it is dropped (though
    /// acknowledged, as dm-flakey's drop_writes) until `power_on`, so a
    /// file system still mounted cannot write past the cut.
    pub fn power_off(&self) -> Result<u64, Error> {
        self.q.driver.power_cut(true)
    }

    /// Ends `power_off`: the device takes writes again. Returns the
    /// requests dropped while it was off.
    pub fn power_on(&self) -> Result<u64, Error> {
        self.q.driver.power_on()
    }

    /// The value of a live attribute (`badblocks`: `START-END` ranges,
    /// `:`-separated).
    pub fn attr(&self, key: &str) -> Result<String, Error> {
        self.q.driver.attr(key)
    }

    /// Up to `nr` zones from the one holding byte `offset`
    /// (`blkdev_report_zones`). Errors: `Error::Status` with NotSupp (the
    /// device is not zoned) or Invalid (`offset` lies past its end).
    pub fn report_zones(&self, offset: u64, nr: usize) -> Result<Vec<crate::zoned::Zone>, Error> {
        use crate::status::Status;
        if self.q.limits.zoned.is_none() {
            return Err(Error::Status(Status::NotSupp));
        }
        if offset >= self.q.limits.capacity_bytes {
            return Err(Error::Status(Status::Invalid));
        }
        let mut out = Vec::with_capacity(nr.min(4096));
        self.q.driver.report_zones(offset >> SECTOR_SHIFT, nr, &mut out).map_err(Error::Status)?;
        Ok(out)
    }

    pub fn tag_set(&self) -> &TagSetConfig {
        &self.q.tag_set
    }

    pub fn nr_hw_queues(&self) -> usize {
        self.q.nr_hw_queues()
    }

    pub fn driver_name(&self) -> &str {
        self.q.driver.name()
    }

    pub fn stats(&self) -> DeviceStats {
        self.q.stats()
    }

    /// Tags currently allocated over all hardware queues (a snapshot).
    pub fn busy_tags(&self) -> u32 {
        self.q.hctxs.iter().map(|h| h.tags.busy()).sum()
    }

    /// The scheduler in use (`none`, `mq-deadline`, `kyber`, `bfq`).
    pub fn scheduler(&self) -> String {
        self.q.sched_name.lock().clone()
    }

    /// Switches the I/O scheduler of the live device, like writing
    /// `queue/scheduler` (whose string form, `"bfq,limit_depths=0"`,
    /// parses into a [`Sched`]). In-flight requests drain first (new
    /// submissions wait); none is lost. Fails, leaving the scheduler as it
    /// was, on a bad tunable, or if the queue does not drain within 30 s
    /// (a thread holding requests in a plug).
    pub fn set_scheduler(&self, sched: Sched) -> Result<(), Error> {
        self.q.set_scheduler(&sched, Duration::from_secs(30))
    }

    /// A debugfs-like dump of every hardware queue and sbitmap.
    pub fn show_stats(&self) -> String {
        self.q.show()
    }
}
