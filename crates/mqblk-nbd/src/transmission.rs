//! The transmission phase of one NBD connection (the spec's
//! "Transmission"): one thread with its own mqblk client. It polls the
//! socket, the client's completion eventfd and (for devices whose
//! submitters reap, file `reap=client`) the client's poll fd, reads
//! requests as they arrive and submits them in batches under one plug
//! (many in flight), and replies as they complete, out of order: simple
//! replies, or structured ones (sparse reads as OFFSET_HOLE and
//! OFFSET_DATA chunks, BLOCK_STATUS for base:allocation) when negotiated.
//! A write is acknowledged only once its I/O completed.
//!
//! A stop (the server's [`StopHandle`]) wakes the poll through its
//! eventfd; what is in flight is answered before the connection closes.
//!
//! Over TLS (tls.rs) the same loop runs on the OpenSSL stream, less the
//! direct and spliced reads (they write to the socket's fd), and asks
//! the stream for requests it decrypted already, which poll cannot see.
//!
//! Relies on: proto.rs (requests, replies), reads.rs (direct and sparse
//! read replies), what handshake.rs negotiated, and mqblk's Client
//! (completion_fd, poll_fd, plug, do_io, drain).

use std::os::fd::RawFd;

use mqblk::{Bio, Buf, Completion, ReqFlags, Status};

use crate::conn::{Export, Stream};
use crate::handshake::Negotiated;
use crate::proto::*;
use crate::splice::Splicer;
use crate::{Error, StopHandle};

mod block_status;
mod reads;

/// In-flight requests per connection.
const QUEUE_DEPTH: usize = 64;
/// Socket reads ask for up to this much (request headers are 28 bytes).
const READ_CHUNK: usize = 16 << 10;
/// Read replies at least this large are written from the request's buffer.
const DIRECT_WRITE_BYTES: usize = 64 << 10;
/// Reads at least this large go by the device's direct access where the
/// export allows it and the device offers it: written to the socket from
/// the device's own memory (a smaller read is cheaper as a bio, batched
/// with the rest of its socket read).
const DIRECT_READ_BYTES: u64 = 64 << 10;
/// How long a direct read may wait for room in the socket while it holds
/// the device's pages (and so holds back the reclamation of replaced
/// pages device-wide): a client that keeps up never meets it, one that
/// stops reading costs a copy of the rest, as the bio path would.
const DIRECT_READ_PIN_WAIT: std::time::Duration = std::time::Duration::from_millis(20);
/// Structured reads at least this large (and without DF) send the
/// device's holes as OFFSET_HOLE chunks, where the device's block status
/// is cheap; smaller ones are not worth the query.
const SPARSE_READ_BYTES: u64 = 64 << 10;
/// Requests taken from the socket's buffered bytes before submitting.
const BATCH_REQUESTS: usize = 32;
/// Payload bytes in flight per connection (memory bound).
const BUDGET_BYTES: u64 = 64 << 20;

