//! The capabilities a device's driver offers (driver/caps.rs), handed out
//! typed: `dev.zones()`, `dev.direct_access()`, `dev.block_status()`,
//! `dev.attributes()`, `dev.power()`, `dev.fixed_buffers()` each give a
//! handle, or None where the driver has no such ability. The handles check
//! ranges as the bio path would before the driver sees them, and count
//! what the stats show.
//!
//! Zone reports (zones.rs) and direct reads (direct.rs) have files of
//! their own; the smaller handles are here.
//!
//! Relies on: the request queue's limits and counters (queue/), the
//! driver's capability traits (driver/caps.rs).

use super::{Device, DirectReads, Zones};
use crate::buf::FixedBufs;
use crate::driver;
use crate::error::Error;

impl Device {
    /// Zone reports, on a zoned device (`blkdev_report_zones`; example:
    /// [`Zones`]).
    pub fn zones(&self) -> Option<Zones<'_>> {
        let ops = self.q.driver.capabilities().zones?;
        let limits = self.q.limits.zoned.as_ref()?;
        Some(Zones { limits, capacity_bytes: self.q.limits.capacity_bytes, ops })
    }

    /// Direct access for reads (the kernel's DAX), where the driver's data
    /// sits in memory (example: [`DirectReads`]).
    pub fn direct_access(&self) -> Option<DirectReads<'_>> {
        let ops = self.q.driver.capabilities().direct_access?;
        Some(DirectReads { dev: self, ops })
    }

    /// Which parts of the device hold data, where the driver can tell
    /// (example: [`BlockStatusMap`]).
    pub fn block_status(&self) -> Option<BlockStatusMap<'_>> {
        let ops = self.q.driver.capabilities().block_status?;
        Some(BlockStatusMap { capacity_bytes: self.q.limits.capacity_bytes, ops })
    }

    /// Attributes of the live device (null_blk's configfs attributes;
    /// example: [`Attrs`]).
    pub fn attributes(&self) -> Option<Attrs<'_>> {
        Some(Attrs { ops: self.q.driver.capabilities().attributes? })
    }

    /// Power control, on a device with a volatile write cache (example:
    /// [`Power`]).
    pub fn power(&self) -> Option<Power<'_>> {
        Some(Power { ops: self.q.driver.capabilities().power? })
    }

    /// Registered buffers (io_uring's fixed buffers), where the driver
    /// uses them (example: [`RegisteredBuffers`]).
    pub fn fixed_buffers(&self) -> Option<RegisteredBuffers<'_>> {
        Some(RegisteredBuffers { ops: self.q.driver.capabilities().fixed_buffers? })
    }

    /// The driver's backing file, open as long as the device lives, where
    /// its data is one file (example: [`driver::BackingFile`]). I/O on it
    /// passes none of the device's scheduling, statistics or trace.
    pub fn backing_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.q.driver.capabilities().backing_file?.backing_fd())
    }
}

/// Which parts of a device hold data ([`Device::block_status`]). (The
/// driver, hidden here, is the example of [`driver::BlockStatus`].)
///
/// ```
/// # use std::collections::BTreeSet;
/// # use std::sync::Mutex;
/// # use mqblk::driver::{extents_by, BlockStatus, Capabilities, Driver, Hctx, QueueRqResult, Rq};
/// # use mqblk::{Op, QueueLimits, Status, TagSetConfig};
/// # /// Remembers which 4 KiB pages were written (it keeps no data).
/// # struct Sparse(Mutex<BTreeSet<u64>>);
/// #
/// # impl Driver for Sparse {
/// #     fn name(&self) -> &str { "sparse" }
/// #     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
/// #     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 4096) }
/// #     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
/// #         if rq.op() == Op::Write {
/// #             let pages = rq.pos_bytes() / 4096..(rq.pos_bytes() + rq.len_bytes()) / 4096;
/// #             self.0.lock().unwrap().extend(pages);
/// #         }
/// #         rq.complete(Status::Ok);
/// #         QueueRqResult::Queued
/// #     }
/// #     fn capabilities(&self) -> Capabilities<'_> {
/// #         Capabilities::none().block_status(self)
/// #     }
/// # }
/// #
/// # impl BlockStatus for Sparse {
/// #     fn block_status(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) {
/// #         let written = self.0.lock().unwrap();
/// #         extents_by(offset, len, 4096, out, |pos| !written.contains(&(pos / 4096)));
/// #     }
/// #     fn is_cheap(&self) -> bool {
/// #         true // a set lookup per page
/// #     }
/// # }
/// use mqblk::Device;
///
/// let dev = Device::with_driver(Box::new(Sparse(Mutex::new(BTreeSet::new()))))?;
/// dev.client().write_at(&[1; 4096], 4096)?; // page 1
/// let map = dev.block_status().expect("it knows its holes");
/// assert_eq!(map.extents(4096, 8192), Some(vec![(4096, false), (4096, true)]));
/// assert_eq!(map.extents(0, 2 << 20), None, "out of bounds");
/// let mut out = Vec::with_capacity(256); // reused: no allocation per query
/// assert!(map.extents_into(0, 4096, &mut out));
/// assert_eq!(out, [(4096, true)]);
/// assert!(map.is_cheap());
/// # Ok::<(), mqblk::Error>(())
/// ```
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

