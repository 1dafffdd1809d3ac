//! mq-deadline (block/mq-deadline.c): per direction, requests sorted by
//! sector and a FIFO by deadline. Dispatch runs in batches of up to
//! `fifo_batch` requests in one direction, in sector order; reads are
//! preferred unless writes have been passed over `writes_starved` times;
//! a batch starts at the FIFO head when that request's deadline has passed.
//! Async I/O and writes may hold at most `async_depth` scheduler tags
//! (3/4 of nr_requests by default), so sync reads always find one.
//!
//! Tunables (kernel names and defaults): read_expire=500 (ms),
//! write_expire=5000 (ms), writes_starved=2, fifo_batch=16, front_merges=1,
//! async_depth=3/4 of nr_requests. One priority level: the kernel's
//! per-class queues (RT/BE/IDLE) are not modelled.
//!
//! No allocation per I/O: the sorted lists and FIFOs are vectors with room
//! for every scheduler tag, and requests wait in an `RqTable`.

use std::collections::VecDeque;
use std::fmt::Write as _;

use super::{BioPos, DeadlineTunables, Elevator, MergeKind, RqTable};
use crate::clock::coarse_now_ns as now_ns;
use crate::config::ConfigError;
use crate::request::{op_is_sync, Op, ReqFlags, Rq, RqList};
use crate::sync::{AtomicU32, Mutex, Ordering};

const READ: usize = 0;
const WRITE: usize = 1;

fn dir_of(op: Op) -> usize {
    usize::from(op != Op::Read && op != Op::Flush)
}

/// One direction's queued requests.
struct DirQueue {
    /// (start sector, scheduler tag), sorted.
    sorted: Vec<(u64, u32)>,
    /// (deadline ns, scheduler tag, generation), in insertion order
    /// (deadlines grow). Entries of requests dispatched in sector order are
    /// left in place and dropped when they reach the head (their
    /// generation no longer matches): no removal from the middle.
    fifo: VecDeque<(u64, u32, u32)>,
    /// Where the current batch continues: the end sector of the last
    /// request dispatched in this direction.
    next_sector: Option<u64>,
}

impl DirQueue {
    fn new(cap: usize) -> Self {
        Self { sorted: Vec::with_capacity(cap), fifo: VecDeque::with_capacity(cap), next_sector: None }
    }

    fn insert_sorted(&mut self, sector: u64, tag: u32) {
        let at = self.sorted.partition_point(|&e| e < (sector, tag));
        self.sorted.insert(at, (sector, tag));
    }

    fn remove_sorted(&mut self, sector: u64, tag: u32) {
        let at = self.sorted.partition_point(|&e| e < (sector, tag));
        assert_eq!(self.sorted.get(at), Some(&(sector, tag)), "mq-deadline: sorted list lost a request");
        self.sorted.remove(at);
    }

    /// The oldest queued request's (deadline, tag), dropping stale entries.
    fn fifo_head(&mut self, gens: &[u32]) -> Option<(u64, u32)> {
        while let Some(&(deadline, tag, gen)) = self.fifo.front() {
            if gens[tag as usize] == gen {
                return Some((deadline, tag));
            }
            self.fifo.pop_front();
        }
        None
    }

    /// Keeps stale entries from piling up behind a long-lived head.
    fn compact_fifo(&mut self, gens: &[u32], cap: usize) {
        if self.fifo.len() > 2 * cap {
            self.fifo.retain(|&(_, tag, gen)| gens[tag as usize] == gen);
        }
    }
}

struct HctxState {
    dirs: [DirQueue; 2],
    rqs: RqTable,
    /// Per scheduler tag: start sector of the queued request.
    meta: Vec<u64>,
    /// Per scheduler tag: generation of its FIFO entry while queued (odd),
    /// bumped when it leaves (even), so stale FIFO entries are recognised.
    gens: Vec<u32>,
    batching: u32,
    last_dir: usize,
    starved: u32,
}

struct Tunables {
    /// async_depth was given: depth updates leave it alone.
    async_depth_set: bool,
    read_expire_ns: u64,
    write_expire_ns: u64,
    writes_starved: u32,
    fifo_batch: u32,
    front_merges: bool,
    async_depth: AtomicU32,
}

pub struct MqDeadline {
    t: Tunables,
    hctxs: Box<[Mutex<HctxState>]>,
}

