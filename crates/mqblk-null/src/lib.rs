//! null_blk in user space: a device that stores nothing (or, with
//! `memory_backed=1`, sparse pages in memory or a file) and completes requests inline,
//! on a completion thread, or after a timer, with the kernel module's
//! parameter names, defaults and meanings, for the mqblk block layer.
//!
//! [`register`] makes `null:` specs open null devices; [`NullConfig`] is
//! the same configuration typed.
//!
//! ```
//! use mqblk::Device;
//! use mqblk_null::{IrqMode, NullConfig};
//!
//! mqblk_null::register();
//! let dev = Device::open("null:size=64,irqmode=0,memory_backed=1")?;
//! let mut client = dev.client();
//! client.write_at(&[1; 4096], 8192)?; // 4096 bytes at byte offset 8192
//! let mut back = [0; 4096];
//! client.read_at(&mut back, 8192)?;
//! assert_eq!(back, [1; 4096]);
//!
//! // The same device from typed parts; its spec prints back.
//! let cfg = Device::builder(NullConfig::new().size_mb(64).irqmode(IrqMode::None).memory_backed(true));
//! assert_eq!(cfg.to_string(), "null:size=64,irqmode=0,memory_backed=1");
//! let dev = cfg.build()?;
//! assert_eq!(dev.limits().capacity_bytes, 64 << 20);
//! # Ok::<(), mqblk::Error>(())
//! ```
//!
//! # Keys
//!
//! | key | default | meaning |
//! |---|---|---|
//! | gb | 250 | size in GiB |
//! | size | 0 | size in MiB (overrides gb when set) |
//! | bs | 512 | logical block size: 512, 1024, 2048 or 4096 |
//! | submit_queues | 1 | hardware queues |
//! | poll_queues | 1 | poll queues besides them (hipri requests; completed when their submitter polls) |
//! | poll_mode | queues | `queues`: hipri requests go to the dedicated poll queues; `toggle`: no poll queues, every queue takes both kinds and turns its completion notifications off while hipri requests are in flight |
//! | hw_queue_depth | 64 | tags per hardware queue |
//! | irqmode | 1 | 0: complete inline, 1: softirq (completion thread), 2: timer |
//! | completion_nsec | 10000 | irqmode=2: time from submission to completion |
//! | irq_cpus | (any) | CPUs the completion threads run on, as ranges and `:`-separated lists (`2-3`, `0:2`; `,` separates spec keys): queue i's thread on the i-th CPU of the list, round-robin, as managed interrupts are spread over CPUs |
//! | memory_backed | 0 | keep written data (never-written blocks read zeros); discard, write zeroes and zone reset free its pages, as null_blk's do (the stats' `null/pages`, `null/store_pages_held`, `null/store_chunks_resident`) |
//! | discard | 0 | support discard (needs memory_backed) |
//! | cache_size | 0 | a volatile write cache of this many MiB (needs memory_backed; not zoned): writes are acknowledged from it, FLUSH and FUA make them durable, a power cut (`Device::power`) loses the rest |
//! | cache_mode | writeback | `writeback`: as above; `writethrough`: every write also reaches the medium before it completes (a power cut loses nothing; no volatile cache is advertised) |
//! | backing_file | (none) | memory_backed's data in this file instead of memory (mqblk's; not zoned): created sparse at the device's size, or reopened if it has exactly that size, so the durable state outlives the process; FLUSH and FUA `fdatasync` it |
//! | powercut_tear | 0 | a power cut first writes each cached page's logical blocks (bs) to the medium at random (torn multi-block writes; a block is never split) |
//! | mbps | 0 | bandwidth limit in MiB/s (0: none); with rotational or channels, the transfer rate of the head or of each channel |
//! | max_sectors | 255 | largest request in sectors (aligned down to bs) |
//! | max_segments | 128 | most physical segments one request may carry (the kernel's BLK_MAX_SEGMENTS): a merge that would pass it is refused, a bio with more is split |
//! | max_segment_size | 65536 | longest physical segment in bytes (the kernel's BLK_MAX_SEGMENT_SIZE; at least 4096): longer contiguous memory counts as several |
//! | virt_boundary_mask | 0 | segments that are not contiguous meet on this boundary (a power of two less one below 65535, e.g. 4095 for NVMe's PRP lists), else the bio is split there and merges that would make a gap are refused; needs max_segment_size unset (it becomes unlimited, as in the kernel) |
//! | rotational | 0 | rotational media: one request at a time, with seeks |
//! | seek_nsec | 8000000 | rotational: full-stroke seek time |
//! | channels | 0 | internal channels, each one request at a time for completion_nsec + transfer at mbps (0: unlimited; 1: a serial device) |
//! | jitter_pct | 0 | channels: each request's service time drawn uniformly within this many percent either side (0-90; 0: all alike, so channels started together finish together) |
//! | zoned | 0 | a zoned device: the keys below apply |
//! | zone_size | 256 | zone size in MB (a power of two) |
//! | zone_capacity | 0 | writable MB per zone (0: zone_size) |
//! | zone_nr_conv | 0 | conventional zones at the start |
//! | zone_max_open | 0 | open zones allowed (0: no limit) |
//! | zone_max_active | 0 | open + closed zones allowed (0: no limit) |
//! | zone_append_max_sectors | 0 | largest zone append, aligned down to the block size and at most the zone capacity (0: the capacity; with zoned_compat=6.1 taken as given, 0: the zone size) |
//! | zone_readonly | 0 | the last sequential zones start READONLY (before those of zone_offline) |
//! | zone_offline | 0 | the last sequential zones start OFFLINE |
//! | zone_full | 0 | the other sequential zones start FULL, write pointer at the capacity (Linux 6.12; refused with zoned_compat=6.1) |
//! | zoned_compat | 6.12 | the Linux whose zoned null_blk to follow: `6.12`, `7` (Linux 7.x: as 6.12), or `6.1` (Debian 12's, the first kernel oracle's): no zone write plugs, so after a failed write a write at the write pointer succeeds without a zone report first; no zone_full; zone appends up to the zone size |
//! | badblocks | (none) | sectors whose I/O fails with EIO: inclusive `START-END` ranges of 512-byte sectors, `:`-separated; on a live device the `badblocks` attribute takes `+START-END` and `-START-END` |
//! | badblocks_once | 0 | a bad range is cleared by the first I/O that fails on it |
//! | badblocks_partial_io | 0 | an I/O on a bad range transfers the blocks before the first bad sector, then fails |
//! | timeout | (none) | fault injection: requests lost until the block layer's timeout handler ends them with ETIMEDOUT, as the kernel's fault_attr `interval:probability:space:times` (`,` written `:`; fault.rs); with the block-layer key `io_timeout` (ms) to wait less than 30 s |
//! | requeue | (none) | fault injection: requests handed back busy and dispatched again (same syntax) |
//! | error_read, error_write, error_flush, error_discard | (none) | transient errors (mqblk's): requests of that op (discard: discard and write zeroes) fail with EIO without being handled, same syntax; a retry may succeed |
//! | zone_lock | per-zone | a lock per zone or one `global` device lock (the design before "null_blk: improve zone locking"); either spins without memory_backed and sleeps with it |
//!
//! # Source layout
//!
//! Relies on: the Driver trait, config.rs for the parameters (spec.rs
//! writes them back as a spec), data.rs for the data path, irq.rs for
//! completion threads (timer.rs for their timer in irqmode=2), toggle.rs
//! for queues shared by polled and interrupt-style requests, store.rs (mem/, or a file with
//! `backing_file`) for the data, cache.rs for the volatile write cache,
//! service.rs for the service models and the bandwidth limit, fault.rs
//! for fault injection, zoned/ for zones, caps.rs for the capabilities
//! offered besides the request path, show.rs for most of `show`.

