//! The virtio-blk device as the guest sees it: the feature bits offered and
//! the configuration space (`struct virtio_blk_config`), both derived from
//! an mqblk device's `QueueLimits`.
//!
//! The configuration space is written field by field in little-endian at
//! the offsets of the virtio 1.2 layout (5.2.4); a test checks each offset
//! against virtio-bindings' `virtio_blk_config`.
//!
//! Relies on: mqblk's QueueLimits; virtio-bindings (feature bit numbers).

use mqblk::{QueueLimits, SECTOR_SHIFT};
use vhost::vhost_user::message::VhostUserVirtioFeatures;
use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_F_BLK_SIZE, VIRTIO_BLK_F_DISCARD, VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_MQ, VIRTIO_BLK_F_RO,
    VIRTIO_BLK_F_SEG_MAX, VIRTIO_BLK_F_SIZE_MAX, VIRTIO_BLK_F_TOPOLOGY, VIRTIO_BLK_F_WRITE_ZEROES,
};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

/// The largest data segment (one descriptor) advertised as `size_max`.
pub const SEGMENT_MAX_BYTES: u32 = 64 << 10;

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
    /// Data segments per request (`seg_max`).
    pub seg_max: u32,
    /// Bytes per data segment (`size_max`).
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
    /// virtqueues of `queue_size` descriptors at most.
    pub fn new(limits: &QueueLimits, num_queues: u16, queue_size: u16, read_only: bool) -> Self {
        // A request needs a header and a status descriptor beside its data
        // (unless indirect, but a guest may not use indirect descriptors).
        let seg_max = limits.max_segments.min(u32::from(queue_size).saturating_sub(2)).max(1);
        Self {
            capacity_bytes: limits.capacity_bytes,
            logical_block_size: limits.logical_block_size,
            physical_block_size: limits.physical_block_size.max(limits.logical_block_size),
            seg_max,
            size_max: SEGMENT_MAX_BYTES,
            max_discard_sectors: if read_only { 0 } else { limits.max_discard_sectors },
            max_write_zeroes_sectors: if read_only { 0 } else { limits.max_write_zeroes_sectors },
            write_cache: limits.write_cache,
            read_only,
            num_queues,
        }
    }

    /// The most data bytes one request may carry.
    pub fn max_data_bytes(&self) -> u64 {
        u64::from(self.seg_max) * u64::from(self.size_max)
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
            // write_zeroes_may_unmap: the UNMAP flag is accepted (and ignored).
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
