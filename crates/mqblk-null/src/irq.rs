//! The null device's completion threads: irqmode=1 (softirq: complete as
//! soon as possible, on another thread) and irqmode=2 (timer: complete
//! `completion_nsec` after submission).
//!
//! One thread per hardware queue, never one per request. Requests reach it
//! through a bounded ring (capacity: the queue depth, so a push never
//! fails) tagged with the time they are due. Submissions are in time order
//! per queue, so the ring is (almost exactly) a timer list sorted by due
//! time. The thread sleeps while the ring is empty (woken by the submitter
//! only when it really sleeps) and, in timer mode, sleeps to just before
//! each due time and spins the rest (timer.rs), as the kernel's null_blk
//! arms an hrtimer and leaves the CPU free until it fires.
//!
//! A handoff between two threads that each sleep when idle has a trap on a
//! shared CPU: a wakeup preempts the waker, so whichever side holds the
//! backlog is cut off after one item, and the pair settles into a sleep and
//! a wake per I/O (the client sleeping per completion, or this thread per
//! submission) and stays there. So the thread wakes clients once per run
//! of completions (`CompletionBatch`), and yields once when a submitter on
//! its own CPU woke it. On two CPUs the trap is another: a submitter
//! slower than this thread finds it falling asleep after each request and
//! pays a futex wake per I/O, which slows it further. So after the ring
//! empties the thread looks for new requests for `HANDOFF_SPIN_NS` (about
//! what a sleep and a wake cost) before it sleeps, unless its last waker
//! shared its CPU. Timer mode does the same. A longer idle spin, to be
//! awake for the next due time, would run on the CPUs the jobs need; and
//! it buys nothing measurable: at QD1 with 2 jobs on 2 CPUs, sleeping at
//! once and spinning 5 us first gave the same median latency, lateness
//! (about 1 us) and device CPU per I/O. A submitter on the thread's CPU
//! wakes it in 1-2 us, one on another CPU in about 20 us (an IPI to an
//! idle vCPU here, as late as a timer), either within a completion time
//! of tens of microseconds.

use std::thread::JoinHandle;

use super::timer::TimerLead;
use mqblk::clock::{now_ns, set_precise_timer_slack};
use mqblk::driver::{CompletionBatch, Rq};
use mqblk::Status;
use mqblk_sync::ring::MpscRing;
use std::sync::Arc;

use mqblk_sync::{AtomicBool, AtomicU64, Mutex, Ordering, SleepGate};

/// irqmode=0 with a bandwidth limit: the submitter waits its own turn,
/// spinning for the last 60 us (timer sleeps here overshoot by about 20 us
/// and at times by far more). Under Miri 1 us: its clock advances with
/// every interpreted step and its sleeps end on time, so a spin there
/// costs minutes of interpretation and buys nothing.
pub(crate) const INLINE_SPIN_NS: u64 = if cfg!(miri) { 1_000 } else { 60_000 };

/// irqmode=1: after the ring empties, look for new requests for this long
/// before sleeping, unless the last submitter to wake this thread ran on
/// its CPU (then it cannot submit while we spin). A sleep and a wake cost
/// about 5 us here (two futex calls and two context switches: the
/// handoff that sleeps per I/O on one CPU runs at 150-190k IOPS), so a
/// spin as long costs at most what it saves (the classic bound for
/// spinning before blocking). Without it, a submitter on another CPU,
/// slower than this thread, finds it going to sleep after each request and
/// pays a futex wake per I/O, which slows it further: that handoff settles
/// there too. Under Miri 1 us, as `INLINE_SPIN_NS`.
pub(crate) const HANDOFF_SPIN_NS: u64 = if cfg!(miri) { 1_000 } else { 5_000 };

pub(crate) struct Pending {
    pub(crate) rq: Rq,
    pub(crate) due_ns: u64,
    pub(crate) status: Status,
}

struct Shared {
    ring: MpscRing<Pending>,
    gate: SleepGate,
    stop: AtomicBool,
    completed: AtomicU64,
    /// Timed completions, and how late they were noticed in total and at
    /// worst (ns past their due time): the timer's precision.
    timed: AtomicU64,
    late_ns_sum: AtomicU64,
    late_ns_max: AtomicU64,
    /// The timer's sleeps, its spin in total (ns) and its current lead
    /// (ns): how much of each wait the thread left the CPU.
    timer_sleeps: AtomicU64,
    timer_spin_ns: AtomicU64,
    timer_lead_ns: AtomicU64,
}

