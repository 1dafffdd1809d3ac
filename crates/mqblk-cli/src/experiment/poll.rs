//! `mqblk experiment poll`: sync I/O at queue depth 1 per job,
//! interrupt-style completion (a completion thread completes the request
//! and wakes the waiting job) against polled completion (hipri: the job
//! reaps its own request), over rw x block size, as in "virtio_blk:
//! implement blk_mq_ops->poll()" (Stefan Hajnoczi, 2021). Reports IOPS, the
//! gain of polling, mean and p99 latency and the CPU per I/O of the whole
//! process, beside the patch's own figures.
//!
//! Both designs are measured, each against its own interrupt-style run:
//! dedicated poll queues (what was merged, for NVMe and in 2022 for
//! virtio_blk) and the patch's toggling of notifications on shared queues
//! (null `poll_mode=hybrid`).
//!
//! The CPU column is the process's (getrusage RUSAGE_SELF over the window
//! in which every job ran, `bench::stats::ProcessCpu`), not the job threads'
//! alone: with hipri=0 the null device's completion threads spin to each
//! due time (the emulated device's timer), and on a machine with no spare
//! core they share the jobs' cores. The job threads' own CPU is kept beside
//! it in the JSON, so the difference is visible.

use serde_json::{json, Value};

use super::plot::{Origin, Panel, Series, XAxis};
use super::{alternate, ExperimentError, Options, Spread};
use crate::bench::cpus;

/// The emulated device, common to every run: a timer completion 10 us
/// after submission (irqmode=2), and one transfer timeline for the whole
/// device at 4000 MiB/s that overlaps the 10 us (a request is due at the
/// later of the two). So 4k and 16k requests are latency-bound (a 16k
/// transfer takes 3.9 us: two jobs' transfers fit in the 10 us even when
/// submitted together) and 64k and 128k ones bandwidth-bound (15.6 and
/// 31.2 us each), as on the patch's Optane disk, where 64k and 128k reads
/// ran at its ~2.2 GB/s. No memory backing: the disk moves data by DMA, so
/// neither side copies (a memory-backed write over a fresh 4 GiB device
/// allocates a page on almost every I/O, which swung the write rows).
const DEVICE_MODEL: &str = "gb=4,irqmode=2,completion_nsec=10000,mbps=4000,memory_backed=0";

/// How a device's poll support is built: (design, its spec keys).
const DESIGNS: [(&str, &str); 2] = [("poll_queues", "poll_mode=queues"), ("hybrid", "poll_mode=hybrid")];

/// The patch's table (fio pvsync2, numjobs=4, QD1, 4 vCPUs, virtio-blk on an
/// Optane SSD): (rw, bs, IOPS hipri=0, IOPS hipri=1).
const SOURCE: [(&str, &str, f64, f64); 16] = [
    ("randread", "4k", 149_426.0, 170_763.0),
    ("randread", "16k", 118_939.0, 134_269.0),
    ("randread", "64k", 34_886.0, 34_906.0),
    ("randread", "128k", 17_655.0, 17_667.0),
    ("randwrite", "4k", 138_578.0, 163_600.0),
    ("randwrite", "16k", 102_089.0, 120_950.0),
    ("randwrite", "64k", 32_364.0, 32_561.0),
    ("randwrite", "128k", 16_154.0, 16_237.0),
    ("read", "4k", 146_032.0, 170_620.0),
    ("read", "16k", 117_097.0, 130_437.0),
    ("read", "64k", 34_834.0, 35_037.0),
    ("read", "128k", 17_680.0, 17_658.0),
    ("write", "4k", 134_562.0, 151_422.0),
    ("write", "16k", 101_796.0, 107_606.0),
    ("write", "64k", 32_364.0, 32_594.0),
    ("write", "128k", 16_259.0, 16_265.0),
];

/// Where the jobs and the completion threads run.
struct Placement {
    jobs: usize,
    cores: usize,
    /// Jobs and completion threads share the cores (too few to separate).
    shared: bool,
    /// Bench options pinning the jobs, and the device's `irq_cpus`.
    job_args: Vec<String>,
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
        return Placement { jobs: cores, cores, shared: true, job_args: Vec::new(), irq_cpus: None };
    }
    let jobs = cores / 2;
    let list = |c: &[usize], sep: &str| c.iter().map(usize::to_string).collect::<Vec<_>>().join(sep);
    Placement {
        jobs,
        cores,
        shared: false,
        job_args: vec![format!("--cpus_allowed={}", list(&allowed[..jobs], ",")), "--cpus_allowed_policy=split".into()],
        irq_cpus: Some(list(&allowed[jobs..2 * jobs], ":")),
    }
}

