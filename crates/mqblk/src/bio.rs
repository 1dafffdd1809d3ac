//! What a client submits: a [`Bio`] (an operation, flags, a byte range and,
//! for data ops, its segments: one owned [`Buf`] or a vector of them, a
//! [`BioVec`]), its [`Op`] and [`ReqFlags`], and its I/O priority.
//!
//! Relies on: buf/ (`Buf`, `BioVec`), zoned.rs (zone management ops).

use std::fmt;

use crate::buf::{BioVec, Buf};

/// Sector size of the block layer's addressing, as in the kernel: request
/// positions and lengths ([`Rq::sector`](crate::driver::Rq::sector),
/// [`QueueLimits::max_sectors`](crate::QueueLimits::max_sectors)) count
/// 512-byte sectors, whatever the device's block size.
///
/// ```
/// use mqblk::{SECTOR_SHIFT, SECTOR_SIZE};
///
/// let offset_bytes = 1 << 20;
/// assert_eq!(offset_bytes / SECTOR_SIZE, 2048);
/// assert_eq!(offset_bytes >> SECTOR_SHIFT, 2048);
/// ```
pub const SECTOR_SIZE: u64 = 512;
/// `log2(SECTOR_SIZE)`: bytes to sectors is `>> SECTOR_SHIFT`.
pub const SECTOR_SHIFT: u32 = 9;

/// Request operation (`REQ_OP_*`).
///
/// ```
/// use mqblk::Op;
///
/// assert!(Op::Read.has_data() && !Op::Read.is_write());
/// assert!(Op::Discard.is_write() && !Op::Discard.has_data());
/// assert!(Op::ZoneFinish.is_zone_mgmt());
/// assert_eq!(Op::WriteZeroes.name(), "WRITE_ZEROES");
/// // `Op::ALL` is in `Op as usize` order, for per-op tables.
/// assert!(Op::ALL.iter().enumerate().all(|(i, op)| *op as usize == i));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    Read,
    Write,
    Flush,
    Discard,
    WriteZeroes,
    /// Write at a zone's write pointer, wherever it is; the completion
    /// says where the data went (`Completion::append_sector`).
    ZoneAppend,
    /// Zone management: the bio's offset is the zone's start.
    ZoneReset,
    /// Reset every sequential zone (offset 0, length 0).
    ZoneResetAll,
    ZoneOpen,
    ZoneClose,
    ZoneFinish,
}

/// Number of ops (for per-op tables).
pub(crate) const NR_OPS: usize = 11;

impl Op {
    /// Every op, in `Op as usize` order.
    pub const ALL: [Op; NR_OPS] = [
        Op::Read,
        Op::Write,
        Op::Flush,
        Op::Discard,
        Op::WriteZeroes,
        Op::ZoneAppend,
        Op::ZoneReset,
        Op::ZoneResetAll,
        Op::ZoneOpen,
        Op::ZoneClose,
        Op::ZoneFinish,
    ];

    /// Does the op move data through a buffer?
    pub fn has_data(self) -> bool {
        matches!(self, Op::Read | Op::Write | Op::ZoneAppend)
    }

    /// A zone management op (no data, addresses a whole zone).
    pub fn is_zone_mgmt(self) -> bool {
        matches!(self, Op::ZoneReset | Op::ZoneResetAll | Op::ZoneOpen | Op::ZoneClose | Op::ZoneFinish)
    }

    /// Does the op change the device's contents?
    pub fn is_write(self) -> bool {
        !matches!(self, Op::Read)
    }

    /// The kernel's name for it (`REQ_OP_*` without the prefix).
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "READ",
            Op::Write => "WRITE",
            Op::Flush => "FLUSH",
            Op::Discard => "DISCARD",
            Op::WriteZeroes => "WRITE_ZEROES",
            Op::ZoneAppend => "ZONE_APPEND",
            Op::ZoneReset => "ZONE_RESET",
            Op::ZoneResetAll => "ZONE_RESET_ALL",
            Op::ZoneOpen => "ZONE_OPEN",
            Op::ZoneClose => "ZONE_CLOSE",
            Op::ZoneFinish => "ZONE_FINISH",
        }
    }
}

