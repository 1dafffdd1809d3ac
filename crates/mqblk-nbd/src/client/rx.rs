//! A connection's receiving thread (`nbd-rxN`, the kernel's `recv_work`):
//! reads replies, finds each request by its cookie, reads a read's data
//! straight into the request's segments (`recvmsg` over their iovecs, no
//! bounce buffer; over TLS, decrypted into them), and completes requests
//! as their replies end. When the connection fails it parks the requests
//! (conn.rs) and reconnects, with a growing pause between attempts, until
//! the driver stops.
//!
//! Syscalls per reply: a read's data is received together with the next
//! bytes of the stream: the shortest reply header (16) with simple
//! replies, so never a byte of a later reply's payload; a data chunk's
//! header and offset (28) with structured replies, copying out the few
//! bytes that turn out to be payload after a reply of another kind (an
//! error's message). A stream of replies to reads costs about one
//! `recvmsg` each. Completions are batched (`CompletionBatch`) and the
//! batch is flushed before the thread blocks, so no client waits on a
//! wakeup held back.
//!
//! Relies on: reply.rs (what the bytes mean), slot.rs (who may touch a
//! request's buffers), conn.rs (parking and resending), link.rs (the
//! stream, plain or TLS), sock.rs (advancing iovecs).

use std::fmt;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mqblk::driver::{CompletionBatch, Rq};

use super::conn::Conn;
use super::link::{Link, LinkRef};
use super::reply::*;
use super::slot::split_cookie;
use super::sock;
use crate::proto::REPLY_TYPE_OFFSET_DATA;

/// First and longest pause between reconnection attempts.
const RETRY_MIN: Duration = Duration::from_millis(10);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// An error chunk's message and offset, read and dropped.
const SINK_BYTES: usize = MAX_ERROR_MESSAGE as usize + 8;

/// Why a connection's receiving ended.
enum End {
    Closed,
    Io(io::Error),
    Protocol(ReplyError),
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            End::Closed => write!(f, "the server closed the connection"),
            End::Io(e) => write!(f, "socket: {e}"),
            End::Protocol(e) => write!(f, "the server broke the protocol: {e}"),
        }
    }
}

impl From<ReplyError> for End {
    fn from(e: ReplyError) -> Self {
        End::Protocol(e)
    }
}

