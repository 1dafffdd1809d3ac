//! Capabilities: what a driver may offer beside the request path. The
//! kernel keeps these apart from `blk_mq_ops`: zone reports in
//! `block_device_operations.report_zones`, direct access in
//! `dax_operations`, live attributes in configfs and sysfs. A driver
//! implements the traits it has and names them in
//! [`Driver::capabilities`](super::Driver::capabilities); the device hands
//! them out typed (`Device::zones`, `Device::direct_access`, ...), so a
//! front end asks whether a device can do something instead of calling a
//! default that answers "unsupported".
//!
//! Relies on: the zone model (zoned.rs), `FixedBufs` (fixed.rs), `Status`
//! and `Error`.

use std::io::IoSlice;

use crate::buf::FixedBufs;
use crate::error::Error;
use crate::status::Status;
use crate::zoned::Zone;

/// Most extents one block-status answer carries (a prefix of the range).
pub const MAX_EXTENTS: usize = 256;

/// Reads `[offset, offset + len)` as slices of the driver's own memory.
pub type ReadFn<'f> = dyn FnMut(&[IoSlice<'_>]) -> std::io::Result<()> + 'f;

/// A zoned device's zone report (`report_zones`). The zone operations
/// themselves are requests (`Op::ZoneReset`, ...), through `queue_rq`.
pub trait Zoned: Send + Sync {
    /// Appends up to `nr` zones, from the one holding `sector`, to `out`.
    /// The device has checked that `sector` lies inside it.
    fn report_zones(&self, sector: u64, nr: usize, out: &mut Vec<Zone>) -> Result<(), Status>;
}

/// Direct access for reads (the kernel's `dax_direct_access`, which pmem
/// offers), for a driver whose data sits in memory and whose reads have no
/// other effect (no faults, no cache in front, no service time).
pub trait DirectAccess: Send + Sync {
    /// Hands `f` the bytes of `[offset, offset + len)` as slices of the
    /// driver's own memory, in order, in one or more calls, without a
    /// request, and returns what `f` returned (its first error ends the
    /// read). None, with `f` not called, when the driver declines this read
    /// (bad blocks appeared meanwhile): the caller takes the bio path. The
    /// slices live only during the call; a write completing meanwhile may
    /// or may not show, as with any read racing it. The device has checked
    /// the range: inside the device, aligned, not empty.
    fn read_direct(&self, offset: u64, len: u64, f: &mut ReadFn<'_>) -> Option<std::io::Result<()>>;

    /// Whether `read_direct_lent` can serve reads (it may still decline
    /// one).
    fn lends_past_reads(&self) -> bool {
        false
    }

    /// As `read_direct`, except that the bytes stay as they are after `f`
    /// returns, for as long as anyone holds them by reference, even if the
    /// blocks are written or discarded meanwhile: `f` may hand them to the
    /// kernel (vmsplice into a pipe) for someone else to read later. The
    /// driver never writes into such memory again. None, with `f` not
    /// called, where the driver cannot.
    fn read_direct_lent(&self, _offset: u64, _len: u64, _f: &mut ReadFn<'_>) -> Option<std::io::Result<()>> {
        None
    }
}

/// Which parts of the device hold data (NBD's base:allocation, sparse
/// reads, `SEEK_DATA`).
pub trait BlockStatus: Send + Sync {
    /// Appends `(bytes, hole)` extents of `[offset, offset + len)` to
    /// `out`, in order, covering a prefix of the range (at most
    /// [`MAX_EXTENTS`]); a hole reads as zeros. The device has checked the
    /// range and cleared `out`.
    fn block_status(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>);

    /// Whether an answer costs about as little as a lookup in memory, so
    /// that it may run beside every large read. Files answer by
    /// SEEK_DATA/SEEK_HOLE, which on some file systems (tmpfs) walks every
    /// page up to the next hole: not cheap.
    fn is_cheap(&self) -> bool {
        false
    }
}

/// Attributes of a live device (null_blk's configfs attributes, such as
/// `badblocks`).
pub trait Attributes: Send + Sync {
    /// Changes attribute `key`; errors name the key and what is wrong, and
    /// a refused write changes nothing.
    fn set_attr(&self, key: &str, value: &str) -> Result<(), Error>;

    /// The value of attribute `key`, as `set_attr` would take it back.
    fn attr(&self, key: &str) -> Result<String, Error>;
}

/// Power control of a device with a volatile write cache.
pub trait PowerControl: Send + Sync {
    /// A power cut: whatever the cache holds that no FLUSH or FUA made
    /// durable is lost, and the device goes on with the durable state, or
    /// with `hold_off` drops every later change until `power_on`. Returns
    /// the cache pages lost.
    fn power_cut(&self, hold_off: bool) -> Result<u64, Error>;

