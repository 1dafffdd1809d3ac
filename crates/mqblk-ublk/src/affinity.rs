//! `CpuAffinity`: which CPUs each queue thread may run on. The kernel
//! maps every CPU to one hardware queue (blk_mq_map_queues) and answers
//! UBLK_CMD_GET_QUEUE_AFFINITY with the CPUs mapped to a queue; the server
//! pins the queue's thread to one of them (the default, as libublk does),
//! to all of them (as the kernel's ublk selftests' server does), or leaves
//! it where the scheduler puts it.
//!
//! Why one CPU by default: a queue thread that stays on one CPU is not
//! moved between the CPUs it shares with its clients while it sleeps and
//! wakes once or twice a request. Measured in the 7.3 guest (2 vCPUs,
//! file-backed zero copy, 7 alternating rounds): 1 MiB QD4 writes 1.10x and
//! reads 1.10-1.20x with the queue thread on CPU 0 or CPU 1 against the
//! same server unpinned, and rublk's own single-CPU default 1.27x its
//! multi-CPU mode on those writes (docs/results/ublk-affinity-probe-2026-11-30.txt).
//! The CPU chosen is the last of the queue's that this process may use:
//! the queues' sets are disjoint, so the queues get CPUs of their own, and
//! the last avoids CPU 0, where interrupts and housekeeping land unless
//! told otherwise.
//!
//! Relies on: mqblk's cpus.rs (reading and setting a thread's CPUs).

/// Where a queue thread runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuAffinity {
    /// One CPU of those the kernel maps to the queue.
    Single,
    /// Every CPU the kernel maps to the queue.
    Queue,
    /// Wherever the scheduler puts it (the server's own affinity).
    Off,
}

impl CpuAffinity {
    pub const NAMES: [&'static str; 3] = ["single", "queue", "off"];

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "single" => Some(Self::Single),
            "queue" => Some(Self::Queue),
            "off" => Some(Self::Off),
            _ => None,
        }
    }

    /// The CPUs to pin a queue thread to, given the CPUs the kernel maps
    /// to its queue and those this process may use: empty means "leave it
    /// unpinned" (`Off`, or no CPU in both sets).
    pub fn choose(self, queue_cpus: &[usize], allowed: &[usize]) -> Vec<usize> {
        let both = queue_cpus.iter().copied().filter(|cpu| allowed.contains(cpu));
        match self {
            Self::Off => Vec::new(),
            Self::Queue => both.collect(),
            Self::Single => both.max().into_iter().collect(),
        }
    }
}

/// "CPU 3", "CPUs 0-3", "CPUs 0,2,5-7": a set as the kernel's cpulist
/// format writes it.
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &cpu in cpus {
        match ranges.last_mut() {
            Some((_, end)) if *end + 1 == cpu => *end = cpu,
            _ => ranges.push((cpu, cpu)),
        }
    }
    let list: Vec<String> =
        ranges.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
    let noun = if cpus.len() == 1 { "CPU" } else { "CPUs" };
    format!("{noun} {}", list.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_takes_the_last_cpu_of_the_queue_this_process_may_use() {
        assert_eq!(CpuAffinity::Single.choose(&[0, 1], &[0, 1]), [1]);
        assert_eq!(CpuAffinity::Single.choose(&[0, 1, 2, 3], &[0, 2]), [2]);
        // Two queues of four CPUs: each gets one of its own.
        assert_eq!(CpuAffinity::Single.choose(&[0, 1], &[0, 1, 2, 3]), [1]);
        assert_eq!(CpuAffinity::Single.choose(&[2, 3], &[0, 1, 2, 3]), [3]);
    }

    #[test]
    fn queue_takes_every_usable_cpu_and_off_none() {
        assert_eq!(CpuAffinity::Queue.choose(&[0, 1, 2, 3], &[1, 2, 7]), [1, 2]);
        assert!(CpuAffinity::Off.choose(&[0, 1], &[0, 1]).is_empty());
    }

    #[test]
    fn no_usable_cpu_of_the_queue_leaves_the_thread_unpinned() {
        assert!(CpuAffinity::Single.choose(&[4, 5], &[0, 1]).is_empty());
        assert!(CpuAffinity::Queue.choose(&[], &[0, 1]).is_empty());
    }

    #[test]
    fn names_round_trip() {
        for name in CpuAffinity::NAMES {
            let mode = CpuAffinity::from_name(name).expect("a mode");
            assert_eq!(CpuAffinity::NAMES[mode as usize], name);
        }
        assert_eq!(CpuAffinity::from_name("all"), None);
    }

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(cpu_list(&[3]), "CPU 3");
        assert_eq!(cpu_list(&[0, 1, 2, 3]), "CPUs 0-3");
        assert_eq!(cpu_list(&[0, 2, 5, 6, 7]), "CPUs 0,2,5-7");
    }
}
