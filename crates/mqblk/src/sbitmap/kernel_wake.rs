//! The wakeups of the kernels the source threads measured, before the 6.2
//! counters ([`BatchWake`](super::BatchWake)) replaced them:
//!
//! - [`Batch2017Wake`] (`wake=batch2017`): lib/sbitmap.c of v4.13 to v4.20,
//!   the kernel of "bfq: limit tags for writes and async I/O" (2017):
//!   per-queue `wait_cnt`, and `sbq_wake_up` waking with `wake_up()` the
//!   waiters of one wait queue, who wait non-exclusively
//!   (`prepare_to_wait` in blk_mq_get_tag), so all of that queue's.
//! - [`Batch2020Wake`] (`wake=batch2020`): lib/sbitmap.c of v5.0 to v6.1
//!   (5.6 is the kernel of "\[RFC\] blk-mq: provide more tags for woken-up
//!   process when tag allocation is busy", 2020): `__sbq_wake_up` with
//!   `wake_up_nr(wake_batch)` on one queue, exclusive waiters
//!   (`sbitmap_prepare_to_wait`), the `while (__sbq_wake_up(sbq))` retry.
//! - [`StashWake`] (`wake=stash`): that RFC as posted, on top of the 5.6
//!   wakeup.
//!
//! All three keep the kernel's waiter side too: a waiter picks its wait
//! queue with `bt_wait_ptr` (the hardware context's `wait_index`, advanced
//! at every wait, so again after every wakeup), and one woken without a
//! bit goes back at the tail (`WakePolicy::waits_round_robin`, the default
//! `requeue_at_head` false).
//!
//! Relies on: `SbitmapQueue::wake_ptr`, `advance_wake_index` and
//! `wake_up_queue` (queue.rs), which are `sbq_wake_ptr`,
//! `sbq_index_atomic_inc(&sbq->wake_index)` and `wake_up_nr` on one queue.

use std::fmt::Write as _;

use super::{SbitmapQueue, WakePolicy, SBQ_WAIT_QUEUES};
use crate::sync::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

/// Wakes up to `nr` waiters of queue `index`, the one `wake_ptr` chose.
/// mqblk's one departure from these kernels: if the queue's waiters left
/// in the meantime (they found a bit on their own between `wake_ptr`
/// seeing them and this wakeup), the wakeup goes to the next queue with
/// waiters instead of being lost. In the kernels it was lost (a waker
/// picks a queue by `waitqueue_active`, the waiter leaves, `wake_up`
/// finds nobody) and a waiter elsewhere slept on with bits free until
/// later frees came: one of the lost wakeups 6.2's counters
/// ("sbitmap: Use single per-bitmap counting to wake up queued tags")
/// removed. The loom models find it with two waiters and two frees.
fn wake_up_chosen(sbq: &SbitmapQueue, mut index: usize, nr: u32) -> u32 {
    for _ in 0..SBQ_WAIT_QUEUES {
        let woken = sbq.wake_up_queue(index, nr);
        if woken > 0 {
            return woken;
        }
        match sbq.wake_ptr() {
            Some(next) => index = next,
            None => return 0,
        }
    }
    0
}

/// Per wait queue, the frees counted against it since its last wakeup:
/// the kernel's `ws->wait_cnt` is `wake_batch - pending` (kept this way
/// round so that it needs no initial value: wake_batch is the queue's).
#[derive(Debug)]
struct WaitCounts {
    pending: [AtomicU32; SBQ_WAIT_QUEUES],
    /// Wakeups made (for the dump and the tests).
    wakeups: AtomicUsize,
}

impl Default for WaitCounts {
    fn default() -> Self {
        Self { pending: std::array::from_fn(|_| AtomicU32::new(0)), wakeups: AtomicUsize::new(0) }
    }
}

impl WaitCounts {
    fn show(&self, out: &mut String) {
        let pending: Vec<u32> = self.pending.iter().map(|p| p.load(Ordering::Relaxed)).collect();
        let _ = writeln!(out, "wait_cnt_pending={pending:?}");
        let _ = writeln!(out, "queue_wakeups={}", self.wakeups.load(Ordering::Relaxed));
    }
}

/// The 2017 kernel's wakeup (v4.13's `sbq_wake_up`): each freed bit
/// decrements the `wait_cnt` of the first wait queue with waiters from
/// `wake_index` on (`sbq_wake_ptr`); the free that takes it to 0 or below
/// adds `wake_batch` back (`atomic_cmpxchg(&ws->wait_cnt, wait_cnt,
/// wait_cnt + wake_batch)`), advances `wake_index` and calls
/// `wake_up(&ws->wait)`. blk_mq_get_tag of that era waits with
/// `prepare_to_wait`, not exclusive, so `wake_up` wakes every waiter of
/// that queue: one queue's waiters per `wake_batch` frees, and between two
/// wakeups the freed bits lie in the bitmap for whoever runs first.
///
/// ```
/// use mqblk::sbitmap::{Batch2017Wake, SbitmapQueue};
///
/// let sbq = SbitmapQueue::with_policy(64, None, false, 64, Box::new(Batch2017Wake::default()));
/// assert_eq!((sbq.policy_name(), sbq.wake_batch()), ("batch2017", 8));
/// assert!(sbq.show().contains("queue_wakeups=0"));
/// ```
#[derive(Debug, Default)]
pub struct Batch2017Wake {
    counts: WaitCounts,
}