/// Request flags (`REQ_*`): a small bit set.
///
/// ```
/// use mqblk::{Bio, Buf, ReqFlags};
///
/// let mut flags = ReqFlags::SYNC | ReqFlags::FUA;
/// assert!(flags.contains(ReqFlags::FUA));
/// assert!(!flags.contains(ReqFlags::HIPRI));
/// flags |= ReqFlags::NOWAIT;
/// assert_eq!(flags, ReqFlags::SYNC.union(ReqFlags::FUA).union(ReqFlags::NOWAIT));
/// assert_eq!(format!("{flags:?}"), "SYNC|FUA|NOWAIT");
/// assert_eq!((ReqFlags::NONE.bits(), ReqFlags::SYNC.bits()), (0, 1));
///
/// // A bio takes them with `with_flags`.
/// let bio = Bio::write(0, Buf::new(512)).with_flags(ReqFlags::FUA);
/// assert!(bio.flags.contains(ReqFlags::FUA));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ReqFlags(u8);

impl ReqFlags {
    /// No flag.
    pub const NONE: ReqFlags = ReqFlags(0);
    /// Someone waits for this I/O (REQ_SYNC).
    pub const SYNC: ReqFlags = ReqFlags(1 << 0);
    /// Forced unit access: on stable media when it completes (REQ_FUA).
    pub const FUA: ReqFlags = ReqFlags(1 << 1);
    /// Complete by polling (REQ_POLLED, formerly REQ_HIPRI).
    pub const HIPRI: ReqFlags = ReqFlags(1 << 2);
    /// Background I/O, e.g. writeback (REQ_BACKGROUND).
    pub const BACKGROUND: ReqFlags = ReqFlags(1 << 3);
    /// Fail with `Again` instead of sleeping for a tag (REQ_NOWAIT).
    pub const NOWAIT: ReqFlags = ReqFlags(1 << 4);
    /// A write zeroes that must not deallocate what it zeroes
    /// (REQ_NOUNMAP): the range stays provisioned (a file keeps its
    /// blocks, a memory store its pages). Without it a write zeroes may
    /// free the range, as a discard does.
    pub const NOUNMAP: ReqFlags = ReqFlags(1 << 5);
    /// The data is a kernel buffer ([`KernelBuf`](crate::KernelBuf)),
    /// which the block layer cannot look into: never merged (as the
    /// kernel's REQ_NOMERGE). Set by `Bio::read_kernel` and
    /// `Bio::write_kernel`; submission refuses a kernel buffer without it.
    pub const KERNEL_BUF: ReqFlags = ReqFlags(1 << 6);

    /// Are all of `other`'s flags set?
    pub const fn contains(self, other: ReqFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The flags of both (as `|`, in a `const` context).
    pub const fn union(self, other: ReqFlags) -> ReqFlags {
        ReqFlags(self.0 | other.0)
    }

    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }
}

impl std::ops::BitOr for ReqFlags {
    type Output = ReqFlags;
    fn bitor(self, rhs: ReqFlags) -> ReqFlags {
        self.union(rhs)
    }
}

impl std::ops::BitOrAssign for ReqFlags {
    fn bitor_assign(&mut self, rhs: ReqFlags) {
        *self = self.union(rhs);
    }
}

impl fmt::Debug for ReqFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (ReqFlags::SYNC, "SYNC"),
            (ReqFlags::FUA, "FUA"),
            (ReqFlags::HIPRI, "HIPRI"),
            (ReqFlags::BACKGROUND, "BACKGROUND"),
            (ReqFlags::NOWAIT, "NOWAIT"),
            (ReqFlags::NOUNMAP, "NOUNMAP"),
            (ReqFlags::KERNEL_BUF, "KERNEL_BUF"),
        ];
        let set: Vec<&str> = names.iter().filter(|(fl, _)| self.contains(*fl)).map(|(_, n)| *n).collect();
        write!(f, "{}", if set.is_empty() { "NONE".to_string() } else { set.join("|") })
    }
}

