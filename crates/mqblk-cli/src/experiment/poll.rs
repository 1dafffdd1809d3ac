//! `mqblk experiment poll` (seed 002): sync I/O at queue depth 1 per job
//! (one job per core), interrupt-style completion (a completion thread
//! completes the request and wakes the waiting job) against polled
//! completion (hipri: the job reaps its own request from a poll queue),
//! over rw x block size. Reports IOPS, the gain of polling, mean and p99
//! latency and the CPU it costs, like the source's table.
//!
//! Only the merged kernel design (dedicated poll queues) is measured: the
//! RFC's hybrid toggling on shared queues is not built yet.

use serde_json::{json, Value};

use super::svg::{Panel, Series};
use super::{ExperimentError, Options};

/// Memory-backed, 10 us per request (timer completion) and 2000 MiB/s of
/// transfer for the whole device (so a 128k request spends most of its
/// time in the device, as on the source's disk), one poll queue per default
/// queue.
const DEVICE: &str =
    "null:gb=4,irqmode=2,completion_nsec=10000,mbps=2000,memory_backed=1,poll_queues=2,submit_queues=2";

struct Cell {
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
    let mut cells = Vec::new();
    for &rw in rws {
        for &bs in bss {
            for hipri in [false, true] {
                let mut args: Vec<String> = vec!["--device".into(), DEVICE.into()];
                args.extend(
                    ["--name=poll", "--ioengine=pvsync2", "--iodepth=1", "--time_based", "--group_reporting"]
                        .map(String::from),
                );
                args.push(format!("--rw={rw}"));
                args.push(format!("--bs={bs}"));
                args.push(format!("--numjobs={jobs}"));
                args.push(format!("--runtime={runtime}"));
                args.push(format!("--hipri={}", u8::from(hipri)));
                eprintln!("poll: {rw} bs={bs} hipri={}", u8::from(hipri));
                let (out, command) = super::run_args(&args)?;
                let e = out.entries.first().ok_or_else(|| ExperimentError::Failed("no job ran".into()))?;
                let d = if rw.contains("read") { &e.run.read } else { &e.run.write };
                let cpu_base = (e.run.elapsed_ns as f64 * e.nr_jobs as f64).max(1.0);
                cells.push(Cell {
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
    let table = table(&cells, jobs);
    let results: Vec<Value> = cells
        .iter()
        .map(|c| {
            json!({
                "rw": c.rw, "bs": c.bs, "hipri": c.hipri, "design": "poll_queues",
                "iops": c.iops, "lat_mean_us": c.lat_mean_us, "lat_p99_us": c.lat_p99_us,
                "cpu_pct_per_job": c.cpu_pct, "command": c.command,
            })
        })
        .collect();
    let doc = json!({
        "experiment": "poll",
        "source": "seed 002: virtio_blk: implement blk_mq_ops->poll() (2021): 4k randread QD1 x 4 jobs \
                   149,426 vs 170,763 IOPS (+14%), randwrite +18%, 64k and 128k about 0%",
        "quick": opts.quick,
        "device": DEVICE,
        "jobs": jobs,
        "designs_measured": ["poll_queues"],
        "designs_not_built": ["hybrid (toggling notifications on shared queues)"],
        "results": results,
    });
    let panels = rws
        .iter()
        .map(|rw| Panel {
            title: format!("poll: {rw}, gain of hipri (%)"),
            x_label: "block size (KiB)".into(),
            y_label: "IOPS gain %".into(),
            series: vec![Series {
                label: "poll queues".into(),
                points: bss.iter().filter_map(|bs| gain(&cells, rw, bs).map(|g| (kib(bs), g))).collect(),
            }],
        })
        .collect();
    Ok((doc, panels, table))
}

fn kib(bs: &str) -> f64 {
    bs.trim_end_matches('k').parse().unwrap_or(0.0)
}

fn pick<'a>(cells: &'a [Cell], rw: &str, bs: &str, hipri: bool) -> Option<&'a Cell> {
    cells.iter().find(|c| c.rw == rw && c.bs == bs && c.hipri == hipri)
}

fn gain(cells: &[Cell], rw: &str, bs: &str) -> Option<f64> {
    let (irq, poll) = (pick(cells, rw, bs, false)?, pick(cells, rw, bs, true)?);
    Some((poll.iops / irq.iops.max(1.0) - 1.0) * 100.0)
}

fn table(cells: &[Cell], jobs: usize) -> String {
    let mut out = format!(
        "\n== poll ({DEVICE}; {jobs} jobs at iodepth 1) ==\n\n\
         rw        | bs   | IOPS hipri=0 | IOPS hipri=1 | gain   | mean lat us 0 / 1 | p99 us 0 / 1  | CPU % 0 / 1\n"
    );
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for c in cells {
        if seen.contains(&(c.rw, c.bs)) {
            continue;
        }
        seen.push((c.rw, c.bs));
        let (Some(a), Some(b)) = (pick(cells, c.rw, c.bs, false), pick(cells, c.rw, c.bs, true)) else { continue };
        out.push_str(&format!(
            "{:<9} | {:<4} | {:>12.0} | {:>12.0} | {:>+5.1}% | {:>7.1} / {:<7.1} | {:>5.0} / {:<5.0} | {:>3.0} / {:<3.0}\n",
            c.rw,
            c.bs,
            a.iops,
            b.iops,
            gain(cells, c.rw, c.bs).unwrap_or(0.0),
            a.lat_mean_us,
            b.lat_mean_us,
            a.lat_p99_us,
            b.lat_p99_us,
            a.cpu_pct,
            b.cpu_pct
        ));
    }
    out.push_str("\nsource: 4k randread +14%, randwrite +18%, 64k and 128k about 0% (hybrid toggling not built yet)\n");
    out
}