    /// Ends a `power_cut` that held the power off. Returns the requests
    /// dropped meanwhile; an error if the power is on.
    fn power_on(&self) -> Result<u64, Error>;
}

/// Registered buffers (io_uring's fixed buffers, fio's `fixedbufs`).
pub trait FixedBuffers: Send + Sync {
    /// Registers `bufs` for I/O that lands in it. The driver keeps a clone
    /// (which keeps the region mapped) as long as it may use it. An error
    /// if a pool is registered already or the kernel refuses.
    fn register_buffers(&self, bufs: &FixedBufs) -> Result<(), Error>;
}

/// The capabilities a driver offers: each one a trait object on the driver
/// itself, or None. Built with the setters:
/// `Capabilities::none().zones(self).attributes(self)`.
#[derive(Clone, Copy, Default)]
#[non_exhaustive]
pub struct Capabilities<'a> {
    pub zones: Option<&'a dyn Zoned>,
    pub direct_access: Option<&'a dyn DirectAccess>,
    pub block_status: Option<&'a dyn BlockStatus>,
    pub attributes: Option<&'a dyn Attributes>,
    pub power: Option<&'a dyn PowerControl>,
    pub fixed_buffers: Option<&'a dyn FixedBuffers>,
}

impl<'a> Capabilities<'a> {
    /// No capability: a plain block device.
    pub fn none() -> Self {
        Self::default()
    }

    /// Offers zone reports.
    pub fn zones(mut self, zones: &'a dyn Zoned) -> Self {
        self.zones = Some(zones);
        self
    }

    /// Offers direct access for reads.
    pub fn direct_access(mut self, direct_access: &'a dyn DirectAccess) -> Self {
        self.direct_access = Some(direct_access);
        self
    }

    /// Offers block status (holes and data).
    pub fn block_status(mut self, block_status: &'a dyn BlockStatus) -> Self {
        self.block_status = Some(block_status);
        self
    }

    /// Offers live attributes.
    pub fn attributes(mut self, attributes: &'a dyn Attributes) -> Self {
        self.attributes = Some(attributes);
        self
    }

    /// Offers power control.
    pub fn power(mut self, power: &'a dyn PowerControl) -> Self {
        self.power = Some(power);
        self
    }

    /// Offers registered buffers.
    pub fn fixed_buffers(mut self, fixed_buffers: &'a dyn FixedBuffers) -> Self {
        self.fixed_buffers = Some(fixed_buffers);
        self
    }
}

impl std::fmt::Debug for Capabilities<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capabilities")
            .field("zones", &self.zones.is_some())
            .field("direct_access", &self.direct_access.is_some())
            .field("block_status", &self.block_status.is_some())
            .field("attributes", &self.attributes.is_some())
            .field("power", &self.power.is_some())
            .field("fixed_buffers", &self.fixed_buffers.is_some())
            .finish()
    }
}

/// Extents of `[offset, offset + len)` by fixed `unit`s (pages), each
/// unit a hole or not; neighbours of the same kind merge, and at most
/// [`MAX_EXTENTS`] are appended (a prefix of the range). A helper for
/// [`BlockStatus::block_status`].
pub fn extents_by(offset: u64, len: u64, unit: u64, out: &mut Vec<(u64, bool)>, is_hole: impl Fn(u64) -> bool) {
    let end = offset + len;
    let mut pos = offset;
    while pos < end {
        let n = (unit - pos % unit).min(end - pos);
        let hole = is_hole(pos);
        let full = out.len() == MAX_EXTENTS;
        match out.last_mut() {
            Some((bytes, h)) if *h == hole => *bytes += n,
            _ if full => return,
            _ => out.push((n, hole)),
        }
        pos += n;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn extents_merge_neighbours_and_stop_at_the_cap() {
        let mut out = Vec::new();
        // Pages 1 and 2 hold data; the range starts mid-page.
        extents_by(2048, 4 * 4096, 4096, &mut out, |pos| !(4096..3 * 4096).contains(&pos));
        assert_eq!(out, vec![(2048, true), (8192, false), (6144, true)]);
        out.clear();
        extents_by(0, 4096 * 1000, 4096, &mut out, |pos| (pos / 4096) % 2 == 0);
        assert_eq!(out.len(), MAX_EXTENTS, "a prefix of the range, no more extents than the cap");
        assert!(out.iter().all(|e| e.0 == 4096));
    }
}
