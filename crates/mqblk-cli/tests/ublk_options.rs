//! `mqblk ublk`'s options are checked before anything runs (these need no
//! ublk in the kernel: the guest tests, tests/guest/ublk.sh, run the
//! devices).

use std::process::{Command, Output};

fn mqblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk")).args(args).output().expect("run mqblk")
}

/// Runs mqblk, which must refuse with exit 2; returns what it said.
fn refused(args: &[&str]) -> String {
    let out = mqblk(args);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn ublk_recovery_modes_are_checked_before_anything_runs() {
    let err = refused(&["ublk", "add", "--device", "null:gb=1", "--recovery=sometimes"]);
    assert!(err.contains("--recovery sometimes: accepted: off, reissue, fail_io"), "{err}");
    // recover needs a device to serve from; clap names what is missing.
    let err = refused(&["ublk", "recover", "0"]);
    assert!(err.contains("--device"), "{err}");
}

#[test]
fn what_the_kernel_refuses_unprivileged_devices_is_refused_before_anything_runs() {
    // The kernel drops recovery for unprivileged devices and refuses them
    // user copy, which zoned devices need: refused by option, exit 2.
    let err = refused(&["ublk", "add", "--unprivileged", "--device", "null:gb=1", "--recovery=reissue"]);
    assert!(err.contains("--unprivileged with --recovery"), "{err}");
    let zoned = "null:gb=1,zoned=1,zone_size=64";
    let err = refused(&["ublk", "add", "--unprivileged", "--device", zoned]);
    assert!(err.contains("--unprivileged with a zoned device"), "{err}");
}

#[test]
fn cpu_affinity_modes_are_checked_before_anything_runs() {
    let err = refused(&["ublk", "add", "--device", "null:gb=1", "--cpu-affinity", "everywhere"]);
    assert!(err.contains("--cpu-affinity everywhere: accepted: single, queue, off"), "{err}");
}