impl WakePolicy for Batch2017Wake {
    fn name(&self) -> &'static str {
        "batch2017"
    }

    fn waits_round_robin(&self) -> bool {
        true
    }

    fn bits_freed(&self, sbq: &SbitmapQueue, nr: u32) {
        for _ in 0..nr {
            let Some(index) = sbq.wake_ptr() else { return };
            let wake_batch = sbq.wake_batch();
            let pending = &self.counts.pending[index];
            // atomic_dec_return(&ws->wait_cnt) <= 0.
            let done = pending.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
            if done < wake_batch {
                continue;
            }
            // Concurrent freers past 0: the last one to go below brings it
            // back up; a failed exchange means another freer moved it and
            // will (v4.13 wakes either way, as here).
            let _ = pending.compare_exchange(done, done - wake_batch, Ordering::SeqCst, Ordering::SeqCst);
            sbq.advance_wake_index();
            // wake_up() on non-exclusive waiters: all of this queue's.
            wake_up_chosen(sbq, index, u32::MAX);
            self.counts.wakeups.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn show(&self, out: &mut String) {
        self.counts.show(out);
    }
}

/// Retries of `__sbq_wake_up` for one free (the kernel loops while it
/// loses the `wait_cnt` exchange; each retry means another freer reset a
/// queue's count, so a few suffice; bounded all the same).
const MAX_WAKE_RETRIES: u32 = 2 * SBQ_WAIT_QUEUES as u32;

/// The 5.6 kernel's wakeup (v5.0 to v6.1 `__sbq_wake_up`): with no active
/// waiter nothing happens; else each freed bit decrements the `wait_cnt`
/// of the first wait queue with waiters from `wake_index` on; the free
/// that takes it to 0 resets it to `wake_batch` with a compare-and-swap,
/// advances `wake_index` and wakes `wake_batch` exclusive waiters of that
/// queue (`wake_up_nr`); a free that loses the exchange tries again
/// (`while (__sbq_wake_up(sbq))`). This is "current batch wakeup" of
/// Hou Tao's RFC: a batch of woken waiters races for the freed bits with
/// whoever runs, and the losers sleep again.
///
/// ```
/// use mqblk::sbitmap::{Batch2020Wake, SbitmapQueue};
///
/// let sbq = SbitmapQueue::with_policy(256, None, false, 256, Box::new(Batch2020Wake::default()));
/// assert_eq!((sbq.policy_name(), sbq.wake_batch()), ("batch2020", 8));
/// ```
#[derive(Debug, Default)]
pub struct Batch2020Wake {
    counts: WaitCounts,
}

impl Batch2020Wake {
    /// One `__sbq_wake_up`: true if it lost the reset race and the free
    /// must be counted again.
    fn wake_up_once(&self, sbq: &SbitmapQueue) -> bool {
        let Some(index) = sbq.wake_ptr() else { return false };
        let wake_batch = sbq.wake_batch();
        let pending = &self.counts.pending[index];
        let done = pending.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
        if done < wake_batch {
            return false;
        }
        // atomic_cmpxchg(&ws->wait_cnt, wait_cnt, wake_batch): only the
        // freer that sees its own count still there wakes.
        if pending.compare_exchange(done, 0, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            return true;
        }
        sbq.advance_wake_index();
        wake_up_chosen(sbq, index, wake_batch);
        self.counts.wakeups.fetch_add(1, Ordering::Relaxed);
        false
    }
}

impl WakePolicy for Batch2020Wake {
    fn name(&self) -> &'static str {
        "batch2020"
    }

    fn waits_round_robin(&self) -> bool {
        true
    }

    fn bits_freed(&self, sbq: &SbitmapQueue, nr: u32) {
        for _ in 0..nr {
            for _ in 0..MAX_WAKE_RETRIES {
                if !self.wake_up_once(sbq) {
                    break;
                }
            }
        }
    }

    fn show(&self, out: &mut String) {
        self.counts.show(out);
    }
}

/// The RFC's `SBQ_STASH_RATIO`: a stash is a quarter of the depth.
const SBQ_STASH_RATIO: u32 = 4;
/// The RFC's `SBQ_MIN_STASH_CNT`: no stashing below 16 (depth < 64).
const SBQ_MIN_STASH_CNT: u32 = 16;
/// The RFC's `SBQ_WS_ACTIVE_MIN_BUSY_CNT`: stash only with 4 waiters.
const SBQ_WS_ACTIVE_MIN: u32 = 4;

