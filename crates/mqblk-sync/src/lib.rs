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
///
/// ```
/// use mqblk_sync::{Arc, Mutex};
///
/// let queue = Arc::new(Mutex::new(Vec::new()));
/// let other = queue.clone();
/// std::thread::spawn(move || other.lock().push(1)).join().unwrap();
/// queue.lock().push(2);
/// assert_eq!(*queue.lock(), [1, 2]);
/// ```
#[derive(Debug, Default)]
pub struct Mutex<T> {
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

/// The guard of a locked [`Mutex`].
#[cfg(not(loom))]
pub type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(loom)]
pub type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    /// An unlocked mutex holding `value`.
    pub fn new(value: T) -> Self {
        Self {
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(value),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    /// Locks it, waiting while another thread holds it (there is no
    /// poisoning).
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

/// An `UnsafeCell` with loom's closure API (loom's own under `cfg(loom)`,
/// so that slot accesses are tracked by its race detector).
///
/// ```
/// use mqblk_sync::UnsafeCell;
///
/// let cell = UnsafeCell::new(1u32);
/// // SAFETY: no other access to the cell meanwhile.
/// cell.with_mut(|p| unsafe { *p += 1 });
/// // SAFETY: as above.
/// assert_eq!(cell.with(|p| unsafe { *p }), 2);
/// ```
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// A cell holding `value` (example: [`UnsafeCell`]).
    pub const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Calls `f` with a pointer to read the value through.
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Calls `f` with a pointer to write the value through.
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
///
/// ```
/// use std::time::Duration;
/// use mqblk_sync::{Arc, Parker};
///
/// let parker = Arc::new(Parker::new());
/// parker.unpark(); // before the park: remembered
/// assert!(parker.park(Some(Duration::from_secs(10))), "returns at once, woken");
///
/// let waker = parker.clone();
/// let thread = std::thread::spawn(move || waker.unpark());
/// assert!(parker.park(None), "sleeps until the other thread unparks it");
/// thread.join().unwrap();
/// assert!(!parker.park(Some(Duration::ZERO)), "no wakeup pending: timed out");
/// ```
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
    /// A parker with no wakeup pending.
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

/// Sleeps while `*word == expected`, at most `timeout` (it may return
/// early: a caller re-checks the word in a loop).
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use mqblk_sync::{futex_wait, futex_wake, Arc};
///
/// let word = Arc::new(AtomicU32::new(0));
/// let setter = word.clone();
/// let thread = std::thread::spawn(move || {
///     setter.store(1, Ordering::Release);
///     futex_wake(&setter, 1);
/// });
/// while word.load(Ordering::Acquire) == 0 {
///     futex_wait(&word, 0, None); // returns at once if the word is 1 already
/// }
/// thread.join().unwrap();
/// ```
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

/// Wakes up to `nr` threads sleeping in `futex_wait` on `word` (example:
/// [`futex_wait`]).
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
/// there it is a real SeqCst fence. [`SleepGate`] is such a handshake.
///
/// ```
/// use mqblk_sync::{dekker_fence, AtomicBool, Ordering};
///
/// let (mine, theirs) = (AtomicBool::new(false), AtomicBool::new(false));
/// mine.swap(true, Ordering::SeqCst); // announce, with a SeqCst RMW
/// dekker_fence(); // empty here; a SeqCst fence under loom
/// assert!(!theirs.load(Ordering::SeqCst), "then look at the other side");
/// ```
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
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
/// use mqblk_sync::{Arc, SleepGate};
///
/// let work = Arc::new(AtomicU64::new(0));
/// let gate = Arc::new(SleepGate::default());
/// let (w, g) = (work.clone(), gate.clone());
/// let producer = std::thread::spawn(move || {
///     w.fetch_add(1, Ordering::SeqCst); // publish (a SeqCst RMW) ...
///     g.notify(); // ... then wake the consumer if it sleeps
/// });
/// // The consumer sleeps only while there is nothing to do.
/// while work.load(Ordering::SeqCst) == 0 {
///     gate.sleep_unless(|| work.load(Ordering::SeqCst) != 0, Some(Duration::from_secs(10)));
/// }
/// producer.join().unwrap();
/// gate.force_wake(); // shutdown: wakes it whether it sleeps or not
/// ```
#[derive(Debug)]
pub struct SleepGate {
    sleeping: AtomicBool,
    parker: Parker,
    /// The CPU of the last producer that found the consumer going to sleep
    /// (`NO_CPU`: none yet), for [`SleepGate::woken_on_this_cpu`].
    waker_cpu: AtomicU32,
}

/// `SleepGate::waker_cpu` before any wakeup.
const NO_CPU: u32 = u32::MAX;

impl Default for SleepGate {
    fn default() -> Self {
        Self { sleeping: AtomicBool::new(false), parker: Parker::new(), waker_cpu: AtomicU32::new(NO_CPU) }
    }
}

/// The CPU the calling thread runs on (a hint: it may move at once); 0
/// where that cannot be asked (Miri, loom).
///
/// ```
/// let cpu = mqblk_sync::current_cpu();
/// assert!((cpu as usize) < libc::CPU_SETSIZE as usize);
/// ```
#[inline]
pub fn current_cpu() -> u32 {
    #[cfg(not(any(miri, loom)))]
    {
        // SAFETY: no arguments; glibc answers from the thread's rseq area
        // or the vDSO, without a system call.
        let cpu = unsafe { libc::sched_getcpu() };
        u32::try_from(cpu).unwrap_or(0)
    }
    #[cfg(any(miri, loom))]
    {
        0
    }
}

impl SleepGate {
    /// Producer: call after publishing work (with a SeqCst RMW).
    #[inline]
    pub fn notify(&self) {
        dekker_fence();
        if self.sleeping.load(Ordering::SeqCst) {
            // Relaxed: published by the Release swap in `unpark`, which the
            // consumer's park acquires.
            self.waker_cpu.store(current_cpu(), Ordering::Relaxed);
            self.parker.unpark();
        }
    }

    /// Consumer: did the last producer that woke it (found it going to
    /// sleep) run on this CPU? After `sleep_unless` slept, the wakeup then
    /// preempted that producer (or will) in the middle of its work; before
    /// a sleep, that producer cannot run while the consumer spins. A hint:
    /// a stale answer costs one yield or spin, or misses one.
    pub fn woken_on_this_cpu(&self) -> bool {
        self.waker_cpu.load(Ordering::Relaxed) == current_cpu()
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
