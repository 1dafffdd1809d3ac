//! Splitting a bio larger than one request may be (the kernel's
//! `bio_split_to_limits`): pieces of at most `max_sectors`, never across a
//! zone boundary, and, for a bio of several segments, within the queue's
//! segment limits (segment.rs `piece_bytes`, `bio_split_rw_at`): at most
//! `max_segments` physical segments and no gap at a virt boundary. Each
//! piece is its own request viewing its part of the parent's segments;
//! the bio completes once, when its last piece does.
//!
//! Relies on: submit.rs (`issue`, `RqHead`); completion/ for the parent's
//! bio slot, which keeps its segments until the last piece completes.

use crate::buf::SegArray;
use crate::error::{Rejected, SubmitError};
use crate::queue::RequestQueue;
use crate::request::{Bio, ReqFlags, SECTOR_SHIFT, SPLIT_LAST};
use crate::segment::{SegLimits, Span};

use super::submit::{RqHead, SegView};
use super::Client;

/// Where the next piece starts in the parent's segments: a segment and the
/// bytes of it already taken (a `bvec_iter`'s `bi_idx`, `bi_bvec_done`).
#[derive(Clone, Copy, Default)]
struct Cursor {
    index: usize,
    skip: usize,
}

impl Cursor {
    /// Moves past `len` bytes of `segs`.
    fn advance(&mut self, segs: SegArray<'_>, mut len: usize) {
        while len > 0 {
            let seg_len = segs.span(self.index).1;
            let here = (seg_len - self.skip).min(len);
            len -= here;
            self.skip += here;
            if self.skip == seg_len {
                self.index += 1;
                self.skip = 0;
            }
        }
    }

    /// The spans of `segs` from here on.
    fn spans(self, segs: SegArray<'_>) -> impl Iterator<Item = Span> + '_ {
        segs.spans_from(self.index, self.skip).map(|(addr, len)| Span { addr, len })
    }
}

/// How one bio is cut into pieces.
struct Plan<'q> {
    q: &'q RequestQueue,
    offset: u64,
    len: u64,
    max: u64,
    lbs: u64,
    limits: SegLimits,
    /// The segment limits cannot bind: sizes alone decide (no segments, or
    /// one buffer whose pieces always fit, `one_buffer_splits_by_size`).
    by_size: bool,
}

impl<'q> Plan<'q> {
    fn new(q: &'q RequestQueue, bio: &Bio, max: u64) -> Self {
        let nr_segs = bio.segs.nr_segs();
        let by_size = nr_segs == 0 || (nr_segs == 1 && q.limits.one_buffer_splits_by_size(max));
        let (offset, len, lbs, limits) = (bio.offset, bio.len, q.logical_block_size(), q.seg_limits());
        Self { q, offset, len, max, lbs, limits, by_size }
    }

    /// The length of the piece at `done` bytes into the bio, whose segments
    /// from there on start at `cursor`: 0 if the limits fit no block.
    fn piece_len(&self, segs: SegArray<'_>, done: u64, cursor: Cursor) -> u64 {
        let most = self.max.min(self.q.bytes_to_zone_end(self.offset + done)).min(self.len - done);
        if self.by_size {
            return most;
        }
        if self.fits_anywhere(segs, cursor, most) {
            debug_assert_eq!(self.limits.piece_bytes(cursor.spans(segs), most, self.lbs), most);
            return most;
        }
        self.limits.piece_bytes(cursor.spans(segs), most, self.lbs)
    }

    /// Do the `most` bytes from `cursor` on fit the segment limits however
    /// their segments lie (`segments_fit_anywhere` over the segments they
    /// touch)? Then the piece takes them all, as `piece_bytes` would find
    /// after cutting each segment at every size and boundary limit: the
    /// common case (a guest's 1 MiB of pages cut at `max_sectors`) decided
    /// by adding lengths, without that walk.
    #[inline]
    fn fits_anywhere(&self, segs: SegArray<'_>, cursor: Cursor, most: u64) -> bool {
        let (mut nr_segs, mut covered) = (0u64, 0u64);
        // Past this many segments the bound cannot hold (2 per segment + 2):
        // stop adding and walk.
        let most_segs = (u64::from(self.limits.max_segments).saturating_sub(2) / 2).max(1);
        for (_, len) in segs.spans_from(cursor.index, cursor.skip) {
            nr_segs += 1;
            if nr_segs > most_segs {
                return false;
            }
            covered += len as u64;
            if covered >= most {
                return self.q.limits.segments_fit_anywhere(nr_segs, most);
            }
        }
        false
    }

    /// How many pieces, or the byte where no piece fits.
    fn count(&self, segs: SegArray<'_>) -> Result<u64, u64> {
        let (mut pieces, mut done, mut cursor) = (0u64, 0u64, Cursor::default());
        while done < self.len {
            let len = self.piece_len(segs, done, cursor);
            if len == 0 {
                return Err(done);
            }
            if segs.len() != 0 {
                cursor.advance(segs, len as usize);
            }
            done += len;
            pieces += 1;
        }
        Ok(pieces)
    }
}

