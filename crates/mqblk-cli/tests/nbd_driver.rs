//! The `nbd:` driver through the `mqblk` command: bench's fio-style
//! verify over nbdkit (plain and TLS) and qemu-nbd, `mqblk serve` exporting an `nbd:`
//! device (mqblk serving mqblk), and a bench whose nbdkit is killed
//! (SIGKILL) mid-run ending with EIO instead of hanging. nbdkit and
//! qemu-nbd are installed by scripts/test-all.sh; a missing one fails
//! the test, naming it.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::nbd::{run, Server};

/// A folder of the test's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("mqblk-nbd-driver-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server process, killed (SIGKILL) and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(program: &str, args: &[&str], sock: &Path) -> Proc {
    let child = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/test-all.sh installs it)"));
    let p = Proc(child);
    let start = Instant::now();
    while UnixStream::connect(sock).is_err() {
        assert!(start.elapsed() < Duration::from_secs(20), "{program} never listened on {}", sock.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    p
}

/// `nbdkit -U SOCK -f ARGS`.
fn nbdkit(sock: &Path, args: &[&str]) -> Proc {
    let mut all = vec!["-U", sock.to_str().unwrap(), "-f", "--exit-with-parent"];
    all.extend_from_slice(args);
    spawn("nbdkit", &all, sock)
}

fn uri(sock: &Path) -> String {
    format!("nbd+unix:///?socket={}", sock.display())
}

/// `mqblk bench ARGS --output-format=json` in `cwd` (verify state lands there).
fn bench(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .current_dir(cwd)
        .arg("bench")
        .args(args)
        .arg("--output-format=json")
        .output()
        .expect("run mqblk bench")
}

/// Random writes of 4 KiB with fsyncs, each block checked by crc32c
/// after the writes; asserts every block was checked and none failed.
fn verified_writes(cwd: &Path, spec: &str, size: &str) -> Value {
    let out = bench(
        cwd,
        &["--device", spec, "--name=v", "--rw=randwrite", "--bs=4k", "--iodepth=16", "--fsync=32", "--verify=crc32c"]
            .iter()
            .copied()
            .chain([size])
            .collect::<Vec<_>>(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{spec}: {stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("JSON ({e}): {stderr}"));
    let verify = &v["jobs"][0]["mqblk"]["verify"];
    let blocks = verify["blocks"].as_u64().unwrap();
    assert!(blocks > 0 && verify["failed"] == 0, "{spec}: {verify}");
    v
}

#[test]
fn bench_verifies_writes_over_nbdkit_and_qemu_nbd() {
    let s = Scratch::new("verify");
    let kit = s.path("kit.sock");
    let _kit = nbdkit(&kit, &["memory", "64M"]);
    let v = verified_writes(&s.0, &format!("nbd:uri={},connections=2", uri(&kit)), "--size=16m");
    assert_eq!(v["jobs"][0]["mqblk"]["verify"]["blocks"], 4096, "16 MiB of 4 KiB blocks");
    verified_writes(&s.0, &format!("nbd:uri={},structured=0", uri(&kit)), "--size=8m");

    let file = s.path("disk.raw");
    std::fs::write(&file, vec![0u8; 32 << 20]).unwrap();
    let q = s.path("qemu.sock");
    let args = ["-t", "-e", "4", "-f", "raw", "-k", q.to_str().unwrap(), file.to_str().unwrap()];
    let _qemu = spawn("qemu-nbd", &args, &q);
    verified_writes(&s.0, &format!("nbd:uri={}", uri(&q)), "--size=16m");
}

#[test]
fn bench_verifies_writes_over_tls_with_a_psk() {
    let s = Scratch::new("tls");
    let (sock, keys) = (s.path("kit.sock"), s.path("keys.psk"));
    let made = Command::new("psktool").args(["-u", "alice", "-p"]).arg(&keys).output().expect("psktool (gnutls-bin)");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let psk_arg = format!("--tls-psk={}", keys.display());
    let _kit = nbdkit(&sock, &["--tls=require", &psk_arg, "memory", "64M"]);
    let uri = format!("nbds+unix://alice@/?socket={}", sock.display());
    verified_writes(&s.0, &format!("nbd:uri={uri},tls_psk={},connections=2", keys.display()), "--size=16m");
}

#[test]
fn serve_exports_an_nbd_device_mqblk_serving_mqblk() {
    let s = Scratch::new("serve");
    let kit = s.path("kit.sock");
    let _kit = nbdkit(&kit, &["memory", "64M"]);
    let front = Server::start("nbd-driver-serve", &["--device", &format!("nbd:uri={},connections=2", uri(&kit))]);
    let info = run("nbdinfo", &[&front.uri()]);
    assert!(info.contains("export-size: 67108864") && info.contains("can_trim: true"), "{info}");
    verified_writes(&s.0, &format!("nbd:uri={}", front.uri()), "--size=16m");
    // What went through both servers is in nbdkit's memory.
    let direct =
        bench(&s.0, &["--device", &format!("nbd:uri={}", uri(&kit)), "--name=r", "--rw=read", "--bs=1m", "--size=16m"]);
    assert!(direct.status.success(), "{}", String::from_utf8_lossy(&direct.stderr));
}

#[test]
fn bench_ends_with_eio_when_nbdkit_is_killed_mid_run() {
    let s = Scratch::new("kill");
    let (sock, log) = (s.path("kit.sock"), s.path("kit.log"));
    let log_arg = format!("logfile={}", log.display());
    let kit = nbdkit(&sock, &["--filter=log", "memory", "64M", &log_arg]);
    let spec = format!("nbd:uri={},timeout_ms=2000", uri(&sock));
    // `timeout 60`: a hang is a failure with status 124, not a stuck test.
    let bench = Command::new("timeout")
        .args(["60", env!("CARGO_BIN_EXE_mqblk"), "bench", "--device", &spec, "--name=k", "--rw=randwrite"])
        .args(["--bs=4k", "--iodepth=16", "--time_based", "--runtime=50", "--size=16m"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The event: nbdkit logged a write, so I/O is flowing.
    let start = Instant::now();
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("Write") {
        assert!(start.elapsed() < Duration::from_secs(30), "no write reached nbdkit");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(kit);
    let out = bench.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(124), "bench hung after its server died: {stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Input/output error"), "the outstanding and later I/O failed with EIO: {stderr}");
}
