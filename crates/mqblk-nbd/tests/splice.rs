//! Zero-copy read replies (splice.rs): on a Unix socket a large read of a
//! memory-backed export is handed to the socket by reference, and the
//! bytes the client reads are those of its read, even when the client
//! reads them only after another client overwrote, discarded and rewrote
//! the blocks and the store reused its pages many times over, and even
//! when the client first moves them out of its socket by reference.

mod common;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use mqblk_nbd::{Export, Listen, Server};

/// A hang guard for socket reads, not a performance bound.
const HANG_GUARD: Duration = Duration::from_secs(30);
const MIB: usize = 1 << 20;
/// The lent read: small enough to sit whole in a socket with the default
/// send buffer (net.core.wmem_max may be 212992: twice that is asked).
const READ_BYTES: usize = 256 << 10;
const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_TRIM: u16 = 4;

fn socket_path(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("mqblk-nbd-splice-{test}-{}.sock", std::process::id()))
}

/// Connects and negotiates NBD_OPT_GO on the default export (simple
/// replies): in transmission on return.
fn connect_and_go(path: &PathBuf) -> UnixStream {
    let mut s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(HANG_GUARD)).unwrap();
    common::go(&mut s);
    s
}

fn request(cmd: u16, cookie: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut r = 0x2560_9513u32.to_be_bytes().to_vec();
    r.extend_from_slice(&0u16.to_be_bytes());
    r.extend_from_slice(&cmd.to_be_bytes());
    r.extend_from_slice(&cookie.to_be_bytes());
    r.extend_from_slice(&offset.to_be_bytes());
    r.extend_from_slice(&(len as u32).to_be_bytes());
    r
}

/// Reads a simple reply's header: checks its magic, cookie and error 0.
fn reply_ok(c: &mut UnixStream, cookie: u64) {
    let mut h = [0u8; 16];
    c.read_exact(&mut h).unwrap();
    assert_eq!(u32::from_be_bytes(h[..4].try_into().unwrap()), 0x6744_6698, "simple reply magic");
    assert_eq!(u32::from_be_bytes(h[4..8].try_into().unwrap()), 0, "error");
    assert_eq!(u64::from_be_bytes(h[8..].try_into().unwrap()), cookie);
}

fn write_at(c: &mut UnixStream, offset: u64, data: &[u8]) {
    let mut r = request(CMD_WRITE, 2, offset, data.len());
    r.extend_from_slice(data);
    c.write_all(&r).unwrap();
    reply_ok(c, 2);
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..MIB).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Bytes waiting in the socket's receive queue (FIONREAD).
fn queued(c: &UnixStream) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    assert_eq!(unsafe { libc::ioctl(c.as_raw_fd(), libc::FIONREAD, &mut n) }, 0);
    n as usize
}

