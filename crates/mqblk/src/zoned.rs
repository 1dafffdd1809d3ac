//! The zone model of zoned block devices (SMR disks, ZNS SSDs), as the
//! kernel exposes it (`struct blk_zone`, include/uapi/linux/blkzoned.h):
//! zone types and conditions, what a zone report returns, and a zoned
//! device's limits. Drivers that emulate zones (null `zoned=1`) implement
//! the state machine; the block layer validates zone operations against
//! these limits and keeps writes to a zone in order (queue/).
//!
//! All positions here are in 512-byte sectors, as in the kernel's API.
//!
//! Relies on: nothing but std.

use std::fmt;

/// `BLK_ZONE_TYPE_*`.
///
/// ```
/// use mqblk::zoned::{Zone, ZoneCond, ZoneType};
///
/// // A conventional zone has no write pointer: it sits at the zone's end.
/// let conv = Zone {
///     start: 0,
///     len: 2048,
///     capacity: 2048,
///     wp: 2048,
///     ztype: ZoneType::Conventional,
///     cond: ZoneCond::NotWp,
/// };
/// assert_eq!(conv.wp, conv.start + conv.len);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneType {
    /// Random writes allowed; no write pointer.
    Conventional,
    /// Writes only at the write pointer.
    SeqWriteRequired,
}

/// `BLK_ZONE_COND_*`, in the kernel's numbering.
///
/// ```
/// use mqblk::zoned::ZoneCond;
///
/// let cond = ZoneCond::from_raw(0x2).unwrap(); // blk_zone.cond
/// assert_eq!((cond, cond.name(), cond.to_string()), (ZoneCond::ImpOpen, "IMP_OPEN", "IMP_OPEN".into()));
/// assert!(cond.is_open() && cond.is_active());
/// assert!(ZoneCond::Closed.is_active() && !ZoneCond::Closed.is_open());
/// assert_eq!(ZoneCond::from_raw(0x5), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ZoneCond {
    NotWp = 0x0,
    Empty = 0x1,
    ImpOpen = 0x2,
    ExpOpen = 0x3,
    Closed = 0x4,
    ReadOnly = 0xd,
    Full = 0xe,
    Offline = 0xf,
}

impl ZoneCond {
    /// The name user-space tools print (blkzone, the oracle's JSON).
    pub fn name(self) -> &'static str {
        match self {
            ZoneCond::NotWp => "NOT_WP",
            ZoneCond::Empty => "EMPTY",
            ZoneCond::ImpOpen => "IMP_OPEN",
            ZoneCond::ExpOpen => "EXP_OPEN",
            ZoneCond::Closed => "CLOSED",
            ZoneCond::ReadOnly => "READONLY",
            ZoneCond::Full => "FULL",
            ZoneCond::Offline => "OFFLINE",
        }
    }

    /// Whether a zone may go from this condition to `next` by an
    /// operation (the zone state machine of ZBC/ZAC and NVMe ZNS, as
    /// null_blk implements it): a write opens an empty or closed zone
    /// implicitly and fills it at its capacity; open, close, finish and
    /// reset move between the others; read-only and offline zones never
    /// change. Staying in the same condition is always allowed.
    ///
    /// ```
    /// use mqblk::zoned::ZoneCond;
    ///
    /// assert!(ZoneCond::Empty.may_become(ZoneCond::ImpOpen));
    /// assert!(ZoneCond::Full.may_become(ZoneCond::Empty), "a reset");
    /// assert!(!ZoneCond::Full.may_become(ZoneCond::ImpOpen), "a full zone takes no write");
    /// assert!(!ZoneCond::Offline.may_become(ZoneCond::Empty));
    /// ```
    pub fn may_become(self, next: ZoneCond) -> bool {
        use ZoneCond::*;
        self == next
            || matches!(
                (self, next),
                (Empty, ImpOpen | ExpOpen | Full)
                    | (ImpOpen, ExpOpen | Closed | Full | Empty)
                    | (ExpOpen, Closed | Full | Empty)
                    | (Closed, ImpOpen | ExpOpen | Full | Empty)
                    | (Full, Empty)
            )
    }

    /// From the kernel's numeric condition (`blk_zone.cond`).
    pub fn from_raw(v: u8) -> Option<ZoneCond> {
        Some(match v {
            0x0 => ZoneCond::NotWp,
            0x1 => ZoneCond::Empty,
            0x2 => ZoneCond::ImpOpen,
            0x3 => ZoneCond::ExpOpen,
            0x4 => ZoneCond::Closed,
            0xd => ZoneCond::ReadOnly,
            0xe => ZoneCond::Full,
            0xf => ZoneCond::Offline,
            _ => return None,
        })
    }

    /// Open (implicitly or explicitly): counts against max_open.
    pub fn is_open(self) -> bool {
        matches!(self, ZoneCond::ImpOpen | ZoneCond::ExpOpen)
    }

    /// Open or closed: counts against max_active.
    pub fn is_active(self) -> bool {
        matches!(self, ZoneCond::ImpOpen | ZoneCond::ExpOpen | ZoneCond::Closed)
    }
}

