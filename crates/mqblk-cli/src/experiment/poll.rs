//! `mqblk experiment poll` (seed 002): sync I/O at queue depth 1 per job
//! (one job per core), interrupt-style completion (a completion thread
//! completes the request and wakes the waiting job) against polled
//! completion (hipri: the job reaps its own request from a poll queue),
//! over rw x block size. Reports IOPS, the gain of polling, mean and p99
//! latency and the CPU it costs, like the source's table.
//!
//! Both designs are measured, each against its own interrupt-style run:
//! dedicated poll queues (the merged kernel design) and the RFC's hybrid
//! toggling of notifications on shared queues (null `poll_mode=hybrid`).

use serde_json::{json, Value};

use super::svg::{Panel, Series};
use super::{ExperimentError, Options};

/// Memory-backed, 10 us per request (timer completion) and 2000 MiB/s of
/// transfer for the whole device (so a 128k request spends most of its
/// time in the device, as on the source's disk), one poll queue per default
/// queue.
const DEVICE: &str =
    "null:gb=4,irqmode=2,completion_nsec=10000,mbps=2000,memory_backed=1,poll_queues=2,submit_queues=2";

/// The same device with no poll queues: its two queues toggle.
const DEVICE_HYBRID: &str =
    "null:gb=4,irqmode=2,completion_nsec=10000,mbps=2000,memory_backed=1,poll_mode=hybrid,submit_queues=2";

/// The mixed runs: one queue, one hipri job and one plain job sharing it
/// (hybrid) or the hipri job on the poll queue (poll_queues). Shows what
/// each design costs the plain job: under hybrid toggling, its completions
/// wait for the poller while notifications are off (the RFC's drawback).
const MIXED: [(&str, &str); 2] = [
    (
        "poll_queues",
        "null:gb=4,irqmode=2,completion_nsec=10000,mbps=2000,memory_backed=1,poll_queues=1,submit_queues=1",
    ),
    ("hybrid", "null:gb=4,irqmode=2,completion_nsec=10000,mbps=2000,memory_backed=1,poll_mode=hybrid,submit_queues=1"),
];

/// (design name, device spec).
const DESIGNS: [(&str, &str); 2] = [("poll_queues", DEVICE), ("hybrid", DEVICE_HYBRID)];

struct Cell {
    design: &'static str,
    rw: &'static str,
    bs: &'static str,
    hipri: bool,
    iops: f64,
    lat_mean_us: f64,
    lat_p99_us: f64,
    cpu_pct: f64,
    command: String,
}

pub fn run(opts: &Options) -> Result<(Value, Vec<Panel>, String), ExperimentError> {
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (rws, bss, runtime): (&[&str], &[&str], &str) = if opts.quick {
        (&["randread"], &["4k", "64k"], "500ms")
    } else {
        (&["randread", "randwrite", "read", "write"], &["4k", "16k", "64k", "128k"], "3")
    };
    let cells = grid_cells(rws, bss, runtime, jobs)?;
    let mixed = mixed_cells(runtime)?;
    let table = table(&cells, jobs) + &mixed_table(&mixed);
    let doc = document(opts, jobs, &cells, &mixed);
    let panels = gain_panels(rws, bss, &cells);
    Ok((doc, panels, table))
}

