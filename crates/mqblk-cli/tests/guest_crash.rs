//! Crash consistency through a real kernel: `tests/guest/run.sh
//! tests/guest/crash.sh` boots the Linux 6.12 guest (qemu TCG) and, inside
//! it, serves a memory-backed null device with a volatile write cache as
//! /dev/ublkb0, puts ext4 on it, writes and fsyncs files, cuts the power
//! through `mqblk control power_off` at seeded points (once tearing the
//! cache sector by sector), and checks that after journal replay
//! `fsck.ext4 -fn` is clean and every file whose fsync returned is intact
//! (see the script's header).
//!
//! The guest runs the release binary, so this test builds it first. Needs
//! root, network for the first kernel fetch, and a few minutes; it never
//! skips.

mod common;

#[test]
fn guest_crash_script_passes() {
    common::guest_script_release("tests/guest/crash.sh", "crash: all 4 cuts survived");
}
