//! An NBD server (the NetworkBlockDevice protocol, fixed newstyle) over
//! mqblk devices, so that QEMU, libnbd's tools, fio and the Linux nbd
//! client can use anything mqblk emulates or fronts.
//!
//! - proto.rs: the wire format, as pure functions;
//! - conn.rs: one connection (handshake, options, transmission);
//! - this file: listening on TCP or a Unix socket, a thread per
//!   connection, and a clean stop.

pub mod conn;
pub mod proto;
pub mod sparse;

use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

pub use conn::Export;

/// Where the server listens.
pub enum Listen {
    Tcp(TcpListener),
    Unix(UnixListener, std::path::PathBuf),
}

/// Accepts connections until `stop` is set, serving each on its own
/// thread; returns when every connection has ended (in-flight requests
/// complete before a connection's thread exits).
pub fn serve(
    listen: Listen,
    exports: Arc<Vec<Export>>,
    max_connections: usize,
    stop: &'static AtomicBool,
) -> std::io::Result<()> {
    let active = Arc::new(AtomicUsize::new(0));
    let fd = match &listen {
        Listen::Tcp(l) => l.as_raw_fd(),
        Listen::Unix(l, _) => l.as_raw_fd(),
    };
    let mut threads = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; 200 ms so that a stop is noticed.
        if unsafe { libc::poll(&mut pfd, 1, 200) } <= 0 {
            continue;
        }
        let stream: Box<dyn conn::Stream> = match &listen {
            Listen::Tcp(l) => match l.accept() {
                Ok((s, _)) => {
                    let _ = s.set_nodelay(true);
                    Box::new(s)
                }
                Err(_) => continue,
            },
            Listen::Unix(l, _) => match l.accept() {
                Ok((s, _)) => Box::new(s),
                Err(_) => continue,
            },
        };
        if active.load(Ordering::SeqCst) >= max_connections {
            eprintln!("mqblk serve: refusing a connection: {max_connections} already open (--max-connections)");
            continue; // dropping the stream closes it
        }
        active.fetch_add(1, Ordering::SeqCst);
        let (exports, active) = (exports.clone(), active.clone());
        threads.push(std::thread::spawn(move || {
            if let Err(e) = conn::serve_connection(stream, &exports, stop) {
                eprintln!("mqblk serve: connection closed: {e}");
            }
            active.fetch_sub(1, Ordering::SeqCst);
        }));
        threads.retain(|t| !t.is_finished());
    }
    for t in threads {
        let _ = t.join();
    }
    if let Listen::Unix(_, path) = &listen {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}
