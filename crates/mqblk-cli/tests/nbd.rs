//! `mqblk serve` with real NBD clients (nbdinfo, nbdcopy, qemu-img,
//! qemu-io, fio's nbd engine; scripts/test-all.sh installs them) and with a
//! raw-socket client for multi-connection consistency and malformed traffic.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::nbd::{run, Server};

#[test]
fn nbdinfo_shows_size_flags_block_sizes_and_the_allocation_map() {
    let s = Server::start("info", &["--device", "null:size=64,memory_backed=1,discard=1"]);
    let info = run("nbdinfo", &[&s.uri()]);
    for want in [
        "export-size: 67108864",
        "can_flush: true",
        "can_fua: true",
        "can_trim: true",
        "can_zero: true",
        "can_multi_conn: true",
        "is_read_only: false",
        "block_size_minimum: 512",
        "base:allocation",
    ] {
        assert!(info.contains(want), "{want} missing in\n{info}");
    }
    // base:allocation: unwritten pages of a memory-backed device are holes.
    let map = run("nbdinfo", &["--map", &s.uri()]);
    assert!(map.contains("67108864") && map.contains("hole,zero") && !map.contains("data"), "{map}");
    run("qemu-io", &["-f", "raw", "-c", "write -P 1 1M 64k", &s.uri()]);
    let map = run("nbdinfo", &["--map", &s.uri()]);
    let lines: Vec<Vec<&str>> = map.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines.len(), 3, "{map}");
    assert_eq!(lines[1][..3], ["1048576", "65536", "0"], "the written 64 KiB are data:\n{map}");
    assert_eq!((lines[0][2], lines[2][2]), ("3", "3"), "around it, holes that read as zeros:\n{map}");
    let list = run("nbdinfo", &["--list", &s.uri()]);
    assert!(list.contains("export=\"\""), "{list}");
    assert!(run("nbdinfo", &["--size", &s.uri_export("")]).trim() == "67108864");
}

