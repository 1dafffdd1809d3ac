//! The accept loop: a TCP or Unix listener, a thread per connection (up
//! to a maximum, each with the server's TLS setting), and a clean stop
//! through a [`StopHandle`].

use std::net::TcpListener;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::conn::{self, Export};
use crate::{Error, StopHandle, Tls, TlsMode};

/// Connections served at once unless [`Server::max_connections`] says.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

/// Where the server listens.
#[derive(Debug)]
pub enum Listen {
    Tcp(TcpListener),
    /// A Unix socket and its path (removed when the server stops).
    Unix(UnixListener, PathBuf),
}

impl Listen {
    /// Binds a TCP listener on `address` (`127.0.0.1:10809`, `[::1]:0`).
    pub fn tcp(address: &str) -> Result<Self, Error> {
        TcpListener::bind(address)
            .map(Listen::Tcp)
            .map_err(|source| Error::Listen { address: address.to_string(), source })
    }

    /// Binds a Unix socket at `path` with mode 0600 (only its owner may
    /// connect), replacing a stale socket file left there by an earlier
    /// server.
    pub fn unix(path: impl AsRef<Path>) -> Result<Self, Error> {
        Self::unix_with_mode(path, mqblk::socket_mode::DEFAULT_SOCKET_MODE)
    }

    /// `unix` with the socket's permissions `mode` (0o660: its group too).
    pub fn unix_with_mode(path: impl AsRef<Path>, mode: u32) -> Result<Self, Error> {
        let path = path.as_ref();
        let _ = std::fs::remove_file(path);
        mqblk::socket_mode::bind_with_mode(mode, || UnixListener::bind(path))
            .map(|l| Listen::Unix(l, path.to_path_buf()))
            .map_err(|source| Error::Listen { address: path.display().to_string(), source })
    }

    fn fd(&self) -> RawFd {
        match self {
            Listen::Tcp(l) => l.as_raw_fd(),
            Listen::Unix(l, _) => l.as_raw_fd(),
        }
    }

    /// What the listener is bound to, for messages.
    fn address(&self) -> String {
        match self {
            Listen::Tcp(l) => l.local_addr().map_or_else(|_| "TCP".into(), |a| a.to_string()),
            Listen::Unix(_, path) => path.display().to_string(),
        }
    }

    fn set_nonblocking(&self) -> std::io::Result<()> {
        match self {
            Listen::Tcp(l) => l.set_nonblocking(true),
            Listen::Unix(l, _) => l.set_nonblocking(true),
        }
    }

    /// One connection, if one is waiting; its stream blocks (the
    /// listener does not, so a connection gone between poll and accept
    /// cannot hold up a stop).
    fn accept(&self) -> std::io::Result<Box<dyn conn::Stream>> {
        Ok(match self {
            Listen::Tcp(l) => {
                let (s, peer) = l.accept()?;
                s.set_nonblocking(false)?;
                let _ = s.set_nodelay(true);
                grow_send_buffer(&s);
                log::debug!("connection from {peer}");
                Box::new(s)
            }
            Listen::Unix(l, path) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                grow_send_buffer(&s);
                log::debug!("connection on {}", path.display());
                Box::new(s)
            }
        })
    }
}

/// The send buffer asked for on each connection (the kernel doubles it for
/// its bookkeeping and caps it at net.core.wmem_max): a 1 MiB read reply is
/// then handed to the kernel without waiting for the client to read most
/// of the one before, so the connection's thread goes on with the next
/// request while the client copies. Measured with fio's nbd engine, 1 MiB
/// reads at QD4 (docs/results/nbd-sndbuf.txt): 1.15x with one client,
/// 1.05x with two; asking for 4 MiB did better with one (1.22x) but worse
/// with two (0.85x).
const SEND_BUFFER_BYTES: libc::c_int = 1 << 20;

/// Asks for `SEND_BUFFER_BYTES` of socket send buffer (the kernel caps it
/// at net.core.wmem_max; a refusal leaves the default, which only costs
/// speed).
fn grow_send_buffer(s: &impl std::os::fd::AsRawFd) {
    let bytes = SEND_BUFFER_BYTES;
    // SAFETY: setsockopt on our own socket with a live c_int of the size given.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        log::debug!("SO_SNDBUF {bytes}: {}", std::io::Error::last_os_error());
    }
}

/// An NBD server: a listener and its exports. [`Server::run`] serves
/// until the [`StopHandle`] from [`Server::stop_handle`] is stopped.
pub struct Server {
    listen: Listen,
    exports: Vec<Export>,
    max_connections: usize,
    tls: Tls,
    stop: StopHandle,
}