/// I/O priority class (`IOPRIO_CLASS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
#[repr(u8)]
pub enum IoPrioClass {
    /// Real time: served before everything else.
    Rt = 1,
    /// Best effort: the default.
    #[default]
    Be = 2,
    /// Only when nothing else wants the disk.
    Idle = 3,
}

/// An I/O priority (`ioprio`): a class and a level, 0 (highest) to 7. The
/// default is what the kernel derives for a task that set none: best
/// effort, level 4. Schedulers that use it (bfq, mq-deadline) read it
/// from each request.
///
/// ```
/// use mqblk::{Bio, Buf, IoPrio, IoPrioClass};
///
/// assert_eq!(IoPrio::default(), IoPrio::new(IoPrioClass::Be, 4));
/// let urgent = IoPrio::new(IoPrioClass::Rt, 0);
/// assert!(urgent.class < IoPrioClass::Be, "real time sorts first");
/// let bio = Bio::read(0, Buf::new(4096)).with_ioprio(urgent);
/// assert_eq!(bio.ioprio.class, IoPrioClass::Rt);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IoPrio {
    pub class: IoPrioClass,
    pub level: u8,
}

impl Default for IoPrio {
    fn default() -> Self {
        Self { class: IoPrioClass::Be, level: 4 }
    }
}

impl IoPrio {
    /// A priority of `class` at `level`; panics unless `level` is 0 to 7.
    pub fn new(class: IoPrioClass, level: u8) -> Self {
        assert!(level < 8, "ioprio level {level} (accepted: 0..=7)");
        Self { class, level }
    }
}

/// Is an I/O of this op and flags synchronous (someone waits for it)? As
/// the kernel's `op_is_sync`: reads always, flushes always, writes only
/// with SYNC (or FUA).
///
/// ```
/// use mqblk::driver::op_is_sync;
/// use mqblk::{Op, ReqFlags};
///
/// assert!(op_is_sync(Op::Read, ReqFlags::NONE));
/// assert!(!op_is_sync(Op::Write, ReqFlags::NONE), "writeback is async");
/// assert!(op_is_sync(Op::Write, ReqFlags::FUA));
/// ```
#[inline(always)]
pub fn op_is_sync(op: Op, flags: ReqFlags) -> bool {
    matches!(op, Op::Read | Op::Flush) || flags.contains(ReqFlags::SYNC) || flags.contains(ReqFlags::FUA)
}

/// One I/O as a client submits it: the user-space `bio`. Offsets and
/// lengths are in bytes, multiples of the device's logical block size;
/// reads and writes carry their data segments ([`BioVec`]: one buffer, or
/// a vector of them, each a whole number of logical blocks), which come
/// back in the [`Completion`](crate::Completion).
///
/// ```
/// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
/// # ram::register();
/// use mqblk::{Bio, Buf, Device, Op, ReqFlags};
///
/// let dev = Device::open("ram:size=64,irqmode=0,memory_backed=1,discard=1")?;
/// let mut client = dev.client();
/// let bios = [
///     Bio::write(0, Buf::from_slice(&[1; 8192])).with_flags(ReqFlags::FUA),
///     Bio::read(0, Buf::new(4096)),
///     Bio::discard(4096, 4096),
///     Bio::write_zeroes(1 << 20, 1 << 20),
///     Bio::flush(),
/// ];
/// for bio in bios {
///     let done = client.submit_and_wait_completion(bio)?;
///     assert!(done.status.is_ok());
/// }
/// // Nothing is submitted until a client takes a bio: it is plain data.
/// let read = Bio::read(8192, Buf::new(512));
/// assert_eq!((read.op, read.offset, read.len, read.segs.nr_segs()), (Op::Read, 8192, 512, 1));
/// # Ok::<(), mqblk::Error>(())
/// ```
#[derive(Debug)]
pub struct Bio {
    pub op: Op,
    pub flags: ReqFlags,
    /// Byte offset on the device (a multiple of the logical block size).
    pub offset: u64,
    /// Length in bytes (for reads and writes, the segments' total).
    pub len: u64,
    /// The data segments of reads and writes; returned in the completion.
    pub segs: BioVec,
    /// Priority, for schedulers that use it (bfq, mq-deadline).
    pub ioprio: IoPrio,
}

