//! null_blk in user space: a device that stores nothing (or, with
//! `memory_backed=1`, sparse pages in memory) and completes requests inline,
//! on a completion thread, or after a timer, with the kernel module's
//! parameter names, defaults and meanings (the table of keys is in
//! config.rs, with `NullConfig` and the spec parsing).
//!
//! Relies on: the Driver trait, config.rs for the parameters, irq.rs for
//! completion threads, hybrid.rs for queues shared by polled and
//! interrupt-style requests, mem.rs for memory backing, service.rs for the
//! service models, zoned.rs for zones.

mod config;
pub(crate) mod hybrid;
mod irq;
mod mem;
mod service;
pub mod zoned;

use std::collections::VecDeque;
use std::fmt::Write as _;

use crate::clock::{now_ns, wait_until};
use crate::config::SpecParams;
use crate::driver::{Driver, QueueRqResult};
use crate::hctx::Hctx;
use crate::queue::QueueLimits;
use crate::request::{Op, ReqFlags, Rq};
use crate::status::Status;
use crate::sync::{AtomicU64, Mutex, Ordering};
use crate::tag::TagSetConfig;

pub use config::{IrqMode, NullConfig, PollMode};
use hybrid::HybridQueue;
use irq::{IrqQueue, Pending, SPIN_NS};
use mem::MemStore;
use service::{Channels, Rotational};
use zoned::NullZoned;

/// A device-wide bandwidth limit (`mbps`): transfers are laid end to end on
/// one timeline; a request completes when its transfer would have finished.
struct Throttle {
    bytes_per_sec: u64,
    next_free_ns: AtomicU64,
}

