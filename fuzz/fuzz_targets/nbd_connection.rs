//! A whole NBD connection fed arbitrary client bytes: the handshake, the
//! option phase and transmission against a memory-backed null export (and
//! a read-only one). The server must neither panic nor hang; it ends the
//! connection when the client's bytes run out.
//!
//! The first input byte chooses a prefix: odd values start with a valid
//! fixed-newstyle handshake and NBD_OPT_GO (bit 1: structured replies
//! first, bit 2: the read-only export, bit 3: base:allocation set first),
//! so the fuzzer reaches transmission without having to find the magic
//! numbers itself. Bit 4 serves with TLS required (`--tls=require`, a PSK):
//! then everything the server sends in clear must be the greeting and
//! option replies that refuse (NBD_REP_ERR_TLS_REQD), let the client go
//! (ABORT) or start TLS (STARTTLS, after whose ACK only TLS records
//! follow): no export's size, no transmission reply, is ever sent in
//! clear. Seeds (seeds/nbd_connection, made by seeds/make.py) hold every
//! command and option once, and each option again under TLS required.
#![no_main]

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mqblk::Device;
use mqblk_nbd::proto::*;
use mqblk_nbd::{Credentials, Export, StopHandle, Tls, TlsMode};

/// Inputs longer than this are skipped: they must fit the socket buffer.
const MAX_INPUT_BYTES: usize = 64 << 10;

fn exports() -> &'static [Export] {
    static EXPORTS: OnceLock<Vec<Export>> = OnceLock::new();
    EXPORTS.get_or_init(|| {
        // libFuzzer's main does not ignore SIGPIPE as Rust's does; a
        // client end closed early must be an EPIPE, not a kill.
        // SAFETY: setting a signal disposition before any thread uses it.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        mqblk_null::register();
        let device = Device::open("null:size=1,memory_backed=1,discard=1,submit_queues=1").expect("null device");
        let export = |name: &str, read_only| Export {
            name: name.into(),
            description: "fuzz".into(),
            device: device.clone(),
            read_only,
            direct_reads: true,
            splice_reads: true,
        };
        vec![export("", false), export("ro", true)]
    })
}

/// TLS required, with a PSK for alice (the fuzzer never has the key: a
/// STARTTLS leads to a handshake that fails).
fn tls_required() -> &'static Tls {
    static TLS: OnceLock<Tls> = OnceLock::new();
    TLS.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("mqblk-fuzz-{}.psk", std::process::id()));
        std::fs::write(&path, format!("alice:{}\n", "5a".repeat(32))).expect("a PSK file");
        let tls = Tls::new(TlsMode::Require, &Credentials::Psk(path.clone())).expect("TLS settings");
        let _ = std::fs::remove_file(path);
        tls
    })
}

/// Under TLS required, what the server sent in clear: the greeting, then
/// option replies that refuse, let the client go or start TLS. Panics on
/// anything else (an export's size, a transmission reply). A reply cut
/// short at the end is the connection's reset, not a finding.
fn check_nothing_served_in_clear(wire: &[u8]) {
    let Some(mut rest) = wire.get(18..) else { return };
    assert_eq!(wire[..8], NBDMAGIC.to_be_bytes(), "the greeting first");
    while rest.len() >= 20 {
        assert_eq!(rest[..8], REPLY_MAGIC.to_be_bytes(), "only option replies in clear, found {:02x?}", &rest[..20]);
        let word = |at: usize| u32::from_be_bytes(rest[at..at + 4].try_into().expect("4 bytes"));
        let (opt, reply, len) = (word(8), word(12), word(16) as usize);
        match (opt, reply) {
            (_, REP_ERR_TLS_REQD) | (OPT_ABORT, REP_ACK) | (OPT_STARTTLS, REP_ERR_INVALID) => {}
            (OPT_STARTTLS, REP_ACK) => return, // TLS records from here on
            _ => panic!("option {opt} answered {reply:#x} in clear under TLS required"),
        }
        rest = rest.get(20 + len..).unwrap_or_default();
    }
}

fn option(out: &mut Vec<u8>, opt: u32, data: &[u8]) {
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&opt.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

fn prefix(mode: u8) -> Vec<u8> {
    let mut out = Vec::new();
    if mode & 1 == 0 {
        return out;
    }
    out.extend_from_slice(&3u32.to_be_bytes()); // FIXED_NEWSTYLE | NO_ZEROES
    if mode & 2 != 0 {
        option(&mut out, OPT_STRUCTURED_REPLY, &[]);
    }
    let name: &[u8] = if mode & 4 != 0 { b"ro" } else { b"" };
    if mode & 8 != 0 {
        let query = b"base:allocation";
        let mut set = (name.len() as u32).to_be_bytes().to_vec();
        set.extend_from_slice(name);
        set.extend_from_slice(&1u32.to_be_bytes());
        set.extend_from_slice(&(query.len() as u32).to_be_bytes());
        set.extend_from_slice(query);
        option(&mut out, OPT_SET_META_CONTEXT, &set);
    }
    let mut go = (name.len() as u32).to_be_bytes().to_vec();
    go.extend_from_slice(name);
    go.extend_from_slice(&0u16.to_be_bytes());
    option(&mut out, OPT_GO, &go);
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if rest.len() > MAX_INPUT_BYTES {
        return;
    }
    let mut input = prefix(mode);
    input.extend_from_slice(rest);
    let (mut client, server) = UnixStream::pair().expect("socketpair");
    // The whole input fits in the socket buffer (inputs are at most a few
    // KiB): write it, then half-close, so the server sees EOF after it.
    client.write_all(&input).expect("input fits the socket buffer");
    client.shutdown(Shutdown::Write).expect("shutdown");
    // Replies are drained apart: the server may block on them. Under TLS
    // required they are kept, to check.
    let require = mode & 16 != 0;
    let d = std::thread::spawn(move || {
        let mut sink = [0u8; 64 << 10];
        let mut kept = Vec::new();
        while let Ok(n @ 1..) = client.read(&mut sink) {
            if require {
                kept.extend_from_slice(&sink[..n]);
            }
        }
        kept
    });
    let stop = StopHandle::new().expect("eventfd");
    let tls = if require { tls_required().clone() } else { Tls::off() };
    let _ = mqblk_nbd::conn::serve_connection(Box::new(server), exports(), &tls, &stop);
    let wire = d.join().expect("drainer");
    if require {
        check_nothing_served_in_clear(&wire);
    }
});
