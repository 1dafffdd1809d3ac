//! The queue limits (`struct queue_limits`): what a device looks like to
//! the block layer (capacity, block sizes, request and segment limits,
//! discard and write zeroes, zones), and the checks every bio passes
//! before it becomes a request.
//!
//! Relies on: bio.rs (Bio, Op), error.rs (SubmitError), segment.rs (the
//! segment limits' rules), zoned.rs.

use crate::bio::{Bio, Op, ReqFlags, SECTOR_SHIFT, SECTOR_SIZE};
use crate::buf::BIO_MAX_VECS;
use crate::error::SubmitError;
use crate::segment::SegLimits;

/// The largest bio, as the kernel's 32-bit `bi_size` allows (larger ones
/// are refused with `SubmitError::TooLarge`; smaller ones larger than a
/// request are split).
pub const MAX_BIO_BYTES: u64 = u32::MAX as u64;

/// The kernel's default cap on a request's size (BLK_DEF_MAX_SECTORS_CAP).
pub const DEFAULT_MAX_SECTORS: u32 = 2560;
/// The kernel's default segment limit (BLK_MAX_SEGMENTS).
pub const DEFAULT_MAX_SEGMENTS: u32 = 128;
/// The kernel's default largest physical segment (BLK_MAX_SEGMENT_SIZE).
pub const DEFAULT_MAX_SEGMENT_SIZE: u32 = 65536;
/// The kernel's default segment boundary (BLK_SEG_BOUNDARY_MASK): no
/// physical segment crosses a 4 GiB line.
pub const DEFAULT_SEG_BOUNDARY_MASK: u64 = 0xffff_ffff;
/// The smallest segment limits a queue may state (the kernel's
/// `blk_validate_limits` refuses less than a page): a physical segment of
/// at least 4 KiB, a boundary window of at least 4 KiB.
pub const MIN_SEGMENT_SIZE: u32 = 4096;

/// What a device looks like to the block layer (`struct queue_limits`). A
/// driver fills it in ([`Driver::limits`](crate::driver::Driver::limits));
/// an application reads it ([`Device::limits`](crate::Device::limits)).
///
/// ```
/// use mqblk::driver::DEFAULT_MAX_SECTORS;
/// use mqblk::{Bio, Buf, Op, QueueLimits, SubmitError};
///
/// let mut limits = QueueLimits::new(1 << 30, 4096); // 1 GiB of 4 KiB blocks
/// assert_eq!((limits.capacity_sectors(), limits.physical_block_size), (2 << 20, 4096));
/// assert_eq!(limits.max_sectors, DEFAULT_MAX_SECTORS);
/// limits.max_sectors = 256; // 128 KiB requests
/// limits.max_discard_sectors = 1 << 16;
/// assert_eq!(limits.max_transfer_bytes(), 128 << 10);
/// assert_eq!(limits.max_request_bytes(Op::Discard), 32 << 20);
/// assert_eq!(limits.bytes_to_zone_end(4096), u64::MAX, "not zoned");
///
/// // The checks every bio passes before it becomes requests.
/// assert_eq!(limits.check_bio(&Bio::write(0, Buf::new(1 << 20))), Ok(()), "split, not refused");
/// let e = limits.check_bio(&Bio::write(512, Buf::new(4096))).unwrap_err();
/// assert!(matches!(e, SubmitError::Misaligned { .. }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueLimits {
    /// Device size in bytes (a multiple of `logical_block_size`).
    pub capacity_bytes: u64,
    /// Smallest addressable unit: 512 or 4096 (`bs`).
    pub logical_block_size: u32,
    /// The unit the device writes without a read-modify-write.
    pub physical_block_size: u32,
    /// Largest request in 512-byte sectors (a multiple of the block size).
    pub max_sectors: u32,
    /// Most physical segments one request may carry (`blk_rq_nr_phys_segments`:
    /// contiguous memory counts once, segment.rs). Merges refuse to pass it,
    /// and a bio with more is split.
    pub max_segments: u32,
    /// Longest physical segment in bytes (at least [`MIN_SEGMENT_SIZE`]):
    /// a longer run of memory counts as several.
    pub max_segment_size: u32,
    /// No physical segment crosses an address multiple of this mask + 1
    /// (`seg_boundary_mask`, a power of two less one, at least 4095;
    /// `u64::MAX`: no boundary).
    pub seg_boundary_mask: u64,
    /// Segments that are not contiguous must meet on this boundary (an
    /// NVMe PRP list's rule: the first ends and the next starts on it), or
    /// there is a gap: a request never holds one, so a bio is split there
    /// and a merge that would make one is refused. 0: none (the default);
    /// else a power of two less one, below 64 KiB, and `max_segment_size`
    /// must be `u32::MAX` (as the kernel's `blk_validate_limits` sets it).
    pub virt_boundary_mask: u64,
    /// Largest discard in sectors; 0: discard not supported.
    pub max_discard_sectors: u32,
    /// Largest write-zeroes in sectors; 0: not supported.
    pub max_write_zeroes_sectors: u32,
    /// The device has a volatile write cache (flush is meaningful).
    pub write_cache: bool,
    /// The device honours FUA.
    pub fua: bool,
    /// Rotational media (seek costs).
    pub rotational: bool,
    /// A zoned device's zone geometry and limits (None: not zoned). Bios
    /// are split at zone boundaries, and zone ops are accepted only then.
    pub zoned: Option<crate::zoned::ZonedLimits>,
    /// The driver takes bios over kernel buffers (`Bio::read_kernel`,
    /// `KernelBuf`: a ublk request's pages, read and written in place); a
    /// feature, as the kernel's `queue_limits.features` holds its
    /// BLK_FEAT_* flags. Without it such bios are refused.
    pub kernel_buffers: bool,
}

