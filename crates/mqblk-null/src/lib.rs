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
//! | poll_mode | queues | `queues`: hipri requests go to the dedicated poll queues; `hybrid`: no poll queues, every queue takes both kinds and turns its completion notifications off while hipri requests are in flight |
//! | hw_queue_depth | 64 | tags per hardware queue |
//! | irqmode | 1 | 0: complete inline, 1: softirq (completion thread), 2: timer |
//! | completion_nsec | 10000 | irqmode=2: time from submission to completion |
//! | irq_cpus | (any) | CPUs the completion threads run on, as ranges and `:`-separated lists (`2-3`, `0:2`; `,` separates spec keys): queue i's thread on the i-th CPU of the list, round-robin, as managed interrupts are spread over CPUs |
//! | memory_backed | 0 | keep written data (never-written blocks read zeros) |
//! | discard | 0 | support discard (needs memory_backed) |
//! | cache_size | 0 | a volatile write cache of this many MiB (needs memory_backed; not zoned): writes are acknowledged from it, FLUSH and FUA make them durable, a power cut (`Device::power`) loses the rest |
//! | cache_mode | writeback | `writeback`: as above; `writethrough`: every write also reaches the medium before it completes (a power cut loses nothing; no volatile cache is advertised) |
//! | backing_file | (none) | memory_backed's data in this file instead of memory (mqblk's; not zoned): created sparse at the device's size, or reopened if it has exactly that size, so the durable state outlives the process; FLUSH and FUA `fdatasync` it |
//! | powercut_tear | 0 | a power cut first writes each cached page's sectors to the medium at random (torn multi-sector writes) |
//! | mbps | 0 | bandwidth limit in MiB/s (0: none); with rotational or channels, the transfer rate of the head or of each channel |
//! | max_sectors | 255 | largest request in sectors (aligned down to bs) |
//! | max_segments | 128 | most bios one merged request may carry (the kernel's BLK_MAX_SEGMENTS) |
//! | rotational | 0 | rotational media: one request at a time, with seeks |
//! | seek_nsec | 8000000 | rotational: full-stroke seek time |
//! | channels | 0 | internal channels, each one request at a time for completion_nsec + transfer at mbps (0: unlimited; 1: a serial device) |
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
//! | zoned_compat | 6.12 | the Linux whose zoned null_blk to follow: `6.12`, or `6.1` (Debian 12's, the first kernel oracle's): no zone write plugs, so after a failed write a write at the write pointer succeeds without a zone report first; no zone_full; zone appends up to the zone size |
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
//! completion threads, hybrid.rs for queues shared by polled and
//! interrupt-style requests, store.rs (mem/, or a file with
//! `backing_file`) for the data, cache.rs for the volatile write cache,
//! service.rs for the service models, zoned.rs for zones.

mod badblocks;
mod cache;
mod config;
mod data;
mod fault;
pub(crate) mod hybrid;
mod irq;
mod mem;
mod service;
mod spec;
mod store;
pub mod zoned;

use std::collections::VecDeque;
use std::fmt::Write as _;

use mqblk::clock::{now_ns, wait_until};
use mqblk::config::SpecParams;
use mqblk::driver::Hctx;
use mqblk::driver::Rq;
use mqblk::driver::{Driver, QueueRqResult};
use mqblk::QueueLimits;
use mqblk::Status;
use mqblk::TagSetConfig;
use mqblk::{Op, ReqFlags};
use mqblk_sync::{AtomicU64, Mutex, Ordering};

use badblocks::BadBlocks;
use cache::WriteCache;
pub use config::{CacheMode, FaultSpec, IrqMode, NullConfig, PollMode};
use fault::FaultAttr;
use hybrid::HybridQueue;
use irq::{IrqQueue, Pending, SPIN_NS};
use mem::MemStore;
use service::{Channels, Rotational};
use store::{FileStore, Store};
use zoned::NullZoned;