mod badblocks;
mod cache;
mod caps;
mod config;
mod data;
mod fault;
mod irq;
mod mem;
mod service;
mod show;
mod spec;
mod splitmix;
mod store;
mod timer;
pub(crate) mod toggle;
pub mod zoned;

use std::collections::VecDeque;
use std::fmt::Write as _;

use mqblk::clock::{now_ns, wait_until};
use mqblk::config::SpecParams;
use mqblk::driver::Hctx;
use mqblk::driver::Rq;
use mqblk::driver::{Driver, QueueRqResult};
use mqblk::QueueLimits;
use mqblk::ReqFlags;
use mqblk::Status;
use mqblk::TagSetConfig;
use mqblk_sync::{AtomicU64, Mutex, Ordering};

use badblocks::BadBlocks;
use cache::WriteCache;
pub use config::{CacheMode, FaultSpec, IrqMode, NullConfig, PollMode};
use fault::{FaultAttr, Faults};
/// The most completions the irqmode=1 and 2 threads end before they wake
/// their clients: a job that keeps this many I/Os in flight is woken once
/// per batch.
pub use irq::BATCH_MAX as COMPLETION_BATCH;
use irq::{IrqQueue, Pending, INLINE_SPIN_NS};
use mem::MemStore;
use service::{Channels, Rotational, Throttle};
use store::{FileStore, Store};
use toggle::ToggleQueue;
use zoned::NullZoned;

