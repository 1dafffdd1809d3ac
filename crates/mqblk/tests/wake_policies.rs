//! Every wakeup policy under contention: 64 threads over 8 tags, exact
//! accounting (each acquisition is one bit held by one thread), every thread
//! finishes, and for pure handoff a bound on the waits (the 99th percentile
//! of grants to others while a thread waits).
//! Plus each policy's defining behaviour, checked through its counters and
//! the waiters' wakeup counts: the RFC's stash, the 2017 and 2020 kernels'
//! per-queue wakeups, and where a woken waiter that lost the race waits.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use mqblk::sbitmap::{wake_policy, AllocHint, SbqWaiter, WAKE_POLICIES};
use mqblk::sbitmap::{Batch2017Wake, Batch2020Wake, BatchWake, HandoffWake, SbitmapQueue, StashWake, WakePolicy};

// Miri interprets every thread: 16 threads and 10 rounds there (still twice
// as many threads as tags, and 160 grants through 8 tags, so each bit is
// freed to a sleeper many times over).
const THREADS: u32 = if cfg!(miri) { 16 } else { 64 };
const TAGS: u32 = 8;
const ROUNDS: u64 = if cfg!(miri) { 10 } else { 300 };

fn contend(policy: &str) -> Overtakes {
    contend_with(policy, wake_policy(policy).unwrap())
}

fn contend_with(policy: &str, wake: Box<dyn WakePolicy>) -> Overtakes {
    contend_over(policy, wake, TAGS, THREADS)
}

/// How many grants went to others while a thread waited for one, over all
/// acquisitions: the worst and the 99th percentile.
struct Overtakes {
    worst: u64,
    p99: u64,
}

