//! Wakeup policies: how freed bits become wakeups of sleeping waiters.

use std::fmt;

use super::{Batch2017Wake, Batch2020Wake, SbitmapQueue, StashWake};
use crate::sync::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// How freed bits become wakeups. Implementations keep their own state.
///
/// Contract: `bits_freed` is called by a freer after its bits are visible in
/// the bitmap and only when `ws_active` was seen non-zero. An implementation
/// must eventually wake a waiter whenever bits are free and waiters sleep
/// (no lost wakeup), and must wake through [`SbitmapQueue::wake_up_nr`].
///
/// Every freed bit wakes one sleeper (the kernel's sbitmap before batched
/// wakeups), registered as `one` for `wake=one`:
///
/// ```
/// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
/// # ram::register();
/// use std::fmt::Write as _;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use mqblk::sbitmap::{register_wake_policy, wake_policy_names, SbitmapQueue, WakePolicy};
/// use mqblk::{Device, DeviceConfig, Wake};
///
/// #[derive(Debug, Default)]
/// struct WakeOne {
///     woken: AtomicU64,
/// }
///
/// impl WakePolicy for WakeOne {
///     fn name(&self) -> &'static str {
///         "one"
///     }
///     fn bits_freed(&self, sbq: &SbitmapQueue, nr: u32) {
///         let woken = sbq.wake_up_nr(nr);
///         self.woken.fetch_add(u64::from(woken), Ordering::Relaxed);
///     }
///     fn show(&self, out: &mut String) {
///         let _ = writeln!(out, "woken={}", self.woken.load(Ordering::Relaxed));
///     }
/// }
///
/// register_wake_policy("one", || Box::new(WakeOne::default())); // one per tag set
/// assert!(wake_policy_names().iter().any(|name| name == "one"));
///
/// let dev = Device::open("ram:size=64,hw_queue_depth=2,wake=one")?;
/// let mut clients: Vec<_> = (0..4).map(|_| dev.client()).collect();
/// let writers: Vec<_> = clients
///     .drain(..)
///     .map(|mut client| std::thread::spawn(move || client.write_at(&[0; 4096], 0)))
///     .collect();
/// for writer in writers {
///     writer.join().unwrap()?; // 4 writers, 2 tags: some may sleep, none stays asleep
/// }
/// assert!(dev.show_stats().contains("wake_policy=one"));
/// let cfg = DeviceConfig::parse("ram:size=64")?.wake(Wake::custom("one"));
/// assert_eq!(cfg.to_string(), "ram:size=64,wake=one");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait WakePolicy: Send + Sync + fmt::Debug {
    /// The policy's name as chosen on the command line (`wake=NAME`).
    fn name(&self) -> &'static str;
    /// `nr` bits were freed while waiters were active.
    fn bits_freed(&self, sbq: &SbitmapQueue, nr: u32);
    /// Extra lines for the debugfs-like dump.
    fn show(&self, _out: &mut String) {}
    /// Does this policy hand freed bits directly to waiters?
    fn hands_off(&self) -> bool {
        false
    }
    /// With `hands_off`, called for a freed bit before it is published, when
    /// waiters are active. True: the bit now belongs to a waiter.
    fn hand_off(&self, _sbq: &SbitmapQueue, _bit: u32) -> bool {
        false
    }
    /// A waiter ran `latency_ns` after it was woken.
    fn note_wake_latency(&self, _latency_ns: u64) {}
    /// Where a woken waiter that found no free bit (another thread took it
    /// first) goes back in its wait queue. false, the default: at the tail,
    /// as in the kernel, where the waiter calls sbitmap_prepare_to_wait ->
    /// prepare_to_wait_exclusive again, which adds the entry at the tail.
    /// true: at the head, keeping its place in line.
    fn requeue_at_head(&self) -> bool {
        false
    }
    /// Does a waiter pick its wait queue as the kernel's blk_mq_get_tag
    /// does, with `bt_wait_ptr` (the hardware context's `wait_index`,
    /// advanced at every wait, so a woken waiter that sleeps again moves to
    /// the next queue)? false, the default: the caller's `ws_index`, kept
    /// for the whole wait.
    fn waits_round_robin(&self) -> bool {
        false
    }
    /// Does the policy want `bit_allocated` after every single-bit
    /// allocation (fast path included)? Cached by the queue: false costs
    /// one predictable branch per allocation.
    fn counts_allocations(&self) -> bool {
        false
    }
    /// With `counts_allocations`, a bit was allocated.
    fn bit_allocated(&self) {}
}

