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

/// Reads `[offset, offset + len)` as slices of the driver's own memory.
pub type ReadFn<'f> = dyn FnMut(&[IoSlice<'_>]) -> std::io::Result<()> + 'f;

/// A zoned device's zone report (`report_zones`). The zone operations
/// themselves are requests (`Op::ZoneReset`, ...), through `queue_rq`, as
/// are zone appends, which say where their data went
/// ([`Rq::set_append_sector`](super::Rq::set_append_sector)).
///
/// ```
/// use std::sync::Mutex;
/// use mqblk::driver::{Capabilities, Driver, Hctx, QueueRqResult, Rq, Zoned};
/// use mqblk::zoned::{Zone, ZoneCond, ZoneMgmt, ZoneType, ZonedLimits};
/// use mqblk::{Bio, Buf, Device, Op, QueueLimits, Status, TagSetConfig};
///
/// const ZONE_SECTORS: u64 = 2048; // 1 MiB zones
/// const NR_ZONES: u64 = 4;
///
/// /// Four sequential zones; a zone append lands at its zone's write pointer.
/// struct Zns {
///     wp: Mutex<Vec<u64>>, // write pointers, in sectors
/// }
///
/// impl Driver for Zns {
///     fn name(&self) -> &str { "zns" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
///     fn limits(&self) -> QueueLimits {
///         let mut limits = QueueLimits::new(NR_ZONES * ZONE_SECTORS * 512, 4096);
///         limits.zoned = Some(ZonedLimits {
///             zone_sectors: ZONE_SECTORS,
///             nr_zones: NR_ZONES as u32,
///             max_open_zones: 0,
///             max_active_zones: 0,
///             zone_append_max_sectors: 256,
///         });
///         limits
///     }
///     fn queue_rq(&self, _hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
///         let zone = (rq.sector() / ZONE_SECTORS) as usize;
///         let mut wp = self.wp.lock().unwrap();
///         match rq.op() {
///             Op::ZoneAppend => {
///                 rq.set_append_sector(wp[zone]); // where the data went
///                 wp[zone] += u64::from(rq.nr_sectors());
///             }
///             Op::ZoneReset => wp[zone] = zone as u64 * ZONE_SECTORS,
///             _ => {}
///         }
///         drop(wp);
///         rq.complete(Status::Ok);
///         QueueRqResult::Queued
///     }
///     fn capabilities(&self) -> Capabilities<'_> {
///         Capabilities::none().zones(self)
///     }
/// }
///
/// impl Zoned for Zns {
///     fn report_zones(&self, sector: u64, nr: usize, out: &mut Vec<Zone>) -> Result<(), Status> {
///         let wp = self.wp.lock().unwrap();
///         for zone in (sector / ZONE_SECTORS..NR_ZONES).take(nr) {
///             let (start, wp) = (zone * ZONE_SECTORS, wp[zone as usize]);
///             let cond = match wp - start {
///                 0 => ZoneCond::Empty,
///                 ZONE_SECTORS => ZoneCond::Full,
///                 _ => ZoneCond::ImpOpen,
///             };
///             let ztype = ZoneType::SeqWriteRequired;
///             out.push(Zone { start, len: ZONE_SECTORS, capacity: ZONE_SECTORS, wp, ztype, cond });
///         }
///         Ok(())
///     }
/// }
///
/// let zns = Zns { wp: Mutex::new((0..NR_ZONES).map(|zone| zone * ZONE_SECTORS).collect()) };
/// let dev = Device::with_driver(Box::new(zns))?;
/// let mut client = dev.client();
/// let zone1 = 1 << 20; // zone 1's first byte
/// let first = client.submit_and_wait_completion(Bio::zone_append(zone1, Buf::new(8192)))?;
/// let second = client.submit_and_wait_completion(Bio::zone_append(zone1, Buf::new(4096)))?;
/// assert_eq!((first.append_offset, second.append_offset), (Some(zone1), Some(zone1 + 8192)));
///
/// let zone = dev.zones().unwrap().report(zone1, 1)?[0];
/// assert_eq!((zone.cond, zone.wp), (ZoneCond::ImpOpen, 2048 + 24));
/// client.submit_and_wait(Bio::zone_mgmt(ZoneMgmt::Reset, zone1))?;
/// assert_eq!(dev.zones().unwrap().report(zone1, 1)?[0].cond, ZoneCond::Empty);
/// # Ok::<(), mqblk::Error>(())
/// ```
pub trait Zoned: Send + Sync {
    /// Appends up to `nr` zones, from the one holding `sector`, to `out`.
    /// The device has checked that `sector` lies inside it.
    fn report_zones(&self, sector: u64, nr: usize, out: &mut Vec<Zone>) -> Result<(), Status>;
}

