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
}