/// Writes `a` then `b` with writev, resuming after short writes.
pub(crate) fn write_all_vectored(s: &mut dyn Stream, a: &[u8], b: &[u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < a.len() + b.len() {
        let (x, y) = if done < a.len() { (&a[done..], b) } else { (&b[done - a.len()..], &[][..]) };
        match s.write_vectored(&[std::io::IoSlice::new(x), std::io::IoSlice::new(y)]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sends `head` then every slice from byte `from` on with
/// sendmsg(MSG_DONTWAIT), waiting for room in the socket's buffer only
/// until `until`; returns the position reached (all of it unless the
/// socket stayed full).
fn send_until(
    fd: RawFd,
    head: &[u8],
    slices: &[std::io::IoSlice<'_>],
    mut from: usize,
    until: std::time::Instant,
) -> std::io::Result<usize> {
    /// Slices per sendmsg: the head and a lent megabyte of pages.
    const IOV: usize = 257;
    let total = head.len() + slices.iter().map(|x| x.len()).sum::<usize>();
    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; IOV];
    while from < total {
        let mut n = 0;
        for part in parts_from(head, slices, from) {
            iov[n] = libc::iovec { iov_base: part.as_ptr() as *mut libc::c_void, iov_len: part.len() };
            n += 1;
            if n == IOV {
                break;
            }
        }
        // SAFETY: a zeroed msghdr is valid; only the iovecs are set.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = n as _;
        // SAFETY: the n iovecs point into `head` and `slices`, which
        // outlive the call; the kernel only reads them.
        let sent = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if sent < 0 {
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock => {
                    let left = until.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Ok(from);
                    }
                    let mut pfd = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
                    let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
                    // SAFETY: one valid pollfd; an error or timeout is
                    // answered by the next sendmsg or the budget check.
                    unsafe { libc::poll(&mut pfd, 1, ms) };
                    continue;
                }
                _ => return Err(e),
            }
        }
        if sent == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        from += sent as usize;
    }
    Ok(from)
}

/// Appends to `spill` the bytes of `head` then `slices` from position
/// `from` on.
fn copy_from(head: &[u8], slices: &[std::io::IoSlice<'_>], from: usize, spill: &mut Vec<u8>) {
    for part in parts_from(head, slices, from) {
        spill.extend_from_slice(part);
    }
}

/// The non-empty parts of `head` then `slices` from byte `from` on (the
/// first one cut at `from`).
fn parts_from<'s>(head: &'s [u8], slices: &'s [std::io::IoSlice<'_>], from: usize) -> impl Iterator<Item = &'s [u8]> {
    let mut skip = from;
    std::iter::once(head).chain(slices.iter().map(|x| &**x)).filter_map(move |part| {
        if skip >= part.len() {
            skip -= part.len();
            return None;
        }
        let rest = &part[skip..];
        skip = 0;
        Some(rest)
    })
}

/// A request in flight.
#[derive(Clone, Copy)]
struct Pending {
    cookie: u64,
    cmd: u16,
    offset: u64,
    bytes: u64,
    /// NBD_CMD_FLAG_DF: the read's data in one chunk (no holes).
    df: bool,
}

pub(crate) struct Transmission<'a> {
    s: Box<dyn Stream>,
    export: &'a Export,
    neg: Negotiated,
    client: mqblk::Client,
    efd: RawFd,
    /// The client's `poll_fd` (its polled queue's completions), or -1.
    poll_fd: RawFd,
    slots: Vec<Option<Pending>>,
    free: Vec<usize>,
    bytes_in_flight: u64,
    out: Vec<u8>,
    done: Vec<Completion>,
    /// Buffers given back by completions, by length, for the next request
    /// of that size (no allocation and zeroing per request; bounded by the
    /// queue depth).
    pool: Vec<Buf>,
    /// Bytes read from the socket and not yet parsed (headers, and the
    /// start of a write's payload).
    rbuf: Vec<u8>,
    /// Requests parsed from one socket read, submitted together under a
    /// plug (one submission to the driver for the batch): bio and slot.
    batch: Vec<(Bio, usize)>,
    /// Slots whose bio the device refused, and the errno, to answer.
    refused: Vec<(usize, i32)>,
    /// Structured replies on a device whose block status is cheap: large
    /// reads send its holes as OFFSET_HOLE chunks.
    sparse_reads: bool,
    /// A sparse read's extents from the device, and its (offset within
    /// it, bytes, hole) runs (kept: no allocation per read).
    extents: Vec<(u64, bool)>,
    runs: Vec<(u64, u64, bool)>,
    /// A direct read's bytes the socket did not take at once (written after
    /// the device's pages are let go; kept: no allocation per read).
    spill: Vec<u8>,
    /// Zero-copy read replies (Unix sockets, lending devices: splice.rs).
    splicer: Option<Splicer>,
    /// Reads by the device's direct access (the export allows them and
    /// the socket is clear: they write to its fd).
    direct_reads: bool,
    /// The stream is TLS (tls.rs): it may hold decrypted requests that
    /// poll(2) on the socket does not see.
    tls: bool,
}