/// Direct access for reads (the kernel's `dax_direct_access`, which pmem
/// offers), for a driver whose data sits in memory and whose reads have no
/// other effect (no faults, no cache in front, no service time).
///
/// ```
/// use std::io::IoSlice;
/// use std::sync::RwLock;
/// use mqblk::driver::{Capabilities, DirectAccess, Driver, Hctx, QueueRqResult, ReadFn, Rq};
/// use mqblk::{Device, Op, QueueLimits, Status, TagSetConfig};
///
/// /// 1 MiB of memory whose reads may skip the request path.
/// struct Mem(RwLock<Vec<u8>>);
///
/// impl Driver for Mem {
///     fn name(&self) -> &str { "mem" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
///     fn queue_rq(&self, _hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
///         let mut mem = self.0.write().unwrap();
///         match rq.op() {
///             Op::Write => rq.for_each_segment(|pos, data| mem[pos as usize..][..data.len()].copy_from_slice(data)),
///             Op::Read => rq.for_each_segment_mut(|pos, buf| {
///                 let len = buf.len();
///                 buf.copy_from_slice(&mem[pos as usize..][..len]);
///             }),
///             _ => {}
///         }
///         drop(mem);
///         rq.complete(Status::Ok);
///         QueueRqResult::Queued
///     }
///     fn capabilities(&self) -> Capabilities<'_> {
///         Capabilities::none().direct_access(self)
///     }
/// }
///
/// impl DirectAccess for Mem {
///     /// One slice of the memory, under its lock for the call.
///     fn read_direct(&self, offset: u64, len: u64, f: &mut ReadFn<'_>) -> Option<std::io::Result<()>> {
///         let mem = self.0.read().unwrap();
///         Some(f(&[IoSlice::new(&mem[offset as usize..(offset + len) as usize])]))
///     }
/// }
///
/// let dev = Device::with_driver(Box::new(Mem(RwLock::new(vec![0; 1 << 20]))))?;
/// dev.client().write_at(&[7; 4096], 8192)?;
/// let mut copy = Vec::new();
/// let direct = dev.direct_access().unwrap();
/// let done = direct.read(8192, 4096, &mut |slices: &[IoSlice<'_>]| {
///     slices.iter().for_each(|s| copy.extend_from_slice(s));
///     Ok(())
/// });
/// assert!(matches!(done, Some(Ok(()))));
/// assert_eq!(copy, [7; 4096]);
/// # Ok::<(), mqblk::Error>(())
/// ```
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
///
/// ```
/// use std::collections::BTreeSet;
/// use std::sync::Mutex;
/// use mqblk::driver::{extents_by, BlockStatus, Capabilities, Driver, Hctx, QueueRqResult, Rq};
/// use mqblk::{Device, Op, QueueLimits, Status, TagSetConfig};
///
/// /// Remembers which 4 KiB pages were written (it keeps no data).
/// struct Sparse(Mutex<BTreeSet<u64>>);
///
/// impl Driver for Sparse {
///     fn name(&self) -> &str { "sparse" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 4096) }
///     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
///         if rq.op() == Op::Write {
///             let pages = rq.pos_bytes() / 4096..(rq.pos_bytes() + rq.len_bytes()) / 4096;
///             self.0.lock().unwrap().extend(pages);
///         }
///         rq.complete(Status::Ok);
///         QueueRqResult::Queued
///     }
///     fn capabilities(&self) -> Capabilities<'_> {
///         Capabilities::none().block_status(self)
///     }
/// }
///
/// impl BlockStatus for Sparse {
///     fn block_status(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) {
///         let written = self.0.lock().unwrap();
///         extents_by(offset, len, 4096, out, |pos| !written.contains(&(pos / 4096)));
///     }
///     fn is_cheap(&self) -> bool {
///         true // a set lookup per page
///     }
/// }
///
/// let dev = Device::with_driver(Box::new(Sparse(Mutex::new(BTreeSet::new()))))?;
/// dev.client().write_at(&[1; 4096], 4096)?; // page 1
/// // (bytes, hole) extents: a hole, page 1's data, a hole.
/// let extents = dev.block_status().unwrap().extents(0, 16384);
/// assert_eq!(extents, Some(vec![(4096, true), (4096, false), (8192, true)]));
/// # Ok::<(), mqblk::Error>(())
/// ```
pub trait BlockStatus: Send + Sync {
    /// Appends `(bytes, hole)` extents of `[offset, offset + len)` to
    /// `out`, in order, covering a prefix of the range (at most
    /// [`MAX_EXTENTS`](super::MAX_EXTENTS)); a hole reads as zeros. The device has checked the
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
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use mqblk::config::ConfigError;
/// use mqblk::driver::{Attributes, Capabilities, Driver, Hctx, QueueRqResult, Rq};
/// use mqblk::{Device, Error, QueueLimits, Status, TagSetConfig};
///
/// /// A device that can be made read-only while live.
/// struct Knobs {
///     read_only: AtomicBool,
/// }
///
/// impl Driver for Knobs {
///     fn name(&self) -> &str { "knobs" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
///     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
///         let refused = rq.op().is_write() && self.read_only.load(Ordering::Relaxed);
///         rq.complete(if refused { Status::IoErr } else { Status::Ok });
///         QueueRqResult::Queued
///     }
///     fn capabilities(&self) -> Capabilities<'_> {
///         Capabilities::none().attributes(self)
///     }
/// }
///
/// impl Attributes for Knobs {
///     fn set_attr(&self, key: &str, value: &str) -> Result<(), Error> {
///         match (key, value) {
///             ("read_only", "0" | "1") => Ok(self.read_only.store(value == "1", Ordering::Relaxed)),
///             ("read_only", _) => Err(ConfigError::conflict("knobs", format!("read_only={value}: 0 or 1")).into()),
///             _ => Err(ConfigError::conflict("knobs", format!("no attribute '{key}'")).into()),
///         }
///     }
///     fn attr(&self, key: &str) -> Result<String, Error> {
///         match key {
///             "read_only" => Ok(u8::from(self.read_only.load(Ordering::Relaxed)).to_string()),
///             _ => Err(ConfigError::conflict("knobs", format!("no attribute '{key}'")).into()),
///         }
///     }
/// }
///
/// let dev = Device::with_driver(Box::new(Knobs { read_only: AtomicBool::new(false) }))?;
/// let mut client = dev.client();
/// client.write_at(&[0; 512], 0)?;
/// dev.attributes().unwrap().set("read_only", "1")?;
/// assert!(matches!(client.write_at(&[0; 512], 0), Err(Error::Status(Status::IoErr))));
/// # Ok::<(), mqblk::Error>(())
/// ```
pub trait Attributes: Send + Sync {
    /// Changes attribute `key`; errors name the key and what is wrong, and
    /// a refused write changes nothing.
    fn set_attr(&self, key: &str, value: &str) -> Result<(), Error>;

