//! null_blk in user space: a device that stores nothing (or, with
//! `memory_backed=1`, sparse pages in memory) and completes requests inline,
//! on a completion thread, or after a timer, with the kernel module's
//! parameter names, defaults and meanings.
//!
//! | key | default | meaning |
//! |---|---|---|
//! | gb | 250 | size in GiB |
//! | size | 0 | size in MiB (overrides gb when set) |
//! | bs | 512 | logical block size: 512, 1024, 2048 or 4096 |
//! | submit_queues | 1 | hardware queues |
//! | poll_queues | 1 | poll queues besides them (hipri requests; completed when their submitter polls) |
//! | poll_mode | queues | `queues`: hipri requests go to the dedicated poll queues; `hybrid`: no poll queues, every queue takes both kinds and turns its completion notifications off while hipri requests are in flight (hybrid.rs) |
//! | hw_queue_depth | 64 | tags per hardware queue |
//! | irqmode | 1 | 0: complete inline, 1: softirq (completion thread), 2: timer |
//! | completion_nsec | 10000 | irqmode=2: time from submission to completion |
//! | memory_backed | 0 | keep written data (never-written blocks read zeros) |
//! | discard | 0 | support discard (needs memory_backed) |
//! | mbps | 0 | bandwidth limit in MiB/s (0: none); with rotational or channels, the transfer rate of the head or of each channel |
//! | max_sectors | 255 | largest request in sectors (aligned down to bs) |
//! | max_segments | 128 | most bios one merged request may carry (the kernel's BLK_MAX_SEGMENTS) |
//! | rotational | 0 | rotational media: one request at a time, with seeks (service.rs) |
//! | seek_nsec | 8000000 | rotational: full-stroke seek time |
//! | channels | 0 | internal channels, each one request at a time for completion_nsec + transfer at mbps (0: unlimited; 1: a serial device) |
//! | zoned | 0 | a zoned device (zoned.rs): the keys below apply |
//! | zone_size | 256 | zone size in MB (a power of two) |
//! | zone_capacity | 0 | writable MB per zone (0: zone_size) |
//! | zone_nr_conv | 0 | conventional zones at the start |
//! | zone_max_open | 0 | open zones allowed (0: no limit) |
//! | zone_max_active | 0 | open + closed zones allowed (0: no limit) |
//! | zone_append_max_sectors | 0 | largest zone append (0: the zone size) |
//! | zone_readonly | 0 | the last sequential zones start READONLY (before those of zone_offline) |
//! | zone_offline | 0 | the last sequential zones start OFFLINE |
//! | zone_lock | per-zone | `per-zone` locks (seed 004) or one `global` device lock |
//!
//! Relies on: the Driver trait, irq.rs for completion threads, hybrid.rs
//! for queues shared by polled and interrupt-style requests, mem.rs for
//! memory backing.

pub(crate) mod hybrid;
mod irq;
mod mem;
mod service;
pub mod zoned;

use std::collections::VecDeque;
use std::fmt::Write as _;

use crate::clock::{now_ns, wait_until};
use crate::config::{ConfigError, SpecParams};
use crate::driver::{Driver, QueueRqResult};
use crate::hctx::Hctx;
use crate::queue::QueueLimits;
use crate::request::{Op, ReqFlags, Rq, SECTOR_SIZE};
use crate::status::Status;
use crate::sync::{AtomicU64, Mutex, Ordering};
use crate::tag::TagSetConfig;

use hybrid::HybridQueue;
use irq::{IrqQueue, Pending, SPIN_NS};
use mem::MemStore;
use service::{Channels, Rotational};
use zoned::{NullZoned, ZoneLock, ZonedConfig};

/// The keys a `null:` spec accepts.
pub const NULL_KEYS: &[&str] = &[
    "gb",
    "size",
    "bs",
    "submit_queues",
    "poll_queues",
    "poll_mode",
    "hw_queue_depth",
    "irqmode",
    "completion_nsec",
    "memory_backed",
    "discard",
    "mbps",
    "max_sectors",
    "max_segments",
    "rotational",
    "seek_nsec",
    "channels",
    "zoned",
    "zone_size",
    "zone_capacity",
    "zone_nr_conv",
    "zone_max_open",
    "zone_max_active",
    "zone_append_max_sectors",
    "zone_readonly",
    "zone_offline",
    "zone_lock",
];

