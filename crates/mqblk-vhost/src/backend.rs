//! The vhost-user backend of one connection: what vhost-user-backend's
//! daemon asks of a device (features, configuration space, queues) and the
//! events it hands over (kicks, completions), each passed to the queue's
//! `VirtQueue`.
//!
//! One worker thread per virtqueue (`queues_per_thread`: one bit each), so
//! a queue's `Client` is only ever used from its own thread, except while
//! the frontend stops the ring (GET_VRING_BASE runs `stop_vring` on the
//! connection's thread). The `Mutex` around each queue is therefore
//! uncontended in steady state; it makes the stop safe.
//!
//! Events of a worker's epoll (vhost-user-backend numbers them per thread):
//! 0 is the thread's one vring's kick, `num_queues` the library's own exit
//! and enable events, and `num_queues + 1` the queue client's completion
//! eventfd, registered by the server (`COMPLETION_EVENT`).
//!
//! A queue that stops (an error of its `run`) says why in the log at
//! once. A broken ring stops that queue only, and its error eventfd
//! (SET_VRING_ERR) tells the frontend; a guest memory access that faulted
//! (the frontend's memory file shrank: memory.rs) ends the connection,
//! since none of that memory can be trusted any more.
//!
//! Relies on: queue.rs, memory.rs, vring.rs, config.rs;
//! vhost-user-backend (the trait, the connection's `ShutdownHandle`),
//! vmm-sys-util (eventfds).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};

use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost_user_backend::{ShutdownHandle, VhostUserBackend};
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier};

use crate::config::{DiskLimits, CONFIG_BYTES};
use crate::memory::MemoryWatch;
use crate::queue::{Mem, QueueStats, VirtQueue, Vring};

/// The epoll event number of a queue's completion eventfd, in its
/// worker's epoll: the first one vhost-user-backend leaves to backends.
pub fn completion_event(num_queues: usize) -> u64 {
    num_queues as u64 + 1
}

/// Ends the connection from a queue's worker: holds the connection's
/// shutdown handle once the server has it, and remembers an end asked
/// before that.
#[derive(Default)]
pub struct ConnectionEnd(Mutex<(Option<ShutdownHandle>, bool)>);

impl ConnectionEnd {
    /// The connection's handle, once accepted; ends it now if asked to
    /// before.
    pub fn attach(&self, handle: Option<ShutdownHandle>) {
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        state.0 = handle;
        if let (Some(handle), true) = &*state {
            handle.shutdown();
        }
    }

    /// Ends the connection (the server then waits for the next).
    pub fn end(&self) {
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        state.1 = true;
        if let Some(handle) = &state.0 {
            handle.shutdown();
        }
    }
}

pub struct BlkBackend {
    disk: DiskLimits,
    config: [u8; CONFIG_BYTES],
    queue_size: u16,
    /// The guest memory the queues read, checked and guarded.
    memory: Arc<MemoryWatch>,
    queues: Vec<Mutex<VirtQueue>>,
    end: Arc<ConnectionEnd>,
    /// The exit events' consumer ends handed to vhost-user-backend, closed
    /// when the backend drops (`Drop`).
    exit_consumers: Mutex<Vec<RawFd>>,
}

impl BlkBackend {
    /// The backend of one connection: `queues` watch `memory`'s faults.
    pub fn new(
        disk: DiskLimits,
        queue_size: u16,
        memory: Arc<MemoryWatch>,
        queues: Vec<VirtQueue>,
        end: Arc<ConnectionEnd>,
    ) -> Self {
        assert_eq!(queues.len(), usize::from(disk.num_queues), "one VirtQueue per virtqueue");
        let queues = queues
            .into_iter()
            .map(|mut q| {
                q.watch_memory_faults(Arc::clone(memory.faulted()));
                Mutex::new(q)
            })
            .collect();
        Self {
            config: disk.config_space(),
            disk,
            queue_size,
            memory,
            queues,
            end,
            exit_consumers: Mutex::new(Vec::new()),
        }
    }

    /// A queue stopped with `error`: logged, and the frontend told (the
    /// ring's error eventfd), or the connection ended if guest memory
    /// faulted.
    fn stopped(&self, index: usize, vring: Option<&Vring>, error: &io::Error) {
        log::error!("queue {index} stopped: {error}");
        if self.memory.has_faulted() {
            self.end.end();
        } else if let Some(Err(e)) = vring.map(Vring::signal_error) {
            log::warn!("queue {index}: the ring's error eventfd: {e}");
        }
    }

    /// Each queue's completion eventfd, in queue order.
    pub fn completion_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.queues.iter().map(|q| lock(q).completion_fd()).collect()
    }

    /// After the connection (its workers joined): drops every answer
    /// still in flight and sums the queues' counts. Nothing touches the
    /// guest's memory after that, so its guards are released.
    pub fn finish(&self) -> QueueStats {
        let mut total = QueueStats::default();
        for q in &self.queues {
            let mut q = lock(q);
            q.abandon_in_flight();
            total.add(&q.stats());
        }
        self.memory.release();
        total
    }
}

