//! Segment rules (the segment half of block/blk-merge.c): how a request's
//! data segments count as physical segments, where a virt boundary makes a
//! gap, how far a bio may go before it must be split, and whether a bio
//! may join a request.
//!
//! A segment is a run of memory (a `Buf`, or the part of one that a split
//! piece views). Physical segments are what a driver maps (an iovec, an
//! sg entry): contiguous memory coalesces into one, as the kernel's
//! multi-page bio_vecs and `blk_rq_map_sg` coalesce it, but no physical
//! segment is longer than `max_segment_size` or crosses a
//! `seg_boundary_mask` window (`get_max_segment_size`). Counting is greedy
//! over the bytes in order: a segment extends the open physical segment
//! when it continues it and both limits allow, else it starts a new one.
//! Addresses are this process's virtual addresses: in user space that is
//! the memory a driver's iovec names.
//!
//! `virt_boundary_mask` (NVMe's PRP rule, `bvec_gap_to_prev`): two
//! segments that are not contiguous may follow one another only if the
//! first ends and the second starts on the boundary; otherwise there is a
//! gap, which a request may not contain: a bio is split there and a merge
//! that would make one is refused (`bio_will_gap`).
//!
//! Relies on: nothing of the block layer but the limits' values; pure
//! functions over `(address, length)` spans, property-tested against a
//! byte-by-byte model (tests/segments.rs).

/// A run of memory: `len` bytes at `addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Span {
    pub(crate) addr: usize,
    pub(crate) len: usize,
}

impl Span {
    #[inline(always)]
    pub(crate) fn end(self) -> usize {
        self.addr + self.len
    }
}

/// The segment limits of a queue, copied out of its `QueueLimits` (where
/// each is documented) for the paths that count and split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegLimits {
    pub(crate) max_segments: u32,
    pub(crate) max_segment_size: usize,
    pub(crate) seg_boundary_mask: usize,
    pub(crate) virt_boundary_mask: usize,
}

/// Physical segments of a run of segments: how many, and the first and
/// last (what a merge at either end may coalesce with: the kernel's
/// `bi_seg_front_size` and `bi_seg_back_size`). `nr` 0: none counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Phys {
    pub(crate) nr: u32,
    pub(crate) front: Span,
    pub(crate) back: Span,
}

impl SegLimits {
    /// No limit at all (a driver that maps nothing: a bio is one request
    /// whatever its segments).
    #[cfg(test)]
    pub(crate) const NONE: SegLimits = SegLimits {
        max_segments: u32::MAX,
        max_segment_size: usize::MAX,
        seg_boundary_mask: usize::MAX,
        virt_boundary_mask: 0,
    };

    /// The first address past `addr`'s boundary window (usize::MAX when
    /// there is no boundary, or the window is the address space's last).
    #[inline(always)]
    fn window_end(&self, addr: usize) -> usize {
        (addr | self.seg_boundary_mask).saturating_add(1)
    }

    /// Bytes of a span at `addr` (`len` of them) that one new physical
    /// segment may hold (`get_max_segment_size`).
    #[inline(always)]
    pub(crate) fn new_chunk(&self, addr: usize, len: usize) -> usize {
        len.min(self.max_segment_size).min(self.window_end(addr) - addr)
    }

    /// Bytes of a span at `addr` that may extend `open`, the physical
    /// segment before it: 0 unless `addr` continues it inside its window.
    #[inline(always)]
    pub(crate) fn extend_chunk(&self, open: Span, addr: usize, len: usize) -> usize {
        if open.len == 0 || open.end() != addr {
            return 0;
        }
        let room = self.max_segment_size - open.len;
        len.min(room).min(self.window_end(open.addr).saturating_sub(addr))
    }

    /// Is there a gap between a segment ending at `prev_end` and one
    /// starting at `next_addr` (not contiguous, and either side off the
    /// virt boundary)?
    #[inline(always)]
    pub(crate) fn gap(&self, prev_end: usize, next_addr: usize) -> bool {
        self.virt_boundary_mask != 0 && prev_end != next_addr && (prev_end | next_addr) & self.virt_boundary_mask != 0
    }

    /// Adds `span` (after what `phys` counted) to `phys`.
    pub(crate) fn push(&self, phys: &mut Phys, span: Span) {
        let (mut addr, mut left) = (span.addr, span.len);
        while left > 0 {
            let extend = if phys.nr == 0 { 0 } else { self.extend_chunk(phys.back, addr, left) };
            let take = if extend > 0 {
                phys.back.len += extend;
                if phys.nr == 1 {
                    phys.front = phys.back;
                }
                extend
            } else {
                let take = self.new_chunk(addr, left);
                debug_assert!(take > 0, "a physical segment holds at least a byte");
                phys.back = Span { addr, len: take };
                if phys.nr == 0 {
                    phys.front = phys.back;
                }
                phys.nr += 1;
                take
            };
            addr += take;
            left -= take;
        }
    }

