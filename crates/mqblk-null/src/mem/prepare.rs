//! The arena's next chunk, made ready off the I/O path: mapped, advised
//! `MADV_HUGEPAGE` and faulted in by a thread of the arena's own.
//!
//! Why a thread: a chunk's huge page comes from its first fault, and where
//! memory is fragmented the kernel compacts memory inside that fault
//! (`defrag=madvise`, the default). Faulted in by the writer, that stalled
//! first writes for 4.5 ms here, with the 31 requests queued behind them
//! (BENCHMARKS.md, "The store in huge pages"). Faulted in here, the writer
//! finds the chunk's huge page in place and takes no fault there (where
//! the kernel had no huge page to give, only the first 4 KiB is in, and
//! the writer faults in the rest page by page). When it outruns this
//! thread it maps a chunk itself, without the advice: 4 KiB faults, as
//! heap pages had, so no compaction in the I/O path as long as THP is
//! `madvise` (the default; with `always` the kernel may give any fault a
//! huge page, ours or not).
//! (Collapsing filled chunks with `MADV_COLLAPSE` instead was tried: the
//! collapse holds the process's mmap lock while it copies, and halved the
//! fill rate.)
//!
//! One chunk is kept ready at a time (2 MiB); the thread starts with the
//! arena's first chunk and ends when the arena is closed (its store
//! dropped) or dropped.
//!
//! Relies on: `arena::map_chunk`, and the arena taking back the ready chunk
//! from `stop` (it unmaps it with the rest).

use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

#[derive(Default)]
struct State {
    /// A chunk mapped and faulted in, not yet handed out.
    ready: Option<usize>,
    /// The arena took the ready chunk (or found none): make another.
    wanted: bool,
    stop: bool,
    /// The thread could not map a chunk (tests: `wait_ready` must not
    /// wait for one).
    failed: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

/// The thread, once started; `Failed` when it could not be (a process at
/// its limit), so the I/O path does not try again with every chunk.
enum Thread {
    NotStarted,
    Running(std::thread::JoinHandle<()>),
    Failed,
    Stopped,
}

pub(crate) struct Preparer {
    shared: Arc<Shared>,
    thread: Mutex<Thread>,
}

impl Preparer {
    pub(crate) fn new() -> Self {
        Self { shared: Arc::default(), thread: Mutex::new(Thread::NotStarted) }
    }

    /// The ready chunk, if there is one; either way the thread (started
    /// the first time) makes the next. None once stopped.
    pub(crate) fn take(&self) -> Option<NonNull<u8>> {
        let ready = {
            let mut st = self.shared.state.lock();
            if st.stop {
                return None;
            }
            st.wanted = true;
            st.ready.take()
        };
        self.shared.cv.notify_all();
        let mut t = self.thread.lock();
        if matches!(*t, Thread::NotStarted) {
            let shared = self.shared.clone();
            // Without a thread the arena maps its own chunks, in 4 KiB pages.
            *t = match std::thread::Builder::new().name("mqblk-chunks".into()).spawn(move || run(&shared)) {
                Ok(handle) => Thread::Running(handle),
                Err(_) => Thread::Failed,
            };
        }
        ready.and_then(|p| NonNull::new(p as *mut u8))
    }

    /// Ends the thread (for good: `take` answers None after); returns the
    /// chunk it had ready, which is the caller's to unmap.
    pub(crate) fn stop(&self) -> Option<NonNull<u8>> {
        self.shared.state.lock().stop = true;
        self.shared.cv.notify_all();
        let t = std::mem::replace(&mut *self.thread.lock(), Thread::Stopped);
        if let Thread::Running(handle) = t {
            // It only maps and touches memory: it cannot panic but on a
            // bug, and then there is nothing of it left to clean up.
            let _ = handle.join();
        }
        self.shared.state.lock().ready.take().and_then(|p| NonNull::new(p as *mut u8))
    }

    /// The thread has ended and holds no chunk (tests).
    #[cfg(test)]
    pub(crate) fn is_stopped(&self) -> bool {
        matches!(*self.thread.lock(), Thread::Stopped) && self.shared.state.lock().ready.is_none()
    }

    /// Blocks until a chunk is ready (tests); panics where none will come.
    #[cfg(test)]
    pub(crate) fn wait_ready(&self) {
        assert!(matches!(*self.thread.lock(), Thread::Running(_)), "no preparing thread");
        let mut st = self.shared.state.lock();
        while st.ready.is_none() {
            assert!(!st.failed && !st.stop, "the preparing thread will make no chunk");
            self.shared.cv.wait(&mut st);
        }
    }
}

fn run(shared: &Shared) {
    loop {
        {
            let mut st = shared.state.lock();
            while !(st.stop || (st.wanted && st.ready.is_none())) {
                shared.cv.wait(&mut st);
            }
            if st.stop {
                return;
            }
            st.wanted = false;
        }
        let chunk = super::arena::map_chunk(true);
        if let Some(base) = chunk {
            // Writing its first byte faults in its huge page (or one 4 KiB
            // page where the kernel has none), zero-filled as it would be.
            // SAFETY: a fresh mapping that no one else knows of yet.
            unsafe { base.as_ptr().write_volatile(0) };
        }
        let mut st = shared.state.lock();
        match chunk {
            Some(base) => st.ready = Some(base.as_ptr() as usize),
            None => st.failed = true,
        }
        drop(st);
        // For `wait_ready` (the thread's own wait rechecks its condition).
        shared.cv.notify_all();
    }
}
