//! Completion batches: a driver thread that completes requests in a row
//! wakes their clients once, at the end of the batch, not once per
//! completion.
//!
//! The kernel gets this for free: an interrupt handler (or the block
//! softirq) completes a whole completion queue before any task it woke can
//! run, and io_uring posts a batch of CQEs with one wakeup. A completion
//! thread in user space is an ordinary thread: the futex wake of a client
//! that sleeps on the same CPU can preempt it at once, after one
//! completion, and the client reaps that one, submits one, finds nothing
//! more and sleeps again. The handoff then settles into a sleep and a wake
//! per I/O and stays there (each side always finds the other asleep).
//! Deferring the wakeups to the end of the batch keeps the completer
//! running until its work is done, as the interrupt handler does.
//!
//! The Dekker pair of the wakeup is unchanged: the completion is published
//! (a SeqCst RMW in the ring) when it is delivered, and the "sleeping"
//! flag is read later, when the batch ends, so no wakeup is lost; a client
//! that looks meanwhile finds the completion in its ring.

use std::cell::Cell;
use std::marker::PhantomData;

use super::ClientShared;

/// The clients a batch remembers to wake; a completion for one more wakes
/// its client at once (a completion thread serves a few clients at most).
const BATCH_SINKS: usize = 8;

/// The calling thread's open batch: the sinks it delivered to.
struct Deferred {
    /// A batch is open on this thread.
    active: Cell<bool>,
    len: Cell<usize>,
    sinks: [Cell<*const ClientShared>; BATCH_SINKS],
}

impl Deferred {
    const fn new() -> Self {
        Self {
            active: Cell::new(false),
            len: Cell::new(0),
            sinks: [const { Cell::new(std::ptr::null()) }; BATCH_SINKS],
        }
    }
}

#[cfg(not(loom))]
thread_local! {
    static DEFERRED: Deferred = const { Deferred::new() };
}
#[cfg(loom)]
loom::thread_local! {
    static DEFERRED: Deferred = Deferred::new();
}

/// If a batch is open on this thread, remembers `sink` for the wakeup at
/// its end and returns true; false: wake it now.
#[inline]
pub(crate) fn defer_wakeup(sink: &ClientShared) -> bool {
    DEFERRED.with(|d| {
        if !d.active.get() {
            return false;
        }
        let len = d.len.get();
        let sink: *const ClientShared = sink;
        if d.sinks[..len].iter().any(|s| s.get() == sink) {
            return true;
        }
        if len == BATCH_SINKS {
            return false;
        }
        d.sinks[len].set(sink);
        d.len.set(len + 1);
        true
    })
}

/// A batch of completions on a driver's completion thread (the kernel's
/// `struct io_comp_batch` in spirit): while it is open, completions this
/// thread delivers wake their clients only when it is flushed or dropped.
///
/// Open it around a run of completions that follow each other without
/// waiting (draining a completion ring); flush it before waiting for the
/// next one to be due, so a client never waits on a completion the batch
/// holds back. Only on a thread the driver joins in `shutdown` (the
/// thread rule of the driver module): the clients it remembers live as
/// long as the queue.
///
/// ```
/// use mqblk::driver::CompletionBatch;
///
/// let mut batch = CompletionBatch::begin();
/// // ... rq.complete(status) for each request ready ...
/// batch.flush(); // wakes each client that got a completion
/// // ... wait for more ...
/// drop(batch); // flushes too
/// ```
pub struct CompletionBatch {
    /// This guard opened the thread's batch (false: nested in another).
    outermost: bool,
    /// Bound to its thread.
    _thread: PhantomData<*const ()>,
}

impl CompletionBatch {
    /// Opens a batch on the calling thread (nested in an open one, it
    /// changes nothing).
    pub fn begin() -> Self {
        let outermost = DEFERRED.with(|d| !d.active.replace(true));
        Self { outermost, _thread: PhantomData }
    }

    /// Wakes each client that got a completion since the last flush.
    pub fn flush(&mut self) {
        flush_deferred();
    }
}

impl Drop for CompletionBatch {
    fn drop(&mut self) {
        if self.outermost {
            flush_deferred();
            DEFERRED.with(|d| d.active.set(false));
        }
    }
}