/// `threads` threads take and free one of `tags` bits `ROUNDS` times each.
fn contend_over(policy: &str, wake: Box<dyn WakePolicy>, tags: u32, threads: u32) -> Overtakes {
    let sbq = SbitmapQueue::with_policy(tags, None, false, tags, wake);
    let owner: Vec<AtomicBool> = (0..tags).map(|_| AtomicBool::new(false)).collect();
    let grants = AtomicU64::new(0);
    let all = std::thread::scope(|s| {
        let threads: Vec<_> = (0..threads)
            .map(|t| {
                let (sbq, owner, grants) = (&sbq, &owner, &grants);
                s.spawn(move || {
                    let mut counts = Vec::with_capacity(ROUNDS as usize);
                    let waiter = SbqWaiter::new();
                    let mut hint = AllocHint::new(t);
                    for _ in 0..ROUNDS {
                        let before = grants.load(Ordering::SeqCst);
                        let (bit, _) = sbq.get_or_wait(&mut hint, tags, &waiter, t as usize, || {});
                        counts.push(grants.fetch_add(1, Ordering::SeqCst) - before);
                        assert!(!owner[bit as usize].swap(true, Ordering::AcqRel), "{policy}: bit {bit} granted twice");
                        std::thread::yield_now(); // hold the tag across a reschedule
                        owner[bit as usize].store(false, Ordering::Release);
                        sbq.clear(bit, Some(&mut hint));
                    }
                    // Bits handed to us and not used go back (handoff policy).
                    sbq.release_granted(&waiter);
                    counts
                })
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().unwrap()).collect::<Vec<u64>>()
    });
    assert_eq!(grants.load(Ordering::SeqCst), u64::from(threads) * ROUNDS, "{policy}");
    let snap = sbq.snapshot();
    assert_eq!((snap.busy, snap.ws_active), (0, 0), "{policy}: every tag back, no waiter left");
    let mut all = all;
    all.sort_unstable();
    assert_eq!(all.len() as u64, u64::from(threads) * ROUNDS);
    Overtakes { worst: all[all.len() - 1], p99: all[all.len() * 99 / 100] }
}

/// 64 threads over 8 tags under `policy`: exact accounting and every thread
/// finishing are asserted in `contend`.
fn policy_64_threads_over_8_tags(policy: &str) {
    // handoff here: frees are so fast that granted tags would idle most of
    // the time, so it measures that and wakes like batch (loose bound too).
    let o = contend(policy);
    // No bound on overtakes here: batch and stash (and handoff when it
    // falls back) let running threads take freed bits before woken
    // sleepers (barging, as in the kernel), and the count also grows
    // while a thread is merely descheduled between reading the grant
    // counter and asking for a tag: with 64 threads on 2 cores it
    // measures the OS scheduler (seen: 467 to 17,801 of 19,200), so a
    // bound made this test fail at random. What is asserted is exact
    // accounting and that every thread finishes (`contend`); strict
    // FIFO is tested for pure handoff below.
    eprintln!("{policy}: overtakes worst {}, p99 {}", o.worst, o.p99);
}

// One test per policy: each is a test of its own (and under Miri a
// process of its own, which runs beside the others).
#[test]
fn every_policy_is_tested_here() {
    assert_eq!(WAKE_POLICIES, ["batch", "stash", "handoff", "batch2017", "batch2020"], "add a test below");
}

#[test]
fn batch_64_threads_over_8_tags() {
    policy_64_threads_over_8_tags("batch");
}

#[test]
fn stash_64_threads_over_8_tags() {
    policy_64_threads_over_8_tags("stash");
}

#[test]
fn handoff_64_threads_over_8_tags() {
    policy_64_threads_over_8_tags("handoff");
}

#[test]
fn batch2017_64_threads_over_8_tags() {
    policy_64_threads_over_8_tags("batch2017");
}

#[test]
fn batch2020_64_threads_over_8_tags() {
    policy_64_threads_over_8_tags("batch2020");
}

/// The kernel's policies with their own batches: 8 tags make wake_batch 1,
/// and the RFC stashes nothing below 64 bits; over 64 tags wake_batch is 8,
/// the 2017 and 2020 per-queue counts and the stash (16 bits, 4 waiters)
/// all engage. Exact accounting, every thread finishes (no lost wakeup).
/// Under Miri 16 tags and 24 threads (128 interpreted threads pass
/// nextest's 180 s): the per-queue counts still engage (wake_batch 2), the
/// full-size stash only natively; the lowered stash runs under both. One
/// test per policy, so that each one's interpreted run has its own process.
fn over_their_own_batches(wake: Box<dyn WakePolicy>) {
    let (tags, threads) = if cfg!(miri) { (16, 24) } else { (64, 128) };
    let name = wake.name();
    let o = contend_over(name, wake, tags, threads);
    eprintln!("{name} over {tags} tags: overtakes worst {}, p99 {}", o.worst, o.p99);
}

#[test]
fn batch2017_with_its_own_batch_128_threads_over_64_tags() {
    over_their_own_batches(Box::<Batch2017Wake>::default());
}

#[test]
fn batch2020_with_its_own_batch_128_threads_over_64_tags() {
    over_their_own_batches(Box::<Batch2020Wake>::default());
}

#[test]
fn stash_with_its_own_stash_128_threads_over_64_tags() {
    over_their_own_batches(Box::<StashWake>::default());
}

#[test]
fn stash_of_2_from_4_waiters_64_threads_over_8_tags() {
    // The stash with its thresholds lowered, on 8 tags.
    let o = contend_with("stash", Box::new(StashWake::with_thresholds(1, 4)));
    eprintln!("stash (stash of 2, from 4 waiters): overtakes worst {}, p99 {}", o.worst, o.p99);
}

/// `n` waiters sleeping, one after another, on a queue of `depth` bits all
/// held (wake_batch from `min_shallow_depth`): each waiter holds the bit it
/// gets until `release` is waited on, then frees it. Returns the queue,
/// the held bits, the waiters and their threads.
struct Sleepers {
    sbq: Arc<SbitmapQueue>,
    held: Vec<u32>,
    waiters: Vec<Arc<SbqWaiter>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    release: Arc<std::sync::Barrier>,
}

fn sleepers(depth: u32, min_shallow_depth: u32, n: usize, wake: Box<dyn WakePolicy>) -> Sleepers {
    let sbq = Arc::new(SbitmapQueue::with_policy(depth, None, false, min_shallow_depth, wake));
    let mut hint = AllocHint::new(0);
    let held: Vec<u32> = (0..depth).map(|_| sbq.get(&mut hint).unwrap()).collect();
    let release = Arc::new(std::sync::Barrier::new(n + 1));
    let mut waiters = Vec::new();
    let mut threads = Vec::new();
    for i in 0..n {
        let w = SbqWaiter::new();
        let (sbq2, w2, release) = (sbq.clone(), w.clone(), release.clone());
        threads.push(std::thread::spawn(move || {
            let (bit, _) = sbq2.get_or_wait(&mut AllocHint::new(i as u32), depth, &w2, i, || {});
            release.wait();
            sbq2.clear(bit, None);
        }));
        // Listed and past its last look at the bitmap before the next one
        // comes: the waiters take the wait queues in order.
        while sbq.snapshot().nr_sleeps <= i {
            std::thread::yield_now();
        }
        waiters.push(w);
    }
    Sleepers { sbq, held, waiters, threads, release }
}

impl Sleepers {
    fn wakeups(&self) -> Vec<u64> {
        self.waiters.iter().map(|w| w.wakeups()).collect()
    }

    /// Frees every held bit from `from` on, lets the waiters go, and checks
    /// that every bit came back.
    fn finish(self, from: usize) {
        for &bit in &self.held[from..] {
            self.sbq.clear(bit, None);
        }
        self.release.wait();
        for t in self.threads {
            t.join().unwrap();
        }
        assert_eq!((self.sbq.snapshot().busy, self.sbq.ws_active()), (0, 0));
    }
}

#[test]
fn kernel_waiters_take_the_wait_queues_round_robin() {
    // bt_wait_ptr: waiter i sleeps on queue i % 8, whatever ws_index its
    // caller passed (all passed their own i here, so pass 0 to see it).
    let s = sleepers(32, 8, 10, Box::<Batch2020Wake>::default());
    assert_eq!(s.sbq.snapshot().ws_waiting, [2, 2, 1, 1, 1, 1, 1, 1]);
    s.finish(0);
}

#[test]
fn batch2017_wakes_every_waiter_of_one_queue() {
    // wake_batch 1 (min_shallow_depth 8); 17 waiters: queue 0 holds
    // waiters 0, 8 and 16. One free: wake_up() on queue 0, whose
    // non-exclusive waiters all wake.
    let s = sleepers(32, 8, 17, Box::<Batch2017Wake>::default());
    assert_eq!(s.sbq.wake_batch(), 1);
    s.sbq.clear(s.held[0], None);
    let woken: Vec<usize> = s.wakeups().iter().enumerate().filter(|(_, &n)| n > 0).map(|(i, _)| i).collect();
    assert_eq!(woken, [0, 8, 16], "queue 0's waiters, all of them");
    assert!(s.sbq.show().contains("queue_wakeups=1"), "{}", s.sbq.show());
    s.finish(1);
}

#[test]
fn batch2020_wakes_wake_batch_waiters_of_one_queue() {
    // The same, with the 5.6 wakeup: wake_up_nr(wake_batch = 1) wakes the
    // first exclusive waiter of queue 0 only.
    let s = sleepers(32, 8, 17, Box::<Batch2020Wake>::default());
    s.sbq.clear(s.held[0], None);
    let woken: Vec<usize> = s.wakeups().iter().enumerate().filter(|(_, &n)| n > 0).map(|(i, _)| i).collect();
    assert_eq!(woken, [0]);
    s.finish(1);
}

#[test]
fn batch2020_counts_wake_batch_frees_per_queue() {
    // 64 bits, wake_batch 8: 7 frees wake nobody, the 8th wakes up to 8
    // waiters of the first queue with waiters (queue 0: waiters 0 and 8).
    let s = sleepers(64, 64, 9, Box::<Batch2020Wake>::default());
    assert_eq!(s.sbq.wake_batch(), 8);
    for &bit in &s.held[..7] {
        s.sbq.clear(bit, None);
    }
    assert_eq!(s.wakeups().iter().sum::<u64>(), 0, "7 frees: wait_cnt not yet 0");
    s.sbq.clear(s.held[7], None);
    assert_eq!((s.waiters[0].wakeups(), s.waiters[8].wakeups()), (1, 1), "queue 0's two waiters");
    assert_eq!(s.wakeups().iter().sum::<u64>(), 2);
    s.finish(8);
}

#[test]
fn stash_as_posted_holds_wakeups_until_the_stash_fills() {
    // 64 bits: a stash of 16. 4 sleeping waiters (the RFC's minimum).
    let s = sleepers(64, 64, 4, Box::<StashWake>::default());
    // 16 frees fill the stash: nobody is woken, not even by the batch.
    for &bit in &s.held[..16] {
        s.sbq.clear(bit, None);
    }
    let dump = s.sbq.show();
    assert!(dump.contains("stashed=16") && dump.contains("single_wakes=0"), "{dump}");
    assert_eq!(s.wakeups().iter().sum::<u64>(), 0, "{dump}");
    // The 17th finds it full: stash_ready, and it wakes one waiter.
    s.sbq.clear(s.held[16], None);
    let dump = s.sbq.show();
    assert!(dump.contains("single_wakes=1") && dump.contains("stash_ready=1"), "{dump}");
    assert_eq!(s.wakeups().iter().sum::<u64>(), 1, "{dump}");
    s.finish(17);
}

#[test]
fn stash_allocations_use_up_the_stash() {
    // The found_tag hunk: while stash_ready, each allocation takes one from
    // stashed_bits; the last one clears stash_ready.
    let s = sleepers(64, 64, 4, Box::<StashWake>::default());
    for &bit in &s.held[..17] {
        s.sbq.clear(bit, None); // stash of 16 full, then ready
    }
    // One waiter was woken and holds a bit (one allocation: 15 left).
    while s.sbq.snapshot().busy != 64 - 17 + 1 {
        std::thread::yield_now();
    }
    let mut hint = AllocHint::new(0);
    let taken: Vec<u32> = (0..15).map(|_| s.sbq.get(&mut hint).unwrap()).collect();
    let dump = s.sbq.show();
    assert!(dump.contains("stashed_bits=0") && dump.contains("stash_ready=0"), "{dump}");
    for bit in taken {
        s.sbq.clear(bit, None);
    }
    s.finish(17);
}

#[test]
fn stash_batched_allocations_use_up_the_stash_bit_by_bit() {
    // A plug takes its tags in one batch: each bit of it takes one from
    // stashed_bits, as single allocations would.
    let s = sleepers(64, 64, 4, Box::<StashWake>::default());
    for &bit in &s.held[..17] {
        s.sbq.clear(bit, None); // stash of 16 full, then ready
    }
    while s.sbq.snapshot().busy != 64 - 17 + 1 {
        std::thread::yield_now(); // the woken waiter took one: 15 left
    }
    let (base, mask) = s.sbq.get_batch(15, &mut AllocHint::new(0)).expect("16 bits are free");
    let n = mask.count_ones();
    assert!(n > 0);
    let dump = s.sbq.show();
    assert!(dump.contains(&format!("stashed_bits={}", 15 - n)), "{n} bits taken: {dump}");
    for i in (0..usize::BITS).filter(|i| mask & (1 << i) != 0) {
        s.sbq.clear(base + i, None);
    }
    s.finish(17);
}

#[test]
fn pure_handoff_is_fair_64_threads_over_8_tags() {
    // Always handing off, nobody barges: a waiter is served after those
    // queued before it. The bound is far tighter than for batch and stash.
    let o = contend_with("handoff", Box::new(HandoffWake::with_max_idle_permille(u64::MAX)));
    eprintln!("handoff: overtakes worst {}, p99 {}", o.worst, o.p99);
    // A count also grows while its thread is descheduled between reading
    // the grant counter and joining the queue, or after its grant and
    // before counting it: on a loaded 2-core machine a single stall can
    // take the worst past any bound, so the bound is on the 99th
    // percentile, which a few stalls do not move. Under FIFO a waiter sees
    // about the 56 queued before it served (seen: p99 67-90, worst
    // 497-702, beside a CI run); batch lets running threads barge (p99
    // 920-1,124 in the same runs). Miri's scheduler preempts at random
    // points and parks threads for long, so there the count measures the
    // interpreter: Miri checks the accounting and memory safety.
    if !cfg!(miri) {
        let bound = 4 * u64::from(THREADS);
        assert!(o.p99 < bound, "handoff: 1% of waits saw {} or more grants to others (bound {bound})", o.p99);
    }
}

#[test]
fn handoff_wakes_a_waiter_once_it_holds_what_it_wants() {
    let sbq = Arc::new(SbitmapQueue::with_policy(8, None, false, 8, Box::new(HandoffWake::default())));
    let mut hint = AllocHint::new(0);
    let held: Vec<u32> = (0..8).map(|_| sbq.get(&mut hint).unwrap()).collect();
    let w = SbqWaiter::new();
    w.set_want(2);
    let t = {
        let (sbq, w) = (sbq.clone(), w.clone());
        std::thread::spawn(move || sbq.get_or_wait(&mut AllocHint::new(0), 8, &w, 0, || {}).0)
    };
    // The waiter has counted its sleep: it is parked or about to park (an
    // unpark before the park is remembered), so what follows cannot race
    // with its first allocation attempts.
    while sbq.snapshot().nr_sleeps == 0 {
        std::thread::yield_now();
    }
    // Grant one bit: not enough. clear() decides and unparks (or not)
    // before it returns, so the wakeup count says whether it woke us.
    sbq.clear(held[0], None);
    assert_eq!(w.nr_granted(), 1, "the freed bit was granted, not published");
    assert_eq!(sbq.sb().weight(), 8, "a granted bit stays busy in the bitmap");
    assert_eq!(w.wakeups(), 0, "woken before holding the 2 bits it wants");
    assert!(!t.is_finished(), "returned before holding the 2 bits it wants");
    sbq.clear(held[1], None);
    assert_eq!(w.wakeups(), 1, "woken once it holds both");
    let bit = t.join().unwrap();
    assert!(bit == held[0] || bit == held[1]);
    assert_eq!(w.nr_granted(), 1, "the second bit waits for the waiter's next allocation");
    sbq.release_granted(&w);
    for &b in &held[2..] {
        sbq.clear(b, None);
    }
    sbq.clear(bit, None);
    assert_eq!(sbq.sb().weight(), 0);
}

#[test]
// The fallback follows measured free rates and wakeup latencies, which
// Miri's interpreted threads and virtual clock do not reproduce.
#[cfg_attr(miri, ignore = "depends on real free rates and wakeup latencies")]
fn handoff_falls_back_when_tags_are_the_bottleneck() {
    // The contention run frees bits at a high rate with slow wakeups: the
    // measured idle share is far above the threshold, so the policy stops
    // granting and publishes (its dump says how it decided).
    let sbq = SbitmapQueue::with_policy(TAGS, None, false, TAGS, wake_policy("handoff").unwrap());
    std::thread::scope(|s| {
        for t in 0..16u32 {
            let sbq = &sbq;
            s.spawn(move || {
                let waiter = SbqWaiter::new();
                let mut hint = AllocHint::new(t);
                for _ in 0..500 {
                    let (bit, _) = sbq.get_or_wait(&mut hint, TAGS, &waiter, t as usize, || {});
                    std::thread::yield_now();
                    sbq.clear(bit, Some(&mut hint));
                }
                sbq.release_granted(&waiter);
            });
        }
    });
    let dump = sbq.show();
    let field = |name: &str| -> u64 {
        dump.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    };
    assert!(field("free_rate_per_s=") > 0 && field("wake_latency_ns=") > 0, "{dump}");
    assert!(field("published_while_waiting=") > 0, "fell back to publishing: {dump}");
    assert_eq!(sbq.snapshot().busy, 0);
}

/// Two waiters A then B sleep on wait queue 0 of a full 8-bit queue
/// (wake_batch 1). A is woken with no bit to take (as when a running thread
/// took the freed bit before A ran) and goes back to sleep; then one bit is
/// freed. Returns how many times A and B were woken. Deterministic: each
/// step waits for the sleep count, which a waiter bumps after it is listed
/// and after its last look at the bitmap, `clear` wakes (or not) before
/// it returns, and a woken waiter that got its bit holds it until the
/// wakeups are read (its free would wake the other one).
fn woken_after_a_lost_race(wake: Box<dyn mqblk::sbitmap::WakePolicy>) -> (u64, u64) {
    let sbq = Arc::new(SbitmapQueue::with_policy(8, None, false, 8, wake));
    assert_eq!(sbq.wake_batch(), 1);
    let mut hint = AllocHint::new(0);
    let held: Vec<u32> = (0..8).map(|_| sbq.get(&mut hint).unwrap()).collect();
    let sleeps = |n: usize| {
        while sbq.snapshot().nr_sleeps < n {
            std::thread::yield_now();
        }
    };
    let read = Arc::new(std::sync::Barrier::new(3)); // A, B and this thread
    let spawn = |w: &Arc<SbqWaiter>, seed: u32| {
        let (sbq, w, read) = (sbq.clone(), w.clone(), read.clone());
        std::thread::spawn(move || {
            let (bit, _) = sbq.get_or_wait(&mut AllocHint::new(seed), 8, &w, 0, || {});
            read.wait();
            sbq.clear(bit, None);
            sbq.release_granted(&w);
        })
    };
    let (a, b) = (SbqWaiter::new(), SbqWaiter::new());
    let ta = spawn(&a, 1);
    sleeps(1); // A is listed first
    let tb = spawn(&b, 2);
    sleeps(2); // then B
    assert_eq!(sbq.wake_up_nr(1), 1, "the head of queue 0, A, is woken");
    sleeps(3); // A found no bit, is listed again and sleeps
    assert_eq!((a.wakeups(), b.wakeups()), (1, 0));
    assert_eq!(sbq.snapshot().ws_waiting[0], 2, "both wait on queue 0 again");
    sbq.clear(held[0], None); // wakes the head of queue 0
    let woken = (a.wakeups(), b.wakeups());
    for &bit in &held[1..] {
        sbq.clear(bit, None);
    }
    read.wait();
    ta.join().unwrap();
    tb.join().unwrap();
    assert_eq!((sbq.snapshot().busy, sbq.ws_active()), (0, 0));
    woken
}

#[test]
fn batch_requeues_a_waiter_that_lost_the_race_at_the_tail() {
    // The kernel: the woken waiter calls sbitmap_prepare_to_wait again, and
    // prepare_to_wait_exclusive adds it at the tail, behind B. So the next
    // free wakes B, not A a second time.
    let (a, b) = woken_after_a_lost_race(Box::<BatchWake>::default());
    assert_eq!((a, b), (1, 1), "the next free woke B (A re-queued behind it)");
}

#[test]
fn handoff_keeps_a_woken_waiters_place() {
    // mqblk's choice: A keeps its place at the head.
    let (a, b) = woken_after_a_lost_race(Box::<HandoffWake>::default());
    assert_eq!((a, b), (2, 0), "the next free went to A again");
}

#[test]
fn kernel_waiters_that_lost_the_race_sleep_on_the_next_queue() {
    // 2017, 2020 and the RFC: after a wakeup without a bit, bt_wait_ptr
    // gives the next queue (the hardware context's wait_index), at its tail.
    for wake in [
        Box::<Batch2017Wake>::default() as Box<dyn WakePolicy>,
        Box::<Batch2020Wake>::default(),
        Box::<StashWake>::default(),
    ] {
        let name = wake.name();
        let s = sleepers(8, 8, 2, wake);
        assert_eq!(s.sbq.snapshot().ws_waiting, [1, 1, 0, 0, 0, 0, 0, 0], "{name}");
        let nr_sleeps = s.sbq.snapshot().nr_sleeps;
        assert_eq!(s.sbq.wake_up_queue(0, 1), 1, "{name}");
        while s.sbq.snapshot().nr_sleeps == nr_sleeps {
            std::thread::yield_now();
        }
        assert_eq!(s.sbq.snapshot().ws_waiting, [0, 1, 1, 0, 0, 0, 0, 0], "{name}: waiter 0 now on queue 2");
        s.finish(0);
    }
}
