//! bfq, the Budget Fair Queueing scheduler (block/bfq-iosched.c), in its
//! essentials: each client (the kernel's process) has a sync and an async
//! queue; queues are served one at a time, each for a budget of sectors,
//! in the order of a B-WF2Q+ virtual-time schedule, so that each busy queue
//! gets service in proportion to its weight (from its I/O priority: (8 -
//! level) x 10, the RT class before best effort before idle).
//!
//! Low latency (`low_latency=1`): a sync queue that becomes busy for the
//! first time, or after being idle at least `wr_min_idle_time` ms, is
//! weight-raised (weight x 30) for `wr_max_time` ms (the interactive
//! heuristic: an application starting), and preempts an in-service queue
//! that is not raised.
//!
//! Depth limits ("bfq: limit tags for writes and async I/O"; `limit_depths=1`, mqblk's switch): sync reads
//! are never limited; async I/O may hold at most 50% of the scheduler tags
//! and sync writes 75%; while any queue is weight-raised, 3/16 and 6/16.
//!
//! Idling (`slice_idle`, 8 ms): when a weight-raised sync queue in service
//! runs empty, the device waits for its next request instead of serving
//! others: until its requests in flight complete, then up to slice_idle
//! (the kernel's idle slice hrtimer, armed at completion in
//! bfq_completed_request; the kernel idles in more cases). The timer is
//! `next_dispatch_ns`: the framework runs the queue when it expires, so
//! nothing waits for any periodic tick.
//!
//! Simplifications, stated: budgets do not adapt (a fixed `max_budget`,
//! with the kernel's 125 ms budget timeout), queues are per hardware queue,
//! and bios are not merged into queued requests.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;

mod queue;

use queue::*;

use super::{BfqTunables, DoneInfo, Elevator, RqTable};
use crate::clock::now_ns;
use crate::request::{op_is_sync, IoPrio, Op, ReqFlags, Rq, RqList};
use crate::sync::{AtomicU32, Mutex, Ordering};

struct Tunables {
    low_latency: bool,
    limit_depths: bool,
    max_budget: u64,
    wr_max_time_ns: u64,
    wr_min_idle_ns: u64,
    slice_idle_ns: u64,
}

pub struct Bfq {
    t: Tunables,
    nr_requests: u32,
    /// Busy weight-raised queues over the device (for the depth limits).
    wr_busy: AtomicU32,
    hctxs: Box<[Mutex<HctxState>]>,
}

impl Bfq {
    pub fn new(nr_hw_queues: usize, nr_requests: u32, tunables: &BfqTunables) -> Self {
        let ms = 1_000_000;
        let t = Tunables {
            low_latency: tunables.low_latency,
            limit_depths: tunables.limit_depths,
            max_budget: tunables.max_budget,
            wr_max_time_ns: tunables.wr_max_time * ms,
            wr_min_idle_ns: tunables.wr_min_idle_time * ms,
            slice_idle_ns: tunables.slice_idle * ms,
        };
        let hctxs = (0..nr_hw_queues)
            .map(|_| {
                let state = HctxState {
                    queues: Vec::new(),
                    by_owner: HashMap::new(),
                    rqs: RqTable::new(nr_requests),
                    vtime: 0,
                    busy_weight: 0,
                    in_service: None,
                    budget_left: 0,
                    service_start_ns: 0,
                    idle_until_ns: 0,
                    idle_expired: 0,
                    burst: Burst::default(),
                };
                Mutex::new(state)
            })
            .collect();
        Self { t, nr_requests, wr_busy: AtomicU32::new(0), hctxs }
    }

    fn budget_vtime(&self, weight: u64) -> u64 {
        (self.t.max_budget << V_SHIFT) / weight.max(1)
    }

    fn queue_index(st: &mut HctxState, client_id: u32, sync: bool, ioprio: IoPrio) -> usize {
        if let Some(&i) = st.by_owner.get(&(client_id, sync)) {
            return i;
        }
        st.queues.push(BfqQueue {
            client_id,
            sync,
            class: ioprio.class,
            weight: weight_of(ioprio),
            fifo: VecDeque::new(),
            busy: false,
            ever_busy: false,
            idle_since_ns: 0,
            wr_until_ns: 0,
            start: 0,
            finish: 0,
            served_sectors: 0,
            in_flight: 0,
            ttime: ThinkTime::default(),
            in_large_burst: false,
        });
        st.by_owner.insert((client_id, sync), st.queues.len() - 1);
        st.queues.len() - 1
    }