/// Ends a request with the status `handle` decided. A failure after a
/// partial transfer (`badblocks_partial_io`) completes the first
/// `driver_data` bytes, which `handle` set (0 otherwise: the kernel's
/// `blk_mq_end_request` with an error).
#[inline]
fn end_rq(mut rq: Rq, status: Status) {
    let ok_bytes = *rq.driver_data();
    // Not complete_bytes(0, ..) for the rest: it counts a zero-length
    // request (a zone management op) as wholly transferred, hence Ok.
    if status == Status::Ok || ok_bytes == 0 {
        rq.complete(status);
    } else {
        rq.complete_bytes(ok_bytes, status);
    }
}

/// Makes `null:` specs open a null device (`Device::open("null:gb=1")`),
/// through the same registry an outside driver uses: a spec's `null` keys
/// parse into a [`NullConfig`]. Call it once before opening specs; calling
/// it again changes nothing.
///
/// ```
/// use mqblk::{Device, DeviceConfig, Error, Status};
/// use mqblk_null::NullConfig;
///
/// mqblk_null::register();
/// mqblk_null::register(); // again: nothing changes
/// let cfg = DeviceConfig::parse("null:gb=1,irqmode=0,badblocks=8-15")?;
/// assert_eq!(cfg.driver::<NullConfig>().unwrap().badblocks, [(8, 15)]);
/// let dev = cfg.build()?;
/// let mut client = dev.client();
/// assert!(matches!(client.read_at(&mut [0; 4096], 4096), Err(Error::Status(Status::IoErr))), "sectors 8-15");
/// // The badblocks attribute of the live device heals them.
/// dev.attributes().unwrap().set("badblocks", "-8-15")?;
/// client.read_at(&mut [0; 4096], 4096)?;
/// # Ok::<(), mqblk::Error>(())
/// ```
pub fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| mqblk::driver::register_driver_config("null", parse));
}

/// A `null:` spec's keys, typed.
fn parse(p: &SpecParams) -> Result<Box<dyn mqblk::driver::DriverConfig>, mqblk::config::ConfigError> {
    Ok(Box::new(NullConfig::from_params(p)?))
}

