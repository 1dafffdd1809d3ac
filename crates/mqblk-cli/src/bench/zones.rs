//! fio's zone options (`zonemode`, `zonesize`, `zonerange`, `zoneskip`,
//! `zonecapacity`, and for `zonemode=zbd` `read_beyond_wp`,
//! `max_open_zones`, `job_max_open_zones`, `ignore_zone_limits`,
//! `zone_reset_threshold`, `zone_reset_frequency`), the `z` unit of
//! `size`, `io_size`, `offset`, `offset_increment` and `zoneskip` ("524z":
//! 524 zones), and `zonemode=strided`'s window.
//!
//! The rules are fio's (HOWTO "zonemode", init.c's checks, io_u.c
//! `setup_strided_zone_mode`, zbd.c `zbd_recalc_options_with_zone_granularity`
//! and `zbd_zone_align_file_sizes`):
//! - strided: the job's I/O stays in a window of `zonerange` bytes
//!   (default `zonesize`) from its offset until `zonesize` bytes have been
//!   transferred there, then the window moves on by `zonerange` +
//!   `zoneskip`, back to the job's offset past the device's end. A
//!   `zonesize` without `zonemode` means strided.
//! - zbd: `zonesize` is the device's zone size (another is refused);
//!   zone counts are in the device's zones; a writing job's region is
//!   rounded in to whole zones (at least one), a reading job's end down
//!   to a zone boundary. zbd.rs does the rest.
//!
//! Relies on: the device's zoned limits (mqblk::zoned::ZonedLimits).

use mqblk::Device;

use super::options::{err, BenchPlan, JobOptions, OptionError};
use super::values::{parse_flag, parse_int, parse_size};

/// fio's `zonemode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZoneMode {
    /// Not given: strided if `zonesize` is, else none.
    #[default]
    NotGiven,
    None,
    Strided,
    Zbd,
}

/// Sizes given in zones (`Nz`), resolved once the zone size is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ZoneCounts {
    pub size: Option<u64>,
    pub io_size: Option<u64>,
    pub offset: Option<u64>,
    pub offset_increment: Option<u64>,
    pub zoneskip: Option<u64>,
}

/// The zone options of one job, with fio's defaults.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ZoneOptions {
    pub mode: ZoneMode,
    /// `zonesize`, `zonerange`, `zoneskip`, `zonecapacity`: bytes (0: not
    /// given).
    pub zonesize: u64,
    pub zonerange: u64,
    pub zoneskip: u64,
    pub zonecapacity: u64,
    /// `read_beyond_wp` (default 0: reads stay below write pointers).
    pub read_beyond_wp: bool,
    /// `max_open_zones` (None: the device's limit; 0: none) and
    /// `job_max_open_zones` (0: none).
    pub max_open_zones: Option<u32>,
    pub job_max_open_zones: u32,
    pub ignore_zone_limits: bool,
    /// `zone_reset_threshold` and `zone_reset_frequency`, in [0, 1].
    pub reset_threshold: f64,
    pub reset_frequency: f64,
    pub counts: ZoneCounts,
}

/// The zone options' names (options.rs' `job_options` adds them; fio's
/// `zonemode` is in options.rs' table).
pub const ZONE_OPTIONS: &[&str] = &[
    "zonesize",
    "zonerange",
    "zoneskip",
    "zonecapacity",
    "read_beyond_wp",
    "max_open_zones",
    "job_max_open_zones",
    "ignore_zone_limits",
    "zone_reset_threshold",
    "zone_reset_frequency",
];

/// `Nz`: N zones.
fn zone_count(v: &str) -> Option<u64> {
    let n = v.trim().strip_suffix(['z', 'Z'])?;
    n.parse().ok()
}

fn parse_ratio(key: &str, v: &str) -> Result<f64, OptionError> {
    match v.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => err(format!("{key}: bad value '{v}' (accepted: a number from 0 to 1)")),
    }
}

impl ZoneOptions {
    /// `zonemode=`: whether it is zbd.
    pub fn set_mode(&mut self, v: &str) -> Result<bool, OptionError> {
        self.mode = match v {
            "none" => ZoneMode::None,
            "strided" => ZoneMode::Strided,
            "zbd" => ZoneMode::Zbd,
            _ => return err(format!("zonemode={v} (accepted: none, strided, zbd)")),
        };
        Ok(self.mode == ZoneMode::Zbd)
    }

    /// A size in zones (`Nz`) for `size`, `io_size`, `offset` or
    /// `offset_increment`: true if `value` was one. A plain value of those
    /// keys forgets an earlier count (the caller then parses it).
    pub fn set_count(&mut self, key: &str, value: Option<&str>) -> bool {
        let c = &mut self.counts;
        let slot = match key {
            "size" => &mut c.size,
            "io_size" | "io_limit" => &mut c.io_size,
            "offset" => &mut c.offset,
            "offset_increment" => &mut c.offset_increment,
            _ => return false,
        };
        *slot = value.and_then(zone_count);
        slot.is_some()
    }