    /// A queue gets its first request: schedule it, weight-raise it if it
    /// looks interactive, and let it preempt a queue that is not raised.
    fn activate(&self, st: &mut HctxState, i: usize, now: u64) {
        if st.queues[i].sync && !st.queues[i].ever_busy {
            self.handle_burst(st, i, now);
        }
        let q = &mut st.queues[i];
        let interactive = q.sync
            && self.t.low_latency
            && !q.in_large_burst
            && (!q.ever_busy || now.saturating_sub(q.idle_since_ns) >= self.t.wr_min_idle_ns);
        if interactive && !q.raised() {
            q.wr_until_ns = now + self.t.wr_max_time_ns;
        }
        if q.raised() {
            self.wr_busy.fetch_add(1, Ordering::SeqCst);
        }
        q.busy = true;
        q.ever_busy = true;
        q.start = st.vtime.max(q.finish);
        q.finish = q.start + self.budget_vtime(q.eff_weight());
        st.busy_weight += q.eff_weight();
        let raised = q.raised();
        if let Some(s) = st.in_service {
            if raised && s != i && !st.queues[s].raised() {
                self.expire(st, now); // preempted
            }
        }
    }

    /// A sync queue starts for the first time: it joins the current burst
    /// or starts a new one; when the burst grows large its members lose
    /// their raising.
    fn handle_burst(&self, st: &mut HctxState, i: usize, now: u64) {
        let b = &mut st.burst;
        if now.saturating_sub(b.last_ns) > BURST_INTERVAL_NS {
            b.members.clear();
            b.large = false;
        }
        b.last_ns = now;
        if b.large {
            st.queues[i].in_large_burst = true;
            return;
        }
        b.members.push(i);
        if b.members.len() < LARGE_BURST {
            return;
        }
        b.large = true;
        for m in std::mem::take(&mut st.burst.members) {
            st.queues[m].in_large_burst = true;
            self.unraise(st, m);
        }
    }

    /// Ends queue `i`'s weight raising.
    fn unraise(&self, st: &mut HctxState, i: usize) {
        let q = &mut st.queues[i];
        if !q.raised() {
            return;
        }
        if q.busy {
            st.busy_weight -= q.eff_weight();
            self.wr_busy.fetch_sub(1, Ordering::SeqCst);
        }
        q.wr_until_ns = 0;
        if q.busy {
            st.busy_weight += q.eff_weight();
        }
    }

