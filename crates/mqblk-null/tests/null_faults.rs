//! null_blk's fault injection driving the block layer's own paths: a
//! `timeout` request is lost until the timeout handler ends it with
//! ETIMEDOUT, a `requeue` request goes back busy and is dispatched again,
//! and under both (and bad blocks) every bio completes exactly once with
//! the status its fate calls for, with every scheduler and wake policy, and
//! the device drains and shuts down.

#![cfg(not(loom))]

use std::collections::HashMap;

use mqblk::{Bio, Buf, Completion, Device, Status};

mod common;
use common::open;
use common::periodic;

/// The count a `null/NAME=N` line of the stats dump reports.
fn stat(dev: &Device, name: &str) -> u64 {
    let text = dev.show_stats();
    let key = format!("null/{name}=");
    let line = text.lines().find(|l| l.starts_with(&key)).unwrap_or_else(|| panic!("no {key} in:\n{text}"));
    line[key.len()..].parse().unwrap()
}

#[test]
fn a_timeout_fault_ends_the_request_with_etimedout_and_moves_no_data() {
    for mode in ["irqmode=0", "irqmode=1"] {
        let dev = open(&format!("null:size=1,memory_backed=1,{mode},io_timeout=20,timeout=1:100:0:1")).unwrap();
        let mut c = dev.client();
        let done = c.submit_and_wait_completion(Bio::write(0, Buf::from_slice(&[7u8; 4096]))).unwrap();
        assert_eq!(done.status, Status::Timeout, "{mode}");
        assert_eq!(done.status.errno(), libc::ETIMEDOUT);
        let mut out = vec![1u8; 4096];
        c.read_at(&mut out, 0).unwrap();
        assert!(out.iter().all(|&b| b == 0), "{mode}: the lost write was never handled");
        c.write_at(&[7u8; 4096], 0).unwrap();
        c.read_at(&mut out, 0).unwrap();
        assert!(out.iter().all(|&b| b == 7), "{mode}: times=1: the next write went through");
        assert_eq!(stat(&dev, "fault_timeout_injected"), 1);
    }
}

#[test]
fn a_requeue_fault_dispatches_again_and_the_data_arrives() {
    let dev = open("null:size=1,memory_backed=1,irqmode=1,requeue=1:100:0:3").unwrap();
    let mut c = dev.client();
    let data = periodic(8192, 253, |i| (i % 253) as u8);
    c.write_at(&data, 4096).unwrap();
    let mut out = vec![0u8; 8192];
    c.read_at(&mut out, 4096).unwrap();
    assert_eq!(out, data);
    assert_eq!(stat(&dev, "fault_requeue_injected"), 3);
    let busy: u64 =
        dev.show_stats().lines().filter_map(|l| l.strip_prefix("hctx0/busy=")).map(|v| v.parse::<u64>().unwrap()).sum();
    assert_eq!(busy, 3, "each requeue went through the hctx's busy path:\n{}", dev.show_stats());
}

#[test]
fn transient_errors_fail_their_op_only_and_a_retry_succeeds() {
    // Every 2nd write fails (twice in all); reads, flushes and discards are
    // untouched.
    let dev = open("null:size=1,memory_backed=1,discard=1,irqmode=1,error_write=2:100:0:2").unwrap();
    let mut c = dev.client();
    let mut failed = 0;
    for i in 0..8u8 {
        match c.write_at(&[i; 4096], 0) {
            Ok(()) => {
                let mut out = vec![0u8; 4096];
                c.read_at(&mut out, 0).unwrap();
                assert!(out.iter().all(|&b| b == i), "write {i} read back");
            }
            Err(mqblk::Error::Status(Status::IoErr)) => failed += 1,
            Err(e) => panic!("write {i}: {e}"),
        }
        c.submit_and_wait(Bio::flush()).unwrap();
        c.submit_and_wait(Bio::discard(4096, 4096)).unwrap();
    }
    assert_eq!(failed, 2);
    assert_eq!(stat(&dev, "fault_error_write_injected"), 2);
    assert!(!dev.show_stats().contains("fault_error_read"), "no read fault was set");
}

