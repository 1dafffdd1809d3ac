//! `mqblk vhost add` on the command line: bad input exits 2 naming it, and
//! SIGTERM stops a listening server cleanly (exit 0, its summary printed,
//! the socket left for the next start to replace).

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

fn mqblk() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
}

fn socket(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("mqblk-vhost-cli-{name}-{}.sock", std::process::id()))
}

#[test]
fn bad_options_exit_2_naming_them() {
    let sock = socket("bad");
    for (args, want) in [
        (vec!["--device", "null:gb=1", "--queues", "0"], "queues=0"),
        (vec!["--device", "null:gb=1", "--depth", "2000"], "depth=2000"),
        (vec!["--device", "null:gb=1,zoned=1"], "zoned"),
        (vec!["--device", "nullx:gb=1"], "nullx"),
    ] {
        let out = mqblk().args(["vhost", "add", "--socket", sock.to_str().unwrap()]).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

#[test]
fn sigterm_stops_a_listening_server() {
    let sock = socket("term");
    let mut child = mqblk()
        .args(["vhost", "add", "--device", "null:gb=1,memory_backed=1", "--queues", "2"])
        .arg("--socket")
        .arg(&sock)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The banner comes once the signal handlers are in place.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    stdout.read_line(&mut banner).unwrap();
    assert!(banner.contains("serving") && banner.contains("2 queues x 128 requests, 1024 MiB"), "{banner}");
    assert!(sock.exists(), "listening on {}", sock.display());
    // SAFETY: kill(2) on our own child's pid, which it still is (not reaped).
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{rest}{}", String::from_utf8_lossy(&out.stderr));
    assert!(rest.contains("stopped (0 connections, 0 requests, 0 failed)"), "{rest}");
    let _ = std::fs::remove_file(&sock);
}
