//! The Linux 6.12 guest harness works end to end: `tests/guest/run.sh
//! tests/guest/smoke.sh` boots the guest (qemu TCG), finds /dev/ublk-control
//! and /dev/nbd0, loads null_blk and verifies fio I/O on it (see both
//! scripts' headers). Needs root, network for the first kernel fetch, and
//! about 30 s to a minute; it never skips: a missing tool fails the test.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn guest_smoke_script_passes() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new("tests/guest/run.sh")
        .arg("tests/guest/smoke.sh")
        .current_dir(&root)
        .output()
        .expect("spawn tests/guest/run.sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "tests/guest/run.sh tests/guest/smoke.sh: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert!(stdout.contains("smoke: all checks passed"), "stdout:\n{stdout}\nstderr:\n{stderr}");
}
