//! Atomics, locks and sleeping, swapped for loom's under `cfg(loom)`.
//!
//! Every atomic protocol in mqblk (sbitmap words, wait queues, completion
//! rings, parkers) is written against this module so that the loom models in
//! `tests/loom_*.rs` explore the same code that runs in production.
//!
//! Relies on: `parking_lot` for short critical sections, the Linux futex
//! syscall for sleeping (so a waiting thread really sleeps and counts as a
//! voluntary context switch), and loom's replacements under `cfg(loom)`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

pub(crate) use std::sync::atomic::Ordering;

use std::time::Duration;

/// A mutex for short critical sections (parking_lot's, or loom's).
#[derive(Debug, Default)]
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(value),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(not(loom))]
        {
            self.inner.lock()
        }
        #[cfg(loom)]
        {
            // A poisoned lock means a model thread panicked: the model has
            // already failed, so propagating the panic is right.
            self.inner.lock().expect("loom mutex poisoned")
        }
    }
}

/// An `UnsafeCell` with loom's closure API, so slot accesses are tracked by
/// loom's race detector.
#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// A one-shot wakeup token for one sleeping thread, like the kernel's
/// `wake_up_process` on a task in `TASK_UNINTERRUPTIBLE`.
///
/// `unpark` before `park` is remembered, so a wakeup can never be lost
/// between "decide to sleep" and "sleep". `park` sleeps in the kernel (futex),
/// never spins.
#[derive(Debug)]
pub(crate) struct Parker {
    #[cfg(not(loom))]
    state: AtomicU32,
    #[cfg(loom)]
    notified: loom::sync::Mutex<bool>,
    #[cfg(loom)]
    condvar: loom::sync::Condvar,
}

#[cfg(not(loom))]
const PARKER_EMPTY: u32 = 0;
#[cfg(not(loom))]
const PARKER_NOTIFIED: u32 = 1;
#[cfg(not(loom))]
const PARKER_PARKED: u32 = u32::MAX;

impl Default for Parker {
    fn default() -> Self {
        Self::new()
    }
}

impl Parker {
    pub(crate) fn new() -> Self {
        Self {
            #[cfg(not(loom))]
            state: AtomicU32::new(PARKER_EMPTY),
            #[cfg(loom)]
            notified: loom::sync::Mutex::new(false),
            #[cfg(loom)]
            condvar: loom::sync::Condvar::new(),
        }
    }

    /// Sleeps until `unpark` is called (or was called since the last `park`)
    /// or `timeout` passes. Returns true if woken by `unpark`.
    #[cfg(not(loom))]
    pub(crate) fn park(&self, timeout: Option<Duration>) -> bool {
        // EMPTY -> PARKED, or NOTIFIED -> EMPTY (consume a pending wakeup).
        // Acquire pairs with the Release swap in `unpark`, so whatever the
        // waker wrote before waking us is visible after we return.
        if self.state.fetch_sub(1, Ordering::Acquire) == PARKER_NOTIFIED {
            return true;
        }
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            let remaining = match deadline {
                None => None,
                Some(d) => {
                    let now = std::time::Instant::now();
                    if now >= d {
                        // Timed out: leave PARKED, but keep a racing wakeup.
                        return self.state.swap(PARKER_EMPTY, Ordering::Acquire) == PARKER_NOTIFIED;
                    }
                    Some(d - now)
                }
            };
            futex_wait(&self.state, PARKER_PARKED, remaining);
            if self.state.compare_exchange(PARKER_NOTIFIED, PARKER_EMPTY, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                return true;
            }
            // Spurious futex return or timeout: loop re-checks the deadline.
        }
    }

    /// Wakes the parked thread, or makes its next `park` return at once.
    #[cfg(not(loom))]
    pub(crate) fn unpark(&self) {
        if self.state.swap(PARKER_NOTIFIED, Ordering::Release) == PARKER_PARKED {
            futex_wake(&self.state, 1);
        }
    }

    /// Under loom time does not exist: a park with a timeout only consumes a
    /// pending wakeup and never sleeps.
    #[cfg(loom)]
    pub(crate) fn park(&self, timeout: Option<Duration>) -> bool {
        let mut notified = self.notified.lock().expect("loom mutex poisoned");
        if timeout.is_some() {
            return std::mem::replace(&mut *notified, false);
        }
        while !*notified {
            notified = self.condvar.wait(notified).expect("loom mutex poisoned");
        }
        *notified = false;
        true
    }

    #[cfg(loom)]
    pub(crate) fn unpark(&self) {
        *self.notified.lock().expect("loom mutex poisoned") = true;
        self.condvar.notify_one();
    }
}

