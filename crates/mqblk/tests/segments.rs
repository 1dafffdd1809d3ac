//! Vectored bios against the segment limits, as block/blk-merge.c applies
//! them: a bio of several segments is one request unless a limit cuts it
//! (`bio_split_rw_at`: max_sectors, max_segments physical segments, a gap
//! at a virt boundary), contiguous memory counts as one physical segment
//! up to max_segment_size and never across seg_boundary_mask
//! (`get_max_segment_size`), and a merge never passes max_segments or
//! makes a gap (`ll_back_merge_fn`, `bio_will_gap`). A checking driver
//! verifies every request it is given against the limits and keeps the
//! data, and a byte model says what the device must hold.
//!
//! Runs under Miri (both borrow models, scripts/miri.sh): the segment
//! vector's ownership, a split piece's view of its parent's segments, a
//! merged bio's segments and the completion that gives the vector back;
//! the tests of a limit's rule alone run natively only.
#![cfg(not(loom))]

use std::sync::{Arc, Mutex};

use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq};
use mqblk::{Bio, BioVec, Buf, Device, Op, QueueLimits, Status, SubmitError, TagSetConfig, BIO_MAX_VECS};
use proptest::prelude::*;

/// The device: 1 MiB of 512-byte blocks (128 KiB under Miri, which
/// interprets every byte the model and the driver copy).
const DEVICE_BYTES: usize = if cfg!(miri) { 64 << 10 } else { 1 << 20 };

/// What the driver saw of one request.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    op: Op,
    pos: u64,
    len: u64,
    nr_bios: u32,
    nr_segments: u32,
    /// The physical segments' lengths, as `for_each_phys_segment` mapped them.
    phys: Vec<usize>,
}

#[derive(Default)]
struct State {
    mem: Mutex<Vec<u8>>,
    seen: Mutex<Vec<Seen>>,
    violations: Mutex<Vec<String>>,
}

/// Keeps the data and checks every request against the limits.
struct Checker {
    limits: QueueLimits,
    state: Arc<State>,
}

impl Checker {
    /// Every way `rq` may break the limits, as messages.
    fn check(&self, rq: &mut Rq) -> Vec<String> {
        let l = &self.limits;
        let mut phys = Vec::new();
        rq.for_each_phys_segment(|addr, len| phys.push((addr as usize, len)));
        let mut bad = Vec::new();
        if phys.len() as u32 > rq.nr_phys_segments() || rq.nr_phys_segments() > l.max_segments {
            bad.push(format!("{} mapped, {} counted, max {}", phys.len(), rq.nr_phys_segments(), l.max_segments));
        }
        let boundary = usize::try_from(l.seg_boundary_mask).unwrap_or(usize::MAX);
        let virt = l.virt_boundary_mask as usize;
        for (i, &(addr, len)) in phys.iter().enumerate() {
            if len > l.max_segment_size as usize || len == 0 {
                bad.push(format!("segment {i} of {len} bytes"));
            }
            if addr | boundary != (addr + len - 1) | boundary {
                bad.push(format!("segment {i} crosses the boundary"));
            }
            if let Some(&(next, _)) = phys.get(i + 1) {
                if next != addr + len && virt != 0 && ((addr + len) | next) & virt != 0 {
                    bad.push(format!("a gap after segment {i}"));
                }
            }
        }
        let mapped: usize = phys.iter().map(|p| p.1).sum();
        if rq.op().has_data() && mapped as u64 != rq.len_bytes() {
            bad.push(format!("{mapped} bytes mapped of {}", rq.len_bytes()));
        }
        if rq.len_bytes() > l.max_transfer_bytes() {
            bad.push(format!("{} bytes past max_sectors", rq.len_bytes()));
        }
        let seen = Seen {
            op: rq.op(),
            pos: rq.pos_bytes(),
            len: rq.len_bytes(),
            nr_bios: rq.nr_bios(),
            nr_segments: rq.nr_segments(),
            phys: phys.iter().map(|p| p.1).collect(),
        };
        self.state.seen.lock().unwrap().push(seen);
        bad
    }
}

