//! The server's life: a stop handle ends `run` (blocked in accept, or
//! with a client connected), stopping twice is harmless, and set-up
//! errors name what is wrong.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use mqblk_nbd::{Error, Export, Listen, Server, StopHandle};

/// How long a stopped server may take before the test calls it hung
/// (a hang guard, not a performance bound).
const HANG_GUARD: Duration = Duration::from_secs(20);

fn export(name: &str) -> Export {
    Export::open(name, "null:size=1,memory_backed=1", false).expect("a null device")
}

fn socket_path(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("mqblk-nbd-server-{test}-{}.sock", std::process::id()))
}

/// Starts `server.run()` on a thread; the receiver gets its result.
fn spawn(server: Server) -> (StopHandle, mpsc::Receiver<Result<(), Error>>, JoinHandle<()>) {
    let stop = server.stop_handle();
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let _ = tx.send(server.run());
    });
    (stop, rx, t)
}

/// Connects to `path`, negotiates fixed newstyle with NO_ZEROES and
/// NBD_OPT_GO to the default export: in transmission on return.
fn connect_and_go(path: &PathBuf) -> UnixStream {
    let mut s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(HANG_GUARD)).unwrap();
    common::go(&mut s);
    s
}

#[test]
fn stop_wakes_a_server_waiting_for_its_first_client() {
    let path = socket_path("idle");
    let server = Server::new(Listen::unix(&path).unwrap(), vec![export("")]).unwrap();
    let (stop, done, t) = spawn(server);
    // Give run() time to block in its poll: nothing else would wake it.
    std::thread::sleep(Duration::from_millis(100));
    assert!(done.try_recv().is_err(), "run() waits for clients until stopped");
    stop.stop();
    let result = done.recv_timeout(HANG_GUARD).expect("run() returned after stop()");
    assert!(result.is_ok(), "{result:?}");
    t.join().unwrap();
    assert!(!path.exists(), "the Unix socket's file is removed");
    assert!(UnixStream::connect(&path).is_err(), "the listener is closed");
}

#[test]
fn stop_ends_a_connected_client_after_its_request_is_answered() {
    let path = socket_path("client");
    let server = Server::new(Listen::unix(&path).unwrap(), vec![export("")]).unwrap();
    let (stop, done, t) = spawn(server);
    let mut c = connect_and_go(&path);
    // NBD_CMD_WRITE of 512 bytes at 0, cookie 7: answered with error 0.
    let mut req = 0x2560_9513u32.to_be_bytes().to_vec();
    req.extend_from_slice(&0u16.to_be_bytes());
    req.extend_from_slice(&1u16.to_be_bytes());
    req.extend_from_slice(&7u64.to_be_bytes());
    req.extend_from_slice(&0u64.to_be_bytes());
    req.extend_from_slice(&512u32.to_be_bytes());
    req.extend_from_slice(&[9u8; 512]);
    c.write_all(&req).unwrap();
    let mut reply = [0u8; 16];
    c.read_exact(&mut reply).unwrap();
    assert_eq!(u32::from_be_bytes(reply[4..8].try_into().unwrap()), 0, "the write succeeded");
    assert_eq!(u64::from_be_bytes(reply[8..16].try_into().unwrap()), 7);
    stop.stop();
    let result = done.recv_timeout(HANG_GUARD).expect("run() returned with a client connected");
    assert!(result.is_ok(), "{result:?}");
    t.join().unwrap();
    let mut b = [0u8; 1];
    assert_eq!(c.read(&mut b).unwrap(), 0, "the connection was closed by the server");
}

#[test]
fn a_second_stop_is_harmless() {
    let server = Server::new(Listen::tcp("127.0.0.1:0").unwrap(), vec![export("")]).unwrap();
    let (stop, done, t) = spawn(server);
    let other = stop.clone();
    assert!(!stop.is_stopped());
    stop.stop();
    other.stop();
    assert!(done.recv_timeout(HANG_GUARD).expect("run() returned").is_ok());
    t.join().unwrap();
    stop.stop(); // after run() returned, too
    assert!(stop.is_stopped() && other.is_stopped());
}

#[test]
fn a_server_stopped_before_run_returns_at_once() {
    let server = Server::new(Listen::tcp("127.0.0.1:0").unwrap(), vec![export("")]).unwrap();
    server.stop_handle().stop();
    assert!(server.run().is_ok());
}