/// The null block device driver: what a [`NullConfig`] opens. Programs
/// usually let the device open it ([`register`], `Device::builder`); a
/// driver may also be made first and handed over.
///
/// ```
/// use mqblk::config::SpecParams;
/// use mqblk::Device;
/// use mqblk_null::{IrqMode, NullConfig, NullDriver};
///
/// let driver = NullDriver::new(NullConfig::new().gb(1).irqmode(IrqMode::None))?;
/// let dev = Device::with_driver(Box::new(driver))?;
/// assert_eq!((dev.driver_name(), dev.limits().capacity_bytes), ("null", 1 << 30));
///
/// // From a spec's keys.
/// let driver = NullDriver::from_params(&SpecParams::parse("null:size=16,bs=4096")?)?;
/// let dev = Device::with_driver(Box::new(driver))?;
/// assert_eq!(dev.limits().logical_block_size, 4096);
/// # Ok::<(), mqblk::Error>(())
/// ```
pub struct NullDriver {
    cfg: NullConfig,
    /// memory_backed=1: the medium (in memory, or `backing_file`).
    mem: Option<Store>,
    /// `cache_size`: the volatile write cache in front of `mem`.
    cache: Option<WriteCache>,
    /// Requests failed by the medium (a `backing_file`'s I/O errors),
    /// and the last one's description, for the stats.
    medium_errors: AtomicU64,
    last_medium_error: Mutex<String>,
    throttle: Option<Throttle>,
    rotational: Option<Rotational>,
    channels: Option<Channels>,
    /// One completion thread per submit queue (irqmode=1/2, or a service
    /// model); stopped in place at shutdown, never removed.
    irq: Box<[IrqQueue]>,
    /// poll_mode=toggle: the submit queues' shared completion sides (in
    /// place of `irq`).
    toggle: Box<[ToggleQueue]>,
    /// Requests of the poll queues, in submission order, until a poll
    /// finds them due.
    poll_lists: Box<[Mutex<VecDeque<Pending>>]>,
    /// `zoned=1`: the zones.
    zoned: Option<NullZoned>,
    /// `badblocks`: sectors whose I/O fails (settable while live).
    badblocks: BadBlocks,
    /// `timeout` and `requeue` fault injection (fault.rs).
    faults: Option<Faults>,
    /// Nothing to model, store or defer: a request on a submit queue
    /// completes at once with Ok (the default device's whole job, so it
    /// skips the feature checks one by one).
    plain_inline: bool,
    /// A read of the memory store would only copy (no cache, faults,
    /// zones, service model or completion thread): `read_direct` may lend
    /// the store's pages instead (bad blocks, settable live, are checked
    /// per call).
    direct_reads: bool,
}

impl NullDriver {
    /// A null device; `cfg` is checked first (`NullConfig::validate`).
    pub fn new(mut cfg: NullConfig) -> Result<Self, mqblk::Error> {
        cfg.validate()?;
        cfg.max_sectors = cfg.max_sectors_aligned();
        let modelled = cfg.mbps > 0 || cfg.rotational || cfg.channels > 0;
        let (irq, toggle) = Self::start_completion_threads(&cfg, modelled)?;
        let zoned = match &cfg.zoned {
            Some(z) => Some(
                NullZoned::new(z, cfg.size_bytes, cfg.bs, cfg.memory_backed)
                    .map_err(|e| mqblk::Error::Setup(format!("null: {e}")))?,
            ),
            None => None,
        };
        let badblocks = Self::bad_blocks(&cfg);
        let faults = Faults::new(&cfg);
        let mem = Self::open_medium(&cfg)?;
        let plain_inline = faults.is_none()
            && irq.is_empty()
            && toggle.is_empty()
            && !modelled
            && zoned.is_none()
            && !cfg.memory_backed;
        let direct_reads = faults.is_none()
            && irq.is_empty()
            && toggle.is_empty()
            && !modelled
            && zoned.is_none()
            && cfg.cache_size_mb == 0;
        Ok(Self {
            mem,
            medium_errors: AtomicU64::new(0),
            last_medium_error: Mutex::new(String::new()),
            cache: (cfg.cache_size_mb > 0).then(|| {
                WriteCache::new(
                    cfg.cache_size_mb << 20,
                    cfg.powercut_tear.then_some(cfg.bs as usize),
                    cfg.cache_mode == CacheMode::Writethrough,
                )
            }),
            // Rotational media transfer at mbps within their own timeline.
            throttle: (cfg.mbps > 0 && !cfg.rotational && cfg.channels == 0)
                .then(|| Throttle { bytes_per_sec: cfg.mbps << 20, next_free_ns: AtomicU64::new(0) }),
            rotational: cfg
                .rotational
                .then(|| Rotational::new(cfg.seek_nsec, cfg.completion_nsec, cfg.size_bytes, cfg.mbps)),
            channels: (cfg.channels > 0)
                .then(|| Channels::new(cfg.channels, cfg.completion_nsec, cfg.mbps, cfg.jitter_pct)),
            poll_lists: (0..cfg.poll_queues)
                .map(|_| Mutex::new(VecDeque::with_capacity(cfg.hw_queue_depth as usize)))
                .collect(),
            cfg,
            plain_inline,
            direct_reads,
            badblocks,
            faults,
            irq: irq.into_boxed_slice(),
            toggle: toggle.into_boxed_slice(),
            zoned,
        })
    }

