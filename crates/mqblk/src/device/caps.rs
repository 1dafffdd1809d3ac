//! The capabilities a device's driver offers (driver/caps.rs), handed out
//! typed: `dev.zones()`, `dev.direct_access()`, `dev.block_status()`,
//! `dev.attributes()`, `dev.power()`, `dev.fixed_buffers()` each give a
//! handle, or None where the driver has no such ability. The handles check
//! ranges as the bio path would before the driver sees them, and count
//! what the stats show.
//!
//! Relies on: the request queue's limits and counters (queue/), the
//! driver's capability traits (driver/caps.rs).

use std::sync::atomic::AtomicU64;

use super::Device;
use crate::buf::FixedBufs;
use crate::driver::{self, ReadFn};
use crate::error::Error;
use crate::limits::{QueueLimits, MAX_BIO_BYTES};
use crate::request::SECTOR_SHIFT;
use crate::status::Status;
use crate::sync::Ordering;
use crate::zoned::{Zone, ZonedLimits};

impl Device {
    /// Zone reports, on a zoned device (`blkdev_report_zones`).
    pub fn zones(&self) -> Option<Zones<'_>> {
        let ops = self.q.driver.capabilities().zones?;
        let limits = self.q.limits.zoned.as_ref()?;
        Some(Zones { limits, capacity_bytes: self.q.limits.capacity_bytes, ops })
    }

    /// Direct access for reads (the kernel's DAX), where the driver's data
    /// sits in memory.
    pub fn direct_access(&self) -> Option<DirectReads<'_>> {
        let ops = self.q.driver.capabilities().direct_access?;
        Some(DirectReads { dev: self, ops })
    }

    /// Which parts of the device hold data, where the driver can tell.
    pub fn block_status(&self) -> Option<BlockStatusMap<'_>> {
        let ops = self.q.driver.capabilities().block_status?;
        Some(BlockStatusMap { capacity_bytes: self.q.limits.capacity_bytes, ops })
    }

    /// Attributes of the live device (null_blk's configfs attributes).
    pub fn attributes(&self) -> Option<Attrs<'_>> {
        Some(Attrs { ops: self.q.driver.capabilities().attributes? })
    }

    /// Power control, on a device with a volatile write cache.
    pub fn power(&self) -> Option<Power<'_>> {
        Some(Power { ops: self.q.driver.capabilities().power? })
    }

    /// Registered buffers (io_uring's fixed buffers), where the driver
    /// uses them.
    pub fn fixed_buffers(&self) -> Option<RegisteredBuffers<'_>> {
        Some(RegisteredBuffers { ops: self.q.driver.capabilities().fixed_buffers? })
    }
}

/// A zoned device's zone reports ([`Device::zones`]).
#[derive(Clone, Copy)]
pub struct Zones<'a> {
    limits: &'a ZonedLimits,
    capacity_bytes: u64,
    ops: &'a dyn driver::Zoned,
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

/// Direct access for reads ([`Device::direct_access`]).
#[derive(Clone, Copy)]
pub struct DirectReads<'a> {
    dev: &'a Device,
    ops: &'a dyn driver::DirectAccess,
}

impl DirectReads<'_> {
    /// Reads `[offset, offset + len)` without a request: `f` gets the bytes
    /// as slices of the device's own memory, in order, in one or more
    /// calls, valid only during the call (so no tag, no scheduler, no
    /// plug: for a server that writes the bytes straight to a socket, with
    /// one copy fewer). None if the driver declines this read (take the
    /// bio path then), or if the range is not one a read bio could have:
    /// empty, out of bounds or misaligned (the bio path refuses it with its
    /// error). Counted in `DeviceStats::direct_reads`.
    pub fn read(&self, offset: u64, len: u64, f: &mut ReadFn<'_>) -> Option<std::io::Result<()>> {
        self.counted(offset, len, &[&self.dev.q.direct_reads], || self.ops.read_direct(offset, len, f))
    }

    /// Whether `read_lent` can serve reads (a memory-backed null device on
    /// a kernel with 4 KiB pages; it may still decline one).
    pub fn lends(&self) -> bool {
        self.ops.lends_past_reads()
    }

    /// As `read`, but what `f` gets stays as it is after the call, for as
    /// long as anyone holds it by reference, whatever is written or
    /// discarded meanwhile: `f` may hand the slices to the kernel
    /// (vmsplice into a pipe, splice into a socket), and whoever reads them
    /// there, whenever, reads the data of this read. None as for `read`,
    /// and where the driver cannot lend past the call. Counted in
    /// `DeviceStats` (`direct_reads` and `direct_reads_lent`).
    pub fn read_lent(&self, offset: u64, len: u64, f: &mut ReadFn<'_>) -> Option<std::io::Result<()>> {
        let q = &self.dev.q;
        self.counted(offset, len, &[&q.direct_reads, &q.direct_reads_lent], || {
            self.ops.read_direct_lent(offset, len, f)
        })
    }

    /// Checks the range, counts the read first (`f` may hand the data to
    /// a reader who then looks at the stats), and takes the count back if
    /// the driver declines.
    fn counted(
        &self,
        offset: u64,
        len: u64,
        counters: &[&AtomicU64],
        read: impl FnOnce() -> Option<std::io::Result<()>>,
    ) -> Option<std::io::Result<()>> {
        if !read_range_ok(&self.dev.q.limits, offset, len) {
            return None;
        }
        for c in counters {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let result = read();
        if result.is_none() {
            for c in counters {
                c.fetch_sub(1, Ordering::Relaxed);
            }
        }
        result
    }
}

