//! Power loss through `mqblk serve` with real NBD clients (nbdinfo,
//! nbdcopy; scripts/test-all.sh installs them): a power cut from the
//! control socket, and a server killed outright and started again on its
//! `backing_file`, each leaving exactly what was flushed.

use std::process::Command;

mod common;
use common::nbd::{control, run, Server};

#[test]
fn a_power_cut_through_the_control_socket_loses_exactly_the_unflushed_writes() {
    let dir = std::env::temp_dir().join(format!("mqblk-ctl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ctl = dir.join("ctl");
    let ctl = ctl.to_str().unwrap();
    let s = Server::start("powercut", &["--device", "null:size=16,memory_backed=1,cache_size=4", "--control", ctl]);
    let info = run("nbdinfo", &[&s.uri()]);
    assert!(info.contains("can_flush: true") && info.contains("can_fua: true"), "{info}");
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8 + 1).collect();
    let src = dir.join("src");
    std::fs::write(&src, &data).unwrap();
    // nbdcopy flushes only with --flush: these writes sit in the cache.
    run("nbdcopy", &[src.to_str().unwrap(), &s.uri()]);
    let out = control(ctl, &["power_cut"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok lost_pages=256\n");
    let back = dir.join("back");
    run("nbdcopy", &[&s.uri(), back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap()[..1 << 20].iter().all(|&b| b == 0), "the unflushed MiB is gone");
    // With --flush the same copy survives the next cut.
    run("nbdcopy", &["--flush", src.to_str().unwrap(), &s.uri()]);
    let out = control(ctl, &["power_cut"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok lost_pages=0\n");
    run("nbdcopy", &[&s.uri(), back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap()[..1 << 20] == data[..], "the flushed MiB survived");
    // Bad blocks on the live export, then a refused request changes nothing.
    let out = control(ctl, &["set", "badblocks", "+0-7"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let failed = Command::new("nbdcopy").args([&s.uri(), back.to_str().unwrap()]).output().unwrap();
    assert!(!failed.status.success(), "reading a bad sector over NBD fails");
    let out = control(ctl, &["set", "badblocks", "+5-1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ends before it starts"));
    let out = control(ctl, &["get", "badblocks"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok 0-7\n");
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 1 MiB pattern unlike the others (`seed` in each byte's value).
fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32).map(|i| ((i / 512 + seed) % 251) as u8 + 1).collect()
}

#[test]
fn a_killed_server_restarted_on_its_backing_file_serves_exactly_what_was_flushed() {
    let dir = std::env::temp_dir().join(format!("mqblk-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let medium = dir.join("medium");
    let spec = format!("null:size=16,memory_backed=1,cache_size=4,backing_file={}", medium.display());
    let (a, b) = (pattern(1, 1 << 20), pattern(2, 2 << 20));
    let (fa, fb, back) = (dir.join("a"), dir.join("b"), dir.join("back"));
    std::fs::write(&fa, &a).unwrap();
    std::fs::write(&fb, &b).unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();

    // Flushed A, then B over it and past it without a flush, then SIGKILL.
    let mut s = Server::start("restart-1", &["--device", &spec]);
    run("nbdcopy", &["--flush", &path(&fa), &s.uri()]);
    run("nbdcopy", &[&path(&fb), &s.uri()]);
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    drop(s);
    let s = Server::start("restart-2", &["--device", &spec]);
    run("nbdcopy", &[&s.uri(), &path(&back)]);
    let got = std::fs::read(&back).unwrap();
    assert!(got[..1 << 20] == a[..], "the flushed MiB came back");
    assert!(got[1 << 20..].iter().all(|&x| x == 0), "nothing unflushed came back");

    // SIGTERM flushes every device before the server exits, so B stays.
    run("nbdcopy", &[&path(&fb), &s.uri()]);
    let mut s = s;
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    assert!(s.child.wait().unwrap().success());
    drop(s);
    let s = Server::start("restart-3", &["--device", &spec]);
    run("nbdcopy", &[&s.uri(), &path(&back)]);
    let got = std::fs::read(&back).unwrap();
    assert!(got[..2 << 20] == b[..], "a clean stop wrote the cache back");

    // While it serves, the file is locked: a second server is refused.
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["serve", "--device", &spec, "--unix", &path(&dir.join("sock2"))])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use by another device"));
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