/// A device-wide bandwidth limit (`mbps`): transfers are laid end to end on
/// one timeline; a request completes when its transfer would have finished.
struct Throttle {
    bytes_per_sec: u64,
    next_free_ns: AtomicU64,
}

impl Throttle {
    /// Reserves the transfer of `bytes` starting no earlier than `now`;
    /// returns when it finishes.
    fn reserve(&self, now: u64, bytes: u64) -> u64 {
        let xfer_ns = (u128::from(bytes) * 1_000_000_000 / u128::from(self.bytes_per_sec)) as u64;
        let mut cur = self.next_free_ns.load(Ordering::Relaxed);
        loop {
            let done = cur.max(now) + xfer_ns;
            match self.next_free_ns.compare_exchange_weak(cur, done, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return done,
                Err(actual) => cur = actual,
            }
        }
    }
}

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

/// Fault injection in use, and the requests `timeout` lost: per hardware
/// queue, by driver tag, until the timeout handler (or shutdown) ends them.
struct Faults {
    timeout: Option<FaultAttr>,
    requeue: Option<FaultAttr>,
    /// Transient EIO by op: read, write, flush, discard and write zeroes.
    error: [Option<FaultAttr>; 4],
    lost: Box<[Mutex<LostRqs>]>,
}

/// One hardware queue's lost requests, by driver tag.
type LostRqs = Box<[Option<Rq>]>;

impl Faults {
    fn new(cfg: &NullConfig) -> Option<Self> {
        if cfg.timeout.is_none() && cfg.requeue.is_none() && cfg.error.iter().all(Option::is_none) {
            return None;
        }
        let nr_queues = cfg.submit_queues + cfg.poll_queues;
        let depth = cfg.hw_queue_depth as usize;
        Some(Self {
            timeout: cfg.timeout.map(|f| FaultAttr::new(f, 0x7469_6d65)),
            requeue: cfg.requeue.map(|f| FaultAttr::new(f, 0x7265_7175)),
            error: std::array::from_fn(|i| cfg.error[i].map(|f| FaultAttr::new(f, 0x6572_7230 + i as u64))),
            lost: (0..nr_queues).map(|_| Mutex::new((0..depth).map(|_| None).collect())).collect(),
        })
    }

    /// The transient-error fault for `op`, if one is set.
    fn error_for(&self, op: Op) -> Option<&FaultAttr> {
        let i = match op {
            Op::Read => 0,
            Op::Write => 1,
            Op::Flush => 2,
            Op::Discard | Op::WriteZeroes => 3,
            _ => return None,
        };
        self.error[i].as_ref()
    }

