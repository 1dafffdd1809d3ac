//! Polled completion on dedicated poll queues (the design virtio-blk
//! merged in 2022, after review of the RFC "virtio_blk: implement
//! blk_mq_ops->poll()" asked for explicit poll queues): hipri bios go to the client's poll queue and complete
//! only when a client polls; waiting polls instead of sleeping.

#![cfg(not(loom))]

mod common;
use common::filled;

use std::time::Duration;

use common::ram::open;
use mqblk::{Bio, Buf, ReqFlags};

fn hipri_read(off: u64) -> Bio {
    Bio::read(off, Buf::new(4096)).with_flags(ReqFlags::HIPRI)
}

#[test]
fn hipri_io_completes_by_polling_and_never_sleeps() {
    let dev = open("ram:gb=1,irqmode=1,memory_backed=1,poll_queues=1").unwrap();
    assert_eq!(dev.nr_hw_queues(), 2, "one default queue and one poll queue");
    let mut c = dev.client();
    assert_eq!(c.poll_hctx_index(), Some(1));
    let mut done = Vec::new();
    // 200 blocks each way (8 under Miri, where each poll loop is
    // interpreted until the request's completion time).
    let blocks: u64 = if cfg!(miri) { 8 } else { 200 };
    for i in 0..blocks {
        let data = Buf::from_slice(&[(i % 251) as u8; 4096]);
        c.submit(Bio::write(i * 4096, data).with_flags(ReqFlags::HIPRI | ReqFlags::SYNC), i).unwrap();
        done.clear();
        c.do_io(&mut done, 1, 1, None).unwrap();
        assert_eq!((done[0].user_data, done[0].status.is_ok()), (i, true));
    }
    for i in 0..blocks {
        c.submit(hipri_read(i * 4096), i).unwrap();
        done.clear();
        c.do_io(&mut done, 1, 1, None).unwrap();
        assert!(filled(&done[0].segs.as_slice()[0], (i % 251) as u8), "block {i}");
    }
    assert_eq!(c.stats().completion_sleeps, 0, "a polling client never sleeps for its hipri I/O");
    let show = dev.show_stats();
    let completed = format!("hctx1/completed={}", 2 * blocks);
    assert!(show.contains(&completed), "all {} went through the poll queue:\n{show}", 2 * blocks);
}

#[test]
fn mixed_hipri_and_interrupt_io_each_complete_once() {
    let dev = open("ram:gb=1,irqmode=2,completion_nsec=20000,poll_queues=1,hw_queue_depth=16").unwrap();
    let mut c = dev.client_with_capacity(32);
    let mut done = Vec::new();
    const IOS: u64 = if cfg!(miri) { 150 } else { 3000 };
    let mut seen = vec![0u8; IOS as usize];
    for i in 0..IOS {
        let bio = if i % 3 == 0 { Bio::read(i * 4096, Buf::new(4096)) } else { hipri_read(i * 4096) };
        c.submit(bio, i).unwrap();
        if c.in_flight() == 32 {
            done.clear();
            c.do_io(&mut done, 1, 32, Some(Duration::from_secs(30))).unwrap();
            for d in &done {
                seen[d.user_data as usize] += 1;
            }
        }
    }
    while c.in_flight() > 0 {
        done.clear();
        c.do_io(&mut done, 1, 32, Some(Duration::from_secs(30))).unwrap();
        for d in &done {
            seen[d.user_data as usize] += 1;
        }
    }
    assert!(seen.iter().all(|n| *n == 1), "every bio completed exactly once");
    // A tag a handoff wakeup granted to the client stays with it until it
    // allocates, sleeps or goes (sbitmap/wake.rs): no tag is busy once the
    // client is gone.
    drop(c);
    assert_eq!(dev.busy_tags(), 0);
}

#[test]
fn several_clients_poll_one_queue_safely() {
    // One poll queue shared by four clients: a poll by one completes the
    // others' requests too, each to its own client.
    // 30 each under Miri, where every poll is interpreted.
    const PER_CLIENT: u64 = if cfg!(miri) { 30 } else { 5000 };
    let dev = open("ram:gb=1,irqmode=0,poll_queues=1,hw_queue_depth=32").unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let dev = dev.clone();
            std::thread::spawn(move || {
                let mut c = dev.client_with_capacity(8);
                let mut done = Vec::new();
                let mut got = 0u64;
                for i in 0..PER_CLIENT {
                    c.submit(hipri_read((t * 10_000 + i % 1000) * 4096), t << 32 | i).unwrap();
                    if c.in_flight() == 8 {
                        done.clear();
                        got += c.do_io(&mut done, 1, 8, Some(Duration::from_secs(30))).unwrap() as u64;
                        assert!(done.iter().all(|d| d.user_data >> 32 == t), "only our own completions");
                    }
                }
                while c.in_flight() > 0 {
                    done.clear();
                    got += c.do_io(&mut done, 1, 8, Some(Duration::from_secs(30))).unwrap() as u64;
                }
                got
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(total, 4 * PER_CLIENT);
    assert_eq!(dev.busy_tags(), 0);
}

#[test]
fn without_poll_queues_hipri_completes_like_any_io() {
    let dev = open("ram:gb=1,irqmode=1,poll_queues=0").unwrap();
    assert_eq!(dev.nr_hw_queues(), 1);
    let mut c = dev.client();
    assert_eq!(c.poll_hctx_index(), None);
    c.submit(hipri_read(0), 9).unwrap();
    let mut done = Vec::new();
    c.do_io(&mut done, 1, 1, Some(Duration::from_secs(30))).unwrap();
    assert_eq!(done[0].user_data, 9);
}

#[test]
fn hybrid_polling_sleeps_once_per_wait_then_spins() {
    let dev = open("ram:gb=1,irqmode=2,completion_nsec=200000,poll_queues=1,hybrid_poll_delay=100").unwrap();
    let mut c = dev.client();
    let mut done = Vec::new();
    for i in 0..20u64 {
        c.submit(hipri_read(i * 4096), i).unwrap();
        done.clear();
        c.do_io(&mut done, 1, 1, None).unwrap();
        assert_eq!(done[0].user_data, i);
    }
    // One sleep of 100 us per 200 us request, then spinning for the rest.
    assert_eq!(c.stats().completion_sleeps, 20, "{:?}", c.stats());
    let e = open("ram:hybrid_poll_delay=2000000").unwrap_err().to_string();
    assert!(e.contains("hybrid_poll_delay"), "{e}");
}
