//! Many threads, few tags, every completion mode: every submitted I/O
//! completes exactly once with its own user_data, and every tag comes back.

#![cfg(not(loom))]

mod common;

use common::ram::open;
use common::stress::stress as stress_on;
use mqblk::{Bio, Buf};

fn stress(spec: &str, depth_per_client: usize) {
    stress_on(open(spec).unwrap(), spec, depth_per_client);
}

#[test]
fn inline_completion_many_threads_few_tags() {
    stress("ram:gb=1,irqmode=0,hw_queue_depth=8", 16);
}

#[test]
fn softirq_completion_threads_wait_for_tags() {
    let spec = "ram:gb=1,irqmode=1,hw_queue_depth=4,submit_queues=2";
    stress(spec, 8);
}

#[test]
fn timer_completion_threads_wait_for_tags() {
    stress("ram:gb=1,irqmode=2,completion_nsec=2000,hw_queue_depth=8,submit_queues=2", 8);
}

#[test]
fn tag_waits_really_sleep_and_are_counted() {
    // One hardware queue with 2 tags and 4 clients of depth 4 each: most
    // submissions find no tag and must sleep until a completion frees one.
    let dev = open("ram:gb=1,irqmode=2,completion_nsec=200000,hw_queue_depth=2").unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut client = dev.client_with_capacity(4);
                let mut done = Vec::new();
                for i in 0..50u64 {
                    for _ in 0..4 {
                        client.submit(Bio::read(i * 4096, Buf::new(4096)), i).unwrap();
                    }
                    client.do_io(&mut done, 4, 4, None).unwrap();
                }
            });
        }
    });
    let stats = dev.stats();
    assert_eq!(stats.completed, 800);
    assert!(stats.tag_waits > 0, "submitters must have slept for tags");
    assert_eq!(dev.busy_tags(), 0);
}
