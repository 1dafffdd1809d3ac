//! One connection of the `nbd:` driver, serving one hardware queue (as
//! Linux's nbd.c: a socket per hctx): the sending side, the timeout
//! handler, and the hand-over when the connection is lost and found
//! again. The receiving thread is rx.rs.
//!
//! Sending: `issue` writes a request's 28-byte header into the slot of
//! its tag (preallocated, so its address is stable) and appends the
//! header and, for a write, the request's physical segments to a batch of
//! iovecs; at `last` (or `commit_rqs`) the batch goes out in one
//! `sendmsg` under the sender's lock, as the kernel's `tx_lock` keeps one
//! request's bytes together on the stream. Nothing is copied (but by TLS's
//! encryption, link.rs) and nothing allocated per request.
//!
//! Completing a request can run the queue, which can call `issue` on
//! this thread: no request is ever completed while the sender's lock is
//! held. What ends under it is left in its slot as `ready`
//! (slot.rs `settle_later`) and completed after the lock is dropped.
//!
//! Lock order: the sender's lock, then one slot's. The receiver and the
//! timeout handler take one slot's lock alone; `shut` is a leaf.
//!
//! Who may wait for the sender's lock: a sender holding it can block in
//! `sendmsg` for as long as the server does not read (until the timeout
//! shuts the socket down). A completion on the receiving thread can run
//! the queue, and so call `issue` there (with a scheduler, or requests on
//! the dispatch list): were it to wait, no reply would be read, the
//! server could stop reading while its replies back up, and nothing would
//! move. The block layer's kblockd runs the timeouts that end such a
//! stall, so it must not wait either. Those two threads take the lock
//! only if it is free, and otherwise hand the request back (`Busy`: the
//! block layer retries it at the next completion) or leave a batch to
//! the lock's holder, whose thread always flushes what it finds.
//!
//! Relies on: slot.rs (the per-tag state machine), link.rs (sending on a
//! plain or TLS stream), sock.rs (connecting, shutdown), handshake.rs and
//! tls.rs (a connection's negotiation), proto.rs.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use mqblk::driver::{Rq, TimeoutAction};
use mqblk::Status;

use super::handshake::{greet, negotiate, starttls, ExportInfo};
use super::link::{Link, LinkRef};
use super::slot::Slot;
use super::sock::{self, Stream};
use super::tls::{Psk, TlsSession};
use super::uri::NbdUri;
use crate::proto::{REQUEST_BYTES, REQUEST_MAGIC};

/// Most iovecs one sendmsg takes (the kernel's UIO_MAXIOV).
const IOV_MAX: usize = 1024;

/// Where the connections go and how they negotiate.
pub(crate) struct Target {
    pub(crate) uri: NbdUri,
    pub(crate) structured: bool,
    pub(crate) timeout: Duration,
    /// TLS with this key (nbds:// URIs).
    pub(crate) psk: Option<Psk>,
}

impl Target {
    /// A new connection, negotiated (in TLS after NBD_OPT_STARTTLS when
    /// the target has a key).
    pub(crate) fn connect(&self) -> Result<(Link, ExportInfo), String> {
        let mut s = Stream::connect(&self.uri.endpoint, self.timeout).map_err(|e| format!("cannot connect: {e}"))?;
        let (name, structured) = (&self.uri.export, self.structured);
        let no_zeroes = greet(&mut s).map_err(|e| e.to_string())?;
        let Some(psk) = &self.psk else {
            let info = negotiate(&mut s, name, structured, no_zeroes).map_err(|e| e.to_string())?;
            let fd = s.into_transmission().map_err(|e| format!("socket: {e}"))?;
            return Ok((Link::Plain(fd), info));
        };
        starttls(&mut s).map_err(|e| e.to_string())?;
        let tls = TlsSession::connect(s, psk)?;
        let info = negotiate(&mut &tls, name, structured, no_zeroes).map_err(|e| e.to_string())?;
        tls.start_transmission().map_err(|e| format!("socket: {e}"))?;
        Ok((Link::Tls(Arc::new(tls)), info))
    }
}