impl Driver for Checker {
    fn name(&self) -> &str {
        "checker"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, 16)
    }
    fn limits(&self) -> QueueLimits {
        self.limits.clone()
    }
    fn queue_rq(&self, _hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
        let bad = self.check(&mut rq);
        self.state.violations.lock().unwrap().extend(bad);
        let mut mem = self.state.mem.lock().unwrap();
        match rq.op() {
            Op::Write => {
                for (pos, data) in rq.segments() {
                    mem[pos as usize..][..data.len()].copy_from_slice(data);
                }
            }
            Op::Read => {
                for (pos, data) in rq.segments_mut() {
                    let len = data.len();
                    data.copy_from_slice(&mem[pos as usize..][..len]);
                }
            }
            _ => {}
        }
        drop(mem);
        rq.complete(Status::Ok);
        QueueRqResult::Queued
    }
}

/// Limits of a 1 MiB device of 512-byte blocks, changed by `set`.
fn limits(set: impl FnOnce(&mut QueueLimits)) -> QueueLimits {
    let mut l = QueueLimits::new(DEVICE_BYTES as u64, 512);
    l.max_sectors = 2048;
    set(&mut l);
    l
}

fn device(limits: QueueLimits) -> (Device, Arc<State>) {
    let state = Arc::new(State { mem: Mutex::new(vec![0; DEVICE_BYTES]), ..State::default() });
    let dev = Device::with_driver(Box::new(Checker { limits, state: state.clone() })).unwrap();
    (dev, state)
}

/// Memory the tests carve segments from: its start is 64 KiB aligned, so
/// where a segment lies against a boundary is known.
struct Arena {
    bytes: Vec<u8>,
    start: usize,
}

impl Arena {
    const ALIGN: usize = 64 << 10;

    fn new(len: usize) -> Self {
        let bytes = vec![0u8; len + Self::ALIGN];
        let start = (bytes.as_ptr() as usize).next_multiple_of(Self::ALIGN) - bytes.as_ptr() as usize;
        Self { bytes, start }
    }

    /// `len` bytes at `at` (from the aligned start) as a segment.
    fn seg(&mut self, at: usize, len: usize) -> Buf {
        let p = self.bytes[self.start + at..][..len].as_mut_ptr();
        // SAFETY: the arena outlives every bio of the test, and the test
        // touches its bytes only between I/Os.
        unsafe { Buf::borrowed(p, len) }
    }

    fn bytes(&self, at: usize, len: usize) -> &[u8] {
        &self.bytes[self.start + at..][..len]
    }

    /// A pattern of period 251 (prime, so no two 512-byte blocks match),
    /// copied a period at a time: Miri interprets a byte loop slowly.
    fn fill(&mut self, at: usize, len: usize, seed: u8) {
        let period: Vec<u8> = (0..251u8).map(|i| i.wrapping_mul(13).wrapping_add(seed)).collect();
        for chunk in self.bytes[self.start + at..][..len].chunks_mut(251) {
            chunk.copy_from_slice(&period[..chunk.len()]);
        }
    }
}

/// Writes `segs` (arena ranges) at `offset` as one bio; returns what the
/// driver saw for it.
fn writev(dev: &Device, state: &State, arena: &mut Arena, offset: u64, segs: &[(usize, usize)]) -> Vec<Seen> {
    state.seen.lock().unwrap().clear();
    let bufs: Vec<Buf> = segs.iter().map(|&(at, len)| arena.seg(at, len)).collect();
    dev.client().submit_and_wait(Bio::writev(offset, bufs)).unwrap();
    assert_eq!(*state.violations.lock().unwrap(), Vec::<String>::new());
    state.seen.lock().unwrap().clone()
}

/// `n` segments of `len` bytes, `stride` bytes apart in the arena.
fn spaced(n: usize, len: usize, stride: usize) -> Vec<(usize, usize)> {
    (0..n).map(|i| (i * stride, len)).collect()
}

