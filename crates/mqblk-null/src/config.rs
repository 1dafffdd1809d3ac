//! null_blk's parameters: `NullConfig` (null_blk's defaults, a setter
//! per parameter), its `null:` spec form and the spec's checks, with the
//! kernel module's parameter names, defaults and meanings.
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
//! | irq_cpus | (any) | CPUs the completion threads run on, as ranges and `:`-separated lists (`2-3`, `0:2`; `,` separates spec keys): queue i's thread on the i-th CPU of the list, round-robin, as managed interrupts are spread over CPUs |
//! | memory_backed | 0 | keep written data (never-written blocks read zeros) |
//! | discard | 0 | support discard (needs memory_backed) |
//! | cache_size | 0 | a volatile write cache of this many MiB (needs memory_backed; not zoned): writes are acknowledged from it, FLUSH and FUA make them durable, `Device::power_cut` loses the rest (cache.rs) |
//! | cache_mode | writeback | `writeback`: as above; `writethrough`: every write also reaches the medium before it completes (a power cut loses nothing; no volatile cache is advertised) |
//! | backing_file | (none) | memory_backed's data in this file instead of memory (mqblk's; not zoned): created sparse at the device's size, or reopened if it has exactly that size, so the durable state outlives the process; FLUSH and FUA `fdatasync` it (store.rs) |
//! | powercut_tear | 0 | a power cut first writes each cached page's sectors to the medium at random (torn multi-sector writes) |
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
//! | zone_append_max_sectors | 0 | largest zone append, aligned down to the block size and at most the zone capacity (0: the capacity; with zoned_compat=6.1 taken as given, 0: the zone size) |
//! | zone_readonly | 0 | the last sequential zones start READONLY (before those of zone_offline) |
//! | zone_offline | 0 | the last sequential zones start OFFLINE |
//! | zone_full | 0 | the other sequential zones start FULL, write pointer at the capacity (Linux 6.12; refused with zoned_compat=6.1) |
//! | zoned_compat | 6.12 | the Linux whose zoned null_blk to follow: `6.12`, or `6.1` (Debian 12's, the first kernel oracle's): no zone write plugs, so after a failed write a write at the write pointer succeeds without a zone report first; no zone_full; zone appends up to the zone size (zoned.rs lists what differs) |
//! | badblocks | (none) | sectors whose I/O fails with EIO: inclusive `START-END` ranges of 512-byte sectors, `:`-separated; on a live device the `badblocks` attribute takes `+START-END` and `-START-END` (badblocks.rs) |
//! | badblocks_once | 0 | a bad range is cleared by the first I/O that fails on it |
//! | badblocks_partial_io | 0 | an I/O on a bad range transfers the blocks before the first bad sector, then fails |
//! | timeout | (none) | fault injection: requests lost until the block layer's timeout handler ends them with ETIMEDOUT, as the kernel's fault_attr `interval:probability:space:times` (`,` written `:`; fault.rs); with the block-layer key `io_timeout` (ms) to wait less than 30 s |
//! | requeue | (none) | fault injection: requests handed back busy and dispatched again (same syntax) |
//! | error_read, error_write, error_flush, error_discard | (none) | transient errors (mqblk's): requests of that op (discard: discard and write zeroes) fail with EIO without being handled, same syntax; a retry may succeed |
//! | zone_lock | per-zone | a lock per zone or one `global` device lock (the design before "null_blk: improve zone locking"); either spins without memory_backed and sleeps with it (zoned.rs) |
//!
//! Relies on: config.rs (SpecParams, ConfigError) for the spec; zoned.rs
//! for the zoned parameters.

use mqblk::config::{ConfigError, SpecParams};
use mqblk::SECTOR_SIZE;

pub use super::fault::FaultSpec;
use super::zoned::{ZoneLock, ZonedCompat, ZonedConfig};

/// CPUs `irq_cpus` may name: those of a cpu_set_t (the C library's
/// CPU_SETSIZE).
pub const MAX_CPUS: usize = 1024;

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
    "irq_cpus",
    "memory_backed",
    "discard",
    "cache_size",
    "powercut_tear",
    "cache_mode",
    "backing_file",
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
    "zone_full",
    "zone_lock",
    "zoned_compat",
    "badblocks",
    "badblocks_once",
    "badblocks_partial_io",
    "timeout",
    "requeue",
    "error_read",
    "error_write",
    "error_flush",
    "error_discard",
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

