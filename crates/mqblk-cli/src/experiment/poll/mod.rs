//! `mqblk experiment poll`: sync I/O at queue depth 1 per job,
//! interrupt-style completion (a completion thread completes the request
//! and wakes the waiting job) against polled completion (hipri: the job
//! reaps its own request), over rw x block size, as in "virtio_blk:
//! implement blk_mq_ops->poll()" (Stefan Hajnoczi, 2021).
//!
//! Both designs run, each against its own interrupt-style run: first the
//! patch's own, notification toggling of notifications on shared queues (null
//! `poll_mode=toggle`), then dedicated poll queues (NVMe's, and what
//! virtio_blk merged in 2022). The device is calibrated to the source's
//! (calibrate.rs). Reported: IOPS and the gain of polling (median and
//! min-max over the rounds), mean and p99 latency, and CPU per I/O of the
//! job threads (submitting, and with hipri polling) and of the emulated
//! device's completion threads, each from per-thread CPU time
//! (bench/thread_cpu.rs), never the process's CPUs divided by IOPS.
//!
//! Relies on: source.rs (the patch's table), calibrate.rs (the device),
//! report.rs (tables, JSON, charts).

mod calibrate;
mod report;
mod source;

use serde_json::Value;

use super::plot::Panel;
use super::{alternate, ExperimentError, Options, Spread};
use crate::bench::cpus;
use calibrate::Calibration;

/// A poll design: its name and its null keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Design {
    name: &'static str,
    keys: &'static str,
}

/// The patch's design: every queue shared, notifications off while hipri
/// requests are in flight.
const TOGGLE: Design = Design { name: "toggle", keys: "poll_mode=toggle" };
/// NVMe's design: hipri requests on dedicated poll queues.
const POLL_QUEUES: Design = Design { name: "poll_queues", keys: "poll_mode=queues" };
/// Headline first.
const DESIGNS: [Design; 2] = [TOGGLE, POLL_QUEUES];

/// Where the jobs and the completion threads run.
struct Placement {
    jobs: usize,
    cores: usize,
    /// Jobs and completion threads share the cores (too few to separate).
    shared: bool,
    /// Bench options pinning the jobs, and the device's `irq_cpus`.
    pin_args: Vec<String>,
    irq_cpus: Option<String>,
}

/// With at least 4 CPUs, half run the jobs (one each) and half the
/// completion threads (one per queue), as the patch's guest vCPUs ran fio
/// while the host's own CPUs emulated the disk. With fewer, one job per CPU
/// and the completion threads go where the scheduler puts them.
fn placement() -> Placement {
    let allowed = cpus::allowed_cpus().unwrap_or_default();
    let cores = allowed.len().max(1);
    if cores < 4 {
        return Placement { jobs: cores, cores, shared: true, pin_args: Vec::new(), irq_cpus: None };
    }
    let jobs = cores / 2;
    let list = |c: &[usize], sep: &str| c.iter().map(usize::to_string).collect::<Vec<_>>().join(sep);
    Placement {
        jobs,
        cores,
        shared: false,
        pin_args: vec![format!("--cpus_allowed={}", list(&allowed[..jobs], ",")), "--cpus_allowed_policy=split".into()],
        irq_cpus: Some(list(&allowed[jobs..2 * jobs], ":")),
    }
}

impl Placement {
    /// The device spec of a cell: the calibrated keys for `bs`, the
    /// design's, and one submit queue per job (or `submit_queues`).
    fn device(&self, cal: &Calibration, design: Design, bs: &str, submit_queues: usize) -> String {
        let poll_queues = if design == POLL_QUEUES { submit_queues } else { 0 };
        let mut spec =
            format!("null:{},{},submit_queues={submit_queues},poll_queues={poll_queues}", cal.keys(bs), design.keys);
        if let Some(cpus) = &self.irq_cpus {
            spec.push_str(&format!(",irq_cpus={cpus}"));
        }
        spec
    }

