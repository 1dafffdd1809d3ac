//! null_blk's parameters: `NullConfig` (null_blk's defaults, a setter
//! per parameter), its `null:` spec form and the spec's checks, with the
//! kernel module's parameter names, defaults and meanings (the table of
//! keys is in the crate docs, lib.rs).
//!
//! A spec is parsed once into a `NullConfig` (`NullConfig::from_params`,
//! each key's range and format); `validate` then checks the values
//! together, for specs and typed configs alike, and `write_spec` prints the
//! keys that differ from these defaults (spec.rs).
//!
//! Relies on: mqblk's spec grammar (SpecParams, ConfigError); zoned/ for
//! the zoned parameters; badblocks.rs and fault.rs for their value forms.

use mqblk::config::{check_range, ConfigError, SpecParams};
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
///
/// ```
/// use mqblk_null::{IrqMode, NullConfig};
///
/// assert_eq!(IrqMode::from_number(2), Some(IrqMode::Timer));
/// assert_eq!(IrqMode::from_number(3), None);
/// assert_eq!(NullConfig::new().irq_mode(), IrqMode::Softirq, "null_blk's default");
/// assert_eq!(NullConfig::new().irqmode(IrqMode::None).irq_mode(), IrqMode::None);
/// ```
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
///
/// ```
/// use mqblk::Device;
/// use mqblk_null::{CacheMode, IrqMode, NullConfig};
///
/// let cached = NullConfig::new().size_mb(16).irqmode(IrqMode::None).memory_backed(true).cache_size_mb(1);
/// let dev = Device::builder(cached.clone()).build()?;
/// let mut client = dev.client();
/// client.write_at(&[5; 4096], 0)?;
/// assert_eq!(dev.power().unwrap().cut()?, 1, "one cache page lost");
/// let mut back = [9; 4096];
/// client.read_at(&mut back, 0)?;
/// assert_eq!(back, [0; 4096], "the write never reached the medium");
///
/// // Write-through: every write reaches the medium before it completes.
/// let dev = Device::builder(cached.cache_mode(CacheMode::Writethrough)).build()?;
/// dev.client().write_at(&[5; 4096], 0)?;
/// assert_eq!(dev.power().unwrap().cut()?, 0);
/// # Ok::<(), mqblk::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    /// Acknowledged from the cache; FLUSH and FUA make it durable.
    Writeback,
    /// Written to the medium before it completes (and cached for reads).
    Writethrough,
}

impl IrqMode {
    /// From the spec value 0, 1 or 2 (example: [`IrqMode`]).
    pub fn from_number(n: u64) -> Option<Self> {
        [IrqMode::None, IrqMode::Softirq, IrqMode::Timer].into_iter().find(|m| *m as u64 == n)
    }
}

/// How hipri requests are completed by polling (`poll_mode`).
///
/// ```
/// use mqblk::{Bio, Buf, Device, ReqFlags};
/// use mqblk_null::{NullConfig, PollMode};
///
/// for mode in [PollMode::Queues, PollMode::Hybrid] {
///     let mut cfg = NullConfig::new().gb(1).poll_mode(mode);
///     if mode == PollMode::Hybrid {
///         cfg = cfg.poll_queues(0); // every queue takes both kinds
///     }
///     let dev = Device::builder(cfg).build()?;
///     let mut client = dev.client();
///     // A hipri read completes when its submitter polls (in do_io).
///     let read = Bio::read(0, Buf::new(4096)).with_flags(ReqFlags::HIPRI);
///     assert!(client.submit_and_wait_completion(read)?.status.is_ok());
/// }
/// # Ok::<(), mqblk::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollMode {
    /// Dedicated poll queues with notifications always off (the kernel's
    /// merged design, NVMe's and later virtio_blk's).
    Queues,
    /// Shared queues that toggle notifications (the RFC "virtio_blk:
    /// implement blk_mq_ops->poll()", whose design was not merged).
    Hybrid,
}