/// Hou Tao's stash-wake-use, as posted ("\[RFC\] blk-mq: provide more tags
/// for woken-up process when tag allocation is busy", 2020-06-03), on the
/// 5.6 wakeup ([`Batch2020Wake`]). `sbitmap_queue_do_stash_and_wake_up`:
/// with a stash of depth/4 bits (at least 16) and at least 4 active
/// waiters, a freed bit first counts into `stashed_bits` and wakes nobody;
/// the free that finds the stash full sets `stash_ready`, and from then on
/// every free wakes one waiter (`wake_up`, exclusive) and advances
/// `wake_index`. Every tag allocation while `stash_ready` takes one from
/// `stashed_bits` (the `found_tag:` hunk in blk_mq_get_tag, through
/// `WakePolicy::bit_allocated`); the one that empties it clears
/// `stash_ready`, and stashing starts again. Otherwise, the 5.6 wakeup.
///
/// As posted, it does not check that as many bits as the stash are busy
/// (the RFC's TODO; the follow-up in the thread counted busy bits): a stash
/// only fills if that many frees are still to come.
///
/// ```
/// use mqblk::sbitmap::{SbitmapQueue, StashWake};
///
/// let sbq = SbitmapQueue::with_policy(256, None, false, 256, Box::new(StashWake::default()));
/// assert_eq!(sbq.policy_name(), "stash");
/// assert!(sbq.show().contains("stash_ready=0"));
/// // The thresholds lowered, to watch it on a small bitmap.
/// let _small = StashWake::with_thresholds(1, 1);
/// ```
#[derive(Debug)]
pub struct StashWake {
    batch: Batch2020Wake,
    min_stash: u32,
    min_waiters: u32,
    stash_ready: AtomicBool,
    stashed_bits: AtomicU32,
    /// Frees stashed (no wakeup), and single wakeups made.
    stashed: AtomicUsize,
    single_wakes: AtomicUsize,
}

impl Default for StashWake {
    fn default() -> Self {
        Self::with_thresholds(SBQ_MIN_STASH_CNT, SBQ_WS_ACTIVE_MIN)
    }
}

impl StashWake {
    /// The RFC with its two thresholds changed: no stash smaller than
    /// `min_stash` bits (the RFC's 16), none with fewer than `min_waiters`
    /// active waiters (the RFC's 4). Example: [`StashWake`].
    pub fn with_thresholds(min_stash: u32, min_waiters: u32) -> Self {
        Self {
            batch: Batch2020Wake::default(),
            min_stash: min_stash.max(1),
            min_waiters,
            stash_ready: AtomicBool::new(false),
            stashed_bits: AtomicU32::new(0),
            stashed: AtomicUsize::new(0),
            single_wakes: AtomicUsize::new(0),
        }
    }

    /// `sbitmap_queue_do_stash_and_wake_up`: true when the free was dealt
    /// with (stashed, or one waiter woken).
    fn stash_and_wake_up(&self, sbq: &SbitmapQueue) -> bool {
        let stash = sbq.depth() / SBQ_STASH_RATIO;
        if stash < self.min_stash || sbq.ws_active() < self.min_waiters {
            return false;
        }
        if !self.stash_ready.load(Ordering::SeqCst) {
            // atomic_add_unless(&stashed_bits, 1, stash).
            let added = self
                .stashed_bits
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| (v != stash).then_some(v + 1))
                .is_ok();
            if added {
                self.stashed.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            self.stash_ready.store(true, Ordering::SeqCst);
        }
        let Some(index) = sbq.wake_ptr() else { return false };
        sbq.advance_wake_index();
        wake_up_chosen(sbq, index, 1);
        self.single_wakes.fetch_add(1, Ordering::Relaxed);
        true
    }
}

impl WakePolicy for StashWake {
    fn name(&self) -> &'static str {
        "stash"
    }

    fn waits_round_robin(&self) -> bool {
        true
    }

    fn counts_allocations(&self) -> bool {
        true
    }

    /// The `found_tag:` hunk: `if (READ_ONCE(bt->stash_ready) &&
    /// !atomic_dec_if_positive(&bt->stashed_bits)) WRITE_ONCE(bt->stash_ready,
    /// false)`.
    fn bit_allocated(&self) {
        if !self.stash_ready.load(Ordering::Relaxed) {
            return;
        }
        let left = self.stashed_bits.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1));
        if left == Ok(1) {
            self.stash_ready.store(false, Ordering::SeqCst);
        }
    }

    fn bits_freed(&self, sbq: &SbitmapQueue, nr: u32) {
        for _ in 0..nr {
            if !self.stash_and_wake_up(sbq) {
                self.batch.bits_freed(sbq, 1);
            }
        }
    }

    fn show(&self, out: &mut String) {
        let _ = writeln!(out, "stash_ready={}", u8::from(self.stash_ready.load(Ordering::Relaxed)));
        let _ = writeln!(out, "stashed_bits={}", self.stashed_bits.load(Ordering::Relaxed));
        let _ = writeln!(out, "stashed={}", self.stashed.load(Ordering::Relaxed));
        let _ = writeln!(out, "single_wakes={}", self.single_wakes.load(Ordering::Relaxed));
        self.batch.show(out);
    }
}
