//! null_blk's bad blocks on the null device: I/O touching a bad sector
//! fails with EIO and changes nothing (or, with `badblocks_partial_io`,
//! exactly the blocks before it); `badblocks_once` heals a range as it
//! fails; the live `badblocks` attribute adds and clears ranges, and bad
//! attribute writes are refused with a message and change nothing.

#![cfg(not(loom))]

use mqblk::{Bio, Buf, Error, Status};

mod common;
use common::open;
use common::periodic;

fn is_eio(r: Result<(), Error>) -> bool {
    matches!(r, Err(Error::Status(Status::IoErr)))
}

#[test]
fn io_on_a_bad_sector_fails_and_writes_nothing() {
    for mode in ["irqmode=0", "irqmode=1", "irqmode=2,completion_nsec=2000"] {
        // Sectors 64..=71: bytes 32768..36864.
        let dev = open(&format!("null:size=1,memory_backed=1,{mode},badblocks=64-71")).unwrap();
        let mut c = dev.client();
        c.write_at(&[1u8; 4096], 28672).unwrap();
        assert!(is_eio(c.write_at(&[9u8; 8192], 28672)), "{mode}: a write over sector 64");
        assert!(is_eio(c.write_at(&[9u8; 512], 36352)), "{mode}: the range's last sector");
        c.write_at(&[2u8; 512], 36864).unwrap(); // the sector after the range
        let mut out = vec![0u8; 4096];
        c.read_at(&mut out, 28672).unwrap();
        assert!(out.iter().all(|&b| b == 1), "{mode}: the failed write changed nothing");
        assert!(is_eio(c.read_at(&mut out, 32768)), "{mode}: a read of the range");
        assert_eq!(
            dev.attributes().unwrap().get("badblocks").unwrap(),
            "64-71",
            "{mode}: the range stays without once"
        );
        // Every one of them completed once and the device drains.
        assert_eq!(c.in_flight(), 0);
    }
}

#[test]
fn partial_io_transfers_the_blocks_before_the_first_bad_sector() {
    // 4 KiB blocks; sector 20 lies in the third block (sectors 16-23).
    let dev = open("null:size=1,bs=4096,memory_backed=1,irqmode=0,badblocks=20-20,badblocks_partial_io=1").unwrap();
    let mut c = dev.client();
    let data = periodic(16384, 251, |i| (i % 251) as u8);
    let done = c.submit_and_wait_completion(Bio::write(0, Buf::from_slice(&data))).unwrap();
    assert_eq!(done.status, Status::IoErr);
    let mut back = vec![0u8; 16384];
    assert!(is_eio(c.read_at(&mut back, 0)), "a read over the bad sector fails too");
    c.read_at(&mut back[..8192], 0).unwrap();
    assert_eq!(back[..8192], data[..8192], "the two blocks before the bad one were written");
    c.read_at(&mut back[..4096], 12288).unwrap();
    assert!(back[..4096].iter().all(|&b| b == 0), "the block after it was not");
    // A partial read fills the good blocks of the caller's buffer.
    let done = c.submit_and_wait_completion(Bio::read(4096, Buf::from_slice(&[0xee; 12288]))).unwrap();
    assert_eq!(done.status, Status::IoErr);
    let buf = done.segs.into_buf().unwrap();
    assert_eq!(buf[..4096], data[4096..8192], "the block before the bad one was read");
    assert!(buf[4096..].iter().all(|&b| b == 0xee), "the rest was not touched");
}

#[test]
fn once_heals_the_range_it_fails_on() {
    let dev = open("null:size=1,memory_backed=1,irqmode=0,badblocks=8-15:100-100,badblocks_once=1").unwrap();
    let mut c = dev.client();
    assert!(is_eio(c.write_at(&[3u8; 4096], 4096)));
    assert_eq!(dev.attributes().unwrap().get("badblocks").unwrap(), "100-100");
    c.write_at(&[3u8; 4096], 4096).unwrap();
    let mut out = vec![0u8; 4096];
    c.read_at(&mut out, 4096).unwrap();
    assert!(out.iter().all(|&b| b == 3));
}

#[test]
fn a_split_bio_over_a_bad_sector_fails_as_a_whole() {
    // max_sectors=255 (4 KiB-aligned: 248) splits a 512 KiB write in pieces;
    // the last piece hits the bad sector.
    let dev = open("null:size=4,memory_backed=1,irqmode=1,badblocks=1000-1000").unwrap();
    let mut c = dev.client();
    assert!(is_eio(c.write_at(&vec![5u8; 512 << 10], 0)));
    c.write_at(&vec![5u8; 512 << 10], 1 << 20).unwrap();
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn the_attribute_adds_and_clears_ranges_on_a_live_device() {
    let dev = open("null:size=1,memory_backed=1,irqmode=1").unwrap();
    let mut c = dev.client();
    c.write_at(&[4u8; 4096], 0).unwrap();
    dev.attributes().unwrap().set("badblocks", "+0-7").unwrap();
    dev.attributes().unwrap().set("badblocks", "+16-23").unwrap();
    assert_eq!(dev.attributes().unwrap().get("badblocks").unwrap(), "0-7:16-23");
    let mut out = vec![0u8; 4096];
    assert!(is_eio(c.read_at(&mut out, 0)));
    c.read_at(&mut out, 4096).unwrap();
    dev.attributes().unwrap().set("badblocks", "-0-23").unwrap();
    assert_eq!(dev.attributes().unwrap().get("badblocks").unwrap(), "");
    c.read_at(&mut out, 0).unwrap();
    assert!(out.iter().all(|&b| b == 4));
    for (value, says) in [
        ("0-7", "is not +START-END"),
        ("+7-0", "ends before it starts"),
        ("+2040-2048", "past the device's last sector (2047)"),
        ("+x", "is not START-END"),
    ] {
        let e = dev.attributes().unwrap().set("badblocks", value).unwrap_err().to_string();
        assert!(e.contains(says), "{value}: {e}");
    }
    let e = dev.attributes().unwrap().set("blocksize", "4096").unwrap_err().to_string();
    assert!(e.contains("no attribute 'blocksize'"), "{e}");
    assert_eq!(dev.attributes().unwrap().get("badblocks").unwrap(), "", "refused writes changed nothing");
    c.read_at(&mut out, 0).unwrap();
}

#[test]
fn bad_specs_and_unsupported_devices_are_refused() {
    for (spec, says) in [
        ("null:size=1,badblocks=5", "'badblocks'"),
        ("null:size=1,badblocks=9-3", "ends before it starts"),
        ("null:size=1,badblocks=0-2048", "past the device's last sector"),
        ("null:size=1,badblocks_once=2", "'badblocks_once'"),
        ("null:size=64,zoned=1,zone_size=16,badblocks=0-7", "not supported"),
    ] {
        let e = open(spec).unwrap_err().to_string();
        assert!(e.contains(says), "{spec}: {e}");
    }
    let zoned = open("null:size=64,zoned=1,zone_size=16").unwrap();
    let e = zoned.attributes().unwrap().set("badblocks", "+0-7").unwrap_err().to_string();
    assert!(e.contains("zoned"), "{e}");
    let f = tempfile_path();
    std::fs::write(&f, vec![0u8; 1 << 20]).unwrap();
    let file = open(&format!("file:path={}", f.display())).unwrap();
    assert!(file.attributes().is_none(), "the file driver has no live attributes");
    drop(file);
    std::fs::remove_file(f).unwrap();
}

fn tempfile_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("mqblk-badblocks-{}", std::process::id()))
}