#[test]
fn a_vectored_bio_is_one_request_within_the_limits() {
    let (dev, state) = device(limits(|_| {}));
    let mut arena = Arena::new(256 << 10);
    let seen = writev(&dev, &state, &mut arena, 8192, &spaced(8, 4096, 8192));
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    assert_eq!((s.pos, s.len, s.nr_bios, s.nr_segments, s.phys.len()), (8192, 32768, 1, 8, 8));
}

#[test]
fn max_segments_splits_a_bio_of_separate_segments() {
    let (dev, state) = device(limits(|l| l.max_segments = 4));
    let mut arena = Arena::new(256 << 10);
    let seen = writev(&dev, &state, &mut arena, 0, &spaced(10, 4096, 8192));
    let shape: Vec<(u64, u64, usize)> = seen.iter().map(|s| (s.pos, s.len, s.phys.len())).collect();
    assert_eq!(shape, [(0, 16384, 4), (16384, 16384, 4), (32768, 8192, 2)]);
}

#[test]
#[cfg_attr(miri, ignore = "the limits' rules, no unsafe code of their own: natively only")]
fn contiguous_segments_count_as_one_physical_segment() {
    let (dev, state) = device(limits(|l| l.max_segments = 1));
    let mut arena = Arena::new(256 << 10);
    // Ten 4 KiB segments back to back: 40 KiB of contiguous memory.
    let seen = writev(&dev, &state, &mut arena, 0, &spaced(10, 4096, 4096));
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].nr_segments, seen[0].phys.clone()), (10, vec![40960]));
}

#[test]
#[cfg_attr(miri, ignore = "the limits' rules, no unsafe code of their own: natively only")]
fn max_segment_size_makes_a_long_run_several_segments() {
    let (dev, state) = device(limits(|l| {
        l.max_segments = 2;
        l.max_segment_size = 65536;
    }));
    let mut arena = Arena::new(512 << 10);
    // 256 KiB contiguous in two segments: four 64 KiB physical segments,
    // two to a request.
    let seen = writev(&dev, &state, &mut arena, 0, &[(0, 128 << 10), (128 << 10, 128 << 10)]);
    let shape: Vec<(u64, Vec<usize>)> = seen.iter().map(|s| (s.len, s.phys.clone())).collect();
    assert_eq!(shape, [(131072, vec![65536, 65536]), (131072, vec![65536, 65536])]);
}

#[test]
#[cfg_attr(miri, ignore = "the limits' rules, no unsafe code of their own: natively only")]
fn the_segment_boundary_cuts_a_physical_segment() {
    let (dev, state) = device(limits(|l| {
        l.seg_boundary_mask = 0xffff;
        l.max_segment_size = u32::MAX;
    }));
    let mut arena = Arena::new(256 << 10);
    // 8 KiB from 4 KiB below a 64 KiB line: two physical segments.
    let seen = writev(&dev, &state, &mut arena, 0, &[(60 << 10, 8192)]);
    assert_eq!(seen[0].phys, [4096, 4096]);
}

#[test]
#[cfg_attr(miri, ignore = "the limits' rules, no unsafe code of their own: natively only")]
fn a_gap_at_the_virt_boundary_splits_the_bio() {
    let (dev, state) = device(limits(|l| {
        l.virt_boundary_mask = 4095;
        l.max_segment_size = u32::MAX;
    }));
    let mut arena = Arena::new(256 << 10);
    // 4 KiB, then 1 KiB ending off the boundary, then 4 KiB elsewhere: a
    // gap before the third.
    let seen = writev(&dev, &state, &mut arena, 0, &[(0, 4096), (16384, 1024), (32768, 4096)]);
    let shape: Vec<(u64, u64, u32)> = seen.iter().map(|s| (s.pos, s.len, s.nr_segments)).collect();
    assert_eq!(shape, [(0, 5120, 2), (5120, 4096, 1)]);
    // Starting off the boundary is a gap too.
    let seen = writev(&dev, &state, &mut arena, 0, &[(0, 4096), (16384 + 512, 4096)]);
    assert_eq!(seen.len(), 2);
}

