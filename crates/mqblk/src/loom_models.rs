//! loom models of the completion handoff: the MPSC ring plus the sleep
//! gate, as used by client completion rings and driver completion threads.
//! A lost wakeup shows up as a loom deadlock.

use crate::buf::BioVec;
use crate::completion::{ClientShared, Completion};
use crate::status::Status;
use crate::sync::Arc;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Reaps `n` completions, sleeping when the ring is empty.
fn reap(shared: &ClientShared, n: usize) -> Vec<u64> {
    let mut got = Vec::new();
    while got.len() < n {
        // SAFETY: this thread is the only consumer.
        match unsafe { shared.take() } {
            Some(c) => got.push(c.user_data),
            None => {
                // SAFETY: this thread is the sink's owner.
                unsafe { shared.sleep_until_delivery(None) };
            }
        }
    }
    got
}

#[test]
fn loom_completion_is_never_lost_to_a_sleeping_client() {
    model(|| {
        let shared = Arc::new(ClientShared::new(2));
        let producer = {
            let shared = shared.clone();
            loom::thread::spawn(move || shared.deliver(Completion::new(7, Status::Ok, BioVec::new(), 0)))
        };
        assert_eq!(reap(&shared, 1), vec![7]);
        producer.join().unwrap();
    });
}

#[test]
fn loom_two_completers_each_delivered_once() {
    model(|| {
        let shared = Arc::new(ClientShared::new(2));
        let producers: Vec<_> = (0..2u64)
            .map(|i| {
                let shared = shared.clone();
                loom::thread::spawn(move || shared.deliver(Completion::new(i, Status::Ok, BioVec::new(), 0)))
            })
            .collect();
        let mut got = reap(&shared, 2);
        got.sort_unstable();
        assert_eq!(got, vec![0, 1]);
        for p in producers {
            p.join().unwrap();
        }
        // SAFETY: single consumer.
        assert!(unsafe { shared.take() }.is_none(), "nothing delivered twice");
    });
}

/// A request's chain of merged bios, moved to the completer as the driver
/// path moves a request token.
struct Chain(*const crate::completion::BioSlot, u64);
// SAFETY: the model hands the chain to one completer thread, as `Rq` does.
unsafe impl Send for Chain {}

#[test]
fn loom_merged_bios_complete_once_and_slots_reuse_without_races() {
    model(|| {
        let shared = Arc::new(ClientShared::new(4));
        // The owner links bios 1 and 2 behind request bio 0 (merge::attach
        // does the same writes) ...
        for (i, next) in [(0u32, 1u32), (1, u32::MAX)] {
            // SAFETY: the slots are free and only this thread knows them.
            let next: *const _ = if next == u32::MAX { std::ptr::null() } else { shared.slot(next) };
            unsafe {
                shared.slot(i).with_data_mut(|d| {
                    d.user_data = u64::from(i) + 1;
                    d.owner = Arc::as_ptr(&shared);
                    d.next = next;
                })
            };
        }
        let chain = Chain(shared.slot(0), 0);
        // ... and the completer ends the request: its own bio, then the chain.
        let completer = {
            let shared = shared.clone();
            loom::thread::spawn(move || {
                let chain = chain;
                shared.deliver(Completion::new(chain.1, Status::Ok, BioVec::new(), 0));
                let mut p = chain.0;
                while !p.is_null() {
                    // SAFETY: the completer owns the request and its chain.
                    p = unsafe { (*p).complete_merged(Status::Ok) };
                }
            })
        };
        // The owner reaps and reuses each slot at once, as a client that
        // submits again as soon as it sees a completion would.
        let mut got = Vec::new();
        while got.len() < 3 {
            // SAFETY: this thread is the only consumer.
            match unsafe { shared.take() } {
                Some(c) => {
                    if c.slot != 0 {
                        // SAFETY: the completion gave the slot back to us.
                        unsafe { shared.slot(c.slot - 1).with_data_mut(|d| d.user_data = 99) };
                    }
                    got.push(c.user_data);
                }
                None => {
                    // SAFETY: this thread is the sink's owner.
                    unsafe { shared.sleep_until_delivery(None) };
                }
            }
        }
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2], "each bio of the merged request completes once");
        completer.join().unwrap();
    });
}