    /// Sets one option; false if `key` is none of these.
    pub fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")));
        match key {
            "zonesize" => self.zonesize = parse_size(key, v()?)?,
            "zonerange" => self.zonerange = parse_size(key, v()?)?,
            "zoneskip" => {
                self.counts.zoneskip = zone_count(v()?);
                self.zoneskip = if self.counts.zoneskip.is_some() { 0 } else { parse_size(key, v()?)? };
            }
            "zonecapacity" => self.zonecapacity = parse_size(key, v()?)?,
            "read_beyond_wp" => self.read_beyond_wp = parse_flag(key, value)?,
            "max_open_zones" => self.max_open_zones = Some(parse_int(key, v()?, 0, u64::from(u32::MAX))? as u32),
            "job_max_open_zones" => self.job_max_open_zones = parse_int(key, v()?, 0, u64::from(u32::MAX))? as u32,
            "ignore_zone_limits" => self.ignore_zone_limits = parse_flag(key, value)?,
            "zone_reset_threshold" => self.reset_threshold = parse_ratio(key, v()?)?,
            "zone_reset_frequency" => self.reset_frequency = parse_ratio(key, v()?)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Whether the job's zones are strided ones.
    pub fn strided(&self) -> bool {
        self.mode == ZoneMode::Strided || (self.mode == ZoneMode::NotGiven && self.zonesize > 0)
    }

    fn any_count(&self) -> bool {
        self.counts != ZoneCounts::default()
    }
}

impl JobOptions {
    /// fio's checks of the zone options against each other (init.c).
    pub(super) fn validate_zones(&self) -> Result<(), OptionError> {
        let z = &self.zones;
        let name = &self.name;
        match z.mode {
            ZoneMode::None if z.zonesize > 0 => {
                err(format!("job '{name}': zonemode=none and zonesize are not compatible"))
            }
            ZoneMode::Strided if z.zonesize == 0 => err(format!("job '{name}': zonemode=strided needs zonesize")),
            ZoneMode::Zbd if z.zoneskip > 0 || z.counts.zoneskip.is_some() => {
                err(format!("job '{name}': zoneskip with zonemode=zbd is not supported"))
            }
            ZoneMode::Zbd if self.rw.is_random() && self.rw_modifier != super::options::RwModifier::None => {
                err(format!("job '{name}': rw={}:N with zonemode=zbd is not supported", self.rw.name()))
            }
            _ if z.any_count() && !z.strided() && z.mode != ZoneMode::Zbd => {
                err(format!("job '{name}': a size in zones (Nz) needs zonemode=zbd or a zonesize"))
            }
            _ => Ok(()),
        }
    }
}

/// `plan` with every job's sizes in zones turned into bytes (the
/// device's zone size for zonemode=zbd, `zonesize` for strided), checked
/// against the device: fio's `zbd_recalc_options_with_zone_granularity`.
pub fn resolve(plan: &BenchPlan, dev: &Device) -> Result<BenchPlan, String> {
    let mut plan = plan.clone();
    let zoned = dev.limits().zoned;
    for job in &mut plan.jobs {
        let z = &job.zones;
        let zone_bytes = match (z.mode, zoned) {
            (ZoneMode::Zbd, None) => {
                return Err(format!("job '{}': zonemode=zbd on a device that is not zoned", job.name))
            }
            (ZoneMode::Zbd, Some(limits)) => {
                let device_zone = limits.zone_sectors << 9;
                if z.zonesize != 0 && z.zonesize != device_zone {
                    return Err(format!(
                        "job '{}': zonesize {} does not match the device's zone size {device_zone}",
                        job.name, z.zonesize
                    ));
                }
                check_open_limit(job, limits.max_open_zones)?;
                device_zone
            }
            _ => z.zonesize,
        };
        let c = z.counts;
        let bytes = |n: Option<u64>| n.map(|n| n.saturating_mul(zone_bytes));
        job.size = bytes(c.size).or(job.size);
        job.io_size = bytes(c.io_size).or(job.io_size);
        job.offset = bytes(c.offset).unwrap_or(job.offset);
        job.offset_increment = bytes(c.offset_increment).unwrap_or(job.offset_increment);
        job.zones.zoneskip = bytes(c.zoneskip).unwrap_or(job.zones.zoneskip);
    }
    Ok(plan)
}

/// `max_open_zones` above the device's limit needs `ignore_zone_limits`.
fn check_open_limit(job: &JobOptions, device_max_open: u32) -> Result<(), String> {
    let z = &job.zones;
    match z.max_open_zones {
        Some(n) if device_max_open > 0 && (n > device_max_open || n == 0) && !z.ignore_zone_limits => Err(format!(
            "job '{}': max_open_zones={n} exceeds the device's limit of {device_max_open} open zones \
             (ignore_zone_limits=1 allows it)",
            job.name
        )),
        _ => Ok(()),
    }
}

/// fio's `zbd_zone_align_file_sizes`: a writing zbd job's region in whole
/// zones (its offset rounded up, its end down, at least one zone), a
/// reading job's end rounded down to a zone boundary.
pub(super) fn align_zbd_region(
    opts: &JobOptions,
    dev: &Device,
    (offset, len): (u64, u64),
) -> Result<(u64, u64), String> {
    let Some(limits) = dev.limits().zoned.filter(|_| opts.zones.mode == ZoneMode::Zbd) else {
        return Ok((offset, len));
    };
    let zone = limits.zone_sectors << 9;
    let end = (offset + len) / zone * zone;
    let start = if opts.rw.read_pct(opts.rwmixread) == 100 { offset } else { offset.next_multiple_of(zone) };
    if end <= start {
        return Err(format!(
            "job '{}': zonemode=zbd: the region of {len} bytes at offset {offset} holds no whole zone of {zone} \
             bytes (io_size must be at least one zone)",
            opts.name
        ));
    }
    Ok((start, end - start))
}

/// `zonemode=strided`'s window over the device: where the job's I/O is
/// now and how much it has done there.
#[derive(Debug, Clone)]
pub(super) struct Strided {
    /// The job's offset: where the window starts, and starts again.
    first: u64,
    start: u64,
    /// `zonesize`: bytes per window; `zonerange`: its length;
    /// `zoneskip`: the gap after it.
    size: u64,
    range: u64,
    skip: u64,
    /// The device's end: the window wraps past it.
    end: u64,
    done_bytes: u64,
}

impl Strided {
    /// The job's window from `offset`, if its zones are strided.
    pub(super) fn new(opts: &JobOptions, offset: u64, capacity_bytes: u64) -> Option<Self> {
        let z = &opts.zones;
        z.strided().then_some(Self {
            first: offset,
            start: offset,
            size: z.zonesize,
            range: if z.zonerange == 0 { z.zonesize } else { z.zonerange },
            skip: z.zoneskip,
            end: capacity_bytes,
            done_bytes: 0,
        })
    }

