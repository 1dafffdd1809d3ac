//! Zone reports of a zoned device ([`Device::zones`](super::Device::zones)),
//! checked as the bio path checks an offset.
//!
//! Relies on: the driver's `Zoned` capability (driver/caps.rs), the zone
//! model (zoned.rs).

use crate::driver;
use crate::error::Error;
use crate::request::SECTOR_SHIFT;
use crate::status::Status;
use crate::zoned::{Zone, ZonedLimits};

/// A zoned device's zone reports ([`Device::zones`](super::Device::zones)). Positions in zones
/// are 512-byte sectors, as in the kernel's `struct blk_zone`; `report`
/// takes a byte offset. (The driver, hidden here, is the example of
/// [`driver::Zoned`].)
///
/// ```
/// # use std::sync::Mutex;
/// # use mqblk::driver::{Capabilities, Driver, Hctx, QueueRqResult, Rq, Zoned};
/// # use mqblk::zoned::{Zone, ZoneMgmt, ZoneType, ZonedLimits};
/// # use mqblk::{Op, QueueLimits, TagSetConfig};
/// # const ZONE_SECTORS: u64 = 2048; // 1 MiB zones
/// # const NR_ZONES: u64 = 4;
/// #
/// # /// Four sequential zones; a zone append lands at its zone's write pointer.
/// # struct Zns {
/// #     wp: Mutex<Vec<u64>>, // write pointers, in sectors
/// # }
/// #
/// # impl Driver for Zns {
/// #     fn name(&self) -> &str { "zns" }
/// #     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
/// #     fn limits(&self) -> QueueLimits {
/// #         let mut limits = QueueLimits::new(NR_ZONES * ZONE_SECTORS * 512, 4096);
/// #         limits.zoned = Some(ZonedLimits {
/// #             zone_sectors: ZONE_SECTORS,
/// #             nr_zones: NR_ZONES as u32,
/// #             max_open_zones: 0,
/// #             max_active_zones: 0,
/// #             zone_append_max_sectors: 256,
/// #         });
/// #         limits
/// #     }
/// #     fn queue_rq(&self, _hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
/// #         let zone = (rq.sector() / ZONE_SECTORS) as usize;
/// #         let mut wp = self.wp.lock().unwrap();
/// #         match rq.op() {
/// #             Op::ZoneAppend => {
/// #                 rq.set_append_sector(wp[zone]); // where the data went
/// #                 wp[zone] += u64::from(rq.nr_sectors());
/// #             }
/// #             Op::ZoneReset => wp[zone] = zone as u64 * ZONE_SECTORS,
/// #             _ => {}
/// #         }
/// #         drop(wp);
/// #         rq.complete(Status::Ok);
/// #         QueueRqResult::Queued
/// #     }
/// #     fn capabilities(&self) -> Capabilities<'_> {
/// #         Capabilities::none().zones(self)
/// #     }
/// # }
/// #
/// # impl Zoned for Zns {
/// #     fn report_zones(&self, sector: u64, nr: usize, out: &mut Vec<Zone>) -> Result<(), Status> {
/// #         let wp = self.wp.lock().unwrap();
/// #         for zone in (sector / ZONE_SECTORS..NR_ZONES).take(nr) {
/// #             let (start, wp) = (zone * ZONE_SECTORS, wp[zone as usize]);
/// #             let cond = match wp - start {
/// #                 0 => ZoneCond::Empty,
/// #                 ZONE_SECTORS => ZoneCond::Full,
/// #                 _ => ZoneCond::ImpOpen,
/// #             };
/// #             let ztype = ZoneType::SeqWriteRequired;
/// #             out.push(Zone { start, len: ZONE_SECTORS, capacity: ZONE_SECTORS, wp, ztype, cond });
/// #         }
/// #         Ok(())
/// #     }
/// # }
/// use mqblk::zoned::ZoneCond;
/// use mqblk::{Bio, Buf, Device, Status};
///
/// # let zns = Zns { wp: Mutex::new((0..NR_ZONES).map(|zone| zone * ZONE_SECTORS).collect()) };
/// let dev = Device::with_driver(Box::new(zns))?;
/// let zones = dev.zones().expect("a zoned device");
/// assert_eq!((zones.limits().nr_zones, zones.limits().zone_sectors), (4, 2048));
/// assert_eq!(zones.limits().zone_no(3000), 1, "sector 3000 lies in zone 1");
///
/// dev.client().submit_and_wait(Bio::zone_append(0, Buf::new(4096)))?;
/// let report = zones.report(0, 16)?; // at most 16 zones from the one holding byte 0
/// assert_eq!(report.len(), 4);
/// assert_eq!((report[0].cond, report[0].wp), (ZoneCond::ImpOpen, 8));
/// assert!(report[1..].iter().all(|z| z.cond == ZoneCond::Empty && z.wp == z.start));
///
/// let mut more = Vec::new();
/// zones.report_into(2 << 20, 1, &mut more)?; // appends zone 2
/// assert_eq!(more[0].start, 2 * 2048);
/// assert!(matches!(zones.report(4 << 20, 1), Err(mqblk::Error::Status(Status::Invalid))), "past the end");
/// # Ok::<(), mqblk::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct Zones<'a> {
    pub(super) limits: &'a ZonedLimits,
    pub(super) capacity_bytes: u64,
    pub(super) ops: &'a dyn driver::Zoned,
}

impl Zones<'_> {
    /// The zone geometry and resource limits.
    pub fn limits(&self) -> &ZonedLimits {
        self.limits
    }

    /// Up to `nr` zones from the one holding byte `offset`. An error with
    /// `Status::Invalid` if `offset` lies past the end of the device.
    pub fn report(&self, offset: u64, nr: usize) -> Result<Vec<Zone>, Error> {
        let mut out = Vec::with_capacity(nr.min(4096));
        self.report_into(offset, nr, &mut out)?;
        Ok(out)
    }

    /// As `report`, appending to `out`.
    pub fn report_into(&self, offset: u64, nr: usize, out: &mut Vec<Zone>) -> Result<(), Error> {
        if offset >= self.capacity_bytes {
            return Err(Error::Status(Status::Invalid));
        }
        self.ops.report_zones(offset >> SECTOR_SHIFT, nr, out).map_err(Error::Status)
    }
}