#[test]
fn max_sectors_cuts_inside_a_segment() {
    let (dev, state) = device(limits(|l| l.max_sectors = 16));
    let mut arena = Arena::new(256 << 10);
    arena.fill(0, 20480, 3);
    let seen = writev(&dev, &state, &mut arena, 4096, &[(0, 12288), (65536, 8192)]);
    let shape: Vec<(u64, u64, u32)> = seen.iter().map(|s| (s.pos, s.len, s.nr_segments)).collect();
    // 8 KiB pieces: the second straddles the two segments.
    assert_eq!(shape, [(4096, 8192, 1), (12288, 8192, 2), (20480, 4096, 1)]);
    let mem = state.mem.lock().unwrap();
    assert_eq!(&mem[4096..16384], arena.bytes(0, 12288));
    assert_eq!(&mem[16384..24576], arena.bytes(65536, 8192));
}

/// Bios of buffers at `ats` (4 KiB each), written back to back on the
/// device under one plug: the requests the driver saw.
fn plugged_writes(dev: &Device, state: &State, arena: &mut Arena, ats: &[usize]) -> Vec<Seen> {
    state.seen.lock().unwrap().clear();
    let mut c = dev.client();
    {
        let mut plug = c.plug();
        for (i, &at) in ats.iter().enumerate() {
            plug.submit(Bio::writev(i as u64 * 4096, vec![arena.seg(at, 4096)]), i as u64).unwrap();
        }
    }
    c.drain();
    assert_eq!(*state.violations.lock().unwrap(), Vec::<String>::new());
    state.seen.lock().unwrap().clone()
}

#[test]
fn merges_count_physical_segments() {
    let (dev, state) = device(limits(|l| l.max_segments = 2));
    let mut arena = Arena::new(256 << 10);
    // Contiguous buffers coalesce: six bios, one physical segment.
    let seen = plugged_writes(&dev, &state, &mut arena, &[0, 4096, 8192, 12288, 16384, 20480]);
    assert_eq!(seen.iter().map(|s| (s.nr_bios, s.phys.len())).collect::<Vec<_>>(), [(6, 1)]);
    // Apart: two bios a request.
    let seen = plugged_writes(&dev, &state, &mut arena, &[0, 8192, 16384, 24576, 32768, 40960]);
    assert_eq!(seen.iter().map(|s| s.nr_bios).collect::<Vec<_>>(), [2, 2, 2]);
}

#[test]
#[cfg_attr(miri, ignore = "the limits' rules, no unsafe code of their own: natively only")]
fn a_merge_that_would_make_a_gap_is_refused() {
    let (dev, state) = device(limits(|l| {
        l.virt_boundary_mask = 4095;
        l.max_segment_size = u32::MAX;
    }));
    let mut arena = Arena::new(256 << 10);
    let seen = plugged_writes(&dev, &state, &mut arena, &[0, 16384]);
    assert_eq!(seen.len(), 1, "both on the boundary: they merge");
    let seen = plugged_writes(&dev, &state, &mut arena, &[0, 16384 + 512]);
    assert_eq!(seen.len(), 2, "the second starts off the boundary");
}

#[test]
fn a_bio_the_limits_cannot_split_is_refused_whole() {
    let mut l = QueueLimits::new(DEVICE_BYTES as u64, 4096);
    (l.max_segments, l.seg_boundary_mask) = (1, 0xfff);
    let (dev, _state) = device(l);
    let mut arena = Arena::new(64 << 10);
    let segs = vec![arena.seg(512, 4096)];
    let array = segs.as_ptr();
    let refused = dev.client().submit(Bio::writev(0, segs), 1).unwrap_err();
    assert!(matches!(refused.error, SubmitError::Unsplittable { at: 0, max_segments: 1, .. }), "{:?}", refused.error);
    let back = refused.bio.segs.into_vec();
    assert_eq!(back.as_ptr(), array, "the caller's vector back");
    assert_eq!(dev.busy_tags(), 0);
}