/// Sleeps while `*word == expected`, at most `timeout`.
#[cfg(not(loom))]
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // FUTEX_PRIVATE_FLAG: all waiters and wakers are threads of this process.
    // SAFETY: `word` is a live AtomicU32 for the call (the kernel only reads
    // it); `ts_ptr` is null or points to a timespec on this stack frame.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, expected, ts_ptr);
    }
}

/// Wakes up to `nr` threads sleeping in `futex_wait` on `word`.
#[cfg(not(loom))]
pub(crate) fn futex_wake(word: &AtomicU32, nr: u32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; `word` is live.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            nr.min(i32::MAX as u32) as i32,
        );
    }
}

/// The fence of a store-buffering (Dekker) handshake: between a SeqCst RMW
/// and a SeqCst load of another location. The C++ model already orders those
/// (and x86 RMWs are full barriers, like the kernel's smp_mb__after_atomic),
/// so it is empty in production; loom models SeqCst accesses as AcqRel, so
/// there it is a real SeqCst fence.
#[inline(always)]
pub(crate) fn dekker_fence() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// The queue's door (the kernel's queue freeze): submitters pass it, a
/// freezer closes it and waits until no one is inside. Each submitter has
/// its own `entered` flag; the door is one `frozen` flag. A Dekker pair:
/// the submitter stores `entered` then reads `frozen`, the freezer stores
/// `frozen` then reads every `entered`, all SeqCst, so at least one of them
/// sees the other: no submitter is inside while the freezer believes the
/// queue empty. Model-checked in loom_models.rs.
pub(crate) mod door {
    use super::{dekker_fence, AtomicBool, Ordering};