/// null_blk's parameters (the keys of the crate docs' table):
/// `NullConfig::new()` is null_blk's defaults, changed by a setter per
/// parameter (`gb`, `size_mb`, `irqmode`, and one named as each other
/// field). The same checks as a `null:` spec apply when the device is
/// built, with errors naming the spec key.
///
/// ```
/// use mqblk::config::SpecParams;
/// use mqblk::Device;
/// use mqblk_null::{IrqMode, NullConfig};
///
/// let cfg = NullConfig::new()
///     .gb(2)
///     .bs(4096)
///     .submit_queues(2)
///     .hw_queue_depth(32)
///     .irqmode(IrqMode::Timer)
///     .completion_nsec(20_000)
///     .max_sectors(255);
/// cfg.validate()?;
/// assert_eq!(cfg.max_sectors_aligned(), 248, "whole 4 KiB blocks");
/// assert_eq!(
///     Device::builder(cfg.clone()).to_string(),
///     "null:gb=2,bs=4096,submit_queues=2,hw_queue_depth=32,irqmode=2,completion_nsec=20000"
/// );
///
/// // A spec's keys parse into the same config.
/// let parsed = NullConfig::from_params(&SpecParams::parse(
///     "null:gb=2,bs=4096,submit_queues=2,hw_queue_depth=32,irqmode=2,completion_nsec=20000",
/// )?)?;
/// assert_eq!(parsed, cfg.max_sectors(248));
///
/// // Checks name the key; values that do not go together are refused.
/// let e = NullConfig::new().size_mb(0).validate().unwrap_err();
/// assert!(e.to_string().contains("'size'"));
/// let e = NullConfig::new().discard(true).validate().unwrap_err();
/// assert!(e.to_string().contains("memory_backed"));
/// # Ok::<(), mqblk::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NullConfig {
    pub size_bytes: u64,
    pub bs: u32,
    pub submit_queues: usize,
    pub poll_queues: usize,
    pub poll_mode: PollMode,
    pub hw_queue_depth: u32,
    /// `irqmode`: None until chosen, which is null_blk's default,
    /// softirq ([`NullConfig::irq_mode`]); a front end may choose for a
    /// spec that did not (`mqblk serve` completes inline).
    pub irqmode: Option<IrqMode>,
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
            irqmode: None,
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
            max_segments: mqblk::driver::DEFAULT_MAX_SEGMENTS,
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

/// The accepted range of each integer key: one table for the spec's parse
/// and the typed checks, so both name the same bounds.
mod range {
    pub const GB: (u64, u64) = (1, 1 << 20);
    pub const SIZE_MB: (u64, u64) = (0, 1 << 30);
    pub const BS: (u64, u64) = (512, 4096);
    pub const QUEUES: (u64, u64) = (1, 1024);
    pub const POLL_QUEUES: (u64, u64) = (0, 1024);
    pub const HW_QUEUE_DEPTH: (u64, u64) = (1, 65536);
    pub const IRQMODE: (u64, u64) = (0, 2);
    pub const COMPLETION_NSEC: (u64, u64) = (0, 60_000_000_000);
    pub const CACHE_SIZE_MB: (u64, u64) = (0, 1 << 20);
    pub const MBPS: (u64, u64) = (0, 1 << 30);
    pub const MAX_SECTORS: (u64, u64) = (1, 1 << 20);
    pub const MAX_SEGMENTS: (u64, u64) = (1, 65535);
    pub const SEEK_NSEC: (u64, u64) = (0, 10_000_000_000);
    pub const CHANNELS: (u64, u64) = (0, 4096);
    pub const ZONE_SIZE_MB: (u64, u64) = (1, 1 << 20);
    pub const ZONE_CAPACITY_MB: (u64, u64) = (0, 1 << 20);
    pub const ZONE_COUNT: (u64, u64) = (0, 1 << 20);
    pub const ZONE_APPEND_MAX_SECTORS: (u64, u64) = (0, 1 << 22);
}

impl NullConfig {
    /// null_blk's defaults (example: [`NullConfig`]).
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

    /// Sets `irqmode`.
    pub fn irqmode(mut self, irqmode: IrqMode) -> Self {
        self.irqmode = Some(irqmode);
        self
    }