impl MqDeadline {
    pub fn new(nr_hw_queues: usize, nr_requests: u32, tunables: &DeadlineTunables) -> Result<Self, ConfigError> {
        let ms = 1_000_000;
        if tunables.async_depth > nr_requests {
            return Err(ConfigError::BadValue {
                driver: "mq-deadline".into(),
                key: "async_depth".into(),
                value: tunables.async_depth.to_string(),
                expected: format!("an integer in 1..={nr_requests} (nr_requests), or 0 for 3/4 of it"),
            });
        }
        let t = Tunables {
            async_depth_set: tunables.async_depth > 0,
            read_expire_ns: tunables.read_expire * ms,
            write_expire_ns: tunables.write_expire * ms,
            writes_starved: tunables.writes_starved,
            fifo_batch: tunables.fifo_batch,
            front_merges: tunables.front_merges,
            async_depth: AtomicU32::new(match tunables.async_depth {
                0 => (3 * nr_requests / 4).max(1),
                depth => depth,
            }),
        };
        let cap = nr_requests as usize;
        let hctxs = (0..nr_hw_queues)
            .map(|_| {
                let state = HctxState {
                    dirs: [DirQueue::new(cap), DirQueue::new(cap)],
                    rqs: RqTable::new(nr_requests),
                    meta: vec![0; cap],
                    gens: vec![0; cap],
                    batching: 0,
                    last_dir: READ,
                    starved: 0,
                };
                Mutex::new(state)
            })
            .collect();
        Ok(Self { t, hctxs })
    }

    fn insert_one(&self, st: &mut HctxState, rq: Rq, now: u64) {
        let dir = dir_of(rq.op());
        let expire = if dir == READ { self.t.read_expire_ns } else { self.t.write_expire_ns };
        // Deadlines never decrease along a FIFO (clock reads of different
        // threads may interleave), so it stays sorted for removal.
        let last = st.dirs[dir].fifo.back().map_or(0, |e| e.0);
        let (sector, deadline) = (rq.sector(), (now + expire).max(last));
        let tag = st.rqs.put(rq);
        st.meta[tag as usize] = sector;
        st.gens[tag as usize] = st.gens[tag as usize].wrapping_add(1);
        let gen = st.gens[tag as usize];
        st.dirs[dir].insert_sorted(sector, tag);
        st.dirs[dir].compact_fifo(&st.gens, st.meta.len());
        st.dirs[dir].fifo.push_back((deadline, tag, gen));
    }

    /// Removes `tag` from the sorted list (its FIFO entry goes stale) and
    /// hands its request out.
    fn take(st: &mut HctxState, dir: usize, tag: u32) -> Rq {
        let sector = st.meta[tag as usize];
        st.dirs[dir].remove_sorted(sector, tag);
        st.gens[tag as usize] = st.gens[tag as usize].wrapping_add(1);
        st.rqs.take(tag)
    }

    /// The request a batch in `dir` continues with: the first at or after
    /// the last one's end, in sector order.
    fn next_in_batch(st: &HctxState, dir: usize) -> Option<u32> {
        let q = &st.dirs[dir];
        let from = q.next_sector?;
        q.sorted.get(q.sorted.partition_point(|&(s, _)| s < from)).map(|&(_, tag)| tag)
    }

    fn choose(&self, st: &mut HctxState) -> Option<(usize, u32)> {
        if st.batching < self.t.fifo_batch {
            if let Some(tag) = Self::next_in_batch(st, st.last_dir) {
                return Some((st.last_dir, tag));
            }
        }
        let (reads, writes) = (!st.dirs[READ].sorted.is_empty(), !st.dirs[WRITE].sorted.is_empty());
        let dir = if reads {
            if writes && st.starved >= self.t.writes_starved {
                WRITE
            } else {
                if writes {
                    st.starved += 1;
                }
                READ
            }
        } else if writes {
            WRITE
        } else {
            return None;
        };
        if dir == WRITE {
            st.starved = 0;
        }
        st.batching = 0;
        st.last_dir = dir;
        let (deadline, head) = st.dirs[dir].fifo_head(&st.gens).expect("a non-empty direction has a FIFO head");
        let q = &st.dirs[dir];
        // A new batch starts at the FIFO head if it expired, else where the
        // last batch of this direction left off (or the lowest sector).
        // The clock is read only here, when a batch starts.
        let tag = if deadline <= now_ns() { head } else { Self::next_in_batch(st, dir).unwrap_or(q.sorted[0].1) };
        Some((dir, tag))
    }
}

