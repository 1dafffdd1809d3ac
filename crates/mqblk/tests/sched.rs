//! I/O schedulers through the whole stack: dispatch order rules on a
//! device that completes one request at a time when told (a deterministic
//! timeline), the depth limits at the tag allocator, exactly-once dispatch
//! under load, and live switching.

#![cfg(not(loom))]

mod common;
use common::filled;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::ram::open;
use mqblk::config::SpecParams;

/// The built-in schedulers.
const SCHEDULERS: [&str; 4] = ["none", "mq-deadline", "kyber", "bfq"];
/// The load tests' schedulers under Miri: one each (a device and three or
/// four threads a scheduler cost Miri a minute or more). What Miri checks
/// there is the request path's unsafe code and atomics, which every
/// scheduler's insert and dispatch go through alike; the other tests here
/// run mq-deadline, kyber and bfq under Miri, and none is every other
/// binary's. Natively each test runs all four.
const MIRI_SCHEDULERS_UNDER_LOAD: [&str; 1] = ["bfq"];
const MIRI_SCHEDULERS_PLUGGED: [&str; 1] = ["kyber"];
use mqblk::driver::{Driver, QueueRqResult};
use mqblk::driver::{Hctx, Rq};
use mqblk::{
    Bio, Buf, Client, Device, IoPrio, IoPrioClass, Op, QueueConfig, QueueLimits, ReqFlags, Status, SubmitError,
    TagSetConfig,
};

/// One driver tag; requests wait until the test releases them, so the
/// scheduler decides every next request.
#[derive(Default)]
struct GateState {
    held: Mutex<VecDeque<Rq>>,
    /// (client id, op, first sector) in dispatch order.
    order: Mutex<Vec<(u32, Op, u64)>>,
}

struct Gate(Arc<GateState>);

impl Driver for Gate {
    fn name(&self) -> &str {
        "gate"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, 1)
    }
    fn limits(&self) -> QueueLimits {
        QueueLimits::new(1 << 30, 512)
    }
    fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
        self.0.order.lock().unwrap().push((rq.client_id(), rq.op(), rq.sector()));
        self.0.held.lock().unwrap().push_back(rq);
        QueueRqResult::Queued
    }
}

impl GateState {
    /// Completes the request the device holds; returns false if none.
    fn release_one(&self) -> bool {
        let rq = self.held.lock().unwrap().pop_front();
        match rq {
            Some(rq) => {
                rq.complete(Status::Ok);
                true
            }
            None => false,
        }
    }

    fn release_all(&self) {
        while self.release_one() {}
    }

    fn order(&self) -> Vec<(u32, Op, u64)> {
        self.order.lock().unwrap().clone()
    }
}

