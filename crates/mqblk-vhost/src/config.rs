//! The virtio-blk device as the guest sees it: the feature bits offered and
//! the configuration space (`struct virtio_blk_config`), both derived from
//! an mqblk device's `QueueLimits`.
//!
//! The configuration space is written field by field in little-endian at
//! the offsets of the virtio 1.2 layout (5.2.4); a test checks each offset
//! against virtio-bindings' `virtio_blk_config`.
//!
//! The segment fields are chosen so that a request is one bio (slot.rs
//! lends its data segments as one vectored bio): `seg_max` is what a bio
//! carries (BIO_MAX_VECS), `size_max` the device's own `max_segment_size`.
//! The device's `max_segments` is not passed on: the block layer splits a
//! bio of more physical segments into requests itself and completes it
//! once, which costs less than the guest splitting it into requests that
//! each cross the ring.
//!
//! The ring's size is not known when QEMU reads the configuration (at
//! connection, before SET_VRING_NUM), so `seg_max` is sized for the
//! largest ring the server accepts. virtio 1.2 (2.7.5.3.1) bounds a chain
//! by the queue size, and QEMU's own virtio-blk offers queue size - 2 for
//! that (seg-max-adjust); QEMU's vhost-user-blk passes our configuration
//! through as it is, on a ring of 128 unless `queue-size` says otherwise.
//! Linux (6.12 `virtblk_probe`) takes `seg_max` as its `max_segments` and
//! `size_max` as its `max_segment_size`, bounds neither by the ring, and
//! puts a request of several descriptors in one indirect table, whose
//! length the ring does not bound (virtio_ring.c only refuses a chain
//! longer than a ring without indirect descriptors); rust-vmm's
//! virtio-queue follows such a table to its own length. So a 1 MiB read
//! of 256 scattered pages is one chain on that ring of 128. Linux guests
//! before 4.14 crash on a `seg_max` above the ring's size (as QEMU's
//! seg-max-adjust change records): serve those with `queue-size=512`.
//!
//! Relies on: mqblk's QueueLimits, BIO_MAX_VECS and MAX_BIO_BYTES;
//! virtio-bindings (feature bit numbers).

use mqblk::{QueueLimits, BIO_MAX_VECS, MAX_BIO_BYTES, SECTOR_SHIFT};
use vhost::vhost_user::message::VhostUserVirtioFeatures;
use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_F_BLK_SIZE, VIRTIO_BLK_F_DISCARD, VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_MQ, VIRTIO_BLK_F_RO,
    VIRTIO_BLK_F_SEG_MAX, VIRTIO_BLK_F_SIZE_MAX, VIRTIO_BLK_F_TOPOLOGY, VIRTIO_BLK_F_WRITE_ZEROES,
};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

/// Size of the configuration space we answer for: the virtio 1.2 layout up
/// to and including the zoned fields (zero: not zoned).
pub const CONFIG_BYTES: usize = 96;

/// What the guest is told about the disk, and what the request parser
/// holds it to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskLimits {
    pub capacity_bytes: u64,
    pub logical_block_size: u32,
    pub physical_block_size: u32,
    /// Data segments per request (`seg_max`): at most BIO_MAX_VECS, the
    /// segments of one bio.
    pub seg_max: u32,
    /// Bytes per data segment (`size_max`): the device's
    /// `max_segment_size`, in whole logical blocks.
    pub size_max: u32,
    /// 0: no discard.
    pub max_discard_sectors: u32,
    /// 0: no write zeroes.
    pub max_write_zeroes_sectors: u32,
    /// The device has a volatile write cache: VIRTIO_BLK_F_FLUSH.
    pub write_cache: bool,
    pub read_only: bool,
    pub num_queues: u16,
}