/// The queue freeze's door (sync.rs `door`): while the freezer believes no
/// submitter is inside, none is. The "scheduler" is a cell both sides
/// write: loom reports a race if they can overlap.
#[test]
fn loom_frozen_door_keeps_submitters_out_of_a_switch() {
    use crate::sync::{door, AtomicBool, UnsafeCell};
    model(|| {
        let frozen = Arc::new(AtomicBool::new(false));
        let entered = Arc::new(AtomicBool::new(false));
        let sched = Arc::new(UnsafeCell::new(0u32));
        let submitter = {
            let (frozen, entered, sched) = (frozen.clone(), entered.clone(), sched.clone());
            loom::thread::spawn(move || {
                if door::enter(&entered, &frozen) {
                    // SAFETY: inside the door; the test checks this claim.
                    sched.with(|p| unsafe { assert!(*p <= 1) });
                    door::leave(&entered);
                }
            })
        };
        door::close(&frozen);
        while door::is_inside(&entered) {
            loom::thread::yield_now();
        }
        // SAFETY: frozen and drained; loom reports a race if not exclusive.
        sched.with_mut(|p| unsafe { *p = 1 });
        door::open(&frozen);
        submitter.join().unwrap();
    });
}

/// The dispatch list's run (hctx/dispatch.rs `run_dispatch_list` over sync.rs
/// `SerialRun`): two threads each queue an item and ask for a run while
/// the other may be running. Passes never overlap, and no item is left
/// behind (a lost rerun leaves one queued).
#[test]
fn loom_dispatch_rerun_never_loses_a_run() {
    use crate::sync::{AtomicBool, AtomicUsize, Ordering, SerialRun};
    model(|| {
        let run = Arc::new(SerialRun::default());
        let queued = Arc::new(AtomicUsize::new(0));
        let issued = Arc::new(AtomicUsize::new(0));
        let in_pass = Arc::new(AtomicBool::new(false));
        let submit = {
            let (run, queued, issued, in_pass) = (run.clone(), queued.clone(), issued.clone(), in_pass.clone());
            move || {
                queued.fetch_add(1, Ordering::SeqCst);
                crate::sync::dekker_fence(); // as after any push to the list
                let pass = || {
                    assert!(!in_pass.swap(true, Ordering::SeqCst), "two runners at once");
                    issued.fetch_add(queued.swap(0, Ordering::SeqCst), Ordering::SeqCst);
                    in_pass.store(false, Ordering::SeqCst);
                    false
                };
                run.run(pass, || queued.load(Ordering::SeqCst) != 0);
            }
        };
        let other = loom::thread::spawn(submit.clone());
        submit();
        other.join().unwrap();
        assert_eq!(queued.load(Ordering::SeqCst), 0, "an item was left on the list: a run was lost");
        assert_eq!(issued.load(Ordering::SeqCst), 2);
    });
}

/// The scheduler restart (hctx/dispatch.rs module docs): one driver tag,
/// held by a request in flight. The completer frees it (a SeqCst RMW in the
/// bitmap) and then runs the queue if the scheduler has work (a SeqCst
/// load of `queued`); the inserter counts its request in `queued` (SeqCst)
/// and then runs the queue, whose dispatch takes a driver tag without
/// sleeping. Either the completer sees the request or the inserter's
/// dispatch sees the free tag: the request is always dispatched.
#[test]
fn loom_sched_restart_on_completion_dispatches_the_waiting_request() {
    use crate::sbitmap::{AllocHint, BatchWake, SbitmapQueue};
    use crate::sync::{AtomicU32, AtomicUsize, Ordering, SerialRun};
    struct Queue {
        tags: SbitmapQueue,
        queued: AtomicU32,
        dispatched: AtomicUsize,
        run: SerialRun,
    }
    impl Queue {
        fn has_work(&self) -> bool {
            self.queued.load(Ordering::SeqCst) != 0
        }
        /// `dispatch_sched`: while the scheduler has work, take a driver
        /// tag without sleeping, then a request.
        fn run_queue(&self) {
            let pass = || {
                let mut hint = AllocHint::new(0);
                while self.has_work() {
                    if self.tags.get(&mut hint).is_none() {
                        return true; // out of driver tags: busy
                    }
                    self.queued.fetch_sub(1, Ordering::Relaxed);
                    self.dispatched.fetch_add(1, Ordering::SeqCst);
                }
                false
            };
            self.run.run(pass, || self.has_work());
        }
    }
    model(|| {
        let q = Arc::new(Queue {
            tags: SbitmapQueue::with_policy(1, None, false, 1, Box::<BatchWake>::default()),
            queued: AtomicU32::new(0),
            dispatched: AtomicUsize::new(0),
            run: SerialRun::default(),
        });
        let held = q.tags.get(&mut AllocHint::new(0)).expect("the one driver tag");
        let completer = {
            let q = q.clone();
            loom::thread::spawn(move || {
                q.tags.clear(held, None);
                if q.has_work() {
                    q.run_queue();
                }
            })
        };
        q.queued.fetch_add(1, Ordering::SeqCst);
        crate::sync::dekker_fence(); // as in `HwCtx::insert`
        q.run_queue();
        completer.join().unwrap();
        assert_eq!(q.dispatched.load(Ordering::SeqCst), 1, "the inserted request waits with a free tag");
        assert_eq!(q.queued.load(Ordering::SeqCst), 0);
    });
}
