//! The guest harness works end to end on both kernels it boots, Linux 6.12
//! and 7.x: `tests/guest/run.sh tests/guest/smoke.sh` (MQBLK_GUEST_SERIES
//! 6.12 or 7) boots the guest (qemu TCG), checks the kernel's series,
//! finds /dev/ublk-control and /dev/nbd0, loads null_blk and verifies fio
//! I/O on it (see both scripts' headers). Needs root, network for each
//! kernel's first fetch, and about 30 s to a minute each; it never skips:
//! a missing tool fails the test.

mod common;

#[test]
fn guest_smoke_script_passes() {
    common::guest_script("tests/guest/smoke.sh", &[], "smoke: all checks passed");
}

#[test]
fn guest_smoke_7_script_passes() {
    common::guest_script_on("7", "tests/guest/smoke.sh", &[], "smoke: all checks passed");
}