fn flush_deferred() {
    DEFERRED.with(|d| {
        let len = d.len.replace(0);
        for s in &d.sinks[..len] {
            // SAFETY: sinks are owned by the queue for its whole life, and
            // a batch is open only on a driver thread joined in `shutdown`
            // (see `CompletionBatch`), so the queue is alive.
            unsafe { &*s.get() }.wake();
        }
    });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{ClientShared, CompletionBatch, BATCH_SINKS};
    use crate::buf::BioVec;
    use crate::completion::Completion;
    use crate::status::Status;
    use std::sync::Arc;

    /// More clients than a batch remembers, each asleep until its one
    /// completion: those past `BATCH_SINKS` are woken at once, the rest
    /// when the batch ends; every client gets exactly its own.
    #[test]
    fn every_client_of_a_batch_is_woken_past_its_sink_bound() {
        let clients = BATCH_SINKS + 3;
        let sinks: Vec<_> = (0..clients).map(|_| Arc::new(ClientShared::new(2))).collect();
        let reapers: Vec<_> = sinks
            .iter()
            .map(|sink| {
                let sink = sink.clone();
                std::thread::spawn(move || loop {
                    // SAFETY: this thread is the sink's owner and only consumer.
                    if let Some(c) = unsafe { sink.take() } {
                        // SAFETY: as above.
                        assert!(unsafe { sink.take() }.is_none(), "one completion each");
                        return c.user_data;
                    }
                    // SAFETY: as above.
                    unsafe { sink.sleep_until_delivery(None) };
                })
            })
            .collect();
        let batch = CompletionBatch::begin();
        for (i, sink) in sinks.iter().enumerate() {
            sink.deliver(Completion::new(i as u64, Status::Ok, BioVec::new(), 0));
        }
        drop(batch);
        let got: Vec<u64> = reapers.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(got, (0..clients as u64).collect::<Vec<_>>());
    }

    #[test]
    fn a_nested_batch_leaves_the_wakeups_to_the_outer_one() {
        let outer = CompletionBatch::begin();
        let inner = CompletionBatch::begin();
        assert!(outer.outermost && !inner.outermost);
        drop(inner);
        super::DEFERRED.with(|d| assert!(d.active.get(), "still open"));
        drop(outer);
        super::DEFERRED.with(|d| assert!(!d.active.get() && d.len.get() == 0, "closed and flushed"));
    }
}

/// loom models of the deferred wakeup: a completer that delivers a run of
/// completions and wakes the client only at the batch's end, alone and as
/// the completion thread of a client that submits to it (each side asleep
/// when it has nothing to do). A lost wakeup shows up as a deadlock. Run
/// with: RUSTFLAGS="--cfg loom" cargo test -p mqblk --release --lib -- loom
#[cfg(all(test, loom))]
mod loom_tests {
    use super::{ClientShared, CompletionBatch};
    use crate::buf::BioVec;
    use crate::completion::Completion;
    use crate::status::Status;
    use crate::sync::{Arc, AtomicBool, Ordering, SleepGate};
    use mqblk_sync::ring::MpscRing;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(f);
    }

    fn completion(user_data: u64) -> Completion {
        Completion::new(user_data, Status::Ok, BioVec::new(), 0)
    }

    /// The client: takes `n` completions, sleeping whenever none is there.
    fn reap(sink: &ClientShared, n: usize) -> Vec<u64> {
        let mut got = Vec::new();
        while got.len() < n {
            // SAFETY: this thread is the sink's owner and only consumer.
            match unsafe { sink.take() } {
                Some(c) => got.push(c.user_data),
                // SAFETY: as above.
                None => _ = unsafe { sink.sleep_until_delivery(None) },
            }
        }
        got
    }

    #[test]
    fn loom_deferred_wakeup_reaches_a_sleeping_client() {
        model(|| {
            let sink = Arc::new(ClientShared::new(4));
            let completer = {
                let sink = sink.clone();
                loom::thread::spawn(move || {
                    let mut batch = CompletionBatch::begin();
                    sink.deliver(completion(1));
                    sink.deliver(completion(2));
                    batch.flush();
                    sink.deliver(completion(3));
                    // Dropping the batch flushes the last one.
                })
            };
            assert_eq!(reap(&sink, 3), [1, 2, 3]);
            completer.join().unwrap();
        });
    }

    /// A driver's completion thread as null's irq.rs runs it: a request
    /// ring and a gate it sleeps on, a batch open for its whole life,
    /// flushed whenever the ring is empty and before it sleeps.
    struct Driver {
        ring: MpscRing<u64>,
        gate: SleepGate,
        stop: AtomicBool,
    }

    fn completion_thread(driver: &Driver, sink: &ClientShared) {
        let mut batch = CompletionBatch::begin();
        loop {
            // SAFETY: this thread is the ring's only consumer.
            if let Some(id) = unsafe { driver.ring.pop() } {
                sink.deliver(completion(id));
                continue;
            }
            batch.flush();
            if driver.stop.load(Ordering::SeqCst) {
                return;
            }
            driver.gate.sleep_unless(|| driver.ring.has_ready() || driver.stop.load(Ordering::SeqCst), None);
        }
    }

    fn submit(driver: &Driver, id: u64) {
        driver.ring.push(id).expect("a slot per request in flight");
        driver.gate.notify();
    }

    #[test]
    fn loom_handoff_through_a_completion_thread_never_stalls() {
        model(|| {
            let driver =
                Arc::new(Driver { ring: MpscRing::new(2), gate: SleepGate::default(), stop: AtomicBool::new(false) });
            let sink = Arc::new(ClientShared::new(2));
            let thread = {
                let (driver, sink) = (driver.clone(), sink.clone());
                loom::thread::spawn(move || completion_thread(&driver, &sink))
            };
            // Two in flight, then one reaped and one more submitted, as the
            // default job keeps its queue full.
            submit(&driver, 0);
            submit(&driver, 1);
            let mut got = reap(&sink, 1);
            submit(&driver, 2);
            got.extend(reap(&sink, 2));
            got.sort_unstable();
            assert_eq!(got, [0, 1, 2], "each completed once");
            driver.stop.store(true, Ordering::SeqCst);
            driver.gate.force_wake();
            thread.join().unwrap();
            // SAFETY: the completer is joined: this thread is the only one left.
            assert!(unsafe { sink.take() }.is_none(), "nothing delivered twice");
        });
    }
}