impl Throttle {
    /// Reserves the transfer of `bytes` starting no earlier than `now`;
    /// returns when it finishes.
    fn reserve(&self, now: u64, bytes: u64) -> u64 {
        let xfer_ns = (u128::from(bytes) * 1_000_000_000 / u128::from(self.bytes_per_sec)) as u64;
        let mut cur = self.next_free_ns.load(Ordering::Relaxed);
        loop {
            let done = cur.max(now) + xfer_ns;
            match self.next_free_ns.compare_exchange_weak(cur, done, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return done,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// `null:` specs (registered in `driver::BUILTIN`).
pub(crate) fn open(p: &SpecParams) -> Result<Box<dyn Driver>, crate::error::Error> {
    Ok(Box::new(NullDriver::from_params(p)?))
}

/// The null block device driver.
pub struct NullDriver {
    cfg: NullConfig,
    mem: Option<MemStore>,
    throttle: Option<Throttle>,
    rotational: Option<Rotational>,
    channels: Option<Channels>,
    /// One completion thread per submit queue (irqmode=1/2, or a service
    /// model); stopped in place at shutdown, never removed.
    irq: Box<[IrqQueue]>,
    /// poll_mode=hybrid: the submit queues' shared completion sides (in
    /// place of `irq`).
    hybrid: Box<[HybridQueue]>,
    /// Requests of the poll queues, in submission order, until a poll
    /// finds them due.
    poll_lists: Box<[Mutex<VecDeque<Pending>>]>,
    /// `zoned=1`: the zones.
    zoned: Option<NullZoned>,
    /// Nothing to model, store or defer: a request on a submit queue
    /// completes at once with Ok (the default device's whole job, so it
    /// skips the feature checks one by one).
    plain_inline: bool,
}

impl NullDriver {
    /// A null device; `cfg` is checked first (`NullConfig::validate`).
    pub fn new(cfg: NullConfig) -> Result<Self, crate::error::Error> {
        let cfg = cfg.validate()?;
        let mut irq = Vec::new();
        let mut hybrid = Vec::new();
        let modelled = cfg.mbps > 0 || cfg.rotational || cfg.channels > 0;
        if cfg.irqmode != IrqMode::None || modelled {
            for i in 0..cfg.submit_queues {
                // Timer mode stays awake briefly when idle, for precision.
                let idle_spin = cfg.irqmode == IrqMode::Timer;
                let depth = cfg.hw_queue_depth as usize;
                let cpu = (!cfg.irq_cpus.is_empty()).then(|| cfg.irq_cpus[i % cfg.irq_cpus.len()]);
                let thread_err = |e| {
                    let on = cpu.map_or(String::new(), |c| format!(" on CPU {c} (irq_cpus)"));
                    crate::error::Error::Setup(format!(
                        "null: cannot start the completion thread of queue {i}{on}: {e}"
                    ))
                };
                match cfg.poll_mode {
                    PollMode::Queues => irq.push(IrqQueue::start(i, depth, idle_spin, cpu).map_err(thread_err)?),
                    PollMode::Hybrid => hybrid.push(HybridQueue::start(i, depth, idle_spin, cpu).map_err(thread_err)?),
                }
            }
        }
        let zoned = match &cfg.zoned {
            Some(z) => Some(
                NullZoned::new(z, cfg.size_bytes, cfg.bs, cfg.memory_backed)
                    .map_err(|e| crate::error::Error::Setup(format!("null: {e}")))?,
            ),
            None => None,
        };
        let plain_inline = irq.is_empty() && hybrid.is_empty() && !modelled && zoned.is_none() && !cfg.memory_backed;
        Ok(Self {
            mem: cfg.memory_backed.then(|| MemStore::new(cfg.size_bytes)),
            // Rotational media transfer at mbps within their own timeline.
            throttle: (cfg.mbps > 0 && !cfg.rotational && cfg.channels == 0)
                .then(|| Throttle { bytes_per_sec: cfg.mbps << 20, next_free_ns: AtomicU64::new(0) }),
            rotational: cfg
                .rotational
                .then(|| Rotational::new(cfg.seek_nsec, cfg.completion_nsec, cfg.size_bytes, cfg.mbps)),
            channels: (cfg.channels > 0).then(|| Channels::new(cfg.channels, cfg.completion_nsec, cfg.mbps)),
            poll_lists: (0..cfg.poll_queues)
                .map(|_| Mutex::new(VecDeque::with_capacity(cfg.hw_queue_depth as usize)))
                .collect(),
            cfg,
            plain_inline,
            irq: irq.into_boxed_slice(),
            hybrid: hybrid.into_boxed_slice(),
            zoned,
        })
    }

    pub fn from_params(p: &SpecParams) -> Result<Self, crate::error::Error> {
        Self::new(NullConfig::from_params(p)?)
    }

    /// Moves the data (memory backing) and decides the status.
    #[inline]
    fn handle(&self, rq: &mut Rq) -> Status {
        if let Some(z) = &self.zoned {
            return z.process(rq, self.mem.as_ref());
        }
        let Some(mem) = &self.mem else { return Status::Ok };
        let pos = rq.pos_bytes();
        match rq.op() {
            Op::Read => rq.for_each_segment_mut(|pos, seg| mem.read(pos, seg)),
            Op::Write => rq.for_each_segment(|pos, seg| mem.write(pos, seg)),
            Op::Discard | Op::WriteZeroes => mem.zero(pos, rq.len_bytes()),
            Op::Flush => {}
            // Zone ops reach only zoned devices (check_bio).
            _ => return Status::NotSupp,
        }
        Status::Ok
    }

    /// When the request is due (0: now): the service model's answer, else
    /// the timer's, then the bandwidth limit.
    #[inline]
    fn due_ns(&self, rq: &Rq) -> u64 {
        let modelled = self.rotational.is_some() || self.channels.is_some();
        let mut due = if let Some(r) = &self.rotational {
            r.reserve(now_ns(), rq.pos_bytes(), rq.len_bytes())
        } else if let Some(c) = &self.channels {
            c.reserve(now_ns(), rq.len_bytes())
        } else if self.cfg.irqmode == IrqMode::Timer {
            irq::timer_due(self.cfg.completion_nsec)
        } else {
            0
        };
        if let Some(t) = &self.throttle {
            if rq.op().has_data() {
                due = due.max(t.reserve(now_ns(), rq.len_bytes()));
            }
        }
        debug_assert!(due > 0 || !modelled);
        due
    }
}

impl Driver for NullDriver {
    fn name(&self) -> &str {
        "null"
    }

    fn tag_set(&self) -> TagSetConfig {
        let mut t = TagSetConfig::new(self.cfg.submit_queues + self.cfg.poll_queues, self.cfg.hw_queue_depth);
        t.poll_queues = self.cfg.poll_queues;
        t.shared_poll = self.cfg.poll_mode == PollMode::Hybrid;
        t
    }

    fn limits(&self) -> QueueLimits {
        let mut l = QueueLimits::new(self.cfg.size_bytes, self.cfg.bs);
        l.max_sectors = self.cfg.max_sectors;
        l.max_segments = self.cfg.max_segments;
        l.rotational = self.cfg.rotational;
        if self.cfg.discard {
            l.max_discard_sectors = u32::MAX >> 9;
        }
        l.max_write_zeroes_sectors = u32::MAX >> 9;
        l.zoned = self.zoned.as_ref().map(NullZoned::limits);
        l
    }

    /// Memory-backed: unwritten pages are holes. Without memory backing
    /// reads return whatever the buffer held, so nothing is claimed.
    fn block_status(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) -> bool {
        let Some(mem) = &self.mem else { return false };
        crate::driver::extents_by(offset, len, mem::PAGE_SIZE, out, |pos| !mem.is_present(pos));
        true
    }

    /// Memory-backed: a page-table lookup per page.
    fn block_status_is_cheap(&self) -> bool {
        self.mem.is_some()
    }

    fn report_zones(&self, sector: u64, nr: usize, out: &mut Vec<crate::zoned::Zone>) -> Result<(), Status> {
        match &self.zoned {
            Some(z) => {
                z.report(sector, nr, out);
                Ok(())
            }
            None => Err(Status::NotSupp),
        }
    }

    #[inline]
    fn queue_rq(&self, hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
        if self.plain_inline && !hctx.is_poll() {
            rq.complete(Status::Ok);
            return QueueRqResult::Queued;
        }
        let status = self.handle(&mut rq);
        let due_ns = self.due_ns(&rq);
        let rq_is_hipri = rq.flags().contains(ReqFlags::HIPRI);
        if hctx.is_poll() {
            // No completion thread: the submitter's poll completes it.
            let list = &self.poll_lists[hctx.index() - self.cfg.submit_queues];
            list.lock().push_back(Pending { rq, due_ns, status });
            return QueueRqResult::Queued;
        }
        if let Some(q) = self.hybrid.get(hctx.index()) {
            q.submit(rq, status, due_ns, rq_is_hipri);
            return QueueRqResult::Queued;
        }
        if self.cfg.irqmode == IrqMode::None && due_ns == 0 {
            rq.complete(status);
            return QueueRqResult::Queued;
        }
        if self.cfg.irqmode == IrqMode::None {
            // Throttled inline completion: the submitter waits its turn.
            wait_until(due_ns, SPIN_NS);
            rq.complete(status);
            return QueueRqResult::Queued;
        }
        self.irq[hctx.index()].push(Pending { rq, due_ns, status });
        QueueRqResult::Queued
    }

    /// Completes the poll queue's requests that are due (in submission
    /// order; each completes outside the list's lock, since completing may
    /// issue the next request to this very queue).
    fn poll(&self, hctx: &Hctx) -> usize {
        if let Some(q) = self.hybrid.get(hctx.index()) {
            return q.poll();
        }
        let Some(list) = hctx.index().checked_sub(self.cfg.submit_queues).and_then(|i| self.poll_lists.get(i)) else {
            return 0;
        };
        let now = now_ns();
        let mut done = 0;
        loop {
            let due = {
                let mut l = list.lock();
                match l.front() {
                    Some(p) if p.due_ns <= now => l.pop_front(),
                    _ => None,
                }
            };
            let Some(p) = due else { return done };
            p.rq.complete(p.status);
            done += 1;
        }
    }

    fn rq_timeout(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_secs(30))
    }

    fn shutdown(&self) {
        for q in self.irq.iter() {
            q.stop();
        }
        for q in self.hybrid.iter() {
            q.stop();
        }
        // Requests nobody polled end with an error (dropping a token does).
        for list in self.poll_lists.iter() {
            let left: Vec<Pending> = list.lock().drain(..).collect();
            drop(left);
        }
    }

    fn show(&self, out: &mut String) {
        let c = &self.cfg;
        let _ = writeln!(
            out,
            "null/irqmode={} completion_nsec={} memory_backed={} mbps={} bs={} size_bytes={}",
            c.irqmode as u8, c.completion_nsec, c.memory_backed as u8, c.mbps, c.bs, c.size_bytes
        );
        if !c.irq_cpus.is_empty() {
            let _ = writeln!(out, "null/irq_cpus={:?}", c.irq_cpus);
        }
        if let Some(mem) = &self.mem {
            let _ = writeln!(out, "null/pages={}", mem.nr_pages());
        }
        if let Some(z) = &self.zoned {
            let _ = writeln!(out, "null/zone_lock={}", z.lock_name());
        }
        if let Some(r) = &self.rotational {
            let seeks = r.seeks.load(Ordering::Relaxed);
            let sequential = r.sequential.load(Ordering::Relaxed);
            let _ = writeln!(out, "null/rotational seek_nsec={} seeks={seeks} sequential={sequential}", c.seek_nsec);
        }
        if self.channels.is_some() {
            let _ = writeln!(out, "null/channels={} service_nsec={}", c.channels, c.completion_nsec);
        }
        for (i, q) in self.hybrid.iter().enumerate() {
            let s = q.stats();
            let (hipri, lopri, on) = q.snapshot();
            let _ = writeln!(
                out,
                "null/hybrid{i}/notify={} hipri={hipri} lopri={lopri} notify_off={} notify_on={} irq_reaped={} poll_reaped={}",
                on as u8,
                s.notify_off.load(Ordering::Relaxed),
                s.notify_on.load(Ordering::Relaxed),
                s.irq_reaped.load(Ordering::Relaxed),
                s.poll_reaped.load(Ordering::Relaxed),
            );
        }
        for (i, q) in self.irq.iter().enumerate() {
            let (timed, late_mean, late_max) = q.lateness();
            let _ = writeln!(
                out,
                "null/irq{i}/completed={} pending={} timed={timed} late_ns_mean={late_mean} late_ns_max={late_max}",
                q.completed(),
                q.pending()
            );
        }
    }
}