    /// The bench arguments of one grid cell: one QD1 pvsync2 job per core.
    fn job_args(
        &self,
        cal: &Calibration,
        design: Design,
        rw: &str,
        bs: &str,
        hipri: bool,
        runtime: &str,
    ) -> Vec<String> {
        let mut args: Vec<String> = vec!["--device".into(), self.device(cal, design, bs, self.jobs)];
        args.extend(
            [
                "--name=poll",
                "--ioengine=pvsync2",
                "--iodepth=1",
                "--time_based",
                "--group_reporting",
                "--lat_percentiles=1",
            ]
            .map(String::from),
        );
        args.extend([
            format!("--rw={rw}"),
            format!("--bs={bs}"),
            format!("--numjobs={}", self.jobs),
            format!("--runtime={runtime}"),
            format!("--hipri={}", u8::from(hipri)),
        ]);
        args.extend(self.pin_args.iter().cloned());
        args
    }

    fn describe(&self) -> String {
        if self.shared {
            format!(
                "{} jobs on {} cores, sharing them with the {} completion threads (too few cores to separate)",
                self.jobs, self.cores, self.jobs
            )
        } else {
            format!(
                "{} jobs pinned one per CPU ({}), the completion threads on CPUs {}",
                self.jobs,
                self.pin_args[0].trim_start_matches("--cpus_allowed="),
                self.irq_cpus.as_deref().unwrap_or("")
            )
        }
    }
}

/// One run of one cell (or of one job of a mixed run).
#[derive(Debug, Clone)]
struct Run {
    iops: f64,
    /// One job's time per I/O (ns): jobs / IOPS, as the source's figures
    /// give it (QD1: one I/O in flight per job).
    ns_per_io_per_job: f64,
    lat_mean_us: f64,
    /// The median I/O's latency: what a poller that held its CPU saw
    /// (a descheduled poller delays one I/O, not half of them).
    lat_p50_us: f64,
    lat_p99_us: f64,
    /// The job threads' CPU per I/O (us), per-thread CPU time over the
    /// window in which every job ran.
    job_cpu_us_per_io: f64,
    /// The emulated device's threads' CPU per I/O (us), same window.
    device_cpu_us_per_io: f64,
    /// The completion threads' timer over the whole run.
    timer: TimerFigures,
}

/// How the completion threads' timed waits went (null's show lines:
/// timed, late_ns_mean, late_ns_max, timer_sleeps, timer_spin_ns).
#[derive(Debug, Clone, Copy, Default)]
struct TimerFigures {
    /// Waits for a due time, over every completion thread.
    timed: u64,
    /// How late the waits ended past their due times: mean and worst (us).
    late_us_mean: f64,
    late_us_max: f64,
    /// Share of the waits that slept (the rest only spun: due sooner than
    /// the timer's lead), and the mean spin per wait (us).
    slept_share: f64,
    spin_us_per_wait: f64,
}

impl TimerFigures {
    /// Sums the `null/toggleN/` and `null/irqN/` lines of a device's stats.
    fn parse(stats: &str) -> Self {
        let (mut timed, mut late_ns_sum, mut late_ns_max, mut sleeps, mut spin_ns) = (0u64, 0u64, 0u64, 0u64, 0u64);
        for line in stats.lines().filter(|l| l.starts_with("null/toggle") || l.starts_with("null/irq")) {
            let value = |key: &str| -> u64 {
                line.split(['/', ' ']).find_map(|f| f.strip_prefix(key)?.strip_prefix('=')?.parse().ok()).unwrap_or(0)
            };
            let n = value("timed");
            timed += n;
            late_ns_sum += value("late_ns_mean") * n;
            late_ns_max = late_ns_max.max(value("late_ns_max"));
            sleeps += value("timer_sleeps");
            spin_ns += value("timer_spin_ns");
        }
        let per_wait = |x: u64| x as f64 / timed.max(1) as f64;
        TimerFigures {
            timed,
            late_us_mean: per_wait(late_ns_sum) / 1e3,
            late_us_max: late_ns_max as f64 / 1e3,
            slept_share: per_wait(sleeps),
            spin_us_per_wait: per_wait(spin_ns) / 1e3,
        }
    }
}

/// One cell: its runs over the rounds, and the command that made them.
struct Cell {
    design: Design,
    rw: &'static str,
    bs: &'static str,
    hipri: bool,
    runs: Vec<Run>,
    command: String,
}

impl Cell {
    fn spread(&self, f: impl Fn(&Run) -> f64) -> Spread {
        Spread::over(&self.runs, f)
    }
}