impl DiskLimits {
    /// The guest's view of a device with `limits`, served on `num_queues`
    /// virtqueues of `queue_size` descriptors at most (the largest ring
    /// the server accepts; see the module header for smaller ones).
    pub fn new(limits: &QueueLimits, num_queues: u16, queue_size: u16, read_only: bool) -> Self {
        // A chain holds a header and a status descriptor beside its data
        // (virtio 1.2, 2.7.5.3.1: no chain longer than the queue size).
        let seg_max = (BIO_MAX_VECS as u32).min(u32::from(queue_size).saturating_sub(2)).max(1);
        let lbs = limits.logical_block_size;
        Self {
            capacity_bytes: limits.capacity_bytes,
            logical_block_size: lbs,
            physical_block_size: limits.physical_block_size.max(lbs),
            seg_max,
            // Whole blocks, so a segment the guest cut at size_max can still
            // be lent (queue.rs lends only whole blocks).
            size_max: (limits.max_segment_size / lbs * lbs).max(lbs),
            max_discard_sectors: if read_only { 0 } else { limits.max_discard_sectors },
            max_write_zeroes_sectors: if read_only { 0 } else { limits.max_write_zeroes_sectors },
            write_cache: limits.write_cache,
            read_only,
            num_queues,
        }
    }

    /// The most descriptors one chain may have: `seg_max` data segments,
    /// a header and a status byte (in descriptors of their own, or not).
    pub fn max_descriptors(&self) -> usize {
        self.seg_max as usize + 2
    }

    /// The most data bytes one request may carry: its segments, and no
    /// more than one bio (the kernel's 32-bit `bi_size`), in whole blocks.
    pub fn max_data_bytes(&self) -> u64 {
        let bio_max = MAX_BIO_BYTES / u64::from(self.logical_block_size) * u64::from(self.logical_block_size);
        (u64::from(self.seg_max) * u64::from(self.size_max)).min(bio_max)
    }

    /// The virtio feature bits offered to the driver.
    pub fn features(&self) -> u64 {
        let bit = |b: u32| 1u64 << b;
        let mut f = bit(VIRTIO_F_VERSION_1)
            | bit(VIRTIO_RING_F_EVENT_IDX)
            | bit(VIRTIO_RING_F_INDIRECT_DESC)
            | bit(VIRTIO_BLK_F_SIZE_MAX)
            | bit(VIRTIO_BLK_F_SEG_MAX)
            | bit(VIRTIO_BLK_F_BLK_SIZE)
            | bit(VIRTIO_BLK_F_TOPOLOGY)
            | bit(VIRTIO_BLK_F_MQ)
            | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();
        if self.write_cache {
            f |= bit(VIRTIO_BLK_F_FLUSH);
        }
        if self.read_only {
            f |= bit(VIRTIO_BLK_F_RO);
        }
        if self.max_discard_sectors > 0 {
            f |= bit(VIRTIO_BLK_F_DISCARD);
        }
        if self.max_write_zeroes_sectors > 0 {
            f |= bit(VIRTIO_BLK_F_WRITE_ZEROES);
        }
        f
    }

