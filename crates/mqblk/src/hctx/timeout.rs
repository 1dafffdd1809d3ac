//! Request timeouts (block/blk-timeout.c and `blk_mq_timeout_work`).
//!
//! Time is kept in coarse ticks (the kernel's jiffies) so that arming a
//! request's timer costs a load and a store, no clock read. A request's
//! deadline is armed when the block layer hands it to the driver (the
//! kernel's `blk_mq_start_request`), so a request waiting in a plug or in
//! a scheduler never times out. The queue's worker advances the ticks and
//! scans every slot; an expired request is held (request/mod.rs: `HELD`, the
//! kernel's reference in `blk_mq_check_expired`) while the driver's
//! `timeout` handler runs with its driver tag, so that tag cannot name a
//! newer request before the handler returns.
//!
//! Relies on: request/ for the slot's deadline, driver tag and hold;
//! hctx/end.rs to free a request that completed while held.

use std::time::{Duration, Instant};

use super::HwCtx;
use crate::driver::{Driver, TimedOutRq, TimeoutAction};
use crate::request::RequestSlot;
use crate::sync::{AtomicU64, Ordering};
use crate::tag::Tags;

/// The queue's timeout clock, shared by its hctxs.
#[derive(Debug)]
pub(crate) struct TimeoutClock {
    start: Instant,
    /// How often the worker ticks when it has nothing else to do.
    pub(crate) tick: Duration,
    ticks: AtomicU64,
    /// Ticks a request may be with the driver; 0: no timeouts.
    timeout_ticks: u64,
}

impl TimeoutClock {
    pub(crate) fn new(rq_timeout: Option<Duration>) -> Self {
        let (tick, timeout_ticks) = match rq_timeout {
            // Tick at an eighth of the timeout (10 ms .. 1 s): a timeout fires
            // at most one tick late, as with the kernel's jiffies rounding.
            Some(t) if !t.is_zero() => {
                let tick = (t / 8).clamp(Duration::from_millis(10), Duration::from_secs(1));
                (tick, (t.as_nanos() / tick.as_nanos()).max(1) as u64)
            }
            _ => (Duration::from_secs(1), 0),
        };
        Self { start: Instant::now(), tick, ticks: AtomicU64::new(1), timeout_ticks }
    }

    /// Whether requests time out at all.
    pub(crate) fn enabled(&self) -> bool {
        self.timeout_ticks != 0
    }

    /// The tick at which a request handed to the driver now times out
    /// (0: never).
    #[inline(always)]
    pub(crate) fn deadline(&self) -> u64 {
        if self.timeout_ticks == 0 {
            return 0;
        }
        self.ticks.load(Ordering::Relaxed) + self.timeout_ticks
    }

    /// Advances the clock to now; returns the current tick.
    pub(crate) fn advance(&self) -> u64 {
        let ticks = (self.start.elapsed().as_nanos() / self.tick.as_nanos()) as u64 + 1;
        self.ticks.store(ticks, Ordering::Relaxed);
        ticks
    }

    /// Calls the driver's timeout handler on every request of `hctx` whose
    /// deadline passed by tick `now`, counting each in `timeouts` before its
    /// handler runs (the handler may complete it, and its client may look).
    pub(crate) fn scan(&self, hctx: &HwCtx, driver: &dyn Driver, now: u64, timeouts: &AtomicU64) {
        // Reserved requests keep driver tags even under a scheduler.
        self.scan_pool(hctx, &hctx.tags, driver, now, timeouts);
        if let Some(s) = hctx.sched() {
            self.scan_pool(hctx, &s.tags, driver, now, timeouts);
        }
    }

    fn scan_pool(&self, hctx: &HwCtx, pool: &Tags, driver: &dyn Driver, now: u64, timeouts: &AtomicU64) {
        for tag in 0..pool.nr_tags() {
            let slot = pool.pool.slot(tag);
            if is_expired(slot.deadline.load(Ordering::Acquire), now) {
                self.time_out(hctx, slot, driver, now, timeouts);
            }
        }
    }

    /// Holds `slot`'s request and runs the driver's handler, unless the
    /// request completed (and perhaps was reused) before it could be held.
    fn time_out(&self, hctx: &HwCtx, slot: &RequestSlot, driver: &dyn Driver, now: u64, timeouts: &AtomicU64) {
        if !slot.try_hold() {
            return;
        }
        // Held, the slot cannot be reused; re-read: the request we saw may
        // have completed and a newer one (not yet expired) taken its slot.
        let deadline = slot.deadline.load(Ordering::Acquire);
        if !is_expired(deadline, now) {
            hctx.end_timeout_hold(slot);
            return;
        }
        timeouts.fetch_add(1, Ordering::Relaxed);
        let rq = TimedOutRq { hctx_index: hctx.index(), tag: slot.driver_tag.load(Ordering::Relaxed) };
        let next = match driver.timeout(&hctx.hw, rq) {
            TimeoutAction::ResetTimer => now + self.timeout_ticks,
            TimeoutAction::Done => 0,
        };
        // A request the handler completed has a deadline of 0 already.
        let _ = slot.deadline.compare_exchange(deadline, next, Ordering::AcqRel, Ordering::Relaxed);
        hctx.end_timeout_hold(slot);
    }
}

fn is_expired(deadline: u64, now: u64) -> bool {
    deadline != 0 && deadline <= now
}
