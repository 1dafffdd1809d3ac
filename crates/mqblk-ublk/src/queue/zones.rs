//! Report zones, which is no bio: the queue thread asks the device for
//! its zones and writes them into the request as `struct blk_zone`
//! entries by user copy.
//!
//! Relies on: queue.rs (the tag's buffer, the descriptor); copy.rs
//! (`copy_out`); uapi.rs (`BlkZone`); mqblk's zone model.

use mqblk::zoned::{Zone, ZoneType};

use super::copy::copy_out;
use super::Queue;
use crate::uapi;

impl Queue {
    /// Answers a report-zones request (`nr_sectors` holds the number of
    /// zones): the device's zones from `start_sector`, written as
    /// `struct blk_zone`s into the request by user copy. Returns the
    /// commit's result.
    pub(super) fn report_zones(&mut self, tag: u16) -> i32 {
        let desc = self.descs.get(tag);
        let Some(offset) = desc.start_sector.checked_mul(512) else { return -libc::EINVAL };
        let Some(buf) = self.tags[usize::from(tag)].buf.as_mut() else { return -libc::EIO };
        let room = buf.capacity() / std::mem::size_of::<uapi::BlkZone>();
        let Some(device_zones) = self.device.zones() else { return -libc::EOPNOTSUPP };
        let zones = match device_zones.report(offset, (desc.nr_sectors as usize).min(room)) {
            Ok(zones) => zones,
            Err(e) => return -e.errno(),
        };
        buf.set_len(zones.len() * std::mem::size_of::<uapi::BlkZone>());
        for (chunk, zone) in buf.chunks_exact_mut(64).zip(&zones) {
            chunk.copy_from_slice(&blk_zone(zone).to_bytes());
        }
        if let Err(errno) = copy_out(&self.cdev, self.q_id, tag, buf) {
            return -errno;
        }
        // The kernel zeroed its buffer, so a short list ends at the first
        // zero-length entry; the result must still cover the whole request
        // or the block layer would see a partial completion and requeue it.
        // ublk clamps a result beyond the request to its length
        // (__ublk_complete_rq), so the buffer's capacity is always enough.
        i32::try_from(buf.capacity()).unwrap_or(i32::MAX)
    }
}

/// One zone as the kernel's report reads it.
fn blk_zone(zone: &Zone) -> uapi::BlkZone {
    uapi::BlkZone {
        start: zone.start,
        len: zone.len,
        wp: zone.wp,
        ztype: match zone.ztype {
            ZoneType::Conventional => uapi::BLK_ZONE_TYPE_CONVENTIONAL,
            ZoneType::SeqWriteRequired => uapi::BLK_ZONE_TYPE_SEQWRITE_REQ,
        },
        cond: zone.cond as u8,
        capacity: zone.capacity,
        ..uapi::BlkZone::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_convert_to_the_kernel_report_entry() {
        let seq = Zone {
            start: 131072,
            len: 131072,
            capacity: 98304,
            wp: 131080,
            ztype: ZoneType::SeqWriteRequired,
            cond: mqblk::zoned::ZoneCond::ImpOpen,
        };
        let z = blk_zone(&seq);
        assert_eq!((z.start, z.len, z.capacity, z.wp), (131072, 131072, 98304, 131080));
        assert_eq!((z.ztype, z.cond), (uapi::BLK_ZONE_TYPE_SEQWRITE_REQ, 0x2));
        let conv = Zone { ztype: ZoneType::Conventional, cond: mqblk::zoned::ZoneCond::NotWp, ..seq };
        assert_eq!((blk_zone(&conv).ztype, blk_zone(&conv).cond), (uapi::BLK_ZONE_TYPE_CONVENTIONAL, 0));
    }
}
