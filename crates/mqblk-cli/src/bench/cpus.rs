//! fio's `cpus_allowed` and `cpus_allowed_policy`: the CPUs a job's thread
//! may run on, set with sched_setaffinity when the job starts.
//!
//! Why a benchmark wants it: at low queue depth on a kernel device (a loop
//! device, say) the result depends on where the scheduler puts the job
//! beside the kernel threads that complete its I/O; pinning both programs
//! of a comparison the same way takes that variable out.
//!
//! Relies on: mqblk's cpus.rs (at most CPU_SETSIZE, 1,024, CPUs).

use super::options::OptionError;

/// A CPU list as fio writes it: "0-3,5,7-8".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

impl CpuList {
    /// Parses fio's list syntax; every CPU must be below CPU_SETSIZE.
    pub fn parse(key: &str, v: &str) -> Result<Self, OptionError> {
        let bad = |why: &str| OptionError(format!("{key}: bad CPU list '{v}' ({why}; e.g. 0-3,5)"));
        let mut cpus = Vec::new();
        for part in v.split(',') {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let lo: usize = lo.trim().parse().map_err(|_| bad("not a number"))?;
            let hi: usize = hi.trim().parse().map_err(|_| bad("not a number"))?;
            if lo > hi {
                return Err(bad("a range runs backwards"));
            }
            if hi >= libc::CPU_SETSIZE as usize {
                return Err(bad(&format!("CPUs go up to {}", libc::CPU_SETSIZE - 1)));
            }
            cpus.extend(lo..=hi);
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(Self(cpus))
    }

    /// The CPUs job `index` (counting within its job section) may use:
    /// all of them (`shared`), or one, round-robin (`split`).
    pub fn for_job(&self, split: bool, index: usize) -> Vec<usize> {
        if split {
            vec![self.0[index % self.0.len()]]
        } else {
            self.0.clone()
        }
    }
}

/// Checks that this thread may use every CPU of `cpus`; the error names
/// one it may not (offline, or outside the process's cgroup set).
pub fn check_available(cpus: &[usize]) -> Result<(), String> {
    let allowed = allowed_cpus()?;
    match cpus.iter().find(|c| !allowed.contains(c)) {
        Some(c) => Err(format!("cpus_allowed: CPU {c} is not available to this process (available: {allowed:?})")),
        None => Ok(()),
    }
}

/// Restricts the calling thread to `cpus` (checked as `check_available`).
pub fn pin_current_thread(cpus: &[usize]) -> Result<(), String> {
    check_available(cpus)?;
    mqblk::cpus::pin_current_thread(cpus).map_err(|e| format!("cpus_allowed: sched_setaffinity: {e}"))
}

/// The CPUs this thread may run on now.
pub fn allowed_cpus() -> Result<Vec<usize>, String> {
    mqblk::cpus::allowed_cpus().map_err(|e| format!("cpus_allowed: sched_getaffinity: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fio_cpu_lists() {
        assert_eq!(CpuList::parse("k", "0-3,5").unwrap().0, vec![0, 1, 2, 3, 5]);
        assert_eq!(CpuList::parse("k", "7,1,1-2").unwrap().0, vec![1, 2, 7]);
        for bad in ["", "a", "3-1", "1-", "0,,1", "99999"] {
            let e = CpuList::parse("cpus_allowed", bad).unwrap_err().0;
            assert!(e.contains("cpus_allowed: bad CPU list"), "{bad}: {e}");
        }
    }

    #[test]
    fn split_gives_each_job_one_cpu_round_robin() {
        let l = CpuList::parse("k", "2,4").unwrap();
        assert_eq!(l.for_job(true, 0), vec![2]);
        assert_eq!(l.for_job(true, 1), vec![4]);
        assert_eq!(l.for_job(true, 2), vec![2]);
        assert_eq!(l.for_job(false, 1), vec![2, 4]);
    }

    #[test]
    fn pinning_takes_effect_and_unavailable_cpus_are_named() {
        let first = allowed_cpus().unwrap()[0];
        std::thread::spawn(move || {
            pin_current_thread(&[first]).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![first]);
            let e = pin_current_thread(&[libc::CPU_SETSIZE as usize - 1]).unwrap_err();
            assert!(e.contains(&format!("CPU {} is not available", libc::CPU_SETSIZE - 1)), "{e}");
        })
        .join()
        .unwrap();
    }
}
