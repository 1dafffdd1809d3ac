//! `Rq`: the driver's handle on one in-flight request, a move-only token
//! (`struct request *` as blk_mq_ops sees it). It gives the driver the
//! request's fields, its data segment by segment (its own bio's buffer or
//! view, then the bios merged in, in device order) and ends it with
//! [`Rq::complete`]; dropping it completes the request with `IoErr`, so a
//! driver cannot leak a tag.
//!
//! Relies on: the request slot (mod.rs), which the token owns exclusively
//! while it lives; completion.rs for the merged bios' slots; hctx/ for
//! `end_request`.

use std::fmt;
use std::ptr::NonNull;

use crate::sync::Ordering;

use super::segs::{self, Segments, SegmentsMut};
use super::{op_is_sync, IoPrio, Op, ReqFlags, Request, RequestSlot, SECTOR_SHIFT};

/// The driver's handle on one in-flight request: a move-only token. Hand it
/// back with [`Rq::complete`]; dropping it completes the request with
/// [`Status::IoErr`](crate::Status::IoErr). Positions are in 512-byte
/// sectors ([`Rq::sector`]) or bytes ([`Rq::pos_bytes`]).
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq};
/// use mqblk::{Bio, Buf, Device, IoPrio, IoPrioClass, Op, QueueLimits, ReqFlags, Status, TagSetConfig};
///
/// /// What the driver saw of a request.
/// struct Seen {
///     op: Op,
///     sector: u64,
///     nr_sectors: u32,
///     pos_bytes: u64,
///     len_bytes: u64,
///     flags: ReqFlags,
///     sync: bool,
///     ioprio: IoPrio,
///     client_id: u32,
/// }
///
/// struct Recorder(Arc<Mutex<Vec<Seen>>>);
///
/// impl Driver for Recorder {
///     fn name(&self) -> &str { "recorder" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
///     fn queue_rq(&self, hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
///         assert_eq!(rq.hctx_index(), hctx.index());
///         assert!(rq.tag() < hctx.queue_depth(), "a driver tag indexes per-queue state");
///         assert_eq!(rq.sched_tag(), rq.tag(), "without a scheduler, one tag");
///         assert_eq!((rq.nr_segments(), rq.sched_time_ns()), (1, 0));
///         *rq.driver_data() = 0xd0; // a word of the driver's own
///         let seen = Seen {
///             op: rq.op(),
///             sector: rq.sector(),
///             nr_sectors: rq.nr_sectors(),
///             pos_bytes: rq.pos_bytes(),
///             len_bytes: rq.len_bytes(),
///             flags: rq.flags(),
///             sync: rq.is_sync(),
///             ioprio: rq.ioprio(),
///             client_id: rq.client_id(),
///         };
///         self.0.lock().unwrap().push(seen);
///         rq.complete(Status::Ok);
///         QueueRqResult::Queued
///     }
/// }
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let dev = Device::with_driver(Box::new(Recorder(seen.clone())))?;
/// let mut client = dev.client();
/// client.submit_and_wait(Bio::write(4096, Buf::new(8192)).with_flags(ReqFlags::FUA))?;
/// let urgent = IoPrio::new(IoPrioClass::Rt, 0);
/// client.submit_and_wait(Bio::read(0, Buf::new(512)).with_ioprio(urgent))?;
///
/// let seen = seen.lock().unwrap();
/// let (write, read) = (&seen[0], &seen[1]);
/// assert_eq!((write.op, write.sector, write.nr_sectors), (Op::Write, 8, 16));
/// assert_eq!((write.pos_bytes, write.len_bytes), (4096, 8192));
/// assert_eq!((write.flags, write.sync, write.ioprio), (ReqFlags::FUA, true, IoPrio::default()));
/// assert_eq!((read.op, read.sector, read.ioprio), (Op::Read, 0, urgent));
/// assert_eq!(write.client_id, read.client_id, "one client");
/// # Ok::<(), mqblk::Error>(())
/// ```
pub struct Rq {
    ptr: NonNull<RequestSlot>,
}

