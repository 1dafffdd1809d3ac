//! The stop handle: one flag and one eventfd, shared by a server, its
//! connections and whoever may stop them (a signal-handling thread).
//!
//! The accept loop and every connection poll the eventfd next to their
//! sockets, so `stop()` wakes them at once, even an accept with no client
//! in sight. The eventfd is never read: once written it stays readable,
//! and every poller sees it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::Error;

/// Stops a [`Server`](crate::Server) (or a connection run with
/// [`serve_connection`](crate::conn::serve_connection)): `run()` then
/// closes the listener, lets each connection answer what it has in flight
/// and returns. Cheap to clone; stopping twice is harmless.
#[derive(Clone, Debug)]
pub struct StopHandle(Arc<Stop>);

#[derive(Debug)]
struct Stop {
    stopped: AtomicBool,
    /// Written by `stop()`; polled by the accept loop and connections.
    wake: OwnedFd,
}

impl StopHandle {
    /// A handle not yet stopped. Fails only if no eventfd can be made.
    pub fn new() -> Result<Self, Error> {
        // SAFETY: eventfd takes no pointers; the result is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(Error::Io { what: "eventfd for the stop handle", source: std::io::Error::last_os_error() });
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self(Arc::new(Stop { stopped: AtomicBool::new(false), wake })))
    }

    /// Asks the server and its connections to stop, and wakes their
    /// polls. Async-signal-safe (an atomic store and a write(2)), so it
    /// may be called from a signal handler as well as any thread.
    pub fn stop(&self) {
        // SeqCst: pairs with the load in `is_stopped`, which a poller
        // makes after the write below woke it; the flag is set first so
        // that a woken poller always finds it.
        self.0.stopped.store(true, Ordering::SeqCst);
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to an eventfd we own.
        // EAGAIN (a counter near overflow after many stops) is harmless:
        // the eventfd is readable already.
        let _ = unsafe { libc::write(self.0.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Whether `stop()` was called.
    pub fn is_stopped(&self) -> bool {
        self.0.stopped.load(Ordering::SeqCst)
    }

    /// The eventfd to poll (POLLIN) next to a socket: readable once stopped.
    pub(crate) fn wake_fd(&self) -> RawFd {
        self.0.wake.as_raw_fd()
    }
}
