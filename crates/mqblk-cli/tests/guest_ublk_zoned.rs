//! A zoned mqblk device through ublk against the kernel's own zoned
//! null_blk: `MQBLK_GUEST_SERIES=7 tests/guest/run.sh tests/guest/ublk_zoned.sh`
//! boots the newest Linux 7.x guest (qemu TCG; the script passes on 6.12
//! too, docs/results/guest-linux-7.3-2026-11-30.txt, in 1.5x 7.x's time;
//! the zoned oracle compares the emulation with 6.1's and 6.12's null_blk)
//! and, for two zoned configurations, loads null_blk and serves an mqblk null device with the same keys as /dev/ublkb0
//! (UBLK_F_ZONED over user copy). It checks that the block layer sees the
//! same zoned queue, that `blkzone report` agrees, that generated zone
//! scripts give identical JSON lines on /dev/nullb0 and /dev/ublkb0 in
//! three write-and-reset cycles (the server's resident memory flat after
//! each reset), and
//! that fio zonemode=zbd verifies; then a zoned btrfs writes its data with
//! zone append, passes `btrfs check` and reads back byte-exact (see the
//! script's header).
//!
//! The guest runs the release binary, so this test builds it first. Needs
//! root, network for the first kernel fetch, and 5 to 10 minutes; it never
//! skips.

mod common;

#[test]
fn guest_ublk_zoned_7_script_passes() {
    let out = common::guest_script_release_on("7", "tests/guest/ublk_zoned.sh", "ublk zoned: all checks passed");
    // The parts that prove zoned ublk, not just a passing script.
    for needle in ["blkzone report: the same", "identical JSON lines", "cycles' reset", "zone appends, each committed"]
    {
        assert!(out.contains(needle), "missing '{needle}' in:\n{out}");
    }
}