    /// Tries to enter; false (and not inside) if the door is closed.
    #[inline(always)]
    pub(crate) fn enter(entered: &AtomicBool, frozen: &AtomicBool) -> bool {
        entered.store(true, Ordering::SeqCst);
        dekker_fence();
        if frozen.load(Ordering::SeqCst) {
            entered.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    #[inline(always)]
    pub(crate) fn leave(entered: &AtomicBool) {
        entered.store(false, Ordering::Release);
    }

    /// Closes the door; then `is_inside` on every submitter tells whether
    /// the freezer must still wait.
    pub(crate) fn close(frozen: &AtomicBool) {
        frozen.store(true, Ordering::SeqCst);
        dekker_fence();
    }

    pub(crate) fn is_inside(entered: &AtomicBool) -> bool {
        entered.load(Ordering::SeqCst)
    }

    pub(crate) fn open(frozen: &AtomicBool) {
        frozen.store(false, Ordering::SeqCst);
    }
}

/// The consumer side of a producer/consumer handoff that sleeps only when
/// there is nothing to do, and the producer side that wakes it only when it
/// really sleeps (no syscall otherwise).
///
/// Protocol (a Dekker pair): the producer publishes its work with a SeqCst
/// RMW, then `notify` reads `sleeping`; the consumer sets `sleeping` with a
/// SeqCst RMW, then checks for work with a SeqCst load. One of the two sees
/// the other, so a wakeup is never lost. `Parker` remembers an early unpark.
#[derive(Debug, Default)]
pub(crate) struct SleepGate {
    sleeping: AtomicBool,
    parker: Parker,
}

impl SleepGate {
    /// Producer: call after publishing work (with a SeqCst RMW).
    #[inline]
    pub(crate) fn notify(&self) {
        dekker_fence();
        if self.sleeping.load(Ordering::SeqCst) {
            self.parker.unpark();
        }
    }

    /// Consumer: sleeps (at most `timeout`) unless `has_work` (a SeqCst
    /// load) sees work. Returns true if it went to sleep.
    pub(crate) fn sleep_unless(&self, has_work: impl Fn() -> bool, timeout: Option<Duration>) -> bool {
        self.sleeping.swap(true, Ordering::SeqCst);
        dekker_fence();
        let sleep = !has_work();
        if sleep {
            self.parker.park(timeout);
        }
        self.sleeping.store(false, Ordering::Relaxed);
        sleep
    }

    /// Wakes the consumer whether or not it sleeps (shutdown).
    pub(crate) fn force_wake(&self) {
        self.parker.unpark();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn unpark_before_park_is_remembered() {
        let parker = Parker::new();
        parker.unpark();
        assert!(parker.park(Some(Duration::from_secs(5))));
    }

    #[test]
    fn park_times_out_without_unpark() {
        let parker = Parker::new();
        assert!(!parker.park(Some(Duration::from_millis(2))));
    }

    #[test]
    fn unpark_wakes_a_sleeping_thread() {
        let parker = std::sync::Arc::new(Parker::new());
        let p2 = parker.clone();
        let t = std::thread::spawn(move || p2.park(None));
        std::thread::sleep(Duration::from_millis(5));
        parker.unpark();
        assert!(t.join().unwrap());
    }
}

/// One runner at a time, and no run lost: what the hardware queue's
/// dispatch list (and the scheduler behind it) needs. A run asked for while
/// another thread runs makes that runner go round once more instead of
/// running in parallel: the requester stores `rerun` then reads `running`,
/// the runner stores `running = false` then reads `rerun` (all SeqCst), so
/// one of them sees the other. Uncontended, a run costs two locked
/// instructions. loom: `loom_models::loom_dispatch_rerun_*`.
#[derive(Debug, Default)]
pub(crate) struct SerialRun {
    running: AtomicBool,
    rerun: AtomicBool,
}

impl SerialRun {
    /// Runs `pass` (which returns whether the driver was busy) until no run
    /// was asked for meanwhile or `more_work` finds nothing left. Returns
    /// the last pass's result, or None if another thread took the run over.
    pub(crate) fn run(&self, mut pass: impl FnMut() -> bool, more_work: impl Fn() -> bool) -> Option<bool> {
        loop {
            if self.running.swap(true, Ordering::SeqCst) {
                // Someone runs: ask for another round. If it released before
                // our request became visible it may not see it, so check:
                // still running means it will (it reads `rerun` after
                // releasing), else run ourselves.
                // RMWs on both sides of the Dekker pair (a SeqCst store is
                // an xchg on x86 anyway): loom models the pair faithfully
                // only with RMWs and fences.
                self.rerun.swap(true, Ordering::SeqCst);
                dekker_fence();
                if self.running.load(Ordering::SeqCst) {
                    return None;
                }
                continue;
            }
            // Acquire: a request we clear here must be served by this pass,
            // so the pass must see what the requester did before asking
            // (pairs with its SeqCst store). A Relaxed load let loom find a
            // lost run: the request cleared, the work it announced unseen.
            if self.rerun.load(Ordering::Acquire) {
                self.rerun.store(false, Ordering::SeqCst);
            }
            let busy = pass();
            self.running.swap(false, Ordering::SeqCst);
            dekker_fence();
            if !(self.rerun.load(Ordering::SeqCst) && more_work()) {
                return Some(busy);
            }
        }
    }
}
