//! null_blk's completion paths under load: many threads over few tags in
//! each completion mode (inline, the completion threads' rings, their
//! timers): every submitted I/O completes exactly once with its own
//! user_data, and every tag comes back. (The block layer's side of the
//! same load is mqblk's stress.rs, on its test RAM disk.)

#![cfg(not(loom))]

#[path = "../../mqblk/tests/common/stress.rs"]
mod stress;

mod common;
use common::open;

fn stress(spec: &str, depth_per_client: usize) {
    stress::stress(open(spec).unwrap(), spec, depth_per_client);
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
