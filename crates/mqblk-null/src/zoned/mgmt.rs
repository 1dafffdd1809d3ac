//! Zone management commands (null_zone_mgmt): reset, open, close and
//! finish of one zone, and reset all, each moving the zone through the
//! state machine and its open/active counts, and clearing 6.12's
//! need-write-pointer-update mark where the block layer would.
//!
//! Relies on: mod.rs (the zones, their locks and geometry), res.rs (the
//! resource lock and admission of a zone that opens), mem/ (a reset zone's
//! data is zeroed).

use mqblk::zoned::ZoneCond;
use mqblk::{Op, Status, SECTOR_SHIFT};

use super::res::{Count, Res};
use super::{NullZoned, ZoneState};
use crate::mem::MemStore;

impl NullZoned {
    /// __null_close_zone.
    pub(super) fn close_zone(&self, zno: usize, z: &mut ZoneState, res: &mut Res) -> Status {
        match z.cond {
            ZoneCond::Closed => return Status::Ok,
            ZoneCond::ImpOpen => res.dec(Count::ImpOpen),
            ZoneCond::ExpOpen => res.dec(Count::ExpOpen),
            _ => return Status::IoErr,
        }
        if z.wp == self.zone_start(zno) {
            z.set_cond(ZoneCond::Empty);
        } else {
            z.set_cond(ZoneCond::Closed);
            res.inc(Count::Closed);
        }
        Status::Ok
    }

    pub(super) fn mgmt(&self, op: Op, sector: u64, mem: Option<&MemStore>) -> Status {
        let zno = (sector / self.limits.zone_sectors) as usize;
        if self.is_conv(zno) {
            return Status::IoErr;
        }
        let mut z = self.lock_zone(zno);
        let status = match op {
            Op::ZoneReset => self.reset_zone(zno, &mut z, mem),
            Op::ZoneOpen => self.open_zone(zno, &mut z),
            Op::ZoneClose => {
                let mut res = self.res_lock();
                self.close_zone(zno, &mut z, &mut res)
            }
            Op::ZoneFinish => self.finish_zone(zno, &mut z),
            _ => Status::NotSupp,
        };
        self.debug_check(zno, &z);
        status
    }

    pub(super) fn reset_all(&self, mem: Option<&MemStore>) {
        for zno in self.nr_conv as usize..self.zones.len() {
            let mut z = self.lock_zone(zno);
            // blk_zone_reset_all_bio_endio: every plug's write pointer is 0.
            z.need_wp_update = false;
            if !matches!(z.cond, ZoneCond::Empty | ZoneCond::ReadOnly | ZoneCond::Offline) {
                let _ = self.reset_zone(zno, &mut z, mem);
            }
        }
    }

    fn reset_zone(&self, zno: usize, z: &mut ZoneState, mem: Option<&MemStore>) -> Status {
        {
            let mut res = self.res_lock();
            match z.cond {
                ZoneCond::Empty => {
                    z.need_wp_update = false;
                    return Status::Ok;
                }
                ZoneCond::ImpOpen => res.dec(Count::ImpOpen),
                ZoneCond::ExpOpen => res.dec(Count::ExpOpen),
                ZoneCond::Closed => res.dec(Count::Closed),
                ZoneCond::Full => {}
                _ => return Status::IoErr,
            }
            z.set_cond(ZoneCond::Empty);
            z.wp = self.zone_start(zno);
            // blk_zone_reset_bio_endio: the plug's write pointer is 0 again.
            z.need_wp_update = false;
        }
        if let Some(mem) = mem {
            mem.zero(self.zone_start(zno) << SECTOR_SHIFT, self.zone_len(zno) << SECTOR_SHIFT);
        }
        Status::Ok
    }

    fn open_zone(&self, zno: usize, z: &mut ZoneState) -> Status {
        let mut res = match z.cond {
            ZoneCond::ExpOpen => return Status::Ok,
            ZoneCond::Empty | ZoneCond::Closed => match self.admit(zno, z.cond) {
                Ok(res) => res,
                Err(status) => return status,
            },
            ZoneCond::ImpOpen => self.res_lock(),
            _ => return Status::IoErr,
        };
        match z.cond {
            ZoneCond::ImpOpen => res.dec(Count::ImpOpen),
            ZoneCond::Closed => res.dec(Count::Closed),
            _ => {}
        }
        z.set_cond(ZoneCond::ExpOpen);
        res.inc(Count::ExpOpen);
        Status::Ok
    }

    fn finish_zone(&self, zno: usize, z: &mut ZoneState) -> Status {
        let mut res = match z.cond {
            ZoneCond::Full => {
                // blk_zone_finish_bio_endio: any successful finish sets the
                // plug's write pointer to the zone's end.
                z.need_wp_update = false;
                return Status::Ok;
            }
            ZoneCond::Empty | ZoneCond::Closed => match self.admit(zno, z.cond) {
                Ok(res) => res,
                Err(status) => return status,
            },
            ZoneCond::ImpOpen | ZoneCond::ExpOpen => self.res_lock(),
            _ => return Status::IoErr,
        };
        match z.cond {
            ZoneCond::ImpOpen => res.dec(Count::ImpOpen),
            ZoneCond::ExpOpen => res.dec(Count::ExpOpen),
            ZoneCond::Closed => res.dec(Count::Closed),
            _ => {}
        }
        z.set_cond(ZoneCond::Full);
        z.wp = self.zone_start(zno) + self.zone_len(zno);
        z.need_wp_update = false;
        Status::Ok
    }
}
