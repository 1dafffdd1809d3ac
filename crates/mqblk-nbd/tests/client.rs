//! The `nbd:` driver against real servers: nbdkit's memory plugin (plain
//! and TLS with a pre-shared key), qemu-nbd on a raw file, and mqblk's
//! own server in this process, over Unix sockets and TCP; and against a
//! scripted server that breaks the protocol. nbdkit, qemu-nbd and
//! psktool are installed by scripts/test-all.sh; a missing one fails the
//! test, naming it.

#[path = "common/fake_server.rs"]
mod fake_server;

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mqblk::{Bio, Buf, Device, Error, Status, SubmitError};
use mqblk_nbd::{Export, Listen, Server};

use fake_server::{Fake, Misbehave};

/// A folder of the test's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("mqblk-nbd-client-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn sock(&self) -> PathBuf {
        self.0.join("sock")
    }
    fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.sock().display())
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

/// Starts `program ARGS` and waits until `sock` accepts connections.
fn spawn(program: &str, args: &[&str], sock: &Path) -> Proc {
    let child = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/test-all.sh installs it)"));
    let p = Proc(child);
    wait_for_socket(sock);
    p
}

fn wait_for_socket(sock: &Path) {
    let start = Instant::now();
    while UnixStream::connect(sock).is_err() {
        assert!(start.elapsed() < Duration::from_secs(20), "{} never accepted", sock.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `nbdkit -U SOCK -f ARGS` (foreground: killing the child kills the server).
fn nbdkit(s: &Scratch, args: &[&str]) -> Proc {
    let sock = s.sock();
    let mut all = vec!["-U", sock.to_str().unwrap(), "-f", "--exit-with-parent"];
    all.extend_from_slice(args);
    spawn("nbdkit", &all, &sock)
}

fn open(spec: &str) -> Device {
    mqblk_nbd::client::register();
    Device::open(spec).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// The error opening `spec` gives (`why` it should fail, for the panic).
fn open_err(spec: &str, why: &str) -> Error {
    mqblk_nbd::client::register();
    match Device::open(spec) {
        Ok(_) => panic!("{spec} opened, but should not: {why}"),
        Err(e) => e,
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn status(e: Error) -> Status {
    match e {
        Error::Status(s) => s,
        other => panic!("expected a status, got {other}"),
    }
}

#[test]
fn nbdkit_memory_round_trips_vectored_io_flush_trim_and_zeroes() {
    let s = Scratch::new("nbdkit");
    let _server = nbdkit(&s, &["memory", "64M"]);
    for structured in [1, 0] {
        let dev = open(&format!("nbd:uri={},structured={structured}", s.uri()));
        let l = dev.limits();
        assert_eq!((l.capacity_bytes, l.logical_block_size), (64 << 20, 512));
        assert!(l.write_cache && l.fua && l.max_discard_sectors > 0 && l.max_write_zeroes_sectors > 0, "{l:?}");
        let mut c = dev.client();
        let data = pattern(structured, 16384);
        // Three segments out, two back: each lands straight in its buffer.
        let out =
            vec![Buf::from_slice(&data[..4096]), Buf::from_slice(&data[4096..12288]), Buf::from_slice(&data[12288..])];
        c.submit_and_wait(Bio::writev(1 << 20, out)).unwrap();
        let back = c.submit_and_wait(Bio::readv(1 << 20, vec![Buf::new(8192), Buf::new(8192)])).unwrap();
        let got: Vec<u8> = back.into_vec().iter().flat_map(|b| b.to_vec()).collect();
        assert!(got == data, "structured={structured}: read back what was written");
        c.submit_and_wait(Bio::flush()).unwrap();
        c.submit_and_wait(Bio::discard(1 << 20, 4096)).unwrap();
        c.submit_and_wait(Bio::write_zeroes((1 << 20) + 8192, 4096)).unwrap();
        let mut all = vec![0xff; 16384];
        c.read_at(&mut all, 1 << 20).unwrap();
        assert!(all[..4096].iter().all(|&b| b == 0), "trimmed: nbdkit memory reads zeros");
        assert_eq!(all[4096..8192], data[4096..8192]);
        assert!(all[8192..12288].iter().all(|&b| b == 0), "written zeroes");
        assert_eq!(all[12288..], data[12288..]);
        let shown = dev.show_stats();
        assert!(shown.contains(&format!("structured={structured}")) && shown.contains("up=1"), "{shown}");
    }
}

#[test]
fn qemu_nbd_file_holds_what_two_connections_wrote() {
    let s = Scratch::new("qemu");
    let file = s.0.join("disk.raw");
    std::fs::write(&file, vec![0u8; 16 << 20]).unwrap();
    let sock = s.sock();
    let args = ["-t", "-e", "4", "-f", "raw", "--discard=unmap", "-k", sock.to_str().unwrap(), file.to_str().unwrap()];
    let server = spawn("qemu-nbd", &args, &sock);
    let dev = open(&format!("nbd:uri={},connections=2", s.uri()));
    assert_eq!(dev.nr_hw_queues(), 2, "one hardware queue per connection");
    // Clients are spread over the queues: one each.
    let (mut a, mut b) = (dev.client(), dev.client());
    a.write_at(&pattern(1, 65536), 0).unwrap();
    b.write_at(&pattern(2, 65536), 8 << 20).unwrap();
    a.submit_and_wait(Bio::flush()).unwrap();
    b.submit_and_wait(Bio::flush()).unwrap();
    let mut back = vec![0u8; 65536];
    a.read_at(&mut back, 8 << 20).unwrap();
    assert!(back == pattern(2, 65536), "one queue reads what the other wrote");
    drop((a, b, dev, server));
    let raw = std::fs::read(&file).unwrap();
    assert!(raw[..65536] == pattern(1, 65536)[..] && raw[8 << 20..(8 << 20) + 65536] == pattern(2, 65536)[..]);
}

#[test]
fn mqblk_server_with_four_connections_gives_four_queues() {
    let s = Scratch::new("mqblk");
    let export = Export::open("", "null:size=64,memory_backed=1,discard=1", false).unwrap();
    let server = Server::new(Listen::unix(s.sock()).unwrap(), vec![export]).unwrap();
    let stop = server.stop_handle();
    let thread = std::thread::spawn(move || server.run());
    let dev = open(&format!("nbd:uri={},connections=4,queue_depth=16", s.uri()));
    assert_eq!(dev.nr_hw_queues(), 4);
    let mut clients: Vec<_> = (0..4).map(|_| dev.client()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.write_at(&pattern(i as u8, 4096), i as u64 * 4096).unwrap();
    }
    for (i, c) in clients.iter_mut().rev().enumerate() {
        let i = 3 - i;
        let mut back = vec![0u8; 4096];
        c.read_at(&mut back, i as u64 * 4096).unwrap();
        assert!(back == pattern(i as u8, 4096), "block {i}");
    }
    let per_queue = dev.show_stats();
    assert_eq!(per_queue.matches("nbd/conn").count(), 4, "{per_queue}");
    drop((clients, dev));
    stop.stop();
    thread.join().unwrap().unwrap();
}

#[test]
fn tcp_uris_pick_named_exports_and_an_unknown_name_is_named() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let exports = vec![
        Export::open("small", "null:size=16,memory_backed=1", false).unwrap(),
        Export::open("big", "null:size=32,memory_backed=1", false).unwrap(),
    ];
    let server = Server::new(Listen::Tcp(listener), exports).unwrap();
    let stop = server.stop_handle();
    let thread = std::thread::spawn(move || server.run());
    let dev = open(&format!("nbd:uri=nbd://127.0.0.1:{port}/big,connections=2"));
    assert_eq!((dev.limits().capacity_bytes, dev.nr_hw_queues()), (32 << 20, 2));
    let mut c = dev.client();
    c.write_at(&pattern(4, 8192), 30 << 20).unwrap();
    let mut back = vec![0u8; 8192];
    c.read_at(&mut back, 30 << 20).unwrap();
    assert!(back == pattern(4, 8192));
    let e = open_err(&format!("nbd:uri=nbd://127.0.0.1:{port}/nosuch"), "no such export");
    assert!(e.to_string().contains("no export named 'nosuch'"), "{e}");
    drop((c, dev));
    stop.stop();
    thread.join().unwrap().unwrap();
}

#[test]
fn an_unreachable_server_is_a_clear_open_error() {
    let s = Scratch::new("nobody");
    let e = open_err(&format!("nbd:uri={}", s.uri()), "nothing listens");
    let msg = e.to_string();
    assert!(msg.contains("connection 0") && msg.contains("cannot connect"), "{msg}");
}

#[test]
fn nbds_with_a_psk_talks_tls_to_nbdkit() {
    let s = Scratch::new("tls");
    let keys = s.0.join("keys.psk");
    let made = Command::new("psktool").args(["-u", "alice", "-p"]).arg(&keys).output().expect("psktool (gnutls-bin)");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let psk_arg = format!("--tls-psk={}", keys.display());
    let _server = nbdkit(&s, &["--tls=require", &psk_arg, "memory", "64M"]);
    let socket = s.sock();
    let tls_uri = format!("nbds+unix://alice@/?socket={}", socket.display());
    for structured in [1, 0] {
        let dev = open(&format!("nbd:uri={tls_uri},tls_psk={},structured={structured}", keys.display()));
        let mut c = dev.client();
        let data = pattern(structured, 65536);
        let out = vec![Buf::from_slice(&data[..16384]), Buf::from_slice(&data[16384..])];
        c.submit_and_wait(Bio::writev(1 << 20, out)).unwrap();
        let mut back = vec![0u8; 65536];
        c.read_at(&mut back, 1 << 20).unwrap();
        assert!(back == data, "structured={structured}: through TLS and back");
    }
    // Without TLS, the server says it needs it, and the error says what to give.
    let e = open_err(&format!("nbd:uri={}", s.uri()), "TLS required");
    assert!(e.to_string().contains("requires TLS") && e.to_string().contains("tls_psk"), "{e}");
    // A key the server does not know fails the TLS handshake, named.
    std::fs::write(s.0.join("wrong.psk"), "alice:00112233445566778899aabbccddeeff\n").unwrap();
    let wrong = format!("nbd:uri={tls_uri},tls_psk={}", s.0.join("wrong.psk").display());
    let e = open_err(&wrong, "wrong key");
    assert!(e.to_string().contains("TLS handshake"), "{e}");
}

#[test]
fn a_tls_connection_comes_back_after_the_server_restarts() {
    let s = Scratch::new("tls-again");
    let keys = s.0.join("keys.psk");
    let made = Command::new("psktool").args(["-u", "alice", "-p"]).arg(&keys).output().expect("psktool (gnutls-bin)");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let psk_arg = format!("--tls-psk={}", keys.display());
    let server = nbdkit(&s, &["--tls=require", &psk_arg, "memory", "16M"]);
    let uri = format!("nbds+unix://alice@/?socket={}", s.sock().display());
    let dev = open(&format!("nbd:uri={uri},tls_psk={},timeout_ms=20000", keys.display()));
    let mut c = dev.client();
    c.write_at(&[1; 4096], 0).unwrap();
    drop(server); // SIGKILL, reaped
    std::fs::remove_file(s.sock()).unwrap();
    let _again = nbdkit(&s, &["--tls=require", &psk_arg, "memory", "16M"]);
    // Parked while the connection is down, sent once it is back: no event
    // to wait for, the write itself waits (well within its timeout).
    c.write_at(&[2; 4096], 4096).unwrap();
    let mut back = [0u8; 4096];
    c.read_at(&mut back, 4096).unwrap();
    assert_eq!(back, [2; 4096]);
    assert!(dev.show_stats().contains("reconnects=1"), "{}", dev.show_stats());
}

#[test]
fn read_only_export_refuses_writes_and_serves_reads() {
    let s = Scratch::new("ro");
    let _server = nbdkit(&s, &["-r", "pattern", "1M"]);
    let dev = open(&format!("nbd:uri={}", s.uri()));
    let mut c = dev.client();
    let e = c.write_at(&[0; 4096], 0).unwrap_err();
    assert_eq!(status(e), Status::NotSupp, "a write to a read-only export");
    let e = c.submit_and_wait(Bio::discard(0, 4096)).unwrap_err();
    assert!(matches!(e, Error::Submit(SubmitError::NotSupported { .. })), "no discard offered: {e}");
    let mut back = [0u8; 4096];
    c.read_at(&mut back, 4096).unwrap();
    assert_eq!(back[8..16], 4104u64.to_be_bytes(), "nbdkit's pattern: each 8 bytes hold their offset");
    c.submit_and_wait(Bio::flush()).unwrap();
}

#[test]
fn killed_server_fails_io_within_the_timeout_and_a_new_one_is_found() {
    let s = Scratch::new("kill");
    let server = nbdkit(&s, &["memory", "16M"]);
    let dev = open(&format!("nbd:uri={},timeout_ms=500", s.uri()));
    let mut c = dev.client();
    c.write_at(&[7; 4096], 0).unwrap();
    drop(server); // SIGKILL, reaped
    let e = c.write_at(&[8; 4096], 4096).unwrap_err();
    assert_eq!(status(e), Status::IoErr, "parked for the timeout, then failed");
    let e = c.read_at(&mut [0; 4096], 0).unwrap_err();
    assert_eq!(status(e), Status::IoErr, "down longer than the timeout: failed at once");
    std::fs::remove_file(s.sock()).unwrap(); // left by the killed server
    let _again = nbdkit(&s, &["memory", "16M"]);
    // The event: the driver's receiving thread reconnected.
    let start = Instant::now();
    while !dev.show_stats().contains("reconnects=1") {
        assert!(start.elapsed() < Duration::from_secs(30), "no reconnect: {}", dev.show_stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    c.write_at(&[9; 4096], 0).unwrap();
    let mut back = [0u8; 4096];
    c.read_at(&mut back, 0).unwrap();
    assert_eq!(back, [9; 4096]);
}

#[test]
fn a_read_the_server_never_answers_fails_with_eio_and_the_queue_goes_on() {
    let s = Scratch::new("slow");
    let _server = nbdkit(&s, &["--filter=delay", "memory", "16M", "delay-read=60"]);
    let dev = open(&format!("nbd:uri={},timeout_ms=300", s.uri()));
    let mut c = dev.client();
    c.write_at(&[3; 4096], 0).unwrap();
    let e = c.read_at(&mut [0; 4096], 0).unwrap_err();
    assert_eq!(status(e), Status::IoErr, "timed out");
    // The timeout shut that connection down (a late answer would name a
    // cookie no longer in flight); writes go on over the next one.
    c.write_at(&[4; 4096], 4096).unwrap();
    let shown = dev.show_stats();
    assert!(shown.contains("timeouts=1") && shown.contains("lost=1"), "{shown}");
}

#[test]
fn malformed_replies_end_the_connection_and_the_request_is_sent_again() {
    for how in [Misbehave::BadMagic, Misbehave::UnknownCookie, Misbehave::ChunkPastRequest] {
        let s = Scratch::new(&format!("{how:?}"));
        let fake = Fake::start(&s.0, move |n| (n == 0).then_some(how));
        let dev = open(&format!("nbd:uri={},timeout_ms=20000", fake.uri()));
        let mut c = dev.client();
        let mut back = [1u8; 4096];
        c.read_at(&mut back, 0).unwrap();
        assert_eq!(back, [0; 4096], "{how:?}: answered on the second connection");
        c.write_at(&[5; 4096], 4096).unwrap();
        c.read_at(&mut back, 4096).unwrap();
        assert_eq!((back, fake.accepted.load(std::sync::atomic::Ordering::SeqCst)), ([5; 4096], 2), "{how:?}");
        assert!(dev.show_stats().contains("lost=1 reconnects=1"), "{how:?}: {}", dev.show_stats());
    }
}

#[test]
fn an_error_chunk_after_data_fails_that_read_and_keeps_the_connection() {
    let s = Scratch::new("errchunk");
    let fake = Fake::start(&s.0, |n| (n == 0).then_some(Misbehave::DataThenError));
    let dev = open(&format!("nbd:uri={}", fake.uri()));
    let mut c = dev.client();
    let e = c.read_at(&mut [0; 8192], 0).unwrap_err();
    assert_eq!(status(e), Status::Target, "EPERM: the server refused");
    c.write_at(&[6; 4096], 0).unwrap();
    let mut back = [0u8; 4096];
    c.read_at(&mut back, 0).unwrap();
    assert_eq!(back, [6; 4096]);
    assert_eq!(fake.accepted.load(std::sync::atomic::Ordering::SeqCst), 1, "no reconnect");
    assert!(dev.show_stats().contains("lost=0"), "{}", dev.show_stats());
}

#[test]
fn a_broken_reply_while_a_write_is_stuck_in_sendmsg_ends_that_connection() {
    let s = Scratch::new("stuck");
    let fake = Fake::start(&s.0, |n| (n == 0).then_some(Misbehave::GarbageWhileNotReading));
    // A timeout far off: the receiver, not the timeout, must unstick the sender.
    let dev = open(&format!("nbd:uri={},timeout_ms=600000", fake.uri()));
    let mut c = dev.client();
    let data = pattern(9, fake_server::SIZE);
    c.write_at(&data, 0).unwrap();
    let mut back = vec![0u8; fake_server::SIZE];
    c.read_at(&mut back, 0).unwrap();
    assert!(back == data, "written whole on the second connection");
    assert_eq!(fake.accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[test]
fn a_server_that_always_breaks_the_protocol_fails_io_with_eio() {
    let s = Scratch::new("always");
    let fake = Fake::start(&s.0, |_| Some(Misbehave::BadMagic));
    let dev = open(&format!("nbd:uri={},timeout_ms=300", fake.uri()));
    let e = dev.client().write_at(&[1; 512], 0).unwrap_err();
    assert_eq!(status(e), Status::IoErr);
    assert!(fake.accepted.load(std::sync::atomic::Ordering::SeqCst) >= 2, "it reconnected and tried again");
}
