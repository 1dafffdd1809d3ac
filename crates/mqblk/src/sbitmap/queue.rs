//! `SbitmapQueue`: an `Sbitmap` plus sleeping, after lib/sbitmap.c's
//! sbitmap_queue: 8 wait queues, the active-waiter count, and a pluggable
//! [`WakePolicy`] turning freed bits into wakeups. See the parent module for
//! the lost-wakeup argument.

use std::collections::VecDeque;
use std::fmt;

use crossbeam_utils::CachePadded;

use super::{AllocHint, BatchWake, Sbitmap, SbqWaiter, WakePolicy, SBQ_WAIT_QUEUES, SBQ_WAKE_BATCH};
use crate::sync::{dekker_fence, Arc, AtomicU32, AtomicUsize, Mutex, Ordering};

/// One of the 8 wait queues.
#[derive(Debug, Default)]
struct WaitState {
    /// Number of entries in `list`, readable without the lock
    /// (`waitqueue_active`).
    nr_waiting: AtomicU32,
    list: Mutex<VecDeque<Arc<SbqWaiter>>>,
}

/// `Sbitmap` plus sleeping: the tag allocator's engine. A caller that finds
/// no free bit sleeps on one of 8 wait queues; the wakeup policy decides
/// how freed bits wake sleepers.
///
/// ```
/// use std::sync::Arc;
/// use mqblk::sbitmap::{AllocHint, SbitmapQueue, SbqWaiter, SBQ_WAKE_BATCH};
///
/// let sbq = Arc::new(SbitmapQueue::new(1, false)); // one bit, batched wakeup
/// assert_eq!((sbq.depth(), sbq.sb().depth(), sbq.policy_name()), (1, 1, "batch"));
/// assert!(sbq.wake_batch() <= SBQ_WAKE_BATCH);
/// assert_eq!(sbq.min_shallow_depth(), 1);
///
/// let mut hint = AllocHint::new(0);
/// let bit = sbq.get(&mut hint).unwrap();
/// assert_eq!(sbq.get_shallow(&mut hint, 1), None, "taken");
/// assert_eq!(sbq.get_batch(1, &mut hint), None);
///
/// // Another thread sleeps for a bit until this one frees it.
/// let other = sbq.clone();
/// let sleeper = std::thread::spawn(move || {
///     let waiter = SbqWaiter::new();
///     other.get_or_wait(&mut AllocHint::new(0), 1, &waiter, 0, || { /* e.g. flush a plug */ })
/// });
/// sbq.clear(bit, Some(&mut hint));
/// let (got, _slept) = sleeper.join().unwrap();
/// assert_eq!(got, bit);
///
/// assert_eq!(sbq.ws_active(), 0, "nobody waits now");
/// assert_eq!(sbq.wake_up_nr(1), 0, "nobody to wake");
/// sbq.wake_all();
/// assert_eq!(sbq.snapshot().busy, 1);
/// assert!(sbq.show().contains("wake_policy=batch"));
/// ```
pub struct SbitmapQueue {
    sb: Sbitmap,
    wake_batch: AtomicU32,
    wake_index: AtomicU32,
    ws_active: AtomicU32,
    min_shallow_depth: u32,
    ws: Box<[CachePadded<WaitState>]>,
    policy: Box<dyn WakePolicy>,
    /// The policy hands freed bits to waiters (cached `policy.hands_off()`).
    handoff: bool,
    /// A woken waiter that found no bit goes back at the head of its queue
    /// (cached `policy.requeue_at_head()`), else at the tail.
    requeue_at_head: bool,
    /// Waiters pick their queue with `wait_index` (cached
    /// `policy.waits_round_robin()`), else by the caller's `ws_index`.
    waits_round_robin: bool,
    /// The policy sees every single-bit allocation (cached
    /// `policy.counts_allocations()`).
    counts_allocations: bool,
    /// The kernel's `hctx->wait_index` (one `SbitmapQueue` per hardware
    /// context here): the next wait queue `bt_wait_ptr` gives a waiter.
    wait_index: AtomicU32,
    /// Times a caller went to sleep waiting for a bit (slow path only).
    nr_sleeps: AtomicUsize,
}

impl fmt::Debug for SbitmapQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SbitmapQueue")
            .field("sb", &self.sb)
            .field("wake_batch", &self.wake_batch())
            .field("policy", &self.policy.name())
            .finish()
    }
}