impl Bio {
    /// A bio of `op` over `segs` at `offset`, its length theirs.
    #[inline(always)]
    fn with_segs(op: Op, offset: u64, segs: BioVec) -> Self {
        let len = segs.len_bytes();
        Self { op, flags: ReqFlags::NONE, offset, len, segs, ioprio: IoPrio::default() }
    }

    /// A bio of `op` over one buffer (its length known without a look at
    /// the segments' kind: the hot path's constructors).
    #[inline(always)]
    fn with_buf(op: Op, offset: u64, buf: Buf) -> Self {
        let len = buf.len() as u64;
        Self { op, flags: ReqFlags::NONE, offset, len, segs: BioVec::from(buf), ioprio: IoPrio::default() }
    }

    /// Read `buf.len()` bytes at `offset` into `buf`.
    #[inline(always)]
    pub fn read(offset: u64, buf: Buf) -> Self {
        Self::with_buf(Op::Read, offset, buf)
    }

    /// Write `buf` at `offset`.
    #[inline(always)]
    pub fn write(offset: u64, buf: Buf) -> Self {
        Self::with_buf(Op::Write, offset, buf)
    }

    /// Read at `offset` into each segment in turn (the kernel's readv, one
    /// bio of many `bio_vec`s): `segs` is a `Vec<Buf>` (or a [`BioVec`]),
    /// each a whole number of logical blocks, at most
    /// [`BIO_MAX_VECS`](crate::BIO_MAX_VECS) of them. The completion gives
    /// the same vector back (its capacity too), so a loop that reuses it
    /// allocates nothing per I/O. The device sees one request (or several,
    /// where the queue's limits split it); its driver sees the segments.
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use mqblk::{Bio, Buf, Device};
    ///
    /// let dev = Device::open("ram:size=64,irqmode=0,memory_backed=1")?;
    /// let mut client = dev.client();
    /// // Gather three buffers into one write of 12 KiB at 64 KiB...
    /// let segs: Vec<Buf> = (1..=3u8).map(|i| Buf::from_slice(&[i; 4096])).collect();
    /// let done = client.submit_and_wait_completion(Bio::writev(64 << 10, segs))?;
    /// assert!(done.status.is_ok());
    ///
    /// // ... and scatter it back into two, reusing the write's vector.
    /// let mut segs = done.segs.into_vec();
    /// segs.clear();
    /// segs.push(Buf::new(8192));
    /// segs.push(Buf::new(4096));
    /// let read = client.submit_and_wait_completion(Bio::readv(64 << 10, segs))?;
    /// let back = read.segs.into_vec();
    /// assert_eq!((back[0][0], back[0][4096], back[1][0]), (1, 2, 3));
    /// # Ok::<(), mqblk::Error>(())
    /// ```
    pub fn readv(offset: u64, segs: impl Into<BioVec>) -> Self {
        Self::with_segs(Op::Read, offset, segs.into())
    }

    /// Write each segment in turn at `offset` (the kernel's writev; see
    /// [`Bio::readv`] for the rules and an example).
    pub fn writev(offset: u64, segs: impl Into<BioVec>) -> Self {
        Self::with_segs(Op::Write, offset, segs.into())
    }

    /// Read `len` bytes at `offset` into a kernel buffer (a ublk
    /// request's pages): for devices whose driver takes kernel buffers
    /// (`QueueLimits::kernel_buffers`), as one request, never merged or
    /// split. Example: [`KernelBuf`](crate::KernelBuf).
    pub fn read_kernel(offset: u64, kbuf: crate::KernelBuf, len: usize) -> Self {
        Self::with_segs(Op::Read, offset, BioVec::kernel(kbuf, len)).with_flags(ReqFlags::KERNEL_BUF)
    }