impl<'a> Transmission<'a> {
    pub(crate) fn new(s: Box<dyn Stream>, export: &'a Export, neg: Negotiated) -> Result<Self, Error> {
        let mut client = export.device.client_with_capacity(QUEUE_DEPTH);
        let efd = client.completion_fd().map_err(|source| Error::Client { what: "completion eventfd", source })?;
        // Devices whose submitters reap (file reap=client): the ring's fd.
        let poll_fd = client.poll_fd().unwrap_or(-1);
        // Under TLS the socket carries records: nothing may be written to
        // its fd directly, so reads take the copy path through the stream.
        let tls = s.is_tls();
        let direct_reads = export.direct_reads && !tls;
        let splicer =
            (direct_reads && export.splice_reads).then(|| Splicer::new(&export.device, s.as_raw_fd())).flatten();
        Ok(Self {
            poll_fd,
            s,
            export,
            neg,
            client,
            efd,
            slots: vec![None; QUEUE_DEPTH],
            free: (0..QUEUE_DEPTH).rev().collect(),
            bytes_in_flight: 0,
            out: Vec::with_capacity(64 << 10),
            done: Vec::with_capacity(QUEUE_DEPTH),
            pool: Vec::with_capacity(QUEUE_DEPTH),
            rbuf: Vec::with_capacity(2 * READ_CHUNK),
            batch: Vec::with_capacity(BATCH_REQUESTS),
            refused: Vec::with_capacity(BATCH_REQUESTS),
            sparse_reads: neg.structured && export.device.block_status().is_some_and(|b| b.is_cheap()),
            extents: Vec::with_capacity(mqblk::driver::MAX_EXTENTS),
            runs: Vec::with_capacity(mqblk::driver::MAX_EXTENTS + 1),
            spill: Vec::new(),
            splicer,
            direct_reads,
            tls,
        })
    }

    pub(crate) fn run(mut self, stop: &StopHandle) -> Result<(), Error> {
        let result = self.serve(stop);
        // Whatever happened, nothing in flight is abandoned: writes the
        // client sent complete before the connection's client goes.
        self.client.drain();
        result
    }

