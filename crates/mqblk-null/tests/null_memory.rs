//! The memory-backed null device against a plain byte-vector model, and the
//! bad-input rules: a refused I/O leaves the device unchanged.

#![cfg(not(loom))]

use mqblk::{Bio, Buf, Device, Op, Status, SubmitError};
use proptest::prelude::*;

mod common;
use common::filled;
use common::open;
use common::periodic;
use common::proptest_config;

const DEV_BYTES: u64 = 1 << 20;

fn device(extra: &str) -> Device {
    open(&format!("null:size=1,bs=512,irqmode=0,memory_backed=1,discard=1{extra}")).unwrap()
}

#[test]
fn never_written_blocks_read_as_zeros() {
    let dev = device("");
    let mut c = dev.client();
    let mut out = vec![0xffu8; 8192];
    c.read_at(&mut out, 65536).unwrap();
    assert!(filled(&out, 0));
}

#[test]
fn read_after_write_across_completion_modes() {
    for mode in ["irqmode=0", "irqmode=1", "irqmode=2,completion_nsec=5000"] {
        let dev = open(&format!("null:size=4,memory_backed=1,{mode}")).unwrap();
        let mut c = dev.client();
        let data = periodic(12288, 256, |i| (i * 31 % 256) as u8);
        c.write_at(&data, 4096 * 5).unwrap();
        let mut back = vec![0u8; data.len()];
        c.read_at(&mut back, 4096 * 5).unwrap();
        assert_eq!(back, data, "{mode}");
    }
}

#[test]
fn discard_and_write_zeroes_read_back_zero() {
    let dev = device("");
    let mut c = dev.client();
    c.write_at(&[0x5a; 16384], 0).unwrap();
    c.submit_and_wait(Bio::discard(0, 4096)).unwrap();
    c.submit_and_wait(Bio::write_zeroes(8192, 1024)).unwrap();
    let mut out = vec![0u8; 16384];
    c.read_at(&mut out, 0).unwrap();
    assert!(filled(&out[..4096], 0));
    assert!(filled(&out[4096..8192], 0x5a));
    assert!(filled(&out[8192..9216], 0));
    assert!(filled(&out[9216..], 0x5a));
}

#[test]
fn bad_io_is_refused_and_device_unchanged() {
    let dev = device("");
    let mut c = dev.client();
    c.write_at(&[7u8; 4096], DEV_BYTES - 4096).unwrap();
    type Check = fn(&SubmitError) -> bool;
    let cases: Vec<(Bio, Check)> = vec![
        (Bio::write(DEV_BYTES - 512, Buf::from_slice(&[1; 1024])), |e| matches!(e, SubmitError::OutOfRange { .. })),
        (Bio::write(100, Buf::from_slice(&[1; 512])), |e| matches!(e, SubmitError::Misaligned { .. })),
        (Bio::write(0, Buf::from_slice(&[1; 700])), |e| matches!(e, SubmitError::Misaligned { .. })),
        (Bio::write(0, Buf::new(0)), |e| matches!(e, SubmitError::ZeroLength { op: Op::Write })),
        (Bio::discard(u64::MAX - 511, 512), |e| matches!(e, SubmitError::OutOfRange { .. })),
    ];
    for (bio, check) in cases {
        let what = format!("{:?} at {}", bio.op, bio.offset);
        let rejected = c.submit(bio, 0).unwrap_err();
        assert!(check(&rejected.error), "{what}: {}", rejected.error);
        assert!(!rejected.error.to_string().is_empty());
    }
    assert_eq!(c.in_flight(), 0);
    assert_eq!(dev.stats().dispatched, 1, "refused bios never reach the driver");
    let mut out = vec![0u8; 4096];
    c.read_at(&mut out, DEV_BYTES - 4096).unwrap();
    assert_eq!(out, vec![7u8; 4096]);
    c.read_at(&mut out, 0).unwrap();
    assert_eq!(out, vec![0u8; 4096]);
}

/// `DirectReads::read`'s bytes, joined, and how many slices each call
/// of the callee got.
fn read_direct(dev: &Device, offset: u64, len: u64) -> Option<(Vec<u8>, Vec<usize>)> {
    let (mut bytes, mut calls) = (Vec::new(), Vec::new());
    let r = dev.direct_access()?.read(offset, len, &mut |slices| {
        calls.push(slices.len());
        for s in slices {
            bytes.extend_from_slice(s);
        }
        Ok(())
    })?;
    r.unwrap();
    Some((bytes, calls))
}

/// Direct access lends exactly what a read returns: written pages, holes
/// as zeros, pieces of pages at both ends, and ranges of more than one
/// callee's worth of slices (1 MiB each).
#[test]
fn direct_reads_lend_what_a_read_returns() {
    let dev = open("null:size=4,bs=512,irqmode=0,memory_backed=1").unwrap();
    let mut c = dev.client();
    let data = periodic(20480, 251, |i| (i * 7 % 251) as u8);
    c.write_at(&data, 4096 * 3 + 512).unwrap();
    c.write_at(&data[..4096], (1 << 20) + 4096).unwrap();
    for (offset, len) in
        [(0, 4096), (4096 * 3, 8192), (4096 * 3 + 1024, 4096 * 5), (512, 512), (0, (1 << 20) + 3 * 4096)]
    {
        let mut want = vec![0u8; len as usize];
        c.read_at(&mut want, offset).unwrap();
        let (got, calls) = read_direct(&dev, offset, len).expect("a plain memory device lends");
        assert!(got == want, "offset {offset} len {len}");
        assert!(calls.iter().all(|&n| n <= 256), "at most 1 MiB of pages a call: {calls:?}");
    }
    let (_, calls) = read_direct(&dev, 0, (1 << 20) + 3 * 4096).unwrap();
    assert_eq!(calls, [256, 3], "in order, 256 pages at a time");
    assert_eq!(dev.stats().direct_reads, 6);
    assert_eq!(dev.stats().bios.read, 5, "direct reads make no bios");
}

