//! A `null:` spec's keys parsed into a `NullConfig`: the keys accepted,
//! each key's form and range, the keys that mean nothing without another,
//! and the value forms of `irq_cpus`, `badblocks`, the fault keys and the
//! zoned keys. The typed checks (check.rs) then run on the result.
//!
//! Relies on: config.rs (`NullConfig`, the `range` table, the refusal
//! messages shared with check.rs); mqblk's spec grammar (SpecParams);
//! badblocks.rs and fault.rs for their value forms; zoned/ for its config.

use mqblk::config::{ConfigError, SpecParams};

use super::{range, CacheMode, FaultSpec, IrqMode, NullConfig, PollMode, MAX_CPUS};
use super::{COMPLETION_NSEC_UNUSED, JITTER_PCT_UNUSED, SEEK_NSEC_UNUSED};
use crate::zoned::{ZoneLock, ZonedCompat, ZonedConfig};

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
    "max_segment_size",
    "virt_boundary_mask",
    "rotational",
    "seek_nsec",
    "channels",
    "jitter_pct",
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

impl NullConfig {
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
        if p.raw("poll_mode") == Some("hybrid") {
            return Err(p.conflict(
                "poll_mode=hybrid: the mode that turns notifications off while hipri requests are in flight is \
                 poll_mode=toggle (hybrid polling, sleeping before spinning, is the queue option hybrid_poll_delay)",
            ));
        }
        let poll_mode = match p.choice("poll_mode", "queues", &["queues", "toggle"])? {
            "toggle" => PollMode::Toggle,
            _ => PollMode::Queues,
        };
        let default_poll_queues = if poll_mode == PollMode::Toggle { 0 } else { 1 };
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
            max_segment_size: int("max_segment_size", d.max_segment_size.into(), range::MAX_SEGMENT_SIZE)? as u32,
            virt_boundary_mask: int("virt_boundary_mask", d.virt_boundary_mask, range::VIRT_BOUNDARY_MASK)?,
            rotational: p.bool("rotational", false)?,
            seek_nsec: int("seek_nsec", d.seek_nsec, range::SEEK_NSEC)?,
            channels: int("channels", 0, range::CHANNELS)? as usize,
            jitter_pct: int("jitter_pct", 0, range::JITTER_PCT)?,
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
        if p.is_set("jitter_pct") && p.u64_in("channels", 0, 0, u64::MAX)? == 0 {
            return Err(p.conflict(JITTER_PCT_UNUSED));
        }
        if p.is_set("seek_nsec") && !p.bool("rotational", false)? {
            return Err(p.conflict(SEEK_NSEC_UNUSED));
        }
        Ok(())
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
        let ranges = crate::badblocks::parse_list(value, cfg.size_bytes >> mqblk::SECTOR_SHIFT).map_err(|e| {
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
            compat: match p.choice("zoned_compat", "6.12", &["6.12", "6.1", "7"])? {
                "6.1" => ZonedCompat::Linux6_1,
                "7" => ZonedCompat::Linux7,
                _ => ZonedCompat::Linux6_12,
            },
        }))
    }
}
