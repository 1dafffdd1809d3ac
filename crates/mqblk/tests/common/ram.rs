// A RAM disk for the block layer's own tests and benchmarks: a driver
// written against mqblk's public API only, opened by `ram:` specs with
// null_blk's key names, meanings and defaults (gb=250, size (MiB, over
// gb), bs=512, submit_queues=1, poll_queues=1, hw_queue_depth=64,
// irqmode=1, completion_nsec=10000, memory_backed=0, discard=0,
// max_sectors=255 aligned down to bs, max_segments=128), so that the core
// is tested without a driver crate. The block layer's keys (`sched=`,
// `wake=`, `plug_sync=` ...) work as in any spec.
//
// A request's data moves in `queue_rq`; it completes there (irqmode=0),
// on its hardware queue's completion thread (irqmode=1), or on that thread
// `completion_nsec` after submission (irqmode=2). A poll queue has no
// thread: a poll completes its requests once due (as the irqmode says).
// With memory_backed=1 written sectors are kept (never-written ones read
// zeros), so data round trips can be checked.
//
// Relies on: the `Driver` trait, `register_driver`, `Rq`'s segment walks
// for merged requests; and only on what Miri runs (threads, `Mutex`,
// `Condvar`, `Instant`). Zones, faults and service models are null_blk's.
//
// Plain comments and no inner attribute: the crate's doc examples take
// this file in with `include!`, which accepts neither (`//!` and
// `#![...]` are inner attributes). Unused items are allowed where it is
// included as a module (tests/common/mod.rs).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mqblk::config::{ConfigError, SpecParams};
use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq, DEFAULT_MAX_SEGMENTS};
use mqblk::{Device, Op, QueueLimits, Status, TagSetConfig, SECTOR_SIZE};

/// The keys a `ram:` spec accepts (besides the block layer's).
pub const RAM_KEYS: &[&str] = &[
    "gb",
    "size",
    "bs",
    "submit_queues",
    "poll_queues",
    "hw_queue_depth",
    "irqmode",
    "completion_nsec",
    "memory_backed",
    "discard",
    "max_sectors",
    "max_segments",
];

/// Makes `ram:` specs open a RAM disk. Calling it again changes nothing.
pub fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        mqblk::driver::register_driver("ram", |p| Ok(Box::new(RamDriver::new(RamConfig::from_params(p)?)?)));
    });
}

/// `Device::open` with `ram:` registered.
pub fn open(spec: &str) -> Result<Device, mqblk::Error> {
    register();
    Device::open(spec)
}

/// A RAM disk's parameters (the spec keys of the same names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RamConfig {
    pub size_bytes: u64,
    pub bs: u32,
    pub submit_queues: usize,
    pub poll_queues: usize,
    pub hw_queue_depth: u32,
    /// 0: complete inline, 1: on the completion thread, 2: on that
    /// thread `completion_nsec` after submission.
    pub irqmode: u8,
    pub completion_nsec: u64,
    pub memory_backed: bool,
    pub discard: bool,
    pub max_sectors: u32,
    pub max_segments: u32,
}

impl Default for RamConfig {
    fn default() -> Self {
        Self {
            size_bytes: 250 << 30,
            bs: 512,
            submit_queues: 1,
            poll_queues: 1,
            hw_queue_depth: 64,
            irqmode: 1,
            completion_nsec: 10_000,
            memory_backed: false,
            discard: false,
            max_sectors: 255,
            max_segments: DEFAULT_MAX_SEGMENTS,
        }
    }
}

impl RamConfig {
    /// The config a `ram:` spec describes; errors name the key.
    pub fn from_params(p: &SpecParams) -> Result<Self, ConfigError> {
        p.check_keys(RAM_KEYS)?;
        let d = Self::default();
        let int = |key: &str, default: u64, min: u64, max: u64| p.u64_in(key, default, min, max);
        let size_mb = int("size", 0, 0, 1 << 30)?;
        let bs: u32 = p.choice("bs", "512", &["512", "1024", "2048", "4096"])?.parse().expect("a listed size");
        // Requests are whole blocks: max_sectors is aligned down to bs.
        let bs_sectors = bs / SECTOR_SIZE as u32;
        let max_sectors = int("max_sectors", d.max_sectors.into(), bs_sectors.into(), 1 << 20)? as u32;
        Ok(Self {
            size_bytes: if size_mb > 0 { size_mb << 20 } else { int("gb", d.size_bytes >> 30, 1, 1 << 20)? << 30 },
            bs,
            submit_queues: int("submit_queues", 1, 1, 1024)? as usize,
            poll_queues: int("poll_queues", 1, 0, 1024)? as usize,
            hw_queue_depth: int("hw_queue_depth", d.hw_queue_depth.into(), 1, 65536)? as u32,
            irqmode: int("irqmode", d.irqmode.into(), 0, 2)? as u8,
            completion_nsec: int("completion_nsec", d.completion_nsec, 0, 60_000_000_000)?,
            memory_backed: p.bool("memory_backed", false)?,
            discard: p.bool("discard", false)?,
            max_sectors: max_sectors / bs_sectors * bs_sectors,
            max_segments: int("max_segments", d.max_segments.into(), 1, 65535)? as u32,
        })
    }
}