    /// The physical segments of `spans`, in order.
    pub(crate) fn count(&self, spans: impl IntoIterator<Item = Span>) -> Phys {
        let mut phys = Phys::default();
        for span in spans {
            self.push(&mut phys, span);
        }
        phys
    }

    /// The physical segments of `a` followed by `b`, as a merge counts
    /// them (`ll_back_merge_fn` with `blk_phys_contig_segment`): the two
    /// counts, one less when `a`'s last and `b`'s first coalesce whole.
    /// None if the join would make a gap. An upper bound of what `count`
    /// gives for the joined spans, which is what a driver maps.
    pub(crate) fn join(&self, a: &Phys, b: &Phys) -> Option<Phys> {
        if a.nr == 0 {
            return Some(*b);
        }
        if b.nr == 0 {
            return Some(*a);
        }
        if self.gap(a.back.end(), b.front.addr) {
            return None;
        }
        let whole = self.extend_chunk(a.back, b.front.addr, b.front.len) == b.front.len;
        if !whole {
            return Some(Phys { nr: a.nr + b.nr, front: a.front, back: b.back });
        }
        let joined = Span { addr: a.back.addr, len: a.back.len + b.front.len };
        let front = if a.nr == 1 { joined } else { a.front };
        let back = if b.nr == 1 { joined } else { b.back };
        Some(Phys { nr: a.nr + b.nr - 1, front, back })
    }