/// What the experiment measured.
struct Measured {
    place: Placement,
    cal: Calibration,
    rws: &'static [&'static str],
    bss: &'static [&'static str],
    cells: Vec<Cell>,
    mixed: Vec<Cell>,
}

pub fn run(opts: &Options) -> Result<(Value, Vec<Panel>, String), ExperimentError> {
    let place = placement();
    let (rws, bss, runtime): (&'static [&'static str], &'static [&'static str], &str) = if opts.quick {
        (&["randread", "randwrite"], &["4k", "16k", "64k", "128k"], "400ms")
    } else {
        (&["randread", "randwrite", "read", "write"], &["4k", "16k", "64k", "128k"], "900ms")
    };
    let cal = calibrate::calibrate(&place, opts.quick)?;
    let mut cells = Vec::new();
    for &rw in rws {
        for &bs in bss {
            cells.extend(grid_cells(opts, &place, &cal, rw, bs, runtime)?);
        }
    }
    let mixed = mixed_cells(opts, &place, &cal, runtime)?;
    let m = Measured { place, cal, rws, bss, cells, mixed };
    Ok((report::document(opts, &m), report::panels(&m), report::tables(opts, &m)))
}

/// Measures one bench argument list once (`jobs` jobs in one group).
fn measure(args: &[String], rw: &str, jobs: usize) -> Result<(Run, String), ExperimentError> {
    let (out, command) = super::run_args(args)?;
    let e = out.entries.first().ok_or_else(|| ExperimentError::Failed("no job ran".into()))?;
    let d = if rw.contains("read") { &e.run.read } else { &e.run.write };
    let cpu =
        out.process_cpu.ok_or_else(|| ExperimentError::Failed(format!("{command}: the jobs never all ran at once")))?;
    let iops = e.iops(d);
    let run = Run {
        iops,
        ns_per_io_per_job: jobs as f64 / iops.max(1.0) * 1e9,
        lat_mean_us: d.lat.mean() / 1e3,
        lat_p50_us: d.lat_percentile(50.0) as f64 / 1e3,
        lat_p99_us: d.lat_percentile(99.0) as f64 / 1e3,
        job_cpu_us_per_io: cpu.job_threads_ns_per_io() / 1e3,
        device_cpu_us_per_io: cpu.device_threads_ns_per_io() / 1e3,
        timer: TimerFigures::parse(&out.stats),
    };
    Ok((run, command))
}

/// One rw and block size: both designs without and with hipri, the four
/// variants alternating over the rounds.
fn grid_cells(
    opts: &Options,
    place: &Placement,
    cal: &Calibration,
    rw: &'static str,
    bs: &'static str,
    runtime: &str,
) -> Result<Vec<Cell>, ExperimentError> {
    let variants: Vec<(Design, bool)> = DESIGNS.iter().flat_map(|&d| [(d, false), (d, true)]).collect();
    let mut commands = vec![String::new(); variants.len()];
    let runs = alternate(variants.len(), opts.rounds, |v, round| {
        let (design, hipri) = variants[v];
        let args = place.job_args(cal, design, rw, bs, hipri, runtime);
        eprintln!("poll: round {round} {} {rw} bs={bs} hipri={}", design.name, u8::from(hipri));
        let (run, command) = measure(&args, rw, place.jobs)?;
        commands[v] = command;
        Ok(run)
    })?;
    Ok(runs
        .into_iter()
        .zip(commands)
        .zip(&variants)
        .map(|((runs, command), &(design, hipri))| Cell { design, rw, bs, hipri, runs, command })
        .collect())
}

