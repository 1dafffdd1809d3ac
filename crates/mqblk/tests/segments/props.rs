//! The segment tests' property model: any bios of any segments under any
//! limits, written (plugged runs merging) and read back against a byte
//! model of the device.

use mqblk::{Bio, Buf, QueueLimits};
use proptest::prelude::*;

use super::checker::{device, limits, Arena, DEVICE_BYTES};

/// One bio of a generated test: segments as (arena block, blocks), where
/// on the device (in blocks), and whether it goes under the plug.
#[derive(Debug, Clone)]
pub struct GenBio {
    segs: Vec<(usize, usize)>,
    block: usize,
    plugged: bool,
}

impl GenBio {
    pub fn blocks(&self) -> usize {
        self.segs.iter().map(|s| s.1).sum()
    }
}

/// Bios, most of them placed right after the one before on the device so
/// that plugged ones merge (and meet the segment limits when they do).
pub fn gen_bios(max: usize) -> impl Strategy<Value = Vec<GenBio>> {
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
pub const ARENA_BLOCKS: usize = if cfg!(miri) { 32 } else { 512 };
pub const DEVICE_BLOCKS: usize = DEVICE_BYTES / 512;

pub fn gen_bio() -> impl Strategy<Value = GenBio> {
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

pub fn gen_limits() -> impl Strategy<Value = QueueLimits> {
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
pub fn round_trip(limits: QueueLimits, bios: &[GenBio]) -> Result<(), TestCaseError> {
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