    fn serve(&mut self, stop: &StopHandle) -> Result<(), Error> {
        loop {
            if stop.is_stopped() {
                // Shutting down: finish and answer what is in flight, then close.
                self.reap(usize::MAX)?;
                return Ok(());
            }
            let want_socket = !self.free.is_empty() && self.bytes_in_flight < BUDGET_BYTES;
            let mut fds = [
                libc::pollfd { fd: self.s.as_raw_fd(), events: if want_socket { libc::POLLIN } else { 0 }, revents: 0 },
                libc::pollfd { fd: self.efd, events: libc::POLLIN, revents: 0 },
                // Ignored by poll(2) when negative (no such fd).
                libc::pollfd { fd: self.poll_fd, events: libc::POLLIN, revents: 0 },
                // Readable once stopped (checked at the top of the loop).
                libc::pollfd { fd: stop.wake_fd(), events: libc::POLLIN, revents: 0 },
            ];
            // Requests already buffered are served without waiting (under
            // TLS, those decrypted and still inside the stream too).
            let buffered =
                want_socket && (self.rbuf.len() >= REQUEST_BYTES || (self.tls && self.s.buffered_bytes() > 0));
            let timeout_ms = if buffered { 0 } else { 200 };
            // SAFETY: four pollfds (the third may be -1, which poll skips);
            // the timeout is a backstop: a stop wakes the poll itself.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(Error::Io { what: "poll on a connection", source: e });
            }
            if fds[1].revents != 0 {
                self.clear_eventfd();
            }
            if fds[1].revents != 0 || fds[2].revents != 0 {
                self.reap(0)?;
            }
            if fds[0].revents != 0 || buffered {
                let open = self.read_batch()?;
                // What completed at once (a page-cache hit, a null device)
                // is answered now rather than after another poll.
                self.reap(0)?;
                if !open {
                    return Ok(()); // NBD_CMD_DISC, or the client went away
                }
            }
        }
    }

    /// Sends replies for completed I/O (waiting for at least `min`).
    fn reap(&mut self, min: usize) -> Result<(), Error> {
        loop {
            let mut done = std::mem::take(&mut self.done);
            done.clear();
            let min = min.min(self.client.in_flight());
            let got = self
                .client
                .do_io(&mut done, min, QUEUE_DEPTH, None)
                .map_err(|source| Error::Client { what: "reaping completions", source })?;
            for c in done.drain(..) {
                let slot = c.user_data as usize;
                let p = self.slots[slot].take().expect("a completion for a request in flight");
                self.free.push(slot);
                self.bytes_in_flight -= p.bytes;
                let buf = c.segs.into_buf().ok();
                let data = if p.cmd == CMD_READ { buf.as_deref() } else { None };
                self.reply(&p, c.status, data)?;
                if let Some(b) = buf {
                    if self.pool.len() < QUEUE_DEPTH {
                        self.pool.push(b);
                    }
                }
            }
            self.done = done;
            if got < QUEUE_DEPTH {
                return self.flush_out();
            }
        }
    }

    /// Reads from the socket until `n` bytes are buffered (one read when
    /// the socket has them: several requests per system call under load).
    /// False if the client went away first.
    fn fill(&mut self, n: usize) -> bool {
        let mut chunk = [0u8; READ_CHUNK];
        while self.rbuf.len() < n {
            match self.s.read(&mut chunk) {
                Ok(0) => return false,
                Ok(k) => self.rbuf.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// A buffer of `len` bytes: a recycled one if there is one.
    fn take_buf(&mut self, len: usize) -> Buf {
        match self.pool.iter().position(|b| b.len() == len) {
            Some(i) => self.pool.swap_remove(i),
            None => Buf::new(len),
        }
    }

    fn flush_out(&mut self) -> Result<(), Error> {
        if !self.out.is_empty() {
            self.s.write_all(&self.out).map_err(Error::Socket)?;
            self.out.clear();
        }
        Ok(())
    }

    /// Queues the reply to one request; large read data goes to the
    /// socket straight from the request's buffer instead of being copied.
    fn reply(&mut self, p: &Pending, status: Status, data: Option<&[u8]>) -> Result<(), Error> {
        let error = if status.is_ok() { 0 } else { wire_errno(status.errno()) };
        let data = data.filter(|d| error == 0 && p.cmd == CMD_READ && !d.is_empty());
        if let Some(d) = data {
            if self.sparse_reads && !p.df && d.len() as u64 >= SPARSE_READ_BYTES && self.sparse_runs(p.offset, d) {
                return self.reply_sparse(p.cookie, p.offset, d);
            }
        }
        self.reply_header(p.cookie, p.offset, error, data.map(<[u8]>::len));
        if let Some(d) = data {
            self.queue_data(d)?;
        }
        if self.out.len() > (1 << 20) {
            self.flush_out()?;
        }
        Ok(())
    }

    /// Queues read data after its header; large data goes out at once,
    /// straight from the request's buffer.
    fn queue_data(&mut self, d: &[u8]) -> Result<(), Error> {
        if d.len() >= DIRECT_WRITE_BYTES {
            // What is queued (this header included) and the data in one
            // writev: one system call, no header-only segment.
            write_all_vectored(&mut *self.s, &self.out, d).map_err(Error::Socket)?;
            self.out.clear();
        } else {
            self.out.extend_from_slice(d);
        }
        Ok(())
    }

    /// Queues a reply's header: a simple reply, or a structured chunk
    /// (ERROR; OFFSET_DATA with its offset when `data_len` bytes of read
    /// data follow; NONE otherwise). The data itself is the caller's.
    fn reply_header(&mut self, cookie: u64, offset: u64, error: u32, data_len: Option<usize>) {
        let out = &mut self.out;
        if !self.neg.structured {
            return simple_reply(out, error, cookie);
        }
        if error != 0 {
            return error_chunk(out, cookie, error, "");
        }
        match data_len {
            Some(n) => {
                chunk_header(out, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, cookie, 8 + n as u32);
                out.extend_from_slice(&offset.to_be_bytes());
            }
            None => chunk_header(out, REPLY_FLAG_DONE, REPLY_TYPE_NONE, cookie, 0),
        }
    }

    /// Resets the completion eventfd after poll saw it readable (it stays
    /// readable until read).
    fn clear_eventfd(&mut self) {
        let mut buf = [0u8; 8];
        // SAFETY: reads the eventfd's counter into an 8-byte buffer.
        let _ = unsafe { libc::read(self.efd, buf.as_mut_ptr().cast(), 8) };
    }

    /// Reads one request, then every further one already buffered (up to
    /// BATCH_REQUESTS, while slots and budget last), and submits their
    /// bios under one plug. False when the connection ends (what came
    /// before a DISC is still submitted).
    fn read_batch(&mut self) -> Result<bool, Error> {
        let mut open = self.read_request()?;
        // Under TLS a client's requests come a record each (libnbd writes
        // one per request): those already on the socket join the batch
        // too, or each would cost a poll, a submission and a reply write.
        while open
            && (self.rbuf.len() >= REQUEST_BYTES || (self.tls && crate::tls::more_to_read(&*self.s)))
            && self.batch.len() < BATCH_REQUESTS
            && !self.free.is_empty()
            && self.bytes_in_flight < BUDGET_BYTES
        {
            open = self.read_request()?;
        }
        self.submit_batch()?;
        Ok(open)
    }

    fn submit_batch(&mut self) -> Result<(), Error> {
        let Self { client, batch, refused, .. } = self;
        if !batch.is_empty() {
            let mut plug = client.plug_nr_ios(batch.len() as u32);
            for (bio, slot) in batch.drain(..) {
                if let Err(rejected) = plug.submit(bio, slot as u64) {
                    refused.push((slot, rejected.error.errno()));
                }
            }
        }
        let mut refused = std::mem::take(&mut self.refused);
        for (slot, errno) in refused.drain(..) {
            let p = self.slots[slot].take().expect("a refused request's slot is taken");
            self.free.push(slot);
            self.bytes_in_flight -= p.bytes;
            self.reply_header(p.cookie, p.offset, wire_errno(errno), None);
        }
        self.refused = refused;
        self.flush_out()
    }

    /// Reads one request and starts it (queues its bio on `batch`); false
    /// when the connection ends.
    fn read_request(&mut self) -> Result<bool, Error> {
        let mut h = [0u8; REQUEST_BYTES];
        if !self.fill(REQUEST_BYTES) {
            return Ok(false); // a client that went away (even mid-header)
        }
        h.copy_from_slice(&self.rbuf[..REQUEST_BYTES]);
        self.rbuf.drain(..REQUEST_BYTES);
        let r = parse_request(&h).map_err(Error::Protocol)?;
        let e = self.export;
        let size = e.size();
        let bs = u64::from(e.block_size());
        let len = u64::from(r.length);
        // A write's payload is read whatever the verdict, to stay in step.
        let mut payload = None;
        if r.cmd == CMD_WRITE {
            if r.length > MAX_PAYLOAD_BYTES {
                return Err(Error::Protocol(format!(
                    "write of {} bytes is over the {MAX_PAYLOAD_BYTES}-byte maximum",
                    r.length
                )));
            }
            let mut b = self.take_buf(r.length as usize);
            // What is buffered first, then the rest straight from the socket.
            let have = self.rbuf.len().min(b.len());
            b[..have].copy_from_slice(&self.rbuf[..have]);
            self.rbuf.drain(..have);
            if self.s.read_exact(&mut b[have..]).is_err() {
                return Ok(false); // disconnected mid-request: nothing was acknowledged
            }
            payload = Some(b);
        }
        let writes = matches!(r.cmd, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
        let ranged = matches!(r.cmd, CMD_READ | CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES | CMD_CACHE | CMD_BLOCK_STATUS);
        let verdict = match () {
            _ if r.cmd == CMD_DISC => return Ok(false),
            _ if writes && e.read_only => Some(EPERM),
            _ if ranged && r.offset.checked_add(len).is_none() => Some(EINVAL),
            _ if ranged && r.offset + len > size => Some(if writes { ENOSPC } else { EINVAL }),
            _ if r.cmd == CMD_READ && r.length > MAX_PAYLOAD_BYTES => Some(EINVAL),
            _ if ranged && r.cmd != CMD_BLOCK_STATUS && (r.offset % bs != 0 || len % bs != 0) => Some(EINVAL),
            _ if matches!(r.cmd, CMD_READ | CMD_WRITE) && len == 0 => Some(0),
            _ if r.cmd == CMD_CACHE => Some(0), // data lives in memory or the page cache already
            _ if r.cmd == CMD_BLOCK_STATUS => return self.block_status(&r).map(|_| true),
            _ if r.cmd > CMD_BLOCK_STATUS => Some(EINVAL),
            _ => None,
        };
        if let Some(error) = verdict {
            self.reply_header(r.cookie, r.offset, error, None);
            self.flush_out()?;
            return Ok(true);
        }
        if r.cmd == CMD_READ && len >= DIRECT_READ_BYTES && self.direct_reads && self.read_direct(&r)? {
            return Ok(true);
        }
        let fua = if r.flags & CMD_FLAG_FUA != 0 { ReqFlags::FUA } else { ReqFlags::NONE };
        let bio = match r.cmd {
            CMD_READ => Bio::read(r.offset, self.take_buf(r.length as usize)),
            CMD_WRITE => Bio::write(r.offset, payload.take().expect("read above")).with_flags(fua | ReqFlags::SYNC),
            CMD_FLUSH => Bio::flush(),
            CMD_TRIM => Bio::discard(r.offset, len).with_flags(fua),
            // NO_HOLE: the zeroes must stay allocated (REQ_NOUNMAP).
            _ if r.flags & CMD_FLAG_NO_HOLE != 0 => {
                Bio::write_zeroes(r.offset, len).with_flags(fua | ReqFlags::NOUNMAP)
            }
            _ => Bio::write_zeroes(r.offset, len).with_flags(fua),
        };
        let slot = self.free.pop().expect("the socket is polled only with a free slot");
        let bytes = if matches!(r.cmd, CMD_READ | CMD_WRITE) { len } else { 0 };
        let df = r.flags & CMD_FLAG_DF != 0;
        self.slots[slot] = Some(Pending { cookie: r.cookie, cmd: r.cmd, offset: r.offset, bytes, df });
        self.bytes_in_flight += bytes;
        self.batch.push((bio, slot));
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;

    /// A direct read does not wait on the socket past its budget while the
    /// device's pages are lent: `send_until` stops where a socket nobody
    /// reads stays full, and `copy_from` keeps the rest, in order, for
    /// after.
    #[test]
    fn a_full_socket_stops_the_send_and_the_rest_is_kept() {
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
        let pages: Vec<std::io::IoSlice<'_>> = data.chunks(4096).map(std::io::IoSlice::new).collect();
        let head = b"header".to_vec();
        let (mut sent, mut spill, mut header) = (0, Vec::new(), &head[..]);
        for chunk in pages.chunks(256) {
            let h = std::mem::take(&mut header);
            let at = if spill.is_empty() {
                send_until(a.as_raw_fd(), h, chunk, 0, std::time::Instant::now()).unwrap()
            } else {
                0
            };
            sent += at;
            copy_from(h, chunk, at, &mut spill);
        }
        let total = head.len() + data.len();
        assert!(sent < total, "4 MiB do not fit a socket nobody reads: the send stopped instead of waiting");
        assert_eq!(sent + spill.len(), total, "every byte either sent or kept");
        let mut got = vec![0u8; sent];
        b.read_exact(&mut got).unwrap();
        got.extend_from_slice(&spill);
        assert_eq!(&got[..head.len()], &head[..]);
        assert!(got[head.len()..] == data[..], "the bytes in order");
    }
}
