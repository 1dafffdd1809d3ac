//! mqblk-sync: atomics, locks and sleeping, swapped for loom's under
//! `cfg(loom)` (crossbeam's `primitive` habit), shared by the block layer
//! (mqblk) and its drivers (mqblk-null).
//!
//! Every atomic protocol in mqblk (sbitmap words, wait queues, completion
//! rings, parkers, completion threads) is written against these types so
//! that the loom models explore the same code that runs in production.
//! [`ring::MpscRing`] is the bounded queue a completion thread drains.
//!
//! Relies on: `parking_lot` for short critical sections, the Linux futex
//! syscall for sleeping (so a waiting thread really sleeps and counts as a
//! voluntary context switch), and loom's replacements under `cfg(loom)`.

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(loom)]
pub use loom::sync::Arc;
#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(loom))]
pub use std::sync::Arc;

pub use std::sync::atomic::Ordering;

use std::time::Duration;

pub mod ring;

/// A mutex for short critical sections (parking_lot's, or loom's).
#[derive(Debug, Default)]
pub struct Mutex<T> {
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

#[cfg(not(loom))]
pub type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(loom)]
pub type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub fn new(value: T) -> Self {
        Self {
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(value),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, T> {
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
pub use loom::cell::UnsafeCell;

#[cfg(not(loom))]
#[derive(Debug, Default)]
pub struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    #[inline(always)]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
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
pub struct Parker {
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
    pub fn new() -> Self {
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
    pub fn park(&self, timeout: Option<Duration>) -> bool {
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
    pub fn unpark(&self) {
        if self.state.swap(PARKER_NOTIFIED, Ordering::Release) == PARKER_PARKED {
            futex_wake(&self.state, 1);
        }
    }

    /// Under loom time does not exist: a park with a timeout only consumes a
    /// pending wakeup and never sleeps.
    #[cfg(loom)]
    pub fn park(&self, timeout: Option<Duration>) -> bool {
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
    pub fn unpark(&self) {
        *self.notified.lock().expect("loom mutex poisoned") = true;
        self.condvar.notify_one();
    }
}

/// Sleeps while `*word == expected`, at most `timeout`.
#[cfg(not(loom))]
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
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
pub fn futex_wake(word: &AtomicU32, nr: u32) {
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
pub fn dekker_fence() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
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
pub struct SleepGate {
    sleeping: AtomicBool,
    parker: Parker,
}

impl SleepGate {
    /// Producer: call after publishing work (with a SeqCst RMW).
    #[inline]
    pub fn notify(&self) {
        dekker_fence();
        if self.sleeping.load(Ordering::SeqCst) {
            self.parker.unpark();
        }
    }

    /// Consumer: sleeps (at most `timeout`) unless `has_work` (a SeqCst
    /// load) sees work. Returns true if it went to sleep.
    pub fn sleep_unless(&self, has_work: impl Fn() -> bool, timeout: Option<Duration>) -> bool {
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
    pub fn force_wake(&self) {
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
