//! `mqblk vhost add` serves a real guest: tests/guest/vhost.sh starts the
//! server on the host over a memory-backed null device, boots the Linux
//! 6.12 guest (qemu TCG) with a vhost-user-blk-pci disk of two queues on
//! its socket, and inside the guest runs fio with crc32c verification
//! (libaio and io_uring, QD 1 and 32, 4k random and 1M sequential),
//! discard and write zeroes, ext4 with fsck and a byte-exact remount, a
//! read-only disk, and the guest's virtio-blk poll queues (hipri I/O
//! completed without interrupts); then SIGTERM stops the server cleanly
//! (see the script's header).
//!
//! Builds the release binary first. Needs root, network for the first
//! kernel fetch, and 5 to 10 minutes; it never skips.

mod common;

#[test]
fn guest_vhost_script_passes() {
    common::host_script_release("tests/guest/vhost.sh", "vhost: all checks passed");
}