/// Attributes of a live device ([`Device::attributes`]). (The driver,
/// hidden here, is the example of [`driver::Attributes`].)
///
/// ```
/// # use std::sync::atomic::{AtomicBool, Ordering};
/// # use mqblk::config::ConfigError;
/// # use mqblk::driver::{Attributes, Capabilities, Driver, Hctx, QueueRqResult, Rq};
/// # use mqblk::{Error, QueueLimits, Status, TagSetConfig};
/// # /// A device that can be made read-only while live.
/// # struct Knobs {
/// #     read_only: AtomicBool,
/// # }
/// #
/// # impl Driver for Knobs {
/// #     fn name(&self) -> &str { "knobs" }
/// #     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
/// #     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
/// #     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
/// #         let refused = rq.op().is_write() && self.read_only.load(Ordering::Relaxed);
/// #         rq.complete(if refused { Status::IoErr } else { Status::Ok });
/// #         QueueRqResult::Queued
/// #     }
/// #     fn capabilities(&self) -> Capabilities<'_> {
/// #         Capabilities::none().attributes(self)
/// #     }
/// # }
/// #
/// # impl Attributes for Knobs {
/// #     fn set_attr(&self, key: &str, value: &str) -> Result<(), Error> {
/// #         match (key, value) {
/// #             ("read_only", "0" | "1") => Ok(self.read_only.store(value == "1", Ordering::Relaxed)),
/// #             ("read_only", _) => Err(ConfigError::conflict("knobs", format!("read_only={value}: 0 or 1")).into()),
/// #             _ => Err(ConfigError::conflict("knobs", format!("no attribute '{key}'")).into()),
/// #         }
/// #     }
/// #     fn attr(&self, key: &str) -> Result<String, Error> {
/// #         match key {
/// #             "read_only" => Ok(u8::from(self.read_only.load(Ordering::Relaxed)).to_string()),
/// #             _ => Err(ConfigError::conflict("knobs", format!("no attribute '{key}'")).into()),
/// #         }
/// #     }
/// # }
/// use mqblk::Device;
///
/// let dev = Device::with_driver(Box::new(Knobs { read_only: AtomicBool::new(false) }))?;
/// let attrs = dev.attributes().expect("live attributes");
/// assert_eq!(attrs.get("read_only")?, "0");
/// attrs.set("read_only", "1")?;
/// assert_eq!(attrs.get("read_only")?, "1");
/// // Errors name the attribute; a refused write changes nothing.
/// assert!(attrs.set("read_only", "maybe").unwrap_err().to_string().contains("read_only"));
/// assert!(attrs.get("colour").is_err());
/// assert_eq!(attrs.get("read_only")?, "1");
/// # Ok::<(), mqblk::Error>(())
/// ```
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
/// ([`Device::power`]). (The driver, hidden here, is the example of
/// [`driver::PowerControl`]: it counts writes, where mqblk-null's
/// `cache_size` counts cache pages.)
///
/// ```
/// # use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
/// # use mqblk::config::ConfigError;
/// # use mqblk::driver::{Capabilities, Driver, Hctx, PowerControl, QueueRqResult, Rq};
/// # use mqblk::{Bio, Error, Op, QueueLimits, ReqFlags, Status, TagSetConfig};
/// # /// Counts the writes its volatile cache holds (it keeps no data): a FLUSH
/// # /// or FUA makes them durable, a power cut loses them.
/// # #[derive(Default)]
/// # struct Cached {
/// #     cached: AtomicU64,
/// #     off: AtomicBool,
/// #     dropped: AtomicU64,
/// # }
/// #
/// # impl Driver for Cached {
/// #     fn name(&self) -> &str { "cached" }
/// #     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
/// #     fn limits(&self) -> QueueLimits {
/// #         let mut limits = QueueLimits::new(1 << 20, 512);
/// #         (limits.write_cache, limits.fua) = (true, true);
/// #         limits
/// #     }
/// #     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
/// #         if rq.op().is_write() && self.off.load(Ordering::Relaxed) {
/// #             self.dropped.fetch_add(1, Ordering::Relaxed); // acknowledged, dropped
/// #         } else if rq.op() == Op::Flush || rq.flags().contains(ReqFlags::FUA) {
/// #             self.cached.store(0, Ordering::Relaxed);
/// #         } else if rq.op() == Op::Write {
/// #             self.cached.fetch_add(1, Ordering::Relaxed);
/// #         }
/// #         rq.complete(Status::Ok);
/// #         QueueRqResult::Queued
/// #     }
/// #     fn capabilities(&self) -> Capabilities<'_> {
/// #         Capabilities::none().power(self)
/// #     }
/// # }
/// #
/// # impl PowerControl for Cached {
/// #     fn power_cut(&self, hold_off: bool) -> Result<u64, Error> {
/// #         self.off.store(hold_off, Ordering::Relaxed);
/// #         Ok(self.cached.swap(0, Ordering::Relaxed))
/// #     }
/// #     fn power_on(&self) -> Result<u64, Error> {
/// #         if !self.off.swap(false, Ordering::Relaxed) {
/// #             return Err(ConfigError::conflict("cached", "the power is on").into());
/// #         }
/// #         Ok(self.dropped.swap(0, Ordering::Relaxed))
/// #     }
/// # }
/// use mqblk::Device;
///
/// let dev = Device::with_driver(Box::new(Cached::default()))?;
/// let mut client = dev.client();
/// let power = dev.power().expect("a volatile write cache");
/// client.write_at(&[0; 512], 0)?;
/// client.write_at(&[0; 512], 512)?;
/// assert_eq!(power.cut()?, 2, "two cached writes lost; the device goes on");
///
/// client.write_at(&[0; 512], 0)?;
/// assert_eq!(power.off()?, 1);
/// client.write_at(&[0; 512], 0)?; // acknowledged, dropped: the power is off
/// assert_eq!(power.on()?, 1, "one write dropped while off");
/// assert!(power.on().is_err(), "the power is on");
/// # Ok::<(), mqblk::Error>(())
/// ```
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

