//! Merging a bio into a plugged request (`blk_attempt_plug_merge`,
//! `bio_attempt_back_merge` / `bio_attempt_front_merge`, block/blk-merge.c).
//!
//! A bio merges into a request when both are mergeable and of the same op,
//! their flags of the same class, the bio starts where the request ends
//! (back merge) or ends where it starts (front merge), and the merged
//! request stays within the queue's `max_sectors` for the op (`try_merge`)
//! and its segment limits (`segments_fit`: at most `max_segments` physical
//! segments, counted as `ll_back_merge_fn` / `ll_front_merge_fn` count
//! them, and no gap at a virt boundary, `bio_will_gap`; segment.rs).
//! Reads, writes and discards merge (discards by the same
//! contiguity rule, as the kernel does with one discard segment); flushes,
//! write-zeroes and FUA bios never do (the kernel's REQ_NOMERGE_FLAGS and
//! `rq_mergeable`), nor do bios over a kernel buffer (`KernelBuf`). Pieces of a split bio neither merge nor take merges:
//! they are already as large as a request may be.
//!
//! The merged bio keeps its identity: its buffer, cookie and origin go into
//! one of its client's bio slots, linked into the request's chain in device
//! order (front merges before the request's own bio, back merges after), so
//! that it completes on its own (hctx/end.rs `MergedEnd`).
//!
//! Relies on: request/ for the request's fields, completion.rs for bio
//! slots, segment.rs for counting physical segments.

use crate::buf::BioVec;
use crate::completion::{BioSlot, ClientShared};
use crate::request::{request_phys, Op, ReqFlags, Request};
use crate::segment::{Phys, Span};

/// Where a bio joins a request. An elevator finds a queued request a bio
/// may join, and asks the block layer to merge it
/// ([`Elevator::bio_merge`](crate::sched::Elevator::bio_merge)), which
/// applies the merge rules (op, flags, size and segment limits).
///
/// An elevator that merges a bio behind the last request it holds: while
/// the driver is busy, requests wait in the elevator and bios join them.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::{Arc, Mutex};
/// use mqblk::driver::{Driver, Hctx, QueueRqResult};
/// use mqblk::sched::{register_elevator, BioPos, Elevator, MergeKind, Rq, RqList};
/// use mqblk::{Bio, Buf, Device, QueueConfig, QueueLimits, Sched, Status, TagSetConfig};
///
/// struct BackMerging(Vec<Mutex<RqList>>);
///
/// impl Elevator for BackMerging {
///     fn insert_requests(&self, hctx: usize, rqs: &mut RqList) {
///         let mut queue = self.0[hctx].lock().unwrap();
///         rqs.for_each(|rq| queue.push_back(rq));
///     }
///     fn dispatch_request(&self, hctx: usize) -> Option<Rq> {
///         self.0[hctx].lock().unwrap().pop_front()
///     }
///     fn has_work(&self, hctx: usize) -> bool {
///         !self.0[hctx].lock().unwrap().is_empty()
///     }
///     fn bio_merge(&self, hctx: usize, bio: &BioPos, attach: &mut dyn FnMut(&mut Rq, MergeKind) -> bool) -> bool {
///         let mut queue = self.0[hctx].lock().unwrap();
///         match queue.back_mut() {
///             Some(last) if last.op() == bio.op && last.sector() + u64::from(last.nr_sectors()) == bio.sector => {
///                 attach(last, MergeKind::Back)
///             }
///             _ => false,
///         }
///     }
/// }
///
/// /// Busy while paused (requests wait), then completes at once.
/// struct Pausable(Arc<AtomicBool>);
///
/// impl Driver for Pausable {
///     fn name(&self) -> &str { "pausable" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 4) }
///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
///     fn queue_rq(&self, _hctx: &Hctx, rq: mqblk::driver::Rq, _last: bool) -> QueueRqResult {
///         if self.0.load(Ordering::Relaxed) {
///             return QueueRqResult::Busy(rq);
///         }
///         rq.complete(Status::Ok);
///         QueueRqResult::Queued
///     }
/// }
///
/// register_elevator("back-merging", &[], |args| {
///     Ok(Box::new(BackMerging((0..args.nr_hw_queues).map(|_| Mutex::default()).collect())))
/// });
/// let paused = Arc::new(AtomicBool::new(true));
/// let opts = QueueConfig::default().sched(Sched::custom("back-merging"));
/// let dev = Device::with_driver_options(Box::new(Pausable(paused.clone())), opts)?;
/// let mut client = dev.client();
/// client.submit(Bio::write(0, Buf::new(512)), 1)?; // at the driver: busy
/// client.submit(Bio::write(4096, Buf::new(512)), 2)?; // waits in the elevator
/// client.submit(Bio::write(4608, Buf::new(512)), 3)?; // joins it
/// paused.store(false, Ordering::Relaxed);
/// client.drain();
/// assert_eq!((dev.stats().merges.write, dev.stats().completed), (1, 2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeKind {
    /// The bio follows the request.
    Back,
    /// The bio precedes the request.
    Front,
}