/// The sender's state, under its lock.
struct Tx {
    /// The stream (Down while the connection is down).
    link: LinkRef,
    down_since: Option<Instant>,
    /// The driver is shutting down: requests fail at once.
    stopped: bool,
    /// A header per tag (their addresses go into `iov`).
    headers: Box<[[u8; REQUEST_BYTES]]>,
    /// The batch: headers and write segments, in stream order.
    iov: Vec<libc::iovec>,
    /// The tags in the batch.
    batch: Vec<u32>,
    /// Tags of requests left `ready` in their slots while the lock was
    /// held (capacity: the queue depth, so pushing never allocates).
    ready: Vec<u32>,
}

// SAFETY: the iovecs point at `headers` (owned here) and at the segments
// of requests whose slots are `tx_busy`, which no other party completes;
// they are used only under the sender's lock.
unsafe impl Send for Tx {}

/// What `show` prints per connection.
#[derive(Default)]
pub(crate) struct ConnStats {
    pub(crate) reconnects: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) lost: AtomicU64,
    /// Requests ended as their sendmsg returned: a reply came first (or,
    /// rarely, their timeout).
    pub(crate) early_replies: AtomicU64,
}

pub(crate) struct Conn {
    pub(crate) index: usize,
    pub(crate) target: Arc<Target>,
    /// What the first handshake found: a reconnect must find the same.
    pub(crate) info: ExportInfo,
    pub(crate) slots: Box<[Mutex<Slot>]>,
    /// Physical segments a request may carry (the iovec arrays' bound).
    pub(crate) max_segments: usize,
    tx: Mutex<Tx>,
    /// The socket to shut down from another thread (-1: none). Set before
    /// a socket is used and cleared before it closes, so a shutdown never
    /// reaches a reused fd number.
    shut: Mutex<RawFd>,
    stop: Mutex<bool>,
    stop_cv: Condvar,
    pub(crate) stats: ConnStats,
}

impl Conn {
    pub(crate) fn new(
        index: usize,
        target: Arc<Target>,
        info: ExportInfo,
        link: LinkRef,
        fd: RawFd,
        queue_depth: u32,
        max_segments: usize,
    ) -> Self {
        let depth = queue_depth as usize;
        Self {
            index,
            target,
            info,
            slots: (0..depth).map(|_| Mutex::new(Slot::default())).collect(),
            max_segments,
            tx: Mutex::new(Tx {
                link,
                down_since: None,
                stopped: false,
                headers: vec![[0; REQUEST_BYTES]; depth].into_boxed_slice(),
                iov: Vec::with_capacity(IOV_MAX),
                batch: Vec::with_capacity(depth),
                ready: Vec::with_capacity(depth),
            }),
            shut: Mutex::new(fd),
            stop: Mutex::new(false),
            stop_cv: Condvar::new(),
            stats: ConnStats::default(),
        }
    }

    /// Sends `rq` as NBD command `cmd` with command flags `flags` (at
    /// `last`, with the batch before it), or parks it while the
    /// connection is down, or fails it once the connection has been down
    /// longer than the request timeout. Err: the lock was taken and this
    /// thread must not wait for it (the module docs): the request goes
    /// back to the block layer.
    pub(crate) fn issue(&self, mut rq: Rq, cmd: u16, flags: u16, last: bool) -> Result<(), Rq> {
        let tag = rq.tag();
        let Some(mut tx) = self.lock_tx() else { return Err(rq) };
        if !tx.link.is_up() {
            let expired = tx.stopped || tx.down_since.is_some_and(|t| t.elapsed() >= self.target.timeout);
            if expired {
                drop(tx);
                rq.complete(Status::IoErr);
                return Ok(());
            }
            // Parked: sent by the reconnect, or ended by the timeout.
            self.slots[tag as usize].lock().hold(rq);
            return Ok(());
        }
        let segments = if cmd == crate::proto::CMD_WRITE { rq.nr_phys_segments() as usize } else { 0 };
        if tx.iov.len() + 1 + segments > IOV_MAX {
            self.flush(&mut tx);
        }
        let header_at = tx.iov.len();
        let header = tx.headers[tag as usize].as_mut_ptr();
        tx.iov.push(libc::iovec { iov_base: header.cast(), iov_len: REQUEST_BYTES });
        if segments > 0 {
            rq.for_each_phys_segment(|addr, len| tx.iov.push(libc::iovec { iov_base: addr.cast(), iov_len: len }));
        }
        let (offset, length) = (rq.pos_bytes(), rq.len_bytes() as u32);
        let cookie = {
            let mut slot = self.slots[tag as usize].lock();
            slot.hold(rq);
            slot.resend(tag)
        };
        debug_assert_eq!(tx.iov[header_at].iov_base, header.cast());
        write_header(&mut tx.headers[tag as usize], flags, cmd, cookie, offset, length);
        tx.batch.push(tag);
        if last {
            self.flush(&mut tx);
        }
        self.unlock_and_complete(tx);
        Ok(())
    }