/// The kernel 6.2+ wakeup: freed bits add to `completion_cnt`; whenever
/// `completion_cnt - wakeup_cnt >= wake_batch`, the freer that advances
/// `wakeup_cnt` by `wake_batch` (compare-and-swap) wakes up to `wake_batch`
/// waiters.
///
/// ```
/// use mqblk::sbitmap::{wake_policy, BatchWake, HandoffWake, SbitmapQueue, StashWake};
/// use mqblk::sbitmap::{DEFAULT_WAKE_POLICY, WAKE_POLICIES};
///
/// let batch = SbitmapQueue::with_policy(64, None, false, 64, Box::new(BatchWake::default()));
/// assert_eq!((batch.policy_name(), batch.wake_batch()), ("batch", 8));
/// // Stash from 2 waiters on (the RFC's default is 4).
/// let stash = SbitmapQueue::with_policy(64, None, false, 64, Box::new(StashWake::with_thresholds(16, 2)));
/// assert_eq!(stash.policy_name(), "stash");
/// // Handoff that never falls back to publishing freed bits.
/// let handoff = HandoffWake::with_max_idle_permille(u64::MAX);
/// assert_eq!(handoff.idle_permille(64), 0, "nothing measured yet");
///
/// // By name, as `wake=` chooses them.
/// assert_eq!(WAKE_POLICIES, ["batch", "stash", "handoff", "batch2017", "batch2020"]);
/// assert_eq!(wake_policy(DEFAULT_WAKE_POLICY).unwrap().name(), "handoff");
/// assert!(wake_policy("one").is_none(), "registered policies are Wake::custom's");
/// ```
#[derive(Debug, Default)]
pub struct BatchWake {
    completion_cnt: AtomicU32,
    wakeup_cnt: AtomicU32,
}

impl WakePolicy for BatchWake {
    fn name(&self) -> &'static str {
        "batch"
    }

    fn bits_freed(&self, sbq: &SbitmapQueue, nr: u32) {
        let wake_batch = sbq.wake_batch();
        self.completion_cnt.fetch_add(nr, Ordering::SeqCst);
        let mut wakeups = self.wakeup_cnt.load(Ordering::SeqCst);
        loop {
            // Wrapping arithmetic: both counters wrap at 2^32 together.
            if self.completion_cnt.load(Ordering::SeqCst).wrapping_sub(wakeups) < wake_batch {
                return;
            }
            match self.wakeup_cnt.compare_exchange_weak(
                wakeups,
                wakeups.wrapping_add(wake_batch),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => break,
                Err(actual) => wakeups = actual,
            }
        }
        sbq.wake_up_nr(wake_batch);
    }

    fn show(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(out, "completion_cnt={}", self.completion_cnt.load(Ordering::Relaxed));
        let _ = writeln!(out, "wakeup_cnt={}", self.wakeup_cnt.load(Ordering::Relaxed));
    }
}