#[test]
#[cfg_attr(miri, ignore = "the limits' rules, no unsafe code of their own: natively only")]
fn bad_segments_are_refused_by_name() {
    let (dev, _state) = device(limits(|_| {}));
    let mut arena = Arena::new(256 << 10);
    let mut c = dev.client();
    let odd = Bio::writev(0, vec![arena.seg(0, 4096), arena.seg(8192, 100)]);
    let e = c.submit(odd, 1).unwrap_err().error;
    assert_eq!(e, SubmitError::BadSegment { index: 1, len: 100, logical_block_size: 512 });
    let many: Vec<Buf> = (0..=BIO_MAX_VECS).map(|i| arena.seg(i * 512, 512)).collect();
    let e = c.submit(Bio::readv(0, many), 2).unwrap_err().error;
    assert_eq!(e, SubmitError::TooManySegments { nr: BIO_MAX_VECS + 1, max: BIO_MAX_VECS });
    let mut short = Bio::writev(0, vec![arena.seg(0, 4096)]);
    short.len = 8192;
    assert!(matches!(c.submit(short, 3).unwrap_err().error, SubmitError::BadBuffer { .. }));
    assert!(matches!(c.submit(Bio::readv(0, Vec::new()), 4).unwrap_err().error, SubmitError::BadBuffer { .. }));
}

#[test]
fn the_completion_gives_the_callers_vector_back() {
    let (dev, _state) = device(limits(|l| l.max_segments = 2));
    let mut arena = Arena::new(256 << 10);
    let mut segs = Vec::with_capacity(BIO_MAX_VECS);
    segs.extend((0..5).map(|i| arena.seg(i * 8192, 4096)));
    let (array, capacity) = (segs.as_ptr(), segs.capacity());
    // Split in three pieces (two segments a request), completed once.
    let done = dev.client().submit_and_wait_completion(Bio::readv(0, segs)).unwrap();
    assert!(done.status.is_ok());
    let back = done.segs.into_vec();
    assert_eq!((back.as_ptr(), back.capacity(), back.len()), (array, capacity, 5));
}

/// One bio of a generated test: segments as (arena block, blocks), where
/// on the device (in blocks), and whether it goes under the plug.
#[derive(Debug, Clone)]
struct GenBio {
    segs: Vec<(usize, usize)>,
    block: usize,
    plugged: bool,
}

impl GenBio {
    fn blocks(&self) -> usize {
        self.segs.iter().map(|s| s.1).sum()
    }
}

/// Bios, most of them placed right after the one before on the device so
/// that plugged ones merge (and meet the segment limits when they do).
fn gen_bios(max: usize) -> impl Strategy<Value = Vec<GenBio>> {
    prop::collection::vec((gen_bio(), prop::bool::weighted(0.7)), 1..max).prop_map(|raw| {
        let mut bios: Vec<GenBio> = Vec::new();
        for (mut b, follow) in raw {
            if let Some(prev) = bios.last() {
                let end = prev.block + prev.blocks();
                if follow && end + b.blocks() <= DEVICE_BLOCKS {
                    b.block = end;
                }
            }
            bios.push(b);
        }
        bios
    })
}

/// Arena and device sizes in 512-byte blocks (small under Miri).
const ARENA_BLOCKS: usize = if cfg!(miri) { 32 } else { 512 };
const DEVICE_BLOCKS: usize = DEVICE_BYTES / 512;

fn gen_bio() -> impl Strategy<Value = GenBio> {
    let max_segs = if cfg!(miri) { 4 } else { 12 };
    (prop::collection::vec((0..ARENA_BLOCKS - 16, 1usize..16, any::<bool>()), 1..max_segs), any::<bool>())
        .prop_map(|(raw, plugged)| {
            // Half the time a segment follows the one before it in memory.
            let mut segs: Vec<(usize, usize)> = Vec::new();
            for (at, blocks, follow) in raw {
                let at = match segs.last() {
                    Some(&(p, n)) if follow && p + n + blocks <= ARENA_BLOCKS => p + n,
                    _ => at,
                };
                segs.push((at, blocks));
            }
            (segs, plugged)
        })
        .prop_flat_map(|(segs, plugged)| {
            let blocks: usize = segs.iter().map(|s| s.1).sum();
            (Just(segs), 0..DEVICE_BLOCKS - blocks, Just(plugged))
        })
        .prop_map(|(segs, block, plugged)| GenBio { segs, block, plugged })
}