/// Completions between two wakeups of their clients at most, so that a
/// long run does not hold the first ones back (io_uring's IO_COMPL_BATCH).
pub const BATCH_MAX: usize = 32;

/// Pushes to a full completion ring retried before it counts as a broken
/// tag invariant.
const RING_FULL_TRIES: u32 = 1_000_000;

/// One hardware queue's completion thread.
pub(crate) struct IrqQueue {
    shared: Arc<Shared>,
    /// Taken (and joined) by `stop`, which shutdown calls through `&self`.
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl IrqQueue {
    /// `cpu`: the one CPU the thread may run on (`irq_cpus`).
    pub(crate) fn start(index: usize, depth: usize, cpu: Option<usize>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            ring: MpscRing::new(depth),
            gate: SleepGate::default(),
            stop: AtomicBool::new(false),
            completed: AtomicU64::new(0),
            timed: AtomicU64::new(0),
            late_ns_sum: AtomicU64::new(0),
            late_ns_max: AtomicU64::new(0),
            timer_sleeps: AtomicU64::new(0),
            timer_spin_ns: AtomicU64::new(0),
            timer_lead_ns: AtomicU64::new(0),
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("null-irq{index}"))
            .spawn(move || completion_loop(&thread_shared))?;
        let queue = Self { shared, thread: Mutex::new(Some(thread)) };
        if let Some(cpu) = cpu {
            // On error, dropping `queue` stops the thread.
            queue.thread.lock().as_ref().map_or(Ok(()), |t| pin_thread(t, cpu))?;
        }
        Ok(queue)
    }

    /// Queues `pending` for completion at its due time.
    #[inline]
    pub(crate) fn push(&self, pending: Pending) {
        let mut pending = pending;
        let mut tries = 0u32;
        // The ring holds a slot per tag, so a slot is always free; but the
        // consumer's freeing of it need not be visible yet to a submitter
        // whose tag was freed by another completion (nothing orders the two
        // in the memory model: Miri showed it). Retry until it is.
        while let Err(back) = self.shared.ring.push(pending) {
            pending = back;
            tries += 1;
            assert!(tries < RING_FULL_TRIES, "null completion ring overflow: more requests in flight than tags");
            std::thread::yield_now();
        }
        self.shared.gate.notify();
    }

    pub(crate) fn completed(&self) -> u64 {
        self.shared.completed.load(Ordering::Relaxed)
    }

    pub(crate) fn pending(&self) -> usize {
        self.shared.ring.len()
    }

    /// (timed completions, mean lateness ns, worst lateness ns).
    pub(crate) fn lateness(&self) -> (u64, u64, u64) {
        let n = self.shared.timed.load(Ordering::Relaxed);
        let sum = self.shared.late_ns_sum.load(Ordering::Relaxed);
        (n, sum.checked_div(n).unwrap_or(0), self.shared.late_ns_max.load(Ordering::Relaxed))
    }

    /// (sleeps, total spin ns, current lead ns) of the timer.
    pub(crate) fn timer(&self) -> (u64, u64, u64) {
        let s = &self.shared;
        (
            s.timer_sleeps.load(Ordering::Relaxed),
            s.timer_spin_ns.load(Ordering::Relaxed),
            s.timer_lead_ns.load(Ordering::Relaxed),
        )
    }