impl Placement {
    fn device(&self, design_keys: &str, submit_queues: usize) -> String {
        let poll_queues = if design_keys.ends_with("queues") { submit_queues } else { 0 };
        let mut spec =
            format!("null:{DEVICE_MODEL},{design_keys},submit_queues={submit_queues},poll_queues={poll_queues}");
        if let Some(cpus) = &self.irq_cpus {
            spec.push_str(&format!(",irq_cpus={cpus}"));
        }
        spec
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
                self.job_args[0].trim_start_matches("--cpus_allowed="),
                self.irq_cpus.as_deref().unwrap_or("")
            )
        }
    }
}

/// One run of one cell.
struct Run {
    iops: f64,
    lat_mean_us: f64,
    lat_p99_us: f64,
    /// The whole process's CPU per I/O (us).
    cpu_us_per_io: f64,
    /// The job threads' own CPU per I/O (us): what the CPU column showed
    /// before it counted the completion threads.
    job_cpu_us_per_io: f64,
    /// CPUs the process kept busy.
    cpus_busy: f64,
}

/// One cell: its runs over the rounds, and the command that made them.
struct Cell {
    design: &'static str,
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

/// /proc/loadavg's 1-minute figure: on a shared machine, spinning pollers
/// lose their CPU to other processes (sleepers are favoured at wakeup), so
/// the load around a run says how far its hipri cells can be trusted.
fn load_1min() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

pub fn run(opts: &Options) -> Result<(Value, Vec<Panel>, String), ExperimentError> {
    let load_before = load_1min();
    let place = placement();
    let (rws, bss, runtime): (&[&str], &[&str], &str) = if opts.quick {
        (&["randread", "randwrite"], &["4k", "64k"], "400ms")
    } else {
        (&["randread", "randwrite", "read", "write"], &["4k", "16k", "64k", "128k"], "900ms")
    };
    let mut cells = Vec::new();
    for &rw in rws {
        for &bs in bss {
            cells.extend(grid_cells(opts, &place, rw, bs, runtime)?);
        }
    }
    let mixed = mixed_cells(opts, &place, runtime)?;
    let load = [load_before, load_1min()];
    let mut table = table(&cells, &place, opts) + &mixed_table(&mixed);
    if let [Some(before), Some(after)] = load {
        table.push_str(&format!(
            "load average (1 min) before / after: {before:.1} / {after:.1} on {} CPUs{}\n",
            place.cores,
            if after.max(before) > place.cores as f64 {
                ": other processes competed for the CPUs, and spinning pollers lose most to them"
            } else {
                ""
            }
        ));
    }
    let mut doc = document(opts, &place, &cells, &mixed);
    doc["load_1min_before_after"] = json!(load);
    let panels = gain_panels(rws, bss, &cells);
    Ok((doc, panels, table))
}

/// Measures one bench argument list once.
fn measure(args: &[String], rw: &str) -> Result<(Run, String), ExperimentError> {
    let (out, command) = super::run_args(args)?;
    let e = out.entries.first().ok_or_else(|| ExperimentError::Failed("no job ran".into()))?;
    let d = if rw.contains("read") { &e.run.read } else { &e.run.write };
    let process =
        out.process_cpu.ok_or_else(|| ExperimentError::Failed(format!("{command}: the jobs never all ran at once")))?;
    let run = Run {
        iops: e.iops(d),
        lat_mean_us: d.lat.mean() / 1e3,
        lat_p99_us: d.lat_percentile(99.0) as f64 / 1e3,
        cpu_us_per_io: process.cpu_ns_per_io() / 1e3,
        job_cpu_us_per_io: e.cpu_ns_per_io() / 1e3,
        cpus_busy: process.cpus_busy(),
    };
    Ok((run, command))
}

/// One rw and block size: both designs without and with hipri, one QD1
/// pvsync2 job per core, the four variants alternating over the rounds.
fn grid_cells(
    opts: &Options,
    place: &Placement,
    rw: &'static str,
    bs: &'static str,
    runtime: &str,
) -> Result<Vec<Cell>, ExperimentError> {
    let variants: Vec<(&str, &str, bool)> =
        DESIGNS.iter().flat_map(|&(d, keys)| [(d, keys, false), (d, keys, true)]).collect();
    let mut commands = vec![String::new(); variants.len()];
    let runs = alternate(variants.len(), opts.rounds, |v, round| {
        let (design, keys, hipri) = variants[v];
        let mut args: Vec<String> = vec!["--device".into(), place.device(keys, place.jobs)];
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
            format!("--numjobs={}", place.jobs),
            format!("--runtime={runtime}"),
            format!("--hipri={}", u8::from(hipri)),
        ]);
        args.extend(place.job_args.iter().cloned());
        eprintln!("poll: round {round} {design} {rw} bs={bs} hipri={}", u8::from(hipri));
        let (run, command) = measure(&args, rw)?;
        commands[v] = command;
        Ok(run)
    })?;
    Ok(runs
        .into_iter()
        .zip(commands)
        .zip(&variants)
        .map(|((runs, command), &(design, _, hipri))| Cell { design, rw, bs, hipri, runs, command })
        .collect())
}