impl QueueLimits {
    /// Limits with the kernel's defaults for a device of `capacity_bytes`.
    pub fn new(capacity_bytes: u64, logical_block_size: u32) -> Self {
        Self {
            capacity_bytes,
            logical_block_size,
            physical_block_size: logical_block_size,
            max_sectors: DEFAULT_MAX_SECTORS,
            max_segments: DEFAULT_MAX_SEGMENTS,
            max_segment_size: DEFAULT_MAX_SEGMENT_SIZE,
            seg_boundary_mask: DEFAULT_SEG_BOUNDARY_MASK,
            virt_boundary_mask: 0,
            max_discard_sectors: 0,
            max_write_zeroes_sectors: 0,
            write_cache: false,
            fua: false,
            rotational: false,
            zoned: None,
            kernel_buffers: false,
        }
    }

    /// Capacity in 512-byte sectors.
    pub fn capacity_sectors(&self) -> u64 {
        self.capacity_bytes >> SECTOR_SHIFT
    }

    /// Largest read or write in bytes.
    pub fn max_transfer_bytes(&self) -> u64 {
        u64::from(self.max_sectors) * SECTOR_SIZE
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        let lbs = self.logical_block_size;
        if !lbs.is_power_of_two() || !(512..=65536).contains(&lbs) {
            return Err(format!("logical_block_size={lbs} (accepted: a power of two in 512..=65536)"));
        }
        if self.capacity_bytes == 0 || self.capacity_bytes % u64::from(lbs) != 0 {
            return Err(format!("capacity {} is not a positive multiple of the block size {lbs}", self.capacity_bytes));
        }
        if self.max_sectors == 0 || (u64::from(self.max_sectors) * SECTOR_SIZE) % u64::from(lbs) != 0 {
            return Err(format!("max_sectors={} is not a positive multiple of the block size", self.max_sectors));
        }
        self.validate_segments()?;
        if let Some(z) = &self.zoned {
            if !z.zone_sectors.is_power_of_two() || (z.zone_sectors << SECTOR_SHIFT) % u64::from(lbs) != 0 {
                return Err(format!(
                    "zone size of {} sectors is not a power of two multiple of the block",
                    z.zone_sectors
                ));
            }
        }
        Ok(())
    }

