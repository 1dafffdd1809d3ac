//! null_blk's own checks of a spec: a parameter out of its range is
//! refused with an error that names the key.

#![cfg(not(loom))]

/// `Device::open` with the driver registered.
fn open(spec: &str) -> Result<mqblk::Device, mqblk::Error> {
    mqblk_null::register();
    mqblk::Device::open(spec)
}

#[test]
fn poll_queue_options_are_checked() {
    let e = open("null:poll_queues=5000").unwrap_err().to_string();
    assert!(e.contains("poll_queues"), "{e}");
}