/// The mixed runs: one queue, one hipri job and one plain job sharing it
/// (hybrid) or the hipri job on the poll queue (poll_queues). Shows what
/// each design costs the plain job: under hybrid toggling its completions
/// wait for the poller while notifications are off (the patch's drawback).
fn mixed_cells(opts: &Options, place: &Placement, runtime: &str) -> Result<Vec<Cell>, ExperimentError> {
    let mut commands = vec![String::new(); DESIGNS.len()];
    let runs = alternate(DESIGNS.len(), opts.rounds, |v, round| {
        let (design, keys) = DESIGNS[v];
        let mut args: Vec<String> = vec!["--device".into(), place.device(keys, 1)];
        args.extend(
            ["--ioengine=pvsync2", "--iodepth=1", "--time_based", "--rw=randread", "--bs=4k", "--lat_percentiles=1"]
                .map(String::from),
        );
        args.push(format!("--runtime={runtime}"));
        args.extend(["--name=hipri", "--hipri=1", "--name=plain", "--hipri=0"].map(String::from));
        eprintln!("poll: round {round} mixed {design}");
        let (out, command) = super::run_args(&args)?;
        let process = out.process_cpu.unwrap_or_default();
        let per_job: Vec<Run> = out
            .entries
            .iter()
            .map(|e| Run {
                iops: e.iops(&e.run.read),
                lat_mean_us: e.run.read.lat.mean() / 1e3,
                lat_p99_us: e.run.read.lat_percentile(99.0) as f64 / 1e3,
                cpu_us_per_io: process.cpu_ns_per_io() / 1e3,
                job_cpu_us_per_io: e.cpu_ns_per_io() / 1e3,
                cpus_busy: process.cpus_busy(),
            })
            .collect();
        if per_job.len() != 2 {
            return Err(ExperimentError::Failed(format!("{command}: expected 2 jobs, got {}", per_job.len())));
        }
        commands[v] = command;
        Ok(per_job)
    })?;
    let mut cells = Vec::new();
    for ((design_runs, command), &(design, _)) in runs.into_iter().zip(commands).zip(&DESIGNS) {
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

fn pick<'a>(cells: &'a [Cell], design: &str, rw: &str, bs: &str, hipri: bool) -> Option<&'a Cell> {
    cells.iter().find(|c| c.design == design && c.rw == rw && c.bs == bs && c.hipri == hipri)
}

/// hipri's IOPS gain in percent, round by round (the two runs of a round
/// ran side by side).
fn gain(cells: &[Cell], design: &str, rw: &str, bs: &str) -> Option<Spread> {
    let (irq, poll) = (pick(cells, design, rw, bs, false)?, pick(cells, design, rw, bs, true)?);
    let gains: Vec<f64> =
        irq.runs.iter().zip(&poll.runs).map(|(a, b)| (b.iops / a.iops.max(1.0) - 1.0) * 100.0).collect();
    Some(Spread::of(&gains))
}

fn source(rw: &str, bs: &str) -> Option<(f64, f64)> {
    SOURCE.iter().find(|s| s.0 == rw && s.1 == bs).map(|s| (s.2, s.3))
}