/// The table's runs: rw x block size x design, each without and with
/// hipri; one QD1 pvsync2 job per core.
fn grid_cells(
    rws: &[&'static str],
    bss: &[&'static str],
    runtime: &str,
    jobs: usize,
) -> Result<Vec<Cell>, ExperimentError> {
    let mut cells = Vec::new();
    for &rw in rws {
        for &bs in bss {
            for (design, device, hipri) in DESIGNS.iter().flat_map(|&(d, s)| [(d, s, false), (d, s, true)]) {
                let mut args: Vec<String> = vec!["--device".into(), device.into()];
                args.extend(
                    ["--name=poll", "--ioengine=pvsync2", "--iodepth=1", "--time_based", "--group_reporting"]
                        .map(String::from),
                );
                args.push(format!("--rw={rw}"));
                args.push(format!("--bs={bs}"));
                args.push(format!("--numjobs={jobs}"));
                args.push(format!("--runtime={runtime}"));
                args.push(format!("--hipri={}", u8::from(hipri)));
                eprintln!("poll: {design} {rw} bs={bs} hipri={}", u8::from(hipri));
                let (out, command) = super::run_args(&args)?;
                let e = out.entries.first().ok_or_else(|| ExperimentError::Failed("no job ran".into()))?;
                let d = if rw.contains("read") { &e.run.read } else { &e.run.write };
                let cpu_base = (e.run.elapsed_ns as f64 * e.nr_jobs as f64).max(1.0);
                cells.push(Cell {
                    design,
                    rw,
                    bs,
                    hipri,
                    iops: e.iops(d),
                    lat_mean_us: d.lat.mean() / 1e3,
                    lat_p99_us: d.lat_percentile(99.0) as f64 / 1e3,
                    cpu_pct: (e.run.rusage.user_ns + e.run.rusage.sys_ns) as f64 / cpu_base * 100.0,
                    command,
                });
            }
        }
    }
    Ok(cells)
}

/// The mixed runs (`MIXED`): a hipri and a plain job on one queue.
fn mixed_cells(runtime: &str) -> Result<Vec<Cell>, ExperimentError> {
    let mut mixed = Vec::new();
    for (design, device) in MIXED {
        let mut args: Vec<String> = vec!["--device".into(), device.into()];
        args.extend(
            ["--ioengine=pvsync2", "--iodepth=1", "--time_based", "--rw=randread", "--bs=4k"].map(String::from),
        );
        args.push(format!("--runtime={runtime}"));
        args.extend(["--name=hipri", "--hipri=1", "--name=plain", "--hipri=0"].map(String::from));
        eprintln!("poll: mixed {design}");
        let (out, command) = super::run_args(&args)?;
        for (e, hipri) in out.entries.iter().zip([true, false]) {
            let d = &e.run.read;
            let cpu_base = (e.run.elapsed_ns as f64).max(1.0);
            mixed.push(Cell {
                design,
                rw: "randread",
                bs: "4k",
                hipri,
                iops: e.iops(d),
                lat_mean_us: d.lat.mean() / 1e3,
                lat_p99_us: d.lat_percentile(99.0) as f64 / 1e3,
                cpu_pct: (e.run.rusage.user_ns + e.run.rusage.sys_ns) as f64 / cpu_base * 100.0,
                command: command.clone(),
            });
        }
    }
    Ok(mixed)
}

/// The JSON document: the source's figures, the devices, every run.
fn document(opts: &Options, jobs: usize, cells: &[Cell], mixed: &[Cell]) -> Value {
    let results: Vec<Value> = cells
        .iter()
        .map(|c| {
            json!({
                "rw": c.rw, "bs": c.bs, "hipri": c.hipri, "design": c.design,
                "iops": c.iops, "lat_mean_us": c.lat_mean_us, "lat_p99_us": c.lat_p99_us,
                "cpu_pct_per_job": c.cpu_pct, "command": c.command,
            })
        })
        .collect();
    json!({
        "experiment": "poll",
        "source": "seed 002: virtio_blk: implement blk_mq_ops->poll() (2021): 4k randread QD1 x 4 jobs \
                   149,426 vs 170,763 IOPS (+14%), randwrite +18%, 64k and 128k about 0%",
        "quick": opts.quick,
        "devices": {"poll_queues": DEVICE, "hybrid": DEVICE_HYBRID},
        "jobs": jobs,
        "results": results,
        "mixed": mixed.iter().map(|c| json!({
            "design": c.design, "job": if c.hipri { "hipri" } else { "plain" }, "rw": c.rw, "bs": c.bs,
            "iops": c.iops, "lat_mean_us": c.lat_mean_us, "lat_p99_us": c.lat_p99_us,
            "cpu_pct": c.cpu_pct, "command": c.command,
        })).collect::<Vec<_>>(),
    })
}

/// One plot per rw: each design's IOPS gain of hipri over block size.
fn gain_panels(rws: &[&str], bss: &[&str], cells: &[Cell]) -> Vec<Panel> {
    rws.iter()
        .map(|rw| Panel {
            title: format!("poll: {rw}, gain of hipri (%)"),
            x_label: "block size (KiB)".into(),
            y_label: "IOPS gain %".into(),
            series: DESIGNS
                .iter()
                .map(|&(design, _)| Series {
                    label: design.replace('_', " "),
                    points: bss.iter().filter_map(|bs| gain(cells, design, rw, bs).map(|g| (kib(bs), g))).collect(),
                })
                .collect(),
        })
        .collect()
}

fn kib(bs: &str) -> f64 {
    bs.trim_end_matches('k').parse().unwrap_or(0.0)
}

fn pick<'a>(cells: &'a [Cell], design: &str, rw: &str, bs: &str, hipri: bool) -> Option<&'a Cell> {
    cells.iter().find(|c| c.design == design && c.rw == rw && c.bs == bs && c.hipri == hipri)
}