#[test]
fn nbdcopy_and_qemu_img_round_trip_byte_exact() {
    let s = Server::start("copy", &["--device", "null:size=32,memory_backed=1,discard=1"]);
    let dir = &s.dir;
    let src = dir.join("src.img");
    let mut data = vec![0u8; 32 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for c in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    std::fs::write(&src, &data).unwrap();
    run("nbdcopy", &[src.to_str().unwrap(), &s.uri()]);
    let back = dir.join("back.img");
    run("nbdcopy", &[&s.uri(), back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == data, "nbdcopy both ways, byte-exact");
    let cmp = run("qemu-img", &["compare", "-f", "raw", "-F", "raw", src.to_str().unwrap(), &s.uri()]);
    assert!(cmp.contains("Images are identical"), "{cmp}");
    // qemu-img convert, both ways.
    let conv = dir.join("conv.qcow2");
    run("qemu-img", &["convert", "-f", "raw", "-O", "qcow2", &s.uri(), conv.to_str().unwrap()]);
    let cmp = run("qemu-img", &["compare", "-f", "qcow2", "-F", "raw", conv.to_str().unwrap(), &s.uri()]);
    assert!(cmp.contains("Images are identical"), "{cmp}");
    let zeros = dir.join("zeros.img");
    std::fs::write(&zeros, vec![0u8; 32 << 20]).unwrap();
    run("qemu-img", &["convert", "-n", "-f", "raw", "-O", "raw", zeros.to_str().unwrap(), &s.uri()]);
    let back = dir.join("back2.img");
    run("nbdcopy", &[&s.uri(), back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap().iter().all(|b| *b == 0), "convert of zeros reached every byte");
    let info = run("qemu-img", &["info", &s.uri()]);
    assert!(info.contains("33554432 bytes"), "{info}");
    let io = run(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0xab 4096 8192",
            "-c",
            "read -P 0xab 4096 8192",
            "-c",
            "write -z 0 4096",
            "-c",
            "read -P 0 0 4096",
            "-c",
            "flush",
            &s.uri(),
        ],
    );
    assert!(!io.contains("Pattern verification failed"), "{io}");
}

#[test]
fn fio_nbd_engine_with_verify() {
    let s = Server::start("fio", &["--device", "null:size=64,memory_backed=1"]);
    let v = fio_verify(&s, &["--size=16m"]);
    assert_eq!(v["jobs"][0]["error"], 0);
    assert!(v["jobs"][0]["write"]["io_bytes"].as_u64().unwrap() >= 16 << 20);
    assert!(v["jobs"][0]["read"]["io_bytes"].as_u64().unwrap() >= 16 << 20, "the verify pass read it all back");
}

/// fio's nbd engine against `s`: 4k random writes at iodepth 16 with
/// verify=crc32c, plus `extra` options; the JSON report.
fn fio_verify(s: &Server, extra: &[&str]) -> serde_json::Value {
    let uri = format!("--uri={}", s.uri());
    let mut args = vec!["--name=v", "--ioengine=nbd", &uri, "--rw=randwrite", "--bs=4k", "--iodepth=16"];
    args.extend_from_slice(extra);
    args.extend(["--verify=crc32c", "--output-format=json"]);
    // fio saves verify state (local-JOB-N-verify.state) in its working
    // directory: the server's temporary one, not the checkout.
    let out =
        Command::new("fio").args(&args).current_dir(&s.dir).output().expect("fio (scripts/test-all.sh installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // fio's nbd engine prints "connected to NBD server" before the JSON.
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&text[text.find('{').expect("JSON output")..]).unwrap()
}

/// A minimal raw NBD client: fixed newstyle, NO_ZEROES, GO to `export`,
/// simple replies.
struct Raw(UnixStream);

impl Raw {
    fn connect(sock: &str) -> Self {
        let mut s = UnixStream::connect(sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut g = [0u8; 18];
        s.read_exact(&mut g).unwrap();
        assert_eq!(&g[0..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        s.write_all(&3u32.to_be_bytes()).unwrap();
        Raw(s)
    }
    fn option(&mut self, opt: u32, data: &[u8]) {
        let mut b = 0x4948_4156_454f_5054u64.to_be_bytes().to_vec();
        b.extend_from_slice(&opt.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.0.write_all(&b).unwrap();
    }
    /// Reads one option reply: (reply type, data).
    fn option_reply(&mut self) -> (u32, Vec<u8>) {
        let mut h = [0u8; 20];
        self.0.read_exact(&mut h).unwrap();
        let ty = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut d = vec![0u8; len as usize];
        self.0.read_exact(&mut d).unwrap();
        (ty, d)
    }
    fn go(sock: &str, export: &str) -> Self {
        let mut c = Raw::connect(sock);
        let mut d = (export.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(export.as_bytes());
        d.extend_from_slice(&0u16.to_be_bytes());
        c.option(7, &d);
        loop {
            let (ty, _) = c.option_reply();
            assert!(ty == 1 || ty == 3, "GO failed with reply {ty:#x}");
            if ty == 1 {
                return c;
            }
        }
    }
    fn request(&mut self, cmd: u16, flags: u16, cookie: u64, offset: u64, len: u32, data: &[u8]) {
        let mut b = 0x2560_9513u32.to_be_bytes().to_vec();
        b.extend_from_slice(&flags.to_be_bytes());
        b.extend_from_slice(&cmd.to_be_bytes());
        b.extend_from_slice(&cookie.to_be_bytes());
        b.extend_from_slice(&offset.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(data);
        self.0.write_all(&b).unwrap();
    }
    /// The chunks of one structured reply, up to the one with DONE:
    /// (flags, type, payload).
    fn structured_reply(&mut self) -> Vec<(u16, u16, Vec<u8>)> {
        let mut chunks = Vec::new();
        loop {
            let mut h = [0u8; 20];
            self.0.read_exact(&mut h).unwrap();
            assert_eq!(u32::from_be_bytes(h[0..4].try_into().unwrap()), 0x668e_33ef, "structured reply magic");
            let flags = u16::from_be_bytes(h[4..6].try_into().unwrap());
            let ty = u16::from_be_bytes(h[6..8].try_into().unwrap());
            let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
            let mut d = vec![0u8; len as usize];
            self.0.read_exact(&mut d).unwrap();
            chunks.push((flags, ty, d));
            if flags & 1 != 0 {
                return chunks;
            }
        }
    }
    /// (error, cookie) of a simple reply, then `read` data bytes.
    fn reply(&mut self, read: usize) -> (u32, u64, Vec<u8>) {
        let mut h = [0u8; 16];
        self.0.read_exact(&mut h).unwrap();
        assert_eq!(u32::from_be_bytes(h[0..4].try_into().unwrap()), 0x6744_6698, "simple reply magic");
        let err = u32::from_be_bytes(h[4..8].try_into().unwrap());
        let mut d = vec![0u8; if err == 0 { read } else { 0 }];
        self.0.read_exact(&mut d).unwrap();
        (err, u64::from_be_bytes(h[8..16].try_into().unwrap()), d)
    }
}

#[test]
fn several_connections_write_disjoint_ranges_and_read_each_other_after_flush() {
    let s = Server::start("multi", &["--device", "null:size=16,memory_backed=1"]);
    let sock = s.sock();
    let writers: Vec<_> = (0..4u8)
        .map(|t| {
            let sock = sock.clone();
            std::thread::spawn(move || {
                let mut c = Raw::go(&sock, "");
                // 64 writes in flight at once, replies in any order.
                for i in 0..64u64 {
                    let off = (u64::from(t) * 64 + i) * 4096;
                    c.request(1, 0, i, off, 4096, &[t + 1; 4096]);
                }
                let mut cookies: Vec<u64> = (0..64)
                    .map(|_| c.reply(0))
                    .map(|(e, k, _)| {
                        assert_eq!(e, 0);
                        k
                    })
                    .collect();
                cookies.sort_unstable();
                assert_eq!(cookies, (0..64).collect::<Vec<_>>(), "every write acknowledged once");
                c.request(3, 0, 99, 0, 0, &[]);
                assert_eq!(c.reply(0).0, 0, "flush");
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let mut c = Raw::go(&sock, "");
    for t in 0..4u64 {
        c.request(0, 0, t, t * 64 * 4096 + 63 * 4096, 4096, &[]);
        let (e, _, d) = c.reply(4096);
        assert_eq!(e, 0);
        assert!(d.iter().all(|b| u64::from(*b) == t + 1), "connection {t}'s data is visible to another");
    }
}

#[test]
fn malformed_traffic_gets_errors_or_a_closed_connection_and_others_keep_working() {
    let s =
        Server::start("bad", &["--device", "null:size=1,memory_backed=1", "--device", "null:size=1", "--export", "ro"]);
    let sock = s.sock();
    let mut good = Raw::go(&sock, "");
    // Wrong magic in the handshake: the connection closes.
    let mut c = Raw::connect(&sock);
    c.0.write_all(&[0u8; 16]).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(c.0.read(&mut b).unwrap_or(0), 0, "closed after a bad option magic");
    // An unknown option: ERR_UNSUP, and the haggling goes on.
    let mut c = Raw::connect(&sock);
    c.option(999, b"xyz");
    assert_eq!(c.option_reply().0, (1 << 31) + 1);
    c.option(7, &[0, 0, 0, 9, b'n', b'o', b'p', b'e', b'x', b'x', b'x', b'x', b'x', 0, 0]);
    assert_eq!(c.option_reply().0, (1 << 31) + 6, "GO to an unknown export: ERR_UNKNOWN");
    c.option(7, &[0, 0, 0, 50]);
    assert_eq!(c.option_reply().0, (1 << 31) + 3, "truncated GO data: ERR_INVALID");
    // A too-long option: closed.
    let mut c = Raw::connect(&sock);
    let mut h = 0x4948_4156_454f_5054u64.to_be_bytes().to_vec();
    h.extend_from_slice(&1u32.to_be_bytes());
    h.extend_from_slice(&(1u32 << 30).to_be_bytes());
    c.0.write_all(&h).unwrap();
    assert_eq!(c.0.read(&mut b).unwrap_or(0), 0);
    // Transmission errors, each answered, the connection stays.
    let mut c = Raw::go(&sock, "");
    c.request(0, 0, 1, 1 << 20, 4096, &[]);
    assert_eq!(c.reply(0).0, 22, "read past the end: EINVAL");
    c.request(1, 0, 2, (1 << 20) - 512, 1024, &[0; 1024]);
    assert_eq!(c.reply(0).0, 28, "write past the end: ENOSPC");
    c.request(0, 0, 3, u64::MAX - 10, 4096, &[]);
    assert_eq!(c.reply(0).0, 22, "offset + length overflow: EINVAL");
    c.request(0, 0, 4, 100, 512, &[]);
    assert_eq!(c.reply(0).0, 22, "misaligned: EINVAL");
    c.request(42, 0, 5, 0, 0, &[]);
    assert_eq!(c.reply(0).0, 22, "unknown command: EINVAL");
    c.request(0, 0, 6, 0, 512, &[]);
    assert_eq!(c.reply(512).0, 0, "still serving");
    // Pipelined, one batch for the server: two reads around a TRIM that
    // this device (no discard=1) refuses at submission; each is answered.
    c.request(0, 0, 20, 0, 512, &[]);
    c.request(4, 0, 21, 0, 512, &[]);
    c.request(0, 0, 22, 512, 512, &[]);
    let mut got: Vec<(u64, u32)> = (0..3)
        .map(|_| {
            let (e, cookie, _) = c.reply(512);
            (cookie, e)
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, [(20, 0), (21, 95), (22, 0)], "ENOTSUP for the refused TRIM only");
    // A write over the maximum: the connection closes (its payload is not read).
    c.request(1, 0, 7, 0, 64 << 20, &[]);
    assert_eq!(c.0.read(&mut b).unwrap_or(0), 0);
    // The second export, by name.
    let mut named = Raw::go(&sock, "ro");
    named.request(0, 0, 1, 0, 512, &[]);
    assert_eq!(named.reply(512).0, 0);
    // Writes to a read-only export: EPERM.
    let ro = Server::start("ro", &["--device", "null:size=1", "--read-only"]);
    let mut r = Raw::go(&ro.sock(), "");
    r.request(1, 0, 1, 0, 512, &[1; 512]);
    assert_eq!(r.reply(0).0, 1, "EPERM");
    // Half a header, then gone; and a write cut short: nothing acknowledged.
    let mut c = Raw::go(&sock, "");
    c.0.write_all(&[0x25, 0x60, 0x95]).unwrap();
    drop(c);
    let mut c = Raw::go(&sock, "");
    c.request(1, 0, 9, 0, 4096, &[7; 100]);
    drop(c);
    // The first connection never noticed any of it.
    good.request(1, 0, 10, 0, 512, &[5; 512]);
    assert_eq!(good.reply(0).0, 0);
    good.request(0, 0, 11, 0, 512, &[]);
    let (e, _, d) = good.reply(512);
    assert!(e == 0 && d.iter().all(|b| *b == 5), "the cut-short write did not land");
}

#[test]
fn sigterm_stops_cleanly_and_flushes_file_devices() {
    let dir = std::env::temp_dir().join(format!("mqblk-nbd-term-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("disk.img");
    let spec = format!("file:path={},size=4m,create=1", file.display());
    let mut s = Server::start("term", &["--device", &spec]);
    run("qemu-io", &["-f", "raw", "-c", "write -P 0x5a 8192 4096", &s.uri()]);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    let status = s.child.wait().unwrap();
    assert!(status.success(), "clean exit on SIGTERM");
    let data = std::fs::read(&file).unwrap();
    assert!(data[8192..12288].iter().all(|b| *b == 0x5a));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_serve_options_are_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk")).args(["serve"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("serve needs --device"));
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk")).args(["serve", "--export", "x"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--export names the --device before it"));
}

/// A file export whose connections reap its one io_uring themselves
/// (`reap=client`, no completion thread): three fio connections share the
/// ring, so each also reaps the others' completions (which then reach them
/// through their eventfds); each verifies its own range.
#[test]
fn a_reap_client_file_export_serves_connections_sharing_its_ring() {
    let path = format!("/dev/shm/mqblk-nbd-reap-{}", std::process::id());
    let spec = format!("file:path={path},size=24m,create=1,reap=client,submit_queues=1");
    let s = Server::start("reap", &["--device", &spec]);
    let v = fio_verify(&s, &["--size=8m", "--offset_increment=8m", "--numjobs=3"]);
    drop(s);
    let _ = std::fs::remove_file(&path);
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 3);
    for j in jobs {
        assert_eq!(j["error"], 0, "{j}");
        assert_eq!(j["write"]["io_bytes"].as_u64().unwrap(), 8 << 20, "{j}");
        assert_eq!(j["read"]["io_bytes"].as_u64().unwrap(), 8 << 20, "verify read it all back: {j}");
    }
}

/// Structured replies: a large read of a memory-backed null export sends
/// its unwritten pages as OFFSET_HOLE chunks and its data as OFFSET_DATA,
/// then a final NONE; with DF the data comes in one chunk.
#[test]
fn structured_reads_send_holes_as_hole_chunks_unless_df() {
    let s = Server::start("holes", &["--device", "null:size=1,memory_backed=1"]);
    let mut c = Raw::connect(&s.sock());
    c.option(8, &[]);
    assert_eq!(c.option_reply().0, 1, "STRUCTURED_REPLY acknowledged");
    c.option(7, &[0, 0, 0, 0, 0, 0]);
    while c.option_reply().0 != 1 {}
    c.request(1, 0, 1, 65536, 4096, &[0x77; 4096]);
    let chunks = c.structured_reply();
    assert_eq!(chunks.len(), 1);
    assert_eq!((chunks[0].0, chunks[0].1), (1, 0), "a write's reply: NONE with DONE");
    // 128 KiB from 0: a hole, 4 KiB of data at 64 KiB, a hole.
    c.request(0, 0, 2, 0, 128 << 10, &[]);
    let chunks = c.structured_reply();
    let types: Vec<u16> = chunks.iter().map(|ch| ch.1).collect();
    assert_eq!(types, [2, 1, 2, 0], "HOLE, DATA, HOLE, NONE: {chunks:?}");
    assert!(chunks[..3].iter().all(|ch| ch.0 == 0) && chunks[3].0 == 1, "DONE on the last chunk only");
    let mut image = vec![0xeeu8; 128 << 10];
    for (_, ty, payload) in &chunks {
        let at = u64::from_be_bytes(payload.get(..8).unwrap_or(&[0; 8]).try_into().unwrap()) as usize;
        match ty {
            1 => image[at..at + payload.len() - 8].copy_from_slice(&payload[8..]),
            2 => {
                let n = u32::from_be_bytes(payload[8..12].try_into().unwrap()) as usize;
                image[at..at + n].fill(0);
            }
            _ => {}
        }
    }
    let mut want = vec![0u8; 128 << 10];
    want[65536..69632].fill(0x77);
    assert!(image == want, "the chunks cover the read and reproduce the data");
    // DF: one OFFSET_DATA chunk with all of it.
    c.request(0, 1 << 2, 3, 0, 128 << 10, &[]);
    let chunks = c.structured_reply();
    assert_eq!(chunks.len(), 1);
    assert_eq!((chunks[0].0, chunks[0].1, chunks[0].2.len()), (1, 1, 8 + (128 << 10)));
    assert!(chunks[0].2[8..] == want[..]);
}

/// Random garbage at every phase (greeting, options, transmission): the
/// server never falls over and a well-behaved connection still works.
#[test]
fn random_garbage_never_takes_the_server_down() {
    let s = Server::start("garbage", &["--device", "null:size=1,memory_backed=1"]);
    let sock = s.sock();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..150 {
        let len = (rnd() % 300) as usize;
        let junk: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
        let mut c = match i % 3 {
            0 => UnixStream::connect(&sock).unwrap(), // garbage instead of client flags
            1 => Raw::connect(&sock).0,               // garbage in the option phase
            _ => Raw::go(&sock, "").0,                // garbage in transmission
        };
        c.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let _ = c.write_all(&junk);
        let mut sink = [0u8; 4096];
        let _ = c.read(&mut sink);
    }
    let mut good = Raw::go(&sock, "");
    good.request(1, 0, 1, 4096, 512, &[3; 512]);
    assert_eq!(good.reply(0).0, 0);
    good.request(0, 0, 2, 4096, 512, &[]);
    let (e, _, d) = good.reply(512);
    assert!(e == 0 && d.iter().all(|b| *b == 3));
}

#[test]
fn tcp_on_loopback_with_named_exports() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["serve", "--device", "null:size=8", "--export", "a", "--device", "null:size=16", "--export", "b"])
        .args(["--listen", &addr])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let a = run("nbdinfo", &["--size", &format!("nbd://{addr}/a")]);
    let b = run("nbdinfo", &["--size", &format!("nbd://{addr}/b")]);
    let list = run("nbdinfo", &["--list", &format!("nbd://{addr}")]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!((a.trim(), b.trim()), ("8388608", "16777216"));
    assert!(list.contains("export=\"a\"") && list.contains("export=\"b\""), "{list}");
}

#[test]
fn a_sparse_file_export_maps_its_holes() {
    let dir = std::env::temp_dir().join(format!("mqblk-nbd-sparse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sparse.img");
    let f = std::fs::File::create(&file).unwrap();
    f.set_len(16 << 20).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&[7u8; 8192], 400 * 4096).unwrap();
    drop(f);
    let s = Server::start("sparse", &["--device", &format!("file:path={}", file.display())]);
    let map = run("nbdinfo", &["--map", &s.uri()]);
    let data: Vec<&str> = map.lines().filter(|l| l.contains("data")).collect();
    assert_eq!(data.len(), 1, "{map}");
    let f: Vec<&str> = data[0].split_whitespace().collect();
    assert_eq!(f[..2], ["1638400", "8192"], "the one written range:\n{map}");
    let _ = std::fs::remove_dir_all(&dir);
}