/// mqblk's own policy: freed bits are handed directly to waiters.
///
/// While anyone waits, a freed bit is not published in the bitmap: it goes
/// to the waiter at the head of the wake order (FIFO within a wait queue,
/// round robin over the 8 queues), who is woken once it holds what it wants
/// (1 bit, or the pieces left of a split bio) and keeps receiving the next
/// freed bits while it wakes up, up to `wake_batch`. So:
/// - every wakeup is productive: the woken thread already owns its bits;
/// - nobody barges: running threads cannot take a bit meant for a sleeper,
///   so a waiter's wait is bounded by the grants to those ahead of it;
/// - the batch adapts to the real wakeup latency: the slower the wakeup, the
///   more bits the waiter finds granted, each saving it a sleep;
/// - the pieces of a split bio are issued back to back (disk locality).
///
/// The price: a granted bit is idle until its owner runs. With frees at
/// rate R, wakeup latency L and depth D, about R*L/D of the tag time is
/// lost. That is nothing when the device, not the tag count, is the
/// bottleneck (requests wait inside the device; R*L/D ~ 0.6% on the ssd
/// profile) but costs real throughput when tags are (~15% with 32 tags at
/// 250k IOPS here). So the policy measures R and L on the slow path (only
/// while waiters exist) and, when R*L/D exceeds `MAX_IDLE_PERMILLE`,
/// publishes freed bits and wakes like `batch` instead.
///
/// Granted bits the waiter does not use wait on its `SbqWaiter` for its next
/// allocations; the owner gives back leftovers with
/// `SbitmapQueue::release_granted` before it sleeps for other reasons.
///
/// Invariants: a bit is free in the bitmap, or busy (held, or granted to
/// exactly one listed waiter's list); grants happen under the wait-queue
/// lock to a listed waiter only, and a waiter leaves the list (finish_wait)
/// under that lock, so no grant goes to a waiter that stopped waiting without
/// it seeing the grant. With no listed waiter the bit is published and the
/// usual Dekker pair (publish, then look at ws_active) wakes a late waiter.
#[derive(Debug)]
pub struct HandoffWake {
    batch: BatchWake,
    /// Publish instead of granting above this idle share (per mille);
    /// u64::MAX: always hand off (strict FIFO, whatever it costs).
    max_idle_permille: u64,
    handoffs: AtomicUsize,
    published: AtomicUsize,
    /// Frees while waiters existed, in the current measuring window.
    window_frees: AtomicU64,
    window_start_ns: AtomicU64,
    /// Frees per second while waiters existed (last window).
    free_rate: AtomicU64,
    /// Wakeup latency, exponentially weighted (ns).
    wake_ns: AtomicU64,
}

/// Default: above this share of tag time lost to idle grants (per mille),
/// publish.
pub const MAX_IDLE_PERMILLE: u64 = 50;
/// Frees per measuring window of the free rate.
const RATE_WINDOW_FREES: u64 = 256;

impl Default for HandoffWake {
    fn default() -> Self {
        Self::with_max_idle_permille(MAX_IDLE_PERMILLE)
    }
}

impl HandoffWake {
    /// A handoff policy that falls back to publishing above `permille` of
    /// tag time idle in grants (`u64::MAX`: never; example: [`BatchWake`]).
    pub fn with_max_idle_permille(permille: u64) -> Self {
        Self {
            batch: BatchWake::default(),
            max_idle_permille: permille,
            handoffs: AtomicUsize::new(0),
            published: AtomicUsize::new(0),
            window_frees: AtomicU64::new(0),
            window_start_ns: AtomicU64::new(0),
            free_rate: AtomicU64::new(0),
            wake_ns: AtomicU64::new(0),
        }
    }

    /// Counts a free while waiters exist; every `RATE_WINDOW_FREES` frees,
    /// re-measures the free rate (one clock read per window).
    fn count_free(&self) {
        let n = self.window_frees.fetch_add(1, Ordering::Relaxed) + 1;
        if n % RATE_WINDOW_FREES != 0 {
            return;
        }
        let now = crate::clock::now_ns();
        let start = self.window_start_ns.swap(now, Ordering::Relaxed);
        if start != 0 && now > start {
            self.free_rate.store(RATE_WINDOW_FREES * 1_000_000_000 / (now - start), Ordering::Relaxed);
        }
    }

    /// Estimated share of tag time idle in grants, per mille.
    pub fn idle_permille(&self, depth: u32) -> u64 {
        let rate = self.free_rate.load(Ordering::Relaxed);
        let wake_ns = self.wake_ns.load(Ordering::Relaxed);
        rate.saturating_mul(wake_ns) / 1_000_000 / u64::from(depth.max(1))
    }

