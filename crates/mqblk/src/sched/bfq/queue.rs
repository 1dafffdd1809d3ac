//! A bfq queue (one per client and direction: sync or async), its think
//! time, and a hardware queue's bfq state (busy queues, their virtual-time
//! schedule, the queue in service, the burst of new queues): what the
//! scheduler in mod.rs works on.
//!
//! Relies on: the request's I/O priority (request/) for weights, RqTable
//! (sched/) for queued requests.

use std::collections::{HashMap, VecDeque};

use super::super::RqTable;
use crate::request::{IoPrio, IoPrioClass};

/// Weight multiplier while raised (the kernel's bfq_wr_coeff).
pub(super) const WR_COEFF: u64 = 30;
/// Fixed-point shift of virtual times.
pub(super) const V_SHIFT: u32 = 20;
/// The kernel's bfq_timeout: the longest a queue keeps the device.
pub(super) const BUDGET_TIMEOUT_NS: u64 = 125_000_000;
/// `HctxState::idle_until_ns` while the in-service queue idles waiting for
/// its requests in flight to complete (the idle timer starts then).
pub(super) const IDLE_AFTER_COMPLETION: u64 = u64::MAX;
/// Sync queues that start within this of each other form a burst (the
/// kernel's bfq_burst_interval, 180 ms)...
pub(super) const BURST_INTERVAL_NS: u64 = 180_000_000;
/// ...and a burst this large is not interactive (bfq_large_burst_thresh).
pub(super) const LARGE_BURST: usize = 8;

pub(super) fn weight_of(ioprio: IoPrio) -> u64 {
    (8 - u64::from(ioprio.level.min(7))) * 10
}

pub(super) struct BfqQueue {
    pub(super) client_id: u32,
    pub(super) sync: bool,
    pub(super) class: IoPrioClass,
    pub(super) weight: u64,
    pub(super) fifo: VecDeque<u32>,
    pub(super) busy: bool,
    pub(super) ever_busy: bool,
    /// When it last became empty (ns).
    pub(super) idle_since_ns: u64,
    /// Raised until this time (0: not raised).
    pub(super) wr_until_ns: u64,
    pub(super) start: u64,
    pub(super) finish: u64,
    /// Total sectors dispatched (for the dump and the tests).
    pub(super) served_sectors: u64,
    /// Dispatched and not yet completed.
    pub(super) in_flight: u32,
    pub(super) ttime: ThinkTime,
    /// Started with many others at once (a large burst): not raised.
    pub(super) in_large_burst: bool,
}

/// A queue's think time: how long its owner takes, once all its I/O is
/// done, to issue the next (bfq_update_io_thinktime: a decaying average in
/// fixed point, each sample capped at 2 x slice_idle). Idling only pays for
/// a queue whose next request comes within the idle slice; a writer that
/// sleeps for tags between its writes would make the device idle for
/// nothing, slice after slice.
#[derive(Default)]
pub(super) struct ThinkTime {
    pub(super) samples: u64,
    pub(super) total: u64,
    pub(super) mean_ns: u64,
    /// When its last request completed (0: never).
    pub(super) last_end_ns: u64,
}

impl ThinkTime {
    pub(super) fn sample(&mut self, elapsed_ns: u64) {
        self.samples = (7 * self.samples + 256) / 8;
        self.total = (7 * self.total + 256 * elapsed_ns) / 8;
        self.mean_ns = (self.total + 128) / self.samples;
    }

    /// The kernel's bfq_sample_valid: a few samples in, the mean counts.
    pub(super) fn short(&self, slice_idle_ns: u64) -> bool {
        self.samples <= 80 || self.mean_ns <= slice_idle_ns
    }
}

impl BfqQueue {
    pub(super) fn raised(&self) -> bool {
        self.wr_until_ns != 0
    }

    pub(super) fn eff_weight(&self) -> u64 {
        if self.raised() {
            self.weight * WR_COEFF
        } else {
            self.weight
        }
    }
}

pub(super) struct HctxState {
    pub(super) queues: Vec<BfqQueue>,
    pub(super) by_owner: HashMap<(u32, bool), usize>,
    pub(super) rqs: RqTable,
    pub(super) vtime: u64,
    pub(super) busy_weight: u64,
    pub(super) in_service: Option<usize>,
    pub(super) budget_left: i64,
    pub(super) service_start_ns: u64,
    /// The empty in-service queue keeps the device until then (0: not
    /// idling; `IDLE_AFTER_COMPLETION`: until its requests complete, then
    /// for slice_idle).
    pub(super) idle_until_ns: u64,
    /// Idle slices that ended without the queue's next request (the timer
    /// fired): for the dump and the tests.
    pub(super) idle_expired: u64,
    pub(super) burst: Burst,
}

/// Sync queues that became busy for the first time close together (the
/// kernel's burst list, bfq_handle_burst): the many threads of one job
/// starting at once (a parallel build, a storm of writers) are not an
/// interactive application starting, so a large burst is not weight-raised,
/// and the application that starts later still gets the device first.
#[derive(Default)]
pub(super) struct Burst {
    pub(super) last_ns: u64,
    pub(super) members: Vec<usize>,
    pub(super) large: bool,
}
