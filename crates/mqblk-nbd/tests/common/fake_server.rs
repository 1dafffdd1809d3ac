//! A scripted NBD server for the `nbd:` driver's tests: fixed newstyle,
//! structured replies, a 1 MiB export in memory, and one chosen way of
//! breaking the protocol on the first request of the connections that
//! should misbehave. Written for these tests from the protocol document,
//! as small as the checks need (no options beyond STRUCTURED_REPLY and
//! GO).

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mqblk_nbd::proto::*;

pub const SIZE: usize = 1 << 20;

/// How the first reply of a misbehaving connection breaks the protocol
/// (or, for `DataThenError`, answers unusually).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misbehave {
    /// Twenty bytes that are no reply.
    BadMagic,
    /// A reply whose cookie was never sent.
    UnknownCookie,
    /// Read data that lies past the end of the request.
    ChunkPastRequest,
    /// Not a breach: half a read's data, then an error chunk (EPERM)
    /// with a message, written at once so that the client's read-ahead
    /// after the data takes the error chunk's first bytes.
    DataThenError,
    /// Twenty bytes that are no reply, sent once the first request has
    /// begun to arrive, and nothing read after: a large write stays
    /// blocked in the client's sendmsg while its receiver finds the
    /// garbage.
    GarbageWhileNotReading,
}

pub struct Fake {
    pub path: PathBuf,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicUsize>,
}

impl Fake {
    /// Listens on `dir`/fake.sock; connection number `n` (from 0)
    /// misbehaves as `plan(n)` says.
    pub fn start(dir: &Path, plan: impl Fn(usize) -> Option<Misbehave> + Send + 'static) -> Self {
        let path = dir.join("fake.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let memory = Arc::new(Mutex::new(vec![0u8; SIZE]));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let n = count.fetch_add(1, Ordering::SeqCst);
                let (memory, misbehave) = (memory.clone(), plan(n));
                std::thread::spawn(move || serve(stream, misbehave, &memory));
            }
        });
        Fake { path, accepted }
    }

    pub fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.path.display())
    }
}

fn serve(mut s: UnixStream, mut misbehave: Option<Misbehave>, memory: &Mutex<Vec<u8>>) {
    if negotiate(&mut s).is_err() {
        return;
    }
    if misbehave == Some(Misbehave::GarbageWhileNotReading) {
        // The first request's header and a little of its data: the
        // client is inside a sendmsg that cannot finish.
        let mut started = [0u8; REQUEST_BYTES + 4096];
        let _ = s.read_exact(&mut started);
        let _ = s.write_all(&[0xa5; 20]);
        loop {
            std::thread::park(); // the socket stays open, unread
        }
    }
    let mut header = [0u8; REQUEST_BYTES];
    while s.read_exact(&mut header).is_ok() {
        let r = parse_request(&header).unwrap();
        let (start, len) = (r.offset as usize, r.length as usize);
        let mut out = Vec::new();
        match r.cmd {
            CMD_WRITE => {
                let mut data = vec![0u8; len];
                if s.read_exact(&mut data).is_err() {
                    return;
                }
                memory.lock().unwrap()[start..start + len].copy_from_slice(&data);
            }
            CMD_DISC => return,
            _ => {}
        }
        match misbehave.take() {
            Some(Misbehave::BadMagic | Misbehave::GarbageWhileNotReading) => out.extend_from_slice(&[0xa5; 20]),
            Some(Misbehave::UnknownCookie) => {
                chunk_header(&mut out, REPLY_FLAG_DONE, REPLY_TYPE_NONE, r.cookie ^ 1 << 40, 0)
            }
            Some(Misbehave::ChunkPastRequest) => {
                chunk_header(&mut out, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, r.cookie, 8 + 512);
                out.extend_from_slice(&(r.offset + u64::from(r.length)).to_be_bytes());
                out.extend_from_slice(&[0; 512]);
            }
            Some(Misbehave::DataThenError) => {
                let half = r.length / 2;
                chunk_header(&mut out, 0, REPLY_TYPE_OFFSET_DATA, r.cookie, 8 + half);
                out.extend_from_slice(&r.offset.to_be_bytes());
                out.extend_from_slice(&memory.lock().unwrap()[start..start + half as usize]);
                error_chunk(&mut out, r.cookie, EPERM, "no reading here today");
            }
            None if r.cmd == CMD_READ => {
                chunk_header(&mut out, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, r.cookie, 8 + r.length);
                out.extend_from_slice(&r.offset.to_be_bytes());
                out.extend_from_slice(&memory.lock().unwrap()[start..start + len]);
            }
            None => chunk_header(&mut out, REPLY_FLAG_DONE, REPLY_TYPE_NONE, r.cookie, 0),
        }
        if s.write_all(&out).is_err() {
            return;
        }
    }
}

/// The greeting, STRUCTURED_REPLY and GO (export info, then ACK).
fn negotiate(s: &mut UnixStream) -> std::io::Result<()> {
    let mut greeting = NBDMAGIC.to_be_bytes().to_vec();
    greeting.extend_from_slice(&IHAVEOPT.to_be_bytes());
    greeting.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&greeting)?;
    let mut flags = [0u8; 4];
    s.read_exact(&mut flags)?;
    loop {
        let mut h = [0u8; 16];
        s.read_exact(&mut h)?;
        let option = u32::from_be_bytes(h[8..12].try_into().unwrap());
        let mut data = vec![0u8; u32::from_be_bytes(h[12..16].try_into().unwrap()) as usize];
        s.read_exact(&mut data)?;
        let mut out = Vec::new();
        match option {
            OPT_STRUCTURED_REPLY => option_reply(&mut out, option, REP_ACK, &[]),
            OPT_GO => {
                let mut info = INFO_EXPORT.to_be_bytes().to_vec();
                info.extend_from_slice(&(SIZE as u64).to_be_bytes());
                info.extend_from_slice(&(TF_HAS_FLAGS | TF_SEND_FLUSH).to_be_bytes());
                option_reply(&mut out, option, REP_INFO, &info);
                option_reply(&mut out, option, REP_ACK, &[]);
                return s.write_all(&out);
            }
            _ => option_reply(&mut out, option, REP_ERR_UNSUP, &[]),
        }
        s.write_all(&out)?;
    }
}