impl Client {
    /// Does a bio no larger than a request still need splitting, for its
    /// segments (more than `max_segments` physical segments, or a gap)?
    /// Looked at only for vectored bios, and for one buffer where the
    /// limits could bind it (`segments_bind_one_buffer`).
    #[inline(always)]
    pub(super) fn needs_segment_split(&self, bio: &Bio) -> bool {
        if !bio.segs.is_vectored() && !self.q.segments_bind_one_buffer {
            return false;
        }
        self.segments_exceed_limits(bio)
    }

    #[inline(never)]
    fn segments_exceed_limits(&self, bio: &Bio) -> bool {
        let nr_segs = bio.segs.nr_segs() as u64;
        if nr_segs == 0 || self.q.limits.segments_fit_anywhere(nr_segs, bio.len) {
            return false;
        }
        let spans = Cursor::default().spans(bio.segs.seg_array());
        self.q.seg_limits().piece_bytes(spans, bio.len, self.q.logical_block_size()) != bio.len
    }

    /// Splits `bio` into pieces (see the module header), each its own
    /// request; the bio completes once, when its last piece does, with the
    /// first error. A bio whose segments the limits cannot cut into whole
    /// blocks is refused before any piece is issued.
    pub(super) fn submit_split(
        &mut self,
        mut bio: Bio,
        user_data: u64,
        origin: u8,
        reserved: bool,
        max: u64,
    ) -> Result<(), Box<Rejected>> {
        let q = self.q.clone();
        let plan = Plan::new(&q, &bio, max);
        let pieces = match plan.count(bio.segs.seg_array()) {
            Ok(pieces) => pieces,
            Err(at) => {
                let (max_segments, seg_boundary_mask) = (q.limits.max_segments, q.limits.seg_boundary_mask);
                let error = SubmitError::Unsplittable { at, max_segments, seg_boundary_mask };
                return Err(Box::new(Rejected { error, bio }));
            }
        };
        debug_assert!(pieces >= 1 && pieces <= u64::from(u32::MAX));
        let index = self.free_slots.pop().expect("a free bio slot per outstanding bio");
        let shared = self.shared.clone();
        let slot = shared.slot(index);
        // SAFETY: no piece is issued yet, so the client owns the slot. The
        // segments stay where the slot keeps them (in place, a vector's
        // heap array, or the caller's iovecs) until the last piece completes.
        let array = unsafe { slot.start_split(pieces as u32, user_data, origin, bio.segs.take()) };
        let segs = || -> SegArray<'_> {
            match array {
                // SAFETY: the parent's segments, kept by the slot; only read
                // (by us and by pieces in flight) until the last piece ends,
                // and the last piece is issued after every use of this.
                Some(array) => unsafe { array.get() },
                None => SegArray::Bufs(&[]),
            }
        };
        let nowait = bio.flags.contains(ReqFlags::NOWAIT);
        let (mut done, mut cursor) = (0u64, Cursor::default());
        for i in 0..pieces {
            let len = plan.piece_len(segs(), done, cursor);
            debug_assert!(len > 0, "counted above");
            let view = array.map(|array| {
                debug_assert!(cursor.index < array.nr, "bytes remain, so the cursor is on a segment");
                SegView { array, index: cursor.index as u32, skip: cursor.skip as u32, len: len as u32 }
            });
            if i + 1 < pieces && array.is_some() {
                cursor.advance(segs(), len as usize);
            }
            let head = RqHead {
                op: bio.op,
                flags: bio.flags,
                sector: (bio.offset + done) >> SECTOR_SHIFT,
                nr_sectors: (len >> SECTOR_SHIFT) as u32,
                view,
                // The last piece is marked: the kernel's parent bio, whose
                // own error wins over its children's (completion.rs).
                split: (index + 1) | if i + 1 == pieces { SPLIT_LAST } else { 0 },
                user_data,
                origin,
                ioprio: bio.ioprio,
            };
            if let Some(t) = self.q.trace().filter(|_| i + 1 < pieces) {
                t.split(head.op, head.flags, head.sector, head.nr_sectors, head.sector + u64::from(head.nr_sectors));
            }
            // If it must wait, it waits for the tags of all pieces left, so
            // they are issued back to back (locality on rotational media).
            self.alloc.want = (pieces - i).min(u64::from(u32::MAX)) as u32;
            // NOWAIT can only refuse the first piece: later ones wait for a
            // tag, so a bio is never left half issued.
            let issued = self.issue(&head, &mut crate::buf::BioVec::new(), reserved, nowait && i == 0);
            self.alloc.want = 1;
            if !issued {
                // SAFETY: nothing was issued: the client still owns the slot.
                bio.segs = unsafe { slot.with_data_mut(|d| d.segs.take()) };
                self.free_slots.push(index);
                return Err(Box::new(Rejected { error: SubmitError::Again, bio }));
            }
            done += len;
        }
        self.q.note_split();
        self.note_submitted(bio.op);
        Ok(())
    }
}
