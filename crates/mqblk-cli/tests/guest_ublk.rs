//! `mqblk ublk` serves a real kernel: `tests/guest/run.sh
//! tests/guest/ublk.sh` boots the Linux 6.12 guest (qemu TCG; and the 7.x
//! guest, MQBLK_GUEST_SERIES=7, in a test of its own) and, inside
//! it, serves a memory-backed null device as /dev/ublkb0 with the host's
//! target/release/mqblk, runs fio with crc32c verification (libaio and
//! io_uring, QD 1 and 32, 4k random and 1M sequential), ext4 with fsck and
//! a byte-exact remount, then stops it by SIGTERM, by `mqblk ublk del`,
//! and by SIGKILL mid-I/O; a power cut, a recovered server, and a device
//! added, served and deleted without root (`--unprivileged`, as uid 65534;
//! see the script's header).
//!
//! The guest runs the release binary, so this test builds it first
//! (`cargo build --release -p mqblk-cli`). Needs root, network for the
//! first kernel fetch, and 5 to 10 minutes (the guest's own limit is raised
//! to 25 unless MQBLK_GUEST_TIMEOUT says otherwise); it never skips.

mod common;

#[test]
fn guest_ublk_script_passes() {
    common::guest_script_release("tests/guest/ublk.sh", "ublk: all checks passed");
}

#[test]
fn guest_ublk_7_script_passes() {
    common::guest_script_release_on("7", "tests/guest/ublk.sh", "ublk: all checks passed");
}
