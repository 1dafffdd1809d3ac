//! `poll_mode=toggle`: a hardware queue shared by polled (hipri) and
//! interrupt-style requests, whose completion notifications are turned off
//! while hipri requests are in flight (the RFC "virtio_blk: implement blk_mq_ops->poll()").
//! Not the kernel's hybrid polling (io_poll_delay: sleep, then spin), which
//! mqblk's queues offer as `hybrid_poll_delay`.
//!
//! The emulated device posts a request's completion at its due time. Who
//! reaps it depends on the queue's notification state:
//! - notifications on: the queue's completion thread (the "interrupt
//!   handler") reaps it at its due time;
//! - notifications off: only pollers (clients in `poll`) reap it; the
//!   completion thread sleeps until notifications come back on.
//!
//! The toggling rules are the RFC's, all under the queue's lock:
//! - submitting the first hipri request turns notifications off;
//! - reaping the last hipri request turns them on if non-hipri requests are
//!   still pending (someone must complete them once nobody polls);
//! - submitting a non-hipri request to an idle queue turns them on.
//!
//! Two invariants follow and are asserted under the lock:
//! 1. notifications on => no hipri request in flight (so the completion
//!    thread never reaps one: a poller never waits on the thread);
//! 2. no hipri in flight and non-hipri ones pending => notifications on
//!    (so a non-hipri completion is never left to a poller that is gone).
//!
//! Because the notification state and both counts change together under
//! one lock, a toggle cannot interleave with a count change (the RFC's
//! race). The remaining race is the completion thread deciding to sleep
//! while a poller turns notifications on: the sleep gate's Dekker protocol
//! closes it, and the loom model at the end of this file checks both.
//!
//! The completion thread waits for a due time with timer.rs (sleep to just
//! before it, spin the rest) and, idle, spins as irq.rs's threads do.
//!
//! Relies on: sync.rs (Mutex, SleepGate; loom-aware), timer.rs, nothing of
//! the block layer: the payload is generic so the model can use plain numbers.

use std::collections::VecDeque;
use std::thread::JoinHandle;

use super::irq::{idle_spin_ns, keep_spinning};
use super::timer::TimerLead;
use mqblk::clock::{now_ns, set_precise_timer_slack};
use mqblk::driver::Rq;
use mqblk::Status;
use mqblk_sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering, SleepGate};

struct Entry<T> {
    item: T,
    due_ns: u64,
    hipri: bool,
}

struct CqState<T> {
    /// Posted or not-yet-due completions, in submission order (due times
    /// are nondecreasing per queue for every null service model but the
    /// channels; a late head only delays, never loses, the ones behind).
    pending: VecDeque<Entry<T>>,
    num_hipri: u32,
    num_lopri: u32,
    notify_on: bool,
}

impl<T> CqState<T> {
    /// Checked always: two compares under a lock already held, and a
    /// broken invariant loses completions silently.
    #[inline]
    fn check_invariants(&self) {
        assert!(!self.notify_on || self.num_hipri == 0, "notifications on with hipri in flight");
        assert!(
            self.notify_on || self.num_hipri > 0 || self.num_lopri == 0,
            "non-hipri requests pending with notifications off and nobody polling"
        );
        debug_assert_eq!(self.pending.len(), (self.num_hipri + self.num_lopri) as usize);
    }
}

/// What the completion thread found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum IrqReap<T> {
    /// A completion to deliver.
    Done(T),
    /// Notifications are on and the head is due at this time.
    NotDue(u64),
    /// Nothing for the thread: empty, or notifications off.
    Idle,
}

/// Toggle and reap counters (shown by the null driver).
#[derive(Debug, Default)]
pub(crate) struct ToggleStats {
    pub(crate) notify_off: AtomicU64,
    pub(crate) notify_on: AtomicU64,
    pub(crate) irq_reaped: AtomicU64,
    pub(crate) poll_reaped: AtomicU64,
    /// The completion thread's timed waits, how late they ended in total
    /// and at worst (ns past the due time), and its timer's sleeps, spin
    /// (ns) and lead (ns), as irq.rs counts them.
    pub(crate) timed: AtomicU64,
    pub(crate) late_ns_sum: AtomicU64,
    pub(crate) late_ns_max: AtomicU64,
    pub(crate) timer_sleeps: AtomicU64,
    pub(crate) timer_spin_ns: AtomicU64,
    pub(crate) timer_lead_ns: AtomicU64,
}

