//! The ublk parameters of a device (UBLK_CMD_SET_PARAMS): its geometry,
//! limits and attributes from its `QueueLimits`, the per-tag buffer size,
//! and the zoned geometries ublk cannot carry.
//!
//! Relies on: uapi.rs (`Params` and its parts); the device's limits.

use mqblk::QueueLimits;

use crate::error::Error;
use crate::uapi::{self, Params};

/// The largest request the server takes (per-tag buffer size): 1 MiB, or
/// less when the device's max_sectors is smaller.
pub const MAX_IO_BYTES: usize = 1 << 20;

/// The ublk parameters for a device with these limits, whose per-tag
/// buffers hold `max_io_bytes`.
///
/// max_sectors is the device's own (null_blk's 255 for 512-byte blocks),
/// not the page-rounded buffer's: the guest kernel then splits a large
/// write into the same pieces as over the device itself, which a zoned
/// device's write pointers show. What 6.12's ublk cannot pass on:
/// max_segments and max_segment_size (ublk_ctrl_start_dev sets USHRT_MAX
/// and UINT_MAX; null_blk has 128 and 64 KiB), which bind only for pieces
/// of more than 128 segments, never for a 255-sector piece of 4 KiB pages.
pub fn params_for(limits: &QueueLimits, max_io_bytes: u32) -> Params {
    let shift = |v: u32| v.trailing_zeros() as u8;
    let mut attrs = 0;
    if limits.rotational {
        attrs |= uapi::UBLK_ATTR_ROTATIONAL;
    }
    if limits.write_cache {
        attrs |= uapi::UBLK_ATTR_VOLATILE_CACHE;
        if limits.fua {
            attrs |= uapi::UBLK_ATTR_FUA;
        }
    }
    let physical = limits.physical_block_size.max(limits.logical_block_size);
    let mut params = Params {
        types: uapi::UBLK_PARAM_TYPE_BASIC,
        basic: uapi::ParamBasic {
            attrs,
            logical_bs_shift: shift(limits.logical_block_size),
            physical_bs_shift: shift(physical),
            io_opt_shift: shift(physical),
            io_min_shift: shift(physical),
            max_sectors: max_sectors(limits, max_io_bytes),
            chunk_sectors: limits.zoned.map_or(0, |z| z.zone_sectors as u32),
            dev_sectors: limits.capacity_sectors(),
            virt_boundary_mask: 0,
        },
        ..Params::default()
    };
    if limits.max_discard_sectors > 0 || limits.max_write_zeroes_sectors > 0 {
        params.types |= uapi::UBLK_PARAM_TYPE_DISCARD;
        params.discard = uapi::ParamDiscard {
            discard_alignment: 0,
            discard_granularity: limits.logical_block_size,
            max_discard_sectors: limits.max_discard_sectors,
            max_write_zeroes_sectors: limits.max_write_zeroes_sectors,
            max_discard_segments: u16::from(limits.max_discard_sectors > 0),
            reserved0: 0,
        };
    }
    if let Some(z) = &limits.zoned {
        params.types |= uapi::UBLK_PARAM_TYPE_ZONED;
        params.zoned = uapi::ParamZoned {
            max_open_zones: z.max_open_zones,
            max_active_zones: z.max_active_zones,
            max_zone_append_sectors: z.zone_append_max_sectors.min(max_sectors(limits, max_io_bytes)),
            reserved: [0; 20],
        };
    }
    params
}

/// Why ublk cannot carry this zoned geometry, if it cannot: the kernel
/// counts `dev_sectors / chunk_sectors` zones (no smaller last zone, which
/// null_blk allows) and needs zone append.
pub(crate) fn check_zoned(limits: &QueueLimits) -> Result<(), Error> {
    let Some(z) = &limits.zoned else { return Ok(()) };
    if u32::try_from(z.zone_sectors).is_err() || !z.zone_sectors.is_power_of_two() {
        return Err(Error::BadOption(format!(
            "zone size of {} sectors: ublk needs a power of two below 2^32",
            z.zone_sectors
        )));
    }
    if limits.capacity_sectors() % z.zone_sectors != 0 {
        return Err(Error::BadOption(format!(
            "a capacity of {} sectors is not a whole number of {}-sector zones: ublk cannot report a smaller last zone",
            limits.capacity_sectors(),
            z.zone_sectors
        )));
    }
    if z.zone_append_max_sectors == 0 {
        return Err(Error::BadOption("the zoned device takes no zone append: ublk needs it".into()));
    }
    Ok(())
}

/// The per-tag buffer size: the device's largest request rounded up to
/// whole pages and blocks (ublk_align_max_io_size rounds the buffer down
/// to a page, and the kernel takes max_sectors only up to the buffer), at
/// most `MAX_IO_BYTES`.
pub(crate) fn max_io_bytes(limits: &QueueLimits) -> u32 {
    let unit = u64::from(limits.logical_block_size.max(4096));
    let bytes = limits.max_transfer_bytes().min(MAX_IO_BYTES as u64);
    (bytes.div_ceil(unit) * unit).max(unit) as u32
}

/// The largest request the device is advertised with: its own max_sectors
/// in whole blocks, within the buffer, and at least the page that
/// ublk_validate_params asks for.
fn max_sectors(limits: &QueueLimits, max_io_bytes: u32) -> u32 {
    let block_sectors = limits.logical_block_size >> 9;
    let own = limits.max_sectors / block_sectors * block_sectors;
    own.min(max_io_bytes >> 9).max(4096 >> 9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_follow_the_queue_limits() {
        let mut limits = QueueLimits::new(1 << 30, 4096);
        limits.max_sectors = 250;
        let max_io = max_io_bytes(&limits);
        assert_eq!(max_io, 131_072, "250 sectors rounded up to 32 pages");
        let p = params_for(&limits, max_io);
        assert_eq!(p.types, uapi::UBLK_PARAM_TYPE_BASIC);
        assert_eq!((p.basic.logical_bs_shift, p.basic.physical_bs_shift), (12, 12));
        assert_eq!((p.basic.max_sectors, p.basic.dev_sectors, p.basic.attrs), (248, 1 << 21, 0), "whole 4 KiB blocks");

        limits.write_cache = true;
        limits.fua = true;
        limits.rotational = true;
        limits.max_discard_sectors = 1 << 20;
        limits.max_write_zeroes_sectors = 1 << 16;
        let p = params_for(&limits, max_io);
        assert_eq!(p.basic.attrs, uapi::UBLK_ATTR_VOLATILE_CACHE | uapi::UBLK_ATTR_FUA | uapi::UBLK_ATTR_ROTATIONAL);
        assert_eq!(p.types, uapi::UBLK_PARAM_TYPE_BASIC | uapi::UBLK_PARAM_TYPE_DISCARD);
        assert_eq!((p.discard.max_discard_segments, p.discard.discard_granularity), (1, 4096));
        assert_eq!((p.discard.max_discard_sectors, p.discard.max_write_zeroes_sectors), (1 << 20, 1 << 16));
    }
}