    /// `struct virtio_blk_config`, little-endian.
    pub fn config_space(&self) -> [u8; CONFIG_BYTES] {
        let mut c = [0u8; CONFIG_BYTES];
        let mut put = |offset: usize, bytes: &[u8]| c[offset..offset + bytes.len()].copy_from_slice(bytes);
        put(0, &(self.capacity_bytes >> SECTOR_SHIFT).to_le_bytes());
        put(8, &self.size_max.to_le_bytes());
        put(12, &self.seg_max.to_le_bytes());
        put(20, &self.logical_block_size.to_le_bytes());
        // physical_block_exp: log2(physical / logical blocks).
        let exp = (self.physical_block_size / self.logical_block_size).trailing_zeros() as u8;
        put(24, &[exp]);
        // min_io_size, in logical blocks.
        put(26, &1u16.to_le_bytes());
        put(32, &[u8::from(self.write_cache)]);
        put(34, &self.num_queues.to_le_bytes());
        let lbs_sectors = self.logical_block_size >> SECTOR_SHIFT;
        if self.max_discard_sectors > 0 {
            put(36, &self.max_discard_sectors.to_le_bytes());
            put(40, &1u32.to_le_bytes());
            put(44, &lbs_sectors.to_le_bytes());
        }
        if self.max_write_zeroes_sectors > 0 {
            put(48, &self.max_write_zeroes_sectors.to_le_bytes());
            put(52, &1u32.to_le_bytes());
            // write_zeroes_may_unmap: with the UNMAP flag the device may
            // deallocate; without it the bio carries REQ_NOUNMAP.
            put(56, &[1]);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;
    use virtio_bindings::virtio_blk::virtio_blk_config as Cfg;

    fn limits() -> QueueLimits {
        let mut l = QueueLimits::new(1 << 30, 4096);
        l.max_discard_sectors = 8192;
        l.max_write_zeroes_sectors = 4096;
        l.write_cache = true;
        l
    }

    #[test]
    fn offsets_match_the_virtio_layout() {
        assert_eq!(offset_of!(Cfg, capacity), 0);
        assert_eq!(offset_of!(Cfg, size_max), 8);
        assert_eq!(offset_of!(Cfg, seg_max), 12);
        assert_eq!(offset_of!(Cfg, blk_size), 20);
        assert_eq!(offset_of!(Cfg, physical_block_exp), 24);
        assert_eq!(offset_of!(Cfg, min_io_size), 26);
        assert_eq!(offset_of!(Cfg, wce), 32);
        assert_eq!(offset_of!(Cfg, num_queues), 34);
        assert_eq!(offset_of!(Cfg, max_discard_sectors), 36);
        assert_eq!(offset_of!(Cfg, max_discard_seg), 40);
        assert_eq!(offset_of!(Cfg, discard_sector_alignment), 44);
        assert_eq!(offset_of!(Cfg, max_write_zeroes_sectors), 48);
        assert_eq!(offset_of!(Cfg, max_write_zeroes_seg), 52);
        assert_eq!(offset_of!(Cfg, write_zeroes_may_unmap), 56);
        assert!(std::mem::size_of::<Cfg>() <= CONFIG_BYTES);
    }

    #[test]
    fn config_space_carries_the_device_limits() {
        let d = DiskLimits::new(&limits(), 2, 128, false);
        let c = d.config_space();
        let u32_at = |o: usize| u32::from_le_bytes(c[o..o + 4].try_into().unwrap());
        assert_eq!(u64::from_le_bytes(c[0..8].try_into().unwrap()), (1 << 30) / 512);
        assert_eq!(u32_at(20), 4096);
        assert_eq!(u32_at(12), 126, "seg_max leaves room for header and status");
        assert_eq!(u16::from_le_bytes([c[34], c[35]]), 2);
        assert_eq!((u32_at(36), u32_at(40), u32_at(44)), (8192, 1, 8));
        assert_eq!((u32_at(48), u32_at(52), c[56]), (4096, 1, 1));
        assert_eq!(c[32], 1, "writeback");
    }

    #[test]
    fn a_request_fits_one_bio() {
        // The largest ring the server accepts: seg_max is a bio's segments,
        // whatever the device's own max_segments (the block layer splits).
        let mut few = limits();
        few.max_segments = 8;
        let d = DiskLimits::new(&few, 1, 1024, false);
        assert_eq!(d.seg_max, BIO_MAX_VECS as u32);
        assert_eq!(d.size_max, 64 << 10, "the device's max_segment_size");
        assert_eq!(d.max_data_bytes(), 16 << 20);
        // No segment size limit (the file driver): whole blocks, and no
        // request larger than a bio.
        let mut file = limits();
        file.max_segment_size = u32::MAX;
        let d = DiskLimits::new(&file, 1, 1024, false);
        assert_eq!(d.size_max, u32::MAX / 4096 * 4096);
        assert_eq!(d.max_data_bytes(), MAX_BIO_BYTES / 4096 * 4096);
        assert_eq!(u32::from_le_bytes(d.config_space()[8..12].try_into().unwrap()), d.size_max);
    }

    #[test]
    fn features_follow_capabilities() {
        let bit = |b: u32| 1u64 << b;
        let rw = DiskLimits::new(&limits(), 1, 128, false).features();
        assert_ne!(rw & bit(VIRTIO_BLK_F_FLUSH), 0);
        assert_ne!(rw & bit(VIRTIO_BLK_F_DISCARD), 0);
        assert_ne!(rw & bit(VIRTIO_F_VERSION_1), 0);
        assert_eq!(rw & bit(VIRTIO_BLK_F_RO), 0);
        let ro = DiskLimits::new(&limits(), 1, 128, true).features();
        assert_ne!(ro & bit(VIRTIO_BLK_F_RO), 0);
        assert_eq!(ro & (bit(VIRTIO_BLK_F_DISCARD) | bit(VIRTIO_BLK_F_WRITE_ZEROES)), 0);
        let mut plain = limits();
        plain.write_cache = false;
        assert_eq!(DiskLimits::new(&plain, 1, 128, false).features() & bit(VIRTIO_BLK_F_FLUSH), 0);
    }
}