    fn validate_segments(&self) -> Result<(), String> {
        if self.max_segments == 0 {
            return Err("max_segments=0 (at least 1)".into());
        }
        if self.max_segment_size < MIN_SEGMENT_SIZE {
            return Err(format!("max_segment_size={} (at least {MIN_SEGMENT_SIZE})", self.max_segment_size));
        }
        let boundary = self.seg_boundary_mask;
        if boundary < u64::from(MIN_SEGMENT_SIZE) - 1
            || !boundary.wrapping_add(1).is_power_of_two() && boundary != u64::MAX
        {
            return Err(format!("seg_boundary_mask={boundary:#x} (a power of two less one, at least 0xfff)"));
        }
        let virt = self.virt_boundary_mask;
        if virt != 0 && (virt >= 65535 || !(virt + 1).is_power_of_two()) {
            return Err(format!("virt_boundary_mask={virt:#x} (0, or a power of two less one below 0xffff)"));
        }
        if virt != 0 && self.max_segment_size != u32::MAX {
            return Err(format!(
                "virt_boundary_mask={virt:#x} with max_segment_size={} (a virt boundary needs max_segment_size={})",
                self.max_segment_size,
                u32::MAX
            ));
        }
        Ok(())
    }

    /// The segment limits, as segment.rs counts and splits with them.
    pub(crate) fn seg_limits(&self) -> SegLimits {
        let mask = |m: u64| usize::try_from(m).unwrap_or(usize::MAX);
        SegLimits {
            max_segments: self.max_segments,
            max_segment_size: self.max_segment_size as usize,
            seg_boundary_mask: mask(self.seg_boundary_mask),
            virt_boundary_mask: mask(self.virt_boundary_mask),
        }
    }

    /// Do `nr_segs` segments of `len_bytes` in all fit one request's
    /// segment limits wherever they lie in memory? Then nothing needs
    /// their addresses. No gap is possible only without a virt boundary;
    /// and a segment of L bytes counts at most L / max_segment_size + L /
    /// window + 2 physical segments (its boundary windows, each cut into
    /// max_segment_size pieces, the last piece of each partial), one more
    /// for the two divisions' floors: a bound on the sum, as contiguous
    /// segments only ever coalesce.
    #[inline(always)]
    pub(crate) fn segments_fit_anywhere(&self, nr_segs: u64, len_bytes: u64) -> bool {
        let (size, window) = (u64::from(self.max_segment_size), self.seg_boundary_mask.saturating_add(1).max(1));
        // Both divisions are 0 for a bio shorter than either (most): no divide.
        let per_len = if len_bytes < size.min(window) { 0 } else { len_bytes / size + len_bytes / window };
        self.virt_boundary_mask == 0 && per_len + 2 * nr_segs + 2 <= u64::from(self.max_segments)
    }

    /// The most segments that fit one request wherever they lie in a bio
    /// of at most `max_bytes` (`segments_fit_anywhere` of its longest:
    /// fewer segments or fewer bytes fit too, the bound only grows with
    /// either). Worked out once, so that a test per bio is one compare.
    pub(crate) fn segments_fit_anywhere_up_to(&self, max_bytes: u64) -> u64 {
        (0..=BIO_MAX_VECS as u64).rev().find(|&n| self.segments_fit_anywhere(n, max_bytes)).unwrap_or(0)
    }

    /// Can a bio of one buffer split at `max_bytes` (by `max_sectors`
    /// alone) always make pieces within the segment limits? Then the split
    /// path needs no look at addresses (`segments_fit_anywhere` for one
    /// segment of `max_bytes`; one buffer never has a gap).
    pub(crate) fn one_buffer_splits_by_size(&self, max_bytes: u64) -> bool {
        let virt = Self { virt_boundary_mask: 0, ..self.clone() };
        virt.segments_fit_anywhere(1, max_bytes)
    }

    /// Checks a bio against the limits (bounds, alignment, size, support).
    #[inline(always)]
    pub fn check_bio(&self, bio: &Bio) -> Result<(), SubmitError> {
        if self.plain_rw_ok(bio) {
            return Ok(());
        }
        self.check_bio_fully(bio)
    }