    /// Keeps `rq` without handling it: null_blk's fake timeout.
    fn lose(&self, hctx: &Hctx, rq: Rq) {
        let tag = rq.tag() as usize;
        let old = self.lost[hctx.index()].lock()[tag].replace(rq);
        assert!(old.is_none(), "driver tag {tag} of hctx {} lost twice", hctx.index());
    }
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
    /// poll_mode=hybrid: the submit queues' shared completion sides (in
    /// place of `irq`).
    hybrid: Box<[HybridQueue]>,
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
    /// The memory store, where a read may be served from it directly: a
    /// plain memory-backed device (`direct_reads`) with no bad blocks now.
    fn direct_store(&self) -> Option<&MemStore> {
        match &self.mem {
            Some(Store::Memory(mem)) if self.direct_reads && self.badblocks.is_empty() => Some(mem),
            _ => None,
        }
    }
    /// A null device; `cfg` is checked first (`NullConfig::validate`).
    pub fn new(mut cfg: NullConfig) -> Result<Self, mqblk::Error> {
        cfg.validate()?;
        cfg.max_sectors = cfg.max_sectors_aligned();
        let mut irq = Vec::new();
        let mut hybrid = Vec::new();
        let modelled = cfg.mbps > 0 || cfg.rotational || cfg.channels > 0;
        if cfg.irq_mode() != IrqMode::None || modelled {
            for i in 0..cfg.submit_queues {
                // Timer mode stays awake briefly when idle, for precision.
                let idle_spin = cfg.irq_mode() == IrqMode::Timer;
                let depth = cfg.hw_queue_depth as usize;
                let cpu = (!cfg.irq_cpus.is_empty()).then(|| cfg.irq_cpus[i % cfg.irq_cpus.len()]);
                let thread_err = |e| {
                    let on = cpu.map_or(String::new(), |c| format!(" on CPU {c} (irq_cpus)"));
                    mqblk::Error::Setup(format!("null: cannot start the completion thread of queue {i}{on}: {e}"))
                };
                match cfg.poll_mode {
                    PollMode::Queues => irq.push(IrqQueue::start(i, depth, idle_spin, cpu).map_err(thread_err)?),
                    PollMode::Hybrid => hybrid.push(HybridQueue::start(i, depth, idle_spin, cpu).map_err(thread_err)?),
                }
            }
        }
        let zoned = match &cfg.zoned {
            Some(z) => Some(
                NullZoned::new(z, cfg.size_bytes, cfg.bs, cfg.memory_backed)
                    .map_err(|e| mqblk::Error::Setup(format!("null: {e}")))?,
            ),
            None => None,
        };
        let badblocks = BadBlocks::new(
            cfg.badblocks_once,
            cfg.badblocks_partial_io,
            u64::from(cfg.bs) >> mqblk::SECTOR_SHIFT,
            cfg.size_bytes >> mqblk::SECTOR_SHIFT,
        );
        for &(first, last) in &cfg.badblocks {
            badblocks.set(first, last + 1);
        }
        let faults = Faults::new(&cfg);
        let mem = match (&cfg.backing_file, cfg.memory_backed) {
            (Some(path), _) => Some(Store::File(
                FileStore::open(path, cfg.size_bytes).map_err(|e| mqblk::Error::Setup(format!("null: {e}")))?,
            )),
            (None, true) => Some(Store::Memory(MemStore::new(cfg.size_bytes))),
            (None, false) => None,
        };
        let plain_inline = faults.is_none()
            && irq.is_empty()
            && hybrid.is_empty()
            && !modelled
            && zoned.is_none()
            && !cfg.memory_backed;
        let direct_reads = faults.is_none()
            && irq.is_empty()
            && hybrid.is_empty()
            && !modelled
            && zoned.is_none()
            && cfg.cache_size_mb == 0;
        Ok(Self {
            mem,
            medium_errors: AtomicU64::new(0),
            last_medium_error: Mutex::new(String::new()),
            cache: (cfg.cache_size_mb > 0).then(|| {
                WriteCache::new(cfg.cache_size_mb << 20, cfg.powercut_tear, cfg.cache_mode == CacheMode::Writethrough)
            }),
            // Rotational media transfer at mbps within their own timeline.
            throttle: (cfg.mbps > 0 && !cfg.rotational && cfg.channels == 0)
                .then(|| Throttle { bytes_per_sec: cfg.mbps << 20, next_free_ns: AtomicU64::new(0) }),
            rotational: cfg
                .rotational
                .then(|| Rotational::new(cfg.seek_nsec, cfg.completion_nsec, cfg.size_bytes, cfg.mbps)),
            channels: (cfg.channels > 0).then(|| Channels::new(cfg.channels, cfg.completion_nsec, cfg.mbps)),
            poll_lists: (0..cfg.poll_queues)
                .map(|_| Mutex::new(VecDeque::with_capacity(cfg.hw_queue_depth as usize)))
                .collect(),
            cfg,
            plain_inline,
            direct_reads,
            badblocks,
            faults,
            irq: irq.into_boxed_slice(),
            hybrid: hybrid.into_boxed_slice(),
            zoned,
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
    /// data, service models, poll and hybrid queues, completion threads.
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
        if let Some(q) = self.hybrid.get(hctx.index()) {
            q.submit(rq, status, due_ns, rq_is_hipri);
            return QueueRqResult::Queued;
        }
        if self.cfg.irq_mode() == IrqMode::None && due_ns == 0 {
            end_rq(rq, status);
            return QueueRqResult::Queued;
        }
        if self.cfg.irq_mode() == IrqMode::None {
            // Throttled inline completion: the submitter waits its turn.
            wait_until(due_ns, SPIN_NS);
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
        t.shared_poll = self.cfg.poll_mode == PollMode::Hybrid;
        t
    }

    fn limits(&self) -> QueueLimits {
        let mut l = QueueLimits::new(self.cfg.size_bytes, self.cfg.bs);
        l.max_sectors = self.cfg.max_sectors;
        l.max_segments = self.cfg.max_segments;
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
        if let Some(q) = self.hybrid.get(hctx.index()) {
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
        for q in self.hybrid.iter() {
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
        if let Some(mem) = &self.mem {
            let _ = writeln!(out, "{}", mem.describe());
            let errors = self.medium_errors.load(Ordering::Relaxed);
            if errors > 0 {
                let _ = writeln!(out, "null/medium_errors={errors} last: {}", self.last_medium_error.lock().as_str());
            }
        }
        if !self.badblocks.is_empty() {
            let _ = writeln!(out, "null/badblocks={}", self.badblocks.list());
        }
        if let Some(c) = &self.cache {
            let (cached, lost, torn, off) = c.counts();
            let _ = writeln!(
                out,
                "null/cache_pages={cached}\nnull/powercut_lost_pages={lost}\nnull/powercut_torn_sectors={torn}\nnull/power={}",
                if off { "off" } else { "on" }
            );
        }
        if let Some(f) = &self.faults {
            let [read, write, flush, discard] = &f.error;
            for (name, attr) in [
                ("timeout", &f.timeout),
                ("requeue", &f.requeue),
                ("error_read", read),
                ("error_write", write),
                ("error_flush", flush),
                ("error_discard", discard),
            ] {
                if let Some(a) = attr {
                    let _ = writeln!(out, "null/fault_{name}_injected={}", a.failed());
                }
            }
        }
        if let Some(z) = &self.zoned {
            let _ = writeln!(out, "null/zone_lock={}", z.lock_name());
        }
        if let Some(r) = &self.rotational {
            let seeks = r.seeks.load(Ordering::Relaxed);
            let sequential = r.sequential.load(Ordering::Relaxed);
            let _ = writeln!(out, "null/rotational seek_nsec={} seeks={seeks} sequential={sequential}", c.seek_nsec);
        }
        if self.channels.is_some() {
            let _ = writeln!(out, "null/channels={} service_nsec={}", c.channels, c.completion_nsec);
        }
        for (i, q) in self.hybrid.iter().enumerate() {
            let s = q.stats();
            let (hipri, lopri, on) = q.snapshot();
            let _ = writeln!(
                out,
                "null/hybrid{i}/notify={} hipri={hipri} lopri={lopri} notify_off={} notify_on={} irq_reaped={} poll_reaped={}",
                on as u8,
                s.notify_off.load(Ordering::Relaxed),
                s.notify_on.load(Ordering::Relaxed),
                s.irq_reaped.load(Ordering::Relaxed),
                s.poll_reaped.load(Ordering::Relaxed),
            );
        }
        for (i, q) in self.irq.iter().enumerate() {
            let (timed, late_mean, late_max) = q.lateness();
            let _ = writeln!(
                out,
                "null/irq{i}/completed={} pending={} timed={timed} late_ns_mean={late_mean} late_ns_max={late_max}",
                q.completed(),
                q.pending()
            );
        }
    }
}

/// Zone reports: offered when `zoned=1`.
impl mqblk::driver::Zoned for NullDriver {
    fn report_zones(&self, sector: u64, nr: usize, out: &mut Vec<mqblk::zoned::Zone>) -> Result<(), Status> {
        let z = self.zoned.as_ref().expect("offered only when zoned");
        z.report(sector, nr, out);
        Ok(())
    }
}

/// Direct access: offered when memory-backed; each read may still decline.
impl mqblk::driver::DirectAccess for NullDriver {
    /// Memory-backed, and a read would do nothing but copy: no cache in
    /// front of the store, no faults or bad blocks, no zones, no service
    /// model or completion thread (whose timing a direct read would skip).
    fn read_direct(&self, offset: u64, len: u64, f: &mut mqblk::driver::ReadFn<'_>) -> Option<std::io::Result<()>> {
        Some(self.direct_store()?.lend(offset, len, f))
    }

    /// Memory-backed (as `read_direct` is), on a kernel with 4 KiB pages
    /// that takes lent frames back (mem/lent.rs).
    #[cfg(not(loom))]
    fn lends_past_reads(&self) -> bool {
        matches!(&self.mem, Some(Store::Memory(mem)) if self.direct_reads && mem.lends())
    }

    /// As `read_direct`, the pages kept for whoever holds them (mem/lent.rs).
    #[cfg(not(loom))]
    fn read_direct_lent(
        &self,
        offset: u64,
        len: u64,
        f: &mut mqblk::driver::ReadFn<'_>,
    ) -> Option<std::io::Result<()>> {
        self.direct_store()?.lend_past(offset, len, f)
    }
}

/// Holes and data: offered when memory-backed.
impl mqblk::driver::BlockStatus for NullDriver {
    /// Memory-backed: unwritten pages are holes. Without memory backing
    /// reads return whatever the buffer held, so nothing is claimed.
    fn block_status(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) {
        let mem = self.mem.as_ref().expect("offered only when memory-backed");
        mqblk::driver::extents_by(offset, len, mem::PAGE_SIZE, out, |pos| !mem.is_present(pos));
    }

    /// Memory-backed: a page-table lookup per page (a file asks the
    /// kernel, SEEK_DATA, per page: not cheap).
    fn is_cheap(&self) -> bool {
        matches!(self.mem, Some(Store::Memory(_)))
    }
}

/// Power cuts: offered with a volatile write cache (`cache_size`).
impl mqblk::driver::PowerControl for NullDriver {
    /// Drops the write cache: unflushed writes are lost (torn into the
    /// medium with `powercut_tear`); the device goes on with the durable
    /// state.
    fn power_cut(&self, hold_off: bool) -> Result<u64, mqblk::Error> {
        let (Some(c), Some(mem)) = (&self.cache, &self.mem) else {
            unreachable!("offered only with a write cache, which needs memory_backed=1")
        };
        Ok(c.power_cut(mem, hold_off))
    }

    fn power_on(&self) -> Result<u64, mqblk::Error> {
        let conflict =
            |message: &str| mqblk::config::ConfigError::Conflict { driver: "null".into(), message: message.into() };
        let c = self.cache.as_ref().expect("offered only with a write cache");
        c.power_on().ok_or_else(|| conflict("power_on: the power is on (power_off first)").into())
    }
}

/// Live attributes (`badblocks`): always offered.
impl mqblk::driver::Attributes for NullDriver {
    /// null_blk's configfs attributes that change a live device:
    /// `badblocks` (`+START-END`, `-START-END`).
    fn set_attr(&self, key: &str, value: &str) -> Result<(), mqblk::Error> {
        let conflict = |message: String| mqblk::config::ConfigError::Conflict { driver: "null".into(), message };
        match key {
            "badblocks" if self.zoned.is_some() => {
                Err(conflict("badblocks on a zoned device is not supported (zoned=1)".into()).into())
            }
            "badblocks" => self.badblocks.store(value).map_err(|e| conflict(e).into()),
            _ => Err(conflict(format!("no attribute '{key}' to set on a live device (accepted: badblocks)")).into()),
        }
    }

    fn attr(&self, key: &str) -> Result<String, mqblk::Error> {
        match key {
            "badblocks" => Ok(self.badblocks.list()),
            _ => Err(mqblk::config::ConfigError::Conflict {
                driver: "null".into(),
                message: format!("no attribute '{key}' (accepted: badblocks)"),
            }
            .into()),
        }
    }
}
