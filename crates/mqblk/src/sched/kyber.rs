//! kyber (block/kyber-iosched.c): requests are sorted into four domains,
//! read, write, discard and other, each with a FIFO and a number of
//! dispatch tokens (its depth: 256, 128, 64, 16 at most). A request is
//! dispatched only with a token of its domain, held until it completes.
//! The depths follow measured latency: every 100 ms, a domain whose 90th
//! percentile completion latency exceeded its target (read_lat_nsec 2 ms,
//! write_lat_nsec 10 ms; discard 5 s, other 10 ms) is throttled to 3/4 of
//! its depth, and one within target grows by a quarter again, up to its
//! maximum. Domains are served round robin. Async I/O may hold at most 75%
//! of the scheduler tags.
//!
//! This is the kernel's design with a simpler controller: the kernel
//! scales all domains from the read latency's p99 and each from its own
//! p90 histogram buckets; here each domain scales from its own p90.

use std::collections::VecDeque;
use std::fmt::Write as _;

use super::{DoneInfo, Elevator, KyberTunables, RqTable};
use crate::clock::now_ns;
use crate::request::{op_is_sync, Op, ReqFlags, Rq, RqList};
use crate::sync::{AtomicU32, Mutex, Ordering};

const DOMAINS: usize = 4;
const DOMAIN_NAMES: [&str; DOMAINS] = ["read", "write", "discard", "other"];
const MAX_DEPTH: [u32; DOMAINS] = [256, 128, 64, 16];
const WINDOW_NS: u64 = 100_000_000;
/// Latency samples kept per domain and window (older ones are dropped).
const SAMPLES: usize = 256;

fn domain_of(op: Op) -> usize {
    match op {
        Op::Read => 0,
        Op::Write => 1,
        Op::Discard => 2,
        _ => 3, // flush, write zeroes, zone ops: "other"
    }
}

struct Domain {
    fifo: VecDeque<u32>,
    depth: u32,
    in_flight: u32,
    /// Completion latencies of this window (ns).
    samples: Vec<u64>,
}

struct HctxState {
    domains: [Domain; DOMAINS],
    rqs: RqTable,
    /// Round-robin position.
    next_domain: usize,
    window_start_ns: u64,
}

pub struct Kyber {
    target_ns: [u64; DOMAINS],
    async_depth: u32,
    hctxs: Box<[(Mutex<HctxState>, AtomicU32)]>,
}

impl Kyber {
    pub fn new(nr_hw_queues: usize, nr_requests: u32, t: &KyberTunables) -> Self {
        let target_ns = [t.read_lat_nsec, t.write_lat_nsec, 5_000_000_000, 10_000_000];
        let cap = nr_requests as usize;
        let hctxs = (0..nr_hw_queues)
            .map(|_| {
                let domain = |d: usize| Domain {
                    fifo: VecDeque::with_capacity(cap),
                    depth: MAX_DEPTH[d],
                    in_flight: 0,
                    samples: Vec::with_capacity(SAMPLES),
                };
                let state = HctxState {
                    domains: [domain(0), domain(1), domain(2), domain(3)],
                    rqs: RqTable::new(nr_requests),
                    next_domain: 0,
                    window_start_ns: now_ns(),
                };
                (Mutex::new(state), AtomicU32::new(0))
            })
            .collect();
        // KYBER_ASYNC_PERCENT: async requests get 75% of the tags.
        Self { target_ns, async_depth: (nr_requests * 3 / 4).max(1), hctxs }
    }

    /// End of a window: scale each domain's depth by its p90 latency.
    fn adjust(&self, st: &mut HctxState, now: u64) {
        st.window_start_ns = now;
        for (d, dom) in st.domains.iter_mut().enumerate() {
            if dom.samples.is_empty() {
                continue;
            }
            let n = dom.samples.len();
            let (_, p90, _) = dom.samples.select_nth_unstable((n * 9 / 10).min(n - 1));
            dom.depth = if *p90 > self.target_ns[d] {
                (dom.depth * 3 / 4).max(1)
            } else {
                (dom.depth + dom.depth.div_ceil(4)).min(MAX_DEPTH[d])
            };
            dom.samples.clear();
        }
    }
}

impl Elevator for Kyber {
    fn limit_depth(&self, _hctx: usize, op: Op, flags: ReqFlags) -> Option<u32> {
        (!op_is_sync(op, flags)).then_some(self.async_depth)
    }

    fn min_shallow_depth(&self) -> u32 {
        self.async_depth
    }

    fn dispatch_direct(&self, hctx: usize, mut rq: Rq) -> Result<Rq, Rq> {
        let mut st = self.hctxs[hctx].0.lock();
        let dom = &mut st.domains[domain_of(rq.op())];
        if !dom.fifo.is_empty() || dom.in_flight >= dom.depth {
            return Err(rq);
        }
        dom.in_flight += 1; // its token, returned by finish_request
        rq.rq_mut().sched_time_ns = now_ns();
        Ok(rq)
    }

    fn insert_requests(&self, hctx: usize, rqs: &mut RqList) {
        let (lock, queued) = &self.hctxs[hctx];
        let mut st = lock.lock();
        let n = rqs.len() as u32;
        let now = now_ns();
        for mut rq in rqs {
            rq.rq_mut().sched_time_ns = now;
            let d = domain_of(rq.op());
            let tag = st.rqs.put(rq);
            st.domains[d].fifo.push_back(tag);
        }
        queued.fetch_add(n, Ordering::SeqCst);
    }

    fn dispatch_request(&self, hctx: usize) -> Option<Rq> {
        let (lock, queued) = &self.hctxs[hctx];
        let mut st = lock.lock();
        for i in 0..DOMAINS {
            let d = (st.next_domain + i) % DOMAINS;
            let dom = &mut st.domains[d];
            if dom.fifo.is_empty() || dom.in_flight >= dom.depth {
                continue;
            }
            let tag = dom.fifo.pop_front().expect("checked");
            dom.in_flight += 1;
            st.next_domain = (d + 1) % DOMAINS;
            queued.fetch_sub(1, Ordering::SeqCst);
            return Some(st.rqs.take(tag));
        }
        None
    }

    fn has_work(&self, hctx: usize) -> bool {
        // Queued requests whose domains are out of tokens are not work
        // until a completion returns a token, which runs the queue again.
        if self.hctxs[hctx].1.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let st = self.hctxs[hctx].0.lock();
        st.domains.iter().any(|d| !d.fifo.is_empty() && d.in_flight < d.depth)
    }

    fn finish_request(&self, hctx: usize, done: &DoneInfo) {
        let now = now_ns();
        let mut st = self.hctxs[hctx].0.lock();
        let dom = &mut st.domains[domain_of(done.op)];
        dom.in_flight -= 1;
        if dom.samples.len() < SAMPLES {
            dom.samples.push(now.saturating_sub(done.inserted_ns));
        }
        if now >= st.window_start_ns + WINDOW_NS {
            self.adjust(&mut st, now);
        }
    }

    fn show(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "sched/kyber read_lat_nsec={} write_lat_nsec={} async_depth={}",
            self.target_ns[0], self.target_ns[1], self.async_depth
        );
        for (i, (lock, _)) in self.hctxs.iter().enumerate() {
            let st = lock.lock();
            for (d, dom) in st.domains.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "sched/hctx{i}/{} depth={} in_flight={} queued={}",
                    DOMAIN_NAMES[d],
                    dom.depth,
                    dom.in_flight,
                    dom.fifo.len()
                );
            }
        }
    }
}
