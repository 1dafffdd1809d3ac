//! `mqblk experiment async-starvation` (seed 003): background jobs flood
//! the device with async writes; an "application start" then reads K small
//! blocks, one at a time. Without depth limits the writes take every tag
//! and each read waits behind them; bfq's limits keep tags for sync reads
//! and its weight raising serves the starting application first. Reports
//! the start-up time (the reading job's run time) against the idle device,
//! and its read latency (submission to completion, tag waits included).

use serde_json::{json, Value};

use super::svg::{Panel, Series};
use super::{ExperimentError, Options};
use crate::bench::report::Entry;

/// An SSD-like device: 4 channels, 200 us per request + 200 MiB/s each,
/// 32 driver tags (so nr_requests = 64 scheduler tags).
const DEVICE: &str = "null:gb=64,irqmode=2,channels=4,completion_nsec=200000,mbps=200,hw_queue_depth=32";
const DEVICE_MODEL: &str = "4 channels x (200 us + 200 MiB/s) per request, 32 driver tags, 64 scheduler tags";

/// (label, `--sched` value; None: idle, no background).
const CASES: &[(&str, Option<&str>)] = &[
    ("idle", None),
    ("none", Some("none")),
    ("mq-deadline", Some("mq-deadline")),
    ("kyber", Some("kyber")),
    ("bfq without limits", Some("bfq,limit_depths=0")),
    ("bfq", Some("bfq")),
];

struct Cell {
    label: &'static str,
    startup_s: f64,
    lat_p50_us: f64,
    lat_p99_us: f64,
    lat_max_us: f64,
    bg_write_mib_s: f64,
    command: String,
}

pub fn run(opts: &Options) -> Result<(Value, Vec<Panel>, String), ExperimentError> {
    let (reads, delay, writers) = if opts.quick { (50, "300ms", 4) } else { (200, "1", 8) };
    let mut cells = Vec::new();
    for &(label, sched) in CASES {
        let args = case_args(sched, reads, delay, writers);
        eprintln!("async-starvation: {label}");
        let (out, command) = super::run_args(&args)?;
        let app = out
            .entries
            .iter()
            .find(|e| e.opts.name == "app")
            .ok_or_else(|| ExperimentError::Failed("the app job did not report".into()))?;
        let writers_done = out.entries.iter().filter(|e| e.opts.name == "writeback");
        let bg_bytes: u64 = writers_done.clone().map(|e| e.run.write.bytes).sum();
        let bg_ns = writers_done.map(|e| e.run.elapsed_ns).max().unwrap_or(0);
        cells.push(cell(label, app, bg_bytes, bg_ns, command));
    }
    let idle = cells[0].startup_s.max(1e-9);
    let table = table(&cells, idle, reads);
    let doc = document(opts, &cells, idle, (reads, delay, writers));
    let panels = vec![Panel {
        title: "async-starvation: start-up time / idle".into(),
        x_label: "case (1 idle, 2 none, 3 mq-deadline, 4 kyber, 5 bfq no limits, 6 bfq)".into(),
        y_label: "x idle".into(),
        series: vec![Series {
            label: "start-up".into(),
            points: cells.iter().enumerate().map(|(i, c)| ((i + 1) as f64, c.startup_s / idle)).collect(),
        }],
    }];
    Ok((doc, panels, table))
}

/// One case's bench arguments: with a scheduler, `writers` writeback jobs
/// from the start; then the app's reads after `delay`, ending the run.
fn case_args(sched: Option<&str>, reads: u64, delay: &str, writers: usize) -> Vec<String> {
    let mut args = vec!["--device".to_string(), DEVICE.to_string()];
    if let Some(sched) = sched {
        args.push(format!("--sched={sched}"));
        args.extend(
            [
                "--name=writeback",
                "--rw=write",
                "--bs=64k",
                "--iodepth=32",
                "--mqblk_async=1",
                "--runtime=120",
                "--time_based",
            ]
            .map(String::from),
        );
        args.push(format!("--numjobs={writers}"));
    }
    args.extend(["--name=app", "--rw=randread", "--bs=4k", "--iodepth=1", "--exitall"].map(String::from));
    args.push(format!("--number_ios={reads}"));
    args.push(format!("--startdelay={delay}"));
    args
}

/// The JSON document: the source's figures, the device, every case.
fn document(opts: &Options, cells: &[Cell], idle: f64, (reads, delay, writers): (u64, &str, usize)) -> Value {
    let results: Vec<Value> = cells
        .iter()
        .map(|c| {
            json!({
                "case": c.label,
                "startup_s": c.startup_s,
                "startup_vs_idle": c.startup_s / idle,
                "read_lat_p50_us": c.lat_p50_us,
                "read_lat_p99_us": c.lat_p99_us,
                "read_lat_max_us": c.lat_max_us,
                "background_write_mib_s": c.bg_write_mib_s,
                "command": c.command,
            })
        })
        .collect();
    json!({
        "experiment": "async-starvation",
        "source": "seed 003: bfq: limit tags for writes and async I/O (2017): application start 0.6 s idle, \
                   45 s with background writes before the patch, 1.2 s after",
        "quick": opts.quick,
        "device": DEVICE,
        "device_model": DEVICE_MODEL,
        "job": format!("{writers} writeback jobs (64k sequential async writes, iodepth 32) from the start; \
                        after {delay} s the app reads {reads} random 4k blocks at iodepth 1; the run ends when it is done"),
        "results": results,
    })
}

fn cell(label: &'static str, app: &Entry, bg_bytes: u64, bg_ns: u64, command: String) -> Cell {
    let r = &app.run.read;
    let secs_bg = (bg_ns as f64 / 1e9).max(1e-9);
    Cell {
        label,
        startup_s: app.run.elapsed_ns as f64 / 1e9,
        lat_p50_us: r.lat_percentile(50.0) as f64 / 1e3,
        lat_p99_us: r.lat_percentile(99.0) as f64 / 1e3,
        lat_max_us: r.lat.max as f64 / 1e3,
        bg_write_mib_s: bg_bytes as f64 / (1 << 20) as f64 / secs_bg,
        command,
    }
}

fn table(cells: &[Cell], idle: f64, reads: u64) -> String {
    let mut out = format!(
        "\n== async-starvation ({DEVICE_MODEL}; app: {reads} random 4k reads at iodepth 1) ==\n\n\
         case               | start-up s | x idle | read lat p50 us | p99 us | max us | writeback MiB/s\n"
    );
    for c in cells {
        out.push_str(&format!(
            "{:<18} | {:>10.3} | {:>6.1} | {:>15.0} | {:>6.0} | {:>6.0} | {:>8.1}\n",
            c.label,
            c.startup_s,
            c.startup_s / idle,
            c.lat_p50_us,
            c.lat_p99_us,
            c.lat_max_us,
            c.bg_write_mib_s
        ));
    }
    out.push_str("\nsource: idle 0.6 s; background writes 45 s before the patch (75x), 1.2 s after (2x)\n");
    out
}
