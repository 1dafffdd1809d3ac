//! fio's synchronized start: every job of a run sets up (its buffers, its
//! client, its verifier) before any job starts its clock, as fio's job
//! threads each wait, once initialized, until the run starts them all.
//! Without it, jobs that set up early run (and count) alone while later
//! ones still allocate: with 72 jobs of 17 MiB of buffers each, group
//! bandwidth came out above what the device can move.
//!
//! A job that fails or panics before it arrives counts as arrived (the
//! job thread's guard), so the others never wait for it.
//!
//! Jobs that wait for others to exit (fio's `wait_for`, order.rs) sleep
//! on `Exits` and pass their own gate after.
//!
//! Relies on std's Mutex and Condvar: the gate is passed once per job, never
//! per I/O.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

/// The jobs still setting up, and where the others wait for them.
#[derive(Debug)]
pub struct StartGate {
    pending: Mutex<usize>,
    all_arrived: Condvar,
}

impl StartGate {
    /// A gate for `jobs` jobs.
    pub fn new(jobs: usize) -> Self {
        Self { pending: Mutex::new(jobs), all_arrived: Condvar::new() }
    }

    /// Counts the job whose flag is `arrived` as set up, once however often
    /// it is called.
    pub fn arrive(&self, arrived: &AtomicBool) {
        if arrived.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut pending = self.pending.lock().expect("start gate lock");
        assert!(*pending > 0, "more arrivals than jobs");
        *pending -= 1;
        if *pending == 0 {
            self.all_arrived.notify_all();
        }
    }

    /// Counts this job as set up and waits until every job is.
    pub fn arrive_and_wait(&self, arrived: &AtomicBool) {
        self.arrive(arrived);
        let pending = self.pending.lock().expect("start gate lock");
        let _all = self.all_arrived.wait_while(pending, |p| *p > 0).expect("start gate lock");
    }
}

/// Where jobs that wait for others (fio's `wait_for`) sleep until the
/// jobs they wait for have exited.
#[derive(Debug, Default)]
pub struct Exits {
    lock: Mutex<()>,
    changed: Condvar,
}

impl Exits {
    /// Marks a job exited (its `done` flag) and wakes every waiting job.
    pub fn exited(&self, done: &AtomicBool) {
        done.store(true, Ordering::Release);
        // Taking the lock orders the store before any waiter's check of
        // it under the lock: no wakeup falls between check and sleep.
        let _held = self.lock.lock().expect("exits lock");
        self.changed.notify_all();
    }

    /// Sleeps until `all_exited` (which reads `done` flags) holds.
    pub fn wait_for(&self, all_exited: impl Fn() -> bool) {
        let held = self.lock.lock().expect("exits lock");
        let _held = self.changed.wait_while(held, |_| !all_exited()).expect("exits lock");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_job_starts_before_the_last_has_set_up() {
        let gate = StartGate::new(3);
        let flags: Vec<AtomicBool> = (0..3).map(|_| AtomicBool::new(false)).collect();
        let started = AtomicBool::new(false);
        std::thread::scope(|s| {
            for f in &flags[..2] {
                s.spawn(|| {
                    gate.arrive_and_wait(f);
                    assert!(flags[2].load(Ordering::Acquire), "started before the third job arrived");
                    started.store(true, Ordering::Release);
                });
            }
            // The third job "fails" before it arrives: its guard arrives
            // for it, twice (idempotent).
            while *gate.pending.lock().unwrap() != 1 {
                std::thread::yield_now();
            }
            assert!(!started.load(Ordering::Acquire));
            gate.arrive(&flags[2]);
            gate.arrive(&flags[2]);
        });
        assert!(started.load(Ordering::Acquire));
        assert_eq!(*gate.pending.lock().unwrap(), 0);
    }

    #[test]
    fn a_waiting_job_starts_only_after_both_waitees_exit() {
        let exits = Exits::default();
        let done: Vec<AtomicBool> = (0..2).map(|_| AtomicBool::new(false)).collect();
        let started = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                exits.wait_for(|| done.iter().all(|d| d.load(Ordering::Acquire)));
                assert!(done.iter().all(|d| d.load(Ordering::Acquire)));
                started.store(true, Ordering::Release);
            });
            exits.exited(&done[0]);
            assert!(!started.load(Ordering::Acquire), "started with one waitee still running");
            exits.exited(&done[1]);
        });
        assert!(started.load(Ordering::Acquire));
    }
}