    /// The common case in one pass and without a division (the block size
    /// is a power of two, `validate`): a read or write whose buffer has its
    /// length, aligned, inside the device. False sends the bio through the
    /// full checks, which name what is wrong.
    #[inline(always)]
    pub(crate) fn plain_rw_ok(&self, bio: &Bio) -> bool {
        bio.len <= MAX_BIO_BYTES && self.plain_rw_ok_within_max(bio, 0)
    }

    /// `plain_rw_ok` for a bio already known to be at most MAX_BIO_BYTES
    /// long (the plain path's, under `plain_max_bytes`). `fit_segs`: a
    /// checked iovec array of at most this many segments fits a request of
    /// the bio's length wherever they lie (`segments_fit_anywhere_up_to`
    /// of a length at least the bio's; 0 to work it out per bio).
    #[inline(always)]
    pub(crate) fn plain_rw_ok_within_max(&self, bio: &Bio, fit_segs: u64) -> bool {
        let (offset, len) = (bio.offset, bio.len);
        let lbs_mask = u64::from(self.logical_block_size) - 1;
        let end = offset.wrapping_add(len);
        matches!(bio.op, Op::Read | Op::Write)
            && (bio.segs.one_len().is_some_and(|l| l as u64 == len) || self.checked_iovecs_fit(bio, fit_segs))
            && len != 0
            && (offset | len) & lbs_mask == 0
            && end >= offset
            && end <= self.capacity_bytes
    }

    /// An iovec array its caller checked (`BioVec::from_iovecs_checked`)
    /// that fits a request wherever it lies: plain as one buffer is, with
    /// no pass over it (the C library's readv/writev). Up to `fit_segs`
    /// segments, one compare (the bound's own arithmetic, worked out per
    /// bio, cost 19 instructions per readv8, qd1.c's eight iovecs); past it,
    /// the bound.
    #[inline(always)]
    fn checked_iovecs_fit(&self, bio: &Bio, fit_segs: u64) -> bool {
        let nr_segs = bio.segs.nr_segs() as u64;
        bio.segs.iovecs_checked()
            && (nr_segs <= fit_segs || self.segments_fit_anywhere(nr_segs, bio.len))
            && self.checked_vector_bytes(bio) as u64 == bio.len
    }

    #[inline(never)]
    fn check_bio_fully(&self, bio: &Bio) -> Result<(), SubmitError> {
        let (op, offset, len) = (bio.op, bio.offset, bio.len);
        let lbs_mask = u64::from(self.logical_block_size) - 1;
        let supported = match op {
            Op::Read | Op::Write | Op::Flush => true,
            Op::Discard => self.max_discard_sectors > 0,
            Op::WriteZeroes => self.max_write_zeroes_sectors > 0,
            _ => self.zoned.is_some(),
        };
        if !supported {
            return Err(SubmitError::NotSupported { op });
        }
        if let Some(z) = &self.zoned {
            if op.is_zone_mgmt() || op == Op::ZoneAppend {
                return self.check_zone_bio(bio, z);
            }
        }
        if bio.segs.is_kernel() {
            self.check_kernel_bio(bio)?;
        }
        let buf_len = self.check_segments(bio)?;
        if op.has_data() != buf_len.is_some() || (op.has_data() && buf_len != Some(len as usize)) {
            return Err(SubmitError::BadBuffer { op, len, buf_len });
        }
        if op == Op::Flush {
            return if len == 0 { Ok(()) } else { Err(SubmitError::BadBuffer { op, len, buf_len }) };
        }
        if len == 0 {
            return Err(SubmitError::ZeroLength { op });
        }
        if (offset | len) & lbs_mask != 0 {
            return Err(SubmitError::Misaligned { offset, len, logical_block_size: self.logical_block_size });
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.capacity_bytes => {}
            _ => return Err(SubmitError::OutOfRange { offset, len, capacity: self.capacity_bytes }),
        }
        // Larger than a request may be: split (client/submit.rs). A bio itself is
        // limited like the kernel's (bi_size is 32 bits).
        let max = MAX_BIO_BYTES & !lbs_mask;
        if len > max {
            return Err(SubmitError::TooLarge { len, max });
        }
        Ok(())
    }