    /// The completion mode in effect: as chosen, else null_blk's default
    /// (softirq).
    pub fn irq_mode(&self) -> IrqMode {
        self.irqmode.unwrap_or(IrqMode::Softirq)
    }

    mqblk::setters! {
        bs: u32,
        submit_queues: usize,
        poll_queues: usize,
        poll_mode: PollMode,
        hw_queue_depth: u32,
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

    /// Whether requests complete on threads of the driver (irqmode 1 or 2,
    /// or a service model, which times completions on them).
    pub(crate) fn threaded(&self) -> bool {
        self.irq_mode() != IrqMode::None || self.modelled()
    }

    /// Whether a service model times the device (mbps, rotational, channels).
    pub(crate) fn modelled(&self) -> bool {
        self.mbps > 0 || self.rotational || self.channels > 0
    }

    /// `max_sectors` aligned down to the block size: requests are whole
    /// blocks.
    pub fn max_sectors_aligned(&self) -> u32 {
        let bs_sectors = self.bs / SECTOR_SIZE as u32;
        self.max_sectors / bs_sectors.max(1) * bs_sectors.max(1)
    }

    /// Parses a `null:` spec's keys (the block layer's are taken out
    /// before): each key's form and range, then `validate`.
    pub fn from_params(p: &SpecParams) -> Result<Self, ConfigError> {
        p.check_keys(NULL_KEYS)?;
        Self::check_key_presence(p)?;
        let d = NullConfig::default();
        let int = |key: &str, default: u64, (min, max): (u64, u64)| p.u64_in(key, default, min, max);
        let size_mb = int("size", 0, range::SIZE_MB)?;
        let size_bytes = if size_mb > 0 { size_mb << 20 } else { int("gb", d.size_bytes >> 30, range::GB)? << 30 };
        let irqmode = match p.is_set("irqmode") {
            true => IrqMode::from_number(int("irqmode", 1, range::IRQMODE)?),
            false => None,
        };
        let poll_mode = match p.choice("poll_mode", "queues", &["queues", "hybrid"])? {
            "hybrid" => PollMode::Hybrid,
            _ => PollMode::Queues,
        };
        let default_poll_queues = if poll_mode == PollMode::Hybrid { 0 } else { 1 };
        let mut cfg = Self {
            size_bytes,
            bs: int("bs", 512, range::BS)? as u32,
            submit_queues: int("submit_queues", 1, range::QUEUES)? as usize,
            poll_queues: int("poll_queues", default_poll_queues, range::POLL_QUEUES)? as usize,
            poll_mode,
            hw_queue_depth: int("hw_queue_depth", d.hw_queue_depth.into(), range::HW_QUEUE_DEPTH)? as u32,
            irqmode,
            completion_nsec: int("completion_nsec", d.completion_nsec, range::COMPLETION_NSEC)?,
            irq_cpus: Self::irq_cpus_from_params(p)?,
            memory_backed: p.bool("memory_backed", false)?,
            discard: p.bool("discard", false)?,
            cache_size_mb: int("cache_size", 0, range::CACHE_SIZE_MB)?,
            cache_mode: match p.choice("cache_mode", "writeback", &["writeback", "writethrough"])? {
                "writethrough" => CacheMode::Writethrough,
                _ => CacheMode::Writeback,
            },
            powercut_tear: p.bool("powercut_tear", false)?,
            backing_file: p.raw("backing_file").map(Into::into),
            mbps: int("mbps", 0, range::MBPS)?,
            max_sectors: int("max_sectors", d.max_sectors.into(), range::MAX_SECTORS)? as u32,
            max_segments: int("max_segments", d.max_segments.into(), range::MAX_SEGMENTS)? as u32,
            rotational: p.bool("rotational", false)?,
            seek_nsec: int("seek_nsec", d.seek_nsec, range::SEEK_NSEC)?,
            channels: int("channels", 0, range::CHANNELS)? as usize,
            zoned: Self::zoned_from_params(p)?,
            badblocks: Vec::new(),
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
        };
        cfg.validate_except_badblocks()?;
        cfg.badblocks = Self::badblocks_from_params(p, &cfg)?;
        cfg.max_sectors = cfg.max_sectors_aligned();
        Ok(cfg)
    }

    /// Keys that mean nothing without another one, refused when given
    /// (values equal to a default cannot be told apart once typed).
    fn check_key_presence(p: &SpecParams) -> Result<(), ConfigError> {
        if !p.bool("zoned", false)? {
            if let Some((key, _)) = p.pairs().iter().find(|(k, _)| k.starts_with("zone_") || k == "zoned_compat") {
                return Err(p.conflict(format!("{key} needs zoned=1")));
            }
        }
        if p.is_set("cache_mode") && p.u64_in("cache_size", 0, 0, u64::MAX)? == 0 {
            return Err(p.conflict("cache_mode needs a write cache (cache_size=MiB)"));
        }
        if p.is_set("channels") && p.bool("rotational", false)? {
            return Err(p.conflict("rotational=1 and channels=N are different service models: choose one"));
        }
        let timed = p.u64_in("irqmode", 1, 0, 2)? == IrqMode::Timer as u64
            || p.u64_in("channels", 0, 0, u64::MAX)? > 0
            || p.bool("rotational", false)?;
        if p.is_set("completion_nsec") && !timed {
            return Err(p.conflict(COMPLETION_NSEC_UNUSED));
        }
        if p.is_set("seek_nsec") && !p.bool("rotational", false)? {
            return Err(p.conflict(SEEK_NSEC_UNUSED));
        }
        Ok(())
    }

    /// Checks every value and how they go together, as a spec's parse
    /// would: errors name the spec key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_except_badblocks()?;
        self.check_badblocks()
    }