/// The JSON document: the source's figures, the device, every cell with
/// the median, spread and runs of each figure and its command.
fn document(opts: &Options, place: &Placement, cells: &[Cell], mixed: &[Cell]) -> Value {
    let cell_json = |c: &Cell| {
        json!({
            "rw": c.rw, "bs": c.bs, "design": c.design, "hipri": c.hipri,
            "iops": c.spread(|r| r.iops).json(),
            "iops_spread_pct": c.spread(|r| r.iops).spread_pct(),
            "lat_mean_us": c.spread(|r| r.lat_mean_us).json(),
            "lat_p99_us": c.spread(|r| r.lat_p99_us).json(),
            "cpu_us_per_io": c.spread(|r| r.cpu_us_per_io).json(),
            "job_threads_cpu_us_per_io": c.spread(|r| r.job_cpu_us_per_io).json(),
            "process_cpus_busy": c.spread(|r| r.cpus_busy).json(),
            "command": c.command,
        })
    };
    let mut gains = Vec::new();
    for c in cells.iter().filter(|c| !c.hipri) {
        if let Some(g) = gain(cells, c.design, c.rw, c.bs) {
            let src = source(c.rw, c.bs).map(|(a, b)| (b / a - 1.0) * 100.0);
            gains.push(
                json!({"rw": c.rw, "bs": c.bs, "design": c.design, "gain_pct": g.json(), "source_gain_pct": src}),
            );
        }
    }
    json!({
        "experiment": "poll",
        "source": "virtio_blk: implement blk_mq_ops->poll() (Stefan Hajnoczi, 2021): fio pvsync2, numjobs=4, QD1, \
                   4 vCPUs, virtio-blk on an Optane SSD; 4k randread 149,426 vs 170,763 IOPS (+14%), randwrite \
                   +18%, 64k and 128k about 0%",
        "source_table": SOURCE.iter().map(|s| json!({"rw": s.0, "bs": s.1, "iops_hipri0": s.2, "iops_hipri1": s.3}))
            .collect::<Vec<_>>(),
        "quick": opts.quick,
        "device_model": DEVICE_MODEL,
        "devices": DESIGNS.iter().map(|&(d, keys)| (d.to_string(), place.device(keys, place.jobs).into()))
            .collect::<serde_json::Map<String, Value>>(),
        "cpu": "cpu_us_per_io: the whole process's CPU (getrusage RUSAGE_SELF: job threads, the null device's \
                completion threads, the bench's supervisor) over the window in which every job ran, per I/O in \
                that window; job_threads_cpu_us_per_io: the job threads' own (RUSAGE_THREAD)",
        "placement": {
            "jobs": place.jobs,
            "cores": place.cores,
            "cores_shared": place.shared,
            "job_options": place.job_args,
            "irq_cpus": place.irq_cpus,
            "description": place.describe(),
        },
        "jobs": place.jobs,
        "results": cells.iter().map(cell_json).collect::<Vec<_>>(),
        "gains": gains,
        "mixed": mixed.iter().map(cell_json).collect::<Vec<_>>(),
    })
}

/// One plot per rw: each design's IOPS ratio hipri=1 / hipri=0 over block
/// size (median over the rounds), with the source's. A ratio, not a gain
/// in percent: the chart's axis starts at 0 and a loss must stay on it.
fn gain_panels(rws: &[&str], bss: &[&str], cells: &[Cell]) -> Vec<Panel> {
    rws.iter()
        .map(|rw| {
            let mut series: Vec<Series> = DESIGNS
                .iter()
                .map(|&(design, _)| Series {
                    spread: Vec::new(),
                    origin: Origin::Measured,
                    label: design.replace('_', " "),
                    points: bss
                        .iter()
                        .filter_map(|bs| gain(cells, design, rw, bs).map(|g| (kib(bs), 1.0 + g.median / 100.0)))
                        .collect(),
                })
                .collect();
            series.push(Series {
                spread: Vec::new(),
                origin: Origin::Source,
                label: "source".into(),
                points: bss.iter().filter_map(|bs| source(rw, bs).map(|(a, b)| (kib(bs), b / a))).collect(),
            });
            Panel {
                title: format!("poll: {rw}, IOPS hipri=1 / hipri=0"),
                x_label: "block size (KiB)".into(),
                y_label: "IOPS ratio (1: no gain)".into(),
                x: XAxis::Numeric { oversubscribed_from: None },
                series,
            }
        })
        .collect()
}

fn kib(bs: &str) -> f64 {
    bs.trim_end_matches('k').parse().unwrap_or(0.0)
}

