//! A memory-backed null device gives memory back as null_blk does
//! (null_free_sector, from null_handle_discard and null_zone_reset): after
//! a zone reset, a reset all, a discard or a write zeroes (but one with
//! REQ_NOUNMAP, which keeps its pages), the store's
//! stats (`show_stats`: data pages, pages held, chunks resident and
//! mapped) say it holds what the data needs, and write-and-reset cycles
//! map no new memory. Counts, read as soon as each request completes. Each
//! test runs alone in its process under nextest, the project's runner, so
//! no other test's pin holds the store's grace periods back.

#![cfg(not(loom))]

use mqblk::zoned::ZoneMgmt;
use mqblk::{Bio, Client, Device, ReqFlags};

mod common;
use common::filled;
use common::open;

const MIB: u64 = 1 << 20;
/// 16 MiB zones: each reset frees more than a store waits for (8 MiB).
const ZONE_MIB: u64 = 16;
const ZONES: u64 = 4;
const PAGES_PER_MIB: u64 = 256;

/// The store's counts from the device's stats.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct Store {
    data_pages: u64,
    held_pages: u64,
    resident_chunks: u64,
    mapped_chunks: u64,
}

fn store(dev: &Device) -> Store {
    let text = dev.show_stats();
    // The number after `key` on the line that starts with `line`.
    let after = |line: &str, key: &str| -> u64 {
        let rest = text.lines().find(|l| l.starts_with(line)).and_then(|l| l.split_once(key).map(|(_, r)| r));
        let rest = rest.unwrap_or_else(|| panic!("no '{line}...{key}' in the stats:\n{text}"));
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap_or_else(|_| panic!("'{key}' is not followed by a number:\n{text}"))
    };
    let chunks = "null/store_chunks_resident=";
    Store {
        data_pages: after("null/pages=", "="),
        held_pages: after("null/store_pages_held=", "="),
        resident_chunks: after(chunks, "="),
        mapped_chunks: after(chunks, " of "),
    }
}

/// The store holds exactly `data_mib` of data and no page more.
fn assert_holds(dev: &Device, data_mib: u64, what: &str) -> Store {
    let s = store(dev);
    let pages = data_mib * PAGES_PER_MIB;
    assert_eq!((s.data_pages, s.held_pages), (pages, pages), "{what}: data pages, pages held ({s:?})");
    // 2 MiB chunks: the data's, one spare, and one more where a zone's
    // first write met a chunk boundary.
    assert!(s.resident_chunks <= data_mib / 2 + 2, "{what}: {s:?}");
    s
}

/// Writes `mib` MiB of `byte` from `offset`, 1 MiB at a time.
fn fill(c: &mut Client, offset: u64, mib: u64, byte: u8) {
    let data = vec![byte; MIB as usize];
    for i in 0..mib {
        c.write_at(&data, offset + i * MIB).unwrap();
    }
}

// bs=4096: requests split at max_sectors stay whole pages (with 512-byte
// blocks a 255-sector piece ends mid-page, the next piece rewrites that
// page, and the page it replaces waits for a grace period like any
// overwritten page: the arena holds a few pages more than the data until
// the writing thread flushes).
fn zoned() -> Device {
    open(&format!("null:size={},bs=4096,zoned=1,zone_size={ZONE_MIB},memory_backed=1,irqmode=0", ZONES * ZONE_MIB))
        .unwrap()
}

fn plain() -> Device {
    open("null:size=64,bs=4096,memory_backed=1,discard=1,irqmode=0").unwrap()
}

#[test]
fn a_zone_reset_frees_the_zone_and_reset_all_frees_every_zone() {
    let dev = zoned();
    let mut c = dev.client();
    fill(&mut c, 0, ZONES * ZONE_MIB, 0x5a);
    assert_holds(&dev, ZONES * ZONE_MIB, "filled");
    c.submit_and_wait(Bio::zone_mgmt(ZoneMgmt::Reset, ZONE_MIB * MIB)).unwrap();
    assert_holds(&dev, (ZONES - 1) * ZONE_MIB, "zone 1 reset");
    let mut out = vec![0u8; MIB as usize];
    c.read_at(&mut out, 0).unwrap();
    assert!(filled(&out, 0x5a), "zone 0 keeps its data");
    c.submit_and_wait(Bio::zone_reset_all()).unwrap();
    let s = assert_holds(&dev, 0, "reset all");
    assert!(s.resident_chunks <= 1, "only the spare chunk stays resident: {s:?}");
}

#[test]
fn write_and_reset_cycles_map_no_new_memory() {
    let dev = zoned();
    let mut c = dev.client();
    let mut mapped = None;
    for cycle in 0..10u8 {
        fill(&mut c, 0, ZONES * ZONE_MIB, cycle);
        let s = assert_holds(&dev, ZONES * ZONE_MIB, &format!("cycle {cycle} filled"));
        assert_eq!(*mapped.get_or_insert(s.mapped_chunks), s.mapped_chunks, "cycle {cycle} mapped new chunks");
        c.submit_and_wait(Bio::zone_reset_all()).unwrap();
        assert_holds(&dev, 0, &format!("cycle {cycle} reset"));
    }
}

#[test]
fn discard_and_write_zeroes_free_their_pages() {
    let dev = plain();
    let mut c = dev.client();
    fill(&mut c, 0, 64, 0xa5);
    assert_holds(&dev, 64, "filled");
    c.submit_and_wait(Bio::discard(0, 16 * MIB)).unwrap();
    assert_holds(&dev, 48, "16 MiB discarded");
    c.submit_and_wait(Bio::write_zeroes(16 * MIB, 16 * MIB)).unwrap();
    assert_holds(&dev, 32, "16 MiB more zeroed");
    let mut out = vec![1u8; MIB as usize];
    c.read_at(&mut out, 20 * MIB).unwrap();
    assert!(filled(&out, 0), "a zeroed range reads as zeros");
    c.read_at(&mut out, 40 * MIB).unwrap();
    assert!(filled(&out, 0xa5), "the rest keeps its data");
    c.submit_and_wait(Bio::discard(0, 64 * MIB)).unwrap();
    let s = assert_holds(&dev, 0, "all discarded");
    assert!(s.resident_chunks <= 1, "only the spare chunk stays resident: {s:?}");
}

/// A write zeroes with REQ_NOUNMAP zeroes its range and keeps its pages
/// (what a thin-provisioned device promises: the range stays provisioned);
/// the same write zeroes without it frees them.
#[test]
fn a_write_zeroes_with_nounmap_keeps_its_pages() {
    let dev = plain();
    let mut c = dev.client();
    fill(&mut c, 0, 32, 0xa5);
    assert_holds(&dev, 32, "filled");
    c.submit_and_wait(Bio::write_zeroes(0, 16 * MIB).with_flags(ReqFlags::NOUNMAP)).unwrap();
    assert_holds(&dev, 32, "16 MiB zeroed, NOUNMAP");
    let mut out = vec![1u8; MIB as usize];
    c.read_at(&mut out, 8 * MIB).unwrap();
    assert!(filled(&out, 0), "the zeroed range reads as zeros");
    c.read_at(&mut out, 24 * MIB).unwrap();
    assert!(filled(&out, 0xa5), "the rest keeps its data");
    c.submit_and_wait(Bio::write_zeroes(0, 16 * MIB)).unwrap();
    assert_holds(&dev, 16, "the same 16 MiB zeroed again, unmapping");
}