/// wake_batch = clamp(min(depth, min_shallow_depth) / 8, 1, 8).
pub fn calc_wake_batch(depth: u32, min_shallow_depth: u32) -> u32 {
    (depth.min(min_shallow_depth) / SBQ_WAIT_QUEUES as u32).clamp(1, SBQ_WAKE_BATCH)
}

/// A point-in-time view of an `SbitmapQueue`, for the stats dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SbqSnapshot {
    pub depth: u32,
    pub busy: u32,
    pub bits_per_word: u32,
    pub map_nr: usize,
    pub wake_batch: u32,
    pub wake_index: u32,
    pub ws_active: u32,
    pub ws_waiting: [u32; SBQ_WAIT_QUEUES],
    pub min_shallow_depth: u32,
    pub round_robin: bool,
    pub policy: &'static str,
    pub nr_sleeps: usize,
}

impl SbitmapQueue {
    /// A queue over `depth` bits with the kernel's batched wakeup.
    pub fn new(depth: u32, round_robin: bool) -> Self {
        Self::with_policy(depth, None, round_robin, depth, Box::<BatchWake>::default())
    }

    /// Full constructor: `min_shallow_depth` is the smallest shallow depth
    /// any caller will pass (it shrinks `wake_batch` so that callers limited
    /// to few bits are still woken).
    pub fn with_policy(
        depth: u32,
        shift: Option<u32>,
        round_robin: bool,
        min_shallow_depth: u32,
        policy: Box<dyn WakePolicy>,
    ) -> Self {
        assert!(min_shallow_depth > 0, "min_shallow_depth must be positive");
        let sb = Sbitmap::new(depth, shift, round_robin);
        let ws = (0..SBQ_WAIT_QUEUES).map(|_| CachePadded::new(WaitState::default())).collect();
        Self {
            wake_batch: AtomicU32::new(calc_wake_batch(depth, min_shallow_depth)),
            sb,
            wake_index: AtomicU32::new(0),
            ws_active: AtomicU32::new(0),
            min_shallow_depth,
            ws,
            handoff: policy.hands_off(),
            requeue_at_head: policy.requeue_at_head(),
            waits_round_robin: policy.waits_round_robin(),
            counts_allocations: policy.counts_allocations(),
            wait_index: AtomicU32::new(0),
            policy,
            nr_sleeps: AtomicUsize::new(0),
        }
    }

    /// The bitmap.
    pub fn sb(&self) -> &Sbitmap {
        &self.sb
    }

    /// Bits in the bitmap.
    pub fn depth(&self) -> u32 {
        self.sb.depth
    }

    /// Frees per wakeup (batch policy): `clamp(min(depth,
    /// min_shallow_depth) / 8, 1, 8)`.
    pub fn wake_batch(&self) -> u32 {
        self.wake_batch.load(Ordering::Relaxed)
    }

    /// The smallest shallow depth a caller may pass.
    pub fn min_shallow_depth(&self) -> u32 {
        self.min_shallow_depth
    }

    /// The wakeup policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// Callers waiting now (a snapshot).
    pub fn ws_active(&self) -> u32 {
        self.ws_active.load(Ordering::SeqCst)
    }

    /// Allocates one bit anywhere, without sleeping ([`Sbitmap::get`]).
    #[inline]
    pub fn get(&self, hint: &mut AllocHint) -> Option<u32> {
        self.get_shallow(hint, self.sb.depth)
    }

    /// Allocates one bit within `shallow_depth` (at least
    /// `min_shallow_depth`), without sleeping ([`Sbitmap::get_shallow`]).
    #[inline]
    pub fn get_shallow(&self, hint: &mut AllocHint, shallow_depth: u32) -> Option<u32> {
        debug_assert!(
            shallow_depth >= self.min_shallow_depth,
            "shallow depth {shallow_depth} below min_shallow_depth {}",
            self.min_shallow_depth
        );
        let bit = self.sb.get_shallow(hint, shallow_depth);
        if self.counts_allocations && bit.is_some() {
            self.policy.bit_allocated();
        }
        bit
    }

    /// Allocates up to `nr` bits of one word ([`Sbitmap::get_batch`]).
    pub fn get_batch(&self, nr: u32, hint: &mut AllocHint) -> Option<(u32, usize)> {
        self.sb.get_batch(nr, hint)
    }

