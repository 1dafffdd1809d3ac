//! The queue's worker thread ("kblockd"): delayed runs of hardware queues
//! at the time they fall due (a dispatch list with nothing in flight after
//! the kernel's 3 ms, a scheduler's own timer such as bfq's idle slice),
//! and request timeout scans every tick (timeout.rs). It sleeps until the
//! earliest of those; a hardware queue whose delayed run moves earlier
//! wakes it (`Kblockd::kick`). With no timeout configured and no delayed
//! run pending it sleeps until woken. The thread holds only a weak
//! reference to the queue, so it never keeps a queue alive; the queue
//! stops and joins it when it drops.
//!
//! Relies on: the queue (mod.rs); hctx/ for the dispatch list and its due
//! time; timeout.rs for the clock and the scan; sync.rs for the Parker.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::Error;
use crate::hctx::NO_DELAYED_RUN;
use crate::sync::Ordering;

use super::RequestQueue;
pub(crate) use crate::hctx::Kblockd;

pub(super) struct Worker {
    thread: Option<JoinHandle<()>>,
}

impl RequestQueue {
    pub(super) fn start_worker(self: &Arc<Self>) -> Result<(), Error> {
        let weak = Arc::downgrade(self);
        let kblockd = self.kblockd.clone();
        let thread = std::thread::Builder::new()
            .name("mqblk-kblockd".into())
            .spawn(move || worker_loop(weak, kblockd))
            .map_err(|e| Error::Setup(format!("cannot start the queue worker thread: {e}")))?;
        *self.worker.lock() = Some(Worker { thread: Some(thread) });
        Ok(())
    }

    /// Runs the delayed runs that are due and, on a timeout tick, scans for
    /// timed-out requests. Returns how long the worker may sleep.
    fn worker_run(&self, next_tick_ns: &mut u64) -> Option<Duration> {
        let now = crate::clock::now_ns();
        let mut next = NO_DELAYED_RUN;
        for hctx in self.hctxs.iter() {
            next = next.min(hctx.run_delayed(now));
        }
        if self.clock.enabled() {
            if now >= *next_tick_ns {
                let ticks = self.clock.advance();
                for hctx in self.hctxs.iter() {
                    self.clock.scan(hctx, &*self.driver, ticks, &self.timeouts);
                }
                *next_tick_ns = now + self.clock.tick.as_nanos() as u64;
            }
            next = next.min(*next_tick_ns);
        }
        (next != NO_DELAYED_RUN).then(|| Duration::from_nanos(next.saturating_sub(crate::clock::now_ns())))
    }

    /// Stops the worker and joins it, unless this is the worker itself
    /// (it dropped the last reference to the queue).
    pub(super) fn stop_worker(&self) {
        if let Some(mut worker) = self.worker.lock().take() {
            self.kblockd.stop.store(true, Ordering::Release);
            self.kblockd.kick();
            if let Some(thread) = worker.thread.take() {
                if thread.thread().id() != std::thread::current().id() {
                    let _ = thread.join();
                }
            }
        }
    }
}

fn worker_loop(weak: std::sync::Weak<RequestQueue>, kblockd: Arc<Kblockd>) {
    // Nothing is due at start: the first timeout tick, if any.
    let mut next_tick_ns = 0;
    let mut sleep = match weak.upgrade() {
        Some(q) => q.clock.enabled().then_some(q.clock.tick),
        None => return,
    };
    loop {
        if sleep != Some(Duration::ZERO) {
            kblockd.parker.park(sleep);
        }
        if kblockd.stop.load(Ordering::Acquire) {
            return;
        }
        let Some(q) = weak.upgrade() else { return };
        sleep = q.worker_run(&mut next_tick_ns);
        // If this was the last reference the queue drops here, on this
        // thread; Drop knows not to join itself.
        drop(q);
    }
}