    /// One completion thread per submit queue, where requests complete on
    /// threads (irqmode 1 or 2, or a service model): `IrqQueue`s, or the
    /// shared queues of poll_mode=toggle.
    fn start_completion_threads(
        cfg: &NullConfig,
        modelled: bool,
    ) -> Result<(Vec<IrqQueue>, Vec<ToggleQueue>), mqblk::Error> {
        let mut irq = Vec::new();
        let mut toggle = Vec::new();
        if cfg.irq_mode() != IrqMode::None || modelled {
            for i in 0..cfg.submit_queues {
                let depth = cfg.hw_queue_depth as usize;
                let cpu = (!cfg.irq_cpus.is_empty()).then(|| cfg.irq_cpus[i % cfg.irq_cpus.len()]);
                let thread_err = |e| {
                    let on = cpu.map_or(String::new(), |c| format!(" on CPU {c} (irq_cpus)"));
                    mqblk::Error::Setup(format!("null: cannot start the completion thread of queue {i}{on}: {e}"))
                };
                match cfg.poll_mode {
                    PollMode::Queues => irq.push(IrqQueue::start(i, depth, cpu).map_err(thread_err)?),
                    PollMode::Toggle => toggle.push(ToggleQueue::start(i, depth, cpu).map_err(thread_err)?),
                }
            }
        }
        Ok((irq, toggle))
    }

    /// The `badblocks` table, with the configured ranges set.
    fn bad_blocks(cfg: &NullConfig) -> BadBlocks {
        let badblocks = BadBlocks::new(
            cfg.badblocks_once,
            cfg.badblocks_partial_io,
            u64::from(cfg.bs) >> mqblk::SECTOR_SHIFT,
            cfg.size_bytes >> mqblk::SECTOR_SHIFT,
        );
        for &(first, last) in &cfg.badblocks {
            badblocks.set(first, last + 1);
        }
        badblocks
    }

    /// The medium of memory_backed=1: the `backing_file`, else memory.
    fn open_medium(cfg: &NullConfig) -> Result<Option<Store>, mqblk::Error> {
        Ok(match (&cfg.backing_file, cfg.memory_backed) {
            (Some(path), _) => Some(Store::File(
                FileStore::open(path, cfg.size_bytes).map_err(|e| mqblk::Error::Setup(format!("null: {e}")))?,
            )),
            (None, true) => Some(Store::Memory(MemStore::new(cfg.size_bytes))),
            (None, false) => None,
        })
    }

    /// A null device from a `null:` spec's keys (`NullConfig::from_params`).
    pub fn from_params(p: &SpecParams) -> Result<Self, mqblk::Error> {
        Self::new(NullConfig::from_params(p)?)
    }

    /// When the request is due (0: now): the service model's answer, else
    /// the timer's, then the bandwidth limit.
    #[inline]
    fn due_ns(&self, rq: &Rq) -> u64 {
        let modelled = self.rotational.is_some() || self.channels.is_some();
        let mut due = if let Some(r) = &self.rotational {
            r.reserve(now_ns(), rq.pos_bytes(), rq.len_bytes())
        } else if let Some(c) = &self.channels {
            c.reserve(now_ns(), rq.len_bytes())
        } else if self.cfg.irq_mode() == IrqMode::Timer {
            irq::timer_due(self.cfg.completion_nsec)
        } else {
            0
        };
        if let Some(t) = &self.throttle {
            if rq.op().has_data() {
                due = due.max(t.reserve(now_ns(), rq.len_bytes()));
            }
        }
        debug_assert!(due > 0 || !modelled);
        due
    }
}

