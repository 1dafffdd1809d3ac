//! The null device with `backing_file`: the durable state in a file, so a
//! new device (a restarted process) on the same file gets back exactly
//! what FLUSH and FUA made durable, and, without a cache, every write that
//! completed. Files in use or of another size are refused; a file that
//! fails a write fails the request and never acknowledges it.
//!
//! Every device here is 1 MiB except the error test's (4 MiB, which sets
//! RLIMIT_FSIZE to 2 MiB for the process), so the tests run side by side
//! in one process as well.

#![cfg(not(loom))]
#![cfg(not(miri))] // Miri does not emulate flock, fallocate or SEEK_DATA

use std::collections::HashMap;
use std::path::PathBuf;

use mqblk::{Bio, Buf, Client, Device, ReqFlags};

mod common;
use common::{open, Step};

const SECTOR: usize = 512;
const SIZE_SECTORS: u64 = 2048; // size=1

fn temp_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mqblk-backing-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("medium")
}

fn read(c: &mut Client, pos: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    c.read_at(&mut out, pos).unwrap();
    out
}

/// A seeded workload of `ops` writes (1-16 sectors, one in seven FUA) and
/// flushes (one in ten). Returns the durable fill byte per sector and the
/// last fill byte written per sector.
fn workload(c: &mut Client, seed: u64, ops: usize) -> (HashMap<u64, u8>, HashMap<u64, u8>) {
    let mut durable = HashMap::new();
    let mut last = HashMap::new();
    let mut rng = seed;
    for op in 0..ops {
        match common::seeded_step(c, &mut rng, op, SIZE_SECTORS, 10) {
            Step::Flush => durable.extend(last.iter().map(|(&s, &v)| (s, v))),
            Step::Write { sector, nr, fill, fua } => {
                for s in sector..sector + nr {
                    last.insert(s, fill);
                    if fua {
                        durable.insert(s, fill);
                    }
                }
            }
        }
    }
    (durable, last)
}

/// Every sector of the device holds `want[sector]` (0 where absent).
fn assert_holds(c: &mut Client, want: &HashMap<u64, u8>, what: &str) {
    let all = read(c, 0, SIZE_SECTORS as usize * SECTOR);
    for (s, sector) in all.chunks(SECTOR).enumerate() {
        let w = want.get(&(s as u64)).copied().unwrap_or(0);
        assert!(sector.iter().all(|&b| b == w), "{what}: sector {s} holds {} (want {w})", sector[0]);
    }
}

#[test]
fn a_new_device_on_the_file_gets_exactly_the_durable_state() {
    for seed in [1u64, 2, 3] {
        for (ops, cut) in [(0, true), (37, true), (150, false), (400, true)] {
            let path = temp_file(&format!("restart-{seed}-{ops}"));
            let spec = format!("null:size=1,memory_backed=1,cache_size=1,irqmode=1,backing_file={}", path.display());
            let dev = open(&spec).unwrap();
            assert!(dev.limits().write_cache && dev.limits().fua);
            let (durable, _) = workload(&mut dev.client(), seed, ops);
            // A cut, or the process gone: the cache is lost either way.
            if cut {
                dev.power().unwrap().cut().unwrap();
            }
            drop(dev);
            let dev = open(&spec).unwrap();
            assert_holds(&mut dev.client(), &durable, &format!("seed {seed}, {ops} ops, cut {cut}"));
            drop(dev);
            std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
        }
    }
}