    fn validate_except_badblocks(&self) -> Result<(), ConfigError> {
        self.check_ranges()?;
        self.check_completion()?;
        self.check_backing()?;
        if let Some(z) = &self.zoned {
            z.validate()?;
        }
        Ok(())
    }

    /// Each integer within its key's range (as `from_params` reads it).
    fn check_ranges(&self) -> Result<(), ConfigError> {
        let check = |key: &str, value: u64, range: (u64, u64)| check_range("null", key, value, range);
        if self.size_bytes < 1 << 20 || self.size_bytes % (1 << 20) != 0 {
            return Err(ConfigError::BadValue {
                driver: "null".into(),
                key: "size".into(),
                value: format!("{} bytes", self.size_bytes),
                expected: "a whole number of MiB".into(),
            });
        }
        check("size", self.size_bytes >> 20, (1, range::SIZE_MB.1))?;
        check("bs", self.bs.into(), range::BS)?;
        if !self.bs.is_power_of_two() {
            return Err(ConfigError::BadValue {
                driver: "null".into(),
                key: "bs".into(),
                value: self.bs.to_string(),
                expected: "512, 1024, 2048 or 4096".into(),
            });
        }
        check("submit_queues", self.submit_queues as u64, range::QUEUES)?;
        check("poll_queues", self.poll_queues as u64, range::POLL_QUEUES)?;
        check("hw_queue_depth", self.hw_queue_depth.into(), range::HW_QUEUE_DEPTH)?;
        check("completion_nsec", self.completion_nsec, range::COMPLETION_NSEC)?;
        check("cache_size", self.cache_size_mb, range::CACHE_SIZE_MB)?;
        check("mbps", self.mbps, range::MBPS)?;
        check("max_sectors", self.max_sectors.into(), range::MAX_SECTORS)?;
        check("max_segments", self.max_segments.into(), range::MAX_SEGMENTS)?;
        check("seek_nsec", self.seek_nsec, range::SEEK_NSEC)?;
        check("channels", self.channels as u64, range::CHANNELS)?;
        if let Some(&cpu) = self.irq_cpus.iter().find(|&&c| c >= MAX_CPUS) {
            return Err(ConfigError::BadValue {
                driver: "null".into(),
                key: "irq_cpus".into(),
                value: cpu.to_string(),
                expected: format!("CPU numbers below {MAX_CPUS} (CPU {cpu} is too large)"),
            });
        }
        if self.max_sectors_aligned() == 0 {
            let bs = self.bs;
            return Err(ConfigError::conflict("null", format!("max_sectors is smaller than one block of bs={bs}")));
        }
        Ok(())
    }