    /// Completes everything still queued (at its due time) and joins.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.gate.force_wake();
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for IrqQueue {
    fn drop(&mut self) {
        self.stop();
    }
}

fn completion_loop(shared: &Shared) {
    set_precise_timer_slack();
    let mut idle_since: Option<u64> = None;
    let mut timer = TimerLead::default();
    // The clients of a run of completions are woken once, when it ends
    // (the core's completion/batch.rs), as an interrupt handler completes
    // its whole queue before the tasks it woke run: a wakeup that preempted
    // this thread after each completion would have the client reap one I/O
    // per sleep.
    let mut batch = CompletionBatch::begin();
    let mut in_batch = 0usize;
    loop {
        // SAFETY: this thread is the ring's only consumer.
        if let Some(p) = unsafe { shared.ring.pop() } {
            if p.due_ns > 0 {
                if in_batch > 0 && p.due_ns > now_ns() {
                    // Hold nothing back while waiting for this one.
                    batch.flush();
                    in_batch = 0;
                }
                let late_ns = timer.wait_until(p.due_ns) - p.due_ns;
                // Only this thread writes these: plain load/store suffices.
                let st = shared;
                st.timed.store(st.timed.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                st.late_ns_sum.store(st.late_ns_sum.load(Ordering::Relaxed) + late_ns, Ordering::Relaxed);
                if late_ns > st.late_ns_max.load(Ordering::Relaxed) {
                    st.late_ns_max.store(late_ns, Ordering::Relaxed);
                }
                st.timer_sleeps.store(timer.sleeps, Ordering::Relaxed);
                st.timer_spin_ns.store(timer.spin_ns, Ordering::Relaxed);
                st.timer_lead_ns.store(timer.lead_ns(), Ordering::Relaxed);
            }
            super::end_rq(p.rq, p.status);
            shared.completed.fetch_add(1, Ordering::Relaxed);
            in_batch += 1;
            if in_batch == BATCH_MAX {
                batch.flush();
                in_batch = 0;
            }
            idle_since = None;
            continue;
        }
        if in_batch > 0 {
            batch.flush();
            in_batch = 0;
        }
        if shared.stop.load(Ordering::SeqCst) {
            return; // ring empty and no submitter left (the queue is going)
        }
        if keep_spinning(&mut idle_since, idle_spin_ns(&shared.gate)) {
            continue;
        }
        idle_since = None;
        let has_work = || shared.ring.has_ready() || shared.stop.load(Ordering::SeqCst);
        if shared.gate.sleep_unless(has_work, None) && shared.gate.woken_on_this_cpu() {
            // The submitter that woke us shares this CPU, and the wakeup
            // preempted it after one submission. Let it run on: it submits
            // the rest (to a thread that is awake, so without wakeups) and
            // we complete them in one batch when it sleeps or its slice
            // ends, as the kernel's softirq runs when the submitting CPU
            // leaves the submission path, not at each request.
            std::thread::yield_now();
        }
    }
}

/// How long to look for new requests after the ring empties:
/// `HANDOFF_SPIN_NS`, or not at all when the last wakeup came from this
/// CPU (its submitter shares it, and cannot submit while we spin).
pub(crate) fn idle_spin_ns(gate: &SleepGate) -> u64 {
    if gate.woken_on_this_cpu() {
        0
    } else {
        HANDOFF_SPIN_NS
    }
}

/// The idle spin: true (after a spin-loop hint) while the thread has been
/// idle for less than `spin_ns` since `idle_since` (set on the first idle
/// round); false at once for 0.
pub(crate) fn keep_spinning(idle_since: &mut Option<u64>, spin_ns: u64) -> bool {
    if spin_ns == 0 {
        return false;
    }
    let now = now_ns();
    let since = *idle_since.get_or_insert(now);
    if now - since < spin_ns {
        std::hint::spin_loop();
        return true;
    }
    false
}

/// Restricts a completion thread to one CPU (null `irq_cpus`, as an
/// interrupt's affinity is set in /proc/irq/N/smp_affinity). Fails if the
/// CPU is offline or outside the process's cpuset.
pub(crate) fn pin_thread(thread: &JoinHandle<()>, cpu: usize) -> std::io::Result<()> {
    use std::os::unix::thread::JoinHandleExt;
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu < CPU_SETSIZE (checked above), so CPU_SET stays inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the handle's pthread_t names a thread that is not joined yet
    // (the caller holds its JoinHandle); `set` is initialised above.
    let rc =
        unsafe { libc::pthread_setaffinity_np(thread.as_pthread_t(), std::mem::size_of::<libc::cpu_set_t>(), &set) };
    match rc {
        0 => Ok(()),
        errno => Err(std::io::Error::from_raw_os_error(errno)),
    }
}

/// Due time of a request submitted at `now_ns` under irqmode 2.
pub(crate) fn timer_due(completion_nsec: u64) -> u64 {
    now_ns() + completion_nsec
}