/// Waits until the reply to a read of READ_BYTES sits whole in `c`'s
/// receive queue (a hang guard bounds the wait; nothing else is timed).
fn wait_for_whole_reply(c: &UnixStream) {
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while queued(c) < 16 + READ_BYTES {
        assert!(std::time::Instant::now() < deadline, "the reply never arrived whole: {} bytes", queued(c));
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Overwrites the first MiB and discards it, then rewrites the other 63
/// MiB of the device 8 times: the store replaces every page it holds, and
/// reuses the addresses of those it freed.
fn churn(w: &mut UnixStream) {
    write_at(w, 0, &pattern(2));
    w.write_all(&request(CMD_TRIM, 2, 0, MIB)).unwrap();
    reply_ok(w, 2);
    for round in 0..8u8 {
        let data = pattern(round.wrapping_mul(7).wrapping_add(3));
        for mib in 1..64 {
            write_at(w, (mib * MIB) as u64, &data);
        }
    }
}

/// A server of a 64 MiB memory-backed export on a Unix socket, a writer
/// and a reader connected, and the device.
fn setup(test: &str) -> (mqblk_nbd::StopHandle, std::thread::JoinHandle<()>, UnixStream, UnixStream, mqblk::Device) {
    let path = socket_path(test);
    let export = Export::open("", "null:size=64,memory_backed=1,irqmode=0,discard=1", false).unwrap();
    let device = export.device.clone();
    let server = Server::new(Listen::unix(&path).unwrap(), vec![export]).unwrap();
    let stop = server.stop_handle();
    let t = std::thread::spawn(move || server.run().unwrap());
    let (w, r) = (connect_and_go(&path), connect_and_go(&path));
    (stop, t, w, r, device)
}

#[test]
fn a_spliced_reply_keeps_the_data_of_its_read() {
    let (stop, t, mut w, mut r, device) = setup("keep");
    let old = pattern(1);
    write_at(&mut w, 0, &old);

    // The read's reply sits whole in r's socket, unread, while the blocks
    // change and the store reuses pages.
    r.write_all(&request(CMD_READ, 1, 0, READ_BYTES)).unwrap();
    wait_for_whole_reply(&r);
    assert_eq!(device.stats().direct_reads_lent, 1, "the reply went by reference, not by copy");
    churn(&mut w);

    reply_ok(&mut r, 1);
    let mut got = vec![0u8; READ_BYTES];
    r.read_exact(&mut got).unwrap();
    assert!(got == old[..READ_BYTES], "the reply read late holds the data of its read");

    // And the blocks read now are the discarded ones: zeros.
    r.write_all(&request(CMD_READ, 3, 0, READ_BYTES)).unwrap();
    reply_ok(&mut r, 3);
    r.read_exact(&mut got).unwrap();
    assert!(got.iter().all(|&b| b == 0));
    drop((w, r));
    stop.stop();
    t.join().unwrap();
}

/// A client that moves the reply out of its socket by reference (splice
/// into a pipe, as a proxy would) has taken the store's frames with it:
/// the socket is empty, and what the pipe yields later is still the data
/// of the read.
#[test]
fn a_reply_spliced_on_by_the_client_keeps_the_data_of_its_read() {
    let (stop, t, mut w, mut r, _device) = setup("passed-on");
    let old = pattern(4);
    write_at(&mut w, 0, &old);
    r.write_all(&request(CMD_READ, 1, 0, READ_BYTES)).unwrap();
    wait_for_whole_reply(&r);
    let mut pipe = [0; 2];
    // SAFETY: a two-int array for pipe(2); then resizing our own pipe.
    unsafe {
        assert_eq!(libc::pipe(pipe.as_mut_ptr()), 0);
        libc::fcntl(pipe[1], libc::F_SETPIPE_SZ, MIB as libc::c_int);
    }
    let mut moved = 0;
    while moved < 16 + READ_BYTES {
        // SAFETY: splice from our socket into our pipe, no offsets.
        let n = unsafe {
            libc::splice(r.as_raw_fd(), std::ptr::null_mut(), pipe[1], std::ptr::null_mut(), 16 + READ_BYTES - moved, 0)
        };
        assert!(n > 0, "splice: {}", std::io::Error::last_os_error());
        moved += n as usize;
    }
    assert_eq!(queued(&r), 0, "the socket gave everything up");
    churn(&mut w);

    let mut got = vec![0u8; 16 + READ_BYTES];
    let mut at = 0;
    while at < got.len() {
        // SAFETY: reads into the unfilled rest of `got` from our pipe.
        let n = unsafe { libc::read(pipe[0], got[at..].as_mut_ptr().cast(), got.len() - at) };
        assert!(n > 0);
        at += n as usize;
    }
    assert_eq!(&got[..4], &0x6744_6698u32.to_be_bytes());
    assert!(got[16..] == old[..READ_BYTES], "the pipe yields the data of the read");
    // SAFETY: our own pipe's fds.
    unsafe {
        libc::close(pipe[0]);
        libc::close(pipe[1]);
    }
    drop((w, r));
    stop.stop();
    t.join().unwrap();
}

/// Serves `export` on a Unix socket or TCP; returns the server's stop
/// handle, its thread and a connected client in transmission.
fn serve_one(test: &str, export: Export, tcp: bool) -> (mqblk_nbd::StopHandle, std::thread::JoinHandle<()>, Conn) {
    let listen = if tcp { Listen::tcp("127.0.0.1:0").unwrap() } else { Listen::unix(socket_path(test)).unwrap() };
    let addr = match &listen {
        Listen::Tcp(l) => Some(l.local_addr().unwrap()),
        Listen::Unix(..) => None,
    };
    let server = Server::new(listen, vec![export]).unwrap();
    let stop = server.stop_handle();
    let t = std::thread::spawn(move || server.run().unwrap());
    let c = match addr {
        Some(a) => Conn::Tcp(go(std::net::TcpStream::connect(a).unwrap())),
        None => Conn::Unix(connect_and_go(&socket_path(test))),
    };
    (stop, t, c)
}

/// The stream a test client holds.
enum Conn {
    Unix(UnixStream),
    Tcp(std::net::TcpStream),
}

impl Conn {
    fn s(&mut self) -> &mut dyn ReadWrite {
        match self {
            Conn::Unix(s) => s,
            Conn::Tcp(s) => s,
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// A TCP stream in transmission (as `connect_and_go`).
fn go(mut s: std::net::TcpStream) -> std::net::TcpStream {
    s.set_read_timeout(Some(HANG_GUARD)).unwrap();
    common::go(&mut s);
    s
}

/// Writes `data` at `offset` then reads `len` bytes at `offset` back on
/// `c`; returns what the read returned.
fn write_then_read(c: &mut dyn ReadWrite, offset: u64, data: &[u8], len: usize) -> Vec<u8> {
    let mut r = request(CMD_WRITE, 5, offset, data.len());
    r.extend_from_slice(data);
    c.write_all(&r).unwrap();
    let mut h = [0u8; 16];
    c.read_exact(&mut h).unwrap();
    assert_eq!(u32::from_be_bytes(h[4..8].try_into().unwrap()), 0, "write error");
    c.write_all(&request(CMD_READ, 6, offset, len)).unwrap();
    c.read_exact(&mut h).unwrap();
    assert_eq!(u32::from_be_bytes(h[4..8].try_into().unwrap()), 0, "read error");
    let mut got = vec![0u8; len];
    c.read_exact(&mut got).unwrap();
    got
}

/// Where a reply goes by copy: a read spanning more pages than the pipe
/// holds, any reply on TCP (splice.rs keeps zero copy to Unix sockets),
/// and any reply when the export turns splicing off. The data is the same
/// either way.
#[test]
fn replies_the_splicer_cannot_take_are_copied() {
    let spec = "null:size=64,memory_backed=1,irqmode=0";
    let data = pattern(9);
    // 512 bytes in: 1 MiB spans 257 pages, one more than the pipe's slots.
    let export = Export::open("", spec, false).unwrap();
    let device = export.device.clone();
    let (stop, t, mut c) = serve_one("span", export, false);
    let got = write_then_read(c.s(), 512, &data, MIB);
    assert!(got == data);
    assert_eq!((device.stats().direct_reads, device.stats().direct_reads_lent), (1, 0), "copied, not lent");
    drop(c);
    stop.stop();
    t.join().unwrap();
    for (name, tcp, splice) in [("tcp", true, true), ("off", false, false), ("on", false, true)] {
        let mut export = Export::open("", spec, false).unwrap();
        export.splice_reads = splice;
        let device = export.device.clone();
        let (stop, t, mut c) = serve_one(name, export, tcp);
        let got = write_then_read(c.s(), 0, &data, MIB);
        assert!(got == data, "{name}");
        let lent = device.stats().direct_reads_lent;
        assert_eq!(lent, u64::from(!tcp && splice), "{name}: replies lent to the socket");
        assert_eq!(device.stats().direct_reads, 1, "{name}: a direct read either way");
        drop(c);
        stop.stop();
        t.join().unwrap();
    }
}