    /// How requests complete: polling, completion threads, service models.
    fn check_completion(&self) -> Result<(), ConfigError> {
        let conflict = |message: &str| Err(ConfigError::conflict("null", message));
        if self.poll_mode == PollMode::Hybrid && self.poll_queues > 0 {
            return conflict("poll_mode=hybrid polls the submit queues themselves: poll_queues must be 0");
        }
        if self.rotational && self.channels > 0 {
            return conflict("rotational=1 and channels=N are different service models: choose one");
        }
        if !self.irq_cpus.is_empty() && !self.threaded() {
            return conflict("irq_cpus places completion threads: irqmode=0 has none (use irqmode=1 or 2)");
        }
        let default = NullConfig::default();
        let timed = self.irq_mode() == IrqMode::Timer || self.channels > 0 || self.rotational;
        if self.completion_nsec != default.completion_nsec && !timed {
            return conflict(COMPLETION_NSEC_UNUSED);
        }
        if self.seek_nsec != default.seek_nsec && !self.rotational {
            return conflict(SEEK_NSEC_UNUSED);
        }
        Ok(())
    }

    /// `memory_backed`, `discard`, the cache, the backing file and zones,
    /// which constrain each other.
    fn check_backing(&self) -> Result<(), ConfigError> {
        let conflict = |message: &str| Err(ConfigError::conflict("null", message));
        let zoned = self.zoned.is_some();
        if self.discard && !self.memory_backed {
            return conflict("discard=1 needs memory_backed=1 (null_blk ignores discard without memory backing)");
        }
        if zoned && self.discard {
            return conflict("discard=1 with zoned=1: a zoned null device supports no discard (reset zones instead)");
        }
        let cached = self.cache_size_mb > 0;
        if cached && !self.memory_backed {
            return conflict("cache_size needs memory_backed=1 (the cache holds data the medium would)");
        }
        if cached && zoned {
            return conflict("cache_size on a zoned device is not supported (zoned=1)");
        }
        if self.cache_mode == CacheMode::Writethrough && !cached {
            return conflict("cache_mode needs a write cache (cache_size=MiB)");
        }
        if self.powercut_tear && !cached {
            return conflict("powercut_tear needs a write cache to tear (cache_size=MiB)");
        }
        let Some(path) = &self.backing_file else { return Ok(()) };
        if path.as_os_str().is_empty() {
            return Err(ConfigError::BadValue {
                driver: "null".into(),
                key: "backing_file".into(),
                value: String::new(),
                expected: "the path of a file".into(),
            });
        }
        if path.to_str().map_or(true, |p| p.contains(',')) {
            return Err(ConfigError::BadValue {
                driver: "null".into(),
                key: "backing_file".into(),
                value: path.display().to_string(),
                expected: "a UTF-8 path without ',' (it separates a spec's keys)".into(),
            });
        }
        if !self.memory_backed {
            return conflict("backing_file needs memory_backed=1 (it holds the data memory would)");
        }
        if zoned {
            return conflict("backing_file on a zoned device is not supported (zone states live in memory)");
        }
        Ok(())
    }