    /// A bio over a kernel buffer (`KernelBuf`): a read or write, to a
    /// driver that takes them, carrying `KERNEL_BUF` (so nothing merges
    /// it), and small enough to be one request as it is: the block layer
    /// cannot split what it cannot address. (Bounds and alignment follow
    /// in `check_bio_fully`, as for any bio.)
    fn check_kernel_bio(&self, bio: &Bio) -> Result<(), SubmitError> {
        let (op, len) = (bio.op, bio.len);
        let reason = if !self.kernel_buffers {
            "the device's driver does not take kernel buffers"
        } else if !matches!(op, Op::Read | Op::Write) {
            "only reads and writes carry a kernel buffer"
        } else if !bio.flags.contains(ReqFlags::KERNEL_BUF) {
            "a kernel buffer's bio must carry ReqFlags::KERNEL_BUF (Bio::read_kernel and write_kernel set it)"
        } else if len > self.max_transfer_bytes()
            || len > u64::from(self.max_segment_size)
            || len > self.seg_boundary_mask.saturating_add(1)
        {
            "larger than one request may be (max_sectors, max_segment_size, seg_boundary_mask): it cannot be split"
        } else {
            return Ok(());
        };
        Err(SubmitError::KernelBuffer { op, len, reason })
    }

    /// A bio's segments: at most BIO_MAX_VECS, each a positive whole
    /// number of logical blocks (what Linux 6.x direct I/O asks of each
    /// iovec, `iov_iter_is_aligned`, so every split lands on a block). Their
    /// total, or None without any.
    fn check_segments(&self, bio: &Bio) -> Result<Option<usize>, SubmitError> {
        if let Some(len) = bio.segs.one_len() {
            return Ok(Some(len));
        }
        let segs = bio.segs.seg_array();
        if segs.len() == 0 {
            return Ok(None);
        }
        if bio.segs.iovecs_checked() {
            return Ok(Some(self.checked_vector_bytes(bio)));
        }
        self.vector_bytes(segs).map(Some)
    }

    /// The total of an iovec array its caller checked
    /// (`BioVec::from_iovecs_checked`): the bio's length, by that contract
    /// (checked again in debug builds).
    #[inline(always)]
    fn checked_vector_bytes(&self, bio: &Bio) -> usize {
        debug_assert_eq!(
            self.vector_bytes(bio.segs.seg_array()),
            Ok(bio.len as usize),
            "from_iovecs_checked's contract"
        );
        bio.len as usize
    }

    /// The total of a vector of segments, in one pass: at most
    /// BIO_MAX_VECS, each a positive whole number of logical blocks.
    #[inline]
    pub(crate) fn vector_bytes(&self, segs: crate::buf::SegArray<'_>) -> Result<usize, SubmitError> {
        if segs.len() > BIO_MAX_VECS {
            return Err(SubmitError::TooManySegments { nr: segs.len(), max: BIO_MAX_VECS });
        }
        let lbs_mask = self.logical_block_size as usize - 1;
        // Any length's low bits, and whether any is 0: looked at once,
        // after the loop (the common case finds neither). One loop per
        // array kind, so each is a plain pass over its lengths.
        let (total, low_bits, any_zero) = match segs {
            crate::buf::SegArray::Bufs(b) => sum_lengths(b.iter().map(|b| b.len())),
            crate::buf::SegArray::Iovecs(v) => sum_lengths(v.iter().map(|v| v.iov_len)),
            crate::buf::SegArray::Kernel(len) => sum_lengths(std::iter::once(len)),
        };
        if low_bits & lbs_mask != 0 || any_zero {
            return Err(self.bad_segment(segs));
        }
        Ok(total)
    }

    #[cold]
    #[inline(never)]
    fn bad_segment(&self, segs: crate::buf::SegArray<'_>) -> SubmitError {
        let lbs_mask = self.logical_block_size as usize - 1;
        let (index, (_, len)) = segs
            .spans()
            .enumerate()
            .find(|(_, (_, len))| *len == 0 || len & lbs_mask != 0)
            .expect("a bad segment was seen");
        SubmitError::BadSegment { index, len, logical_block_size: self.logical_block_size }
    }