/// What the write cache does with a write (`cache_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    /// Acknowledged from the cache; FLUSH and FUA make it durable.
    Writeback,
    /// Written to the medium before it completes (and cached for reads).
    Writethrough,
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
    /// `irq_cpus`: the completion threads' CPUs (empty: wherever the
    /// scheduler puts them).
    pub irq_cpus: Vec<usize>,
    pub memory_backed: bool,
    pub discard: bool,
    /// `cache_size`: the volatile write cache in MiB (0: none).
    pub cache_size_mb: u64,
    pub cache_mode: CacheMode,
    pub powercut_tear: bool,
    /// `backing_file`: the medium in this file (memory_backed=1).
    pub backing_file: Option<std::path::PathBuf>,
    pub mbps: u64,
    pub max_sectors: u32,
    pub max_segments: u32,
    pub rotational: bool,
    pub seek_nsec: u64,
    pub channels: usize,
    /// `zoned=1` and its parameters.
    pub zoned: Option<ZonedConfig>,
    /// `badblocks`: bad sector ranges, (first, last) inclusive.
    pub badblocks: Vec<(u64, u64)>,
    pub badblocks_once: bool,
    pub badblocks_partial_io: bool,
    /// `timeout` fault injection (fault.rs).
    pub timeout: Option<FaultSpec>,
    /// `requeue` fault injection (fault.rs).
    pub requeue: Option<FaultSpec>,
    /// Transient EIO per op: read, write, flush, discard (and write
    /// zeroes), as `error_read` ... `error_discard` (fault.rs).
    pub error: [Option<FaultSpec>; 4],
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
            irq_cpus: Vec::new(),
            memory_backed: false,
            discard: false,
            cache_size_mb: 0,
            cache_mode: CacheMode::Writeback,
            powercut_tear: false,
            backing_file: None,
            mbps: 0,
            max_sectors: 255,
            max_segments: mqblk::DEFAULT_MAX_SEGMENTS,
            rotational: false,
            seek_nsec: 8_000_000,
            channels: 0,
            zoned: None,
            badblocks: Vec::new(),
            badblocks_once: false,
            badblocks_partial_io: false,
            timeout: None,
            requeue: None,
            error: [None; 4],
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

    mqblk::setters! {
        bs: u32,
        submit_queues: usize,
        poll_queues: usize,
        poll_mode: PollMode,
        hw_queue_depth: u32,
        irqmode: IrqMode,
        completion_nsec: u64,
        irq_cpus: Vec<usize>,
        memory_backed: bool,
        discard: bool,
        cache_size_mb: u64,
        cache_mode: CacheMode,
        powercut_tear: bool,
        backing_file: Option<std::path::PathBuf>,
        mbps: u64,
        max_sectors: u32,
        max_segments: u32,
        rotational: bool,
        seek_nsec: u64,
        channels: usize,
        zoned: Option<ZonedConfig>,
        badblocks: Vec<(u64, u64)>,
        badblocks_once: bool,
        badblocks_partial_io: bool,
        timeout: Option<FaultSpec>,
        requeue: Option<FaultSpec>,
        error: [Option<FaultSpec>; 4],
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
        let bs = Self::bs_from_params(p)?;
        let irqmode = match p.u64_in("irqmode", 1, 0, 2)? {
            0 => IrqMode::None,
            1 => IrqMode::Softirq,
            _ => IrqMode::Timer,
        };
        if p.is_set("channels") && p.bool("rotational", false)? {
            return Err(p.conflict("rotational=1 and channels=N are different service models: choose one"));
        }
        let threaded = irqmode != IrqMode::None || p.is_set("mbps") || p.is_set("channels") || p.is_set("rotational");
        if p.is_set("irq_cpus") && !threaded {
            return Err(p.conflict("irq_cpus places completion threads: irqmode=0 has none (use irqmode=1 or 2)"));
        }
        let (poll_mode, poll_queues) = Self::poll_from_params(p)?;
        let (memory_backed, discard, zoned) = Self::backing_from_params(p)?;
        let max_sectors = Self::max_sectors_from_params(p, bs)?;
        Ok(Self {
            size_bytes,
            bs,
            submit_queues: p.u64_in("submit_queues", 1, 1, 1024)? as usize,
            poll_queues,
            poll_mode,
            hw_queue_depth: p.u64_in("hw_queue_depth", 64, 1, 65536)? as u32,
            irqmode,
            completion_nsec: p.u64_in("completion_nsec", 10_000, 0, 60_000_000_000)?,
            irq_cpus: Self::irq_cpus_from_params(p)?,
            memory_backed,
            discard,
            cache_size_mb: Self::cache_from_params(p, memory_backed, zoned.is_some())?,
            cache_mode: match p.choice("cache_mode", "writeback", &["writeback", "writethrough"])? {
                "writethrough" => CacheMode::Writethrough,
                _ => CacheMode::Writeback,
            },
            powercut_tear: p.bool("powercut_tear", false)?,
            backing_file: Self::backing_file_from_params(p, memory_backed, zoned.is_some())?,
            mbps: p.u64_in("mbps", 0, 0, 1 << 30)?,
            max_sectors,
            max_segments: p.u64_in("max_segments", u64::from(mqblk::DEFAULT_MAX_SEGMENTS), 1, 65535)? as u32,
            rotational: p.bool("rotational", false)?,
            seek_nsec: p.u64_in("seek_nsec", 8_000_000, 0, 10_000_000_000)?,
            channels: p.u64_in("channels", 0, 0, 4096)? as usize,
            badblocks: Self::badblocks_from_params(p, size_bytes, zoned.is_some())?,
            badblocks_once: p.bool("badblocks_once", false)?,
            badblocks_partial_io: p.bool("badblocks_partial_io", false)?,
            timeout: Self::fault_from_params(p, "timeout")?,
            requeue: Self::fault_from_params(p, "requeue")?,
            error: [
                Self::fault_from_params(p, "error_read")?,
                Self::fault_from_params(p, "error_write")?,
                Self::fault_from_params(p, "error_flush")?,
                Self::fault_from_params(p, "error_discard")?,
            ],
            zoned,
        })
    }

    /// A fault injection key: `interval:probability:space:times`.
    fn fault_from_params(p: &SpecParams, key: &str) -> Result<Option<FaultSpec>, ConfigError> {
        let Some(value) = p.raw(key) else { return Ok(None) };
        FaultSpec::parse(value).map(Some).map_err(|e| ConfigError::BadValue {
            driver: p.driver.clone(),
            key: key.into(),
            value: value.into(),
            expected: format!("interval:probability:space:times ({e})"),
        })
    }

    /// `badblocks`: ranges of sectors on the device; not on zoned devices
    /// (the zoned write path does not apply them yet).
    fn badblocks_from_params(p: &SpecParams, size_bytes: u64, zoned: bool) -> Result<Vec<(u64, u64)>, ConfigError> {
        let Some(value) = p.raw("badblocks") else { return Ok(Vec::new()) };
        if zoned {
            return Err(p.conflict("badblocks on a zoned device is not supported (zoned=1)"));
        }
        let ranges = super::badblocks::parse_list(value, size_bytes >> mqblk::SECTOR_SHIFT).map_err(|e| {
            ConfigError::BadValue {
                driver: p.driver.clone(),
                key: "badblocks".into(),
                value: value.into(),
                expected: format!("START-END ranges of sectors joined by ':' ({e})"),
            }
        })?;
        Ok(ranges.into_iter().map(|(s, e)| (s, e - 1)).collect())
    }

    /// `bs`: a power of two from 512 to 4096.
    fn bs_from_params(p: &SpecParams) -> Result<u32, ConfigError> {
        let bs = p.u64_in("bs", 512, 512, 4096)? as u32;
        if !bs.is_power_of_two() {
            return Err(ConfigError::BadValue {
                driver: p.driver.clone(),
                key: "bs".into(),
                value: bs.to_string(),
                expected: "512, 1024, 2048 or 4096".into(),
            });
        }
        Ok(bs)
    }

    /// `irq_cpus`: CPU numbers below `MAX_CPUS`, as ranges (`2-3`) joined
    /// by `:` (a spec's `,` separates keys), in the order given (queue i
    /// takes the i-th, round-robin); a CPU may repeat.
    fn irq_cpus_from_params(p: &SpecParams) -> Result<Vec<usize>, ConfigError> {
        let Some(value) = p.raw("irq_cpus") else { return Ok(Vec::new()) };
        let bad = |why: &str| ConfigError::BadValue {
            driver: p.driver.clone(),
            key: "irq_cpus".into(),
            value: value.to_string(),
            expected: format!("CPU numbers below {MAX_CPUS} as ranges joined by ':', e.g. 2-3 or 0:2 ({why})"),
        };
        let mut cpus = Vec::new();
        for part in value.split(':') {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let (Ok(lo), Ok(hi)) = (lo.trim().parse::<usize>(), hi.trim().parse::<usize>()) else {
                return Err(bad(&format!("'{part}' is not a CPU or a range")));
            };
            if lo > hi {
                return Err(bad(&format!("the range {part} runs backwards")));
            }
            if hi >= MAX_CPUS {
                return Err(bad(&format!("CPU {hi} is too large")));
            }
            cpus.extend(lo..=hi);
        }
        Ok(cpus)
    }

    /// `poll_mode` and `poll_queues` (none with hybrid polling).
    fn poll_from_params(p: &SpecParams) -> Result<(PollMode, usize), ConfigError> {
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
        Ok((poll_mode, poll_queues))
    }

    /// `memory_backed`, `discard` and `zoned` with its keys, which
    /// constrain each other.
    fn backing_from_params(p: &SpecParams) -> Result<(bool, bool, Option<ZonedConfig>), ConfigError> {
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
        Ok((memory_backed, discard, zoned))
    }

    /// `cache_size` (MiB): needs the memory backing it caches, and a device
    /// that is not zoned (zoned writes go to the medium directly).
    fn cache_from_params(p: &SpecParams, memory_backed: bool, zoned: bool) -> Result<u64, ConfigError> {
        let mb = p.u64_in("cache_size", 0, 0, 1 << 20)?;
        if mb > 0 && !memory_backed {
            return Err(p.conflict("cache_size needs memory_backed=1 (the cache holds data the medium would)"));
        }
        if mb > 0 && zoned {
            return Err(p.conflict("cache_size on a zoned device is not supported (zoned=1)"));
        }
        if p.is_set("cache_mode") && mb == 0 {
            return Err(p.conflict("cache_mode needs a write cache (cache_size=MiB)"));
        }
        if p.bool("powercut_tear", false)? && mb == 0 {
            return Err(p.conflict("powercut_tear needs a write cache to tear (cache_size=MiB)"));
        }
        Ok(mb)
    }

    /// `backing_file`: memory_backed's data in a file; not zoned (zone
    /// states are not kept in it).
    fn backing_file_from_params(
        p: &SpecParams,
        memory_backed: bool,
        zoned: bool,
    ) -> Result<Option<std::path::PathBuf>, ConfigError> {
        let Some(path) = p.raw("backing_file") else { return Ok(None) };
        if path.is_empty() {
            return Err(ConfigError::BadValue {
                driver: p.driver.clone(),
                key: "backing_file".into(),
                value: String::new(),
                expected: "the path of a file".into(),
            });
        }
        if !memory_backed {
            return Err(p.conflict("backing_file needs memory_backed=1 (it holds the data memory would)"));
        }
        if zoned {
            return Err(p.conflict("backing_file on a zoned device is not supported (zone states live in memory)"));
        }
        Ok(Some(path.into()))
    }

    /// `max_sectors`, aligned down to the block size.
    fn max_sectors_from_params(p: &SpecParams, bs: u32) -> Result<u32, ConfigError> {
        // Requests are whole blocks: align max_sectors down to the block size.
        let bs_sectors = bs / SECTOR_SIZE as u32;
        let max_sectors = p.u64_in("max_sectors", 255, 1, 1 << 20)? as u32;
        let max_sectors = max_sectors / bs_sectors * bs_sectors;
        if max_sectors == 0 {
            return Err(p.conflict(format!("max_sectors is smaller than one block of bs={bs}")));
        }
        Ok(max_sectors)
    }

    fn zoned_from_params(p: &SpecParams) -> Result<Option<ZonedConfig>, ConfigError> {
        if !p.bool("zoned", false)? {
            if let Some((key, _)) = p.pairs().iter().find(|(k, _)| k.starts_with("zone_") || k == "zoned_compat") {
                return Err(p.conflict(format!("{key} needs zoned=1")));
            }
            return Ok(None);
        }
        let u32_key = |key: &str, max: u64| -> Result<u32, ConfigError> { Ok(p.u64_in(key, 0, 0, max)? as u32) };
        let compat = match p.choice("zoned_compat", "6.12", &["6.12", "6.1"])? {
            "6.1" => ZonedCompat::Linux6_1,
            _ => ZonedCompat::Linux6_12,
        };
        let zone_full = p.bool("zone_full", false)?;
        if zone_full && compat == ZonedCompat::Linux6_1 {
            return Err(p.conflict(
                "zone_full=1 came with Linux 6.12 (\"null_blk: Introduce the zone_full parameter\"): null_blk 6.1 \
                 has no such parameter, so zoned_compat=6.1 refuses it",
            ));
        }
        Ok(Some(ZonedConfig {
            zone_size_mb: p.u64_in("zone_size", 256, 1, 1 << 20)?,
            zone_capacity_mb: p.u64_in("zone_capacity", 0, 0, 1 << 20)?,
            zone_nr_conv: u32_key("zone_nr_conv", 1 << 20)?,
            zone_max_open: u32_key("zone_max_open", 1 << 20)?,
            zone_max_active: u32_key("zone_max_active", 1 << 20)?,
            zone_append_max_sectors: u32_key("zone_append_max_sectors", 1 << 22)?,
            zone_readonly: u32_key("zone_readonly", 1 << 20)?,
            zone_offline: u32_key("zone_offline", 1 << 20)?,
            zone_full,
            zone_lock: match p.choice("zone_lock", "per-zone", &["per-zone", "global"])? {
                "global" => ZoneLock::Global,
                _ => ZoneLock::PerZone,
            },
            compat,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(spec: &str) -> Result<mqblk::Device, mqblk::Error> {
        crate::register();
        mqblk::Device::open(spec)
    }

    #[test]
    fn a_mistyped_key_or_driver_names_the_closest() {
        let e = open("null:irqmod=1").unwrap_err().to_string();
        assert!(e.contains("unknown key 'irqmod' (did you mean 'irqmode'?)"), "{e}");
        let e = open("nul:gb=1").unwrap_err().to_string();
        assert!(e.contains("(did you mean 'null'?)"), "{e}");
        let e = open("null:zzzzzzzz=1").unwrap_err().to_string();
        assert!(!e.contains("did you mean"), "nothing close: no guess: {e}");
    }

    fn cfg(spec: &str) -> Result<NullConfig, String> {
        let p = SpecParams::parse(spec).map_err(|e| e.to_string())?;
        NullConfig::from_params(&p).map_err(|e| e.to_string())
    }

    #[test]
    fn irq_cpus_parses_ranges_and_colon_lists_in_order() {
        assert_eq!(cfg("null:irq_cpus=1").unwrap().irq_cpus, vec![1]);
        assert_eq!(cfg("null:irq_cpus=2-3:0").unwrap().irq_cpus, vec![2, 3, 0]);
        assert!(cfg("null:").unwrap().irq_cpus.is_empty());
        let c = NullConfig::new().irqmode(IrqMode::Timer).irq_cpus(vec![1, 0]);
        assert_eq!(c.validate().unwrap().irq_cpus, vec![1, 0], "round-trips through the spec form");
    }

    #[test]
    fn zoned_compat_parses_round_trips_and_names_its_errors() {
        let z = |spec: &str| cfg(spec).map(|c| c.zoned.expect("zoned"));
        assert_eq!(z("null:zoned=1").unwrap().compat, ZonedCompat::Linux6_12, "6.12 by default");
        let old = z("null:zoned=1,zoned_compat=6.1").unwrap();
        assert_eq!(old.compat, ZonedCompat::Linux6_1);
        let c = NullConfig::new().zoned(Some(old.clone()));
        assert_eq!(c.validate().unwrap().zoned, Some(old), "round-trips through the spec form");
        assert!(z("null:zoned=1,zone_full=1").unwrap().zone_full);
        for (spec, why) in [
            ("null:zoned=1,zoned_compat=5.4", "accepted: 6.12, 6.1"),
            ("null:zoned_compat=6.1", "zoned_compat needs zoned=1"),
            ("null:zoned=1,zone_full=1,zoned_compat=6.1", "null_blk 6.1 has no such parameter"),
            ("null:zoned=1,zoned_compt=6.1", "did you mean 'zoned_compat'"),
        ] {
            let e = cfg(spec).unwrap_err();
            assert!(e.contains(why), "{spec}: {e}");
        }
    }

    #[test]
    fn irq_cpus_rejects_bad_lists_with_the_reason() {
        for (spec, why) in [
            ("null:irq_cpus=", "'' is not a CPU"),
            ("null:irq_cpus=a", "'a' is not a CPU"),
            ("null:irq_cpus=0:", "'' is not a CPU"),
            ("null:irq_cpus=3-1", "runs backwards"),
            ("null:irq_cpus=1024", "CPU 1024 is too large"),
        ] {
            let e = cfg(spec).unwrap_err();
            assert!(e.contains("bad value") && e.contains("irq_cpus") && e.contains(why), "{spec}: {e}");
        }
        let e = cfg("null:irqmode=0,irq_cpus=0").unwrap_err();
        assert!(e.contains("irqmode=0 has none"), "{e}");
        assert!(cfg("null:irqmode=0,mbps=100,irq_cpus=0").is_ok(), "a service model has completion threads");
    }
}
