//! A request's data segments as a driver walks them: the bios merged in
//! front (in order), the request's own bio (its segments, or a split
//! piece's view of its parent's, the kernel's `bvec_iter`), then the bios
//! merged behind: device order. [`Segments`] and [`SegmentsMut`] are
//! `rq_for_each_segment`; `for_each_phys` is `blk_rq_map_sg`, coalescing
//! contiguous memory into the physical segments the queue's limits allow.
//!
//! Relies on: the request token owning its slot and, through it, the
//! merged bios' slots and a split parent's segments (rq.rs, completion/);
//! segment.rs for the physical segment rules. Segment bytes are reached
//! through each `Buf`'s own pointer (`Buf::raw_ptr`), never through a
//! reference to the `Buf`, so a slice handed out for writing carries the
//! allocation's provenance.

use std::marker::PhantomData;

use crate::buf::SegArrayRaw;
use crate::completion::BioSlot;
use crate::segment::Span;

use super::{Request, SECTOR_SHIFT};

/// Where a walk is.
#[derive(Clone, Copy)]
enum Stage {
    /// In a chain of merged bios: the slot, and its next segment.
    Chain {
        slot: *const BioSlot,
        index: usize,
        back: bool,
    },
    /// The request's own bio's segments, from `index`.
    Own {
        index: usize,
    },
    /// A split piece's view: segment `index` of the parent's `array`,
    /// `skip` bytes into it, `left` bytes to go.
    View {
        array: SegArrayRaw,
        index: usize,
        skip: usize,
        left: usize,
    },
    Done,
}

/// Walks a request's segments as raw spans (address, length) in device
/// order. Whoever makes one owns the request for the walk's lifetime.
struct SpanWalk<'a> {
    rq: &'a Request,
    stage: Stage,
}

impl<'a> SpanWalk<'a> {
    /// # Safety
    /// The caller owns `rq` (its `Rq` token) for `'a`: no one changes the
    /// request, its merged bios' slots or its split parent's segments.
    unsafe fn new(rq: &'a Request) -> Self {
        Self { rq, stage: Stage::Chain { slot: rq.front, index: 0, back: false } }
    }

    /// The stage after the chain in front: the own bio.
    fn own_stage(&self) -> Stage {
        match self.rq.view {
            None => Stage::Own { index: 0 },
            Some(array) => {
                let (index, skip, left) =
                    (self.rq.view_index as usize, self.rq.view_skip as usize, self.rq.view_len as usize);
                Stage::View { array, index, skip, left }
            }
        }
    }
}

impl Iterator for SpanWalk<'_> {
    type Item = Span;

    fn next(&mut self) -> Option<Span> {
        loop {
            match self.stage {
                Stage::Chain { slot, index, back } => {
                    if slot.is_null() {
                        self.stage = if back { Stage::Done } else { self.own_stage() };
                        continue;
                    }
                    // SAFETY: the walk's owner owns the request and so its
                    // chain's slots (`new`'s contract); chain links point at
                    // live slots of queue-owned sinks.
                    let (seg, next) = unsafe {
                        (*slot).with_data(|d| {
                            let segs = d.segs.seg_array();
                            ((index < segs.len()).then(|| span_of(segs.span(index), 0, usize::MAX)), d.next)
                        })
                    };
                    match seg {
                        Some(span) => {
                            self.stage = Stage::Chain { slot, index: index + 1, back };
                            return Some(span);
                        }
                        None => self.stage = Stage::Chain { slot: next, index: 0, back },
                    }
                }
                Stage::Own { index } => {
                    let segs = self.rq.segs.seg_array();
                    if index < segs.len() {
                        self.stage = Stage::Own { index: index + 1 };
                        return Some(span_of(segs.span(index), 0, usize::MAX));
                    }
                    self.stage = Stage::Chain { slot: self.rq.back, index: 0, back: true };
                }
                Stage::View { array, index, skip, left } => {
                    if left == 0 {
                        self.stage = Stage::Chain { slot: self.rq.back, index: 0, back: true };
                        continue;
                    }
                    // `left` > 0 means `index` is still one of its segments.
                    // SAFETY: a view lies inside its parent's segment array,
                    // kept by the parent's bio slot (or the caller, for
                    // iovecs) until the last piece completes (client/split.rs).
                    let seg = unsafe { array.get() }.span(index);
                    let len = (seg.1 - skip).min(left);
                    self.stage = Stage::View { array, index: index + 1, skip: 0, left: left - len };
                    return Some(span_of(seg, skip, len));
                }
                Stage::Done => return None,
            }
        }
    }
}

/// `len` bytes (at most the rest) of the segment `(addr, seg_len)` from
/// `skip`, as a span.
#[inline(always)]
fn span_of((addr, seg_len): (usize, usize), skip: usize, len: usize) -> Span {
    debug_assert!(skip <= seg_len);
    Span { addr: addr + skip, len: len.min(seg_len - skip) }
}

