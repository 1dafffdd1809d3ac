//! fio's job order: which jobs run together, which wait, and how they
//! are grouped in the report.
//!
//! - `stonewall` (alias `wait_on_prev`): the job starts only once every
//!   job before it in the file has exited, and no later job starts before
//!   it. The jobs between two stonewalls are one *phase*; phases run one
//!   after another on the same device (fio's backend breaks out of its
//!   start loop at a stonewall job while anything runs).
//! - `wait_for=NAME`: the job starts once every clone of the job NAME,
//!   defined before it, has exited; the other jobs of its phase do not
//!   wait (fio's `waitee_running`). A waitee in an earlier phase has
//!   exited already, so only a waitee of the same phase holds a job back.
//! - `new_group` and `stonewall` start a new reporting group (fio's
//!   `groupid`, incremented in `add_job` when the previous group has a
//!   job); `group_reporting` folds the jobs of one group into one entry.
//!
//! Relies on nothing but the parsed options: this is the plan of a run,
//! not its timing (mod.rs runs the phases; start.rs keeps the gates).

use std::ops::Range;

use super::options::{err, JobOptions, OptionError};

/// fio's group ids: 0 for the first group, one more at each job that has
/// `stonewall` or `new_group` after a group that has a job.
pub(super) fn assign_groups(jobs: &mut [JobOptions]) {
    let mut groupid = 0;
    for (i, job) in jobs.iter_mut().enumerate() {
        if i > 0 && (job.stonewall || job.new_group) {
            groupid += 1;
        }
        job.groupid = groupid;
    }
}

/// The phases: consecutive jobs, a new one at each `stonewall` job.
pub(super) fn phases(jobs: &[JobOptions]) -> Vec<Range<usize>> {
    let mut phases = Vec::new();
    let mut start = 0;
    for (i, job) in jobs.iter().enumerate() {
        if i > start && job.stonewall {
            phases.push(start..i);
            start = i;
        }
    }
    if start < jobs.len() {
        phases.push(start..jobs.len());
    }
    phases
}

/// Checks every `wait_for`: the waitee is a job defined before the
/// waiter (fio refuses a job that waits for one it does not know, or for
/// itself).
pub(super) fn check_waits(jobs: &[JobOptions]) -> Result<(), OptionError> {
    for (i, job) in jobs.iter().enumerate() {
        let Some(waitee) = &job.wait_for else { continue };
        if *waitee == job.name {
            return err(format!("job '{}': wait_for names the job itself", job.name));
        }
        if !jobs[..i].iter().any(|j| j.name == *waitee) {
            return err(format!("job '{}': wait_for={waitee}: no job of that name is defined before it", job.name));
        }
    }
    Ok(())
}

/// For each job of `phase` (indices into `jobs`), the jobs of the same
/// phase it waits for: every earlier job of the phase named as its
/// `wait_for`.
pub(super) fn waitees(jobs: &[JobOptions], phase: Range<usize>) -> Vec<Vec<usize>> {
    phase
        .clone()
        .map(|i| match &jobs[i].wait_for {
            Some(name) => (phase.start..i).filter(|&j| jobs[j].name == *name).collect(),
            None => Vec::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, set: &[(&str, Option<&str>)]) -> JobOptions {
        let mut j = JobOptions::defaults(name);
        for (k, v) in set {
            j.set(k, *v).unwrap();
        }
        j
    }

    #[test]
    fn stonewalls_cut_phases_and_groups() {
        let mut jobs = vec![
            job("a", &[]),
            job("b", &[]),
            job("c", &[("stonewall", None)]),
            job("d", &[("new_group", None)]),
            job("e", &[("wait_on_prev", None)]),
        ];
        assign_groups(&mut jobs);
        let ids: Vec<u32> = jobs.iter().map(|j| j.groupid).collect();
        assert_eq!(ids, [0, 0, 1, 2, 3]);
        assert_eq!(phases(&jobs), [0..2, 2..4, 4..5]);
    }

    #[test]
    fn a_first_job_with_stonewall_is_group_zero() {
        let mut jobs = vec![job("a", &[("stonewall", None)]), job("b", &[("stonewall", None)])];
        assign_groups(&mut jobs);
        assert_eq!((jobs[0].groupid, jobs[1].groupid), (0, 1));
        assert_eq!(phases(&jobs), [0..1, 1..2]);
    }

    #[test]
    fn wait_for_names_an_earlier_job_of_the_phase() {
        let jobs = vec![
            job("w", &[]),
            job("x", &[]),
            job("r", &[("wait_for", Some("w"))]),
            job("s", &[("stonewall", None)]),
            job("t", &[("wait_for", Some("w"))]),
        ];
        check_waits(&jobs).unwrap();
        let none: Vec<usize> = Vec::new();
        assert_eq!(waitees(&jobs, 0..3), [none.clone(), none.clone(), vec![0]]);
        assert_eq!(waitees(&jobs, 3..5), [none.clone(), none], "a waitee of an earlier phase has exited");
        let e = check_waits(&[job("r", &[("wait_for", Some("w"))]), job("w", &[])]).unwrap_err();
        assert!(e.0.contains("wait_for=w") && e.0.contains("before"), "{}", e.0);
        let e = check_waits(&[job("r", &[("wait_for", Some("r"))])]).unwrap_err();
        assert!(e.0.contains("itself"), "{}", e.0);
    }
}