/// How requests complete (`irqmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqMode {
    /// 0: inside `queue_rq`, on the submitting thread.
    None = 0,
    /// 1: on the hardware queue's completion thread, as soon as possible.
    Softirq = 1,
    /// 2: on the completion thread, `completion_nsec` after submission.
    Timer = 2,
}

/// How hipri requests are completed by polling (`poll_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollMode {
    /// Dedicated poll queues with notifications always off (the kernel's
    /// merged design, NVMe's and later virtio_blk's).
    Queues,
    /// Shared queues that toggle notifications (seed 002's RFC).
    Hybrid,
}

/// null_blk's parameters (see the module table): `NullConfig::new()` is
/// null_blk's defaults, changed by a setter per parameter (`gb`, `size_mb`,
/// and one named as each field). The same checks as a `null:` spec apply
/// when the device is built, with errors naming the spec key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NullConfig {
    pub size_bytes: u64,
    pub bs: u32,
    pub submit_queues: usize,
    pub poll_queues: usize,
    pub poll_mode: PollMode,
    pub hw_queue_depth: u32,
    pub irqmode: IrqMode,
    pub completion_nsec: u64,
    pub memory_backed: bool,
    pub discard: bool,
    pub mbps: u64,
    pub max_sectors: u32,
    pub max_segments: u32,
    pub rotational: bool,
    pub seek_nsec: u64,
    pub channels: usize,
    /// `zoned=1` and its parameters.
    pub zoned: Option<ZonedConfig>,
}

impl Default for NullConfig {
    fn default() -> Self {
        Self {
            size_bytes: 250 << 30,
            bs: 512,
            submit_queues: 1,
            poll_queues: 1,
            poll_mode: PollMode::Queues,
            hw_queue_depth: 64,
            irqmode: IrqMode::Softirq,
            completion_nsec: 10_000,
            memory_backed: false,
            discard: false,
            mbps: 0,
            max_sectors: 255,
            max_segments: crate::queue::DEFAULT_MAX_SEGMENTS,
            rotational: false,
            seek_nsec: 8_000_000,
            channels: 0,
            zoned: None,
        }
    }
}

impl NullConfig {
    /// null_blk's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Size in GiB (`gb=`).
    pub fn gb(mut self, gb: u64) -> Self {
        self.size_bytes = gb << 30;
        self
    }

    /// Size in MiB (`size=`).
    pub fn size_mb(mut self, size_mb: u64) -> Self {
        self.size_bytes = size_mb << 20;
        self
    }

    crate::config::setters! {
        bs: u32,
        submit_queues: usize,
        poll_queues: usize,
        poll_mode: PollMode,
        hw_queue_depth: u32,
        irqmode: IrqMode,
        completion_nsec: u64,
        memory_backed: bool,
        discard: bool,
        mbps: u64,
        max_sectors: u32,
        max_segments: u32,
        rotational: bool,
        seek_nsec: u64,
        channels: usize,
        zoned: Option<ZonedConfig>,
    }