#[test]
fn the_last_handle_to_go_releases_the_file_before_its_drop_returns() {
    // A 1 ms timeout tick keeps the queue's worker thread taking the queue
    // for a moment over and over. Before the last user shut the queue down
    // itself, the worker could be left holding the last reference, and the
    // file would still be locked when the user's drop returned. That window
    // is too narrow to hit here reliably (this test passed without the fix
    // too); Miri's scheduler hit it deterministically (tests/zoned.rs
    // `zone_append_from_several_clients...` under Tree Borrows: "the main
    // thread terminated without waiting for all remaining threads"). This
    // test keeps the behaviour the fix promises: reopen right after drop.
    let path = temp_file("last-handle");
    let spec = format!("null:size=1,memory_backed=1,io_timeout=1,backing_file={}", path.display());
    for round in 0..30u8 {
        let dev = open(&spec).unwrap_or_else(|e| panic!("round {round}: reopen: {e}"));
        let mut c = dev.client();
        c.write_at(&[round; 4096], 0).unwrap();
        assert_eq!(read(&mut c, 0, 4096), vec![round; 4096]);
        // The handle goes on another thread, the client last, here.
        let other = dev.clone();
        std::thread::spawn(move || drop(other)).join().unwrap();
        drop(dev);
        drop(c);
    }
    let dev = open(&spec).unwrap();
    assert_eq!(read(&mut dev.client(), 0, 4096), vec![29u8; 4096], "the last round's write, flushed at shutdown");
    drop(dev);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn without_a_cache_every_completed_write_outlives_the_device_and_discard_makes_holes() {
    let path = temp_file("nocache");
    let spec = format!("null:size=1,memory_backed=1,discard=1,irqmode=0,backing_file={}", path.display());
    let dev = open(&spec).unwrap();
    assert!(dev.limits().write_cache, "the host's page cache is a volatile cache: FLUSH syncs the file");
    let (_, last) = workload(&mut dev.client(), 9, 300);
    drop(dev);
    let dev = open(&spec).unwrap();
    let mut c = dev.client();
    assert_holds(&mut c, &last, "reopened");
    c.write_at(&[7; 65536], 0).unwrap();
    c.submit_and_wait(Bio::discard(4096, 8192)).unwrap();
    let map = dev.block_status().unwrap().extents(0, 65536).unwrap();
    assert_eq!(
        map,
        [(4096, false), (8192, true), (53248, false)],
        "(length, hole) runs: the discarded pages are holes"
    );
    assert_eq!(read(&mut c, 4096, 8192), vec![0; 8192]);
    assert!(dev.show_stats().contains(&format!("null/backing_file={}", path.display())));
    drop(c);
    drop(dev);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn write_through_loses_nothing_at_a_cut_and_advertises_no_cache_in_memory() {
    let dev = open("null:size=1,memory_backed=1,cache_size=1,cache_mode=writethrough,irqmode=0").unwrap();
    assert!(!dev.limits().write_cache && !dev.limits().fua);
    let (_, last) = workload(&mut dev.client(), 11, 200);
    assert_eq!(dev.power().unwrap().cut().unwrap(), 0, "nothing was only in the cache");
    assert_holds(&mut dev.client(), &last, "write-through");
}

#[test]
fn files_and_keys_that_cannot_work_are_refused_by_name() {
    let path = temp_file("refuse");
    let spec = |mb: u64| format!("null:size={mb},memory_backed=1,backing_file={}", path.display());
    let first = open(&spec(1)).unwrap();
    let e = open(&spec(1)).unwrap_err().to_string();
    assert!(e.contains("in use by another device"), "{e}");
    drop(first);
    let e = open(&spec(2)).unwrap_err().to_string();
    assert!(e.contains("holds 1048576 bytes but the device has 2097152"), "{e}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20, "a refused open changes nothing");
    let p = path.display();
    for (spec, says) in [
        (format!("null:size=1,backing_file={p}"), "backing_file needs memory_backed=1"),
        (format!("null:size=64,memory_backed=1,zoned=1,zone_size=16,backing_file={p}"), "not supported"),
        ("null:size=1,memory_backed=1,backing_file=".to_string(), "the path of a file"),
        ("null:size=1,memory_backed=1,backing_file=/nonexistent/dir/f".to_string(), "/nonexistent/dir/f"),
        ("null:size=1,memory_backed=1,cache_mode=writethrough".to_string(), "cache_mode needs a write cache"),
        ("null:size=1,memory_backed=1,cache_size=1,cache_mode=writearound".to_string(), "writethrough"),
    ] {
        let e = open(&spec).unwrap_err().to_string();
        assert!(e.contains(says), "{spec}: {e}");
    }
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// RLIMIT_FSIZE makes the kernel refuse writes past 2 MiB with EFBIG: the
/// write fails instead of being acknowledged; a FLUSH that cannot write
/// the cache back fails and keeps the cached data, which a later FLUSH
/// makes durable.
#[test]
fn a_medium_that_fails_fails_the_request_and_loses_nothing_acknowledged() {
    let path = temp_file("efbig");
    let spec = format!("null:size=4,memory_backed=1,cache_size=1,irqmode=0,backing_file={}", path.display());
    let dev = open(&spec).unwrap();
    let mut c = dev.client();
    let limit = set_fsize_limit(2 << 20);
    let fua = Bio::write(3 << 20, Buf::from_slice(&[5; 4096])).with_flags(ReqFlags::FUA);
    assert!(c.submit_and_wait(fua).is_err(), "a FUA write the file refuses fails");
    c.write_at(&[6; 4096], 3 << 20).unwrap(); // acknowledged from the cache
    assert!(c.submit_and_wait(Bio::flush()).is_err(), "the write-back fails");
    assert_eq!(read(&mut c, 3 << 20, 4096), vec![6; 4096], "the failed flush kept the page");
    assert!(dev.show_stats().contains("null/medium_errors=2"), "{}", dev.show_stats());
    restore_fsize_limit(limit);
    c.submit_and_wait(Bio::flush()).unwrap();
    drop(c);
    drop(dev);
    let dev = open(&spec).unwrap();
    assert_eq!(read(&mut dev.client(), 3 << 20, 4096), vec![6; 4096], "durable after the second flush");
    drop(dev);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

fn set_fsize_limit(bytes: u64) -> libc::rlimit {
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    let new = libc::rlimit { rlim_cur: bytes, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: plain system calls on valid pointers to locals; SIGXFSZ
    // ignored so that the refused write returns EFBIG instead of killing
    // the process.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut old), 0);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &new), 0);
    }
    old
}

fn restore_fsize_limit(old: libc::rlimit) {
    // SAFETY: as in set_fsize_limit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &old) }, 0);
}

#[test]
fn the_typed_config_reaches_the_same_file_and_checks() {
    let path = temp_file("typed");
    let cfg = mqblk_null::NullConfig::new()
        .size_mb(1)
        .irqmode(mqblk_null::IrqMode::None)
        .memory_backed(true)
        .cache_size_mb(1)
        .cache_mode(mqblk_null::CacheMode::Writethrough)
        .backing_file(Some(path.clone()));
    let dev = Device::with_driver(Box::new(mqblk_null::NullDriver::new(cfg.clone()).unwrap())).unwrap();
    dev.client().write_at(&[3; 4096], 8192).unwrap();
    assert_eq!(dev.power().unwrap().cut().unwrap(), 0, "write-through: nothing only cached");
    drop(dev);
    let spec = format!("null:size=1,memory_backed=1,irqmode=0,backing_file={}", path.display());
    let dev = open(&spec).unwrap();
    assert_eq!(read(&mut dev.client(), 8192, 4096), vec![3; 4096], "the spec device reads the typed one's file");
    drop(dev);
    let no_memory = cfg.memory_backed(false).cache_size_mb(0).cache_mode(mqblk_null::CacheMode::Writeback);
    let e = mqblk_null::NullDriver::new(no_memory).err().unwrap().to_string();
    assert!(e.contains("backing_file needs memory_backed=1"), "{e}");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}