    /// Sends the batch (`commit_rqs`, or a batch ended without `last`).
    /// On a thread that must not wait, a lock held elsewhere means its
    /// holder's thread flushes the batch.
    pub(crate) fn commit(&self) {
        if let Some(mut tx) = self.lock_tx() {
            self.flush(&mut tx);
            self.unlock_and_complete(tx);
        }
    }

    /// The sender's lock: waited for on a client's thread, only taken if
    /// free on the receiving thread and kblockd (the module docs).
    fn lock_tx(&self) -> Option<parking_lot::MutexGuard<'_, Tx>> {
        if let Some(tx) = self.tx.try_lock() {
            return Some(tx);
        }
        let current = std::thread::current();
        let must_not_wait = super::rx::on_receiving_thread() || current.name() == Some("mqblk-kblockd");
        if must_not_wait {
            None
        } else {
            Some(self.tx.lock())
        }
    }

    /// Releases the sender's lock, then completes what ended under it:
    /// a reply that beat its own sendmsg (0.6% of requests at QD32 on a
    /// local nbdkit: `early_replies`), a timeout, a lost connection. The tags are copied out first, up to
    /// a stack array's worth; more than that (a lost connection's whole
    /// queue) is found by a walk over every slot.
    fn unlock_and_complete(&self, mut tx: parking_lot::MutexGuard<'_, Tx>) {
        const AT_ONCE: usize = 32;
        let mut tags = [0u32; AT_ONCE];
        let n = tx.ready.len();
        if n <= AT_ONCE {
            tags[..n].copy_from_slice(&tx.ready);
        }
        tx.ready.clear();
        drop(tx);
        if n > AT_ONCE {
            (0..self.slots.len()).for_each(|tag| self.complete_ready(tag));
        } else {
            tags[..n].iter().for_each(|&tag| self.complete_ready(tag as usize));
        }
    }

    /// Completes the request `tag`'s slot holds `ready`, if it still does
    /// (another walk may have completed it).
    fn complete_ready(&self, tag: usize) {
        let done = self.slots[tag].lock().take_ready();
        if let Some((rq, status)) = done {
            rq.complete(status);
        }
    }

    /// Sends the batch; the sender's part of each request ends (a reply
    /// that came meanwhile settles it). On a send error the connection
    /// is shut down: the receiver notices, parks the requests and
    /// reconnects.
    fn flush(&self, tx: &mut Tx) {
        if tx.batch.is_empty() {
            return;
        }
        // SAFETY: the iovecs point at this Tx's headers and at segments of
        // requests in `tx_busy` slots, valid until those flags clear below.
        let sent = unsafe { tx.link.send_all(&mut tx.iov) };
        tx.iov.clear();
        if let Err(e) = sent {
            log::warn!("nbd: connection {} to {}: send failed: {e}", self.index, self.target.uri);
            self.shut_down();
            tx.link = LinkRef::Down;
            tx.down_since.get_or_insert_with(Instant::now);
        }
        let Tx { batch, ready, .. } = tx;
        let mut early = 0;
        for &tag in batch.iter() {
            let mut slot = self.slots[tag as usize].lock();
            slot.tx_busy = false;
            if slot.settle_later() {
                ready.push(tag);
                early += 1;
            }
        }
        if early > 0 {
            self.stats.early_replies.fetch_add(early, Ordering::Relaxed);
        }
        batch.clear();
    }

    /// Wakes whatever is blocked on the socket: it fails, and the
    /// receiver reconnects.
    pub(crate) fn shut_down(&self) {
        let fd = self.shut.lock();
        if *fd >= 0 {
            sock::shutdown(*fd);
        }
    }

    /// The block layer's timeout for driver tag `tag` (the kernel's
    /// `nbd_xmit_timeout` with one connection per queue): the request
    /// fails with EIO. If the server may still answer it, the connection
    /// is shut down, since that answer would name a cookie no longer in
    /// flight; the other requests on it are sent again after the
    /// reconnect.
    pub(crate) fn timeout(&self, tag: u32) -> TimeoutAction {
        let Some(slot) = self.slots.get(tag as usize) else { return TimeoutAction::ResetTimer };
        let mut slot = slot.lock();
        if slot.rq.is_none() {
            // Not in the slot yet: `issue` waits for the sender's lock.
            return TimeoutAction::ResetTimer;
        }
        if slot.ready.is_some() {
            return TimeoutAction::Done; // its completion is under way
        }
        self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
        if slot.tx_busy || slot.rx_busy {
            slot.timed_out = true;
            drop(slot);
            self.shut_down();
            return TimeoutAction::Done;
        }
        let on_wire = slot.on_wire;
        slot.on_wire = false;
        let rq = slot.rq.take().expect("checked above");
        drop(slot);
        if on_wire {
            log::warn!("nbd: connection {} to {}: request timed out", self.index, self.target.uri);
            self.shut_down();
        }
        rq.complete(Status::IoErr);
        TimeoutAction::Done
    }

    /// The receiver's socket failed (or was shut down): every request on
    /// it, and every one in an unsent batch, waits for the next
    /// connection; any that timed out meanwhile fail now.
    pub(crate) fn connection_lost(&self) {
        {
            // A sender may be blocked in sendmsg on a socket that is still
            // open (the receiver saw a broken reply): wake it first, or the
            // sender's lock below is never free.
            let mut shut = self.shut.lock();
            if *shut >= 0 {
                sock::shutdown(*shut);
            }
            *shut = -1;
        }
        self.stats.lost.fetch_add(1, Ordering::Relaxed);
        let mut tx = self.tx.lock();
        tx.link = LinkRef::Down;
        tx.down_since.get_or_insert_with(Instant::now);
        self.park_held(&mut tx, false);
        self.unlock_and_complete(tx);
    }

    /// Drops the unsent batch and parks every request the server holds:
    /// with `fail`, each fails with EIO; else each waits for the next
    /// connection, unless it timed out meanwhile. Those to complete go on
    /// `tx.ready`.
    fn park_held(&self, tx: &mut Tx, fail: bool) {
        tx.iov.clear();
        tx.batch.clear();
        for (tag, slot) in self.slots.iter().enumerate() {
            let mut slot = slot.lock();
            if slot.rq.is_some() && slot.ready.is_none() {
                slot.park();
                let complete = if fail {
                    slot.ready = Some(Status::IoErr);
                    true
                } else {
                    slot.settle_later()
                };
                if complete {
                    tx.ready.push(tag as u32);
                }
            }
        }
    }

    /// A new connection on `fd` carries the queue from now on: the
    /// parked requests go out on it again, under new cookies.
    pub(crate) fn reconnected(&self, link: LinkRef, fd: RawFd) {
        let mut tx = self.tx.lock();
        tx.link = link;
        tx.down_since = None;
        *self.shut.lock() = fd;
        if self.stopping() {
            sock::shutdown(fd); // a stop that came before `shut` was set
        }
        for (tag, slot) in self.slots.iter().enumerate() {
            let mut s = slot.lock();
            if !s.is_parked() {
                continue;
            }
            let rq = s.rq.as_mut().expect("parked");
            let segments = if rq.op() == mqblk::Op::Write { rq.nr_phys_segments() as usize } else { 0 };
            if tx.iov.len() + 1 + segments > IOV_MAX {
                drop(s);
                self.flush(&mut tx);
                s = slot.lock();
                if !s.is_parked() {
                    continue;
                }
            }
            let tag = tag as u32;
            let rq = s.rq.as_mut().expect("parked");
            let (offset, length, cmd_flags) = (rq.pos_bytes(), rq.len_bytes() as u32, command_of(rq, &self.info));
            let header = tx.headers[tag as usize].as_mut_ptr();
            tx.iov.push(libc::iovec { iov_base: header.cast(), iov_len: REQUEST_BYTES });
            if segments > 0 {
                rq.for_each_phys_segment(|addr, len| tx.iov.push(libc::iovec { iov_base: addr.cast(), iov_len: len }));
            }
            let cookie = s.resend(tag);
            drop(s);
            let (cmd, flags) = cmd_flags.unwrap_or((crate::proto::CMD_READ, 0));
            write_header(&mut tx.headers[tag as usize], flags, cmd, cookie, offset, length);
            tx.batch.push(tag);
        }
        self.flush(&mut tx);
        self.unlock_and_complete(tx);
    }

    /// Sleeps up to `delay` unless the driver stops; false: it stops.
    pub(crate) fn wait_before_retry(&self, delay: Duration) -> bool {
        let mut stop = self.stop.lock();
        if !*stop {
            self.stop_cv.wait_for(&mut stop, delay);
        }
        !*stop
    }

    pub(crate) fn stopping(&self) -> bool {
        *self.stop.lock()
    }

    /// Stops the connection: tells the server (NBD_CMD_DISC, and TLS's
    /// close_notify), then its receiver returns from any wait.
    pub(crate) fn stop(&self) {
        *self.stop.lock() = true;
        self.stop_cv.notify_all();
        self.say_goodbye();
        self.shut_down();
    }

    /// NBD_CMD_DISC, best effort: the device has no users left, so no
    /// request should be in flight; a sender still holding the lock (a
    /// stuck one) means the connection is past being polite to.
    fn say_goodbye(&self) {
        let Some(tx) = self.tx.try_lock() else { return };
        let mut disc = [0u8; REQUEST_BYTES];
        write_header(&mut disc, 0, crate::proto::CMD_DISC, 0, 0, 0);
        let mut iov = [libc::iovec { iov_base: disc.as_mut_ptr().cast(), iov_len: REQUEST_BYTES }];
        // SAFETY: `disc` outlives the call.
        let _ = unsafe { tx.link.send_all(&mut iov) };
        if let LinkRef::Tls(tls) = &tx.link {
            tls.close_notify();
        }
    }

    /// The receiver's last act: every request still held fails, and any
    /// that arrive later fail at once.
    pub(crate) fn fail_everything(&self) {
        *self.shut.lock() = -1;
        let mut tx = self.tx.lock();
        (tx.link, tx.stopped) = (LinkRef::Down, true);
        self.park_held(&mut tx, true);
        self.unlock_and_complete(tx);
    }

    /// Connected now (for `show`).
    pub(crate) fn is_up(&self) -> bool {
        self.tx.lock().link.is_up()
    }
}

