//! The capabilities a device's driver offers (driver/caps.rs), handed out
//! typed: `dev.zones()`, `dev.direct_access()`, `dev.block_status()`,
//! `dev.attributes()`, `dev.power()`, `dev.fixed_buffers()` each give a
//! handle, or None where the driver has no such ability. The handles check
//! ranges as the bio path would before the driver sees them, and count
//! what the stats show.
//!
//! Relies on: the request queue's limits and counters (queue/), the
//! driver's capability traits (driver/caps.rs).

use super::Device;
use crate::buf::FixedBufs;
use crate::driver::{self, ReadFn};
use crate::error::Error;
use crate::limits::{QueueLimits, MAX_BIO_BYTES};
use crate::request::SECTOR_SHIFT;
use crate::status::Status;
use crate::sync::{AtomicU64, Ordering};
use crate::zoned::{Zone, ZonedLimits};

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
}

/// A zoned device's zone reports ([`Device::zones`]). Positions in zones
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

/// Direct access for reads ([`Device::direct_access`]). (The driver,
/// hidden here, is the example of [`driver::DirectAccess`].)
///
/// ```
/// # use std::sync::RwLock;
/// # use mqblk::driver::{Capabilities, DirectAccess, Driver, Hctx, QueueRqResult, ReadFn, Rq};
/// # use mqblk::{Op, QueueLimits, Status, TagSetConfig};
/// # /// 1 MiB of memory whose reads may skip the request path.
/// # struct Mem(RwLock<Vec<u8>>);
/// #
/// # impl Driver for Mem {
/// #     fn name(&self) -> &str { "mem" }
/// #     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
/// #     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
/// #     fn queue_rq(&self, _hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
/// #         let mut mem = self.0.write().unwrap();
/// #         match rq.op() {
/// #             Op::Write => rq.for_each_segment(|pos, data| mem[pos as usize..][..data.len()].copy_from_slice(data)),
/// #             Op::Read => rq.for_each_segment_mut(|pos, buf| {
/// #                 let len = buf.len();
/// #                 buf.copy_from_slice(&mem[pos as usize..][..len]);
/// #             }),
/// #             _ => {}
/// #         }
/// #         drop(mem);
/// #         rq.complete(Status::Ok);
/// #         QueueRqResult::Queued
/// #     }
/// #     fn capabilities(&self) -> Capabilities<'_> {
/// #         Capabilities::none().direct_access(self)
/// #     }
/// # }
/// #
/// # impl DirectAccess for Mem {
/// #     /// One slice of the memory, under its lock for the call.
/// #     fn read_direct(&self, offset: u64, len: u64, f: &mut ReadFn<'_>) -> Option<std::io::Result<()>> {
/// #         let mem = self.0.read().unwrap();
/// #         Some(f(&[IoSlice::new(&mem[offset as usize..(offset + len) as usize])]))
/// #     }
/// # }
/// use std::io::IoSlice;
/// use mqblk::Device;
///
/// let dev = Device::with_driver(Box::new(Mem(RwLock::new(vec![0; 1 << 20]))))?;
/// dev.client().write_at(&[7; 4096], 8192)?;
/// let direct = dev.direct_access().expect("memory it can read directly");
/// let mut sum = 0u64;
/// let mut add = |slices: &[IoSlice<'_>]| {
///     sum += slices.iter().flat_map(|s| s.iter()).map(|&b| u64::from(b)).sum::<u64>();
///     Ok(())
/// };
/// assert!(matches!(direct.read(8192, 4096, &mut add), Some(Ok(()))));
/// // A range a read bio could not have: declined, take the bio path.
/// assert!(direct.read(100, 512, &mut add).is_none(), "misaligned");
/// // This driver cannot lend its memory past the call.
/// assert!(!direct.lends());
/// assert!(direct.read_lent(0, 4096, &mut add).is_none());
/// assert_eq!(sum, 7 * 4096);
/// assert_eq!(dev.stats().direct_reads, 1);
/// # Ok::<(), mqblk::Error>(())
/// ```
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
