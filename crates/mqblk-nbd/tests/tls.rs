//! NBD_OPT_STARTTLS end to end with an OpenSSL client in the test: the
//! ACK in clear, the TLS handshake on the same socket, option haggling
//! under TLS (a second STARTTLS refused, options pipelined in one TLS
//! record all answered), and transmission through TLS byte-exact. The
//! real clients (nbdinfo, nbdcopy, qemu) are in mqblk-cli's nbd_tls.rs.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use mqblk_nbd::proto::*;
use mqblk_nbd::{Credentials, Export, Listen, Server, Tls, TlsMode};
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode, SslVersion};

const KEY: [u8; 32] = [7; 32];
/// A hang guard on every read (not a performance bound).
const HANG_GUARD: Duration = Duration::from_secs(20);

fn option(out: &mut Vec<u8>, opt: u32, data: &[u8]) {
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&opt.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// One option reply: (option, reply type, data).
fn reply(s: &mut impl Read) -> (u32, u32, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).unwrap();
    assert_eq!(h[..8], REPLY_MAGIC.to_be_bytes());
    let word = |at: usize| u32::from_be_bytes(h[at..at + 4].try_into().unwrap());
    let mut data = vec![0u8; word(16) as usize];
    s.read_exact(&mut data).unwrap();
    (word(8), word(12), data)
}

/// One option reply's (option, reply type).
fn kind(s: &mut impl Read) -> (u32, u32) {
    let (opt, rep, _) = reply(s);
    (opt, rep)
}

/// A server requiring TLS with a PSK for `alice`, on a Unix socket.
fn start(test: &str) -> (mqblk_nbd::StopHandle, std::thread::JoinHandle<()>, PathBuf) {
    let dir = std::env::temp_dir().join(format!("mqblk-nbd-tls-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let psk = dir.join("keys.psk");
    let hex: String = KEY.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&psk, format!("alice:{hex}\n")).unwrap();
    let tls = Tls::new(TlsMode::Require, &Credentials::Psk(psk)).unwrap();
    let export = Export::open("", "null:size=8,memory_backed=1", false).unwrap();
    let sock = dir.join("sock");
    let server = Server::new(Listen::unix(&sock).unwrap(), vec![export]).unwrap().tls(tls);
    let stop = server.stop_handle();
    let t = std::thread::spawn(move || server.run().unwrap());
    (stop, t, sock)
}

/// TLS over `s` with alice's key (the server was told yes to STARTTLS),
/// in `version` (TLS 1.3: an external PSK; 1.2: a PSK cipher suite).
fn tls_client(s: UnixStream, version: SslVersion) -> openssl::ssl::SslStream<UnixStream> {
    let mut c = SslConnector::builder(SslMethod::tls_client()).unwrap();
    c.set_min_proto_version(Some(version)).unwrap();
    c.set_max_proto_version(Some(version)).unwrap();
    // The connector's default list leaves PSK suites out (TLS 1.2 needs one).
    c.set_cipher_list("PSK").unwrap();
    c.set_verify(SslVerifyMode::NONE);
    c.set_psk_client_callback(|_ssl, _hint, identity, psk| {
        identity[..6].copy_from_slice(b"alice\0");
        psk[..KEY.len()].copy_from_slice(&KEY);
        Ok(KEY.len())
    });
    c.build().configure().unwrap().verify_hostname(false).connect("localhost", s).unwrap()
}

fn request(cmd: u16, cookie: u64, offset: u64, length: u32) -> Vec<u8> {
    let mut r = REQUEST_MAGIC.to_be_bytes().to_vec();
    r.extend_from_slice(&0u16.to_be_bytes());
    r.extend_from_slice(&cmd.to_be_bytes());
    r.extend_from_slice(&cookie.to_be_bytes());
    r.extend_from_slice(&offset.to_be_bytes());
    r.extend_from_slice(&length.to_be_bytes());
    r
}

/// A simple reply's (error, cookie).
fn simple(s: &mut impl Read) -> (u32, u64) {
    let mut h = [0u8; 16];
    s.read_exact(&mut h).unwrap();
    assert_eq!(h[..4], SIMPLE_REPLY_MAGIC.to_be_bytes());
    (u32::from_be_bytes(h[4..8].try_into().unwrap()), u64::from_be_bytes(h[8..16].try_into().unwrap()))
}

#[test]
fn starttls_then_options_and_transmission_under_tls_1_3() {
    starttls_session("tls13", SslVersion::TLS1_3);
}

#[test]
fn starttls_then_options_and_transmission_under_tls_1_2() {
    starttls_session("tls12", SslVersion::TLS1_2);
}

fn starttls_session(test: &str, version: SslVersion) {
    let (stop, t, sock) = start(test);
    let mut s = UnixStream::connect(&sock).unwrap();
    s.set_read_timeout(Some(HANG_GUARD)).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).unwrap();
    s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes()).unwrap();
    let mut o = Vec::new();
    option(&mut o, OPT_GO, &[0; 6]);
    option(&mut o, OPT_STARTTLS, &[]);
    s.write_all(&o).unwrap();
    assert_eq!(reply(&mut s).1, REP_ERR_TLS_REQD, "GO in clear");
    assert_eq!(kind(&mut s), (OPT_STARTTLS, REP_ACK), "STARTTLS acknowledged in clear");
    let mut s = tls_client(s, version);
    assert_eq!(s.ssl().version2(), Some(version));
    // Three options in one write (one TLS record): the second and third
    // wait decrypted inside the server's stream, unseen by poll(2).
    let mut o = Vec::new();
    option(&mut o, OPT_LIST, &[]);
    option(&mut o, OPT_STARTTLS, &[]);
    option(&mut o, OPT_GO, &[0; 6]);
    s.write_all(&o).unwrap();
    let (opt, rep, data) = reply(&mut s);
    assert_eq!((opt, rep), (OPT_LIST, REP_SERVER), "the export list, under TLS");
    assert_eq!(data, [0, 0, 0, 0], "the default export's empty name");
    assert_eq!(kind(&mut s), (OPT_LIST, REP_ACK));
    assert_eq!(kind(&mut s), (OPT_STARTTLS, REP_ERR_INVALID), "a second STARTTLS");
    loop {
        let (opt, rep, _) = reply(&mut s);
        assert_eq!(opt, OPT_GO);
        if rep == REP_ACK {
            break;
        }
        assert_eq!(rep, REP_INFO);
    }
    // Transmission: a write, then two reads sent together, through TLS.
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let mut w = request(CMD_WRITE, 1, 0, data.len() as u32);
    w.extend_from_slice(&data);
    s.write_all(&w).unwrap();
    assert_eq!(simple(&mut s), (0, 1), "the write");
    let mut r = request(CMD_READ, 2, 0, data.len() as u32);
    r.extend_from_slice(&request(CMD_READ, 3, 4096, 512));
    s.write_all(&r).unwrap();
    for _ in 0..2 {
        let (error, cookie) = simple(&mut s);
        assert_eq!(error, 0);
        let (at, len) = if cookie == 2 { (0, data.len()) } else { (4096, 512) };
        let mut got = vec![0u8; len];
        s.read_exact(&mut got).unwrap();
        assert!(got[..] == data[at..at + len], "read {cookie} byte-exact");
    }
    s.write_all(&request(CMD_DISC, 4, 0, 0)).unwrap();
    // A close_notify ends the server's side: the read sees a clean end.
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0);
    stop.stop();
    t.join().unwrap();
}