#[test]
fn listening_on_an_address_in_use_names_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    match Listen::tcp(&address) {
        Err(e @ Error::Listen { .. }) => {
            let Error::Listen { address: named, source } = &e else { unreachable!() };
            assert_eq!(named, &address);
            assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse);
            assert!(e.to_string().contains(&address), "{e}");
        }
        other => panic!("expected Error::Listen, got {other:?}"),
    }
}

#[test]
fn a_unix_socket_in_a_missing_directory_names_the_path() {
    let path = "/nonexistent-mqblk-dir/sock";
    let e = Listen::unix(path).unwrap_err();
    assert!(matches!(&e, Error::Listen { address, .. } if address == path), "{e:?}");
    assert!(e.to_string().contains(path), "{e}");
}

#[test]
fn two_exports_of_one_name_are_refused_by_name() {
    let listen = Listen::tcp("127.0.0.1:0").unwrap();
    let e = Server::new(listen, vec![export("a"), export("b"), export("a")]).err().expect("refused");
    assert!(matches!(&e, Error::DuplicateExport { name } if name == "a"), "{e:?}");
    assert!(e.to_string().contains("'a'"), "{e}");
}

#[test]
fn a_server_without_exports_is_refused() {
    let e = Server::new(Listen::tcp("127.0.0.1:0").unwrap(), Vec::new()).err().expect("refused");
    assert!(matches!(e, Error::NoExports), "{e:?}");
}

#[test]
fn a_bad_device_spec_names_the_spec() {
    let e = Export::open("x", "nosuchdriver:size=1", false).err().expect("refused");
    assert!(matches!(&e, Error::Device { spec, .. } if spec == "nosuchdriver:size=1"), "{e:?}");
    assert!(e.to_string().contains("nosuchdriver:size=1"), "{e}");
}

#[test]
fn stop_ends_clients_idle_in_the_handshake_and_the_option_phase() {
    let path = socket_path("haggle");
    let server = Server::new(Listen::unix(&path).unwrap(), vec![export("")]).unwrap();
    let (stop, done, t) = spawn(server);
    let mut greeted = UnixStream::connect(&path).unwrap();
    greeted.set_read_timeout(Some(HANG_GUARD)).unwrap();
    let mut greeting = [0u8; 18];
    greeted.read_exact(&mut greeting).unwrap(); // and sends no client flags
    let mut haggling = UnixStream::connect(&path).unwrap();
    haggling.set_read_timeout(Some(HANG_GUARD)).unwrap();
    haggling.read_exact(&mut greeting).unwrap();
    haggling.write_all(&3u32.to_be_bytes()).unwrap(); // and sends no option
                                                      // The server reads the flags before it waits for an option.
    std::thread::sleep(Duration::from_millis(100));
    stop.stop();
    let result = done.recv_timeout(HANG_GUARD).expect("run() returned with idle clients connected");
    assert!(result.is_ok(), "{result:?}");
    t.join().unwrap();
    for mut c in [greeted, haggling] {
        let mut b = [0u8; 1];
        assert_eq!(c.read(&mut b).unwrap(), 0, "closed by the server");
    }
}

/// An NBD request: magic, flags 0, `cmd`, `cookie`, `offset`, `len`.
fn request(cmd: u16, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
    let mut req = 0x2560_9513u32.to_be_bytes().to_vec();
    req.extend_from_slice(&0u16.to_be_bytes());
    req.extend_from_slice(&cmd.to_be_bytes());
    req.extend_from_slice(&cookie.to_be_bytes());
    req.extend_from_slice(&offset.to_be_bytes());
    req.extend_from_slice(&len.to_be_bytes());
    req
}

/// A simple reply's error, after checking its magic and cookie.
fn simple_reply(c: &mut UnixStream, cookie: u64) -> u32 {
    let mut reply = [0u8; 16];
    c.read_exact(&mut reply).unwrap();
    assert_eq!(u32::from_be_bytes(reply[..4].try_into().unwrap()), 0x6744_6698, "a simple reply");
    assert_eq!(u64::from_be_bytes(reply[8..16].try_into().unwrap()), cookie);
    u32::from_be_bytes(reply[4..8].try_into().unwrap())
}