/// A request's segments in device order, each with its position on the
/// device in bytes: `rq_for_each_segment` as an iterator
/// ([`Rq::segments`](super::Rq::segments)).
pub struct Segments<'a> {
    walk: SpanWalk<'a>,
    pos: u64,
}

impl<'a> Segments<'a> {
    /// # Safety
    /// As `SpanWalk::new`, for `'a`, reading only.
    pub(crate) unsafe fn new(rq: &'a Request) -> Self {
        // SAFETY: forwarded contract.
        Self { walk: unsafe { SpanWalk::new(rq) }, pos: rq.sector << SECTOR_SHIFT }
    }
}

impl<'a> Iterator for Segments<'a> {
    type Item = (u64, &'a [u8]);

    fn next(&mut self) -> Option<(u64, &'a [u8])> {
        let span = self.walk.next()?;
        let pos = self.pos;
        self.pos += span.len as u64;
        // SAFETY: the span is part of a segment's bytes, which the request's
        // owner holds for 'a; only readers exist while it is shared.
        Some((pos, unsafe { std::slice::from_raw_parts(span.addr as *const u8, span.len) }))
    }
}

/// As [`Segments`], each to change ([`Rq::segments_mut`](super::Rq::segments_mut)).
pub struct SegmentsMut<'a> {
    walk: SpanWalk<'a>,
    pos: u64,
    _bytes: PhantomData<&'a mut [u8]>,
}

impl<'a> SegmentsMut<'a> {
    /// # Safety
    /// As `SpanWalk::new`, exclusively for `'a` (the token is borrowed
    /// mutably): no one else reads or writes the segments' bytes.
    pub(crate) unsafe fn new(rq: &'a Request) -> Self {
        // SAFETY: forwarded contract.
        Self { walk: unsafe { SpanWalk::new(rq) }, pos: rq.sector << SECTOR_SHIFT, _bytes: PhantomData }
    }
}

impl<'a> Iterator for SegmentsMut<'a> {
    type Item = (u64, &'a mut [u8]);

    fn next(&mut self) -> Option<(u64, &'a mut [u8])> {
        let span = self.walk.next()?;
        let pos = self.pos;
        self.pos += span.len as u64;
        // Segments of a request never overlap (a bio's checks and a split's
        // disjoint views), so the walk yields each byte once.
        // SAFETY: as in `Segments::next`, exclusively (`new`'s contract); by
        // the above, the slices handed out never alias one another.
        Some((pos, unsafe { std::slice::from_raw_parts_mut(span.addr as *mut u8, span.len) }))
    }
}

/// Counts the request's segments.
///
/// # Safety
/// As `SpanWalk::new`.
pub(crate) unsafe fn count(rq: &Request) -> u32 {
    if rq.view.is_none() && rq.front.is_null() && rq.back.is_null() {
        return rq.segs.nr_segs() as u32;
    }
    // SAFETY: forwarded contract.
    unsafe { SpanWalk::new(rq) }.count() as u32
}

/// The request's physical segments (segment.rs), counted now unless a
/// merge counted them already.
///
/// # Safety
/// As `SpanWalk::new`.
pub(crate) unsafe fn phys(rq: &Request) -> crate::segment::Phys {
    if rq.phys.nr != 0 {
        return rq.phys;
    }
    // SAFETY: forwarded contract.
    rq.seg_limits.count(unsafe { SpanWalk::new(rq) })
}

/// Calls `f(address, length)` for each physical segment of the request
/// (`blk_rq_map_sg`): contiguous segments coalesce, none is longer than
/// `max_segment_size` or crosses the segment boundary. The same greedy
/// walk as segment.rs counts, so there are `phys(rq).nr` of them at most
/// (a merge's count is an upper bound).
///
/// # Safety
/// As `SpanWalk::new`.
pub(crate) unsafe fn for_each_phys(rq: &Request, mut f: impl FnMut(*mut u8, usize)) {
    let l = rq.seg_limits;
    let mut open = Span::default();
    // SAFETY: forwarded contract.
    for span in unsafe { SpanWalk::new(rq) } {
        let (mut addr, mut left) = (span.addr, span.len);
        while left > 0 {
            let extend = l.extend_chunk(open, addr, left);
            if extend > 0 {
                open.len += extend;
                (addr, left) = (addr + extend, left - extend);
                continue;
            }
            if open.len > 0 {
                f(open.addr as *mut u8, open.len);
            }
            let take = l.new_chunk(addr, left);
            open = Span { addr, len: take };
            (addr, left) = (addr + take, left - take);
        }
    }
    if open.len > 0 {
        f(open.addr as *mut u8, open.len);
    }
}
