//! The client's socket: connecting (TCP or Unix) with bounded waits for
//! the handshake, then the raw calls of transmission: `sendmsg` of an
//! iovec array (the request headers and a write's segments, never
//! SIGPIPE), `recvmsg` into one (a read's segments), and `shutdown`,
//! which wakes a thread blocked on the socket.
//!
//! Relies on: std's sockets for connecting, libc for the vectored calls.
//! The iovecs' memory is the callers' promise (`# Safety` below).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::uri::Endpoint;

/// A connected stream, during the handshake.
#[derive(Debug)]
pub(crate) enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    /// Connects, with reads and writes bounded by `timeout` until
    /// [`Stream::into_transmission`] (a server that accepts and then says
    /// nothing must not hang the device's open).
    pub(crate) fn connect(endpoint: &Endpoint, timeout: Duration) -> io::Result<Self> {
        let s = match endpoint {
            Endpoint::Unix { path } => {
                let s = UnixStream::connect(path)?;
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                Stream::Unix(s)
            }
            Endpoint::Tcp { host, port } => {
                let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{host} resolves to no address"));
                let mut found = None;
                for addr in (host.as_str(), *port).to_socket_addrs()? {
                    match TcpStream::connect_timeout(&addr, timeout) {
                        Ok(s) => {
                            found = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                let s = found.ok_or(last)?;
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                // Requests are small and answered one by one: no Nagle delay.
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
        };
        Ok(s)
    }

    /// The socket for transmission: blocking without a time limit (the
    /// block layer's request timeout bounds a request, and ends a stuck
    /// socket with `shutdown`).
    pub(crate) fn into_transmission(self) -> io::Result<OwnedFd> {
        Ok(match self {
            Stream::Unix(s) => {
                s.set_read_timeout(None)?;
                s.set_write_timeout(None)?;
                s.into()
            }
            Stream::Tcp(s) => {
                s.set_read_timeout(None)?;
                s.set_write_timeout(None)?;
                s.into()
            }
        })
    }
}

impl Stream {
    /// For a TLS session's transmission (tls.rs): no time limits, and
    /// nonblocking, so that neither thread waits holding the session.
    pub(crate) fn set_transmission_nonblocking(&mut self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => {
                s.set_read_timeout(None)?;
                s.set_write_timeout(None)?;
                s.set_nonblocking(true)
            }
            Stream::Tcp(s) => {
                s.set_read_timeout(None)?;
                s.set_write_timeout(None)?;
                s.set_nonblocking(true)
            }
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(b),
            Stream::Tcp(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
        }
    }
}

/// Sends every byte `iov` describes, advancing its entries past what a
/// partial send took (so they end consumed). MSG_NOSIGNAL: a closed peer
/// is an EPIPE error, not a signal that kills the process.
///
/// # Safety
/// Each iovec must describe memory valid for reads for the whole call.
pub(crate) unsafe fn send_all(fd: RawFd, mut iov: &mut [libc::iovec]) -> io::Result<()> {
    while !iov.is_empty() {
        // SAFETY: a zeroed msghdr is valid (no name, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len() as _;
        // SAFETY: msg points at `iov`, whose memory the caller vouches for.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        iov = advance(iov, n as usize);
    }
    Ok(())
}

/// Receives into `iov` what is there (at least a byte; nothing blocks
/// with `dontwait`, which gives WouldBlock instead). 0: the peer closed.
///
/// # Safety
/// Each iovec must describe memory valid for writes, which nothing else
/// reads or writes during the call.
pub(crate) unsafe fn recv_some(fd: RawFd, iov: &mut [libc::iovec], dontwait: bool) -> io::Result<usize> {
    loop {
        // SAFETY: as in `send_all`.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len() as _;
        let flags = if dontwait { libc::MSG_DONTWAIT } else { 0 };
        // SAFETY: msg points at `iov`, writable memory by the caller's promise.
        let n = unsafe { libc::recvmsg(fd, &mut msg, flags) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Drops the first `n` bytes of `iov`: whole entries, then the front of
/// the entry the count ends in.
pub(crate) fn advance(iov: &mut [libc::iovec], mut n: usize) -> &mut [libc::iovec] {
    let mut first = 0;
    while first < iov.len() && n >= iov[first].iov_len {
        n -= iov[first].iov_len;
        first += 1;
    }
    let rest = &mut iov[first..];
    if let Some(head) = rest.first_mut() {
        head.iov_base = head.iov_base.wrapping_byte_add(n);
        head.iov_len -= n;
    }
    rest
}

/// Ends both directions: a thread blocked in send or receive on it
/// returns at once. The fd stays open (its owner closes it).
pub(crate) fn shutdown(fd: RawFd) {
    // SAFETY: shutdown only changes the socket's state; a stale fd gives
    // EBADF or ENOTSOCK, which is ignored (callers keep it from being stale).
    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_drops_whole_entries_then_a_prefix() {
        let mut a = [0u8; 8];
        let mut b = [0u8; 4];
        let mut iov = [
            libc::iovec { iov_base: a.as_mut_ptr().cast(), iov_len: a.len() },
            libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() },
        ];
        let rest = advance(&mut iov, 10);
        assert_eq!(rest.len(), 1);
        assert_eq!((rest[0].iov_base as usize - b.as_ptr() as usize, rest[0].iov_len), (2, 2));
        assert!(advance(rest, 2).is_empty());
    }

    #[test]
    fn vectored_send_and_receive_over_a_socket_pair() {
        let (x, y) = UnixStream::pair().unwrap();
        let (head, body) = (*b"head", *b"body-bytes");
        let mut out = [
            libc::iovec { iov_base: head.as_ptr() as *mut _, iov_len: head.len() },
            libc::iovec { iov_base: body.as_ptr() as *mut _, iov_len: body.len() },
        ];
        // SAFETY: both arrays outlive the call and are only read.
        unsafe { send_all(x.as_raw_fd(), &mut out) }.unwrap();
        let (mut p, mut q) = ([0u8; 6], [0u8; 8]);
        let mut inp = [
            libc::iovec { iov_base: p.as_mut_ptr().cast(), iov_len: p.len() },
            libc::iovec { iov_base: q.as_mut_ptr().cast(), iov_len: q.len() },
        ];
        // SAFETY: p and q are ours, untouched during the call.
        let n = unsafe { recv_some(y.as_raw_fd(), &mut inp, false) }.unwrap();
        assert_eq!((n, &p, &q), (14, b"headbo", b"dy-bytes"));
        // SAFETY: as above.
        let e = unsafe { recv_some(y.as_raw_fd(), &mut inp, true) }.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        shutdown(x.as_raw_fd());
        // SAFETY: as above.
        assert_eq!(unsafe { recv_some(y.as_raw_fd(), &mut inp, false) }.unwrap(), 0, "shut down: end of stream");
        drop(y);
        let mut again = [libc::iovec { iov_base: head.as_ptr() as *mut _, iov_len: head.len() }];
        // SAFETY: `head` outlives the call and is only read.
        let e = unsafe { send_all(x.as_raw_fd(), &mut again) }.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "EPIPE, and no SIGPIPE killed the test");
    }
}
