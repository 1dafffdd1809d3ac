//! null_blk's parameters: `NullConfig` (null_blk's defaults, a setter
//! per parameter), its `null:` spec form and the spec's checks, with the
//! kernel module's parameter names, defaults and meanings (the table of
//! keys is in the crate docs, lib.rs).
//!
//! A spec is parsed once into a `NullConfig` (`NullConfig::from_params`,
//! each key's range and format: config/parse.rs); `validate` then checks
//! the values together, for specs and typed configs alike
//! (config/check.rs), and `write_spec` prints the keys that differ from
//! these defaults (spec.rs). This file keeps the types, the defaults, the
//! setters and the table of ranges both of them read.
//!
//! Relies on: zoned/ for the zoned parameters; fault.rs for the fault
//! keys' value form.

mod check;
mod parse;

use mqblk::SECTOR_SIZE;

pub use super::fault::FaultSpec;
use super::zoned::ZonedConfig;

/// CPUs `irq_cpus` may name: those of a cpu_set_t (the C library's
/// CPU_SETSIZE).
pub const MAX_CPUS: usize = 1024;

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
/// for mode in [PollMode::Queues, PollMode::Toggle] {
///     let mut cfg = NullConfig::new().gb(1).poll_mode(mode);
///     if mode == PollMode::Toggle {
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
    /// implement blk_mq_ops->poll()", whose design was not merged):
    /// `poll_mode=toggle`.
    Toggle,
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
    /// `max_segment_size`: the longest physical segment in bytes.
    pub max_segment_size: u32,
    /// `virt_boundary_mask`: segments meet on this boundary or split
    /// (NVMe's PRP rule; 0: none).
    pub virt_boundary_mask: u64,
    pub rotational: bool,
    pub seek_nsec: u64,
    pub channels: usize,
    /// `jitter_pct`: each channel request's service time varies uniformly
    /// within this many percent either side (0: every request alike).
    pub jitter_pct: u64,
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
            max_segment_size: mqblk::driver::DEFAULT_MAX_SEGMENT_SIZE,
            virt_boundary_mask: 0,
            rotational: false,
            seek_nsec: 8_000_000,
            channels: 0,
            jitter_pct: 0,
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
    pub const MAX_SEGMENT_SIZE: (u64, u64) = (mqblk::driver::MIN_SEGMENT_SIZE as u64, u32::MAX as u64);
    pub const VIRT_BOUNDARY_MASK: (u64, u64) = (0, 65534);
    pub const SEEK_NSEC: (u64, u64) = (0, 10_000_000_000);
    pub const CHANNELS: (u64, u64) = (0, 4096);
    pub const JITTER_PCT: (u64, u64) = (0, 90);
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
        max_segment_size: u32,
        virt_boundary_mask: u64,
        rotational: bool,
        seek_nsec: u64,
        channels: usize,
        jitter_pct: u64,
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
}

/// Why `completion_nsec` is refused where nothing waits for it.
const COMPLETION_NSEC_UNUSED: &str =
    "completion_nsec times completions only with irqmode=2 (timer), rotational=1 or channels=N: it has no \
     effect here";
/// Why `jitter_pct` is refused without channels.
const JITTER_PCT_UNUSED: &str = "jitter_pct varies the service time of channels=N: it has no effect here";
/// Why `seek_nsec` is refused on a device that does not seek.
const SEEK_NSEC_UNUSED: &str = "seek_nsec is the seek time of rotational=1 media: it has no effect here";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zoned::ZonedCompat;
    use mqblk::config::SpecParams;

    fn open(spec: &str) -> Result<mqblk::Device, mqblk::Error> {
        crate::register();
        mqblk::Device::open(spec)
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "safe parsing code only: Miri checks unsafe code and concurrency, and interprets this one for minutes"
    )]
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
    #[cfg_attr(
        miri,
        ignore = "safe parsing code only: Miri checks unsafe code and concurrency, and interprets this one for minutes"
    )]
    fn a_config_prints_as_the_spec_that_opens_it() {
        crate::register();
        for spec in [
            "null:gb=2,bs=4096,submit_queues=2,irqmode=0,memory_backed=1,discard=1",
            "null:size=64,hw_queue_depth=8,irqmode=2,completion_nsec=20000,mbps=100,max_sectors=64",
            "null:size=64,channels=32,completion_nsec=20000,mbps=100,jitter_pct=25",
            "null:size=512,memory_backed=1,cache_size=4,cache_mode=writethrough,powercut_tear=1",
            "null:gb=1,zoned=1,zone_size=64,zone_capacity=32,zone_max_open=3,zone_lock=global,zoned_compat=6.1",
            "null:size=8,poll_mode=toggle,rotational=1,seek_nsec=100,badblocks=8-15:64-64,error_read=1:100:0:-1",
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
            ("null:irqmode=2,jitter_pct=25", "jitter_pct varies the service time of channels=N"),
            ("null:channels=4,jitter_pct=100", "jitter_pct"),
        ] {
            let e = cfg(spec).unwrap_err();
            assert!(e.contains(why), "{spec}: {e}");
        }
        assert!(cfg("null:irqmode=2,completion_nsec=5000").is_ok());
        assert!(cfg("null:rotational=1,completion_nsec=5000,seek_nsec=100").is_ok());
        assert!(cfg("null:channels=2,completion_nsec=5000").is_ok());
        assert!(cfg("null:channels=2,jitter_pct=90").is_ok());
        let e = NullConfig::new().completion_nsec(5000).validate().unwrap_err().to_string();
        assert!(e.contains("no effect"), "the typed path refuses it too: {e}");
        let e = NullConfig::new().jitter_pct(25).validate().unwrap_err().to_string();
        assert!(e.contains("jitter_pct varies"), "the typed path refuses jitter without channels: {e}");
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
    #[cfg_attr(
        miri,
        ignore = "safe parsing code only: Miri checks unsafe code and concurrency, and interprets this one for minutes"
    )]
    fn zoned_compat_parses_round_trips_and_names_its_errors() {
        let z = |spec: &str| cfg(spec).map(|c| c.zoned.expect("zoned"));
        assert_eq!(z("null:zoned=1").unwrap().compat, ZonedCompat::Linux6_12, "6.12 by default");
        let old = z("null:zoned=1,zoned_compat=6.1").unwrap();
        assert_eq!(old.compat, ZonedCompat::Linux6_1);
        let c = NullConfig::new().zoned(Some(old.clone()));
        assert_eq!(round_trip(&c).zoned, Some(old), "round-trips through the spec form");
        let seven = z("null:zoned=1,zoned_compat=7").unwrap();
        assert_eq!(seven.compat, ZonedCompat::Linux7);
        let c = NullConfig::new().zoned(Some(seven.clone()));
        assert_eq!(round_trip(&c).zoned, Some(seven), "7 round-trips too");
        assert!(z("null:zoned=1,zone_full=1").unwrap().zone_full);
        for (spec, why) in [
            ("null:zoned=1,zoned_compat=5.4", "accepted: 6.12, 6.1, 7"),
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