fn table(cells: &[Cell], place: &Placement, opts: &Options) -> String {
    let rounds = opts.rounds;
    let mut out = format!(
        "\n== poll: QD1 pvsync2, {} (median (min-max) over {rounds} round(s)) ==\n\
         device: null {DEVICE_MODEL}: a timer completion 10 us after submission, one 4000 MiB/s transfer \
         timeline for the device (overlapping the 10 us), no data copies\n\
         poll_queues: {}\nhybrid:      {}\n\n\
         rw        | bs   | source IOPS 0 / 1 (gain)  | design      | kIOPS hipri=0      | kIOPS hipri=1      | gain %\n",
        place.describe(),
        place.device(DESIGNS[0].1, place.jobs),
        place.device(DESIGNS[1].1, place.jobs),
    );
    let rows: Vec<&Cell> = cells.iter().filter(|c| !c.hipri).collect();
    for c in &rows {
        let Some(b) = pick(cells, c.design, c.rw, c.bs, true) else { continue };
        let src = source(c.rw, c.bs)
            .map(|(a, b)| format!("{:>7.0} / {:<7.0} ({:+3.0}%)", a, b, (b / a - 1.0) * 100.0))
            .unwrap_or_default();
        out.push_str(&format!(
            "{:<9} | {:<4} | {:<25} | {:<11} | {:<18} | {:<18} | {}\n",
            c.rw,
            c.bs,
            src,
            c.design,
            Spread::over(&c.runs, |r| r.iops / 1e3).show(1),
            Spread::over(&b.runs, |r| r.iops / 1e3).show(1),
            gain(cells, c.design, c.rw, c.bs).map_or(String::new(), |g| g.show(1)),
        ));
    }
    out.push_str(
        "\nlatency and CPU: hipri=0 / hipri=1; CPU is the whole process's per I/O (job threads and the device's \
         completion threads)\n\
         rw        | bs   | design      | mean lat us 0      | mean lat us 1      | p99 us 0        | p99 us 1        \
         | CPU us/IO 0        | CPU us/IO 1        | job threads only us/IO 0 / 1\n",
    );
    for c in &rows {
        let Some(b) = pick(cells, c.design, c.rw, c.bs, true) else { continue };
        out.push_str(&format!(
            "{:<9} | {:<4} | {:<11} | {:<18} | {:<18} | {:<15} | {:<15} | {:<18} | {:<18} | {:.1} / {:.1}\n",
            c.rw,
            c.bs,
            c.design,
            c.spread(|r| r.lat_mean_us).show(1),
            b.spread(|r| r.lat_mean_us).show(1),
            c.spread(|r| r.lat_p99_us).show(0),
            b.spread(|r| r.lat_p99_us).show(0),
            c.spread(|r| r.cpu_us_per_io).show(1),
            b.spread(|r| r.cpu_us_per_io).show(1),
            c.spread(|r| r.job_cpu_us_per_io).median,
            b.spread(|r| r.job_cpu_us_per_io).median,
        ));
    }
    out.push_str(
        "\nsource (virtio_blk hybrid toggling, 4 jobs on 4 vCPUs, the disk emulated on the host's CPUs): 4k +12-18%, \
         16k +5-18%, 64k and 128k about 0%; its CPU use was not reported\n",
    );
    if place.shared {
        out.push_str(
            "(with hipri=0 the completion threads spin to each due time on the jobs' cores: the CPU column counts \
             them, and they take CPU time the jobs would otherwise have)\n",
        );
    }
    out
}

fn mixed_table(cells: &[Cell]) -> String {
    let mut out = String::from(
        "\n== mixed: one hipri job and one plain job, 4k randread at iodepth 1, one hardware queue ==\n\n\
         design      | job   | kIOPS              | mean lat us        | p99 us          | job thread CPU us/IO\n",
    );
    for c in cells {
        out.push_str(&format!(
            "{:<11} | {:<5} | {:<18} | {:<18} | {:<15} | {:.1}\n",
            c.design,
            if c.hipri { "hipri" } else { "plain" },
            c.spread(|r| r.iops / 1e3).show(1),
            c.spread(|r| r.lat_mean_us).show(1),
            c.spread(|r| r.lat_p99_us).show(0),
            c.spread(|r| r.job_cpu_us_per_io).median,
        ));
    }
    out.push_str(
        "(poll_queues: the hipri job has a poll queue of its own; hybrid: both share the queue, and the plain \
         job's completions are reaped by the poller while notifications are off)\n",
    );
    out
}
