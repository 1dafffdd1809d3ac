//! The server: one mqblk device as the vhost-user-blk disk of the QEMU
//! that connects to a Unix socket, one connection at a time.
//!
//! Steps (`Server::run`): the socket listens from `Server::new` on, so a
//! caller can start QEMU once `new` returned. For each connection: a
//! client of the device per virtqueue (queue.rs), the guest memory the
//! queues read, which takes each memory table once checked (memory.rs),
//! the backend (backend.rs) and vhost-user-backend's daemon over them,
//! each client's completion eventfd registered in its queue worker's
//! epoll; serve until QEMU hangs up, a `Stopper` (SIGINT/SIGTERM in
//! `mqblk vhost add`) shuts the connection, or a queue ends it (the
//! frontend's memory file shrank); then the workers are joined, answers still in flight are
//! dropped, and the server waits for the next connection (a guest reboot
//! or a QEMU restart reconnects). On a stop the device is flushed. A
//! device whose clients reap their own rings (file `reap=client`) needs a
//! ring per queue, checked in `new`.
//!
//! Relies on: backend.rs, memory.rs, queue.rs, config.rs; mqblk's Device;
//! vhost-user-backend's VhostUserDaemon; vhost's Listener.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use mqblk::{Bio, Client, Device};
use vhost::vhost_user::Listener;
use vhost_user_backend::{ShutdownHandle, VhostUserDaemon};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::backend::{completion_event, BlkBackend, ConnectionEnd};
use crate::config::DiskLimits;
use crate::error::Error;
use crate::memory::MemoryWatch;
use crate::queue::{QueueStats, VirtQueue};

/// The largest virtqueue a guest may set up (QEMU's vhost-user-blk allows
/// queue-size up to 1024).
pub const MAX_QUEUE_SIZE: u16 = 1024;

/// What to serve.
#[derive(Debug, Clone)]
pub struct Options {
    /// Virtqueues offered (num_queues; one worker thread and client each).
    pub queues: u16,
    /// Requests in flight per virtqueue.
    pub depth: u16,
    /// Refuse writes (VIRTIO_BLK_F_RO).
    pub read_only: bool,
    /// The GET_ID answer (at most 20 bytes are sent).
    pub serial: String,
    /// The socket's permissions (0600: only its owner may connect).
    pub socket_mode: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            queues: 1,
            depth: 128,
            read_only: false,
            serial: "mqblk".into(),
            socket_mode: mqblk::socket_mode::DEFAULT_SOCKET_MODE,
        }
    }
}

/// How the server ended.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub connections: u64,
    pub requests: u64,
    pub errors: u64,
}

struct StopState {
    stopped: AtomicBool,
    /// Wakes the wait for a connection.
    wake: EventFd,
    /// The connection being served, to shut.
    conn: Mutex<Option<ShutdownHandle>>,
}

/// Stops a running server from another thread. Cheap to clone.
#[derive(Clone)]
pub struct Stopper(Arc<StopState>);

impl Stopper {
    pub fn stop(&self) {
        self.0.stopped.store(true, Ordering::SeqCst);
        let _ = self.0.wake.write(1);
        if let Some(conn) = self.0.conn.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            conn.shutdown();
        }
    }

    fn stopped(&self) -> bool {
        self.0.stopped.load(Ordering::SeqCst)
    }
}

pub struct Server {
    device: Device,
    opts: Options,
    disk: DiskLimits,
    socket: PathBuf,
    listener: Listener,
    stop: Stopper,
}

impl Server {
    /// Checks the options and listens on `socket` (an old socket file
    /// there is replaced).
    pub fn new(device: Device, socket: &Path, opts: Options) -> Result<Self, Error> {
        if opts.queues == 0 || opts.queues > 64 {
            return Err(Error::BadOption(format!("queues={}: 1 to 64", opts.queues)));
        }
        if opts.depth == 0 || opts.depth > MAX_QUEUE_SIZE {
            return Err(Error::BadOption(format!("depth={}: 1 to {MAX_QUEUE_SIZE}", opts.depth)));
        }
        if device.limits().zoned.is_some() {
            return Err(Error::BadOption("zoned devices are not served over vhost-user-blk".into()));
        }
        if device.tag_set().submitter_reaps {
            check_reaping_clients(&device, opts.queues)?;
        }
        let disk = DiskLimits::new(device.limits(), opts.queues, MAX_QUEUE_SIZE, opts.read_only);
        let listener = mqblk::socket_mode::bind_with_mode(opts.socket_mode, || Ok(Listener::new(socket, true)))
            .map_err(|e| Error::BadOption(e.to_string()))?
            .map_err(|source| Error::Listen { path: socket.display().to_string(), source })?;
        let wake = EventFd::new(EFD_NONBLOCK).map_err(|source| Error::Io { what: "eventfd", source })?;
        let stop = Stopper(Arc::new(StopState { stopped: AtomicBool::new(false), wake, conn: Mutex::new(None) }));
        Ok(Self { device, opts, disk, socket: socket.to_path_buf(), listener, stop })
    }

    pub fn stopper(&self) -> Stopper {
        self.stop.clone()
    }