/// Flags that must be equal for a merge: they decide how a request is
/// scheduled and completed (sync vs async accounting, polling, writeback).
pub(crate) const MERGE_CLASS: ReqFlags =
    ReqFlags::SYNC.union(ReqFlags::HIPRI).union(ReqFlags::BACKGROUND).union(ReqFlags::FUA);

/// Flags that keep an I/O out of every merge: FUA (REQ_NOMERGE_FLAGS), and
/// a kernel buffer, which is one buffer the block layer cannot join.
const NOMERGE: ReqFlags = ReqFlags::FUA.union(ReqFlags::KERNEL_BUF);

/// Can an I/O of this op and flags take part in a merge at all?
#[inline(always)]
pub(crate) fn mergeable(op: Op, flags: ReqFlags) -> bool {
    matches!(op, Op::Read | Op::Write | Op::Discard) && flags.bits() & NOMERGE.bits() == 0
}

/// A bio, as far as the merge rules look at it (example: [`MergeKind`]).
#[derive(Debug, Clone, Copy)]
pub struct BioPos {
    /// The bio's operation.
    pub op: Op,
    /// The bio's flags.
    pub flags: ReqFlags,
    /// First sector (512-byte units).
    pub sector: u64,
    /// Length in sectors.
    pub nr_sectors: u32,
}

/// How `bio` can merge into `rq` within `max_sectors`, if at all
/// (`blk_rq_merge_ok` + `blk_try_merge` + the size check); the segment
/// limits are `segments_fit`'s, once a merge is possible by position.
#[inline]
pub(crate) fn try_merge(rq: &Request, bio: &BioPos, max_sectors: u64) -> Option<MergeKind> {
    // Contiguity first: it is what fails for random I/O, and it is cheap.
    let kind = contiguity(rq, bio)?;
    if rq.split != 0 || rq.op != bio.op || !mergeable(rq.op, rq.flags) || !mergeable(bio.op, bio.flags) {
        return None;
    }
    if rq.flags.bits() & MERGE_CLASS.bits() != bio.flags.bits() & MERGE_CLASS.bits() {
        return None;
    }
    if u64::from(rq.nr_sectors) + u64::from(bio.nr_sectors) > max_sectors {
        return None;
    }
    Some(kind)
}

/// The physical segments of a bio's segments (segment.rs), for a merge.
pub(crate) fn bio_phys(rq: &Request, segs: &BioVec) -> Phys {
    let spans = segs.seg_array().spans().map(|(addr, len)| Span { addr, len });
    rq.seg_limits.count(spans)
}

/// The request's physical segments with a bio of `bio` ones joined as
/// `kind` says, if that stays within `max_segments` and makes no gap.
///
/// # Safety
/// The caller owns `rq` (it holds the request's token).
pub(crate) unsafe fn segments_fit(rq: &Request, kind: MergeKind, bio: &Phys) -> Option<Phys> {
    // SAFETY: forwarded contract.
    let own = unsafe { request_phys(rq) };
    let joined = match kind {
        MergeKind::Back => rq.seg_limits.join(&own, bio)?,
        MergeKind::Front => rq.seg_limits.join(bio, &own)?,
    };
    (joined.nr <= rq.seg_limits.max_segments).then_some(joined)
}

/// Does `bio` follow or precede `rq` exactly?
#[inline(always)]
fn contiguity(rq: &Request, bio: &BioPos) -> Option<MergeKind> {
    if rq.sector + u64::from(rq.nr_sectors) == bio.sector {
        Some(MergeKind::Back)
    } else if bio.sector + u64::from(bio.nr_sectors) == rq.sector {
        Some(MergeKind::Front)
    } else {
        None
    }
}

/// What a merged bio completes with, and its physical segments joined
/// with the request's (`segments_fit`).
pub(crate) struct MergedBio {
    pub(crate) pos: BioPos,
    pub(crate) segs: BioVec,
    pub(crate) phys: Phys,
    pub(crate) user_data: u64,
    pub(crate) origin: u8,
}