    /// How many bytes of `spans` (a bio's segments from where its next
    /// piece starts) the next piece takes (`bio_split_rw_at`): as many as
    /// fit in `max_bytes`, `max_segments` physical segments and no gap,
    /// rounded down to the logical block size `lbs`. 0 if not even one
    /// block fits (a bio whose segments these limits cannot split).
    pub(crate) fn piece_bytes(&self, spans: impl IntoIterator<Item = Span>, max_bytes: u64, lbs: u64) -> u64 {
        debug_assert!(max_bytes % lbs == 0 && max_bytes > 0);
        let mut phys = Phys::default();
        let mut bytes = 0u64;
        let mut prev_end = None;
        for span in spans {
            if prev_end.is_some_and(|end| self.gap(end, span.addr)) {
                break;
            }
            let (mut addr, mut left) = (span.addr, span.len);
            while left > 0 {
                let extend = if phys.nr == 0 { 0 } else { self.extend_chunk(phys.back, addr, left) };
                if extend == 0 && phys.nr == self.max_segments {
                    return bytes - bytes % lbs;
                }
                let chunk = if extend > 0 { extend } else { self.new_chunk(addr, left) };
                let take = (chunk as u64).min(max_bytes - bytes) as usize;
                self.push(&mut phys, Span { addr, len: take });
                bytes += take as u64;
                if bytes == max_bytes {
                    return bytes;
                }
                addr += take;
                left -= take;
            }
            prev_end = Some(span.end());
        }
        bytes - bytes % lbs
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const K: usize = 1024;

    fn limits(max_segments: u32, max_segment_size: usize, boundary: usize, virt: usize) -> SegLimits {
        SegLimits { max_segments, max_segment_size, seg_boundary_mask: boundary, virt_boundary_mask: virt }
    }

    fn span(addr: usize, len: usize) -> Span {
        Span { addr, len }
    }

    #[test]
    fn contiguous_segments_coalesce_up_to_max_segment_size() {
        let l = limits(128, 64 * K, usize::MAX, 0);
        // 16 pages back to back: one segment of 64 KiB.
        let pages: Vec<Span> = (0..16).map(|i| span(0x10000 + i * 4 * K, 4 * K)).collect();
        assert_eq!(l.count(pages.clone()).nr, 1);
        // 17: the 17th starts a second.
        let more: Vec<Span> = (0..17).map(|i| span(0x10000 + i * 4 * K, 4 * K)).collect();
        let p = l.count(more);
        assert_eq!((p.nr, p.front, p.back), (2, span(0x10000, 64 * K), span(0x10000 + 64 * K, 4 * K)));
        // Apart: one each.
        assert_eq!(l.count([span(0, 4 * K), span(8 * K, 4 * K)]).nr, 2);
    }

    #[test]
    fn a_long_segment_is_several_and_a_boundary_cuts() {
        let l = limits(128, 64 * K, usize::MAX, 0);
        assert_eq!(l.count([span(0, 200 * K)]).nr, 4, "64+64+64+8");
        let b = limits(128, usize::MAX, 64 * K - 1, 0);
        // 8 KiB straddling a 64 KiB window: two.
        assert_eq!(l.count([span(60 * K, 8 * K)]).nr, 1);
        assert_eq!(b.count([span(60 * K, 8 * K)]).nr, 2);
        // Contiguous across the window: no coalescing over it.
        assert_eq!(b.count([span(60 * K, 4 * K), span(64 * K, 4 * K)]).nr, 2);
        assert_eq!(b.count([span(56 * K, 4 * K), span(60 * K, 4 * K)]).nr, 1);
    }

    #[test]
    fn gaps_follow_the_virt_boundary() {
        let l = limits(128, usize::MAX, usize::MAX, 4 * K - 1);
        assert!(!l.gap(8 * K, 8 * K), "contiguous");
        assert!(!l.gap(8 * K, 20 * K), "both on the boundary");
        assert!(l.gap(8 * K + 512, 20 * K), "the first ends off it");
        assert!(l.gap(8 * K, 20 * K + 512), "the second starts off it");
        assert!(!limits(128, usize::MAX, usize::MAX, 0).gap(1, 3), "no virt boundary");
    }

    #[test]
    fn join_counts_as_the_kernel_merges() {
        let l = limits(128, 64 * K, usize::MAX, 0);
        let a = l.count([span(0, 8 * K)]);
        let b = l.count([span(8 * K, 8 * K), span(32 * K, 4 * K)]);
        let j = l.join(&a, &b).unwrap();
        assert_eq!((j.nr, j.front, j.back), (2, span(0, 16 * K), span(32 * K, 4 * K)));
        // Too long to coalesce whole: counted apart (an upper bound).
        let big = l.count([span(0, 60 * K)]);
        let next = l.count([span(60 * K, 8 * K)]);
        assert_eq!(l.join(&big, &next).unwrap().nr, 2);
        assert_eq!(l.count([span(0, 60 * K), span(60 * K, 8 * K)]).nr, 2);
        // A gap refuses.
        let v = limits(128, usize::MAX, usize::MAX, 4 * K - 1);
        let odd = v.count([span(0, 6 * K)]);
        assert_eq!(v.join(&odd, &v.count([span(64 * K, 4 * K)])), None);
        assert!(v.join(&v.count([span(0, 8 * K)]), &v.count([span(64 * K, 4 * K)])).is_some());
    }

    #[test]
    fn pieces_stop_at_each_limit() {
        let segs: Vec<Span> = (0..8).map(|i| span(0x100000 + i * 16 * K, 4 * K)).collect();
        // max_segments 3: three separate 4 KiB segments.
        assert_eq!(limits(3, 64 * K, usize::MAX, 0).piece_bytes(segs.clone(), 1 << 20, 512), 12 * K as u64);
        // max_bytes cuts inside a segment, at a block boundary.
        assert_eq!(limits(128, 64 * K, usize::MAX, 0).piece_bytes(segs.clone(), 6 * K as u64, 512), 6 * K as u64);
        // A gap: the second segment starts off the virt boundary.
        let odd = [span(0x100000, 4 * K), span(0x200200, 4 * K), span(0x300000, 4 * K)];
        assert_eq!(limits(128, usize::MAX, usize::MAX, 4 * K - 1).piece_bytes(odd, 1 << 20, 512), 4 * K as u64);
        // max_segment_size splits one long segment into segments that count.
        assert_eq!(limits(2, 8 * K, usize::MAX, 0).piece_bytes([span(0, 64 * K)], 1 << 20, 4096), 16 * K as u64);
        // The end of the bio.
        assert_eq!(SegLimits::NONE.piece_bytes(segs, 1 << 20, 512), 32 * K as u64);
    }

    #[test]
    fn a_piece_rounds_down_to_the_block_and_may_be_empty() {
        // One segment at an address 512 bytes into a 4 KiB boundary window:
        // the first physical segment holds 3.5 KiB, not a whole 4 KiB block.
        let l = limits(1, usize::MAX, 4 * K - 1, 0);
        assert_eq!(l.piece_bytes([span(0x10200, 8 * K)], 1 << 20, 4096), 0);
        assert_eq!(l.piece_bytes([span(0x10200, 8 * K)], 1 << 20, 512), 3584);
    }

    /// A byte-by-byte model: each byte's address in order; a physical
    /// segment ends where the next byte does not follow, the segment is
    /// full, or a boundary window ends.
    fn model_count(l: &SegLimits, spans: &[Span]) -> Vec<Span> {
        let mut segs: Vec<Span> = Vec::new();
        for s in spans {
            for addr in s.addr..s.end() {
                match segs.last_mut() {
                    Some(cur)
                        if cur.end() == addr
                            && cur.len < l.max_segment_size
                            && cur.addr | l.seg_boundary_mask == addr | l.seg_boundary_mask =>
                    {
                        cur.len += 1
                    }
                    _ => segs.push(Span { addr, len: 1 }),
                }
            }
        }
        segs
    }

    /// Does the prefix of `len` bytes keep the limits (count and no gap)?
    fn prefix_fits(l: &SegLimits, spans: &[Span], len: usize) -> bool {
        let mut prefix = Vec::new();
        let mut left = len;
        for s in spans {
            if left == 0 {
                break;
            }
            prefix.push(Span { addr: s.addr, len: s.len.min(left) });
            left -= s.len.min(left);
        }
        let gap = prefix.windows(2).any(|w| l.gap(w[0].end(), w[1].addr));
        !gap && model_count(l, &prefix).len() as u32 <= l.max_segments
    }

    fn gen_limits() -> impl proptest::strategy::Strategy<Value = SegLimits> {
        use proptest::prelude::*;
        let sizes = prop::sample::select(vec![16usize, 48, 64, usize::MAX]);
        let boundaries = prop::sample::select(vec![15usize, 63, usize::MAX]);
        let virts = prop::sample::select(vec![0usize, 7, 15]);
        (1u32..6, sizes, boundaries, virts).prop_map(|(max_segments, size, boundary, virt)| SegLimits {
            max_segments,
            max_segment_size: if virt != 0 { usize::MAX } else { size },
            seg_boundary_mask: boundary,
            virt_boundary_mask: virt,
        })
    }

    /// Spans of multiples of 8 bytes ("blocks"), at addresses from 1000 up,
    /// each either right after the one before or elsewhere.
    fn gen_spans() -> impl proptest::strategy::Strategy<Value = Vec<Span>> {
        use proptest::prelude::*;
        prop::collection::vec((0usize..400, 1usize..12, any::<bool>()), 1..8).prop_map(|raw| {
            let mut spans: Vec<Span> = Vec::new();
            for (at, blocks, follow) in raw {
                let addr = match spans.last() {
                    Some(p) if follow => p.end(),
                    _ => 1000 + at,
                };
                spans.push(Span { addr, len: blocks * 8 });
            }
            spans
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: if cfg!(miri) { 4 } else { 512 },
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// `count` is the byte model's count, with its first and last.
        #[test]
        fn count_matches_the_byte_model(l in gen_limits(), spans in gen_spans()) {
            let model = model_count(&l, &spans);
            let p = l.count(spans.iter().copied());
            proptest::prop_assert_eq!(p.nr as usize, model.len());
            proptest::prop_assert_eq!((p.front, p.back), (model[0], *model.last().unwrap()));
        }

        /// `join` bounds the joined spans' count from above, and a gap refuses.
        #[test]
        fn join_bounds_the_joined_count(l in gen_limits(), a in gen_spans(), b in gen_spans()) {
            let joined: Vec<Span> = a.iter().chain(b.iter()).copied().collect();
            let gap = l.gap(a.last().unwrap().end(), b[0].addr);
            match l.join(&l.count(a.iter().copied()), &l.count(b.iter().copied())) {
                None => proptest::prop_assert!(gap),
                Some(p) => {
                    proptest::prop_assert!(!gap);
                    proptest::prop_assert!(p.nr as usize >= model_count(&l, &joined).len());
                }
            }
        }

        /// A piece is whole blocks, keeps the limits, and one block more
        /// would not.
        #[test]
        fn a_piece_is_the_longest_that_fits(l in gen_limits(), spans in gen_spans(), max_blocks in 1u64..40) {
            let (lbs, total) = (8u64, spans.iter().map(|s| s.len as u64).sum::<u64>());
            let max = max_blocks * lbs;
            let piece = l.piece_bytes(spans.iter().copied(), max, lbs);
            proptest::prop_assert_eq!(piece % lbs, 0);
            proptest::prop_assert!(piece <= max.min(total));
            proptest::prop_assert!(piece == 0 || prefix_fits(&l, &spans, piece as usize));
            let more = piece + lbs;
            if more <= max.min(total) {
                proptest::prop_assert!(!prefix_fits(&l, &spans, more as usize), "{more} bytes fit too");
            }
        }
    }
}