/// A range a read bio could have: not empty, inside the device, aligned to
/// its logical blocks, and not over the largest bio.
fn read_range_ok(limits: &QueueLimits, offset: u64, len: u64) -> bool {
    let lbs_mask = u64::from(limits.logical_block_size) - 1;
    let in_bounds = offset.checked_add(len).is_some_and(|end| end <= limits.capacity_bytes);
    len > 0 && in_bounds && (offset | len) & lbs_mask == 0 && len <= MAX_BIO_BYTES
}

/// Which parts of a device hold data ([`Device::block_status`]).
#[derive(Clone, Copy)]
pub struct BlockStatusMap<'a> {
    capacity_bytes: u64,
    ops: &'a dyn driver::BlockStatus,
}

impl BlockStatusMap<'_> {
    /// `(bytes, hole)` extents of `[offset, offset + len)`, covering a
    /// prefix of the range; None if the range is empty or out of bounds.
    pub fn extents(&self, offset: u64, len: u64) -> Option<Vec<(u64, bool)>> {
        let mut out = Vec::new();
        self.extents_into(offset, len, &mut out).then_some(out)
    }

    /// As `extents`, into `out` (cleared first; no allocation once it has
    /// room); false where `extents` gives None.
    pub fn extents_into(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) -> bool {
        out.clear();
        let in_bounds = offset.checked_add(len).is_some_and(|end| end <= self.capacity_bytes);
        if !in_bounds || len == 0 {
            return false;
        }
        self.ops.block_status(offset, len, out);
        debug_assert!(out.len() <= driver::MAX_EXTENTS, "a block status answer over MAX_EXTENTS");
        !out.is_empty()
    }

    /// Whether an answer is cheap enough to run beside every large read.
    pub fn is_cheap(&self) -> bool {
        self.ops.is_cheap()
    }
}

/// Attributes of a live device ([`Device::attributes`]).
#[derive(Clone, Copy)]
pub struct Attrs<'a> {
    ops: &'a dyn driver::Attributes,
}

impl Attrs<'_> {
    /// Changes an attribute of the live device, as null_blk's configfs
    /// does: `set("badblocks", "+2048-2055")` makes those sectors fail with
    /// EIO, `"-2048-2055"` heals them. Errors name the key and what is
    /// wrong; a refused write changes nothing.
    pub fn set(&self, key: &str, value: &str) -> Result<(), Error> {
        self.ops.set_attr(key, value)
    }

    /// The value of an attribute (`badblocks`: `START-END` ranges,
    /// `:`-separated).
    pub fn get(&self, key: &str) -> Result<String, Error> {
        self.ops.attr(key)
    }
}

/// Power control of a device with a volatile write cache
/// ([`Device::power`]).
#[derive(Clone, Copy)]
pub struct Power<'a> {
    ops: &'a dyn driver::PowerControl,
}

impl Power<'_> {
    /// Cuts the power: writes no FLUSH or FUA made durable are lost, and
    /// the device goes on at once with the durable state. Returns the
    /// cache pages lost.
    pub fn cut(&self) -> Result<u64, Error> {
        self.ops.power_cut(false)
    }

    /// A power cut that keeps the power off: as `cut`, and every write,
    /// discard, write zeroes and flush after it is dropped (though
    /// acknowledged, as dm-flakey's drop_writes) until `on`, so a file
    /// system still mounted cannot write past the cut.
    pub fn off(&self) -> Result<u64, Error> {
        self.ops.power_cut(true)
    }

    /// Ends `off`: the device takes writes again. Returns the requests
    /// dropped while it was off; an error if the power is on.
    pub fn on(&self) -> Result<u64, Error> {
        self.ops.power_on()
    }
}

/// Registered buffers ([`Device::fixed_buffers`]).
#[derive(Clone, Copy)]
pub struct RegisteredBuffers<'a> {
    ops: &'a dyn driver::FixedBuffers,
}

impl RegisteredBuffers<'_> {
    /// Registers a pool of fixed buffers with the driver (fio's
    /// `fixedbufs`): I/O whose buffer is a slot of `bufs` then skips the
    /// per-I/O pinning of its pages. One pool per device: an error after.
    pub fn register(&self, bufs: &FixedBufs) -> Result<(), Error> {
        self.ops.register_buffers(bufs)
    }
}