impl ToggleStats {
    /// Records one timed wait of the completion thread (its only writer:
    /// plain loads and stores suffice).
    fn record_wait(&self, late_ns: u64, timer: &TimerLead) {
        self.timed.store(self.timed.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        self.late_ns_sum.store(self.late_ns_sum.load(Ordering::Relaxed) + late_ns, Ordering::Relaxed);
        if late_ns > self.late_ns_max.load(Ordering::Relaxed) {
            self.late_ns_max.store(late_ns, Ordering::Relaxed);
        }
        self.timer_sleeps.store(timer.sleeps, Ordering::Relaxed);
        self.timer_spin_ns.store(timer.spin_ns, Ordering::Relaxed);
        self.timer_lead_ns.store(timer.lead_ns(), Ordering::Relaxed);
    }
}

/// One toggling hardware queue's completion side.
pub(crate) struct ToggleCq<T> {
    state: Mutex<CqState<T>>,
    /// Mirror of `notify_on` for the completion thread's sleep check.
    notify_on: AtomicBool,
    pub(crate) gate: SleepGate,
    pub(crate) stats: ToggleStats,
}

impl<T> ToggleCq<T> {
    pub(crate) fn new(depth: usize) -> Self {
        Self {
            state: Mutex::new(CqState {
                pending: VecDeque::with_capacity(depth),
                num_hipri: 0,
                num_lopri: 0,
                notify_on: true,
            }),
            notify_on: AtomicBool::new(true),
            gate: SleepGate::default(),
            stats: ToggleStats::default(),
        }
    }

