//! Installing a scheduler, and switching it on a live queue (writing
//! queue/scheduler; the kernel's elevator_switch under
//! blk_mq_freeze_queue). The switch freezes the queue: each client
//! announces a submission with a SeqCst store, the freezer sets `frozen`
//! with SeqCst and then reads the announcements (a Dekker pair, sync.rs's
//! `door`); it waits until no submission is in progress and every tag is
//! free, takes back tags a handoff granted in advance, installs the new
//! contexts and thaws. Old contexts stay allocated until the queue drops,
//! so a pointer an hctx held can never dangle.
//!
//! Relies on: the queue (mod.rs); sched/ for building the elevator and its
//! contexts; tag.rs for scheduler tags; sync.rs for the door.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::sched::{Sched, SchedCtx};
use crate::sync::Ordering;
use crate::tag::{TagSetConfig, Tags};

use super::RequestQueue;

impl RequestQueue {
    /// Builds scheduler `name` and points every hctx at it. Only at
    /// creation or while frozen (`set_scheduler`).
    pub(super) fn install_scheduler(&self, sched: &Sched, nr_requests: Option<u32>) -> Result<(), Error> {
        self.check_zoned_sched(sched)?;
        let nr_requests = nr_requests.unwrap_or_else(|| crate::sched::default_nr_requests(self.tag_set.queue_depth));
        let elevator: Option<Arc<dyn crate::sched::Elevator>> =
            sched.build(self.hctxs.len(), nr_requests)?.map(Arc::from);
        if let Some(e) = &elevator {
            e.depth_updated(nr_requests);
        }
        let mut contexts = self.sched_contexts.lock();
        for hctx in self.hctxs.iter() {
            let ptr = match &elevator {
                None => std::ptr::null_mut(),
                Some(e) => {
                    let policy = self.wake.policy().expect("built at creation");
                    let config = TagSetConfig::new(self.hctxs.len(), nr_requests);
                    let tags = Tags::with_min_shallow(&config, policy, e.min_shallow_depth());
                    tags.pool.bind(hctx.erased(), hctx.index() as u32, self.limits.seg_limits());
                    let name = sched.name().to_string();
                    let ctx = Arc::new(SchedCtx { name, elevator: e.clone(), tags, queued: Default::default() });
                    let ptr = Arc::as_ptr(&ctx).cast_mut();
                    contexts.push(ctx);
                    ptr
                }
            };
            hctx.sched.store(ptr, Ordering::Release);
        }
        *self.sched_name.lock() = sched.name().to_string();
        self.nr_requests.store(if elevator.is_some() { nr_requests } else { 0 }, Ordering::Relaxed);
        Ok(())
    }

    /// The kernel's ELEVATOR_F_ZBD_SEQ_WRITE: only schedulers known to keep
    /// a zone's writes in order may run on a zoned device.
    fn check_zoned_sched(&self, sched: &Sched) -> Result<(), Error> {
        if self.limits.zoned.is_none() || matches!(sched, Sched::None | Sched::MqDeadline(_)) {
            return Ok(());
        }
        Err(Error::Setup(format!(
            "sched={} may reorder writes within a zone: a zoned device accepts none or mq-deadline",
            sched.name()
        )))
    }

    /// Switches the scheduler of a live queue (writing queue/scheduler):
    /// freezes submissions, waits until every request has completed, swaps,
    /// and lets submissions in again. Nothing is lost; a request held in a
    /// thread's plug for more than `drain_timeout` makes it fail instead.
    pub(crate) fn set_scheduler(&self, sched: &Sched, drain_timeout: Duration) -> Result<(), Error> {
        // Build first: a bad tunable fails before anything stops.
        self.check_zoned_sched(sched)?;
        let nr_requests =
            self.nr_requests_config.unwrap_or_else(|| crate::sched::default_nr_requests(self.tag_set.queue_depth));
        sched.build(self.hctxs.len(), nr_requests)?;
        let _one_switch = self.switch_lock.lock();
        crate::sync::door::close(&self.frozen);
        let drained = self.wait_drained(drain_timeout);
        let result = match drained {
            // The configured nr_requests stays (the kernel resets it to the
            // default on a switch, and a write to queue/nr_requests sets it
            // again: mqblk has no such write, so it keeps the device's).
            Ok(()) => self.install_scheduler(sched, self.nr_requests_config),
            Err(e) => Err(e),
        };
        crate::sync::door::open(&self.frozen);
        result
    }

    /// Gives back tags a handoff granted to clients in advance (frozen and
    /// with no one inside, no client can be using them).
    fn release_all_grants(&self) {
        for sink in self.all_clients.lock().iter() {
            let Some(waiter) = sink.waiter.lock().clone() else { continue };
            for hctx in self.hctxs.iter() {
                hctx.tags.bitmap_tags.release_granted(&waiter);
                if let Some(s) = hctx.sched() {
                    s.tags.bitmap_tags.release_granted(&waiter);
                }
            }
        }
    }

    /// Waits until no client is inside a submission and no request holds a
    /// tag (frozen: none can start).
    fn wait_drained(&self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let entered = self.all_clients.lock().iter().any(|c| crate::sync::door::is_inside(&c.counters.entered));
            if !entered {
                self.release_all_grants();
            }
            let busy: u32 =
                self.hctxs.iter().map(|h| h.tags.busy() + h.pool().busy() * u32::from(h.sched().is_some())).sum();
            if !entered && busy == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Setup(format!(
                    "scheduler switch: the queue did not drain in {timeout:?} ({busy} tags still held: requests kept in a thread's plug?)"
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
