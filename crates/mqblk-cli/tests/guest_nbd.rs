//! `mqblk serve` under the kernel's nbd client: `tests/guest/run.sh
//! tests/guest/nbd.sh` boots the Linux 6.12 guest (qemu TCG) and, inside
//! it, serves a memory-backed null device and then a file device on the
//! guest's tmpfs over a Unix socket with the host's target/release/mqblk,
//! connects /dev/nbd0 with the host's `nbd-client -unix`, runs fio with
//! crc32c verification and ext4 with fsck and a byte-exact remount,
//! disconnects and stops the server by SIGTERM, then kills a server with
//! SIGKILL mid-I/O: the device must fail its I/O within its timeout (see
//! the script's header).
//!
//! The guest runs the release binary, so this test builds it first
//! (`cargo build --release -p mqblk-cli`). Needs root, nbd-client on the
//! host (scripts/test-all.sh installs it), network for the first kernel
//! fetch, and several minutes (the guest's own limit is raised to 30
//! unless MQBLK_GUEST_TIMEOUT says otherwise); it never skips.

mod common;

use std::path::PathBuf;
use std::process::Command;

#[test]
fn guest_nbd_script_passes() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = Command::new(cargo)
        .args(["build", "--release", "-p", "mqblk-cli"])
        .current_dir(&root)
        .status()
        .expect("spawn cargo build --release -p mqblk-cli");
    assert!(build.success(), "cargo build --release -p mqblk-cli: {build}");

    // Under TCG on a loaded machine the script takes several minutes.
    let timeout_s = std::env::var("MQBLK_GUEST_TIMEOUT").unwrap_or_else(|_| "1800".into());
    common::guest_script("tests/guest/nbd.sh", &[("MQBLK_GUEST_TIMEOUT", &timeout_s)], "nbd: all checks passed");
}
