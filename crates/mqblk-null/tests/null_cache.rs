//! The null device's volatile write cache and power cuts, through the
//! block layer: acknowledged writes live in the cache until FLUSH or FUA
//! makes them durable; a power cut (seeded, at many points of a workload)
//! leaves exactly the durable state, or with `powercut_tear=1` each sector
//! either durable or one of the unflushed writes to it; nothing durable is
//! ever lost.

#![cfg(not(loom))]

use std::collections::HashMap;

use mqblk::{Bio, Buf, Client, ReqFlags};

mod common;
use common::{open, Step};

const SECTOR: usize = 512;

fn read(c: &mut Client, pos: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    c.read_at(&mut out, pos).unwrap();
    out
}

#[test]
fn the_cache_is_advertised_and_flush_and_fua_make_writes_durable() {
    for mode in ["irqmode=0", "irqmode=1"] {
        let dev = open(&format!("null:size=4,memory_backed=1,cache_size=1,{mode}")).unwrap();
        assert!(dev.limits().write_cache && dev.limits().fua, "{mode}");
        let mut c = dev.client();
        c.write_at(&[1; 8192], 0).unwrap(); // flushed below
        c.submit_and_wait(Bio::flush()).unwrap();
        c.write_at(&[2; 4096], 0).unwrap(); // lost
        c.submit_and_wait(Bio::write(4096, Buf::from_slice(&[3; 4096])).with_flags(ReqFlags::FUA)).unwrap();
        c.write_at(&[4; 4096], 8192).unwrap(); // lost
        assert_eq!(read(&mut c, 0, 4096), vec![2; 4096], "{mode}: reads see the cache");
        assert_eq!(dev.power().unwrap().cut().unwrap(), 2, "{mode}: the two pages never flushed");
        assert_eq!(read(&mut c, 0, 4096), vec![1; 4096], "{mode}: the flushed write");
        assert_eq!(read(&mut c, 4096, 4096), vec![3; 4096], "{mode}: the FUA write");
        assert_eq!(read(&mut c, 8192, 4096), vec![0; 4096], "{mode}: never durable");
        // The device goes on: the same process writes and flushes again.
        c.write_at(&[5; 4096], 8192).unwrap();
        c.submit_and_wait(Bio::flush()).unwrap();
        dev.power().unwrap().cut().unwrap();
        assert_eq!(read(&mut c, 8192, 4096), vec![5; 4096], "{mode}");
    }
}

/// A seeded workload of writes (1-16 sectors, some FUA) and flushes (one
/// operation in `flush_every`) over `region_sectors`, cut
/// at operation `cut`. Returns, per sector written, the durable content
/// (a sector's fill byte; 0: never durable) and every value written to it
/// since it was last durable.
fn workload(
    c: &mut Client,
    seed: u64,
    cut: usize,
    region_sectors: u64,
    flush_every: u64,
) -> (HashMap<u64, u8>, HashMap<u64, Vec<u8>>) {
    let mut durable: HashMap<u64, u8> = HashMap::new();
    let mut pending: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut rng = seed;
    for op in 0..cut {
        match common::seeded_step(c, &mut rng, op, region_sectors, flush_every) {
            Step::Flush => {
                for (s, v) in pending.drain() {
                    durable.insert(s, *v.last().unwrap());
                }
            }
            Step::Write { sector, nr, fill, fua } => {
                for s in sector..sector + nr {
                    if fua {
                        // Durable at once; older unflushed writes to the
                        // sector stay in the cache's copy, which holds
                        // this one now.
                        durable.insert(s, fill);
                        pending.remove(&s);
                    } else {
                        pending.entry(s).or_default().push(fill);
                    }
                }
            }
        }
    }
    (durable, pending)
}