    /// A vectored read or write of at most `plain_max_bytes` that passes
    /// `check_bio` as it is and needs no split for its segments
    /// (`segments_fit_anywhere`): the plain path's, as `plain_rw_ok` is for
    /// one buffer. Not a kernel buffer's bio: its own checks are
    /// `check_bio_fully`'s.
    #[inline]
    pub(crate) fn plain_vectored_ok(&self, bio: &Bio) -> bool {
        let (offset, len) = (bio.offset, bio.len);
        let lbs_mask = u64::from(self.logical_block_size) - 1;
        let end = offset.wrapping_add(len);
        let segs = bio.segs.seg_array();
        matches!(bio.op, Op::Read | Op::Write)
            && !bio.segs.is_kernel()
            && len != 0
            && (offset | len) & lbs_mask == 0
            && end >= offset
            && end <= self.capacity_bytes
            && self.segments_fit_anywhere(segs.len() as u64, len)
            && self.vector_bytes(segs).is_ok_and(|total| total as u64 == len)
    }

    /// Zone ops: a zone management bio names a zone by its start and has
    /// no length (reset all: offset 0); a zone append starts at its zone's
    /// start, stays inside it and within zone_append_max_sectors.
    fn check_zone_bio(&self, bio: &Bio, z: &crate::zoned::ZonedLimits) -> Result<(), SubmitError> {
        let (op, offset, len) = (bio.op, bio.offset, bio.len);
        let zone_bytes = z.zone_sectors << SECTOR_SHIFT;
        if offset % zone_bytes != 0 || offset >= self.capacity_bytes || (op == Op::ZoneResetAll && offset != 0) {
            return Err(SubmitError::NotZoneStart { op, offset, zone_bytes });
        }
        let buf_len = self.check_segments(bio)?;
        if op.is_zone_mgmt() {
            return if len == 0 && buf_len.is_none() {
                Ok(())
            } else {
                Err(SubmitError::BadBuffer { op, len, buf_len })
            };
        }
        if buf_len != Some(len as usize) {
            return Err(SubmitError::BadBuffer { op, len, buf_len });
        }
        let lbs = u64::from(self.logical_block_size);
        if len == 0 || len % lbs != 0 {
            return Err(SubmitError::Misaligned { offset, len, logical_block_size: self.logical_block_size });
        }
        let max = (u64::from(z.zone_append_max_sectors.min(self.max_sectors)) << SECTOR_SHIFT)
            .min(zone_bytes)
            .min(self.capacity_bytes - offset);
        if len > max {
            return Err(SubmitError::TooLarge { len, max });
        }
        Ok(())
    }

    /// Bytes from `offset` to the next zone boundary (u64::MAX if not
    /// zoned): the kernel's chunk_sectors split.
    ///
    /// ```
    /// use mqblk::zoned::ZonedLimits;
    /// use mqblk::QueueLimits;
    ///
    /// let mut limits = QueueLimits::new(4 << 20, 4096);
    /// limits.zoned = Some(ZonedLimits {
    ///     zone_sectors: 2048, // 1 MiB zones
    ///     nr_zones: 4,
    ///     max_open_zones: 0,
    ///     max_active_zones: 0,
    ///     zone_append_max_sectors: 256,
    /// });
    /// assert_eq!(limits.bytes_to_zone_end((1 << 20) + 4096), (1 << 20) - 4096);
    /// ```
    #[inline]
    pub fn bytes_to_zone_end(&self, offset: u64) -> u64 {
        match &self.zoned {
            Some(z) => {
                // zone_sectors is a power of two (`validate`).
                let zone_bytes = z.zone_sectors << SECTOR_SHIFT;
                zone_bytes - (offset & (zone_bytes - 1))
            }
            None => u64::MAX,
        }
    }

    /// The largest request of `op` in bytes; larger bios are split.
    pub fn max_request_bytes(&self, op: Op) -> u64 {
        let max_sectors = match op {
            Op::Discard => self.max_discard_sectors,
            Op::WriteZeroes => self.max_write_zeroes_sectors,
            // Never split: check_zone_bio bounds them.
            Op::ZoneAppend | Op::ZoneReset | Op::ZoneResetAll | Op::ZoneOpen | Op::ZoneClose | Op::ZoneFinish => {
                return u64::MAX
            }
            _ => self.max_sectors,
        };
        u64::from(max_sectors) * SECTOR_SIZE
    }
}