/// vhost-user-backend 0.24 registers each worker's exit-event consumer in
/// the worker's epoll with `into_raw_fd` and never closes it
/// (VringEpollHandler::new in its event_loop.rs): one eventfd per
/// virtqueue per connection stayed open for the life of the server
/// (scripts/soak.sh found it). Every holder of this backend (the daemon's
/// handler, each worker's epoll handler) is gone when it drops, workers
/// joined and their epolls closed, so nothing refers to those fds any more:
/// the backend closes them. Cargo.toml pins the crate's version, as a
/// release that closed them itself would make this a double close.
impl Drop for BlkBackend {
    fn drop(&mut self) {
        for fd in self.exit_consumers.get_mut().unwrap_or_else(|e| e.into_inner()).drain(..) {
            // Its one owner (the library's epoll handler, via into_raw_fd)
            // is gone with this backend's last holder and never closed it.
            // SAFETY: the consumer end made in `exit_event`; no other code
            // knows the number, so this is its only close.
            unsafe { libc::close(fd) };
        }
    }
}

/// A queue's lock; a worker that panicked holding it leaves a queue whose
/// state is still consistent between requests, so poisoning is ignored.
fn lock(q: &Mutex<VirtQueue>) -> std::sync::MutexGuard<'_, VirtQueue> {
    q.lock().unwrap_or_else(|e| e.into_inner())
}

impl VhostUserBackend for BlkBackend {
    type Bitmap = ();
    type Vring = Vring;

    fn num_queues(&self) -> usize {
        self.queues.len()
    }

    fn max_queue_size(&self) -> usize {
        usize::from(self.queue_size)
    }

    fn features(&self) -> u64 {
        self.disk.features()
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
    }

    fn set_event_idx(&self, _enabled: bool) {
        // The daemon sets it on each vring's queue, whose
        // needs_notification and enable_notification then follow it.
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        let mut out = vec![0u8; size as usize];
        let start = (offset as usize).min(CONFIG_BYTES);
        let end = (offset as usize).saturating_add(size as usize).min(CONFIG_BYTES);
        out[..end - start].copy_from_slice(&self.config[start..end]);
        out
    }

    fn set_config(&self, _offset: u32, _buf: &[u8]) -> io::Result<()> {
        // The writeback field is the only writable one (CONFIG_WCE), which
        // is not offered.
        Ok(())
    }

    fn update_memory(&self, mem: GuestMemoryAtomic<Mem>) -> io::Result<()> {
        // `mem` is the daemon's, the new table already in it: checked
        // before the queues' memory takes it (memory.rs).
        self.memory.update(&mem).map_err(|e| {
            log::error!("memory table refused: {e}");
            io::Error::new(io::ErrorKind::InvalidInput, e)
        })
    }

    fn queues_per_thread(&self) -> Vec<u64> {
        (0..self.queues.len()).map(|i| 1u64 << i).collect()
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        let (consumer, notifier) = new_event_consumer_and_notifier(EventFlag::NONBLOCK | EventFlag::CLOEXEC).ok()?;
        self.exit_consumers.lock().unwrap_or_else(|e| e.into_inner()).push(consumer.as_raw_fd());
        Some((consumer, notifier))
    }

    fn stop_vring(&self, queue_index: u32) -> io::Result<()> {
        let q = self.queues.get(queue_index as usize).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let result = lock(q).finish_in_flight(&self.memory.served().memory());
        result.inspect_err(|e| self.stopped(queue_index as usize, None, e))
    }

    fn handle_event(&self, device_event: u16, evset: EventSet, vrings: &[Vring], thread_id: usize) -> io::Result<()> {
        if evset != EventSet::IN {
            return Err(io::Error::other(format!("queue {thread_id}: unexpected events {evset:?}")));
        }
        let (Some(q), [vring]) = (self.queues.get(thread_id), vrings) else {
            return Err(io::Error::other(format!("queue {thread_id}: not one vring per worker")));
        };
        let mut q = lock(q);
        if u64::from(device_event) == completion_event(self.queues.len()) {
            q.drain_eventfd();
        } else if device_event != 0 {
            return Err(io::Error::other(format!("queue {thread_id}: unknown event {device_event}")));
        }
        // An error ends this queue's worker (vhost-user-backend stops its
        // thread): say so now, not at the connection's end. The snapshot's
        // Arc goes to the requests whose bios borrow guest memory.
        let result = q.run(vring, &self.memory.served().memory().into_inner());
        drop(q);
        result.inspect_err(|e| self.stopped(thread_id, Some(vring), e))
    }
}
