//! null_blk's own checks of a spec: a parameter out of its range is
//! refused with an error that names the key.

#![cfg(not(loom))]

mod common;
use common::open;

#[test]
fn poll_queue_options_are_checked() {
    let e = open("null:poll_queues=5000").unwrap_err().to_string();
    assert!(e.contains("poll_queues"), "{e}");
}