/// The sum of `lens`, every length OR-ed, and whether one is 0.
#[inline(always)]
fn sum_lengths(lens: impl Iterator<Item = usize>) -> (usize, usize, bool) {
    lens.fold((0, 0, false), |(total, bits, zero), len| (total + len, bits | len, zero | (len == 0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::Buf;

    fn limits() -> QueueLimits {
        let mut l = QueueLimits::new(1 << 20, 4096);
        l.max_sectors = 16;
        l
    }

    #[test]
    fn check_bio_accepts_in_range_aligned() {
        assert_eq!(limits().check_bio(&Bio::read(4096, Buf::new(8192))), Ok(()));
        assert_eq!(limits().check_bio(&Bio::flush()), Ok(()));
    }

    #[test]
    fn check_bio_names_each_problem() {
        let l = limits();
        assert!(matches!(l.check_bio(&Bio::read(512, Buf::new(4096))), Err(SubmitError::Misaligned { .. })));
        assert!(matches!(l.check_bio(&Bio::read(1 << 20, Buf::new(4096))), Err(SubmitError::OutOfRange { .. })));
        assert!(matches!(
            l.check_bio(&Bio::read(u64::MAX - 4095, Buf::new(4096))),
            Err(SubmitError::OutOfRange { .. })
        ));
        assert!(matches!(l.check_bio(&Bio::read(0, Buf::new(0))), Err(SubmitError::ZeroLength { .. })));
        assert_eq!(l.check_bio(&Bio::write(0, Buf::new(16384))), Ok(()), "larger than a request: split, not refused");
        assert_eq!(l.max_request_bytes(Op::Write), 8192);
        let huge = Bio::discard(0, 8 << 30);
        let mut big = limits();
        big.capacity_bytes = 16 << 30;
        big.max_discard_sectors = 8;
        assert!(matches!(big.check_bio(&huge), Err(SubmitError::TooLarge { .. })));
        assert!(matches!(l.check_bio(&Bio::discard(0, 4096)), Err(SubmitError::NotSupported { op: Op::Discard })));
        let mut bad = Bio::read(0, Buf::new(4096));
        bad.len = 8192;
        assert!(matches!(l.check_bio(&bad), Err(SubmitError::BadBuffer { .. })));
    }

    /// The bound worked out once holds for every shorter bio and fewer
    /// segments, and one segment more does not fit its longest: for the
    /// default limits, small ones, each of max_segment_size and a boundary
    /// binding, and a virt boundary (nothing fits anywhere).
    #[test]
    fn segments_fit_anywhere_up_to_is_the_bound_for_shorter_bios() {
        let mut cases = vec![limits()];
        let mut l = limits();
        (l.max_segments, l.max_segment_size) = (8, 4096);
        cases.push(l);
        let mut l = limits();
        (l.max_segments, l.seg_boundary_mask) = (32, 0xffff);
        cases.push(l);
        let mut l = limits();
        (l.virt_boundary_mask, l.max_segment_size) = (4095, u32::MAX);
        cases.push(l);
        for l in &cases {
            for max_bytes in [4096u64, 65536, 1 << 17, 1 << 20] {
                let n = l.segments_fit_anywhere_up_to(max_bytes);
                assert!(n < BIO_MAX_VECS as u64, "{l:?}: {n}");
                assert!(!l.segments_fit_anywhere(n + 1, max_bytes), "{l:?} {max_bytes}: {n} + 1");
                for len in [512, 4096, max_bytes / 2 - 512, max_bytes / 2, max_bytes - 512, max_bytes] {
                    assert!((1..=n).all(|m| l.segments_fit_anywhere(m, len)), "{l:?} {len}: {n}");
                }
            }
        }
        assert_eq!(cases[3].segments_fit_anywhere_up_to(4096), 0, "a virt boundary: no array fits anywhere");
    }
}