#[test]
fn bad_fault_specs_name_the_key_and_field() {
    for (spec, says) in [
        ("null:size=1,timeout=1:100:0", "'timeout'"),
        ("null:size=1,requeue=1:200:0:-1", "over 100"),
        ("null:size=1,timeout=a:1:0:-1", "interval 'a'"),
        ("null:size=1,io_timeout=0", "'io_timeout'"),
        ("null:size=1,error_flush=1:100", "'error_flush'"),
    ] {
        let e = open(spec).unwrap_err().to_string();
        assert!(e.contains(says), "{spec}: {e}");
    }
}

const BLOCK: u64 = 4096;
/// Blocks 0..BAD_BLOCKS are bad (sectors 0-8191).
const BAD_BLOCKS: u64 = 1024;

/// Submits `n` 4 KiB I/Os at queue depth `qd` to even blocks only (no two
/// bios are contiguous, so none merge and each is one request), reaps them
/// all, and checks each bio's fate: completed exactly once, ETIMEDOUT as
/// often as `timeout` injected, EIO exactly on the bad blocks, the rest Ok.
fn run_faulty(dev: &Device, n: u64, qd: usize, what: &str) {
    let mut c = dev.client();
    let nr_blocks = dev.limits().capacity_bytes / BLOCK;
    let mut offset_of: HashMap<u64, u64> = HashMap::new();
    let mut seen: HashMap<u64, Status> = HashMap::new();
    let mut done: Vec<Completion> = Vec::with_capacity(qd);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = 0u64;
    while seen.len() < n as usize {
        while next < n && c.in_flight() < qd {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let offset = (rng % (nr_blocks / 2)) * 2 * BLOCK;
            let bio = if next % 3 == 0 {
                Bio::write(offset, Buf::from_slice(&[next as u8; BLOCK as usize]))
            } else {
                Bio::read(offset, Buf::from_slice(&[0u8; BLOCK as usize]))
            };
            c.submit(bio, next).unwrap();
            offset_of.insert(next, offset);
            next += 1;
        }
        done.clear();
        c.do_io(&mut done, 1, qd, None).unwrap();
        for d in done.drain(..) {
            assert!(seen.insert(d.user_data, d.status).is_none(), "{what}: I/O {} completed twice", d.user_data);
        }
    }
    assert_eq!(c.in_flight(), 0, "{what}");
    let timeouts = seen.values().filter(|&&s| s == Status::Timeout).count() as u64;
    assert_eq!(timeouts, stat(dev, "fault_timeout_injected"), "{what}: one ETIMEDOUT per lost request");
    assert!(timeouts > 0, "{what}: the run lost no request at all");
    for (id, status) in &seen {
        let bad = offset_of[id] / BLOCK < BAD_BLOCKS;
        match status {
            Status::Timeout => {}
            Status::IoErr => assert!(bad, "{what}: EIO off the bad blocks (I/O {id} at {})", offset_of[id]),
            Status::Ok => assert!(!bad, "{what}: I/O {id} on a bad block succeeded"),
            other => panic!("{what}: I/O {id} ended with {other:?}"),
        }
    }
    assert!(seen.values().any(|&s| s == Status::IoErr), "{what}: no I/O hit a bad block");
    assert!(stat(dev, "fault_requeue_injected") > 0, "{what}");
}

#[test]
fn under_faults_every_bio_completes_once_with_every_scheduler_and_wake_policy() {
    let n = if cfg!(miri) { 40 } else { 600 };
    for sched in ["none", "mq-deadline", "kyber", "bfq"] {
        for wake in ["batch", "stash", "handoff"] {
            for irqmode in [0, 1] {
                let spec = format!(
                    "null:size=64,irqmode={irqmode},hw_queue_depth=16,sched={sched},wake={wake},io_timeout=20,\
                     timeout=13:100:0:-1,requeue=5:100:0:-1,badblocks=0-{}",
                    BAD_BLOCKS * BLOCK / 512 - 1
                );
                let dev = open(&spec).unwrap();
                run_faulty(&dev, n, 16, &spec);
                drop(dev);
            }
        }
    }
}