    fn handing_off(&self, depth: u32) -> bool {
        self.max_idle_permille == u64::MAX || self.idle_permille(depth) <= self.max_idle_permille
    }
}

impl WakePolicy for HandoffWake {
    fn name(&self) -> &'static str {
        "handoff"
    }

    fn hands_off(&self) -> bool {
        true
    }

    /// A waiter keeps its place in line (FIFO service is the point).
    fn requeue_at_head(&self) -> bool {
        true
    }

    fn hand_off(&self, sbq: &SbitmapQueue, bit: u32) -> bool {
        self.count_free();
        if !self.handing_off(sbq.depth()) {
            return false; // published; bits_freed wakes like batch
        }
        let handed = sbq.grant_to_head(bit, sbq.wake_batch());
        if handed {
            self.handoffs.fetch_add(1, Ordering::Relaxed);
        }
        handed
    }

    /// The bit was published: no waiter was listed yet (wake one, who
    /// retries the bitmap), or tags are the bottleneck (wake like batch).
    fn bits_freed(&self, sbq: &SbitmapQueue, nr: u32) {
        self.published.fetch_add(nr as usize, Ordering::Relaxed);
        if self.handing_off(sbq.depth()) {
            sbq.wake_up_nr(nr);
        } else {
            self.batch.bits_freed(sbq, nr);
        }
    }

    fn note_wake_latency(&self, latency_ns: u64) {
        // EWMA with weight 1/8; racy updates only blur the estimate.
        let old = self.wake_ns.load(Ordering::Relaxed);
        let new = if old == 0 { latency_ns } else { old - old / 8 + latency_ns / 8 };
        self.wake_ns.store(new, Ordering::Relaxed);
    }

    fn show(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(out, "handoffs={}", self.handoffs.load(Ordering::Relaxed));
        let _ = writeln!(out, "published_while_waiting={}", self.published.load(Ordering::Relaxed));
        let _ = writeln!(out, "free_rate_per_s={}", self.free_rate.load(Ordering::Relaxed));
        let _ = writeln!(out, "wake_latency_ns={}", self.wake_ns.load(Ordering::Relaxed));
        self.batch.show(out);
    }
}

/// Names accepted by `wake=`: today's kernel (`batch`), the RFC as posted
/// (`stash`), mqblk's own (`handoff`), and the wakeups of the 2017 and
/// 2020 kernels the source threads measured (kernel_wake.rs).
pub const WAKE_POLICIES: &[&str] = &["batch", "stash", "handoff", "batch2017", "batch2020"];

/// The policy a device uses unless its spec says `wake=`: mqblk's own.
/// Chosen on the tag-wakeup experiment's 1 MB rows, where jobs contend
/// for tags: of the four policies it runs, this one alone keeps the hdd's
/// 1-job IOPS at 72 jobs (a job's split requests stay together), and at
/// 72 jobs it sleeps less per I/O than both batched wakeups (5.6's and
/// today's) on every device; the RFC's stash sleeps less still, and loses
/// hdd IOPS. Its price: waiters are served strictly in order, so where
/// writes hold every tag (async-starvation without bfq's limits) each
/// read of a starting application waits its turn. The figures, with the command and commit that produced
/// them, are in docs/results/tag-wakeup.json (BENCHMARKS.md,
/// "tag-wakeup"), not repeated here.
pub const DEFAULT_WAKE_POLICY: &str = "handoff";

/// The built-in wakeup policy called `name` (`wake=NAME`), or None
/// (example: [`BatchWake`]).
pub fn wake_policy(name: &str) -> Option<Box<dyn WakePolicy>> {
    match name {
        "batch" => Some(Box::<BatchWake>::default()),
        "stash" => Some(Box::<StashWake>::default()),
        "handoff" => Some(Box::<HandoffWake>::default()),
        "batch2017" => Some(Box::<Batch2017Wake>::default()),
        "batch2020" => Some(Box::<Batch2020Wake>::default()),
        _ => None,
    }
}