/// Registered buffers ([`Device::fixed_buffers`]). (The driver, hidden
/// here, is the example of [`driver::FixedBuffers`].)
///
/// ```
/// # use std::sync::atomic::{AtomicU64, Ordering};
/// # use std::sync::Mutex;
/// # use mqblk::driver::{Capabilities, Driver, FixedBuffers, Hctx, QueueRqResult, Rq};
/// # use mqblk::{QueueLimits, Status, TagSetConfig};
/// # /// Tells the I/O whose buffer lies in its registered pool (io_uring would
/// # /// use READ_FIXED / WRITE_FIXED for it).
/// # #[derive(Default)]
/// # struct Pinned {
/// #     pool: Mutex<Option<FixedBufs>>,
/// #     fixed_ios: AtomicU64,
/// # }
/// #
/// # impl Driver for Pinned {
/// #     fn name(&self) -> &str { "pinned" }
/// #     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
/// #     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 4096) }
/// #     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
/// #         let data = rq.data();
/// #         let pool = self.pool.lock().unwrap();
/// #         if pool.as_ref().is_some_and(|p| p.contains(data.as_ptr() as usize, data.len())) {
/// #             self.fixed_ios.fetch_add(1, Ordering::Relaxed);
/// #         }
/// #         drop(pool);
/// #         rq.complete(Status::Ok);
/// #         QueueRqResult::Queued
/// #     }
/// #     fn capabilities(&self) -> Capabilities<'_> {
/// #         Capabilities::none().fixed_buffers(self)
/// #     }
/// # }
/// #
/// # impl FixedBuffers for Pinned {
/// #     fn register_buffers(&self, bufs: &FixedBufs) -> Result<(), Error> {
/// #         let mut pool = self.pool.lock().unwrap();
/// #         if pool.is_some() {
/// #             return Err(Error::Busy("pinned: a pool is registered already".into()));
/// #         }
/// #         *pool = Some(bufs.clone()); // keeps the region mapped while we hold it
/// #         Ok(())
/// #     }
/// # }
/// use mqblk::{Bio, Device, Error, FixedBufs};
///
/// let dev = Device::with_driver(Box::new(Pinned::default()))?;
/// let pool = FixedBufs::new(4, 4096);
/// let registered = dev.fixed_buffers().expect("it uses registered buffers");
/// registered.register(&pool)?;
/// assert!(matches!(registered.register(&pool), Err(Error::Busy(_))), "one pool per device");
/// let mut client = dev.client();
/// client.submit_and_wait(Bio::write(0, pool.take(4096).unwrap()))?; // a slot of the pool
/// client.write_at(&[0; 4096], 0)?; // an ordinary buffer
/// # Ok::<(), mqblk::Error>(())
/// ```
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