    /// `badblocks`: ranges inside the device, in order; not on zoned
    /// devices (the zoned write path does not apply them).
    fn check_badblocks(&self) -> Result<(), ConfigError> {
        if self.badblocks.is_empty() {
            return Ok(());
        }
        if self.zoned.is_some() {
            return Err(ConfigError::conflict("null", "badblocks on a zoned device is not supported (zoned=1)"));
        }
        let sectors = self.size_bytes >> mqblk::SECTOR_SHIFT;
        match self.badblocks.iter().find(|&&(first, last)| first > last || last >= sectors) {
            None => Ok(()),
            Some((first, last)) => Err(ConfigError::BadValue {
                driver: "null".into(),
                key: "badblocks".into(),
                value: format!("{first}-{last}"),
                expected: format!("START-END ranges of sectors inside the device's {sectors}"),
            }),
        }
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

    /// `badblocks`: ranges of sectors on the device (parsed once the rest
    /// is known good: the device's size bounds them).
    fn badblocks_from_params(p: &SpecParams, cfg: &NullConfig) -> Result<Vec<(u64, u64)>, ConfigError> {
        let Some(value) = p.raw("badblocks") else { return Ok(Vec::new()) };
        if cfg.zoned.is_some() {
            return Err(p.conflict("badblocks on a zoned device is not supported (zoned=1)"));
        }
        let ranges = super::badblocks::parse_list(value, cfg.size_bytes >> mqblk::SECTOR_SHIFT).map_err(|e| {
            ConfigError::BadValue {
                driver: p.driver.clone(),
                key: "badblocks".into(),
                value: value.into(),
                expected: format!("START-END ranges of sectors joined by ':' ({e})"),
            }
        })?;
        Ok(ranges.into_iter().map(|(s, e)| (s, e - 1)).collect())
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

    fn zoned_from_params(p: &SpecParams) -> Result<Option<ZonedConfig>, ConfigError> {
        if !p.bool("zoned", false)? {
            return Ok(None);
        }
        let count = |key: &str| -> Result<u32, ConfigError> {
            Ok(p.u64_in(key, 0, range::ZONE_COUNT.0, range::ZONE_COUNT.1)? as u32)
        };
        let d = ZonedConfig::default();
        Ok(Some(ZonedConfig {
            zone_size_mb: p.u64_in("zone_size", d.zone_size_mb, range::ZONE_SIZE_MB.0, range::ZONE_SIZE_MB.1)?,
            zone_capacity_mb: p.u64_in("zone_capacity", 0, range::ZONE_CAPACITY_MB.0, range::ZONE_CAPACITY_MB.1)?,
            zone_nr_conv: count("zone_nr_conv")?,
            zone_max_open: count("zone_max_open")?,
            zone_max_active: count("zone_max_active")?,
            zone_append_max_sectors: p.u64_in(
                "zone_append_max_sectors",
                0,
                range::ZONE_APPEND_MAX_SECTORS.0,
                range::ZONE_APPEND_MAX_SECTORS.1,
            )? as u32,
            zone_readonly: count("zone_readonly")?,
            zone_offline: count("zone_offline")?,
            zone_full: p.bool("zone_full", false)?,
            zone_lock: match p.choice("zone_lock", "per-zone", &["per-zone", "global"])? {
                "global" => ZoneLock::Global,
                _ => ZoneLock::PerZone,
            },
            compat: match p.choice("zoned_compat", "6.12", &["6.12", "6.1"])? {
                "6.1" => ZonedCompat::Linux6_1,
                _ => ZonedCompat::Linux6_12,
            },
        }))
    }
}

/// Why `completion_nsec` is refused where nothing waits for it.
const COMPLETION_NSEC_UNUSED: &str =
    "completion_nsec times completions only with irqmode=2 (timer), rotational=1 or channels=N: it has no \
     effect here";
/// Why `seek_nsec` is refused on a device that does not seek.
const SEEK_NSEC_UNUSED: &str = "seek_nsec is the seek time of rotational=1 media: it has no effect here";

impl ZonedConfig {
    /// Checks the zoned values (a spec's parse reads them in range): errors
    /// name the spec key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let check = |key: &str, value: u64, range: (u64, u64)| check_range("null", key, value, range);
        check("zone_size", self.zone_size_mb, range::ZONE_SIZE_MB)?;
        check("zone_capacity", self.zone_capacity_mb, range::ZONE_CAPACITY_MB)?;
        for (key, value) in [
            ("zone_nr_conv", self.zone_nr_conv),
            ("zone_max_open", self.zone_max_open),
            ("zone_max_active", self.zone_max_active),
            ("zone_readonly", self.zone_readonly),
            ("zone_offline", self.zone_offline),
        ] {
            check(key, value.into(), range::ZONE_COUNT)?;
        }
        check("zone_append_max_sectors", self.zone_append_max_sectors.into(), range::ZONE_APPEND_MAX_SECTORS)?;
        if self.zone_full && self.compat == ZonedCompat::Linux6_1 {
            return Err(ConfigError::conflict(
                "null",
                "zone_full=1 came with Linux 6.12 (\"null_blk: Introduce the zone_full parameter\"): null_blk 6.1 \
                 has no such parameter, so zoned_compat=6.1 refuses it",
            ));
        }
        Ok(())
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

    /// `c` printed as a spec and parsed again.
    fn round_trip(c: &NullConfig) -> NullConfig {
        c.validate().unwrap();
        let mut w = mqblk::config::SpecWriter::new("null");
        mqblk::driver::DriverConfig::write_spec(c, &mut w);
        cfg(&w.finish()).unwrap()
    }

    #[test]
    fn a_config_prints_as_the_spec_that_opens_it() {
        crate::register();
        for spec in [
            "null:gb=2,bs=4096,submit_queues=2,irqmode=0,memory_backed=1,discard=1",
            "null:size=64,hw_queue_depth=8,irqmode=2,completion_nsec=20000,mbps=100,max_sectors=64",
            "null:size=512,memory_backed=1,cache_size=4,cache_mode=writethrough,powercut_tear=1",
            "null:gb=1,zoned=1,zone_size=64,zone_capacity=32,zone_max_open=3,zone_lock=global,zoned_compat=6.1",
            "null:size=8,poll_mode=hybrid,rotational=1,seek_nsec=100,badblocks=8-15:64-64,error_read=1:100:0:-1",
            "null:gb=1,irqmode=1,sched=mq-deadline,fifo_batch=4,wake=batch,nr_requests=16",
        ] {
            let parsed = mqblk::DeviceConfig::parse(spec).unwrap();
            let printed = parsed.to_string();
            let again = mqblk::DeviceConfig::parse(&printed).unwrap();
            assert_eq!(again.to_string(), printed, "{spec}");
            assert_eq!(again.driver::<NullConfig>(), parsed.driver::<NullConfig>(), "{spec} -> {printed}");
            assert_eq!(again.queue(), parsed.queue(), "{spec} -> {printed}");
        }
        let d = mqblk::DeviceConfig::parse("null:").unwrap();
        assert_eq!(d.to_string(), "null", "defaults print as nothing");
    }

    #[test]
    fn keys_without_effect_are_refused_with_the_reason() {
        for (spec, why) in [
            ("null:completion_nsec=5000", "completion_nsec times completions only with irqmode=2"),
            ("null:irqmode=1,completion_nsec=5000", "it has no effect here"),
            ("null:seek_nsec=100", "seek_nsec is the seek time of rotational=1"),
        ] {
            let e = cfg(spec).unwrap_err();
            assert!(e.contains(why), "{spec}: {e}");
        }
        assert!(cfg("null:irqmode=2,completion_nsec=5000").is_ok());
        assert!(cfg("null:rotational=1,completion_nsec=5000,seek_nsec=100").is_ok());
        assert!(cfg("null:channels=2,completion_nsec=5000").is_ok());
        let e = NullConfig::new().completion_nsec(5000).validate().unwrap_err().to_string();
        assert!(e.contains("no effect"), "the typed path refuses it too: {e}");
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
        assert_eq!(round_trip(&c).irq_cpus, vec![1, 0], "round-trips through the spec form");
    }

    #[test]
    fn zoned_compat_parses_round_trips_and_names_its_errors() {
        let z = |spec: &str| cfg(spec).map(|c| c.zoned.expect("zoned"));
        assert_eq!(z("null:zoned=1").unwrap().compat, ZonedCompat::Linux6_12, "6.12 by default");
        let old = z("null:zoned=1,zoned_compat=6.1").unwrap();
        assert_eq!(old.compat, ZonedCompat::Linux6_1);
        let c = NullConfig::new().zoned(Some(old.clone()));
        assert_eq!(round_trip(&c).zoned, Some(old), "round-trips through the spec form");
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
