//! `NullConfig` written back as a `null:` spec's key=value pairs, which
//! `NullConfig::validate` parses again: one set of checks for specs and
//! typed configs alike.
//!
//! Relies on: config.rs (`NullConfig`, the keys and their checks).

use super::config::{CacheMode, NullConfig, PollMode};
use super::zoned::ZoneLock;
use mqblk::config::ConfigError;

impl NullConfig {
    /// The config as a `null:` spec's key=value pairs.
    pub(super) fn to_pairs(&self) -> Result<Vec<(String, String)>, ConfigError> {
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
            ("cache_size", self.cache_size_mb.to_string()),
            ("mbps", self.mbps.to_string()),
            ("max_sectors", self.max_sectors.to_string()),
            ("max_segments", self.max_segments.to_string()),
            ("rotational", b(self.rotational)),
            ("seek_nsec", self.seek_nsec.to_string()),
        ];
        if !self.irq_cpus.is_empty() {
            let list: Vec<String> = self.irq_cpus.iter().map(usize::to_string).collect();
            pairs.push(("irq_cpus", list.join(":")));
        }
        if self.channels > 0 {
            pairs.push(("channels", self.channels.to_string()));
        }
        if !self.badblocks.is_empty() {
            let list: Vec<String> = self.badblocks.iter().map(|(s, l)| format!("{s}-{l}")).collect();
            pairs.push(("badblocks", list.join(":")));
        }
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
                pairs.push((key, f.to_spec()));
            }
        }
        if self.powercut_tear {
            pairs.push(("powercut_tear", "1".into()));
        }
        if self.cache_mode == CacheMode::Writethrough {
            pairs.push(("cache_mode", "writethrough".into()));
        }
        if let Some(path) = &self.backing_file {
            let path = path.to_str().filter(|p| !p.contains(',')).ok_or_else(|| ConfigError::BadValue {
                driver: "null".into(),
                key: "backing_file".into(),
                value: path.display().to_string(),
                expected: "a UTF-8 path without ','".into(),
            })?;
            pairs.push(("backing_file", path.into()));
        }
        pairs.push(("badblocks_once", b(self.badblocks_once)));
        pairs.push(("badblocks_partial_io", b(self.badblocks_partial_io)));
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
                ("zone_full", b(z.zone_full)),
                ("zone_lock", if z.zone_lock == ZoneLock::Global { "global" } else { "per-zone" }.to_string()),
                ("zoned_compat", z.compat.name().to_string()),
            ]);
        }
        Ok(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }
}