    /// Frees `bit` and lets the wakeup policy wake waiters.
    #[inline(always)]
    pub fn clear(&self, bit: u32, hint: Option<&mut AllocHint>) {
        // A handoff policy may give the bit straight to a waiter: it is then
        // never published in the bitmap, so no one else can take it.
        if self.handoff && self.ws_active.load(Ordering::SeqCst) != 0 && self.hand_off(bit) {
            return;
        }
        self.sb.clear(bit, hint);
        dekker_fence();
        // Fast path: nobody waits, no policy call (no cost without contention).
        if self.ws_active.load(Ordering::SeqCst) != 0 {
            self.bits_freed();
        }
    }

    #[inline(never)]
    fn hand_off(&self, bit: u32) -> bool {
        self.policy.hand_off(self, bit)
    }

    #[inline(never)]
    fn bits_freed(&self) {
        self.policy.bits_freed(self, 1);
    }

    /// Wakes up to `nr` waiters, walking the queues from `wake_index` and
    /// advancing the index before looking at each queue (so one busy queue
    /// does not have to empty before the next is served). Returns the number
    /// woken.
    pub fn wake_up_nr(&self, mut nr: u32) -> u32 {
        if self.ws_active.load(Ordering::SeqCst) == 0 {
            return 0;
        }
        let start = self.wake_index.load(Ordering::Relaxed) as usize % SBQ_WAIT_QUEUES;
        let mut index = start;
        let mut woken_total = 0;
        for _ in 0..SBQ_WAIT_QUEUES {
            let ws = &self.ws[index];
            index = (index + 1) % SBQ_WAIT_QUEUES;
            if ws.nr_waiting.load(Ordering::SeqCst) == 0 {
                continue;
            }
            let woken = Self::wake_queue(ws, nr);
            woken_total += woken;
            nr -= woken;
            if nr == 0 {
                break;
            }
        }
        if index != start {
            self.wake_index.store(index as u32, Ordering::Relaxed);
        }
        woken_total
    }

    /// The kernel's `sbq_wake_ptr`: the first wait queue with waiters from
    /// `wake_index` on (None without an active waiter); `wake_index` moves
    /// to it if it was not there.
    pub fn wake_ptr(&self) -> Option<usize> {
        if self.ws_active.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let start = self.wake_index.load(Ordering::Relaxed) as usize % SBQ_WAIT_QUEUES;
        for i in 0..SBQ_WAIT_QUEUES {
            let index = (start + i) % SBQ_WAIT_QUEUES;
            // SeqCst: waitqueue_active after the freer's clear (the Dekker
            // pair of the module header, with the waiter's enqueue).
            if self.ws[index].nr_waiting.load(Ordering::SeqCst) != 0 {
                if index != start {
                    self.wake_index.store(index as u32, Ordering::Relaxed);
                }
                return Some(index);
            }
        }
        None
    }

