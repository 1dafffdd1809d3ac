//! The zoned parameters of a null device and the kernel version it
//! follows (`zoned_compat`): null_blk's zone module parameters, typed.
//!
//! Relies on: lock.rs (the lock kind), mqblk's `setters!`.

use super::ZoneLock;

/// `zoned_compat`: the Linux version whose zoned null_blk (and zoned block
/// layer) the device follows (see the module doc for what differs;
/// example: [`ZonedConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZonedCompat {
    /// Linux 6.12 (the default): zone write plug errors, `zone_full`, the
    /// zone append limit capped at the zone capacity.
    #[default]
    Linux6_12,
    /// Linux 6.1 (Debian 12's kernel, the first oracle's).
    Linux6_1,
    /// Linux 7.x (Debian's 7.3, the third oracle's): as 6.12.
    Linux7,
}

impl ZonedCompat {
    /// The spec value (`6.12`, `6.1` or `7`): `ZonedCompat::Linux6_1.name() == "6.1"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Linux6_12 => "6.12",
            Self::Linux6_1 => "6.1",
            Self::Linux7 => "7",
        }
    }

    /// Whether the block layer has zone write plugs ("block: Introduce
    /// zone write plugging", 6.10): 6.12 and 7.x, not 6.1.
    /// `ZonedCompat::Linux7.zone_write_plugs()` is true.
    pub fn zone_write_plugs(self) -> bool {
        self != Self::Linux6_1
    }
}

/// The zoned parameters of a null device (null_blk's names; MiB units):
/// `ZonedConfig::new()` is null_blk's defaults (256 MiB zones, no limits),
/// changed by a setter named as each field.
///
/// ```
/// use mqblk::zoned::ZoneCond;
/// use mqblk::{Bio, Buf, Device};
/// use mqblk_null::zoned::{ZoneLock, ZonedCompat, ZonedConfig};
/// use mqblk_null::{IrqMode, NullConfig};
///
/// let zoned = ZonedConfig::new()
///     .zone_size_mb(4)
///     .zone_nr_conv(1)
///     .zone_max_open(2)
///     .zone_lock(ZoneLock::PerZone)
///     .compat(ZonedCompat::Linux6_12);
/// zoned.validate()?;
/// let cfg = NullConfig::new().size_mb(16).irqmode(IrqMode::None).zoned(Some(zoned));
/// assert_eq!(Device::builder(cfg.clone()).to_string(), "null:size=16,irqmode=0,zoned=1,zone_size=4,zone_nr_conv=1,zone_max_open=2");
///
/// let dev = Device::builder(cfg).build()?;
/// let zones = dev.zones().unwrap().report(0, 4)?;
/// assert_eq!((zones.len(), zones[0].cond, zones[1].cond), (4, ZoneCond::NotWp, ZoneCond::Empty));
/// let zone1 = 4 << 20; // byte offset of the first sequential zone
/// let done = dev.client().submit_and_wait_completion(Bio::zone_append(zone1, Buf::new(4096)))?;
/// assert_eq!(done.append_offset, Some(zone1));
///
/// // zone_full came with Linux 6.12: 6.1 refuses it, naming it.
/// let e = ZonedConfig::new().zone_full(true).compat(ZonedCompat::Linux6_1).validate().unwrap_err();
/// assert!(e.to_string().contains("zone_full"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZonedConfig {
    pub zone_size_mb: u64,
    /// 0: the zone size.
    pub zone_capacity_mb: u64,
    pub zone_nr_conv: u32,
    pub zone_max_open: u32,
    pub zone_max_active: u32,
    /// 0: the default (6.12: the zone capacity; 6.1: the zone size).
    pub zone_append_max_sectors: u32,
    /// Sequential zones (the last ones) that start READONLY / OFFLINE.
    pub zone_readonly: u32,
    pub zone_offline: u32,
    /// Sequential zones start FULL (6.12's `zone_full`).
    pub zone_full: bool,
    pub zone_lock: ZoneLock,
    /// `zoned_compat`.
    pub compat: ZonedCompat,
}

impl Default for ZonedConfig {
    fn default() -> Self {
        Self {
            zone_size_mb: 256,
            zone_capacity_mb: 0,
            zone_nr_conv: 0,
            zone_max_open: 0,
            zone_max_active: 0,
            zone_append_max_sectors: 0,
            zone_readonly: 0,
            zone_offline: 0,
            zone_full: false,
            zone_lock: ZoneLock::PerZone,
            compat: ZonedCompat::Linux6_12,
        }
    }
}

impl ZonedConfig {
    /// null_blk's defaults (example: [`ZonedConfig`]).
    pub fn new() -> Self {
        Self::default()
    }

    mqblk::setters! {
        zone_size_mb: u64,
        zone_capacity_mb: u64,
        zone_nr_conv: u32,
        zone_max_open: u32,
        zone_max_active: u32,
        zone_append_max_sectors: u32,
        zone_readonly: u32,
        zone_offline: u32,
        zone_full: bool,
        zone_lock: ZoneLock,
        compat: ZonedCompat,
    }
}