/// Links `bio` into `rq` as `kind` says, storing it in `slot`.
///
/// # Safety
/// `slot` is a free bio slot of `owner`, the caller's own sink; the caller
/// owns `rq` (it holds the plugged request's token).
pub(crate) unsafe fn attach(rq: &mut Request, kind: MergeKind, slot: &BioSlot, owner: &ClientShared, bio: MergedBio) {
    debug_assert_eq!(try_merge(rq, &bio.pos, u64::MAX), Some(kind));
    let p: *const BioSlot = slot;
    let next = match kind {
        MergeKind::Back => std::ptr::null(),
        MergeKind::Front => rq.front,
    };
    // SAFETY: forwarded contract: the slot is free and ours.
    unsafe {
        slot.with_data_mut(|d| {
            d.user_data = bio.user_data;
            d.origin = bio.origin;
            d.segs = bio.segs;
            d.sector = bio.pos.sector;
            d.nr_sectors = bio.pos.nr_sectors;
            d.owner = owner;
            d.next = next;
        })
    };
    match kind {
        MergeKind::Back => {
            if rq.back.is_null() {
                rq.back = p;
            } else {
                // SAFETY: the tail is another slot of this request's chain
                // (not `slot`, which was free), which the request's owner
                // (the caller) uses.
                unsafe { (*rq.back_tail).with_data_mut(|d| d.next = p) };
            }
            rq.back_tail = p;
        }
        MergeKind::Front => {
            rq.front = p;
            rq.sector = bio.pos.sector;
        }
    }
    rq.nr_sectors += bio.pos.nr_sectors;
    rq.nr_bios += 1;
    // Kept for the next merge; the general end resets it.
    rq.phys = bio.phys;
    rq.plain_end = false;
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::buf::Buf;
    use crate::request::RequestSlot;
    use crate::segment::SegLimits;

    fn request(op: Op, flags: ReqFlags, sector: u64, nr_sectors: u32) -> Request {
        let slot = RequestSlot::new(0);
        let mut rq = slot.rq.into_inner();
        (rq.op, rq.flags, rq.sector, rq.nr_sectors) = (op, flags, sector, nr_sectors);
        rq.seg_limits = SegLimits::NONE;
        rq
    }

    fn bio(op: Op, flags: ReqFlags, sector: u64, nr_sectors: u32) -> BioPos {
        BioPos { op, flags, sector, nr_sectors }
    }

    /// `len` bytes at `at` of `memory`, as a segment.
    fn seg(memory: &mut [u8], at: usize, len: usize) -> Buf {
        // SAFETY: the tests keep `memory` alive and untouched while the
        // returned buffer lives.
        unsafe { Buf::borrowed(memory[at..][..len].as_mut_ptr(), len) }
    }

    #[test]
    fn contiguous_bios_merge_back_and_front() {
        let rq = request(Op::Read, ReqFlags::NONE, 8, 8);
        assert_eq!(try_merge(&rq, &bio(Op::Read, ReqFlags::NONE, 16, 8), 255), Some(MergeKind::Back));
        assert_eq!(try_merge(&rq, &bio(Op::Read, ReqFlags::NONE, 0, 8), 255), Some(MergeKind::Front));
        assert_eq!(try_merge(&rq, &bio(Op::Read, ReqFlags::NONE, 24, 8), 255), None, "a gap");
        assert_eq!(try_merge(&rq, &bio(Op::Read, ReqFlags::NONE, 12, 8), 255), None, "an overlap");
    }

    #[test]
    fn max_sectors_refuses() {
        let rq = request(Op::Write, ReqFlags::NONE, 0, 8);
        let next = bio(Op::Write, ReqFlags::NONE, 8, 8);
        assert_eq!(try_merge(&rq, &next, 16), Some(MergeKind::Back), "exactly max_sectors");
        assert_eq!(try_merge(&rq, &next, 15), None, "max_sectors");
    }

    /// `ll_back_merge_fn`'s segment count: each bio's physical segments,
    /// one fewer where the request's last and the bio's first are
    /// contiguous and fit one segment together.
    #[test]
    fn max_segments_counts_physical_segments() {
        let mut memory = vec![0u8; 1 << 20];
        let mut rq = request(Op::Write, ReqFlags::NONE, 0, 16);
        rq.seg_limits = SegLimits { max_segments: 2, ..SegLimits::NONE };
        rq.segs = crate::buf::BioVec::from(vec![seg(&mut memory, 0, 4096), seg(&mut memory, 8192, 4096)]);
        // SAFETY: the test owns the request.
        let fit =
            |rq: &Request, segs: &crate::buf::BioVec, kind| unsafe { segments_fit(rq, kind, &bio_phys(rq, segs)) };
        let apart = crate::buf::BioVec::from(seg(&mut memory, 65536, 4096));
        assert_eq!(fit(&rq, &apart, MergeKind::Back), None, "a third segment");
        let continues = crate::buf::BioVec::from(seg(&mut memory, 12288, 4096));
        assert_eq!(fit(&rq, &continues, MergeKind::Back).map(|p| p.nr), Some(2), "coalesces with the last");
        assert_eq!(fit(&rq, &continues, MergeKind::Front), None, "not contiguous with the first");
        let before = crate::buf::BioVec::from(seg(&mut memory, 61440, 4096));
        assert_eq!(fit(&rq, &before, MergeKind::Front), None);
        let precedes = crate::buf::BioVec::from(vec![seg(&mut memory, 1 << 19, 4096)]);
        assert_eq!(fit(&rq, &precedes, MergeKind::Front), None);
    }

    #[test]
    fn max_segment_size_keeps_contiguous_bios_apart() {
        let mut memory = vec![0u8; 1 << 20];
        let mut rq = request(Op::Write, ReqFlags::NONE, 0, 120);
        rq.seg_limits = SegLimits { max_segments: 1, max_segment_size: 65536, ..SegLimits::NONE };
        rq.segs = crate::buf::BioVec::from(seg(&mut memory, 0, 61440));
        // SAFETY: the test owns the request.
        let fit = |segs: &crate::buf::BioVec| unsafe { segments_fit(&rq, MergeKind::Back, &bio_phys(&rq, segs)) };
        assert!(fit(&crate::buf::BioVec::from(seg(&mut memory, 61440, 4096))).is_some(), "64 KiB together");
        assert!(fit(&crate::buf::BioVec::from(seg(&mut memory, 61440, 8192))).is_none(), "68 KiB do not fit one");
    }

    #[test]
    fn a_gap_at_the_virt_boundary_refuses() {
        let mut memory = vec![0u8; 1 << 20];
        let base = (memory.as_ptr() as usize).next_multiple_of(4096) - memory.as_ptr() as usize;
        let mut rq = request(Op::Read, ReqFlags::NONE, 0, 8);
        rq.seg_limits = SegLimits { virt_boundary_mask: 4095, ..SegLimits::NONE };
        rq.segs = crate::buf::BioVec::from(seg(&mut memory, base, 4096));
        // SAFETY: the test owns the request.
        let fit = |segs: &crate::buf::BioVec, kind| unsafe { segments_fit(&rq, kind, &bio_phys(&rq, segs)) };
        let aligned = crate::buf::BioVec::from(seg(&mut memory, base + 65536, 4096));
        assert!(fit(&aligned, MergeKind::Back).is_some(), "both ends on the boundary");
        let off = crate::buf::BioVec::from(seg(&mut memory, base + 65536 + 512, 4096));
        assert!(fit(&off, MergeKind::Back).is_none(), "the bio starts off the boundary");
        assert!(fit(&off, MergeKind::Front).is_none(), "it ends off it too");
    }

    #[test]
    fn op_and_flag_mismatches_refuse() {
        let rq = request(Op::Write, ReqFlags::SYNC, 0, 8);
        assert_eq!(try_merge(&rq, &bio(Op::Read, ReqFlags::SYNC, 8, 8), 255), None, "op");
        for other in [ReqFlags::NONE, ReqFlags::SYNC | ReqFlags::HIPRI, ReqFlags::SYNC | ReqFlags::BACKGROUND] {
            assert_eq!(try_merge(&rq, &bio(Op::Write, other, 8, 8), 255), None, "{other:?}");
        }
        assert_eq!(
            try_merge(&rq, &bio(Op::Write, ReqFlags::SYNC | ReqFlags::NOWAIT, 8, 8), 255),
            Some(MergeKind::Back)
        );
        let fua = request(Op::Write, ReqFlags::FUA, 0, 8);
        assert_eq!(try_merge(&fua, &bio(Op::Write, ReqFlags::FUA, 8, 8), 255), None, "FUA never merges");
        assert_eq!(try_merge(&rq, &bio(Op::Write, ReqFlags::SYNC | ReqFlags::FUA, 8, 8), 255), None);
        for op in [Op::Flush, Op::WriteZeroes] {
            let rq = request(op, ReqFlags::NONE, 0, 8);
            assert_eq!(try_merge(&rq, &bio(op, ReqFlags::NONE, 8, 8), u64::MAX), None, "{op:?}");
        }
        let discard = request(Op::Discard, ReqFlags::NONE, 0, 8);
        assert_eq!(try_merge(&discard, &bio(Op::Discard, ReqFlags::NONE, 8, 8), 1 << 20), Some(MergeKind::Back));
        let mut piece = request(Op::Read, ReqFlags::NONE, 0, 8);
        piece.split = 1;
        assert_eq!(try_merge(&piece, &bio(Op::Read, ReqFlags::NONE, 8, 8), 255), None, "split piece");
    }
}