impl NullDriver {
    /// `queue_rq` for everything but a plain inline completion: faults,
    /// data, service models, poll and toggling queues, completion threads.
    /// Out of line so that the plain case pays no frame for it.
    #[inline(never)]
    fn queue_rq_slow(&self, hctx: &Hctx, mut rq: Rq) -> QueueRqResult {
        if let Some(f) = &self.faults {
            if f.requeue.as_ref().is_some_and(FaultAttr::should_fail) {
                return QueueRqResult::Busy(rq);
            }
            if f.timeout.as_ref().is_some_and(FaultAttr::should_fail) {
                f.lose(hctx, rq);
                return QueueRqResult::Queued;
            }
            if f.error_for(rq.op()).is_some_and(FaultAttr::should_fail) {
                rq.complete(Status::IoErr);
                return QueueRqResult::Queued;
            }
        }
        let status = self.handle(&mut rq);
        let due_ns = self.due_ns(&rq);
        let rq_is_hipri = rq.flags().contains(ReqFlags::HIPRI);
        if hctx.is_poll() {
            // No completion thread: the submitter's poll completes it.
            let list = &self.poll_lists[hctx.index() - self.cfg.submit_queues];
            list.lock().push_back(Pending { rq, due_ns, status });
            return QueueRqResult::Queued;
        }
        if let Some(q) = self.toggle.get(hctx.index()) {
            q.submit(rq, status, due_ns, rq_is_hipri);
            return QueueRqResult::Queued;
        }
        if self.cfg.irq_mode() == IrqMode::None && due_ns == 0 {
            end_rq(rq, status);
            return QueueRqResult::Queued;
        }
        if self.cfg.irq_mode() == IrqMode::None {
            // Throttled inline completion: the submitter waits its turn.
            wait_until(due_ns, INLINE_SPIN_NS);
            end_rq(rq, status);
            return QueueRqResult::Queued;
        }
        self.irq[hctx.index()].push(Pending { rq, due_ns, status });
        QueueRqResult::Queued
    }
}

impl Driver for NullDriver {
    fn name(&self) -> &str {
        "null"
    }

    fn tag_set(&self) -> TagSetConfig {
        let mut t = TagSetConfig::new(self.cfg.submit_queues + self.cfg.poll_queues, self.cfg.hw_queue_depth);
        t.poll_queues = self.cfg.poll_queues;
        t.shared_poll = self.cfg.poll_mode == PollMode::Toggle;
        t
    }

    fn limits(&self) -> QueueLimits {
        let mut l = QueueLimits::new(self.cfg.size_bytes, self.cfg.bs);
        l.max_sectors = self.cfg.max_sectors;
        l.max_segments = self.cfg.max_segments;
        l.max_segment_size = self.cfg.max_segment_size;
        l.virt_boundary_mask = self.cfg.virt_boundary_mask;
        if self.cfg.virt_boundary_mask != 0 {
            // blk_validate_limits: a virt boundary makes segments unlimited.
            l.max_segment_size = u32::MAX;
        }
        l.rotational = self.cfg.rotational;
        if self.cfg.discard {
            l.max_discard_sectors = u32::MAX >> 9;
        }
        l.max_write_zeroes_sectors = u32::MAX >> 9;
        // A volatile cache: FLUSH and FUA mean something. A file medium
        // has one too, the host's page cache (store.rs).
        let writeback = self.cfg.cache_size_mb > 0 && self.cfg.cache_mode == CacheMode::Writeback;
        l.write_cache = writeback || self.cfg.backing_file.is_some();
        l.fua = l.write_cache;
        l.zoned = self.zoned.as_ref().map(NullZoned::limits);
        l
    }

    #[inline]
    fn queue_rq(&self, hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
        if self.plain_inline && !hctx.is_poll() && self.badblocks.is_empty() {
            rq.complete(Status::Ok);
            return QueueRqResult::Queued;
        }
        self.queue_rq_slow(hctx, rq)
    }

