//! The front ends' Unix sockets are private by default: `serve --unix`,
//! `vhost add --socket` and their `--control` sockets are created with
//! mode 0600 (only their owner may connect), `--socket-mode` asks for
//! another, and a mode that is not octal permission bits is bad input.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mqblk-socket-modes-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Starts `mqblk ARGS` and waits for every socket of `sockets` to exist
/// (the server's "up" is that it listens); panics with its stderr if it
/// exits first.
fn start(args: &[&str], sockets: &[&Path]) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mqblk");
    while !sockets.iter().all(|s| s.exists()) {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("mqblk {args:?} exited ({status}) before listening: {err}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

/// Ends the server (how it stops is not this test's subject: a SIGTERM
/// may arrive before its handler is installed) and removes its sockets.
fn stop(mut child: Child, sockets: &[&Path]) {
    child.kill().unwrap();
    child.wait().unwrap();
    for s in sockets {
        let _ = std::fs::remove_file(s);
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// `front` (its command and the option naming its socket), with a control
/// socket: both 0600 by default, both `other` with `--socket-mode`.
fn check_front(name: &str, front: &[&str], other: (&str, u32)) {
    let d = dir(name);
    let (sock, ctl) = (d.join("front.sock"), d.join("ctl.sock"));
    let args = [front, &[sock.to_str().unwrap(), "--control", ctl.to_str().unwrap()]].concat();
    let server = start(&args, &[&sock, &ctl]);
    assert_eq!((mode(&sock), mode(&ctl)), (0o600, 0o600), "{front:?}");
    stop(server, &[&sock, &ctl]);
    let server = start(&[&args[..], &["--socket-mode", other.0]].concat(), &[&sock, &ctl]);
    assert_eq!((mode(&sock), mode(&ctl)), (other.1, other.1), "{front:?} --socket-mode {}", other.0);
    stop(server, &[&sock, &ctl]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn serve_sockets_are_0600_unless_told_otherwise() {
    check_front("serve", &["serve", "--device", "null:gb=1", "--unix"], ("660", 0o660));
}

#[test]
fn vhost_sockets_are_0600_unless_told_otherwise() {
    check_front("vhost", &["vhost", "add", "--device", "null:gb=1", "--socket"], ("0666", 0o666));
}

#[test]
fn a_socket_mode_that_is_not_permission_bits_is_bad_input() {
    let d = dir("bad");
    for front in
        [&["serve", "--device", "null:gb=1", "--unix"][..], &["vhost", "add", "--device", "null:gb=1", "--socket"]]
    {
        let sock = d.join("s.sock");
        let args = [front, &[sock.to_str().unwrap(), "--socket-mode", "rw-------"]].concat();
        let out = Command::new(env!("CARGO_BIN_EXE_mqblk")).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--socket-mode rw-------: octal permission bits"),
            "{out:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}
