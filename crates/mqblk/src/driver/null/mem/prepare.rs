//! The arena's next chunk, made ready off the I/O path: mapped, advised
//! `MADV_HUGEPAGE` and faulted in by a thread of the arena's own.
//!
//! Why a thread: a chunk's huge page comes from its first fault, and where
//! memory is fragmented the kernel compacts memory inside that fault
//! (`defrag=madvise`, the default). Faulted in by the writer, that stalled
//! first writes for 4.5 ms here, with the 31 requests queued behind them
//! (BENCHMARKS.md, "The store in huge pages"). Faulted in here, the writer
//! finds the chunk's memory in place and takes no fault at all. When it
//! outruns this thread it maps a chunk itself, without the advice: 4 KiB
//! faults, as heap pages had, never a compaction in the I/O path.
//! (Collapsing filled chunks with `MADV_COLLAPSE` instead was tried: the
//! collapse holds the process's mmap lock while it copies, and halved the
//! fill rate.)
//!
//! One chunk is kept ready at a time (2 MiB); the thread starts with the
//! arena's first chunk and ends when the arena stops it.
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
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

pub(crate) struct Preparer {
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Preparer {
    pub(crate) fn new() -> Self {
        Self { shared: Arc::default(), thread: Mutex::new(None) }
    }

    /// The ready chunk, if there is one; either way the thread (started
    /// the first time) makes the next.
    pub(crate) fn take(&self) -> Option<NonNull<u8>> {
        let ready = {
            let mut st = self.shared.state.lock();
            st.wanted = true;
            st.ready.take()
        };
        self.shared.cv.notify_all();
        let mut t = self.thread.lock();
        if t.is_none() {
            let shared = self.shared.clone();
            // No thread (a process at its limit): the arena maps its own
            // chunks, in 4 KiB pages.
            *t = std::thread::Builder::new().name("mqblk-chunks".into()).spawn(move || run(&shared)).ok();
        }
        ready.and_then(|p| NonNull::new(p as *mut u8))
    }

    /// Ends the thread; returns the chunk it had ready, which is the
    /// caller's to unmap.
    pub(crate) fn stop(&self) -> Option<NonNull<u8>> {
        self.shared.state.lock().stop = true;
        self.shared.cv.notify_all();
        if let Some(t) = self.thread.lock().take() {
            // It only maps and touches memory: it cannot panic but on a
            // bug, and then there is nothing of it left to clean up.
            let _ = t.join();
        }
        self.shared.state.lock().ready.take().and_then(|p| NonNull::new(p as *mut u8))
    }

    /// Blocks until a chunk is ready (tests; the thread must be running).
    #[cfg(test)]
    pub(crate) fn wait_ready(&self) {
        let mut st = self.shared.state.lock();
        while st.ready.is_none() {
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
        let Some(base) = super::arena::map_chunk(true) else { continue };
        // SAFETY: a fresh mapping no one else knows of yet: writing its
        // first byte faults in its huge page (or a 4 KiB page where the
        // kernel has none), zero-filled, as it would be anyway.
        unsafe { base.as_ptr().write_volatile(0) };
        shared.state.lock().ready = Some(base.as_ptr() as usize);
        // For `wait_ready` (the thread's own wait rechecks its condition).
        shared.cv.notify_all();
    }
}
