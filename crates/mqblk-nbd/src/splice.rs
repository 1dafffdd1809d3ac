//! Zero-copy read replies on Unix sockets. A read of a memory-backed null
//! export goes to the socket by reference: the store's pages are
//! vmspliced into a pipe and spliced from there into the socket, so the
//! connection's thread copies nothing and the client's copy out of the
//! socket is the only one (the copy path costs the thread a copy into the
//! socket's buffers: two thirds of its time at 1 MiB replies, BENCHMARKS.md).
//!
//! The socket then holds the page frames until the client reads them, or
//! longer if the client passes them on (splicing from the socket into a
//! pipe of its own, as a proxy does). The device's `read_direct_lent`
//! keeps such frames as they are for as long as anyone holds them (the
//! store gives a lent page's frame to the kernel before it reuses the
//! address: mqblk's mem/lent.rs), so nothing here tracks what the client
//! has read.
//!
//! Before the pages go into the pipe, the thread reads one byte of every
//! cache line of them: the client then copies from the shared cache what
//! it would otherwise fetch from memory, and the client's thread is the
//! bottleneck once the server's copy is gone (measured: BENCHMARKS.md,
//! "Zero-copy replies").
//!
//! A reply is one pipe's worth: reads that span more pages than the pipe
//! has slots (1 MiB where `F_SETPIPE_SZ` allows it) take the copy path.
//! TCP sockets take it too: zero copy there measured 1.07-1.22x the copy
//! path with a worse p99 (BENCHMARKS.md).
//!
//! splice(2) has no MSG_NOSIGNAL: a client gone mid-reply would raise
//! SIGPIPE, so the connection's thread blocks it (`Splicer::new`) and gets
//! EPIPE instead, whatever the embedding program does with the signal.
//!
//! Relies on: mqblk's `Device::read_direct_lent`; Linux's vmsplice and
//! splice to a Unix socket (MSG_SPLICE_PAGES since 6.5, sendpage before).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use mqblk::Device;

/// The pipe size asked for: a 1 MiB reply in one piece (the unprivileged
/// limit, /proc/sys/fs/pipe-max-size, is 1 MiB by default).
const PIPE_BYTES: libc::c_int = 1 << 20;
const PAGE_BYTES: u64 = 4096;

pub(crate) struct Splicer {
    pipe_r: OwnedFd,
    pipe_w: OwnedFd,
    /// Pages the pipe holds (one per buffer slot).
    slots: usize,
    /// The vmsplice iovecs (kept: no allocation per reply).
    iov: Vec<libc::iovec>,
}

impl Splicer {
    /// A splicer for the connection on `socket`, if it is a Unix stream
    /// socket and `device` lends its pages past a read; None otherwise
    /// (copy path). Called on the connection's thread, whose SIGPIPE it
    /// blocks (module doc).
    pub(crate) fn new(device: &Device, socket: RawFd) -> Option<Self> {
        if !is_unix_stream(socket) || !device.direct_access().is_some_and(|d| d.lends()) {
            return None;
        }
        let (pipe_r, pipe_w) = pipe()?;
        // SAFETY: resizing our own pipe; a refusal (pipe-user-pages limits)
        // leaves the default size, read back below.
        unsafe { libc::fcntl(pipe_w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
        // SAFETY: F_GETPIPE_SZ on our own pipe.
        let bytes = unsafe { libc::fcntl(pipe_w.as_raw_fd(), libc::F_GETPIPE_SZ) };
        let slots = usize::try_from(bytes).ok()? / PAGE_BYTES as usize;
        block_sigpipe();
        Some(Self { pipe_r, pipe_w, slots, iov: Vec::with_capacity(slots) })
    }

    /// Whether a read of `len` bytes at `offset` fits one pipe.
    pub(crate) fn fits(&self, offset: u64, len: u64) -> bool {
        ((offset + len).div_ceil(PAGE_BYTES) - offset / PAGE_BYTES) as usize <= self.slots
    }

    /// Lends `[offset, offset + len)` into the pipe, then writes `header`
    /// (copied) and splices the data after it. False, with nothing sent,
    /// where the device declines (copy then). An error leaves the stream
    /// unusable: the connection ends.
    pub(crate) fn send(
        &mut self,
        device: &Device,
        s: &mut dyn std::io::Write,
        socket: RawFd,
        header: &[u8],
        (offset, len): (u64, u64),
    ) -> std::io::Result<bool> {
        debug_assert!(self.fits(offset, len));
        let (pipe_w, iov) = (self.pipe_w.as_raw_fd(), &mut self.iov);
        let Some(direct) = device.direct_access() else { return Ok(false) };
        let lent = direct.read_lent(offset, len, &mut |slices| {
            warm(slices);
            vmsplice_all(pipe_w, slices, iov)
        });
        let Some(lent) = lent else { return Ok(false) };
        lent?;
        s.write_all(header)?;
        splice_all(self.pipe_r.as_raw_fd(), socket, len as usize)?;
        Ok(true)
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
        // The device keeps lent frames unchanged while anyone holds them
        // (`read_direct_lent`).
        // SAFETY: the iovecs cover live slices; the kernel takes page
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
fn splice_all(pipe_r: RawFd, socket: RawFd, mut len: usize) -> std::io::Result<()> {
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
    }
    Ok(())
}

fn is_unix_stream(fd: RawFd) -> bool {
    let opt = |name| {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt into a live c_int whose size is passed.
        let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, name, (&mut v as *mut libc::c_int).cast(), &mut len) };
        (r == 0).then_some(v)
    };
    opt(libc::SO_DOMAIN) == Some(libc::AF_UNIX) && opt(libc::SO_TYPE) == Some(libc::SOCK_STREAM)
}

/// Blocks SIGPIPE for the calling thread: a write to a socket whose peer
/// has gone then fails with EPIPE instead of raising it (a thread-directed
/// signal, left pending and dropped with the thread).
fn block_sigpipe() {
    // SAFETY: an empty set from sigemptyset, one signal added, and this
    // thread's mask changed; no memory is shared.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
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