fn gain(cells: &[Cell], design: &str, rw: &str, bs: &str) -> Option<f64> {
    let (irq, poll) = (pick(cells, design, rw, bs, false)?, pick(cells, design, rw, bs, true)?);
    Some((poll.iops / irq.iops.max(1.0) - 1.0) * 100.0)
}

fn table(cells: &[Cell], jobs: usize) -> String {
    let mut out = format!(
        "\n== poll ({jobs} jobs at iodepth 1)\n   poll_queues: {DEVICE}\n   hybrid:      {DEVICE_HYBRID} ==\n\n\
         rw        | bs   | design      | IOPS hipri=0 | IOPS hipri=1 | gain   | mean lat us 0 / 1 | p99 us 0 / 1  | CPU % 0 / 1\n"
    );
    let mut seen: Vec<(&str, &str, &str)> = Vec::new();
    for c in cells {
        if seen.contains(&(c.design, c.rw, c.bs)) {
            continue;
        }
        seen.push((c.design, c.rw, c.bs));
        let (Some(a), Some(b)) = (pick(cells, c.design, c.rw, c.bs, false), pick(cells, c.design, c.rw, c.bs, true))
        else {
            continue;
        };
        out.push_str(&format!(
            "{:<9} | {:<4} | {:<11} | {:>12.0} | {:>12.0} | {:>+5.1}% | {:>7.1} / {:<7.1} | {:>5.0} / {:<5.0} | {:>3.0} / {:<3.0}\n",
            c.rw,
            c.bs,
            c.design,
            a.iops,
            b.iops,
            gain(cells, c.design, c.rw, c.bs).unwrap_or(0.0),
            a.lat_mean_us,
            b.lat_mean_us,
            a.lat_p99_us,
            b.lat_p99_us,
            a.cpu_pct,
            b.cpu_pct
        ));
    }
    out.push_str("\nsource (hybrid toggling on virtio_blk): 4k randread +14%, randwrite +18%, 64k and 128k about 0%\n");
    out
}

fn mixed_table(cells: &[Cell]) -> String {
    let mut out = String::from(
        "\n== mixed: one hipri job and one plain job, 4k randread at iodepth 1, one hardware queue ==\n\n\
         design      | job   | IOPS     | mean lat us | p99 us | CPU %\n",
    );
    for c in cells {
        out.push_str(&format!(
            "{:<11} | {:<5} | {:>8.0} | {:>11.1} | {:>6.0} | {:>5.0}\n",
            c.design,
            if c.hipri { "hipri" } else { "plain" },
            c.iops,
            c.lat_mean_us,
            c.lat_p99_us,
            c.cpu_pct
        ));
    }
    out.push_str(
        "(poll_queues: the hipri job has a poll queue of its own; hybrid: both share the queue, and the plain \
         job's completions are reaped by the poller while notifications are off)\n",
    );
    out
}