fn gen_limits() -> impl Strategy<Value = QueueLimits> {
    let sizes = prop::sample::select(vec![4096u32, 8192, 65536, u32::MAX]);
    let boundaries = prop::sample::select(vec![0xfffu64, 0x1fff, 0xffff, u64::MAX]);
    let virts = prop::sample::select(vec![0u64, 0, 511, 4095]);
    let sectors = prop::sample::select(vec![8u32, 16, 64, 255, 2048]);
    (1u32..8, sizes, boundaries, virts, sectors).prop_map(|(segments, size, boundary, virt, sectors)| {
        limits(|l| {
            l.max_segments = segments;
            l.max_segment_size = if virt != 0 { u32::MAX } else { size };
            l.seg_boundary_mask = boundary;
            l.virt_boundary_mask = virt;
            l.max_sectors = sectors;
        })
    })
}

/// Writes every bio (a run of plugged ones under one plug, in order:
/// they merge), then reads each range back through a vectored read of
/// the same segment lengths, against a byte model of the device. The
/// arena is filled once, so a plugged write's data is what the model took
/// whenever the request is issued.
fn round_trip(limits: QueueLimits, bios: &[GenBio]) -> Result<(), TestCaseError> {
    let (dev, state) = device(limits);
    let mut arena = Arena::new(ARENA_BLOCKS * 512);
    arena.fill(0, ARENA_BLOCKS * 512, 5);
    let mut model = vec![0u8; DEVICE_BYTES];
    let mut c = dev.client_with_capacity(64);
    let mut i = 0;
    while i < bios.len() {
        let run = if bios[i].plugged { bios[i..].iter().take_while(|b| b.plugged).count() } else { 1 };
        let mut plug = c.plug();
        for (k, b) in bios[i..i + run].iter().enumerate() {
            let mut at = b.block * 512;
            let mut segs = Vec::with_capacity(b.segs.len());
            for &(a, n) in &b.segs {
                model[at..][..n * 512].copy_from_slice(arena.bytes(a * 512, n * 512));
                segs.push(arena.seg(a * 512, n * 512));
                at += n * 512;
            }
            let bio = Bio::writev(b.block as u64 * 512, segs);
            plug.submit(bio, (i + k) as u64).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        drop(plug);
        c.drain();
        i += run;
    }
    prop_assert_eq!(state.violations.lock().unwrap().clone(), Vec::<String>::new());
    prop_assert!(state.mem.lock().unwrap()[..] == model[..], "the device differs from the model");
    for b in bios {
        // Owned buffers of the same lengths: a read's segments never overlap.
        let segs: Vec<Buf> = b.segs.iter().map(|&(_, n)| Buf::new(n * 512)).collect();
        let done = c.submit_and_wait_completion(Bio::readv(b.block as u64 * 512, segs)).unwrap();
        prop_assert!(done.status.is_ok());
        let mut at = b.block * 512;
        for seg in done.segs.into_vec() {
            prop_assert!(seg[..] == model[at..][..seg.len()]);
            at += seg.len();
        }
    }
    prop_assert_eq!(state.violations.lock().unwrap().clone(), Vec::<String>::new());
    prop_assert_eq!(dev.busy_tags(), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 256 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Any bios of any segments, under any limits: the data lands where it
    /// belongs and every request the driver sees keeps every limit.
    #[test]
    fn vectored_bios_round_trip_within_every_limit(
        limits in gen_limits(),
        bios in gen_bios(if cfg!(miri) { 4 } else { 12 }),
    ) {
        round_trip(limits, &bios)?;
    }
}

#[test]
fn vectored_reads_and_writes_through_a_bio_vec() {
    let (dev, _state) = device(limits(|_| {}));
    let mut c = dev.client();
    let segs = BioVec::from(vec![Buf::from_slice(&[1; 512]), Buf::from_slice(&[2; 1024])]);
    c.submit_and_wait(Bio::writev(0, segs)).unwrap();
    let back = c.submit_and_wait(Bio::readv(0, vec![Buf::new(1024), Buf::new(512)])).unwrap().into_vec();
    assert_eq!((back[0][0], back[0][600], back[1][0], back[1][511]), (1, 2, 2, 2));
}

/// A caller's iovec array, borrowed as it is (`BioVec::from_iovecs`, the C
/// library's readv and writev): split by max_sectors and max_segments,
/// merged under a plug, read back into another array.
#[test]
fn a_borrowed_iovec_array_is_split_merged_and_read_back() {
    let (dev, state) = device(limits(|l| {
        l.max_sectors = 16;
        l.max_segments = 2;
    }));
    let mut arena = Arena::new(64 << 10);
    arena.fill(0, 16384, 9);
    let at = |arena: &mut Arena, off: usize| arena.bytes[arena.start + off..].as_mut_ptr();
    let iov = |base: *mut u8, len| libc::iovec { iov_base: base.cast(), iov_len: len };
    // Three segments apart, 12 KiB: pieces of 8 KiB and 4 KiB.
    let out = [iov(at(&mut arena, 0), 4096), iov(at(&mut arena, 8192), 2048), iov(at(&mut arena, 12288), 6144)];
    let mut c = dev.client();
    {
        let mut plug = c.plug();
        // SAFETY: `out` and the arena outlive the I/O, untouched meanwhile.
        plug.submit(Bio::writev(0, unsafe { BioVec::from_iovecs(out.as_ptr(), 3) }), 1).unwrap();
        // A bio right after it merges where the limits allow.
        plug.submit(Bio::writev(12288, vec![arena.seg(32768, 512)]), 2).unwrap();
    }
    c.drain();
    assert_eq!(*state.violations.lock().unwrap(), Vec::<String>::new());
    let back = [iov(at(&mut arena, 40960), 8192), iov(at(&mut arena, 49152), 4608)];
    // SAFETY: as above; the read's segments do not overlap.
    let done = c.submit_and_wait_completion(Bio::readv(0, unsafe { BioVec::from_iovecs(back.as_ptr(), 2) })).unwrap();
    assert!(done.status.is_ok() && done.segs.iovecs().is_some_and(|v| v.len() == 2));
    drop(done);
    let mut want = arena.bytes(0, 4096).to_vec();
    want.extend_from_slice(arena.bytes(8192, 2048));
    want.extend_from_slice(arena.bytes(12288, 6144));
    want.extend_from_slice(arena.bytes(32768, 512));
    assert!(arena.bytes(40960, 12800) == &want[..]);
    assert_eq!(dev.busy_tags(), 0);
}

/// An iovec array its caller checked (`BioVec::from_iovecs_checked`, what
/// the C library's readv/writev build): the same requests and bytes as
/// unchecked, on the plain path (one request) and split (`max_sectors`).
#[test]
fn a_checked_iovec_array_is_served_as_an_unchecked_one() {
    for max_sectors in [2048, 16] {
        let (dev, state) = device(limits(|l| l.max_sectors = max_sectors));
        let mut arena = Arena::new(64 << 10);
        arena.fill(0, 16384, 3);
        let at = |arena: &mut Arena, off: usize| arena.bytes[arena.start + off..].as_mut_ptr();
        let iov = |base: *mut u8, len| libc::iovec { iov_base: base.cast(), iov_len: len };
        let out = [iov(at(&mut arena, 0), 4096), iov(at(&mut arena, 8192), 8192)];
        let mut c = dev.client();
        // SAFETY: `out` and the arena outlive the I/O, untouched meanwhile;
        // two lengths, multiples of 512, 12 KiB: the bio's length.
        let w =
            c.submit_and_wait_completion(Bio::writev(4096, unsafe { BioVec::from_iovecs_checked(out.as_ptr(), 2) }));
        assert!(w.unwrap().status.is_ok());
        let back = [iov(at(&mut arena, 32768), 6144), iov(at(&mut arena, 40960), 6144)];
        // SAFETY: as above.
        let r =
            c.submit_and_wait_completion(Bio::readv(4096, unsafe { BioVec::from_iovecs_checked(back.as_ptr(), 2) }));
        assert!(r.unwrap().status.is_ok());
        assert_eq!(*state.violations.lock().unwrap(), Vec::<String>::new());
        let seen = state.seen.lock().unwrap();
        let sizes: Vec<usize> = seen.iter().map(|s| s.len as usize).collect();
        let want: &[usize] = if max_sectors == 16 { &[8192, 4096, 8192, 4096] } else { &[12288, 12288] };
        assert_eq!(sizes, want, "max_sectors {max_sectors}");
        drop(seen);
        let mut data = arena.bytes(0, 4096).to_vec();
        data.extend_from_slice(arena.bytes(8192, 8192));
        let mut read = arena.bytes(32768, 6144).to_vec();
        read.extend_from_slice(arena.bytes(40960, 6144));
        assert!(read == data);
        assert_eq!(dev.busy_tags(), 0);
    }
}

/// A checked iovec array of more segments than a request may carry is
/// split by `max_segments` as any vectored bio is (never the plain path).
#[test]
fn a_checked_iovec_array_over_max_segments_is_split() {
    let (dev, state) = device(limits(|l| l.max_segments = 2));
    let mut arena = Arena::new(64 << 10);
    arena.fill(0, 24576, 5);
    let at = |arena: &mut Arena, off: usize| arena.bytes[arena.start + off..].as_mut_ptr();
    let iov = |base: *mut u8, len| libc::iovec { iov_base: base.cast(), iov_len: len };
    let out = [iov(at(&mut arena, 0), 4096), iov(at(&mut arena, 8192), 4096), iov(at(&mut arena, 16384), 4096)];
    let mut c = dev.client();
    // SAFETY: `out` and the arena outlive the I/O; three lengths, multiples
    // of 512, summing to the bio's 12 KiB.
    let w = c.submit_and_wait_completion(Bio::writev(0, unsafe { BioVec::from_iovecs_checked(out.as_ptr(), 3) }));
    assert!(w.unwrap().status.is_ok());
    assert_eq!(*state.violations.lock().unwrap(), Vec::<String>::new());
    let sizes: Vec<u64> = state.seen.lock().unwrap().iter().map(|s| s.len).collect();
    assert_eq!(sizes, [8192, 4096]);
    let mem = state.mem.lock().unwrap();
    assert!(mem[..4096] == *arena.bytes(0, 4096) && mem[4096..8192] == *arena.bytes(8192, 4096));
    assert!(mem[8192..12288] == *arena.bytes(16384, 4096));
    drop(mem);
    assert_eq!(dev.busy_tags(), 0);
}

/// `from_iovecs_checked`'s contract is checked in debug builds: a length
/// that is not a whole number of blocks is caught at submission.
#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "from_iovecs_checked's contract")]
fn a_checked_iovec_array_that_breaks_its_contract_is_caught_in_debug_builds() {
    let (dev, _state) = device(limits(|_| {}));
    let mut arena = Arena::new(16 << 10);
    let base = arena.bytes[arena.start..].as_mut_ptr();
    let iov =
        [libc::iovec { iov_base: base.cast(), iov_len: 1000 }, libc::iovec { iov_base: base.cast(), iov_len: 24 }];
    let mut c = dev.client();
    // SAFETY: the memory outlives the I/O; the lengths break the contract
    // on purpose (1000 is no multiple of 512), which is what is tested.
    let _ = c.submit_and_wait_completion(Bio::readv(0, unsafe { BioVec::from_iovecs_checked(iov.as_ptr(), 2) }));
}
