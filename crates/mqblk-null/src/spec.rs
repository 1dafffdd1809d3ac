//! `NullConfig` as mqblk sees a driver's config (`DriverConfig`): printed
//! back as the keys of a `null:` spec that differ from null_blk's
//! defaults, and opened as a `NullDriver`.
//!
//! Relies on: config.rs (`NullConfig`, its defaults and checks), lib.rs
//! (`NullDriver`).

use mqblk::config::{ConfigError, SpecWriter};
use mqblk::driver::{Driver, DriverConfig};

use super::config::{CacheMode, NullConfig, PollMode};
use super::zoned::{ZoneLock, ZonedConfig};
use super::NullDriver;

impl DriverConfig for NullConfig {
    fn driver_name(&self) -> &str {
        "null"
    }

    fn validate(&self) -> Result<(), ConfigError> {
        NullConfig::validate(self)
    }

    fn write_spec(&self, w: &mut SpecWriter) {
        let d = NullConfig::default();
        self.write_size(w, &d);
        w.pair_if_not("bs", self.bs, d.bs);
        w.pair_if_not("submit_queues", self.submit_queues, d.submit_queues);
        if self.poll_mode == PollMode::Toggle {
            w.pair("poll_mode", "toggle");
        } else {
            w.pair_if_not("poll_queues", self.poll_queues, d.poll_queues);
        }
        w.pair_if_not("hw_queue_depth", self.hw_queue_depth, d.hw_queue_depth);
        if let Some(mode) = self.irqmode {
            w.pair("irqmode", mode as u8);
        }
        w.pair_if_not("completion_nsec", self.completion_nsec, d.completion_nsec);
        if !self.irq_cpus.is_empty() {
            let list: Vec<String> = self.irq_cpus.iter().map(usize::to_string).collect();
            w.pair("irq_cpus", list.join(":"));
        }
        self.write_backing(w, &d);
        self.write_service(w, &d);
        if let Some(z) = &self.zoned {
            write_zoned(z, w);
        }
        self.write_faults(w, &d);
    }

    fn open(&self) -> Result<Box<dyn Driver>, mqblk::Error> {
        Ok(Box::new(NullDriver::new(self.clone())?))
    }
}

impl NullConfig {
    /// `gb` for whole GiB, else `size` in MiB.
    fn write_size(&self, w: &mut SpecWriter, d: &NullConfig) {
        if self.size_bytes == d.size_bytes {
            return;
        }
        if self.size_bytes % (1 << 30) == 0 {
            w.pair("gb", self.size_bytes >> 30);
        } else {
            w.pair("size", self.size_bytes >> 20);
        }
    }

    /// Memory backing, discard, the write cache and the backing file.
    fn write_backing(&self, w: &mut SpecWriter, d: &NullConfig) {
        w.flag_if_not("memory_backed", self.memory_backed, d.memory_backed);
        w.flag_if_not("discard", self.discard, d.discard);
        w.pair_if_not("cache_size", self.cache_size_mb, d.cache_size_mb);
        if self.cache_mode == CacheMode::Writethrough {
            w.pair("cache_mode", "writethrough");
        }
        w.flag_if_not("powercut_tear", self.powercut_tear, d.powercut_tear);
        if let Some(path) = &self.backing_file {
            w.pair("backing_file", path.display());
        }
    }

    /// Transfer limits and service models.
    fn write_service(&self, w: &mut SpecWriter, d: &NullConfig) {
        w.pair_if_not("mbps", self.mbps, d.mbps);
        w.pair_if_not("max_sectors", self.max_sectors, d.max_sectors);
        w.pair_if_not("max_segments", self.max_segments, d.max_segments);
        w.pair_if_not("max_segment_size", self.max_segment_size, d.max_segment_size);
        w.pair_if_not("virt_boundary_mask", self.virt_boundary_mask, d.virt_boundary_mask);
        w.flag_if_not("rotational", self.rotational, d.rotational);
        w.pair_if_not("seek_nsec", self.seek_nsec, d.seek_nsec);
        w.pair_if_not("channels", self.channels, d.channels);
        w.pair_if_not("jitter_pct", self.jitter_pct, d.jitter_pct);
    }

    /// Bad blocks and fault injection.
    fn write_faults(&self, w: &mut SpecWriter, d: &NullConfig) {
        if !self.badblocks.is_empty() {
            let list: Vec<String> = self.badblocks.iter().map(|(s, l)| format!("{s}-{l}")).collect();
            w.pair("badblocks", list.join(":"));
        }
        w.flag_if_not("badblocks_once", self.badblocks_once, d.badblocks_once);
        w.flag_if_not("badblocks_partial_io", self.badblocks_partial_io, d.badblocks_partial_io);
        let [read, write, flush, discard] = self.error;
        for (key, fault) in [
            ("timeout", self.timeout),
            ("requeue", self.requeue),
            ("error_read", read),
            ("error_write", write),
            ("error_flush", flush),
            ("error_discard", discard),
        ] {
            if let Some(f) = fault {
                w.pair(key, f.to_spec());
            }
        }
    }
}

/// `zoned=1` and the zoned keys that differ from their defaults.
fn write_zoned(z: &ZonedConfig, w: &mut SpecWriter) {
    let d = ZonedConfig::default();
    w.pair("zoned", 1);
    w.pair_if_not("zone_size", z.zone_size_mb, d.zone_size_mb);
    w.pair_if_not("zone_capacity", z.zone_capacity_mb, d.zone_capacity_mb);
    w.pair_if_not("zone_nr_conv", z.zone_nr_conv, d.zone_nr_conv);
    w.pair_if_not("zone_max_open", z.zone_max_open, d.zone_max_open);
    w.pair_if_not("zone_max_active", z.zone_max_active, d.zone_max_active);
    w.pair_if_not("zone_append_max_sectors", z.zone_append_max_sectors, d.zone_append_max_sectors);
    w.pair_if_not("zone_readonly", z.zone_readonly, d.zone_readonly);
    w.pair_if_not("zone_offline", z.zone_offline, d.zone_offline);
    w.flag_if_not("zone_full", z.zone_full, d.zone_full);
    if z.zone_lock == ZoneLock::Global {
        w.pair("zone_lock", "global");
    }
    if z.compat != d.compat {
        w.pair("zoned_compat", z.compat.name());
    }
}