    /// Write `len` bytes of a kernel buffer at `offset` (as `read_kernel`).
    pub fn write_kernel(offset: u64, kbuf: crate::KernelBuf, len: usize) -> Self {
        Self::with_segs(Op::Write, offset, BioVec::kernel(kbuf, len)).with_flags(ReqFlags::KERNEL_BUF)
    }

    /// Flush the device's volatile cache.
    pub fn flush() -> Self {
        Self::no_data(Op::Flush, 0, 0)
    }

    /// A bio of `op` without data.
    fn no_data(op: Op, offset: u64, len: u64) -> Self {
        Self { op, flags: ReqFlags::NONE, offset, len, segs: BioVec::new(), ioprio: IoPrio::default() }
    }

    /// Discard (trim) `len` bytes at `offset`.
    pub fn discard(offset: u64, len: u64) -> Self {
        Self::no_data(Op::Discard, offset, len)
    }

    /// Write zeroes over `len` bytes at `offset`; the driver may
    /// deallocate the range unless the bio carries `ReqFlags::NOUNMAP`.
    pub fn write_zeroes(offset: u64, len: u64) -> Self {
        Self::no_data(Op::WriteZeroes, offset, len)
    }

    /// Zone append of `buf` to the zone starting at byte `zone_offset`: the
    /// device writes it at the zone's write pointer and the completion's
    /// `append_offset` says where. For zoned devices only (the example of
    /// [`driver::Zoned`](crate::driver::Zoned) has a whole device).
    ///
    /// ```
    /// use mqblk::{Bio, Buf, Op};
    ///
    /// let bio = Bio::zone_append(256 << 20, Buf::new(4096));
    /// assert_eq!((bio.op, bio.offset, bio.len), (Op::ZoneAppend, 256 << 20, 4096));
    /// ```
    pub fn zone_append(zone_offset: u64, buf: Buf) -> Self {
        Self::with_buf(Op::ZoneAppend, zone_offset, buf)
    }

    /// A zone management op on the zone starting at byte `zone_offset`
    /// (synchronous, as the kernel's zone ioctls are).
    ///
    /// ```
    /// use mqblk::zoned::ZoneMgmt;
    /// use mqblk::{Bio, Op, ReqFlags};
    ///
    /// let finish = Bio::zone_mgmt(ZoneMgmt::Finish, 1 << 30);
    /// assert_eq!((finish.op, finish.offset, finish.len), (Op::ZoneFinish, 1 << 30, 0));
    /// assert!(finish.flags.contains(ReqFlags::SYNC));
    /// assert_eq!(Bio::zone_reset_all().op, Op::ZoneResetAll);
    /// ```
    pub fn zone_mgmt(mgmt: crate::zoned::ZoneMgmt, zone_offset: u64) -> Self {
        use crate::zoned::ZoneMgmt;
        let op = match mgmt {
            ZoneMgmt::Reset => Op::ZoneReset,
            ZoneMgmt::Open => Op::ZoneOpen,
            ZoneMgmt::Close => Op::ZoneClose,
            ZoneMgmt::Finish => Op::ZoneFinish,
        };
        Self::no_data(op, zone_offset, 0).with_flags(ReqFlags::SYNC)
    }

    /// Reset every sequential zone of the device.
    pub fn zone_reset_all() -> Self {
        Self::no_data(Op::ZoneResetAll, 0, 0).with_flags(ReqFlags::SYNC)
    }

    /// Adds `flags` to the bio's (see [`ReqFlags`] for an example).
    pub fn with_flags(mut self, flags: ReqFlags) -> Self {
        self.flags |= flags;
        self
    }

    /// Sets the bio's priority (see [`IoPrio`] for an example).
    pub fn with_ioprio(mut self, ioprio: IoPrio) -> Self {
        self.ioprio = ioprio;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_compose() {
        let f = ReqFlags::SYNC | ReqFlags::FUA;
        assert!(f.contains(ReqFlags::SYNC));
        assert!(!f.contains(ReqFlags::HIPRI));
        assert_eq!(format!("{f:?}"), "SYNC|FUA");
    }
}
