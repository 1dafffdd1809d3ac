//! A connection's byte stream as the transmission phase uses it: a plain
//! socket (vectored `sendmsg` / `recvmsg` straight from and into the
//! requests' segments) or a TLS session (tls.rs). The receiving thread
//! owns the `Link`; the sender and the timeout handler hold a `LinkRef`.
//!
//! Relies on: sock.rs, tls.rs.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use super::sock;
use super::tls::TlsSession;

/// The stream, owned: dropping it closes the socket.
pub(crate) enum Link {
    Plain(OwnedFd),
    Tls(Arc<TlsSession>),
}

impl Link {
    /// The socket (to shut down, to poll).
    pub(crate) fn fd(&self) -> RawFd {
        match self {
            Link::Plain(fd) => fd.as_raw_fd(),
            Link::Tls(tls) => tls.fd(),
        }
    }

    /// A handle for the other threads, valid while this `Link` lives.
    pub(crate) fn handle(&self) -> LinkRef {
        match self {
            Link::Plain(fd) => LinkRef::Plain(fd.as_raw_fd()),
            Link::Tls(tls) => LinkRef::Tls(tls.clone()),
        }
    }
}

/// A handle on the stream (None: the connection is down).
#[derive(Clone)]
pub(crate) enum LinkRef {
    Down,
    Plain(RawFd),
    Tls(Arc<TlsSession>),
}

impl LinkRef {
    pub(crate) fn is_up(&self) -> bool {
        !matches!(self, LinkRef::Down)
    }

    /// Sends every byte `iov` describes (sock.rs `send_all`).
    ///
    /// # Safety
    /// Each iovec must describe memory valid for reads for the whole call.
    pub(crate) unsafe fn send_all(&self, iov: &mut [libc::iovec]) -> io::Result<()> {
        match self {
            LinkRef::Down => Err(io::ErrorKind::NotConnected.into()),
            // SAFETY: the caller's promise, passed on.
            LinkRef::Plain(fd) => unsafe { sock::send_all(*fd, iov) },
            // SAFETY: as above.
            LinkRef::Tls(tls) => unsafe { tls.send_all(iov) },
        }
    }

    /// Receives into `iov` what is there (sock.rs `recv_some`).
    ///
    /// # Safety
    /// Each iovec must describe memory valid for writes, which nothing
    /// else reads or writes during the call.
    pub(crate) unsafe fn recv_some(&self, iov: &mut [libc::iovec], dontwait: bool) -> io::Result<usize> {
        match self {
            LinkRef::Down => Err(io::ErrorKind::NotConnected.into()),
            // SAFETY: the caller's promise, passed on.
            LinkRef::Plain(fd) => unsafe { sock::recv_some(*fd, iov, dontwait) },
            // SAFETY: as above.
            LinkRef::Tls(tls) => unsafe { tls.recv_some(iov, dontwait) },
        }
    }
}