/// The RAM disk driver.
pub struct RamDriver {
    cfg: RamConfig,
    /// memory_backed=1: the written sectors, by sector number.
    sectors: Option<Mutex<BTreeMap<u64, [u8; SECTOR_SIZE as usize]>>>,
    /// Per hardware queue, its requests waiting to complete: for a submit
    /// queue's completion thread (irqmode=1 and 2), for a poll queue's polls.
    queues: Box<[Arc<DueList>]>,
    /// The completion threads, joined by `shutdown`.
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl RamDriver {
    /// A RAM disk; starts its completion threads.
    pub fn new(cfg: RamConfig) -> Result<Self, mqblk::Error> {
        let depth = cfg.hw_queue_depth as usize;
        let queues: Box<[Arc<DueList>]> =
            (0..cfg.submit_queues + cfg.poll_queues).map(|_| Arc::new(DueList::new(depth))).collect();
        let mut threads = Vec::new();
        if cfg.irqmode != 0 {
            for (i, queue) in queues[..cfg.submit_queues].iter().enumerate() {
                let queue = queue.clone();
                let thread =
                    std::thread::Builder::new().name(format!("ram-irq{i}")).spawn(move || queue.complete_loop());
                threads.push(thread.map_err(|e| mqblk::Error::Setup(format!("ram: completion thread {i}: {e}")))?);
            }
        }
        let sectors = cfg.memory_backed.then(|| Mutex::new(BTreeMap::new()));
        Ok(Self { cfg, sectors, queues, threads: Mutex::new(threads) })
    }

    /// Moves the request's data (memory_backed=1) and decides its status.
    fn transfer(&self, rq: &mut Rq) -> Status {
        if !matches!(rq.op(), Op::Read | Op::Write | Op::Flush | Op::Discard | Op::WriteZeroes) {
            return Status::NotSupp;
        }
        // Without memory backing reads leave the buffer as it was.
        let Some(sectors) = &self.sectors else { return Status::Ok };
        let mut sectors = sectors.lock().unwrap();
        let sector_of = |pos: u64, i: usize| pos / SECTOR_SIZE + i as u64;
        match rq.op() {
            Op::Read => rq.for_each_segment_mut(|pos, seg| {
                for (i, out) in seg.chunks_exact_mut(SECTOR_SIZE as usize).enumerate() {
                    match sectors.get(&sector_of(pos, i)) {
                        Some(data) => out.copy_from_slice(data),
                        None => out.fill(0),
                    }
                }
            }),
            Op::Write => rq.for_each_segment(|pos, seg| {
                for (i, data) in seg.chunks_exact(SECTOR_SIZE as usize).enumerate() {
                    sectors.insert(sector_of(pos, i), data.try_into().expect("a whole sector"));
                }
            }),
            Op::Discard | Op::WriteZeroes => {
                // Drops the range's sectors: they read zeros again.
                let kept = sectors.split_off(&(rq.sector() + u64::from(rq.nr_sectors())));
                drop(sectors.split_off(&rq.sector()));
                sectors.extend(kept);
            }
            // Flush: no volatile cache, every completed write is stored.
            _ => {}
        }
        Status::Ok
    }
}

impl Driver for RamDriver {
    fn name(&self) -> &str {
        "ram"
    }

    fn tag_set(&self) -> TagSetConfig {
        let mut t = TagSetConfig::new(self.cfg.submit_queues + self.cfg.poll_queues, self.cfg.hw_queue_depth);
        t.poll_queues = self.cfg.poll_queues;
        t
    }