/// After a cut: every sector holds its durable value, or (`loose`: a torn
/// cut, or a cache that filled and was written back) a value written to
/// it since. Durable data is never lost either way. Returns the sectors
/// that hold a newer value.
fn check_after_cut(
    c: &mut Client,
    durable: &HashMap<u64, u8>,
    pending: &HashMap<u64, Vec<u8>>,
    region_sectors: u64,
    loose: bool,
    what: &str,
) -> usize {
    let all = read(c, 0, region_sectors as usize * SECTOR);
    let mut torn = 0;
    for (s, sector) in all.chunks(SECTOR).enumerate() {
        let s = s as u64;
        assert!(sector.iter().all(|&b| b == sector[0]), "{what}: sector {s} mixed inside");
        let want = durable.get(&s).copied().unwrap_or(0);
        if sector[0] == want {
            continue;
        }
        // Only a loose cut may show a newer, unflushed value, and only one
        // that was written to this very sector.
        let written = pending.get(&s);
        assert!(
            loose && written.is_some_and(|v| v.contains(&sector[0])),
            "{what}: sector {s} is {} (durable {want}, written since {written:?})",
            sector[0]
        );
        torn += 1;
    }
    torn
}

#[test]
fn a_power_cut_anywhere_leaves_exactly_the_durable_state() {
    let cuts: &[usize] = if cfg!(miri) { &[7] } else { &[0, 1, 5, 17, 40, 99, 150, 300] };
    for seed in [1u64, 2, 3] {
        for &cut in cuts {
            let dev = open("null:size=4,memory_backed=1,cache_size=1,irqmode=1").unwrap();
            let mut c = dev.client();
            let (durable, pending) = workload(&mut c, seed, cut, 2048, 10);
            dev.power().unwrap().cut().unwrap();
            let newer =
                check_after_cut(&mut c, &durable, &pending, 2048, false, &format!("seed {seed} cut at op {cut}"));
            assert_eq!(newer, 0);
        }
    }
}

#[test]
fn a_torn_power_cut_leaves_each_sector_durable_or_last_written() {
    let mut torn_total = 0;
    for seed in [4u64, 5, 6] {
        let dev = open("null:size=4,memory_backed=1,cache_size=1,irqmode=0,powercut_tear=1").unwrap();
        let mut c = dev.client();
        let (durable, pending) = workload(&mut c, seed, 200, 2048, 10);
        let lost = dev.power().unwrap().cut().unwrap();
        assert!(lost > 0);
        check_after_cut(&mut c, &durable, &pending, 2048, true, &format!("torn, seed {seed}"));
        let stats = dev.show_stats();
        let torn: u64 =
            stats.lines().find_map(|l| l.strip_prefix("null/powercut_torn_blocks=")).unwrap().parse().unwrap();
        torn_total += torn;
    }
    assert!(torn_total > 0, "a torn cut wrote some cached blocks");
}

#[test]
fn a_cache_that_fills_writes_back_and_loses_nothing_durable() {
    // 4 MiB of writes through a 1 MiB cache: it fills and is written back
    // between flushes, so some unflushed writes reach the medium too.
    let mut newer_total = 0;
    for seed in [7u64, 8] {
        let dev = open("null:size=8,memory_backed=1,cache_size=1,irqmode=1").unwrap();
        let mut c = dev.client();
        let (durable, pending) = workload(&mut c, seed, 3000, 8192, 2000);
        dev.power().unwrap().cut().unwrap();
        newer_total += check_after_cut(&mut c, &durable, &pending, 8192, true, &format!("filling, seed {seed}"));
    }
    assert!(newer_total > 0, "the cache filled and wrote back unflushed data");
}

#[test]
fn power_cuts_and_cache_keys_are_refused_where_they_mean_nothing() {
    let plain = open("null:size=4,memory_backed=1").unwrap();
    assert!(plain.power().is_none(), "no volatile write cache: no power to cut");
    for (spec, says) in [
        ("null:size=4,cache_size=1", "cache_size needs memory_backed=1"),
        ("null:size=4,memory_backed=1,powercut_tear=1", "powercut_tear needs a write cache"),
        ("null:size=64,memory_backed=1,zoned=1,zone_size=16,cache_size=1", "not supported"),
    ] {
        let e = open(spec).unwrap_err().to_string();
        assert!(e.contains(says), "{spec}: {e}");
    }
}