    fn deactivate(&self, st: &mut HctxState, i: usize, now: u64) {
        let q = &mut st.queues[i];
        debug_assert!(q.busy && q.fifo.is_empty());
        q.busy = false;
        q.idle_since_ns = now;
        st.busy_weight -= q.eff_weight();
        if q.raised() {
            self.wr_busy.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Ends weight raising of busy queues whose time is up.
    fn end_raising(&self, st: &mut HctxState, now: u64) {
        for i in 0..st.queues.len() {
            if st.queues[i].raised() && st.queues[i].wr_until_ns <= now {
                self.unraise(st, i);
            }
        }
    }

    /// The in-service queue's turn ends: it is rescheduled if still busy.
    fn expire(&self, st: &mut HctxState, now: u64) {
        let Some(i) = st.in_service.take() else { return };
        if st.queues[i].fifo.is_empty() {
            if st.queues[i].busy {
                self.deactivate(st, i, now);
            }
            return;
        }
        let w = st.queues[i].eff_weight();
        let q = &mut st.queues[i];
        q.start = q.finish.max(st.vtime);
        q.finish = q.start + (self.t.max_budget << V_SHIFT) / w.max(1);
    }

    /// B-WF2Q+: among the busy queues of the best class, the eligible one
    /// (start <= virtual time) with the smallest finish; if none is
    /// eligible, virtual time jumps to the smallest start.
    fn select(st: &mut HctxState) -> Option<usize> {
        let class = st.queues.iter().filter(|q| q.busy).map(|q| q.class).min()?;
        let candidates = || st.queues.iter().enumerate().filter(|(_, q)| q.busy && q.class == class);
        let min_start = candidates().map(|(_, q)| q.start).min()?;
        let vtime = st.vtime.max(min_start);
        let (i, _) = candidates().filter(|(_, q)| q.start <= vtime).min_by_key(|(_, q)| q.finish)?;
        st.vtime = vtime;
        Some(i)
    }

    /// Whether queue `q`, just emptied, may keep the device while its
    /// requests are in flight and then for an idle slice: a weight-raised
    /// sync queue whose next request comes soon (a reader at queue depth 1).
    fn may_idle(&self, q: &BfqQueue) -> bool {
        q.sync && q.raised() && self.t.slice_idle_ns > 0 && q.ttime.short(self.t.slice_idle_ns)
    }

    /// Whether the idle slice starts when queue `i`'s last request
    /// completes: it may idle, and a queue that is not raised is busy.
    /// Idling is what keeps that one from taking the device between the
    /// raised queue's requests (the kernel's
    /// idling_needed_for_service_guarantees; on a non-rotational queueing
    /// device idling buys no throughput, so that is its only reason).
    fn idles_for(&self, st: &HctxState, i: usize) -> bool {
        self.may_idle(&st.queues[i]) && st.queues.iter().any(|o| o.busy && !o.raised())
    }

    /// A request (by its tag in `rqs`) joins its owner's queue.
    fn enqueue(&self, st: &mut HctxState, (client_id, sync, ioprio): (u32, bool, IoPrio), tag: u32, now: u64) {
        let i = Self::queue_index(st, client_id, sync, ioprio);
        let q = &mut st.queues[i];
        if q.in_flight == 0 && q.fifo.is_empty() && q.ttime.last_end_ns != 0 {
            let elapsed = now.saturating_sub(q.ttime.last_end_ns);
            q.ttime.sample(elapsed.min(2 * self.t.slice_idle_ns));
        }
        st.queues[i].fifo.push_back(tag);
        if !st.queues[i].busy {
            self.activate(st, i, now);
        }
    }

    /// The next request to dispatch at `now` (its tag and sectors, read by
    /// `sectors_of`), or None while the in-service queue idles.
    fn next_request(
        &self,
        st: &mut HctxState,
        now: u64,
        sectors_of: impl Fn(&mut HctxState, u32) -> u32,
    ) -> Option<(u32, u32)> {
        self.end_raising(st, now);
        if let Some(i) = st.in_service {
            let timed_out = now.saturating_sub(st.service_start_ns) >= BUDGET_TIMEOUT_NS;
            if st.queues[i].fifo.is_empty() && !timed_out && st.idle_until_ns > now {
                return None; // idling: the device waits for this queue's next request
            }
            if st.queues[i].fifo.is_empty() && st.idle_until_ns != 0 {
                st.idle_expired += 1;
            }
            if st.queues[i].fifo.is_empty() || st.budget_left <= 0 || timed_out {
                self.expire(st, now);
            }
        }
        st.idle_until_ns = 0;
        let i = match st.in_service {
            Some(i) => i,
            None => {
                let i = Self::select(st)?;
                st.in_service = Some(i);
                st.budget_left = self.t.max_budget as i64;
                st.service_start_ns = now;
                i
            }
        };
        let tag = st.queues[i].fifo.pop_front().expect("the in-service queue has a request");
        let nr_sectors = sectors_of(st, tag);
        let sectors = u64::from(nr_sectors).max(1);
        st.budget_left -= sectors as i64;
        st.queues[i].served_sectors += sectors;
        st.queues[i].in_flight += 1;
        // System virtual time advances by service over the busy weight.
        st.vtime += (sectors << V_SHIFT) / st.busy_weight.max(1);
        if st.queues[i].fifo.is_empty() {
            if self.may_idle(&st.queues[i]) {
                st.idle_until_ns = IDLE_AFTER_COMPLETION;
            } else {
                self.expire(st, now);
            }
        }
        Some((tag, nr_sectors))
    }

    /// A request of (`client_id`, `sync`) completed at `now`: if it was the
    /// last in flight of the in-service queue waiting to idle, the idle
    /// slice timer starts.
    fn completed(&self, st: &mut HctxState, client_id: u32, sync: bool, now: u64) {
        let Some(&i) = st.by_owner.get(&(client_id, sync)) else { return };
        let q = &mut st.queues[i];
        q.in_flight = q.in_flight.saturating_sub(1);
        q.ttime.last_end_ns = now;
        let last = q.in_flight == 0 && q.fifo.is_empty();
        if last && st.in_service == Some(i) && st.idle_until_ns == IDLE_AFTER_COMPLETION {
            if self.idles_for(st, i) {
                st.idle_until_ns = now + self.t.slice_idle_ns;
            } else {
                st.idle_until_ns = 0;
                self.expire(st, now);
            }
        }
    }

    fn depth_share(&self, num: u32, den: u32) -> u32 {
        (self.nr_requests * num / den).max(1)
    }
}

impl Elevator for Bfq {
    fn limit_depth(&self, _hctx: usize, op: Op, flags: ReqFlags) -> Option<u32> {
        let sync = op_is_sync(op, flags);
        if !self.t.limit_depths || (sync && matches!(op, Op::Read | Op::Flush)) {
            return None;
        }
        let raised = self.wr_busy.load(Ordering::Relaxed) > 0;
        Some(match (sync, raised) {
            (false, false) => self.depth_share(1, 2),
            (true, false) => self.depth_share(3, 4),
            (false, true) => self.depth_share(3, 16),
            (true, true) => self.depth_share(6, 16),
        })
    }

    fn min_shallow_depth(&self) -> u32 {
        self.depth_share(3, 16)
    }

    fn insert_requests(&self, hctx: usize, rqs: &mut RqList) {
        let now = now_ns();
        let mut st = self.hctxs[hctx].lock();
        for rq in rqs {
            let (client_id, sync, ioprio) = (rq.client_id(), op_is_sync(rq.op(), rq.flags()), rq.ioprio());
            let tag = st.rqs.put(rq);
            self.enqueue(&mut st, (client_id, sync, ioprio), tag, now);
        }
    }

    fn dispatch_request(&self, hctx: usize) -> Option<Rq> {
        let mut st = self.hctxs[hctx].lock();
        let (tag, _sectors) = self.next_request(&mut st, now_ns(), |st, tag| st.rqs.get_mut(tag).nr_sectors())?;
        Some(st.rqs.take(tag))
    }

    fn finish_request(&self, hctx: usize, done: &DoneInfo) {
        let mut st = self.hctxs[hctx].lock();
        self.completed(&mut st, done.client_id, done.is_sync(), now_ns());
    }

    fn next_dispatch_ns(&self, hctx: usize) -> Option<u64> {
        let st = self.hctxs[hctx].lock();
        // While waiting for completions no timer runs: the completion
        // restarts the queue.
        (st.idle_until_ns != 0).then_some(st.idle_until_ns)
    }

    fn has_work(&self, _hctx: usize) -> bool {
        // Queued requests are dispatchable, except while idling, when
        // `dispatch_request` says no and the framework retries later.
        true
    }

    fn show(&self, out: &mut String) {
        let t = &self.t;
        let _ = writeln!(
            out,
            "sched/bfq low_latency={} limit_depths={} max_budget={} wr_max_time={} wr_busy={}",
            u8::from(t.low_latency),
            u8::from(t.limit_depths),
            t.max_budget,
            t.wr_max_time_ns / 1_000_000,
            self.wr_busy.load(Ordering::Relaxed)
        );
        for (h, lock) in self.hctxs.iter().enumerate() {
            let st = lock.lock();
            let _ = writeln!(out, "sched/hctx{h}/idle_expired={}", st.idle_expired);
            for q in &st.queues {
                let _ = writeln!(
                    out,
                    "sched/hctx{h}/client{}/{} weight={} raised={} busy={} queued={} served_sectors={}",
                    q.client_id,
                    if q.sync { "sync" } else { "async" },
                    q.weight,
                    u8::from(q.raised()),
                    u8::from(q.busy),
                    q.fifo.len(),
                    q.served_sectors
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::IoPrioClass;

    const MS: u64 = 1_000_000;
    const READER: (u32, bool, IoPrio) = (1, true, IoPrio { class: IoPrioClass::Be, level: 4 });
    const WRITER: (u32, bool, IoPrio) = (2, false, IoPrio { class: IoPrioClass::Be, level: 4 });

    /// Times are injected: each step says when it happens.
    fn next(bfq: &Bfq, now: u64) -> Option<u32> {
        let mut st = bfq.hctxs[0].lock();
        bfq.next_request(&mut st, now, |_, _| 8).map(|(tag, _)| tag)
    }

    fn bfq() -> Bfq {
        Bfq::new(1, 64, &BfqTunables::default())
    }

    #[test]
    fn the_idle_slice_starts_at_completion_and_its_timer_ends_it() {
        let bfq = bfq();
        bfq.enqueue(&mut bfq.hctxs[0].lock(), READER, 0, 0);
        assert_eq!(next(&bfq, 0), Some(0), "the new reader is served");
        bfq.enqueue(&mut bfq.hctxs[0].lock(), WRITER, 1, MS);
        // The raised reader is empty but its read is in flight: the device
        // waits for it, and no timer runs yet (the completion restarts).
        assert_eq!(next(&bfq, 2 * MS), None);
        assert_eq!(bfq.next_dispatch_ns(0), Some(IDLE_AFTER_COMPLETION));
        bfq.completed(&mut bfq.hctxs[0].lock(), READER.0, READER.1, 5 * MS);
        assert_eq!(bfq.next_dispatch_ns(0), Some(13 * MS), "slice_idle (8 ms) from the completion");
        assert_eq!(next(&bfq, 13 * MS - 1), None, "still idling");
        assert_eq!(next(&bfq, 13 * MS), Some(1), "the timer expired: the writer's turn");
        assert_eq!(bfq.hctxs[0].lock().idle_expired, 1);
        assert_eq!(bfq.next_dispatch_ns(0), None);
    }

    #[test]
    fn a_request_within_the_idle_slice_is_served_at_once() {
        let bfq = bfq();
        bfq.enqueue(&mut bfq.hctxs[0].lock(), READER, 0, 0);
        assert_eq!(next(&bfq, 0), Some(0));
        bfq.enqueue(&mut bfq.hctxs[0].lock(), WRITER, 1, MS);
        bfq.completed(&mut bfq.hctxs[0].lock(), READER.0, READER.1, 2 * MS);
        assert_eq!(next(&bfq, 3 * MS), None);
        bfq.enqueue(&mut bfq.hctxs[0].lock(), READER, 2, 4 * MS);
        assert_eq!(next(&bfq, 4 * MS), Some(2), "the reader's next read ends the idling");
        assert_eq!(bfq.hctxs[0].lock().idle_expired, 0);
    }

    #[test]
    fn a_queue_that_thinks_longer_than_the_idle_slice_stops_idling() {
        let bfq = bfq();
        let mut now = 0;
        let mut idled = 0;
        for tag in 0..6 {
            // A busy writer that is not raised: idling would protect the
            // reader from it.
            bfq.enqueue(&mut bfq.hctxs[0].lock(), WRITER, 100 + tag, now);
            bfq.enqueue(&mut bfq.hctxs[0].lock(), READER, tag, now);
            assert_eq!(next(&bfq, now), Some(tag), "the raised reader first");
            bfq.completed(&mut bfq.hctxs[0].lock(), READER.0, READER.1, now + MS);
            if bfq.next_dispatch_ns(0).is_some() {
                idled += 1;
            }
            // The reader comes back 20 ms after each completion: longer
            // than slice_idle (8 ms), so each slice expires for nothing.
            now += 21 * MS;
            assert_eq!(next(&bfq, now), Some(100 + tag), "then the writer");
            bfq.completed(&mut bfq.hctxs[0].lock(), WRITER.0, WRITER.1, now);
        }
        assert_eq!(idled, 3, "idles until three samples make the mean valid");
    }

    #[test]
    fn a_raised_queue_alone_does_not_idle() {
        let bfq = bfq();
        bfq.enqueue(&mut bfq.hctxs[0].lock(), READER, 0, 0);
        assert_eq!(next(&bfq, 0), Some(0));
        bfq.completed(&mut bfq.hctxs[0].lock(), READER.0, READER.1, MS);
        assert_eq!(bfq.next_dispatch_ns(0), None, "no queue to protect it from");
    }

    #[test]
    fn a_large_burst_of_new_sync_queues_is_not_raised_but_a_later_reader_is() {
        let bfq = bfq();
        let raised = |client: u32| {
            let st = bfq.hctxs[0].lock();
            st.queues[st.by_owner[&(client, true)]].raised()
        };
        for w in 0..LARGE_BURST as u32 {
            bfq.enqueue(&mut bfq.hctxs[0].lock(), (10 + w, true, IoPrio::default()), w, w as u64 * MS);
        }
        assert!((0..LARGE_BURST as u32).all(|w| !raised(10 + w)), "the burst lost its raising");
        assert_eq!(bfq.wr_busy.load(Ordering::SeqCst), 0);
        bfq.enqueue(&mut bfq.hctxs[0].lock(), (30, true, IoPrio::default()), 20, 100 * MS);
        assert!(!raised(30), "joins the large burst (within 180 ms of the last)");
        bfq.enqueue(&mut bfq.hctxs[0].lock(), READER, 21, 500 * MS);
        assert!(raised(READER.0), "an application starting later is raised");
        assert_eq!(bfq.wr_busy.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn without_slice_idle_the_writer_follows_at_once() {
        let bfq = Bfq::new(1, 64, &"bfq,slice_idle=0".parse::<crate::Sched>().map(bfq_tunables).unwrap());
        bfq.enqueue(&mut bfq.hctxs[0].lock(), READER, 0, 0);
        bfq.enqueue(&mut bfq.hctxs[0].lock(), WRITER, 1, 0);
        assert_eq!(next(&bfq, 0), Some(0));
        assert_eq!(next(&bfq, 0), Some(1));
        assert_eq!(bfq.next_dispatch_ns(0), None);
    }

    fn bfq_tunables(sched: crate::Sched) -> BfqTunables {
        match sched {
            crate::Sched::Bfq(t) => t,
            other => panic!("not bfq: {other:?}"),
        }
    }
}