thread_local! {
    /// This is a receiving thread (conn.rs: it must not wait for a
    /// sender's lock).
    static RECEIVING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is one of the driver's receiving threads.
pub(crate) fn on_receiving_thread() -> bool {
    RECEIVING.with(|r| r.get())
}

/// The thread's body: receive on `first`, then on each new connection,
/// until the driver stops; then fail whatever is left.
pub(crate) fn run(conn: Arc<Conn>, first: Link) {
    RECEIVING.with(|r| r.set(true));
    let mut rx = Rx::new(&conn);
    let mut sock = Some(first);
    let mut delay = RETRY_MIN;
    loop {
        if let Some(link) = sock.take() {
            rx.link = link.handle();
            rx.have = 0;
            let end = rx.receive(&conn);
            if !conn.stopping() {
                log::warn!("nbd: connection {} to {}: {end}; reconnecting", conn.index, conn.target.uri);
            }
            conn.connection_lost();
            rx.link = LinkRef::Down;
            drop(link); // after the sender's handle is Down (connection_lost)
            delay = RETRY_MIN;
        }
        if conn.stopping() {
            break;
        }
        match conn.target.connect() {
            Ok((link, info)) if info == conn.info => {
                conn.stats.reconnects.fetch_add(1, Ordering::Relaxed);
                log::info!("nbd: connection {} to {}: reconnected", conn.index, conn.target.uri);
                conn.reconnected(link.handle(), link.fd());
                sock = Some(link);
                continue;
            }
            Ok((_, info)) => log::error!(
                "nbd: connection {} to {}: the export changed (was {:?}, now {:?}); not using it",
                conn.index,
                conn.target.uri,
                conn.info,
                info
            ),
            Err(e) => log::debug!("nbd: connection {} to {}: {e}", conn.index, conn.target.uri),
        }
        if !conn.wait_before_retry(delay) {
            break;
        }
        delay = (delay * 2).min(RETRY_MAX);
    }
    conn.fail_everything();
}

/// The receiving side of one connection.
struct Rx {
    link: LinkRef,
    structured: bool,
    /// Header bytes: what was read ahead, then what a header needs.
    buf: [u8; 32],
    have: usize,
    /// Bytes read past a payload: the shortest reply header (16) with
    /// simple replies; with structured ones a data chunk's header and
    /// offset (28), so a stream of data chunks costs one call each.
    read_ahead: usize,
    /// A payload's iovecs (max_segments, and the read-ahead).
    iov: Vec<libc::iovec>,
    sink: Box<[u8]>,
}

impl Rx {
    fn new(conn: &Conn) -> Self {
        Self {
            link: LinkRef::Down,
            structured: conn.info.structured,
            buf: [0; 32],
            have: 0,
            read_ahead: if conn.info.structured { CHUNK_HEADER_BYTES + 8 } else { MIN_REPLY_BYTES },
            iov: Vec::with_capacity(conn.max_segments + 1),
            sink: vec![0; SINK_BYTES].into_boxed_slice(),
        }
    }

    /// Replies, one after another, until the connection ends.
    fn receive(&mut self, conn: &Conn) -> End {
        let mut batch = CompletionBatch::begin();
        loop {
            if let Err(end) = self.reply(conn, &mut batch) {
                return end;
            }
        }
    }

    fn reply(&mut self, conn: &Conn, batch: &mut CompletionBatch) -> Result<(), End> {
        self.fill(4, batch)?;
        let len = header_len(self.buf[..4].try_into().expect("4 bytes"), self.structured)?;
        // A data chunk's fixed part (its offset) is part of the chunk
        // whatever follows: read it with the header, one call fewer.
        let mut want = len;
        if len == CHUNK_HEADER_BYTES {
            self.fill(8, batch)?;
            if u16::from_be_bytes([self.buf[6], self.buf[7]]) == REPLY_TYPE_OFFSET_DATA {
                want = CHUNK_HEADER_BYTES + 8;
            }
        }
        self.fill(want, batch)?;
        let header = parse_header(&self.buf[..len], self.structured)?;
        self.consume(len);
        match header {
            ReplyHeader::Simple { error, cookie } => self.simple(conn, error, cookie, batch),
            ReplyHeader::Chunk(chunk) => self.chunk(conn, &chunk, batch),
        }
    }

    fn simple(&mut self, conn: &Conn, error: u32, cookie: u64, batch: &mut CompletionBatch) -> Result<(), End> {
        let (tag, generation) = split_cookie(cookie);
        let slot = conn.slots.get(tag as usize).ok_or(ReplyError::UnknownCookie(cookie))?;
        let mut s = slot.lock();
        if !s.awaits(generation) {
            return Err(ReplyError::UnknownCookie(cookie).into());
        }
        if error == 0 && s.asked.is_read {
            let length = s.asked.length;
            drop(s);
            self.payload(conn, tag, generation, 0, length, batch)?;
            s = slot.lock();
        }
        s.answered = Some(status_of(error));
        let done = s.settle();
        drop(s);
        complete(done);
        Ok(())
    }

    fn chunk(&mut self, conn: &Conn, h: &ChunkHeader, batch: &mut CompletionBatch) -> Result<(), End> {
        let (tag, generation) = split_cookie(h.cookie);
        let slot = conn.slots.get(tag as usize).ok_or(ReplyError::UnknownCookie(h.cookie))?;
        let asked = {
            let s = slot.lock();
            if !s.awaits(generation) {
                return Err(ReplyError::UnknownCookie(h.cookie).into());
            }
            s.asked
        };
        let fixed = chunk_fixed_len(h, &asked)?;
        self.fill(fixed, batch)?;
        let chunk = parse_chunk(h, &self.buf[..fixed], &asked)?;
        self.consume(fixed);
        match chunk {
            Chunk::Data { at, len } => self.payload(conn, tag, generation, at, len, batch)?,
            Chunk::Error { errno, msg_len, skip } => {
                self.skip(skip as usize, batch)?;
                let msg = String::from_utf8_lossy(&self.sink[..usize::from(msg_len)]);
                log::debug!("nbd: connection {}: error {errno} for cookie {:#x}: {msg}", conn.index, h.cookie);
            }
            Chunk::Hole { .. } | Chunk::None => {}
        }
        let mut s = slot.lock();
        if !s.awaits(generation) {
            return Err(ReplyError::UnknownCookie(h.cookie).into());
        }
        if let Chunk::Hole { at, len } = chunk {
            zero(s.rq.as_mut().expect("awaited"), at, len);
        }
        s.progress.add(&chunk);
        if h.done() {
            s.answered = Some(s.progress.finish(&s.asked)?);
            let done = s.settle();
            drop(s);
            complete(done);
        }
        Ok(())
    }

    /// Receives `len` bytes of read data into the request's bytes from
    /// `at` on, straight into its segments. The slot is `rx_busy` for the
    /// while, so no one completes the request under the copy.
    fn payload(
        &mut self,
        conn: &Conn,
        tag: u32,
        generation: u32,
        at: u32,
        len: u32,
        batch: &mut CompletionBatch,
    ) -> Result<(), End> {
        let slot = &conn.slots[tag as usize];
        {
            let mut s = slot.lock();
            if !s.awaits(generation) {
                return Err(ReplyError::UnknownCookie(u64::from(generation) << 32 | u64::from(tag)).into());
            }
            s.rx_busy = true;
            self.iov.clear();
            map_range(s.rq.as_mut().expect("awaited"), at, len, &mut self.iov);
        }
        let received = self.receive_into_iov(len as usize, batch);
        let mut s = slot.lock();
        s.rx_busy = false;
        // A timeout that came meanwhile shut the socket down: the error
        // ends the connection, and conn.rs fails that request.
        received
    }

    /// Fills `self.iov` (`len` bytes) from the stream, reading up to
    /// MIN_REPLY_BYTES past it into `buf`.
    fn receive_into_iov(&mut self, len: usize, batch: &mut CompletionBatch) -> Result<(), End> {
        let drained = self.drain_read_ahead(len);
        let total = self.iov.len();
        let mut first = total - sock::advance(&mut self.iov, drained).len();
        let mut left = len - drained;
        if left == 0 {
            return Ok(());
        }
        debug_assert_eq!(self.have, 0, "what was read ahead went into the payload");
        let ahead = libc::iovec { iov_base: self.buf.as_mut_ptr().cast(), iov_len: self.read_ahead };
        self.iov.push(ahead);
        while left > 0 {
            let n = self.recv(first, batch)?;
            let taken = n.min(left);
            left -= taken;
            self.have = n - taken;
            let total = self.iov.len();
            first = total - sock::advance(&mut self.iov[first..], n).len();
        }
        Ok(())
    }

    /// Copies bytes read ahead (still in `buf`) that turn out to be
    /// payload into `self.iov`, at most `len`: a few bytes, and only
    /// after a reply the read-ahead did not expect (an error chunk's
    /// message, a simple reply's data under structured replies).
    fn drain_read_ahead(&mut self, len: usize) -> usize {
        let n = self.have.min(len);
        let mut copied = 0;
        for v in &self.iov {
            if copied == n {
                break;
            }
            let k = (n - copied).min(v.iov_len);
            let from = self.buf[copied..copied + k].as_ptr();
            // SAFETY: `v` is memory this thread may write (as in `recv`),
            // which does not overlap `buf`.
            unsafe { std::ptr::copy_nonoverlapping(from, v.iov_base.cast::<u8>(), k) };
            copied += k;
        }
        self.consume(n);
        n
    }

    /// One recvmsg over `self.iov[first..]`: without blocking first; if
    /// nothing is there, the batch's wakeups go out and it blocks.
    ///
    /// `self.iov` holds only memory this thread may write: parts of `buf`
    /// and the sink, and the segments of a request whose slot is
    /// `rx_busy` (it stays in flight, and no other party touches them).
    fn recv(&mut self, first: usize, batch: &mut CompletionBatch) -> Result<usize, End> {
        let iov = &mut self.iov[first..];
        // SAFETY: the iovecs are writable and ours for the call (above).
        let n = match unsafe { self.link.recv_some(iov, true) } {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                batch.flush();
                // SAFETY: as above.
                unsafe { self.link.recv_some(iov, false) }
            }
            other => other,
        };
        match n {
            Ok(0) => Err(End::Closed),
            Ok(n) => Ok(n),
            Err(e) => Err(End::Io(e)),
        }
    }

    /// Makes `buf` hold at least `n` bytes, reading exactly what is
    /// missing (header bytes never reach into a payload).
    fn fill(&mut self, n: usize, batch: &mut CompletionBatch) -> Result<(), End> {
        while self.have < n {
            self.iov.clear();
            let at = self.buf[self.have..n].as_mut_ptr();
            self.iov.push(libc::iovec { iov_base: at.cast(), iov_len: n - self.have });
            self.have += self.recv(0, batch)?;
        }
        Ok(())
    }

    /// Drops the first `n` bytes of `buf`.
    fn consume(&mut self, n: usize) {
        self.buf.copy_within(n..self.have, 0);
        self.have -= n;
    }

    /// Reads `n` bytes into the sink (an error chunk's message).
    fn skip(&mut self, n: usize, batch: &mut CompletionBatch) -> Result<(), End> {
        debug_assert!(n <= self.sink.len());
        let ahead = self.have.min(n);
        self.sink[..ahead].copy_from_slice(&self.buf[..ahead]);
        self.consume(ahead);
        let mut got = ahead;
        while got < n {
            self.iov.clear();
            let at = self.sink[got..n].as_mut_ptr();
            self.iov.push(libc::iovec { iov_base: at.cast(), iov_len: n - got });
            got += self.recv(0, batch)?;
        }
        Ok(())
    }
}

