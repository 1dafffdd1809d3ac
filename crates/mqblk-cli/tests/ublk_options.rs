//! `mqblk ublk`'s options are checked before anything runs (these need no
//! ublk in the kernel: the guest tests, tests/guest/ublk.sh, run the
//! devices).

use std::process::{Command, Output};

fn mqblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk")).args(args).output().expect("run mqblk")
}

#[test]
fn ublk_recovery_modes_are_checked_before_anything_runs() {
    let out = mqblk(&["ublk", "add", "--device", "null:gb=1", "--recovery=sometimes"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--recovery sometimes: accepted: off, reissue, fail_io"), "{err}");
    // recover needs a device to serve from; clap names what is missing.
    let out = mqblk(&["ublk", "recover", "0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--device"), "{out:?}");
}

#[test]
fn what_the_kernel_refuses_unprivileged_devices_is_refused_before_anything_runs() {
    // The kernel drops recovery for unprivileged devices and refuses them
    // user copy, which zoned devices need: refused by option, exit 2.
    let out = mqblk(&["ublk", "add", "--unprivileged", "--device", "null:gb=1", "--recovery=reissue"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--unprivileged with --recovery"), "{err}");
    let zoned = "null:gb=1,zoned=1,zone_size=64";
    let out = mqblk(&["ublk", "add", "--unprivileged", "--device", zoned]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--unprivileged with a zoned device"), "{err}");
}

#[test]
fn cpu_affinity_modes_are_checked_before_anything_runs() {
    let out = mqblk(&["ublk", "add", "--device", "null:gb=1", "--cpu-affinity", "everywhere"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cpu-affinity everywhere: accepted: single, queue, off"), "{err}");
}