// SAFETY: an `Rq` is the unique owner of its request slot while it exists
// (the held tag guarantees no one else touches the slot), and everything in
// the slot is `Send`. Moving the token to a completion thread is the point.
unsafe impl Send for Rq {}

impl Rq {
    /// # Safety
    /// The caller holds the tag of `ptr`'s slot, has initialised it, and
    /// gives up all access to it to this token.
    pub(crate) unsafe fn from_raw(ptr: NonNull<RequestSlot>) -> Self {
        Self { ptr }
    }

    #[inline(always)]
    pub(crate) fn rq(&self) -> &Request {
        // SAFETY: the token owns the slot's request exclusively (see the
        // type's Send impl); the slot lives as long as the queue.
        unsafe { &*self.ptr.as_ref().rq.get() }
    }

    /// The request's slot (its atomics).
    #[inline(always)]
    pub(crate) fn slot(&self) -> &RequestSlot {
        // SAFETY: slots live as long as the queue.
        unsafe { self.ptr.as_ref() }
    }

    #[inline(always)]
    pub(crate) fn rq_mut(&mut self) -> &mut Request {
        // SAFETY: as in `rq`, and `&mut self` makes the access exclusive.
        unsafe { &mut *self.ptr.as_ref().rq.get() }
    }

    /// The request's driver tag (unique among the requests the driver
    /// holds on this hardware queue). Not the slot's `tag` field, which is
    /// the scheduler tag when there is a scheduler.
    pub fn tag(&self) -> u32 {
        self.slot().driver_tag.load(Ordering::Relaxed)
    }

    /// Sets the driver tag taken for a scheduler's request at dispatch.
    #[inline(always)]
    pub(crate) fn set_driver_tag(&mut self, tag: u32) {
        self.slot().driver_tag.store(tag, Ordering::Relaxed);
    }

    /// The request's slot tag: the scheduler tag when the queue has a
    /// scheduler (what a scheduler indexes its per-request state with),
    /// else the same as [`Rq::tag`].
    pub fn sched_tag(&self) -> u32 {
        self.rq().tag
    }

    /// The submitting client, for schedulers that serve clients in
    /// proportion (bfq): the same for every request of one [`Client`](crate::Client).
    pub fn client_id(&self) -> u32 {
        self.rq().client_id
    }

    /// The bio's I/O priority.
    pub fn ioprio(&self) -> IoPrio {
        self.rq().ioprio
    }

    /// See [`op_is_sync`].
    pub fn is_sync(&self) -> bool {
        op_is_sync(self.rq().op, self.rq().flags)
    }

    /// The scheduler's time stamp of the request (kyber: insertion, ns);
    /// 0 under other schedulers, which cannot set it.
    pub fn sched_time_ns(&self) -> u64 {
        self.rq().sched_time_ns
    }

    /// The operation.
    pub fn op(&self) -> Op {
        self.rq().op
    }

    /// The bio's flags (FUA, SYNC ...).
    pub fn flags(&self) -> ReqFlags {
        self.rq().flags
    }

    /// First sector (512-byte units).
    pub fn sector(&self) -> u64 {
        self.rq().sector
    }

    /// Length in 512-byte sectors.
    pub fn nr_sectors(&self) -> u32 {
        self.rq().nr_sectors
    }

    /// First byte on the device (`sector() * 512`).
    pub fn pos_bytes(&self) -> u64 {
        self.rq().sector << SECTOR_SHIFT
    }

    /// Length in bytes (`nr_sectors() * 512`).
    pub fn len_bytes(&self) -> u64 {
        u64::from(self.rq().nr_sectors) << SECTOR_SHIFT
    }

    /// Index of the hardware queue the request was dispatched to.
    pub fn hctx_index(&self) -> usize {
        self.rq().hctx_index as usize
    }