/// The mixed runs: one queue, one hipri job and one plain job sharing it
/// (toggle) or the hipri job on the poll queue (poll_queues). Shows what
/// each design costs the plain job: under notification toggling its completions
/// wait for the poller while notifications are off (the patch's drawback).
/// The CPU figures are the two jobs' and the device's together.
fn mixed_cells(
    opts: &Options,
    place: &Placement,
    cal: &Calibration,
    runtime: &str,
) -> Result<Vec<Cell>, ExperimentError> {
    let mut commands = vec![String::new(); DESIGNS.len()];
    let runs = alternate(DESIGNS.len(), opts.rounds, |v, round| {
        let design = DESIGNS[v];
        let mut args: Vec<String> = vec!["--device".into(), place.device(cal, design, "4k", 1)];
        args.extend(
            ["--ioengine=pvsync2", "--iodepth=1", "--time_based", "--rw=randread", "--bs=4k", "--lat_percentiles=1"]
                .map(String::from),
        );
        args.push(format!("--runtime={runtime}"));
        args.extend(["--name=hipri", "--hipri=1", "--name=plain", "--hipri=0"].map(String::from));
        eprintln!("poll: round {round} mixed {}", design.name);
        let (out, command) = super::run_args(&args)?;
        let cpu = out.process_cpu.unwrap_or_default();
        let per_job: Vec<Run> = out
            .entries
            .iter()
            .map(|e| {
                let iops = e.iops(&e.run.read);
                Run {
                    iops,
                    ns_per_io_per_job: 1e9 / iops.max(1.0),
                    lat_mean_us: e.run.read.lat.mean() / 1e3,
                    lat_p50_us: e.run.read.lat_percentile(50.0) as f64 / 1e3,
                    lat_p99_us: e.run.read.lat_percentile(99.0) as f64 / 1e3,
                    job_cpu_us_per_io: e.cpu_ns_per_io() / 1e3,
                    device_cpu_us_per_io: cpu.device_threads_ns_per_io() / 1e3,
                    timer: TimerFigures::parse(&out.stats),
                }
            })
            .collect();
        if per_job.len() != 2 {
            return Err(ExperimentError::Failed(format!("{command}: expected 2 jobs, got {}", per_job.len())));
        }
        commands[v] = command;
        Ok(per_job)
    })?;
    let mut cells = Vec::new();
    for ((design_runs, command), &design) in runs.into_iter().zip(commands).zip(&DESIGNS) {
        let (mut hipri, mut plain) = (Vec::new(), Vec::new());
        for mut pair in design_runs {
            plain.push(pair.pop().expect("two jobs"));
            hipri.push(pair.pop().expect("two jobs"));
        }
        for (is_hipri, runs) in [(true, hipri), (false, plain)] {
            cells.push(Cell { design, rw: "randread", bs: "4k", hipri: is_hipri, runs, command: command.clone() });
        }
    }
    Ok(cells)
}

fn pick<'a>(cells: &'a [Cell], design: Design, rw: &str, bs: &str, hipri: bool) -> Option<&'a Cell> {
    cells.iter().find(|c| c.design == design && c.rw == rw && c.bs == bs && c.hipri == hipri)
}

/// hipri's IOPS gain in percent, round by round (the two runs of a round
/// ran side by side).
fn gain(cells: &[Cell], design: Design, rw: &str, bs: &str) -> Option<Spread> {
    let (irq, poll) = (pick(cells, design, rw, bs, false)?, pick(cells, design, rw, bs, true)?);
    let gains: Vec<f64> =
        irq.runs.iter().zip(&poll.runs).map(|(a, b)| (b.iops / a.iops.max(1.0) - 1.0) * 100.0).collect();
    Some(Spread::of(&gains))
}

#[cfg(test)]
mod tests {
    use super::TimerFigures;

    #[test]
    fn timer_figures_sum_every_completion_thread() {
        let stats = "null/toggle0/notify=1 hipri=0 timed=3 late_ns_mean=1000 late_ns_max=2500 timer_sleeps=1 \
                     timer_spin_ns=9000 timer_lead_ns=20000\n\
                     null/irq1/completed=1 pending=0 timed=1 late_ns_mean=5000 late_ns_max=5000 timer_sleeps=1 \
                     timer_spin_ns=3000 timer_lead_ns=20000\nnull/other=7\n";
        let t = TimerFigures::parse(stats);
        assert_eq!(t.timed, 4);
        assert!((t.late_us_mean - 2.0).abs() < 1e-9, "(3 x 1 + 5) / 4 us: {t:?}");
        assert!((t.late_us_max - 5.0).abs() < 1e-9, "{t:?}");
        assert!((t.slept_share - 0.5).abs() < 1e-9, "{t:?}");
        assert!((t.spin_us_per_wait - 3.0).abs() < 1e-9, "{t:?}");
        assert_eq!(TimerFigures::parse("").timed, 0, "no completion thread: nothing timed");
    }
}