/// The NBD command and flags a request becomes: None for what is
/// answered without the server (a flush the export does not need).
pub(crate) fn command_of(rq: &Rq, info: &ExportInfo) -> Option<(u16, u16)> {
    use crate::proto::*;
    use mqblk::Op;
    let fua = if rq.flags().contains(mqblk::ReqFlags::FUA) && info.has(TF_SEND_FUA) { CMD_FLAG_FUA } else { 0 };
    match rq.op() {
        Op::Read => Some((CMD_READ, 0)),
        Op::Write => Some((CMD_WRITE, fua)),
        Op::Flush if info.has(TF_SEND_FLUSH) => Some((CMD_FLUSH, 0)),
        Op::Discard => Some((CMD_TRIM, fua)),
        // mqblk's write zeroes may deallocate (the file driver punches a
        // hole): no NBD_CMD_FLAG_NO_HOLE.
        Op::WriteZeroes => Some((CMD_WRITE_ZEROES, fua)),
        _ => None,
    }
}

fn write_header(h: &mut [u8; REQUEST_BYTES], flags: u16, cmd: u16, cookie: u64, offset: u64, length: u32) {
    h[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    h[4..6].copy_from_slice(&flags.to_be_bytes());
    h[6..8].copy_from_slice(&cmd.to_be_bytes());
    h[8..16].copy_from_slice(&cookie.to_be_bytes());
    h[16..24].copy_from_slice(&offset.to_be_bytes());
    h[24..28].copy_from_slice(&length.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{parse_request, CMD_WRITE};

    #[test]
    fn headers_are_what_the_server_parses() {
        let mut h = [0u8; REQUEST_BYTES];
        write_header(&mut h, 1, CMD_WRITE, super::super::slot::cookie(5, 2), 4096, 512);
        let r = parse_request(&h).unwrap();
        assert_eq!((r.flags, r.cmd, r.cookie, r.offset, r.length), (1, CMD_WRITE, (2 << 32) | 5, 4096, 512));
    }
}
