//! Zero-copy read replies on Unix sockets. A read of a memory-backed null
//! export goes to the socket by reference: the store's pages are
//! vmspliced into a pipe and spliced from there into the socket, so the
//! connection's thread copies nothing and the client's copy out of the
//! socket is the only one (the copy path costs the thread a copy into the
//! socket's buffers: two thirds of its time at 1 MiB replies, BENCHMARKS.md).
//!
//! The pages stay referenced by the socket until the client reads them,
//! long after the reply was sent; mqblk's `Loan` keeps them unchanged
//! until then (the store's mem/loan.rs). When the client has read a reply
//! is told by SIOCOUTQ: on a Unix stream socket it is the truesize of the
//! buffers the peer has not consumed, never less than the unread bytes, so
//! everything but the last SIOCOUTQ bytes this connection wrote is read.
//! Only Unix sockets: on TCP, SIOCOUTQ counts bytes not yet acknowledged,
//! and loopback acknowledges on receipt, before the reader has read.
//!
//! Before the pages go into the pipe, the thread reads one byte of every
//! cache line of them: the client then copies from the shared cache what
//! it would otherwise fetch from memory, and the client's thread is the
//! bottleneck once the server's copy is gone (measured: BENCHMARKS.md,
//! "Zero-copy replies").
//!
//! A reply is one lend and one pipe's worth: reads that span more pages
//! than the pipe has slots (1 MiB where `F_SETPIPE_SZ` allows it) take
//! the copy path.
//!
//! Relies on: mqblk's `Device::loan` and `read_direct_lent`; Linux's
//! vmsplice, splice to a Unix socket (MSG_SPLICE_PAGES since 6.5, sendpage
//! before) and SIOCOUTQ.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use mqblk::{Device, LendId, Loan};

/// The pipe size asked for: a 1 MiB reply in one piece (the unprivileged
/// limit, /proc/sys/fs/pipe-max-size, is 1 MiB by default).
const PIPE_BYTES: libc::c_int = 1 << 20;
const PAGE_BYTES: u64 = 4096;
/// Longest wait between two looks at what the client has read while
/// lends are outstanding and nothing else wakes the connection.
const MAX_RECHECK_MS: i32 = 128;

pub(crate) struct Splicer {
    pipe_r: OwnedFd,
    pipe_w: OwnedFd,
    /// Pages the pipe holds (one per buffer slot).
    slots: usize,
    loan: Loan,
    /// Lends the client has not read yet: id and the stream position just
    /// past the reply's last byte.
    pending: VecDeque<(LendId, u64)>,
    /// The vmsplice iovecs (kept: no allocation per reply).
    iov: Vec<libc::iovec>,
    /// Current wait before looking again at what the client has read.
    recheck_ms: i32,
}

