//! Zone requests on a queue: zone management (one zone, or all zones in
//! a condition), and zone reports, which complete at once.
//!
//! Relies on: mqblk's zoned API (report_zones, ZoneMgmt) and the queue's
//! submission and immediate completion.

use std::ffi::{c_int, c_void};

use mqblk::zoned::{ZoneCond, ZoneMgmt, ZoneType};
use mqblk::{Bio, SECTOR_SIZE};

use super::{blkio_zone, Queue};

impl Queue {
    pub(super) fn zone_mgmt(&mut self, mgmt: ZoneMgmt, offset: u64, user_data: *mut c_void, flags: u32) {
        let what = format!("blkioq_{}_zone", mgmt.name().to_lowercase());
        if self.check_flags(user_data, flags, 0, &what) && self.check_writable(user_data, &what) {
            self.submit(Bio::zone_mgmt(mgmt, offset), user_data);
        }
    }

    /// Open, close or finish every zone in a condition `mgmt` applies to
    /// (mqblk has only reset-all as one op): one op per zone, waited for
    /// here, the request completing once all are done.
    pub(super) fn zone_mgmt_all(&mut self, mgmt: ZoneMgmt, user_data: *mut c_void, flags: u32) {
        let what = format!("blkioq_{}_all_zones", mgmt.name().to_lowercase());
        if !self.check_flags(user_data, flags, 0, &what) || !self.check_writable(user_data, &what) {
            return;
        }
        if mgmt == ZoneMgmt::Reset {
            return self.submit(Bio::zone_reset_all(), user_data);
        }
        let zones = match self.device.zones() {
            Some(z) => z.report(0, z.limits().nr_zones as usize),
            None => return self.refuse(user_data, libc::ENOTSUP, format!("{what}: the device is not zoned")),
        };
        let zones = match zones {
            Ok(zones) => zones,
            Err(e) => return self.refuse(user_data, e.errno(), format!("{what}: {e}")),
        };
        let applies = |c: ZoneCond| match mgmt {
            ZoneMgmt::Close => c.is_open(),
            ZoneMgmt::Finish => c.is_active(),
            ZoneMgmt::Open => c == ZoneCond::Closed,
            ZoneMgmt::Reset => unreachable!("handled above"),
        };
        for z in zones.iter().filter(|z| z.ztype != ZoneType::Conventional && applies(z.cond)) {
            let offset = z.start * SECTOR_SIZE;
            match self.client.submit_and_wait_completion(Bio::zone_mgmt(mgmt, offset)) {
                Ok(c) if c.status.is_ok() => {}
                Ok(c) => {
                    return self.refuse(
                        user_data,
                        c.status.errno(),
                        format!("{what}: zone at {offset}: {}", c.status.name()),
                    )
                }
                Err(e) => return self.refuse(user_data, e.errno(), format!("{what}: zone at {offset}: {e}")),
            }
        }
        self.complete_now(user_data, 0, None);
    }

    /// # Safety
    /// `zones` is null or points to `nr_zones` writable zones.
    pub(super) unsafe fn report_zones(
        &mut self,
        offset: u64,
        zones: *mut blkio_zone,
        nr_zones: u32,
        user_data: *mut c_void,
        flags: u32,
    ) {
        if !self.check_flags(user_data, flags, 0, "blkioq_report_zones") {
            return;
        }
        if zones.is_null() && nr_zones > 0 {
            return self.refuse(user_data, libc::EINVAL, "blkioq_report_zones: zones is NULL".into());
        }
        let Some(device_zones) = self.device.zones() else {
            return self.refuse(user_data, libc::ENOTSUP, "blkioq_report_zones: the device is not zoned".into());
        };
        let report = match device_zones.report(offset, nr_zones as usize) {
            Ok(report) => report,
            Err(e) => return self.refuse(user_data, e.errno(), format!("blkioq_report_zones at {offset}: {e}")),
        };
        for (i, z) in report.iter().enumerate() {
            let out = blkio_zone {
                start: z.start * SECTOR_SIZE,
                len: z.len * SECTOR_SIZE,
                capacity: z.capacity * SECTOR_SIZE,
                write_pointer: z.wp * SECTOR_SIZE,
                zone_type: match z.ztype {
                    ZoneType::Conventional => 0x1,
                    ZoneType::SeqWriteRequired => 0x2,
                },
                zone_state: z.cond as u8,
                reset: 0,
                reserved_: [0; 29],
            };
            // SAFETY: i < report.len() <= nr_zones, writable by the contract.
            unsafe { zones.add(i).write(out) };
        }
        self.complete_now(user_data, report.len() as c_int, None);
    }
}
