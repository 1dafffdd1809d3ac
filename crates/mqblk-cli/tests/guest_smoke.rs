//! The Linux 6.12 guest harness works end to end: `tests/guest/run.sh
//! tests/guest/smoke.sh` boots the guest (qemu TCG), finds /dev/ublk-control
//! and /dev/nbd0, loads null_blk and verifies fio I/O on it (see both
//! scripts' headers). Needs root, network for the first kernel fetch, and
//! about 30 s to a minute; it never skips: a missing tool fails the test.

mod common;

#[test]
fn guest_smoke_script_passes() {
    common::guest_script("tests/guest/smoke.sh", &[], "smoke: all checks passed");
}