impl Splicer {
    /// A splicer for the connection on `socket`, if it is a Unix socket and
    /// `device` lends its pages past a read; None otherwise (copy path).
    pub(crate) fn new(device: &Device, socket: RawFd) -> Option<Self> {
        if !is_unix_socket(socket) {
            return None;
        }
        let loan = device.loan()?;
        let (pipe_r, pipe_w) = pipe()?;
        // SAFETY: resizing our own pipe; a refusal (pipe-user-pages limits)
        // leaves the default size, read back below.
        unsafe { libc::fcntl(pipe_w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
        // SAFETY: F_GETPIPE_SZ on our own pipe.
        let bytes = unsafe { libc::fcntl(pipe_w.as_raw_fd(), libc::F_GETPIPE_SZ) };
        let slots = usize::try_from(bytes).ok()? / PAGE_BYTES as usize;
        let iov = Vec::with_capacity(slots);
        Some(Self { pipe_r, pipe_w, slots, loan, pending: VecDeque::with_capacity(64), iov, recheck_ms: 1 })
    }

    /// Whether a read of `len` bytes at `offset` fits one pipe.
    pub(crate) fn fits(&self, offset: u64, len: u64) -> bool {
        ((offset + len).div_ceil(PAGE_BYTES) - offset / PAGE_BYTES) as usize <= self.slots
    }

    /// Lends `[offset, offset + len)` into the pipe, then writes `header`
    /// (copied) and splices the data after it; `sent` counts what reached
    /// the socket. False, with nothing sent, where the device declines.
    pub(crate) fn send(
        &mut self,
        device: &Device,
        s: &mut dyn std::io::Write,
        socket: RawFd,
        header: &[u8],
        (offset, len): (u64, u64),
        sent: &mut u64,
    ) -> std::io::Result<bool> {
        debug_assert!(self.fits(offset, len));
        let (pipe_w, iov) = (self.pipe_w.as_raw_fd(), &mut self.iov);
        let mut failed = None;
        let lent = device.read_direct_lent(&mut self.loan, offset, len, &mut |slices| {
            warm(slices);
            if let Err(e) = vmsplice_all(pipe_w, slices, iov) {
                failed.get_or_insert(e);
            }
            Ok(())
        });
        let Some(lent) = lent else { return Ok(false) };
        let id = lent?;
        if let Some(e) = failed {
            // Nothing reached the socket: empty the pipe (its references
            // go with the bytes), count the lend over once what was sent
            // before it is read, and let the caller copy.
            log::debug!("vmsplice of a {len}-byte read at {offset}: {e}; copying it instead");
            self.drain_pipe()?;
            self.pending.push_back((id, *sent));
            return Ok(false);
        }
        s.write_all(header)?;
        *sent += header.len() as u64;
        splice_all(self.pipe_r.as_raw_fd(), socket, len as usize, sent)?;
        self.pending.push_back((id, *sent));
        self.recheck_ms = 1;
        Ok(true)
    }

    /// Reads whatever the pipe holds, and drops it.
    fn drain_pipe(&mut self) -> std::io::Result<()> {
        let fd = self.pipe_r.as_raw_fd();
        let mut scratch = vec![0u8; 64 << 10];
        loop {
            // The pipe blocks when empty: ask how much it holds first.
            let mut held: libc::c_int = 0;
            // SAFETY: FIONREAD writes one int.
            if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut held) } != 0 || held <= 0 {
                return Ok(());
            }
            let want = scratch.len().min(held as usize);
            // SAFETY: reads at most `want` bytes into our own buffer.
            let n = unsafe { libc::read(fd, scratch.as_mut_ptr().cast(), want) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }

    /// Gives back the lends the client has read: all but the last
    /// SIOCOUTQ bytes of the `sent` this connection wrote.
    pub(crate) fn reclaim(&mut self, socket: RawFd, sent: u64) {
        if self.pending.is_empty() {
            return;
        }
        let Some(unread) = unread_bytes(socket) else { return };
        let read = sent.saturating_sub(unread);
        let mut last = None;
        while let Some(&(id, end)) = self.pending.front() {
            if end > read {
                break;
            }
            last = Some(id);
            self.pending.pop_front();
        }
        if let Some(id) = last {
            self.loan.give_back_through(id);
        }
    }

    /// Whether some reply's pages are still unread by the client.
    pub(crate) fn outstanding(&self) -> bool {
        !self.pending.is_empty()
    }

    /// How long the connection may sleep before looking again at what the
    /// client has read (doubling while nothing else wakes it), if lends
    /// are outstanding.
    pub(crate) fn recheck_ms(&mut self) -> Option<i32> {
        if self.pending.is_empty() {
            return None;
        }
        let ms = self.recheck_ms;
        self.recheck_ms = (ms * 2).min(MAX_RECHECK_MS);
        Some(ms)
    }
}

/// Reads one byte of each cache line of `slices`, so the client's copy
/// finds them in the shared cache (module doc).
fn warm(slices: &[std::io::IoSlice<'_>]) {
    let mut sum = 0u8;
    for s in slices {
        for line in s.chunks(64) {
            // SAFETY: a byte inside a live slice; volatile so the read is
            // made although nothing uses its value.
            sum ^= unsafe { std::ptr::read_volatile(line.as_ptr()) };
        }
    }
    std::hint::black_box(sum);
}

/// Puts every byte of `slices` into the pipe by reference (the pipe is
/// empty and has a slot per page, so it takes them without waiting).
fn vmsplice_all(pipe_w: RawFd, slices: &[std::io::IoSlice<'_>], iov: &mut Vec<libc::iovec>) -> std::io::Result<()> {
    iov.clear();
    iov.extend(slices.iter().map(|s| libc::iovec { iov_base: s.as_ptr() as *mut libc::c_void, iov_len: s.len() }));
    let mut at = 0;
    while at < iov.len() {
        // SAFETY: the iovecs cover live slices that the store keeps
        // unchanged until the loan gives them back; the kernel takes page
        // references and never writes through them (no SPLICE_F_GIFT).
        let n = unsafe { libc::vmsplice(pipe_w, iov[at..].as_ptr(), iov.len() - at, libc::SPLICE_F_NONBLOCK) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // Skip what went in; a partly taken iovec is resumed at its rest.
        let mut left = n as usize;
        while left > 0 {
            let v = &mut iov[at];
            let take = left.min(v.iov_len);
            // SAFETY: stays inside the same slice (take <= iov_len).
            v.iov_base = unsafe { v.iov_base.cast::<u8>().add(take) }.cast();
            v.iov_len -= take;
            left -= take;
            if v.iov_len == 0 {
                at += 1;
            }
        }
    }
    Ok(())
}

/// Moves `len` bytes from the pipe into the socket, waiting for room in
/// the socket as a write would.
fn splice_all(pipe_r: RawFd, socket: RawFd, mut len: usize, sent: &mut u64) -> std::io::Result<()> {
    while len > 0 {
        // SAFETY: splice between two fds we own; no offsets (a pipe and a
        // socket have none).
        let n = unsafe {
            libc::splice(pipe_r, std::ptr::null_mut(), socket, std::ptr::null_mut(), len, libc::SPLICE_F_MOVE)
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        len -= n as usize;
        *sent += n as u64;
    }
    Ok(())
}

/// Bytes written to `socket` that its peer has not read, at most (SIOCOUTQ:
/// the truesize of its unconsumed buffers); None if the kernel does not say.
fn unread_bytes(socket: RawFd) -> Option<u64> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int.
    let r = unsafe { libc::ioctl(socket, libc::TIOCOUTQ, &mut n) };
    (r == 0).then_some(n.max(0) as u64)
}

fn is_unix_socket(fd: RawFd) -> bool {
    let mut domain: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into a live c_int whose size is passed.
    let r = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_DOMAIN, (&mut domain as *mut libc::c_int).cast(), &mut len)
    };
    r == 0 && domain == libc::AF_UNIX
}

fn pipe() -> Option<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds, which we own from then on.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: fresh fds from pipe2, owned by nothing else.
    Some(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
