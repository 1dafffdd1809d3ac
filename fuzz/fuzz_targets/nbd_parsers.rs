//! The NBD request and option parsers on arbitrary bytes: no panic, and
//! whatever parses is within the bounds the parsers promise. The same
//! for the `nbd:` driver's side: a server's handshake bytes, and a
//! stream of replies to one request (its shape from the first 13 bytes),
//! walked as the driver's receiving thread walks it; every data or hole
//! chunk accepted lies inside the request.
#![no_main]

use std::io::{Cursor, Read, Write};

use libfuzzer_sys::fuzz_target;
use mqblk_nbd::client::handshake;
use mqblk_nbd::client::reply::*;
use mqblk_nbd::proto::{parse_info_request, parse_meta_request, parse_request, REQUEST_BYTES};

/// A server that says `data` and hears anything.
struct Said<'a>(Cursor<&'a [u8]>);

impl Read for Said<'_> {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(b)
    }
}
impl Write for Said<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Replies to the request `asked`, one after another, until the bytes
/// end or one breaks the protocol (the driver then drops the connection).
fn replies(asked: Asked, mut data: &[u8]) {
    let mut progress = Progress::default();
    while data.len() >= 4 {
        let Ok(len) = header_len(data[..4].try_into().expect("4 bytes"), true) else { return };
        if data.len() < len {
            return;
        }
        let Ok(header) = parse_header(&data[..len], true) else { return };
        data = &data[len..];
        let ReplyHeader::Chunk(h) = header else { continue };
        let Ok(fixed) = chunk_fixed_len(&h, &asked) else { return };
        if data.len() < fixed {
            return;
        }
        let Ok(chunk) = parse_chunk(&h, &data[..fixed], &asked) else { return };
        data = &data[fixed..];
        let payload = match chunk {
            Chunk::Data { at, len } | Chunk::Hole { at, len } => {
                assert!(u64::from(at) + u64::from(len) <= u64::from(asked.length) && len > 0);
                if matches!(chunk, Chunk::Data { .. }) { len as usize } else { 0 }
            }
            Chunk::Error { skip, .. } => skip as usize,
            Chunk::None => 0,
        };
        data = &data[payload.min(data.len())..];
        progress.add(&chunk);
        if h.done() {
            let _ = progress.finish(&asked);
            progress = Progress::default();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok((name, infos)) = parse_info_request(data) {
        // The name and the info list both came out of `data`.
        assert!(name.len() + 2 * infos.len() + 6 <= data.len());
    }
    if let Ok((name, queries)) = parse_meta_request(data) {
        let bytes: usize = queries.iter().map(|q| q.len() + 4).sum();
        assert!(name.len() + bytes + 8 <= data.len());
    }
    if data.len() >= REQUEST_BYTES {
        let header: &[u8; REQUEST_BYTES] = data[..REQUEST_BYTES].try_into().expect("length checked");
        let _ = parse_request(header);
    }
    let _ = handshake(&mut Said(Cursor::new(data)), "", true);
    if data.len() >= 13 {
        let offset = u64::from_be_bytes(data[1..9].try_into().expect("8 bytes"));
        let length = u32::from_be_bytes(data[9..13].try_into().expect("4 bytes"));
        replies(Asked { is_read: data[0] & 1 == 1, offset, length }, &data[13..]);
    }
});