fn gate_device(sched: &str, tunables: &[(&str, &str)], nr_requests: Option<u32>) -> (Device, Arc<GateState>) {
    let state = Arc::new(GateState::default());
    let spec: String = std::iter::once(sched.to_string())
        .chain(tunables.iter().map(|(k, v)| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(",");
    let opts = QueueConfig { sched: spec.parse().unwrap(), nr_requests, ..QueueConfig::default() };
    (Device::with_driver_options(Box::new(Gate(state.clone())), opts).unwrap(), state)
}

fn read(sector: u64) -> Bio {
    Bio::read(sector * 512, Buf::new(512))
}

fn write(sector: u64) -> Bio {
    Bio::write(sector * 512, Buf::new(512)).with_flags(ReqFlags::SYNC)
}

fn reap(c: &mut Client, n: usize) {
    let mut done = Vec::new();
    c.do_io(&mut done, n, n, Some(Duration::from_secs(30))).unwrap();
    assert_eq!(done.len(), n);
    assert!(done.iter().all(|d| d.status.is_ok()));
}

/// Releases requests until every client's I/O has completed (a scheduler
/// may hold some back for a while, e.g. bfq idling).
fn finish(gate: &GateState, clients: &mut [&mut Client]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut done = Vec::new();
    while clients.iter().any(|c| c.in_flight() > 0) {
        assert!(std::time::Instant::now() < deadline, "requests never completed");
        gate.release_all();
        for c in clients.iter_mut() {
            done.clear();
            let n = c.in_flight();
            c.do_io(&mut done, 0, n, None).unwrap();
            assert!(done.iter().all(|d| d.status.is_ok()));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn sectors(order: &[(u32, Op, u64)]) -> Vec<(Op, u64)> {
    order.iter().map(|&(_, op, s)| (op, s)).collect()
}

#[test]
fn deadline_sorts_by_sector_until_a_deadline_expires() {
    for (expire, want) in [("3600000", vec![10, 50, 100]), ("0", vec![100, 50, 10])] {
        let tunables = [("read_expire", expire), ("fifo_batch", "16")];
        let (dev, gate) = gate_device("mq-deadline", &tunables, Some(64));
        let mut c = dev.client_with_capacity(64);
        // The first read takes the only driver tag; the rest queue up.
        c.submit(read(1000), 0).unwrap();
        for s in [100, 50, 10] {
            c.submit(read(s), s).unwrap();
        }
        for _ in 0..8 {
            gate.release_all();
        }
        reap(&mut c, 4);
        let got: Vec<u64> = gate.order()[1..].iter().map(|o| o.2).collect();
        assert_eq!(got, want, "read_expire={expire}: sorted when nothing expired, FIFO when all did");
    }
}

#[test]
fn deadline_serves_writes_after_writes_starved_read_batches() {
    let tunables =
        [("fifo_batch", "1"), ("writes_starved", "2"), ("read_expire", "3600000"), ("write_expire", "3600000")];
    let (dev, gate) = gate_device("mq-deadline", &tunables, Some(64));
    let mut c = dev.client_with_capacity(64);
    c.submit(read(5000), 0).unwrap(); // holds the driver tag
    for i in 0..6u64 {
        c.submit(read(100 + 10 * i), i).unwrap();
        c.submit(write(900 + 10 * i), 100 + i).unwrap();
    }
    for _ in 0..20 {
        gate.release_all();
    }
    reap(&mut c, 13);
    let ops: Vec<Op> = gate.order()[1..].iter().map(|o| o.1).collect();
    use Op::{Read as R, Write as W};
    assert_eq!(ops, vec![R, R, W, R, R, W, R, R, W, W, W, W], "two read batches, then one write batch");
}

#[test]
fn deadline_merges_bios_into_queued_requests() {
    let (dev, gate) = gate_device("mq-deadline", &[], Some(64));
    let mut c = dev.client_with_capacity(64);
    c.submit(read(5000), 0).unwrap();
    c.submit(read(100), 1).unwrap();
    c.submit(read(101), 2).unwrap(); // back merge
    c.submit(read(99), 3).unwrap(); // front merge
    for _ in 0..4 {
        gate.release_all();
    }
    reap(&mut c, 4);
    assert_eq!(sectors(&gate.order()), vec![(Op::Read, 5000), (Op::Read, 99)]);
    let s = dev.stats();
    assert_eq!((s.merges.read, s.front_merges, s.requests.read), (2, 1, 2));
}

#[test]
// A proportion needs many budgets to show (120 requests took over 4
// minutes under Miri, and 48 too few to hold the ratio); bfq is safe
// code, and Miri runs bfq's dispatch, merge and depth-limit paths in
// the other tests here.
#[cfg_attr(miri, ignore = "a service-share measurement, too long to interpret")]
fn bfq_serves_busy_queues_in_proportion_to_their_weights() {
    // Weights 80 (level 0) and 40 (level 4), small budgets so turns
    // alternate often, no weight raising: service should be 2:1.
    let tunables = [("low_latency", "0"), ("max_budget", "8")];
    // Requests queued by each client, and served while both stay
    // backlogged.
    const QUEUED: u64 = 100;
    const SERVED: usize = 120;
    let (dev, gate) = gate_device("bfq", &tunables, Some(256));
    let mut heavy = dev.client_with_capacity(128);
    let mut light = dev.client_with_capacity(128);
    let hi = IoPrio::new(IoPrioClass::Be, 0);
    for i in 0..QUEUED {
        heavy.submit(read(10_000 + i).with_ioprio(hi), i).unwrap();
        light.submit(read(20_000 + i), i).unwrap();
    }
    let order_before = gate.order().len();
    for _ in 0..SERVED {
        assert!(gate.release_one());
    }
    let order = gate.order();
    let served = &order[order_before..order_before + SERVED];
    let heavy_id = served.iter().find(|o| o.2 >= 10_000 && o.2 < 20_000).unwrap().0;
    let n_heavy = served.iter().filter(|o| o.0 == heavy_id).count() as f64;
    let ratio = n_heavy / (SERVED as f64 - n_heavy);
    assert!((1.7..=2.3).contains(&ratio), "service ratio {ratio:.2} (want 2 +- 15%)");
    finish(&gate, &mut [&mut heavy, &mut light]);
}

#[test]
fn bfq_raises_a_new_sync_reader_and_serves_it_first() {
    let (dev, gate) = gate_device("bfq", &[("max_budget", "100000")], Some(256));
    let mut writer = dev.client_with_capacity(64);
    for i in 0..40u64 {
        writer.submit(Bio::write(i * 512, Buf::new(512)), i).unwrap(); // async
    }
    let mut reader = dev.client_with_capacity(8);
    reader.submit(read(50_000), 7).unwrap();
    assert!(gate.release_one(), "the first write was on the device");
    let order = gate.order();
    assert_eq!(order[1].2, 50_000, "the raised reader preempts the writer: {order:?}");
    finish(&gate, &mut [&mut reader, &mut writer]);
}

/// The gate without request timeouts: its queue's worker has no tick and
/// wakes only for delayed runs.
struct QuietGate(Gate);

impl Driver for QuietGate {
    fn name(&self) -> &str {
        "quiet-gate"
    }
    fn tag_set(&self) -> TagSetConfig {
        self.0.tag_set()
    }
    fn limits(&self) -> QueueLimits {
        self.0.limits()
    }
    fn queue_rq(&self, hctx: &Hctx, rq: Rq, last: bool) -> QueueRqResult {
        self.0.queue_rq(hctx, rq, last)
    }
    fn rq_timeout(&self) -> Option<Duration> {
        None
    }
}

fn dump_value(dump: &str, key: &str) -> u64 {
    let line = dump.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("no {key} in:\n{dump}"));
    line[key.len()..].trim_start_matches('=').parse().unwrap()
}

/// bfq idles for a raised reader whose read completed; its idle slice
/// timer (slice_idle, 50 ms here) ends the idling and the framework runs
/// the queue for it. This queue has no timeout tick at all, so the writer
/// is dispatched only if the timer's delayed run wakes the worker (before,
/// the worker slept its whole tick, up to a second).
#[test]
fn bfq_idle_slice_expiry_runs_the_queue_without_any_tick() {
    let state = Arc::new(GateState::default());
    let opts = QueueConfig {
        sched: "bfq,slice_idle=50,max_budget=100000".parse().unwrap(),
        nr_requests: Some(64),
        ..QueueConfig::default()
    };
    let dev = Device::with_driver_options(Box::new(QuietGate(Gate(state.clone()))), opts).unwrap();
    let mut reader = dev.client_with_capacity(4);
    let mut writer = dev.client_with_capacity(4);
    reader.submit(read(100), 1).unwrap();
    // The reader's queue is empty with its read in flight: bfq keeps the
    // device for it, so the write waits in the scheduler.
    writer.submit(Bio::write(0, Buf::new(512)), 2).unwrap();
    assert_eq!(state.order().len(), 1, "the write waits while the reader's read is in flight");
    assert!(state.release_one());
    reap(&mut reader, 1);
    // Now the idle slice runs; when it expires the write goes.
    let bound = std::time::Instant::now() + Duration::from_secs(30);
    while state.order().len() < 2 {
        assert!(std::time::Instant::now() < bound, "the idle slice never ended: {}", dev.show_stats());
        std::thread::sleep(Duration::from_millis(1));
    }
    let order = state.order();
    assert_eq!((order[1].1, order[1].2), (Op::Write, 0), "{order:?}");
    let dump = dev.show_stats();
    assert_eq!(dump_value(&dump, "sched/hctx0/idle_expired"), 1, "{dump}");
    // The write went by the timer's run, or by the completion's own run if
    // that came after the slice: either way at most one delayed run.
    assert!(dump_value(&dump, "hctx0/delayed_runs") <= 1, "{dump}");
    state.release_all();
    reap(&mut writer, 1);
}

/// How many NOWAIT requests of `bio` fit before the allocator refuses.
fn fill(c: &mut Client, make: impl Fn(u64) -> Bio, max: u64) -> u64 {
    for i in 0..max {
        match c.submit(make(i).with_flags(ReqFlags::NOWAIT), i) {
            Ok(()) => {}
            Err(r) => {
                assert!(matches!(r.error, SubmitError::Again), "{:?}", r.error);
                return i;
            }
        }
    }
    max
}

#[test]
fn depth_limits_hold_at_the_tag_allocator() {
    let async_write = |i: u64| Bio::write(i * 4096, Buf::new(512));
    let sync_write = |i: u64| Bio::write(i * 4096, Buf::new(512)).with_flags(ReqFlags::SYNC);
    let sync_read = |i: u64| Bio::read(i * 4096, Buf::new(512));
    // nr_requests 64, 16 under Miri (each request costs thousands of
    // interpreted steps there); the one request on the device holds a
    // scheduler tag too.
    const NR: u32 = if cfg!(miri) { 16 } else { 64 };
    let cases = [
        ("bfq", vec![], &async_write as &dyn Fn(u64) -> Bio, NR / 2),
        ("bfq", vec![("low_latency", "0")], &sync_write, NR * 3 / 4),
        // A new sync queue is weight-raised (interactive), which tightens
        // the limits to 6/16 for its own sync writes.
        ("bfq", vec![], &sync_write, NR * 6 / 16),
        ("bfq", vec![], &sync_read, NR),
        ("bfq", vec![("limit_depths", "0")], &async_write, NR),
        ("mq-deadline", vec![], &async_write, NR * 3 / 4),
        ("mq-deadline", vec![], &sync_read, NR),
        ("kyber", vec![], &async_write, NR * 3 / 4),
        ("kyber", vec![], &sync_write, NR),
    ];
    // Under Miri the first case of each scheduler (a device each, minutes
    // for all nine): the limits are the schedulers' safe arithmetic, over
    // the one request path the other tests here drive.
    let miri_cases = [0, 5, 7];
    for (i, (sched, tunables, make, want)) in cases.into_iter().enumerate() {
        if cfg!(miri) && !miri_cases.contains(&i) {
            continue;
        }
        let (dev, gate) = gate_device(sched, &tunables, Some(NR));
        let mut c = dev.client_with_capacity(2 * NR as usize);
        let got = fill(&mut c, make, 2 * u64::from(NR));
        assert_eq!(got, u64::from(want), "{sched} {tunables:?}");
        finish(&gate, &mut [&mut c]);
    }
}

#[test]
fn bfq_tightens_async_limits_while_a_queue_is_raised() {
    let (dev, gate) = gate_device("bfq", &[("max_budget", "100000")], Some(64));
    let mut reader = dev.client_with_capacity(8);
    // A new sync queue, raised; it stays busy (one read on the device, one
    // queued).
    reader.submit(read(1), 1).unwrap();
    reader.submit(read(9), 2).unwrap();
    let mut writer = dev.client_with_capacity(128);
    let got = fill(&mut writer, |i| Bio::write(i * 4096, Buf::new(512)), 128);
    // 3/16 of 64 = 12 bit positions, two of which the reader's tags may
    // occupy; without raising it would be 32.
    assert!((10..=12).contains(&got), "async limit while raised: {got}");
    finish(&gate, &mut [&mut reader, &mut writer]);
}

/// Several clients doing mixed I/O through each scheduler on a
/// memory-backed RAM disk: every bio completes exactly once, data reads
/// back, tags all come back.
#[test]
fn every_request_is_dispatched_once_under_load() {
    // Bios per thread, bios each keeps in flight and their size: fewer and
    // smaller under Miri, where each bio costs thousands of interpreted
    // steps (4 threads of 4 still contend for the 8 tags).
    const PER_THREAD: u64 = if cfg!(miri) { 6 } else { 2000 };
    const IN_FLIGHT: usize = if cfg!(miri) { 4 } else { 32 };
    const BLOCK: usize = if cfg!(miri) { 512 } else { 4096 };
    let schedulers: &[&str] = if cfg!(miri) { &MIRI_SCHEDULERS_UNDER_LOAD } else { &SCHEDULERS };
    for &sched in schedulers {
        let dev = open(&format!("ram:gb=1,irqmode=1,memory_backed=1,hw_queue_depth=8,sched={sched}")).unwrap();
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let dev = dev.clone();
                std::thread::spawn(move || {
                    let mut c = dev.client_with_capacity(IN_FLIGHT);
                    let mut done = Vec::new();
                    let mut completed = 0;
                    for i in 0..PER_THREAD {
                        let off = (t * 10_000 + (i % 500)) * BLOCK as u64;
                        let bio = if i % 3 == 0 {
                            Bio::write(off, Buf::from_slice(&[(i % 251) as u8; BLOCK]))
                        } else {
                            Bio::read(off, Buf::new(BLOCK))
                        };
                        c.submit(bio, i).unwrap();
                        if c.in_flight() == IN_FLIGHT {
                            done.clear();
                            completed += c.do_io(&mut done, 1, IN_FLIGHT, Some(Duration::from_secs(30))).unwrap();
                            assert!(done.iter().all(|d| d.status.is_ok()));
                        }
                    }
                    while c.in_flight() > 0 {
                        done.clear();
                        completed += c.do_io(&mut done, 1, IN_FLIGHT, Some(Duration::from_secs(30))).unwrap();
                    }
                    completed
                })
            })
            .collect();
        let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(total as u64, 4 * PER_THREAD, "{sched}");
        let s = dev.stats();
        assert_eq!(s.bios.total(), 4 * PER_THREAD, "{sched}");
        assert_eq!(s.completed, s.requests.total(), "{sched}: every request completed once");
        assert_eq!(s.bios.total(), s.requests.total() + s.merges.total(), "{sched}");
        assert_eq!(dev.busy_tags(), 0, "{sched}");
        let mut c = dev.client();
        let mut back = [0u8; BLOCK];
        // Block 3 is written by thread 0 at i = 3, 1503, ... (i % 500 == 3, i % 3 == 0).
        let last = (0..PER_THREAD).rev().find(|i| i % 500 == 3 && i % 3 == 0).unwrap();
        c.read_at(&mut back, 3 * BLOCK as u64).unwrap();
        assert!(filled(&back, (last % 251) as u8), "{sched}");
    }
}

#[test]
fn switching_schedulers_under_load_loses_nothing() {
    // Tags, and bios each thread keeps in flight: fewer under Miri, where
    // each switch drains and rebuilds them (3 threads still contend).
    const DEPTH: usize = if cfg!(miri) { 4 } else { 16 };
    let dev = open(&format!("ram:gb=1,irqmode=1,hw_queue_depth={DEPTH}")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let done_total = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..3u64)
        .map(|t| {
            let (dev, stop, done_total) = (dev.clone(), stop.clone(), done_total.clone());
            std::thread::spawn(move || {
                let mut c = dev.client_with_capacity(DEPTH);
                let mut done = Vec::new();
                let (mut submitted, mut i) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let off = (t << 26) | ((i % 1000) * 4096);
                    let bio = if i % 2 == 0 { Bio::read(off, Buf::new(4096)) } else { Bio::write(off, Buf::new(4096)) };
                    c.submit(bio, i).unwrap();
                    submitted += 1;
                    i += 1;
                    if c.in_flight() == DEPTH {
                        done.clear();
                        let n = c.do_io(&mut done, 1, DEPTH, Some(Duration::from_secs(30))).unwrap();
                        done_total.fetch_add(n as u64, Ordering::Relaxed);
                    }
                }
                while c.in_flight() > 0 {
                    done.clear();
                    let n = c.do_io(&mut done, 1, DEPTH, Some(Duration::from_secs(30))).unwrap();
                    done_total.fetch_add(n as u64, Ordering::Relaxed);
                }
                submitted
            })
        })
        .collect();
    // Under Miri each switch drains and rebuilds under interpretation:
    // from none to a scheduler, from one scheduler to another, and back.
    let switches: &[&str] = if cfg!(miri) {
        &["mq-deadline", "bfq,limit_depths=0", "none"]
    } else {
        &["mq-deadline", "bfq", "kyber", "none", "bfq,limit_depths=0", "mq-deadline,fifo_batch=4", "none"]
    };
    for &name in switches {
        // Under Miri time is counted in interpreted steps, and the
        // submitters run all through the sleep: 1 ms there.
        std::thread::sleep(Duration::from_millis(if cfg!(miri) { 1 } else { 30 }));
        dev.set_scheduler(name.parse().unwrap()).unwrap();
        assert_eq!(dev.scheduler(), name.split(',').next().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    let submitted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(submitted > 0);
    assert_eq!(done_total.load(Ordering::Relaxed), submitted, "every submitted bio completed once");
    assert_eq!(dev.busy_tags(), 0);
    let e = "cfq".parse::<mqblk::Sched>().unwrap_err().to_string();
    assert!(e.contains("cfq") && e.contains("mq-deadline"), "{e}");
    let e = "bfq,timeout_sync=125".parse::<mqblk::Sched>().unwrap_err().to_string();
    assert!(e.contains("timeout_sync"), "{e}");
    let bad = mqblk::Sched::MqDeadline(mqblk::sched::DeadlineTunables::default().fifo_batch(0));
    let e = dev.set_scheduler(bad).unwrap_err().to_string();
    assert!(e.contains("fifo_batch"), "{e}");
    assert_eq!(dev.scheduler(), "none", "a refused switch changes nothing");
}

#[test]
fn sched_options_are_checked_in_specs() {
    let e = open("ram:sched=cfq").unwrap_err().to_string();
    assert!(e.contains("cfq") && e.contains("bfq"), "{e}");
    let e = open("ram:sched=mq-deadline,fifo_batch=0").unwrap_err().to_string();
    assert!(e.contains("fifo_batch"), "{e}");
    let dev = open("ram:sched=kyber,nr_requests=32").unwrap();
    assert_eq!(dev.scheduler(), "kyber");
    assert!(dev.show_stats().contains("sched/kyber"), "{}", dev.show_stats());
    let _ = SpecParams::parse("x:a=1").unwrap();
}

/// Plugged batches of adjacent writes through each scheduler: the plug
/// merges, the flush inserts each batch in one call, the scheduler may
/// merge more; every bio completes once and the data reads back.
#[test]
fn plugged_batches_through_each_scheduler() {
    // Fewer batches and smaller blocks under Miri, where each bio costs
    // thousands of interpreted steps (a batch still merges into one
    // request of 8 blocks).
    const BATCHES: u64 = if cfg!(miri) { 2 } else { 50 };
    const BLOCK: usize = if cfg!(miri) { 512 } else { 4096 };
    let schedulers: &[&str] = if cfg!(miri) { &MIRI_SCHEDULERS_PLUGGED } else { &SCHEDULERS };
    for &sched in schedulers {
        let dev = open(&format!("ram:gb=1,irqmode=1,memory_backed=1,hw_queue_depth=4,sched={sched}")).unwrap();
        let threads: Vec<_> = (0..3u64)
            .map(|t| {
                let dev = dev.clone();
                std::thread::spawn(move || {
                    let mut c = dev.client_with_capacity(64);
                    let mut done = Vec::new();
                    for batch in 0..BATCHES {
                        {
                            let mut plug = c.plug_nr_ios(8);
                            for i in 0..8u64 {
                                let block = t * 100_000 + batch * 8 + i;
                                let byte = (block % 251) as u8;
                                let bio = Bio::write(block * BLOCK as u64, Buf::from_slice(&[byte; BLOCK]));
                                plug.submit(bio, block).unwrap();
                            }
                        }
                        done.clear();
                        c.do_io(&mut done, 8, 64, Some(Duration::from_secs(30))).unwrap();
                        assert!(done.iter().all(|d| d.status.is_ok()));
                        let mut ids: Vec<u64> = done.iter().map(|d| d.user_data).collect();
                        ids.sort_unstable();
                        let want: Vec<u64> = (0..8).map(|i| t * 100_000 + batch * 8 + i).collect();
                        assert_eq!(ids, want, "{}: each bio of the batch completes once", dev.scheduler());
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        let s = dev.stats();
        assert_eq!(s.bios.write, 3 * BATCHES * 8, "{sched}");
        assert!(s.merges.write >= 3 * BATCHES * 7 / 2, "{sched}: plugs merged most of each batch: {s:?}");
        assert_eq!(dev.busy_tags(), 0, "{sched}");
        let mut c = dev.client();
        let mut back = vec![0u8; BLOCK];
        for block in [0u64, 7, 100_000 + BATCHES * 4 - 1, 200_000 + BATCHES * 8 - 1] {
            c.read_at(&mut back, block * BLOCK as u64).unwrap();
            assert!(filled(&back, (block % 251) as u8), "{sched}: block {block}");
        }
    }
}