    /// The disk as the guest sees it.
    pub fn disk(&self) -> &DiskLimits {
        &self.disk
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Serves connections until stopped; then flushes the device.
    pub fn run(mut self) -> Result<Summary, Error> {
        let mut summary = Summary::default();
        while self.wait_for_connection()? {
            let stats = self.serve_connection()?;
            summary.connections += 1;
            summary.requests += stats.requests;
            summary.errors += stats.errors;
            log::info!(
                "connection ended: {} requests, {} failed; {} reads and writes lent in {} segments, {} copied",
                stats.requests,
                stats.errors,
                stats.lent,
                stats.lent_segments,
                stats.bounced
            );
        }
        if self.device.limits().write_cache {
            // What the guest flushed reached mqblk; make it reach the device.
            self.device.client().submit_and_wait(Bio::flush())?;
        }
        Ok(summary)
    }

    /// Waits until a connection is pending (true) or the server is stopped
    /// (false).
    fn wait_for_connection(&self) -> Result<bool, Error> {
        loop {
            if self.stop.stopped() {
                return Ok(false);
            }
            let mut fds = [
                libc::pollfd { fd: self.listener.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.stop.0.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            ];
            // SAFETY: two live pollfd structs, and their count.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(Error::Io { what: "poll", source: e });
            }
            if self.stop.stopped() {
                return Ok(false);
            }
            if fds[0].revents != 0 {
                return Ok(true);
            }
        }
    }

    /// Serves one connection to its end.
    fn serve_connection(&mut self) -> Result<QueueStats, Error> {
        // Two memories (memory.rs): the daemon maps each table into its
        // own; the queues read `served`, which takes a table once checked.
        let daemon_mem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
        let memory = Arc::new(MemoryWatch::new(GuestMemoryAtomic::new(GuestMemoryMmap::new())));
        let queues = (0..self.opts.queues)
            .map(|i| {
                // A request is one bio (queue.rs).
                let client = self.device.client_with_capacity(usize::from(self.opts.depth));
                VirtQueue::new(i, client, self.opts.depth, self.disk, &self.opts.serial)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let end = Arc::new(ConnectionEnd::default());
        let backend = Arc::new(BlkBackend::new(self.disk, MAX_QUEUE_SIZE, memory, queues, Arc::clone(&end)));
        let daemon_error = |e: vhost_user_backend::Error| Error::Daemon(e.to_string());
        let mut daemon =
            VhostUserDaemon::new("mqblk-vhost".into(), backend.clone(), daemon_mem).map_err(daemon_error)?;
        let event = completion_event(usize::from(self.opts.queues));
        for (handler, fd) in daemon.get_epoll_handlers().iter().zip(backend.completion_fds()) {
            handler
                .register_listener(fd, EventSet::IN, event)
                .map_err(|source| Error::Io { what: "registering a completion eventfd", source })?;
        }
        daemon.start(&mut self.listener).map_err(daemon_error)?;
        log::info!("guest connected");
        end.attach(daemon.shutdown_handle());
        *self.stop.0.conn.lock().unwrap_or_else(|e| e.into_inner()) = daemon.shutdown_handle();
        // A stop between the check in wait_for_connection and here.
        if self.stop.stopped() {
            daemon.request_shutdown();
        }
        let result = daemon.wait();
        *self.stop.0.conn.lock().unwrap_or_else(|e| e.into_inner()) = None;
        for handler in daemon.get_epoll_handlers() {
            handler.send_exit_event();
        }
        // Dropping the daemon joins its queue workers.
        drop(daemon);
        let stats = backend.finish();
        match result {
            Ok(()) => Ok(stats),
            // QEMU hanging up mid-message is a normal end too.
            Err(vhost_user_backend::Error::HandleRequest(
                vhost::vhost_user::Error::Disconnected | vhost::vhost_user::Error::PartialMessage,
            )) => Ok(stats),
            Err(e) => {
                log::warn!("connection ended with an error: {e}");
                Ok(stats)
            }
        }
    }
}

/// A device whose clients reap their own rings (file `reap=client`): each
/// virtqueue's client needs a ring of its own whose completions signal
/// the client's completion eventfd (`Client::standalone_completion_fd`,
/// the file driver's IORING_REGISTER_EVENTFD), so the queue's worker is
/// woken in its epoll and reaps with no completion thread between; a read
/// the kernel finishes inside the submission is reaped in the same pass.
/// Checked once here, so that no connection fails on it: `queues` clients
/// made one after another are spread over the rings as a connection's are.
fn check_reaping_clients(device: &Device, queues: u16) -> Result<(), Error> {
    let mut clients: Vec<Client> = (0..queues).map(|_| device.client()).collect();
    for client in &mut clients {
        if client.poll_fd().is_none() {
            return Err(Error::BadOption(
                "a device whose rings complete only when polled (IOPOLL) cannot wake a vhost queue".into(),
            ));
        }
        client.standalone_completion_fd().map_err(|e| {
            Error::BadOption(format!("{queues} queues whose clients reap need a ring each (file submit_queues): {e}"))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file device whose clients reap (reap=client) with `rings` rings,
    /// served on `queues` queues.
    fn serve_reaping(rings: u16, queues: u16) -> Result<Server, Error> {
        mqblk_file::register();
        let dir = std::env::temp_dir().join(format!("mqblk-vhost-server-{}-{rings}-{queues}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = format!("file:path={},create=1,size=1m,reap=client,submit_queues={rings}", dir.join("f").display());
        let device = Device::open(&spec).unwrap();
        Server::new(device, &dir.join("s"), Options { queues, ..Options::default() })
    }

    #[test]
    fn clients_that_reap_get_a_ring_each_or_the_server_says_so() {
        let server = serve_reaping(2, 2).expect("a ring per queue");
        let dir = server.socket().parent().unwrap().to_path_buf();
        drop(server);
        std::fs::remove_dir_all(dir).unwrap();

        let Err(Error::BadOption(e)) = serve_reaping(1, 2) else { panic!("two queues on one ring") };
        assert!(e.contains("submit_queues"), "{e}");
        let dir = std::env::temp_dir().join(format!("mqblk-vhost-server-{}-1-2", std::process::id()));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