    /// Bios the request carries: 1 unless bios were merged into it.
    pub fn nr_bios(&self) -> u32 {
        self.rq().nr_bios
    }

    /// Data segments the request carries (its bios' `Buf`s, or the parts
    /// of them a split piece views), as [`Rq::segments`] yields them: 0
    /// for ops without data.
    pub fn nr_segments(&self) -> u32 {
        // SAFETY: the token owns the request (see the type's Send impl).
        unsafe { segs::count(self.rq()) }
    }

    /// Physical segments (`blk_rq_nr_phys_segments`): what
    /// [`Rq::for_each_phys_segment`] maps at most, never more than the
    /// queue's `max_segments`.
    pub fn nr_phys_segments(&self) -> u32 {
        // SAFETY: as in `nr_segments`.
        unsafe { segs::phys(self.rq()) }.nr
    }

    /// The request's segments in device order, each with its position on
    /// the device in bytes (`rq_for_each_segment`). Reads fill them with
    /// [`Rq::segments_mut`].
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq};
    /// use mqblk::{Bio, Buf, Device, Op, QueueLimits, Status, TagSetConfig};
    ///
    /// /// Records each write's segments: (device position, length).
    /// struct Seen(Arc<Mutex<Vec<(u64, usize)>>>);
    ///
    /// impl Driver for Seen {
    ///     fn name(&self) -> &str { "seen" }
    ///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
    ///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
    ///     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
    ///         if rq.op() == Op::Write {
    ///             self.0.lock().unwrap().extend(rq.segments().map(|(pos, data)| (pos, data.len())));
    ///         }
    ///         rq.complete(Status::Ok);
    ///         QueueRqResult::Queued
    ///     }
    /// }
    ///
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let dev = Device::with_driver(Box::new(Seen(seen.clone())))?;
    /// let segs = vec![Buf::new(4096), Buf::new(512), Buf::new(1024)];
    /// dev.client().submit_and_wait(Bio::writev(8192, segs))?;
    /// assert_eq!(*seen.lock().unwrap(), [(8192, 4096), (12288, 512), (12800, 1024)]);
    /// # Ok::<(), mqblk::Error>(())
    /// ```
    pub fn segments(&self) -> Segments<'_> {
        // SAFETY: the token owns the request; `&self` admits readers only.
        unsafe { Segments::new(self.rq()) }
    }

    /// The request's segments to fill (reads), in device order, each with
    /// its position on the device (example: [`Rq::segments`]).
    pub fn segments_mut(&mut self) -> SegmentsMut<'_> {
        // SAFETY: the token owns the request, exclusively for the borrow.
        unsafe { SegmentsMut::new(self.rq()) }
    }

    /// Calls `f(address, length)` for each physical segment, in device
    /// order (`blk_rq_map_sg`): contiguous segments coalesce into one,
    /// none longer than the queue's `max_segment_size` or crossing its
    /// `seg_boundary_mask`; at most [`Rq::nr_phys_segments`] of them. For
    /// a driver that hands the memory on by address (an iovec array, a
    /// descriptor list): it may read the bytes (writes) or fill them
    /// (reads) until it completes the request.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq};
    /// use mqblk::{Bio, Buf, Device, QueueLimits, Status, TagSetConfig};
    ///
    /// /// Records the length of each physical segment it is given.
    /// struct Mapper(Arc<Mutex<Vec<usize>>>);
    ///
    /// impl Driver for Mapper {
    ///     fn name(&self) -> &str { "mapper" }
    ///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
    ///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) } // 64 KiB segments at most
    ///     fn queue_rq(&self, _hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
    ///         let mut lens = self.0.lock().unwrap();
    ///         rq.for_each_phys_segment(|_addr, len| lens.push(len));
    ///         assert!(lens.len() as u32 <= rq.nr_phys_segments());
    ///         drop(lens);
    ///         rq.complete(Status::Ok);
    ///         QueueRqResult::Queued
    ///     }
    /// }
    ///
    /// let lens = Arc::new(Mutex::new(Vec::new()));
    /// let dev = Device::with_driver(Box::new(Mapper(lens.clone())))?;
    /// // Three 4 KiB segments of one buffer, back to back, then one apart.
    /// let mut memory = vec![0u8; 32 << 10];
    /// let base = memory.as_mut_ptr();
    /// // SAFETY: `memory` outlives the I/O, untouched while it runs.
    /// let segs: Vec<Buf> =
    ///     [0, 4096, 8192, 20480].iter().map(|&at| unsafe { Buf::borrowed(base.add(at), 4096) }).collect();
    /// dev.client().submit_and_wait(Bio::readv(0, segs))?;
    /// assert_eq!(*lens.lock().unwrap(), [12288, 4096]);
    /// # Ok::<(), mqblk::Error>(())
    /// ```
    pub fn for_each_phys_segment(&mut self, f: impl FnMut(*mut u8, usize)) {
        // SAFETY: the token owns the request, exclusively (`&mut self`).
        unsafe { segs::for_each_phys(self.rq(), f) }
    }

    /// The kernel buffer the request's data is in (`Bio::read_kernel`),
    /// if it is one: then it is the request's only segment, never merged
    /// or split, and its physical segment's "address" is the offset into
    /// the buffer (0). Only drivers that set `QueueLimits::kernel_buffers`
    /// are given such requests; `Rq::segments` and `Rq::data` panic on
    /// them (there is no memory to show).
    pub fn kernel_buf(&self) -> Option<crate::KernelBuf> {
        self.rq().segs.kernel_buf()
    }

    /// The data of a write (empty for ops without data). Only for a request
    /// of at most one segment: use [`Rq::segments`] or
    /// [`Rq::for_each_segment`] for any request.
    ///
    /// ```
    /// use std::sync::Mutex;
    /// use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq};
    /// use mqblk::{Device, Op, QueueLimits, Status, TagSetConfig};
    ///
    /// /// 64 KiB of memory. No merges here: every bio is one segment.
    /// struct Mem(Mutex<Vec<u8>>);
    ///
    /// impl Driver for Mem {
    ///     fn name(&self) -> &str { "mem" }
    ///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
    ///     fn limits(&self) -> QueueLimits { QueueLimits::new(64 << 10, 512) }
    ///     fn queue_rq(&self, _hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
    ///         let range = rq.pos_bytes() as usize..(rq.pos_bytes() + rq.len_bytes()) as usize;
    ///         let mut mem = self.0.lock().unwrap();
    ///         match rq.op() {
    ///             Op::Write => mem[range].copy_from_slice(rq.data()),
    ///             Op::Read => rq.data_mut().copy_from_slice(&mem[range]),
    ///             _ => {}
    ///         }
    ///         drop(mem);
    ///         rq.complete(Status::Ok);
    ///         QueueRqResult::Queued
    ///     }
    /// }
    ///
    /// let dev = Device::with_driver(Box::new(Mem(Mutex::new(vec![0; 64 << 10]))))?;
    /// let mut client = dev.client();
    /// client.write_at(b"0123456789abcdef".repeat(32).as_slice(), 512)?;
    /// let mut back = [0; 512];
    /// client.read_at(&mut back, 512)?;
    /// assert_eq!(&back[..16], b"0123456789abcdef");
    /// # Ok::<(), mqblk::Error>(())
    /// ```
    pub fn data(&self) -> &[u8] {
        let mut segs = self.segments();
        let data = segs.next().map_or(&[][..], |(_, data)| data);
        assert!(segs.next().is_none(), "Rq::data on a request of several segments: use segments()");
        data
    }

    /// The buffer a read fills (empty for ops without data). Only for a
    /// request of at most one segment: use [`Rq::segments_mut`] otherwise
    /// (example: [`Rq::data`]).
    pub fn data_mut(&mut self) -> &mut [u8] {
        let mut segs = self.segments_mut();
        let data = segs.next().map_or(&mut [][..], |(_, data)| data);
        assert!(segs.next().is_none(), "Rq::data_mut on a request of several segments: use segments_mut()");
        data
    }

    /// Calls `f(pos_bytes, data)` for each segment, in device order.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq};
    /// use mqblk::{Bio, Buf, Device, Op, QueueLimits, Status, TagSetConfig};
    ///
    /// /// 64 KiB of memory, any request: merged ones carry several bios.
    /// struct Mem(Mutex<Vec<u8>>, Arc<Mutex<Vec<u32>>>);
    ///
    /// impl Driver for Mem {
    ///     fn name(&self) -> &str { "mem" }
    ///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
    ///     fn limits(&self) -> QueueLimits { QueueLimits::new(64 << 10, 512) }
    ///     fn queue_rq(&self, _hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
    ///         self.1.lock().unwrap().push(rq.nr_segments());
    ///         let mut mem = self.0.lock().unwrap();
    ///         match rq.op() {
    ///             Op::Write => rq.for_each_segment(|pos, data| {
    ///                 mem[pos as usize..][..data.len()].copy_from_slice(data);
    ///             }),
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
    /// }
    ///
    /// let segments = Arc::new(Mutex::new(Vec::new()));
    /// let dev = Device::with_driver(Box::new(Mem(Mutex::new(vec![0; 64 << 10]), segments.clone())))?;
    /// let mut client = dev.client();
    /// {
    ///     // Three adjacent writes under a plug: one request of three segments.
    ///     let mut plug = client.plug();
    ///     for i in 0..3u8 {
    ///         plug.submit(Bio::write(u64::from(i) * 512, Buf::from_slice(&[i; 512])), 0).unwrap();
    ///     }
    /// }
    /// client.drain();
    /// let mut back = [9; 1536];
    /// client.read_at(&mut back, 0)?;
    /// assert_eq!((back[0], back[512], back[1024]), (0, 1, 2));
    /// assert_eq!(*segments.lock().unwrap(), [3, 1]);
    /// # Ok::<(), mqblk::Error>(())
    /// ```
    pub fn for_each_segment(&self, mut f: impl FnMut(u64, &[u8])) {
        for (pos, data) in self.segments() {
            f(pos, data);
        }
    }

    /// Calls `f(pos_bytes, buffer)` for each segment, in device order, with
    /// the buffer to fill (reads; example: [`Rq::for_each_segment`]).
    pub fn for_each_segment_mut(&mut self, mut f: impl FnMut(u64, &mut [u8])) {
        for (pos, data) in self.segments_mut() {
            f(pos, data);
        }
    }

    /// A word of per-request driver state (the kernel's PDU, as small as
    /// it gets); 0 when the driver first sees the request (example: [`Rq`]).
    pub fn driver_data(&mut self) -> &mut u64 {
        &mut self.rq_mut().driver_data
    }

    /// Zone append: records where the data went (the zone's write pointer
    /// when the driver wrote it), reported in the completion (example:
    /// [`Zoned`](crate::driver::Zoned)).
    pub fn set_append_sector(&mut self, sector: u64) {
        debug_assert_eq!(self.op(), Op::ZoneAppend);
        self.rq_mut().sector = sector;
    }

    /// Gives up the token without ending the request: the caller takes
    /// over the slot (hctx/end.rs ends it).
    #[inline(always)]
    pub(crate) fn into_raw(self) -> NonNull<RequestSlot> {
        let ptr = self.ptr;
        std::mem::forget(self);
        ptr
    }

    /// The slot this token owns.
    #[inline(always)]
    pub(crate) fn as_raw(&self) -> NonNull<RequestSlot> {
        self.ptr
    }
}

impl fmt::Debug for Rq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rq = self.rq();
        f.debug_struct("Rq")
            .field("tag", &rq.tag)
            .field("op", &rq.op)
            .field("flags", &rq.flags)
            .field("sector", &rq.sector)
            .field("nr_sectors", &rq.nr_sectors)
            .finish()
    }
}
