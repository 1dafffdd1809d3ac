//! `mqblk serve` under the kernel's nbd client: `tests/guest/run.sh
//! tests/guest/nbd.sh` boots the Linux 6.12 guest (qemu TCG) and, inside
//! it, serves a memory-backed null device and then a file device on the
//! guest's tmpfs over a Unix socket with the host's target/release/mqblk,
//! connects /dev/nbd0 with the host's `nbd-client -unix`, runs fio with
//! crc32c verification on both and ext4 with fsck and a byte-exact
//! remount on the null device, disconnects and stops the server by SIGTERM, then kills a server with
//! SIGKILL mid-I/O: the device must fail its I/O within its timeout (see
//! the script's header).
//!
//! The guest runs the release binary, so this test builds it first
//! (`cargo build --release -p mqblk-cli`). Needs root, nbd-client on the
//! host (scripts/test-all.sh installs it), network for the first kernel
//! fetch, and several minutes (the guest's own limit is raised to 25
//! unless MQBLK_GUEST_TIMEOUT says otherwise); it never skips.

mod common;

#[test]
fn guest_nbd_script_passes() {
    common::guest_script_release("tests/guest/nbd.sh", "nbd: all checks passed");
}