impl Elevator for MqDeadline {
    fn limit_depth(&self, _hctx: usize, op: Op, flags: ReqFlags) -> Option<u32> {
        // Sync reads are never throttled; async I/O and writes are.
        if op_is_sync(op, flags) && dir_of(op) == READ {
            None
        } else {
            Some(self.t.async_depth.load(Ordering::Relaxed))
        }
    }

    fn min_shallow_depth(&self) -> u32 {
        self.t.async_depth.load(Ordering::Relaxed)
    }

    fn depth_updated(&self, nr_requests: u32) {
        if !self.t.async_depth_set {
            self.t.async_depth.store((3 * nr_requests / 4).max(1), Ordering::Relaxed);
        }
    }

    fn dispatch_direct(&self, hctx: usize, rq: Rq) -> Result<Rq, Rq> {
        let mut st = self.hctxs[hctx].lock();
        if !st.dirs[READ].sorted.is_empty() || !st.dirs[WRITE].sorted.is_empty() {
            return Err(rq);
        }
        // The only request: it would start (or continue) a batch in its
        // direction, exactly as `dispatch_request` would record it.
        let dir = dir_of(rq.op());
        if dir != st.last_dir || st.batching >= self.t.fifo_batch {
            st.batching = 0;
            st.last_dir = dir;
            if dir == WRITE {
                st.starved = 0;
            }
        }
        st.batching += 1;
        st.dirs[dir].next_sector = Some(rq.sector() + u64::from(rq.nr_sectors()));
        Ok(rq)
    }

    fn insert_requests(&self, hctx: usize, rqs: &mut RqList) {
        let mut st = self.hctxs[hctx].lock();
        let now = now_ns();
        for rq in rqs {
            self.insert_one(&mut st, rq, now);
        }
    }

    fn dispatch_request(&self, hctx: usize) -> Option<Rq> {
        let mut st = self.hctxs[hctx].lock();
        let (dir, tag) = self.choose(&mut st)?;
        let rq = Self::take(&mut st, dir, tag);
        st.batching += 1;
        st.dirs[dir].next_sector = Some(rq.sector() + u64::from(rq.nr_sectors()));
        Some(rq)
    }

    fn has_work(&self, _hctx: usize) -> bool {
        true // every queued request can be dispatched
    }

    fn bio_merge(&self, hctx: usize, bio: &BioPos, attach: &mut dyn FnMut(&mut Rq, MergeKind) -> bool) -> bool {
        let mut st = self.hctxs[hctx].lock();
        let st = &mut *st;
        let dir = dir_of(bio.op);
        let sorted = &st.dirs[dir].sorted;
        // Back merge: the request starting last before the bio may end at it.
        let at = sorted.partition_point(|&(s, _)| s < bio.sector);
        if at > 0 {
            let tag = sorted[at - 1].1;
            let rq = st.rqs.get_mut(tag);
            if rq.sector() + u64::from(rq.nr_sectors()) == bio.sector && attach(rq, MergeKind::Back) {
                return true;
            }
        }
        if !self.t.front_merges {
            return false;
        }
        let end = bio.sector + u64::from(bio.nr_sectors);
        let sorted = &st.dirs[dir].sorted;
        let at = sorted.partition_point(|&(s, _)| s < end);
        let Some(&(start, tag)) = sorted.get(at) else { return false };
        if start != end || !attach(st.rqs.get_mut(tag), MergeKind::Front) {
            return false;
        }
        // The request now starts at the bio: keep the list sorted.
        st.dirs[dir].remove_sorted(start, tag);
        st.dirs[dir].insert_sorted(bio.sector, tag);
        st.meta[tag as usize] = bio.sector;
        true
    }

    fn show(&self, out: &mut String) {
        let t = &self.t;
        let _ = writeln!(
            out,
            "sched/mq-deadline read_expire={} write_expire={} writes_starved={} fifo_batch={} front_merges={} async_depth={}",
            t.read_expire_ns / 1_000_000,
            t.write_expire_ns / 1_000_000,
            t.writes_starved,
            t.fifo_batch,
            u8::from(t.front_merges),
            t.async_depth.load(Ordering::Relaxed)
        );
        for (i, lock) in self.hctxs.iter().enumerate() {
            let st = lock.lock();
            let _ = writeln!(
                out,
                "sched/hctx{i} reads={} writes={} starved={}",
                st.dirs[READ].sorted.len(),
                st.dirs[WRITE].sorted.len(),
                st.starved
            );
        }
    }
}
