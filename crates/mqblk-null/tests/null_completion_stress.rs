//! null_blk's completion paths under load: many threads over few tags in
//! each completion mode (inline, the completion threads' rings, their
//! timers): every submitted I/O completes exactly once with its own
//! user_data, and every tag comes back. (The block layer's side of the
//! same load is mqblk's stress.rs, on its test RAM disk.)

#![cfg(not(loom))]

use std::collections::HashSet;

use mqblk::{Bio, Buf};

/// `Device::open` with the driver registered.
fn open(spec: &str) -> Result<mqblk::Device, mqblk::Error> {
    mqblk_null::register();
    mqblk::Device::open(spec)
}

const THREADS: usize = 6;
const IOS_PER_THREAD: u64 = 20_000;

fn stress(spec: &str, depth_per_client: usize) {
    let dev = open(spec).unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let dev = &dev;
            s.spawn(move || {
                let mut client = dev.client_with_capacity(depth_per_client);
                let mut free: Vec<Buf> = (0..depth_per_client).map(|_| Buf::new(4096)).collect();
                let mut seen = HashSet::new();
                let mut done = Vec::with_capacity(depth_per_client);
                let mut next = 0u64;
                let blocks = dev.limits().capacity_bytes / 4096;
                while seen.len() < IOS_PER_THREAD as usize {
                    while next < IOS_PER_THREAD {
                        let Some(buf) = free.pop() else { break };
                        let user_data = (t as u64) << 32 | next;
                        let off = (next * 7919 % blocks) * 4096;
                        let bio = if next % 3 == 0 { Bio::write(off, buf) } else { Bio::read(off, buf) };
                        client.submit(bio, user_data).unwrap();
                        next += 1;
                    }
                    done.clear();
                    client.do_io(&mut done, 1, depth_per_client, None).unwrap();
                    for c in done.drain(..) {
                        assert!(c.status.is_ok(), "{:?}", c.status);
                        assert_eq!(c.user_data >> 32, t as u64, "completion went to the wrong client");
                        assert!(seen.insert(c.user_data), "user_data {} completed twice", c.user_data);
                        free.push(c.buf.unwrap());
                    }
                }
                assert_eq!(client.in_flight(), 0);
                assert_eq!(client.stats().submitted, IOS_PER_THREAD);
                assert_eq!(client.stats().completed, IOS_PER_THREAD);
            });
        }
    });
    let total = THREADS as u64 * IOS_PER_THREAD;
    let stats = dev.stats();
    assert_eq!(stats.dispatched, total, "{spec}");
    assert_eq!(stats.completed, total, "{spec}");
    assert_eq!(dev.busy_tags(), 0, "every tag came back ({spec})");
}

#[test]
fn inline_completion_many_threads_few_tags() {
    stress("null:gb=1,irqmode=0,hw_queue_depth=8", 16);
}

#[test]
fn softirq_completion_threads_wait_for_tags() {
    let spec = "null:gb=1,irqmode=1,hw_queue_depth=4,submit_queues=2";
    stress(spec, 8);
}

#[test]
fn timer_completion_threads_wait_for_tags() {
    stress("null:gb=1,irqmode=2,completion_nsec=2000,hw_queue_depth=8,submit_queues=2", 8);
}