    /// `sbq_index_atomic_inc(&sbq->wake_index)`: the next wakeup starts
    /// its search at the next queue.
    pub fn advance_wake_index(&self) {
        let _ = self.wake_index.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |i| {
            Some((i as usize % SBQ_WAIT_QUEUES + 1) as u32 % SBQ_WAIT_QUEUES as u32)
        });
    }

    /// Wakes up to `nr` waiters of wait queue `index` (`wake_up_nr` on one
    /// `ws->wait`; `u32::MAX`: all, as `wake_up` does to non-exclusive
    /// waiters). Returns the number woken.
    pub fn wake_up_queue(&self, index: usize, nr: u32) -> u32 {
        Self::wake_queue(&self.ws[index % SBQ_WAIT_QUEUES], nr)
    }

    /// `bt_wait_ptr`: the wait queue at `wait_index`, which advances.
    fn next_wait_queue(&self) -> usize {
        self.wait_index.fetch_add(1, Ordering::Relaxed) as usize % SBQ_WAIT_QUEUES
    }

    fn wake_queue(ws: &WaitState, nr: u32) -> u32 {
        let mut list = ws.list.lock();
        let mut woken = 0;
        while woken < nr {
            let Some(waiter) = list.pop_front() else { break };
            ws.nr_waiting.fetch_sub(1, Ordering::SeqCst);
            // Unpark under the lock: the waiter may re-queue itself right
            // after waking, and must not find itself still on the list.
            waiter.wake();
            woken += 1;
        }
        woken
    }

    /// Frees every bit granted to `waiter` and not used (a handoff policy
    /// may have granted more than the waiter needed).
    pub fn release_granted(&self, waiter: &SbqWaiter) {
        while let Some(bit) = waiter.take_granted(self) {
            self.clear(bit, None);
        }
    }

    /// Hands `bit` to the waiter at the head of the wake order. The waiter
    /// is woken once it holds what it wants (see `SbqWaiter::set_want`,
    /// usually 1) and keeps receiving bits while it wakes up; after
    /// max(want, `max_batch`) grants it leaves the queue and the next waiter
    /// is served. Returns false if no waiter is listed.
    pub(crate) fn grant_to_head(&self, bit: u32, max_batch: u32) -> bool {
        let start = self.wake_index.load(Ordering::Relaxed) as usize % SBQ_WAIT_QUEUES;
        for i in 0..SBQ_WAIT_QUEUES {
            let index = (start + i) % SBQ_WAIT_QUEUES;
            let ws = &self.ws[index];
            if ws.nr_waiting.load(Ordering::SeqCst) == 0 {
                continue;
            }
            let mut list = ws.list.lock();
            // The first waiter in line allowed to use this bit (a
            // depth-limited one, e.g. async I/O under a scheduler, is
            // passed over for bits beyond its shallow depth).
            let Some(pos) = list.iter().position(|w| self.sb.bit_allowed(bit, w.shallow_depth())) else { continue };
            let head = &list[pos];
            let granted = head.grant(self, bit);
            let waiter = head.clone();
            // Capped so that a want can always be met by the bits in flight.
            let want = waiter.want().min((self.depth() / 4).max(1));
            if granted >= want.max(max_batch) {
                // Served: off the queue, and the next grant starts with the
                // next queue (round robin over the 8, as wake_up_nr does).
                list.remove(pos);
                ws.nr_waiting.fetch_sub(1, Ordering::SeqCst);
                self.wake_index.store(((index + 1) % SBQ_WAIT_QUEUES) as u32, Ordering::Relaxed);
            }
            if granted == want {
                waiter.wake();
            }
            return true;
        }
        false
    }

    /// Wakes every waiter (depth changes, shutdown).
    pub fn wake_all(&self) {
        for ws in self.ws.iter() {
            Self::wake_queue(ws, u32::MAX);
        }
    }

    /// Gets a bit, sleeping until one is free. `ws_index` picks the wait
    /// queue (callers spread over the 8 queues, as hardware contexts do);
    /// `before_sleep` runs before each sleep (flush a plug, run the queue).
    /// Returns the bit and whether the caller slept.
    pub fn get_or_wait(
        &self,
        hint: &mut AllocHint,
        shallow_depth: u32,
        waiter: &Arc<SbqWaiter>,
        ws_index: usize,
        mut before_sleep: impl FnMut(),
    ) -> (u32, bool) {
        if let Some(bit) = waiter.take_granted(self).or_else(|| self.get_shallow(hint, shallow_depth)) {
            return (bit, false);
        }
        waiter.set_shallow_depth(shallow_depth);
        let mut ws_index = if self.waits_round_robin { self.next_wait_queue() } else { ws_index % SBQ_WAIT_QUEUES };
        // Registered as an active waiter for the whole wait, like the
        // kernel's sbitmap_prepare_to_wait .. sbitmap_finish_wait.
        self.ws_active.fetch_add(1, Ordering::SeqCst);
        let mut slept = false;
        let mut woken = false;
        let bit = loop {
            if let Some(bit) = waiter.take_granted(self) {
                break bit;
            }
            self.enqueue(&self.ws[ws_index], waiter, woken && self.requeue_at_head);
            dekker_fence();
            if let Some(bit) = waiter.take_granted(self).or_else(|| self.get_shallow(hint, shallow_depth)) {
                break bit;
            }
            before_sleep();
            if let Some(bit) = waiter.take_granted(self).or_else(|| self.get_shallow(hint, shallow_depth)) {
                break bit;
            }
            // Release, with the Acquire in `snapshot`: whoever sees this
            // sleep counted sees the waiter listed (tests step on it).
            self.nr_sleeps.fetch_add(1, Ordering::Release);
            slept = true;
            if waiter.parker.park(None) {
                let unparked_at = waiter.unparked_at_ns.load(Ordering::Relaxed);
                let now = crate::clock::now_ns();
                if unparked_at != 0 && now > unparked_at {
                    self.policy.note_wake_latency(now - unparked_at);
                }
            }
            woken = true;
            // Woken (and removed from the list by the waker) or, after a
            // racing unpark, still listed: enqueue() handles both.
            if self.waits_round_robin {
                // The kernel's loop: sbitmap_finish_wait, then bt_wait_ptr
                // picks the next queue for the next sleep.
                self.unlist(&self.ws[ws_index], waiter);
                ws_index = self.next_wait_queue();
            }
        };
        self.finish_wait(&self.ws[ws_index], waiter);
        (bit, slept)
    }

    /// Puts `waiter` on `ws` unless it is already listed: at the tail, or
    /// at the head when `keep_place` (a woken waiter that lost the race for
    /// the bit, under a policy whose `requeue_at_head` says so). The kernel
    /// re-queues at the tail (sbitmap_prepare_to_wait ->
    /// prepare_to_wait_exclusive), which lets a waiter be passed over again
    /// and again; `batch` does the same.
    fn enqueue(&self, ws: &WaitState, waiter: &Arc<SbqWaiter>, keep_place: bool) {
        let mut list = ws.list.lock();
        if !list.iter().any(|w| Arc::ptr_eq(w, waiter)) {
            if keep_place {
                list.push_front(waiter.clone());
            } else {
                list.push_back(waiter.clone());
            }
            ws.nr_waiting.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Takes `waiter` off `ws` if it is listed there; true if it was.
    fn unlist(&self, ws: &WaitState, waiter: &Arc<SbqWaiter>) -> bool {
        let mut list = ws.list.lock();
        match list.iter().position(|w| Arc::ptr_eq(w, waiter)) {
            Some(pos) => {
                list.remove(pos);
                ws.nr_waiting.fetch_sub(1, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }

    /// Leaves the wait: off the list if still there, `ws_active -= 1`. If a
    /// wakeup was meant for us but we got a bit on our own, pass it on so it
    /// is not lost to the other waiters.
    fn finish_wait(&self, ws: &WaitState, waiter: &Arc<SbqWaiter>) {
        let was_listed = self.unlist(ws, waiter);
        self.ws_active.fetch_sub(1, Ordering::SeqCst);
        // Consume a pending unpark so the next wait starts clean.
        let had_wakeup = !was_listed && waiter.parker.park(Some(std::time::Duration::ZERO));
        // A wakeup that came with granted bits is not lost: the bits stay
        // with the waiter for its next allocations (or release_granted).
        if had_wakeup && waiter.nr_granted() == 0 {
            self.wake_up_nr(1);
        }
    }

    /// A point-in-time view of the queue (what [`SbitmapQueue::show`]
    /// prints).
    pub fn snapshot(&self) -> SbqSnapshot {
        // First, Acquire: the waiting counts read below are at least as new
        // as what each counted sleeper did before it slept.
        let nr_sleeps = self.nr_sleeps.load(Ordering::Acquire);
        let mut ws_waiting = [0; SBQ_WAIT_QUEUES];
        for (i, ws) in self.ws.iter().enumerate() {
            ws_waiting[i] = ws.nr_waiting.load(Ordering::Relaxed);
        }
        SbqSnapshot {
            depth: self.sb.depth,
            busy: self.sb.weight(),
            bits_per_word: 1 << self.sb.shift,
            map_nr: self.sb.map_nr(),
            wake_batch: self.wake_batch(),
            wake_index: self.wake_index.load(Ordering::Relaxed),
            ws_active: self.ws_active.load(Ordering::Relaxed),
            ws_waiting,
            min_shallow_depth: self.min_shallow_depth,
            round_robin: self.sb.round_robin,
            policy: self.policy.name(),
            nr_sleeps,
        }
    }

    /// The debugfs `sbitmap_queue_show` equivalent.
    pub fn show(&self) -> String {
        use std::fmt::Write;
        let s = self.snapshot();
        let mut out = String::new();
        let _ = writeln!(out, "depth={}", s.depth);
        let _ = writeln!(out, "busy={}", s.busy);
        let _ = writeln!(out, "bits_per_word={}", s.bits_per_word);
        let _ = writeln!(out, "map_nr={}", s.map_nr);
        let _ = writeln!(out, "wake_batch={}", s.wake_batch);
        let _ = writeln!(out, "wake_index={}", s.wake_index);
        let _ = writeln!(out, "ws_active={}", s.ws_active);
        let _ = writeln!(out, "ws={:?}", s.ws_waiting);
        let _ = writeln!(out, "round_robin={}", u8::from(s.round_robin));
        let _ = writeln!(out, "min_shallow_depth={}", s.min_shallow_depth);
        let _ = writeln!(out, "wake_policy={}", s.policy);
        let _ = writeln!(out, "sleeps={}", s.nr_sleeps);
        self.policy.show(&mut out);
        out
    }
}