    /// The config as a `null:` spec's key=value pairs.
    fn to_pairs(&self) -> Result<Vec<(String, String)>, ConfigError> {
        if self.size_bytes < 1 << 20 || self.size_bytes % (1 << 20) != 0 {
            return Err(ConfigError::BadValue {
                driver: "null".into(),
                key: "size".into(),
                value: format!("{} bytes", self.size_bytes),
                expected: "a whole number of MiB".into(),
            });
        }
        let b = |v: bool| u64::from(v).to_string();
        let mut pairs: Vec<(&str, String)> = vec![
            ("size", (self.size_bytes >> 20).to_string()),
            ("bs", self.bs.to_string()),
            ("submit_queues", self.submit_queues.to_string()),
            ("poll_queues", self.poll_queues.to_string()),
            ("poll_mode", if self.poll_mode == PollMode::Hybrid { "hybrid" } else { "queues" }.to_string()),
            ("hw_queue_depth", self.hw_queue_depth.to_string()),
            ("irqmode", (self.irqmode as u64).to_string()),
            ("completion_nsec", self.completion_nsec.to_string()),
            ("memory_backed", b(self.memory_backed)),
            ("discard", b(self.discard)),
            ("mbps", self.mbps.to_string()),
            ("max_sectors", self.max_sectors.to_string()),
            ("max_segments", self.max_segments.to_string()),
            ("rotational", b(self.rotational)),
            ("seek_nsec", self.seek_nsec.to_string()),
        ];
        if self.channels > 0 {
            pairs.push(("channels", self.channels.to_string()));
        }
        if let Some(z) = &self.zoned {
            pairs.extend([
                ("zoned", "1".to_string()),
                ("zone_size", z.zone_size_mb.to_string()),
                ("zone_capacity", z.zone_capacity_mb.to_string()),
                ("zone_nr_conv", z.zone_nr_conv.to_string()),
                ("zone_max_open", z.zone_max_open.to_string()),
                ("zone_max_active", z.zone_max_active.to_string()),
                ("zone_append_max_sectors", z.zone_append_max_sectors.to_string()),
                ("zone_readonly", z.zone_readonly.to_string()),
                ("zone_offline", z.zone_offline.to_string()),
                ("zone_lock", if z.zone_lock == ZoneLock::Global { "global" } else { "per-zone" }.to_string()),
            ]);
        }
        Ok(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    /// Checks every value as a `null:` spec's would be (errors name the
    /// spec key) and returns the config as that spec parses (max_sectors
    /// aligned down to the block size).
    pub fn validate(&self) -> Result<Self, ConfigError> {
        Self::from_params(&SpecParams::from_pairs("null", self.to_pairs()?))
    }

    pub fn from_params(p: &SpecParams) -> Result<Self, ConfigError> {
        p.check_keys(NULL_KEYS)?;
        let d = NullConfig::default();
        let gb = p.u64_in("gb", d.size_bytes >> 30, 1, 1 << 20)?;
        let size_mb = p.u64_in("size", 0, 0, 1 << 30)?;
        let size_bytes = if size_mb > 0 { size_mb << 20 } else { gb << 30 };
        let bs = p.u64_in("bs", 512, 512, 4096)? as u32;
        if !bs.is_power_of_two() {
            return Err(ConfigError::BadValue {
                driver: p.driver.clone(),
                key: "bs".into(),
                value: bs.to_string(),
                expected: "512, 1024, 2048 or 4096".into(),
            });
        }
        let irqmode = match p.u64_in("irqmode", 1, 0, 2)? {
            0 => IrqMode::None,
            1 => IrqMode::Softirq,
            _ => IrqMode::Timer,
        };
        if p.is_set("channels") && p.bool("rotational", false)? {
            return Err(p.conflict("rotational=1 and channels=N are different service models: choose one"));
        }
        let poll_mode = match p.choice("poll_mode", "queues", &["queues", "hybrid"])? {
            "hybrid" => PollMode::Hybrid,
            _ => PollMode::Queues,
        };
        let poll_queues = match poll_mode {
            PollMode::Queues => p.u64_in("poll_queues", 1, 0, 1024)? as usize,
            PollMode::Hybrid if p.u64_in("poll_queues", 0, 0, 1024)? > 0 => {
                return Err(p.conflict("poll_mode=hybrid polls the submit queues themselves: poll_queues must be 0"));
            }
            PollMode::Hybrid => 0,
        };
        let memory_backed = p.bool("memory_backed", false)?;
        let discard = p.bool("discard", false)?;
        if discard && !memory_backed {
            return Err(p.conflict("discard=1 needs memory_backed=1 (null_blk ignores discard without memory backing)"));
        }
        let zoned = Self::zoned_from_params(p)?;
        if zoned.is_some() && discard {
            return Err(
                p.conflict("discard=1 with zoned=1: a zoned null device supports no discard (reset zones instead)")
            );
        }
        // Requests are whole blocks: align max_sectors down to the block size.
        let bs_sectors = bs / SECTOR_SIZE as u32;
        let max_sectors = p.u64_in("max_sectors", 255, 1, 1 << 20)? as u32;
        let max_sectors = max_sectors / bs_sectors * bs_sectors;
        if max_sectors == 0 {
            return Err(p.conflict(format!("max_sectors is smaller than one block of bs={bs}")));
        }
        Ok(Self {
            size_bytes,
            bs,
            submit_queues: p.u64_in("submit_queues", 1, 1, 1024)? as usize,
            poll_queues,
            poll_mode,
            hw_queue_depth: p.u64_in("hw_queue_depth", 64, 1, 65536)? as u32,
            irqmode,
            completion_nsec: p.u64_in("completion_nsec", 10_000, 0, 60_000_000_000)?,
            memory_backed,
            discard,
            mbps: p.u64_in("mbps", 0, 0, 1 << 30)?,
            max_sectors,
            max_segments: p.u64_in("max_segments", u64::from(crate::queue::DEFAULT_MAX_SEGMENTS), 1, 65535)? as u32,
            rotational: p.bool("rotational", false)?,
            seek_nsec: p.u64_in("seek_nsec", 8_000_000, 0, 10_000_000_000)?,
            channels: p.u64_in("channels", 0, 0, 4096)? as usize,
            zoned,
        })
    }

    fn zoned_from_params(p: &SpecParams) -> Result<Option<ZonedConfig>, ConfigError> {
        if !p.bool("zoned", false)? {
            if let Some((key, _)) = p.pairs().iter().find(|(k, _)| k.starts_with("zone_")) {
                return Err(p.conflict(format!("{key} needs zoned=1")));
            }
            return Ok(None);
        }
        let u32_key = |key: &str, max: u64| -> Result<u32, ConfigError> { Ok(p.u64_in(key, 0, 0, max)? as u32) };
        Ok(Some(ZonedConfig {
            zone_size_mb: p.u64_in("zone_size", 256, 1, 1 << 20)?,
            zone_capacity_mb: p.u64_in("zone_capacity", 0, 0, 1 << 20)?,
            zone_nr_conv: u32_key("zone_nr_conv", 1 << 20)?,
            zone_max_open: u32_key("zone_max_open", 1 << 20)?,
            zone_max_active: u32_key("zone_max_active", 1 << 20)?,
            zone_append_max_sectors: u32_key("zone_append_max_sectors", 1 << 22)?,
            zone_readonly: u32_key("zone_readonly", 1 << 20)?,
            zone_offline: u32_key("zone_offline", 1 << 20)?,
            zone_lock: match p.choice("zone_lock", "per-zone", &["per-zone", "global"])? {
                "global" => ZoneLock::Global,
                _ => ZoneLock::PerZone,
            },
        }))
    }
}

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

/// `null:` specs (registered in `driver::BUILTIN`).
pub(crate) fn open(p: &SpecParams) -> Result<Box<dyn Driver>, crate::error::Error> {
    Ok(Box::new(NullDriver::from_params(p)?))
}

/// The null block device driver.
pub struct NullDriver {
    cfg: NullConfig,
    mem: Option<MemStore>,
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
}

impl NullDriver {
    /// A null device; `cfg` is checked first (`NullConfig::validate`).
    pub fn new(cfg: NullConfig) -> Result<Self, crate::error::Error> {
        let cfg = cfg.validate()?;
        let mut irq = Vec::new();
        let mut hybrid = Vec::new();
        let modelled = cfg.mbps > 0 || cfg.rotational || cfg.channels > 0;
        let thread_err = |e| crate::error::Error::Setup(format!("null: cannot start completion thread: {e}"));
        if cfg.irqmode != IrqMode::None || modelled {
            for i in 0..cfg.submit_queues {
                // Timer mode stays awake briefly when idle, for precision.
                let idle_spin = cfg.irqmode == IrqMode::Timer;
                let depth = cfg.hw_queue_depth as usize;
                match cfg.poll_mode {
                    PollMode::Queues => irq.push(IrqQueue::start(i, depth, idle_spin).map_err(thread_err)?),
                    PollMode::Hybrid => hybrid.push(HybridQueue::start(i, depth, idle_spin).map_err(thread_err)?),
                }
            }
        }
        let zoned = match &cfg.zoned {
            Some(z) => {
                Some(NullZoned::new(z, cfg.size_bytes).map_err(|e| crate::error::Error::Setup(format!("null: {e}")))?)
            }
            None => None,
        };
        Ok(Self {
            mem: cfg.memory_backed.then(MemStore::new),
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
            irq: irq.into_boxed_slice(),
            hybrid: hybrid.into_boxed_slice(),
            zoned,
        })
    }

    pub fn from_params(p: &SpecParams) -> Result<Self, crate::error::Error> {
        Self::new(NullConfig::from_params(p)?)
    }

    /// Moves the data (memory backing) and decides the status.
    #[inline]
    fn handle(&self, rq: &mut Rq) -> Status {
        if let Some(z) = &self.zoned {
            return z.process(rq, self.mem.as_ref());
        }
        let Some(mem) = &self.mem else { return Status::Ok };
        let pos = rq.pos_bytes();
        match rq.op() {
            Op::Read => rq.for_each_segment_mut(|pos, seg| mem.read(pos, seg)),
            Op::Write => rq.for_each_segment(|pos, seg| mem.write(pos, seg)),
            Op::Discard | Op::WriteZeroes => mem.zero(pos, rq.len_bytes()),
            Op::Flush => {}
            // Zone ops reach only zoned devices (check_bio).
            _ => return Status::NotSupp,
        }
        Status::Ok
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
        } else if self.cfg.irqmode == IrqMode::Timer {
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
        l.zoned = self.zoned.as_ref().map(NullZoned::limits);
        l
    }

    /// Memory-backed: unwritten pages are holes. Without memory backing
    /// reads return whatever the buffer held, so nothing is claimed.
    fn block_status(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) -> bool {
        let Some(mem) = &self.mem else { return false };
        crate::driver::extents_by(offset, len, mem::PAGE_SIZE, out, |pos| !mem.is_present(pos));
        true
    }

    /// Memory-backed: a page-table lookup per page.
    fn block_status_is_cheap(&self) -> bool {
        self.mem.is_some()
    }

    fn report_zones(&self, sector: u64, nr: usize, out: &mut Vec<crate::zoned::Zone>) -> Result<(), Status> {
        match &self.zoned {
            Some(z) => {
                z.report(sector, nr, out);
                Ok(())
            }
            None => Err(Status::NotSupp),
        }
    }

    #[inline]
    fn queue_rq(&self, hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
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
        if self.cfg.irqmode == IrqMode::None && due_ns == 0 {
            rq.complete(status);
            return QueueRqResult::Queued;
        }
        if self.cfg.irqmode == IrqMode::None {
            // Throttled inline completion: the submitter waits its turn.
            wait_until(due_ns, SPIN_NS);
            rq.complete(status);
            return QueueRqResult::Queued;
        }
        self.irq[hctx.index()].push(Pending { rq, due_ns, status });
        QueueRqResult::Queued
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
            p.rq.complete(p.status);
            done += 1;
        }
    }

    fn rq_timeout(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_secs(30))
    }

    fn shutdown(&self) {
        for q in self.irq.iter() {
            q.stop();
        }
        for q in self.hybrid.iter() {
            q.stop();
        }
        // Requests nobody polled end with an error (dropping a token does).
        for list in self.poll_lists.iter() {
            let left: Vec<Pending> = list.lock().drain(..).collect();
            drop(left);
        }
    }

    fn show(&self, out: &mut String) {
        let c = &self.cfg;
        let _ = writeln!(
            out,
            "null/irqmode={} completion_nsec={} memory_backed={} mbps={} bs={} size_bytes={}",
            c.irqmode as u8, c.completion_nsec, c.memory_backed as u8, c.mbps, c.bs, c.size_bytes
        );
        if let Some(mem) = &self.mem {
            let _ = writeln!(out, "null/pages={}", mem.nr_pages());
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