/// Large reads of a memory-backed export go by direct access (the
/// device's pages written to the socket): the same bytes as the bio path,
/// holes as zeros, framed the same; an export with `direct_reads` off
/// serves them as bios. Small reads, and reads out of range, stay on the
/// bio path.
#[test]
fn large_reads_by_direct_access_send_what_bios_would() {
    let pattern: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    let mut answers = Vec::new();
    for direct in [true, false] {
        let path = socket_path(if direct { "direct" } else { "bios" });
        let mut e = Export::open("", "null:size=4,memory_backed=1,irqmode=0", false).expect("a null device");
        e.direct_reads = direct;
        let device = e.device.clone();
        let server = Server::new(Listen::unix(&path).unwrap(), vec![e]).unwrap();
        let (stop, done, t) = spawn(server);
        let mut c = connect_and_go(&path);
        // 1 MiB written at 64 KiB; the first 64 KiB stays a hole.
        let mut w = request(1, 1, 64 << 10, pattern.len() as u32);
        w.extend_from_slice(&pattern);
        c.write_all(&w).unwrap();
        assert_eq!(simple_reply(&mut c, 1), 0);
        let mut got = Vec::new();
        for (cookie, offset, len) in [(2u64, 0u64, (1u32 << 20) + (64 << 10)), (3, 4096, 8192), (4, 1 << 20, 65536)] {
            c.write_all(&request(0, cookie, offset, len)).unwrap();
            assert_eq!(simple_reply(&mut c, cookie), 0);
            let mut data = vec![0u8; len as usize];
            c.read_exact(&mut data).unwrap();
            got.push(data);
        }
        c.write_all(&request(0, 5, (4 << 20) - 4096, 1 << 20)).unwrap();
        assert_eq!(simple_reply(&mut c, 5), 22, "past the end: EINVAL, no data");
        assert!(got[0][..64 << 10].iter().all(|&b| b == 0), "the hole reads as zeros");
        assert!(got[0][64 << 10..] == pattern[..], "then the written MiB");
        let direct_reads = device.stats().direct_reads;
        assert_eq!(direct_reads, if direct { 2 } else { 0 }, "the two reads of 64 KiB and more");
        answers.push(got);
        stop.stop();
        assert!(done.recv_timeout(HANG_GUARD).expect("run() returned").is_ok());
        t.join().unwrap();
    }
    assert!(answers[0] == answers[1], "direct access and bios send the same bytes");
}

/// NBD_CMD_WRITE_ZEROES with NBD_CMD_FLAG_NO_HOLE keeps the zeroed range
/// allocated (the bio carries REQ_NOUNMAP: a memory-backed null device
/// keeps its pages); without the flag the server may punch a hole, and
/// the null device frees them.
#[test]
fn write_zeroes_with_no_hole_keeps_the_pages() {
    let path = socket_path("no-hole");
    let e = Export::open("", "null:size=4,bs=4096,memory_backed=1,irqmode=0", false).expect("a null device");
    let device = e.device.clone();
    let pages = || {
        let stats = device.show_stats();
        let line = stats.lines().find(|l| l.starts_with("null/pages=")).expect("null/pages in the stats");
        line["null/pages=".len()..].split_whitespace().next().unwrap().parse::<u64>().unwrap()
    };
    let server = Server::new(Listen::unix(&path).unwrap(), vec![e]).unwrap();
    let (stop, done, t) = spawn(server);
    let mut c = connect_and_go(&path);
    let mut w = request(1, 1, 0, 1 << 20);
    w.extend_from_slice(&vec![7u8; 1 << 20]);
    c.write_all(&w).unwrap();
    assert_eq!(simple_reply(&mut c, 1), 0);
    assert_eq!(pages(), 256, "1 MiB written");
    let mut no_hole = request(6, 2, 0, 512 << 10);
    no_hole[4..6].copy_from_slice(&2u16.to_be_bytes()); // NBD_CMD_FLAG_NO_HOLE
    c.write_all(&no_hole).unwrap();
    assert_eq!(simple_reply(&mut c, 2), 0);
    assert_eq!(pages(), 256, "NO_HOLE: the zeroed half keeps its pages");
    c.write_all(&request(6, 3, 512 << 10, 512 << 10)).unwrap();
    assert_eq!(simple_reply(&mut c, 3), 0);
    assert_eq!(pages(), 128, "without NO_HOLE the other half's pages are freed");
    c.write_all(&request(0, 4, 0, 1 << 20)).unwrap();
    assert_eq!(simple_reply(&mut c, 4), 0);
    let mut data = vec![1u8; 1 << 20];
    c.read_exact(&mut data).unwrap();
    assert!(data.iter().all(|&b| b == 0), "every zeroed byte reads as zero");
    stop.stop();
    assert!(done.recv_timeout(HANG_GUARD).expect("run() returned").is_ok());
    t.join().unwrap();
}