    fn limits(&self) -> QueueLimits {
        let mut l = QueueLimits::new(self.cfg.size_bytes, self.cfg.bs);
        l.max_sectors = self.cfg.max_sectors;
        l.max_segments = self.cfg.max_segments;
        if self.cfg.discard {
            l.max_discard_sectors = u32::MAX >> 9;
        }
        l.max_write_zeroes_sectors = u32::MAX >> 9;
        l
    }

    fn queue_rq(&self, hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
        let status = self.transfer(&mut rq);
        if self.cfg.irqmode == 0 && !hctx.is_poll() {
            rq.complete(status);
        } else {
            let delay_nsec = if self.cfg.irqmode == 2 { self.cfg.completion_nsec } else { 0 };
            self.queues[hctx.index()].push(rq, status, Duration::from_nanos(delay_nsec));
        }
        QueueRqResult::Queued
    }

    /// Completes the poll queue's due requests, in order.
    fn poll(&self, hctx: &Hctx) -> usize {
        if !hctx.is_poll() {
            return 0;
        }
        let now = Instant::now();
        let mut done = 0;
        // One at a time, outside the lock: a completion may issue the next
        // request to this very queue.
        while let Some(p) = self.queues[hctx.index()].pop_due(now) {
            p.rq.complete(p.status);
            done += 1;
        }
        done
    }

    /// Lets each completion thread complete what it holds, then joins it;
    /// requests nobody polled end with an error, as null_blk's do.
    fn shutdown(&self) {
        for queue in self.queues.iter() {
            queue.state.lock().unwrap().stop = true;
            queue.wake.notify_one();
        }
        for thread in self.threads.lock().unwrap().drain(..) {
            thread.join().expect("a ram completion thread panicked");
        }
        for queue in self.queues.iter() {
            let left: Vec<Pending> = queue.state.lock().unwrap().pending.drain(..).collect();
            left.into_iter().for_each(|p| p.rq.complete(Status::IoErr));
        }
    }
}

impl Drop for RamDriver {
    /// A driver no device took still joins its threads.
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A request whose data has moved, waiting for its completion time.
struct Pending {
    rq: Rq,
    due: Instant,
    status: Status,
}

/// One hardware queue's requests in due order, and the condition variable
/// its completion thread sleeps on.
struct DueList {
    state: Mutex<DueState>,
    wake: Condvar,
}

struct DueState {
    pending: VecDeque<Pending>,
    stop: bool,
}

impl DueList {
    fn new(depth: usize) -> Self {
        let state = DueState { pending: VecDeque::with_capacity(depth), stop: false };
        Self { state: Mutex::new(state), wake: Condvar::new() }
    }

    /// Queues `rq` to complete with `status` `delay` from now.
    fn push(&self, rq: Rq, status: Status, delay: Duration) {
        let mut state = self.state.lock().unwrap();
        // Read under the lock, and every request of a queue waits as long:
        // the list stays in due order, so only its front is ever watched.
        let due = Instant::now() + delay;
        let was_empty = state.pending.is_empty();
        state.pending.push_back(Pending { rq, due, status });
        drop(state);
        // A thread with a request queued is awake, or asleep until that
        // one's due time, which comes first: only the thread of an empty
        // list may be asleep for good. It looks at the list under the lock
        // before it sleeps, so this wakeup cannot fall between the two.
        if was_empty {
            self.wake.notify_one();
        }
    }

    /// The front request, if it is due at `now`.
    fn pop_due(&self, now: Instant) -> Option<Pending> {
        let mut state = self.state.lock().unwrap();
        state.pending.front().is_some_and(|p| p.due <= now).then(|| state.pending.pop_front()).flatten()
    }

    /// A completion thread: completes each request at its due time,
    /// sleeping (never spinning) in between; ends once stopped and empty.
    fn complete_loop(&self) {
        // Timed sleeps end on time, not up to 50 us late (no-op under Miri).
        mqblk::clock::set_precise_timer_slack();
        let mut state = self.state.lock().unwrap();
        loop {
            let now = Instant::now();
            state = match state.pending.front().map(|p| p.due) {
                Some(due) if due <= now => {
                    let p = state.pending.pop_front().expect("the front");
                    // Completed outside the lock: a completion may run the
                    // queue, which pushes the next request here.
                    drop(state);
                    p.rq.complete(p.status);
                    self.state.lock().unwrap()
                }
                Some(due) => self.wake.wait_timeout(state, due - now).unwrap().0,
                None if state.stop => return,
                None => self.wake.wait(state).unwrap(),
            };
        }
    }
}
