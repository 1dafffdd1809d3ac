//! The queue's worker thread ("kblockd"): delayed runs of a dispatch list
//! when nothing in flight would restart it (after 3 ms, like the kernel's
//! delayed run), and request timeout scans every tick (timeout.rs). The
//! thread holds only a weak reference to the queue, so it never keeps a
//! queue alive; the queue stops and joins it when it drops.
//!
//! Relies on: the queue (mod.rs); hctx/ for the dispatch list;
//! timeout.rs for the clock and the scan; sync.rs for the Parker.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::Error;
use crate::sync::{AtomicBool, Ordering, Parker};

use super::RequestQueue;

/// The worker's shared state ("kblockd").
struct WorkerShared {
    stop: AtomicBool,
    parker: Parker,
}

pub(super) struct Worker {
    shared: Arc<WorkerShared>,
    thread: Option<JoinHandle<()>>,
}

impl RequestQueue {
    pub(super) fn start_worker(self: &Arc<Self>) -> Result<(), Error> {
        let shared = Arc::new(WorkerShared { stop: AtomicBool::new(false), parker: Parker::new() });
        let weak = Arc::downgrade(self);
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("mqblk-kblockd".into())
            .spawn(move || worker_loop(weak, thread_shared))
            .map_err(|e| Error::Setup(format!("cannot start the queue worker thread: {e}")))?;
        *self.worker.lock() = Some(Worker { shared, thread: Some(thread) });
        Ok(())
    }

    /// Runs delayed dispatches and scans for timed-out requests.
    fn worker_tick(&self) {
        let now = self.clock.advance();
        for hctx in self.hctxs.iter() {
            if hctx.need_delayed_run.swap(false, Ordering::AcqRel) {
                hctx.run_dispatch_list();
            }
        }
        if self.clock.enabled() {
            for hctx in self.hctxs.iter() {
                self.clock.scan(hctx, &*self.driver, now, &self.timeouts);
            }
        }
    }

    /// Stops the worker and joins it, unless this is the worker itself
    /// (it dropped the last reference to the queue).
    pub(super) fn stop_worker(&self) {
        if let Some(mut worker) = self.worker.lock().take() {
            worker.shared.stop.store(true, Ordering::Release);
            worker.shared.parker.unpark();
            if let Some(thread) = worker.thread.take() {
                if thread.thread().id() != std::thread::current().id() {
                    let _ = thread.join();
                }
            }
        }
    }
}

fn worker_loop(weak: std::sync::Weak<RequestQueue>, shared: Arc<WorkerShared>) {
    let mut tick = Duration::from_millis(10);
    loop {
        shared.parker.park(Some(tick));
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let Some(q) = weak.upgrade() else { return };
        q.worker_tick();
        // A dispatch list with nothing in flight is retried after 3 ms, like
        // the kernel's delayed run; otherwise sleep a whole tick.
        let delayed = q.hctxs.iter().any(|h| h.need_delayed_run.load(Ordering::Relaxed));
        tick = if delayed { Duration::from_millis(3) } else { q.clock.tick };
        // If this was the last reference the queue drops here, on this
        // thread; Drop knows not to join itself.
        drop(q);
    }
}