impl Server {
    /// A server for `exports` on `listen`. Fails when there is no export,
    /// two share a name, or the stop handle's eventfd cannot be made.
    pub fn new(listen: Listen, exports: Vec<Export>) -> Result<Self, Error> {
        if exports.is_empty() {
            return Err(Error::NoExports);
        }
        for (i, e) in exports.iter().enumerate() {
            if exports[..i].iter().any(|earlier| earlier.name == e.name) {
                return Err(Error::DuplicateExport { name: e.name.clone() });
            }
        }
        listen.set_nonblocking().map_err(|source| Error::Listen { address: listen.address(), source })?;
        Ok(Self {
            listen,
            exports,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            tls: Tls::off(),
            stop: StopHandle::new()?,
        })
    }

    /// Connections served at once; more are accepted and closed at once
    /// (with a warning). [`DEFAULT_MAX_CONNECTIONS`] unless set.
    pub fn max_connections(mut self, max_connections: usize) -> Self {
        self.max_connections = max_connections;
        self
    }

    /// TLS on the server's connections ([`Tls::off`] unless set).
    pub fn tls(mut self, tls: Tls) -> Self {
        self.tls = tls;
        self
    }

    /// A handle whose `stop()` makes [`Server::run`] return.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Accepts connections until stopped, serving each on its own thread;
    /// then closes the listener (a Unix socket's file is removed) and
    /// returns when every connection has ended (in-flight requests
    /// complete before a connection's thread exits). An error from poll
    /// stops the connections too before it is returned.
    pub fn run(self) -> Result<(), Error> {
        let Server { listen, exports, max_connections, tls, stop } = self;
        let tls_note = match tls.mode() {
            TlsMode::Off => "",
            TlsMode::On => " (TLS on)",
            TlsMode::Require => " (TLS required)",
        };
        log::info!("{} export(s) on {}{tls_note}, ready", exports.len(), listen.address());
        let tls = Arc::new(tls);
        let exports = Arc::new(exports);
        let active = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        let result = loop {
            if stop.is_stopped() {
                break Ok(());
            }
            let mut fds = [
                libc::pollfd { fd: listen.fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: stop.wake_fd(), events: libc::POLLIN, revents: 0 },
            ];
            // SAFETY: two valid pollfds; no timeout: a stop writes the
            // second fd, which wakes this poll.
            if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) } < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                stop.stop(); // the connections end too, and are joined below
                break Err(Error::Io { what: "poll on the listener", source: e });
            }
            if fds[0].revents == 0 {
                continue; // the stop fd: checked at the top
            }
            let stream = match listen.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    log::debug!("accept: {e}");
                    continue;
                }
            };
            if active.load(Ordering::SeqCst) >= max_connections {
                log::warn!("refusing a connection: {max_connections} already open (the maximum)");
                continue; // dropping the stream closes it
            }
            active.fetch_add(1, Ordering::SeqCst);
            let (exports, active, tls, stop) = (exports.clone(), active.clone(), tls.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                match conn::serve_connection(stream, &exports, &tls, &stop) {
                    Ok(()) => log::debug!("connection ended"),
                    Err(e @ Error::Socket(_)) => log::info!("connection closed: {e}"),
                    Err(e) => log::warn!("connection closed: {e}"),
                }
                active.fetch_sub(1, Ordering::SeqCst);
            }));
            threads.retain(|t| !t.is_finished());
        };
        // New clients are refused from here on; those connected finish
        // what they have in flight (they poll the stop fd too).
        let unix_path = match &listen {
            Listen::Unix(_, path) => Some(path.clone()),
            Listen::Tcp(_) => None,
        };
        drop(listen);
        if let Some(path) = unix_path {
            let _ = std::fs::remove_file(path);
        }
        for t in threads {
            let _ = t.join();
        }
        log::info!("stopped");
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_buffer_bytes(s: &impl std::os::fd::AsRawFd) -> libc::c_int {
        let mut bytes: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt into a live c_int whose size is passed.
        let r = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&mut bytes as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0, "getsockopt: {}", std::io::Error::last_os_error());
        bytes
    }

    /// A connection's send buffer grows to SEND_BUFFER_BYTES, or to what
    /// net.core.wmem_max allows (the kernel reports twice the size asked
    /// for: its bookkeeping overhead).
    #[test]
    fn connections_get_a_send_buffer_for_large_replies() {
        let wmem_max: libc::c_int = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
            .expect("net.core.wmem_max")
            .trim()
            .parse()
            .expect("a number");
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let before = send_buffer_bytes(&a);
        grow_send_buffer(&a);
        let want = 2 * SEND_BUFFER_BYTES.min(wmem_max);
        assert_eq!(send_buffer_bytes(&a), want.max(before), "default was {before}");
    }
}