/// Where a read does more than copy (a cache in front, faults, bad blocks,
/// zones, a completion thread), or is not a read a bio could make, direct
/// access declines and the caller takes the bio path; an error from the
/// callee ends the read.
#[test]
fn direct_reads_decline_where_a_read_does_more_than_copy() {
    for spec in [
        "null:size=4",
        "null:size=4,memory_backed=1,irqmode=1",
        "null:size=4,memory_backed=1,cache_size=1",
        "null:size=4,memory_backed=1,zoned=1,zone_size=1",
        "null:size=4,memory_backed=1,mbps=100",
    ] {
        let dev = open(spec).unwrap();
        assert!(read_direct(&dev, 0, 4096).is_none(), "{spec}");
    }
    let dev = open("null:size=4,bs=512,irqmode=0,memory_backed=1").unwrap();
    for (offset, len) in [(0, 0), (100, 512), (0, 100), (4 << 20, 512), ((4 << 20) - 512, 1024), (u64::MAX - 511, 512)]
    {
        assert!(read_direct(&dev, offset, len).is_none(), "offset {offset} len {len}");
    }
    dev.attributes().unwrap().set("badblocks", "+8-15").unwrap();
    assert!(read_direct(&dev, 0, 4096).is_none(), "bad blocks fail reads: no direct access");
    dev.attributes().unwrap().set("badblocks", "-8-15").unwrap();
    assert!(read_direct(&dev, 0, 4096).is_some());
    let mut calls = 0;
    let r = dev.direct_access().unwrap().read(0, 2 << 20, &mut |_| {
        calls += 1;
        Err(std::io::ErrorKind::BrokenPipe.into())
    });
    assert_eq!(r.unwrap().unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
    assert_eq!(calls, 1, "the first error ends the read");
}

#[test]
fn discard_unsupported_without_the_parameter() {
    let dev = open("null:size=1,irqmode=0,memory_backed=1").unwrap();
    let mut c = dev.client();
    let r = c.submit(Bio::discard(0, 4096), 1).unwrap_err();
    assert_eq!(r.error, SubmitError::NotSupported { op: Op::Discard });
    assert_eq!(r.error.status(), Status::NotSupp);
}

#[derive(Debug, Clone)]
enum ModelOp {
    Write { block: u64, blocks: u64, seed: u8 },
    Read { block: u64, blocks: u64 },
    Discard { block: u64, blocks: u64 },
    Zeroes { block: u64, blocks: u64 },
}

fn model_op() -> impl Strategy<Value = ModelOp> {
    // Up to 600 blocks: above null's 255-sector requests, so some bios split
    // (300 under Miri, which interprets each byte of the pattern: still
    // above 255).
    let max_blocks: u64 = if cfg!(miri) { 300 } else { 600 };
    let range = (0u64..2048, 1u64..max_blocks).prop_map(|(b, n)| (b.min(2048 - n), n));
    prop_oneof![
        (range.clone(), any::<u8>()).prop_map(|((block, blocks), seed)| ModelOp::Write { block, blocks, seed }),
        range.clone().prop_map(|(block, blocks)| ModelOp::Read { block, blocks }),
        range.clone().prop_map(|(block, blocks)| ModelOp::Discard { block, blocks }),
        range.prop_map(|(block, blocks)| ModelOp::Zeroes { block, blocks }),
    ]
}

proptest! {
    #![proptest_config(proptest_config(64))]
    /// Any sequence of writes, reads, discards and write-zeroes reads back
    /// exactly like a Vec<u8> model.
    #[test]
    fn memory_device_matches_vec_model(ops in prop::collection::vec(model_op(), 1..if cfg!(miri) { 8 } else { 40 })) {
        let dev = device("");
        let mut c = dev.client();
        let mut model = vec![0u8; DEV_BYTES as usize];
        for op in ops {
            match op {
                ModelOp::Write { block, blocks, seed } => {
                    let data = periodic(blocks as usize * 512, 256, |i| (i as u8).wrapping_mul(seed | 1).wrapping_add(seed));
                    c.write_at(&data, block * 512).unwrap();
                    model[(block * 512) as usize..((block + blocks) * 512) as usize].copy_from_slice(&data);
                }
                ModelOp::Read { block, blocks } => {
                    let mut out = vec![0u8; (blocks * 512) as usize];
                    c.read_at(&mut out, block * 512).unwrap();
                    prop_assert_eq!(&out[..], &model[(block * 512) as usize..((block + blocks) * 512) as usize]);
                }
                ModelOp::Discard { block, blocks } => {
                    c.submit_and_wait(Bio::discard(block * 512, blocks * 512)).unwrap();
                    model[(block * 512) as usize..((block + blocks) * 512) as usize].fill(0);
                }
                ModelOp::Zeroes { block, blocks } => {
                    c.submit_and_wait(Bio::write_zeroes(block * 512, blocks * 512)).unwrap();
                    model[(block * 512) as usize..((block + blocks) * 512) as usize].fill(0);
                }
            }
        }
        // Finally the whole device, in 64 KiB reads.
        for off in (0..DEV_BYTES).step_by(65536) {
            let mut out = vec![0u8; 65536];
            c.read_at(&mut out, off).unwrap();
            prop_assert_eq!(&out[..], &model[off as usize..off as usize + 65536]);
        }
    }
}