/// The iovecs of the request's bytes `at..at + len`, over its physical
/// segments in device order.
fn map_range(rq: &mut Rq, at: u32, len: u32, iov: &mut Vec<libc::iovec>) {
    let (mut skip, mut want) = (at as usize, len as usize);
    rq.for_each_phys_segment(|addr, seg_len| {
        if want == 0 {
            return;
        }
        if skip >= seg_len {
            skip -= seg_len;
            return;
        }
        let n = (seg_len - skip).min(want);
        iov.push(libc::iovec { iov_base: addr.wrapping_add(skip).cast(), iov_len: n });
        (skip, want) = (0, want - n);
    });
    debug_assert_eq!(want, 0, "reply.rs checked the range lies inside the request");
}

/// Zeros the request's bytes `at..at + len` (a hole).
fn zero(rq: &mut Rq, at: u32, len: u32) {
    let start = rq.pos_bytes() + u64::from(at);
    let end = start + u64::from(len);
    for (pos, seg) in rq.segments_mut() {
        let seg_end = pos + seg.len() as u64;
        if seg_end <= start || pos >= end {
            continue;
        }
        let from = start.saturating_sub(pos) as usize;
        let to = (end.min(seg_end) - pos) as usize;
        seg[from..to].fill(0);
    }
}

fn complete(done: Option<(Rq, mqblk::Status)>) {
    if let Some((rq, status)) = done {
        rq.complete(status);
    }
}