    /// The window: (start, length), bytes.
    pub(super) fn window(&self) -> (u64, u64) {
        (self.start, self.range.min(self.end - self.start))
    }

    pub(super) fn window_len(&self) -> u64 {
        self.window().1
    }

    /// Counts an I/O of `bs` bytes; the new window if it moved first.
    pub(super) fn account(&mut self, bs: u64) -> Option<(u64, u64)> {
        let mut moved = None;
        if self.done_bytes >= self.size {
            self.done_bytes = 0;
            self.start += self.range + self.skip;
            if self.start >= self.end || self.end - self.start < bs {
                self.start = self.first;
            }
            moved = Some(self.window());
        }
        self.done_bytes += bs;
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strided_window_moves_after_zonesize_bytes_and_wraps() {
        let mut o = JobOptions::defaults("t");
        for (k, v) in [("zonesize", "8k"), ("zonerange", "16k"), ("zoneskip", "16k")] {
            o.set(k, Some(v)).unwrap();
        }
        let mut s = Strided::new(&o, 4096, 100 << 10).unwrap();
        assert_eq!(s.window(), (4096, 16384));
        let starts: Vec<Option<u64>> = (0..8).map(|_| s.account(4096).map(|w| w.0)).collect();
        // Two 4k I/Os per window; windows 32k apart; the fourth (at
        // 100k) would end past the device, so the window wraps.
        let k = 1024;
        assert_eq!(starts, [None, None, Some(36 * k), None, Some(68 * k), None, Some(4 * k), None]);
    }

    #[test]
    fn zone_counts_and_zone_mode_checks() {
        let mut o = JobOptions::defaults("t");
        o.set("size", Some("8z")).unwrap();
        assert_eq!(o.zones.counts.size, Some(8));
        let e = o.validate_zones().unwrap_err().0;
        assert!(e.contains("needs zonemode=zbd"), "{e}");
        o.set("size", Some("16m")).unwrap();
        assert_eq!((o.zones.counts.size, o.size), (None, Some(16 << 20)), "a plain size forgets the count");
        o.set("zonemode", Some("none")).unwrap();
        o.set("zonesize", Some("1m")).unwrap();
        assert!(o.validate_zones().unwrap_err().0.contains("not compatible"));
        assert!(o.set("zone_reset_threshold", Some("1.5")).is_err());
        assert!(o.set("zonemode", Some("banded")).unwrap_err().0.contains("accepted"));
    }
}