    /// Completes the poll queue's requests that are due (in submission
    /// order; each completes outside the list's lock, since completing may
    /// issue the next request to this very queue).
    fn poll(&self, hctx: &Hctx) -> usize {
        if let Some(q) = self.toggle.get(hctx.index()) {
            return q.poll();
        }
        let Some(list) = hctx.index().checked_sub(self.cfg.submit_queues).and_then(|i| self.poll_lists.get(i)) else {
            return 0;
        };
        let now = now_ns();
        let mut done = 0;
        loop {
            let due = {
                let mut l = list.lock();
                match l.front() {
                    Some(p) if p.due_ns <= now => l.pop_front(),
                    _ => None,
                }
            };
            let Some(p) = due else { return done };
            end_rq(p.rq, p.status);
            done += 1;
        }
    }

    fn rq_timeout(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_secs(30))
    }

    /// A request `timeout` lost ends with ETIMEDOUT (null_blk's
    /// `null_timeout_rq` for a fake timeout); any other keeps waiting.
    fn timeout(&self, _hctx: &Hctx, t: mqblk::driver::TimedOutRq) -> mqblk::driver::TimeoutAction {
        let lost = self.faults.as_ref().and_then(|f| f.lost[t.hctx_index].lock()[t.tag as usize].take());
        match lost {
            Some(rq) => {
                rq.complete(Status::Timeout);
                mqblk::driver::TimeoutAction::Done
            }
            None => mqblk::driver::TimeoutAction::ResetTimer,
        }
    }

    fn capabilities(&self) -> mqblk::driver::Capabilities<'_> {
        let mut caps = mqblk::driver::Capabilities::none().attributes(self);
        if self.zoned.is_some() {
            caps = caps.zones(self);
        }
        if self.mem.is_some() {
            caps = caps.block_status(self);
        }
        if self.direct_reads && matches!(self.mem, Some(Store::Memory(_))) {
            caps = caps.direct_access(self);
        }
        if self.cache.is_some() {
            caps = caps.power(self);
        }
        caps
    }

    fn shutdown(&self) {
        for q in self.irq.iter() {
            q.stop();
        }
        for q in self.toggle.iter() {
            q.stop();
        }
        // Requests nobody polled end with an error (dropping a token does),
        // and so do requests lost to `timeout` that did not time out yet.
        for list in self.poll_lists.iter() {
            let left: Vec<Pending> = list.lock().drain(..).collect();
            drop(left);
        }
        for lost in self.faults.iter().flat_map(|f| f.lost.iter()) {
            let left: Vec<Rq> = lost.lock().iter_mut().filter_map(Option::take).collect();
            drop(left);
        }
    }

    fn show(&self, out: &mut String) {
        let c = &self.cfg;
        let _ = writeln!(
            out,
            "null/irqmode={} completion_nsec={} memory_backed={} mbps={} bs={} size_bytes={}",
            c.irq_mode() as u8,
            c.completion_nsec,
            c.memory_backed as u8,
            c.mbps,
            c.bs,
            c.size_bytes
        );
        if !c.irq_cpus.is_empty() {
            let _ = writeln!(out, "null/irq_cpus={:?}", c.irq_cpus);
        }
        self.show_medium(out);
        self.show_faults(out);
        if let Some(z) = &self.zoned {
            let _ = writeln!(out, "null/zone_lock={}", z.lock_name());
        }
        if let Some(r) = &self.rotational {
            let seeks = r.seeks.load(Ordering::Relaxed);
            let sequential = r.sequential.load(Ordering::Relaxed);
            let _ = writeln!(out, "null/rotational seek_nsec={} seeks={seeks} sequential={sequential}", c.seek_nsec);
        }
        if self.channels.is_some() {
            let _ = writeln!(
                out,
                "null/channels={} service_nsec={} jitter_pct={}",
                c.channels, c.completion_nsec, c.jitter_pct
            );
        }
        self.show_queues(out);
    }
}
