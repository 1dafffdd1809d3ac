//! A whole NBD connection fed arbitrary client bytes: the handshake, the
//! option phase and transmission against a memory-backed null export (and
//! a read-only one). The server must neither panic nor hang; it ends the
//! connection when the client's bytes run out.
//!
//! The first input byte chooses a prefix: odd values start with a valid
//! fixed-newstyle handshake and NBD_OPT_GO (bit 1: structured replies
//! first, bit 2: the read-only export, bit 3: base:allocation set first),
//! so the fuzzer reaches transmission without having to find the magic
//! numbers itself. Seeds (seeds/nbd_connection, made by seeds/make.py)
//! hold every command and option once.
#![no_main]

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mqblk::Device;
use mqblk_nbd::proto::{IHAVEOPT, OPT_GO, OPT_SET_META_CONTEXT, OPT_STRUCTURED_REPLY};
use mqblk_nbd::{Export, StopHandle};

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
    // Replies are drained apart: the server may block on them.
    let d = std::thread::spawn(move || {
        let mut sink = [0u8; 64 << 10];
        while matches!(client.read(&mut sink), Ok(n) if n > 0) {}
    });
    let stop = StopHandle::new().expect("eventfd");
    let _ = mqblk_nbd::conn::serve_connection(Box::new(server), exports(), &stop);
    d.join().expect("drainer");
});
