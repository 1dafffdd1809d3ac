//! The typed checks of a `NullConfig` (and its `ZonedConfig`): each value
//! within its key's range and the values that do not go together, with
//! errors naming the spec key, for specs (after parse.rs) and typed
//! configs alike.
//!
//! Relies on: config.rs (`NullConfig`, the `range` table, the refusal
//! messages shared with parse.rs); mqblk's `check_range` and ConfigError.

use mqblk::config::{check_range, ConfigError};

use super::{range, CacheMode, IrqMode, NullConfig, PollMode, MAX_CPUS};
use super::{COMPLETION_NSEC_UNUSED, JITTER_PCT_UNUSED, SEEK_NSEC_UNUSED};
use crate::zoned::{ZonedCompat, ZonedConfig};

impl NullConfig {
    /// Checks every value and how they go together, as a spec's parse
    /// would: errors name the spec key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_except_badblocks()?;
        self.check_badblocks()
    }

    pub(super) fn validate_except_badblocks(&self) -> Result<(), ConfigError> {
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
        check("max_segment_size", self.max_segment_size.into(), range::MAX_SEGMENT_SIZE)?;
        check("virt_boundary_mask", self.virt_boundary_mask, range::VIRT_BOUNDARY_MASK)?;
        self.check_virt_boundary()?;
        check("seek_nsec", self.seek_nsec, range::SEEK_NSEC)?;
        check("channels", self.channels as u64, range::CHANNELS)?;
        check("jitter_pct", self.jitter_pct, range::JITTER_PCT)?;
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
    /// A virt boundary: a power of two less one, with no segment size of
    /// its own (the kernel's `blk_validate_limits` makes segments
    /// unlimited under one).
    fn check_virt_boundary(&self) -> Result<(), ConfigError> {
        let mask = self.virt_boundary_mask;
        if mask == 0 {
            return Ok(());
        }
        if !(mask + 1).is_power_of_two() {
            return Err(ConfigError::BadValue {
                driver: "null".into(),
                key: "virt_boundary_mask".into(),
                value: mask.to_string(),
                expected: "0, or a power of two less one below 65535 (4095: NVMe)".into(),
            });
        }
        if self.max_segment_size != mqblk::driver::DEFAULT_MAX_SEGMENT_SIZE {
            return Err(ConfigError::conflict(
                "null",
                "virt_boundary_mask with max_segment_size: a virt boundary leaves segments unlimited",
            ));
        }
        Ok(())
    }

    fn check_completion(&self) -> Result<(), ConfigError> {
        let conflict = |message: &str| Err(ConfigError::conflict("null", message));
        if self.poll_mode == PollMode::Toggle && self.poll_queues > 0 {
            return conflict("poll_mode=toggle polls the submit queues themselves: poll_queues must be 0");
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
        if self.jitter_pct != default.jitter_pct && self.channels == 0 {
            return conflict(JITTER_PCT_UNUSED);
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
}

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
