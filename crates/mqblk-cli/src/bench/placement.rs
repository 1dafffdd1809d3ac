//! Where bench's own device completes: on the CPU of the one job thread
//! that submits to it.
//!
//! The kernel's null_blk in irqmode=1 completes a request in a softirq
//! raised on the CPU that submitted it (blk_mq_complete_request_remote
//! keeps a completion local when the submitting CPU is the current one),
//! so a job and its completions share a CPU. mqblk's null device completes
//! irqmode=1 requests on a thread per hardware queue, which the scheduler
//! places where it likes: on the job's CPU (one CPU's figure, a batch of
//! completions per switch) or on the other one (two CPUs streaming to each
//! other, whose figure rests on how fast a cache line crosses between
//! them). On a VM the host decides that crossing: a cache-line round trip
//! between this VM's two vCPUs measured 100 ns in one run and 470 ns in the
//! next, and the same job gave 1.3M-4.4M IOPS from run to run. So without
//! `--device`, a plan whose jobs run one thread at a time, each keeping at
//! least a completion batch in flight (the default job: iodepth 32), puts
//! that thread and the device's completion thread on one CPU (the first
//! this process may use), as null_blk's softirq would, and gives one CPU's
//! figure: a switch to the completion thread and back per batch. Below a
//! batch the switch would come per I/O or two (a QD1 job on one CPU runs
//! at a sixth of its two-CPU rate, a sleep and a wake per I/O), so such a
//! job streams between two CPUs instead. A plan that names its device, or
//! places a job itself (`cpus_allowed`, `numa_cpu_nodes`), or runs several
//! job threads at once, is left as given.
//!
//! Relies on: cpus.rs (the CPUs this process may use), the null driver's
//! `irq_cpus`.

use super::cpus;
use super::options::BenchPlan;
use super::order;
use super::DEFAULT_DEVICE;

/// The plan with bench's device and its one-thread-at-a-time jobs placed
/// on one CPU, or None where it is left as given.
pub(super) fn resolve(plan: &BenchPlan) -> Result<Option<BenchPlan>, String> {
    if !placed_by_bench(plan) {
        return Ok(None);
    }
    let Some(&cpu) = cpus::allowed_cpus()?.first() else {
        return Ok(None);
    };
    let mut plan = plan.clone();
    plan.device = Some(format!("{DEFAULT_DEVICE},irq_cpus={cpu}"));
    for job in &mut plan.jobs {
        job.cpus_allowed = Some(cpus::CpuList(vec![cpu]));
    }
    Ok(Some(plan))
}

/// True for a plan on bench's own device whose jobs run one thread at a
/// time, keep a completion batch in flight and choose no CPUs.
fn placed_by_bench(plan: &BenchPlan) -> bool {
    plan.device.is_none()
        && plan.file.is_none()
        && plan.jobs.iter().all(|j| {
            j.iodepth >= mqblk_null::COMPLETION_BATCH && j.cpus_allowed.is_none() && j.numa.cpu_nodes.is_none()
        })
        && order::phases(&plan.jobs)
            .iter()
            .all(|phase| plan.jobs[phase.clone()].iter().map(|j| j.numjobs).sum::<usize>() == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::parse::parse_bench_args;

    fn plan(args: &[&str]) -> BenchPlan {
        parse_bench_args(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn the_default_job_and_its_completions_share_one_cpu() {
        let cpu = cpus::allowed_cpus().unwrap()[0];
        let placed = resolve(&plan(&[])).unwrap().expect("a bare bench is placed");
        assert_eq!(placed.device.as_deref(), Some(format!("null:gb=1,irq_cpus={cpu}").as_str()));
        assert_eq!(placed.jobs.len(), 1);
        assert_eq!(placed.jobs[0].cpus_allowed, Some(cpus::CpuList(vec![cpu])));
        // Jobs that run one after another share it too.
        let seq = plan(&["--iodepth=32", "--name=a", "--rw=read", "--name=b", "--stonewall", "--rw=write"]);
        let placed = resolve(&seq).unwrap().expect("one thread at a time");
        assert!(placed.jobs.iter().all(|j| j.cpus_allowed == Some(cpus::CpuList(vec![cpu]))));
    }

    #[test]
    fn a_plan_that_chose_its_device_or_cpus_or_runs_threads_together_is_left_as_given() {
        for args in [
            &["--device", "null:gb=1"][..],
            &["--iodepth=32", "--cpus_allowed=0"],
            &["--iodepth=32", "--numjobs=2"],
            &["--iodepth=32", "--name=a", "--rw=read", "--name=b", "--rw=write"],
            &["--iodepth=32", "--filename=/dev/null"],
            // Below a batch: a switch per I/O on one CPU.
            &["--iodepth=16"],
        ] {
            assert_eq!(resolve(&plan(args)).unwrap(), None, "{args:?}");
        }
    }
}