    /// The value of attribute `key`, as `set_attr` would take it back.
    fn attr(&self, key: &str) -> Result<String, Error>;
}

/// Power control of a device with a volatile write cache.
///
/// ```
/// use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
/// use mqblk::config::ConfigError;
/// use mqblk::driver::{Capabilities, Driver, Hctx, PowerControl, QueueRqResult, Rq};
/// use mqblk::{Bio, Device, Error, Op, QueueLimits, ReqFlags, Status, TagSetConfig};
///
/// /// Counts the writes its volatile cache holds (it keeps no data): a FLUSH
/// /// or FUA makes them durable, a power cut loses them.
/// #[derive(Default)]
/// struct Cached {
///     cached: AtomicU64,
///     off: AtomicBool,
///     dropped: AtomicU64,
/// }
///
/// impl Driver for Cached {
///     fn name(&self) -> &str { "cached" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
///     fn limits(&self) -> QueueLimits {
///         let mut limits = QueueLimits::new(1 << 20, 512);
///         (limits.write_cache, limits.fua) = (true, true);
///         limits
///     }
///     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
///         if rq.op().is_write() && self.off.load(Ordering::Relaxed) {
///             self.dropped.fetch_add(1, Ordering::Relaxed); // acknowledged, dropped
///         } else if rq.op() == Op::Flush || rq.flags().contains(ReqFlags::FUA) {
///             self.cached.store(0, Ordering::Relaxed);
///         } else if rq.op() == Op::Write {
///             self.cached.fetch_add(1, Ordering::Relaxed);
///         }
///         rq.complete(Status::Ok);
///         QueueRqResult::Queued
///     }
///     fn capabilities(&self) -> Capabilities<'_> {
///         Capabilities::none().power(self)
///     }
/// }
///
/// impl PowerControl for Cached {
///     fn power_cut(&self, hold_off: bool) -> Result<u64, Error> {
///         self.off.store(hold_off, Ordering::Relaxed);
///         Ok(self.cached.swap(0, Ordering::Relaxed))
///     }
///     fn power_on(&self) -> Result<u64, Error> {
///         if !self.off.swap(false, Ordering::Relaxed) {
///             return Err(ConfigError::conflict("cached", "the power is on").into());
///         }
///         Ok(self.dropped.swap(0, Ordering::Relaxed))
///     }
/// }
///
/// let dev = Device::with_driver(Box::new(Cached::default()))?;
/// let mut client = dev.client();
/// client.write_at(&[0; 512], 0)?;
/// client.submit_and_wait(Bio::flush())?;
/// client.write_at(&[0; 512], 512)?;
/// assert_eq!(dev.power().unwrap().cut()?, 1, "the write after the flush is lost");
/// # Ok::<(), mqblk::Error>(())
/// ```
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
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Mutex;
/// use mqblk::driver::{Capabilities, Driver, FixedBuffers, Hctx, QueueRqResult, Rq};
/// use mqblk::{Bio, Device, Error, FixedBufs, QueueLimits, Status, TagSetConfig};
///
/// /// Tells the I/O whose buffer lies in its registered pool (io_uring would
/// /// use READ_FIXED / WRITE_FIXED for it).
/// #[derive(Default)]
/// struct Pinned {
///     pool: Mutex<Option<FixedBufs>>,
///     fixed_ios: AtomicU64,
/// }
///
/// impl Driver for Pinned {
///     fn name(&self) -> &str { "pinned" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 4096) }
///     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
///         let data = rq.data();
///         let pool = self.pool.lock().unwrap();
///         if pool.as_ref().is_some_and(|p| p.contains(data.as_ptr() as usize, data.len())) {
///             self.fixed_ios.fetch_add(1, Ordering::Relaxed);
///         }
///         drop(pool);
///         rq.complete(Status::Ok);
///         QueueRqResult::Queued
///     }
///     fn capabilities(&self) -> Capabilities<'_> {
///         Capabilities::none().fixed_buffers(self)
///     }
/// }
///
/// impl FixedBuffers for Pinned {
///     fn register_buffers(&self, bufs: &FixedBufs) -> Result<(), Error> {
///         let mut pool = self.pool.lock().unwrap();
///         if pool.is_some() {
///             return Err(Error::Busy("pinned: a pool is registered already".into()));
///         }
///         *pool = Some(bufs.clone()); // keeps the region mapped while we hold it
///         Ok(())
///     }
/// }
///
/// let dev = Device::with_driver(Box::new(Pinned::default()))?;
/// let pool = FixedBufs::new(4, 4096);
/// dev.fixed_buffers().unwrap().register(&pool)?;
/// let buf = pool.take(4096).unwrap();
/// dev.client().submit_and_wait(Bio::write(0, buf))?;
/// # Ok::<(), mqblk::Error>(())
/// ```
pub trait FixedBuffers: Send + Sync {
    /// Registers `bufs` for I/O that lands in it. The driver keeps a clone
    /// (which keeps the region mapped) as long as it may use it. An error
    /// if a pool is registered already or the kernel refuses.
    fn register_buffers(&self, bufs: &FixedBufs) -> Result<(), Error>;
}

/// The capabilities a driver offers: each one a trait object on the driver
/// itself, or None. Built with the setters:
/// `Capabilities::none().zones(self).attributes(self)`; each capability
/// trait's example offers one.
///
/// ```
/// use mqblk::driver::{Attributes, Capabilities, Driver, Hctx, QueueRqResult, Rq};
/// use mqblk::{Device, Error, QueueLimits, Status, TagSetConfig};
///
/// /// One attribute, `model`, which cannot be changed.
/// struct Labelled;
///
/// impl Driver for Labelled {
///     fn name(&self) -> &str { "labelled" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
///     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
///         rq.complete(Status::Ok);
///         QueueRqResult::Queued
///     }
///     fn capabilities(&self) -> Capabilities<'_> {
///         Capabilities::none().attributes(self)
///     }
/// }
///
/// impl Attributes for Labelled {
///     fn set_attr(&self, key: &str, _value: &str) -> Result<(), Error> {
///         Err(Error::Setup(format!("labelled: '{key}' is read-only")))
///     }
///     fn attr(&self, key: &str) -> Result<String, Error> {
///         match key {
///             "model" => Ok("labelled 1.0".into()),
///             _ => Err(Error::Setup(format!("labelled: no attribute '{key}'"))),
///         }
///     }
/// }
///
/// let caps = Labelled.capabilities();
/// assert!(caps.attributes.is_some() && caps.zones.is_none());
/// assert_eq!(
///     format!("{:?}", Capabilities::none()),
///     "Capabilities { zones: false, direct_access: false, block_status: false, \
///      attributes: false, power: false, fixed_buffers: false, backing_file: false }"
/// );
///
/// // The device hands out a handle per capability the driver offers.
/// let dev = Device::with_driver(Box::new(Labelled))?;
/// assert_eq!(dev.attributes().unwrap().get("model")?, "labelled 1.0");
/// assert!(dev.zones().is_none() && dev.power().is_none() && dev.direct_access().is_none());
/// assert!(dev.block_status().is_none() && dev.fixed_buffers().is_none());
/// # Ok::<(), mqblk::Error>(())
/// ```
#[derive(Clone, Copy, Default)]
#[non_exhaustive]
pub struct Capabilities<'a> {
    pub zones: Option<&'a dyn Zoned>,
    pub direct_access: Option<&'a dyn DirectAccess>,
    pub block_status: Option<&'a dyn BlockStatus>,
    pub attributes: Option<&'a dyn Attributes>,
    pub power: Option<&'a dyn PowerControl>,
    pub fixed_buffers: Option<&'a dyn FixedBuffers>,
    pub backing_file: Option<&'a dyn super::BackingFile>,
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

    /// Offers its backing file (driver/backing.rs).
    pub fn backing_file(mut self, backing_file: &'a dyn super::BackingFile) -> Self {
        self.backing_file = Some(backing_file);
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
            .field("backing_file", &self.backing_file.is_some())
            .finish()
    }
}