impl fmt::Display for ZoneCond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One zone as a report returns it (`struct blk_zone`), in 512-byte
/// sectors (examples: [`ZoneType`], [`Zones`](crate::Zones)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zone {
    /// First sector.
    pub start: u64,
    /// Zone size in sectors.
    pub len: u64,
    /// Writable sectors from `start` (`capacity <= len`).
    pub capacity: u64,
    /// Write pointer (conventional zones: `start + len`).
    pub wp: u64,
    /// Conventional or sequential.
    pub ztype: ZoneType,
    /// The zone's condition.
    pub cond: ZoneCond,
}

/// Zone management operations (`REQ_OP_ZONE_*`, the BLK*ZONE ioctls), as
/// [`Bio::zone_mgmt`](crate::Bio::zone_mgmt) takes them.
///
/// ```
/// use mqblk::zoned::ZoneMgmt;
///
/// assert_eq!(ZoneMgmt::Finish.name(), "finish");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneMgmt {
    Reset,
    Open,
    Close,
    Finish,
}

impl ZoneMgmt {
    /// The lowercase name (blkzone's command).
    pub fn name(self) -> &'static str {
        match self {
            ZoneMgmt::Reset => "reset",
            ZoneMgmt::Open => "open",
            ZoneMgmt::Close => "close",
            ZoneMgmt::Finish => "finish",
        }
    }
}

/// What a zoned device declares (`queue_limits` zone fields; a driver sets
/// [`QueueLimits::zoned`](crate::QueueLimits::zoned)).
///
/// ```
/// use mqblk::zoned::ZonedLimits;
///
/// let limits = ZonedLimits {
///     zone_sectors: 1 << 19, // 256 MiB
///     nr_zones: 16,
///     max_open_zones: 0,
///     max_active_zones: 0,
///     zone_append_max_sectors: 1024,
/// };
/// assert_eq!(limits.zone_no((1 << 19) + 7), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZonedLimits {
    /// Zone size in sectors (a power of two); also the boundary bios are
    /// split at (`chunk_sectors`).
    pub zone_sectors: u64,
    /// Zones on the device.
    pub nr_zones: u32,
    /// 0: no limit.
    pub max_open_zones: u32,
    /// 0: no limit.
    pub max_active_zones: u32,
    /// Largest zone append, in sectors.
    pub zone_append_max_sectors: u32,
}

impl ZonedLimits {
    /// Index of the zone holding `sector`.
    pub fn zone_no(&self, sector: u64) -> u64 {
        sector / self.zone_sectors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cond_numbers_and_names_match_the_kernel() {
        for c in [
            ZoneCond::NotWp,
            ZoneCond::Empty,
            ZoneCond::ImpOpen,
            ZoneCond::ExpOpen,
            ZoneCond::Closed,
            ZoneCond::ReadOnly,
            ZoneCond::Full,
            ZoneCond::Offline,
        ] {
            assert_eq!(ZoneCond::from_raw(c as u8), Some(c));
        }
        assert_eq!(ZoneCond::from_raw(5), None);
        assert_eq!(ZoneCond::ImpOpen.name(), "IMP_OPEN");
        assert!(ZoneCond::Closed.is_active() && !ZoneCond::Closed.is_open());
    }
}