    fn set_notify(&self, st: &mut CqState<T>, on: bool) {
        st.notify_on = on;
        self.notify_on.store(on, Ordering::SeqCst);
        let counter = if on { &self.stats.notify_on } else { &self.stats.notify_off };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Queues a request's completion, due at `due_ns`.
    pub(crate) fn submit(&self, item: T, due_ns: u64, hipri: bool) {
        let wake = {
            let mut st = self.state.lock();
            if !hipri && st.num_hipri == 0 && st.num_lopri == 0 && !st.notify_on {
                self.set_notify(&mut st, true);
            }
            st.pending.push_back(Entry { item, due_ns, hipri });
            if hipri {
                st.num_hipri += 1;
                if st.num_hipri == 1 && st.notify_on {
                    self.set_notify(&mut st, false);
                }
            } else {
                st.num_lopri += 1;
            }
            st.check_invariants();
            st.notify_on
        };
        if wake {
            // The thread sleeps while idle: it must learn of the new due time.
            self.gate.notify();
        }
    }

    /// Pops the head if it is due at `now_ns`, updating counts and turning
    /// notifications on after the last hipri request if others remain.
    /// Returns the entry and whether notifications were just turned on.
    fn pop_due(&self, st: &mut CqState<T>, now_ns: u64) -> Option<(T, bool)> {
        if st.pending.front()?.due_ns > now_ns {
            return None;
        }
        let e = st.pending.pop_front()?;
        let mut turned_on = false;
        if e.hipri {
            st.num_hipri -= 1;
            if st.num_hipri == 0 && st.num_lopri > 0 {
                self.set_notify(st, true);
                turned_on = true;
            }
        } else {
            st.num_lopri -= 1;
        }
        st.check_invariants();
        Some((e.item, turned_on))
    }

    /// A poller's reap of one due completion (hipri or not: polling reaps
    /// whatever the queue posted). The caller completes it outside the lock.
    pub(crate) fn poll_one(&self, now_ns: u64) -> Option<T> {
        let (item, turned_on) = {
            let mut st = self.state.lock();
            self.pop_due(&mut st, now_ns)?
        };
        self.stats.poll_reaped.fetch_add(1, Ordering::Relaxed);
        if turned_on {
            // Nobody may poll again: the thread takes over the rest.
            self.gate.notify();
        }
        Some(item)
    }

    /// The completion thread's reap: only while notifications are on, or
    /// regardless of them with `force` (shutdown: nobody will poll).
    pub(crate) fn irq_one(&self, now_ns: u64, force: bool) -> IrqReap<T> {
        let mut st = self.state.lock();
        if !st.notify_on && !force {
            return IrqReap::Idle;
        }
        let Some(head_due) = st.pending.front().map(|e| e.due_ns) else { return IrqReap::Idle };
        match self.pop_due(&mut st, now_ns) {
            Some((item, _)) => {
                self.stats.irq_reaped.fetch_add(1, Ordering::Relaxed);
                IrqReap::Done(item)
            }
            None => IrqReap::NotDue(head_due),
        }
    }

    /// Whether the completion thread has something to do (its sleep check).
    pub(crate) fn has_irq_work(&self) -> bool {
        self.notify_on.load(Ordering::SeqCst) && !self.state.lock().pending.is_empty()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.state.lock().pending.is_empty()
    }

    /// (hipri, non-hipri) in flight, and whether notifications are on.
    pub(crate) fn snapshot(&self) -> (u32, u32, bool) {
        let st = self.state.lock();
        (st.num_hipri, st.num_lopri, st.notify_on)
    }
}

/// A toggling queue of the null device: the completion side plus its
/// completion thread.
pub(crate) struct ToggleQueue {
    cq: Arc<ToggleCq<(Rq, Status)>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ToggleQueue {
    /// After going idle the thread spins as the interrupt-only queues'
    /// does (`idle_spin_ns`), so both designs compare fairly;
    /// `cpu`: the one CPU the thread may run on (`irq_cpus`).
    pub(crate) fn start(index: usize, depth: usize, cpu: Option<usize>) -> std::io::Result<Self> {
        let cq = Arc::new(ToggleCq::new(depth));
        let stop = Arc::new(AtomicBool::new(false));
        let (thread_cq, thread_stop) = (cq.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name(format!("null-toggle{index}"))
            .spawn(move || toggle_loop(&thread_cq, &thread_stop))?;
        let queue = Self { cq, stop, thread: Mutex::new(Some(thread)) };
        if let Some(cpu) = cpu {
            // On error, dropping `queue` stops the thread.
            queue.thread.lock().as_ref().map_or(Ok(()), |t| super::irq::pin_thread(t, cpu))?;
        }
        Ok(queue)
    }

    #[inline]
    pub(crate) fn submit(&self, rq: Rq, status: Status, due_ns: u64, hipri: bool) {
        self.cq.submit((rq, status), due_ns, hipri);
    }

    /// Completes what is due on the calling thread (a client's poll).
    pub(crate) fn poll(&self) -> usize {
        let now = now_ns();
        let mut done = 0;
        while let Some((rq, status)) = self.cq.poll_one(now) {
            super::end_rq(rq, status);
            done += 1;
        }
        done
    }

    pub(crate) fn stats(&self) -> &ToggleStats {
        &self.cq.stats
    }

    pub(crate) fn snapshot(&self) -> (u32, u32, bool) {
        self.cq.snapshot()
    }

    /// Completes everything still queued (at its due time) and joins.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.cq.gate.force_wake();
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for ToggleQueue {
    fn drop(&mut self) {
        self.stop();
    }
}

fn toggle_loop(cq: &ToggleCq<(Rq, Status)>, stop: &AtomicBool) {
    set_precise_timer_slack();
    let mut idle_since: Option<u64> = None;
    let mut timer = TimerLead::default();
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        match cq.irq_one(now_ns(), stopping) {
            IrqReap::Done((rq, status)) => {
                super::end_rq(rq, status);
                idle_since = None;
                continue;
            }
            IrqReap::NotDue(due_ns) => {
                // A poller may reap it meanwhile: the next round sees that.
                let late_ns = timer.wait_until(due_ns) - due_ns;
                cq.stats.record_wait(late_ns, &timer);
                continue;
            }
            IrqReap::Idle => {}
        }
        if stopping && cq.is_empty() {
            return; // no submitter is left (the queue is going)
        }
        if keep_spinning(&mut idle_since, idle_spin_ns(&cq.gate)) {
            continue;
        }
        idle_since = None;
        cq.gate.sleep_unless(|| cq.has_irq_work() || stop.load(Ordering::SeqCst), None);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn first_hipri_turns_notifications_off_and_last_turns_them_back_on() {
        let cq = ToggleCq::new(8);
        cq.submit(1u32, 0, false);
        assert_eq!(cq.snapshot(), (0, 1, true));
        cq.submit(2, 0, true);
        assert_eq!(cq.snapshot(), (1, 1, false), "hipri in flight: off");
        assert_eq!(cq.irq_one(0, false), IrqReap::Idle, "the thread leaves completions to pollers");
        assert_eq!(cq.poll_one(0), Some(1), "polling reaps non-hipri completions too");
        assert_eq!(cq.snapshot(), (1, 0, false));
        cq.submit(3, 10, false);
        assert_eq!(cq.snapshot(), (1, 1, false), "a non-hipri behind a hipri stays polled");
        assert_eq!(cq.poll_one(0), Some(2));
        assert_eq!(cq.snapshot(), (0, 1, true), "last hipri reaped with others pending: on");
        assert_eq!(cq.poll_one(0), None, "3 is not due yet");
        assert_eq!(cq.irq_one(5, false), IrqReap::NotDue(10));
        assert_eq!(cq.irq_one(10, false), IrqReap::Done(3));
        assert_eq!(cq.stats.notify_off.load(Ordering::Relaxed), 1);
        assert_eq!(cq.stats.notify_on.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_idle_queue_turns_notifications_on_for_the_next_non_hipri() {
        let cq = ToggleCq::new(4);
        cq.submit(1u32, 0, true);
        assert_eq!(cq.poll_one(0), Some(1));
        assert_eq!(cq.snapshot(), (0, 0, false), "nothing pending: stays off (the RFC)");
        cq.submit(2, 0, false);
        assert_eq!(cq.snapshot(), (0, 1, true));
        assert_eq!(cq.irq_one(0, false), IrqReap::Done(2));
    }

    #[test]
    fn shutdown_reaps_regardless_of_notifications() {
        let cq = ToggleCq::new(4);
        cq.submit(1u32, 0, true);
        assert_eq!(cq.irq_one(0, false), IrqReap::Idle);
        assert_eq!(cq.irq_one(0, true), IrqReap::Done(1));
        assert!(cq.is_empty());
    }
}

/// loom model of the notification toggle. Run with:
/// RUSTFLAGS="--cfg loom" cargo test -p mqblk-null --release --lib -- loom
#[cfg(all(test, loom))]
mod loom_tests {
    use mqblk_sync::Arc;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(f);
    }

    /// Notification toggling (null poll_mode=toggle, this module): a poller
    /// submits a hipri request and reaps it; another client's plain request
    /// lands on the same queue meanwhile. The completion thread runs its real
    /// loop (reap while notifications are on, else sleep on the gate). Each
    /// request must be reaped exactly once, and after the poller leaves, the
    /// plain request must still be reaped: a toggle that loses it leaves the
    /// completion thread asleep, which loom reports as a deadlock.
    #[test]
    fn loom_toggle_never_loses_a_completion() {
        use super::{IrqReap, ToggleCq};
        use mqblk_sync::{AtomicU32, Ordering};
        const HIPRI: u64 = 0;
        const PLAIN: u64 = 1;
        struct Seen([AtomicU32; 2], AtomicU32);
        impl Seen {
            /// Records a reap; true once both requests are reaped.
            fn record(&self, id: u64) -> bool {
                self.0[id as usize].fetch_add(1, Ordering::SeqCst);
                self.1.fetch_add(1, Ordering::SeqCst) + 1 == 2
            }
            fn all(&self) -> bool {
                self.1.load(Ordering::SeqCst) == 2
            }
        }
        model(|| {
            let cq = Arc::new(ToggleCq::<u64>::new(2));
            let seen = Arc::new(Seen([AtomicU32::new(0), AtomicU32::new(0)], AtomicU32::new(0)));
            let poller = {
                let (cq, seen) = (cq.clone(), seen.clone());
                loom::thread::spawn(move || {
                    cq.submit(HIPRI, 0, true);
                    loop {
                        match cq.poll_one(0) {
                            Some(id) => {
                                if seen.record(id) {
                                    // Model only: let the thread's loop end.
                                    cq.gate.notify();
                                }
                                if id == HIPRI {
                                    return; // leaves: nobody polls any more
                                }
                            }
                            None => loom::thread::yield_now(),
                        }
                    }
                })
            };
            let irq = {
                let (cq, seen) = (cq.clone(), seen.clone());
                loom::thread::spawn(move || loop {
                    if let IrqReap::Done(id) = cq.irq_one(0, false) {
                        seen.record(id);
                        continue;
                    }
                    if seen.all() {
                        return;
                    }
                    cq.gate.sleep_unless(|| cq.has_irq_work() || seen.all(), None);
                })
            };
            cq.submit(PLAIN, 0, false);
            poller.join().unwrap();
            irq.join().unwrap();
            assert_eq!(seen.0[0].load(Ordering::SeqCst), 1, "hipri reaped once");
            assert_eq!(seen.0[1].load(Ordering::SeqCst), 1, "plain reaped once");
            assert_eq!(cq.snapshot().0 + cq.snapshot().1, 0);
        });
    }
}
