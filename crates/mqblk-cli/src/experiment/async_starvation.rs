//! `mqblk experiment async-starvation` ("bfq: limit tags for writes and
//! async I/O", 2017): background jobs flood the device with writes; an
//! "application start" then reads K small blocks, one at a time. The cause
//! the patch removed: without depth limits the writes hold every
//! scheduler tag, so each of the app's reads first sleeps for a tag behind
//! them, however bfq would then prioritise it. With the limits async writes
//! may hold 50% of the tags and sync writes 75% (3/16 and 6/16 while a
//! queue is weight-raised, as the starting app's is), so a read always
//! finds one.
//!
//! Rows: the idle device; the schedulers (none, mq-deadline, kyber); bfq
//! without its limits (the source's "before") and with them ("after");
//! the same two against a storm of sync writes (what the 75% limit is
//! for); and the bfq pair once more with the kernel's batched wakeup
//! (`wake=batch`), so the tag waits are not an artefact of mqblk's own
//! wakeup policy. Reports the start-up time (the app's run time) against
//! the idle device, its read latency (submission to completion, tag waits
//! included) and its tag waits, each the median and spread of the rounds.

use serde_json::{json, Value};

use super::plot::{Origin, Panel, Series, XAxis};
use super::{ExperimentError, Options, Spread};
use crate::bench::report::Entry;

/// An SSD-like device: 4 channels, 200 us per request + 200 MiB/s each,
/// 32 driver tags (so nr_requests = 64 scheduler tags).
const DEVICE: &str = "null:gb=64,irqmode=2,channels=4,completion_nsec=200000,mbps=200,hw_queue_depth=32";
const DEVICE_MODEL: &str = "4 channels x (200 us + 200 MiB/s) per request, 32 driver tags, 64 scheduler tags";
/// bfq's limits on this device (nr_requests 64), as sched/bfq.rs computes
/// them.
const LIMITS: &str = "bfq's depth limits of 64 scheduler tags: async writes 32 (50%), sync writes 48 (75%); \
                      while a queue is weight-raised (the starting app's is, for wr_max_time) 12 (3/16) and 24 (6/16); \
                      sync reads unlimited";

/// What floods the device while the app starts.
#[derive(Clone, Copy, PartialEq)]
enum Background {
    None,
    /// Buffered writeback: async writes.
    AsyncWrites,
    /// O_DIRECT-style writers: sync writes.
    SyncWrites,
}

struct Case {
    label: &'static str,
    sched: &'static str,
    background: Background,
    /// Wake policy override (None: the library's default).
    wake: Option<&'static str>,
}

const CASES: &[Case] = &[
    Case { label: "idle", sched: "none", background: Background::None, wake: None },
    Case { label: "none", sched: "none", background: Background::AsyncWrites, wake: None },
    Case { label: "mq-deadline", sched: "mq-deadline", background: Background::AsyncWrites, wake: None },
    Case { label: "kyber", sched: "kyber", background: Background::AsyncWrites, wake: None },
    Case {
        label: "bfq without limits (before)",
        sched: "bfq,limit_depths=0",
        background: Background::AsyncWrites,
        wake: None,
    },
    Case { label: "bfq (after)", sched: "bfq", background: Background::AsyncWrites, wake: None },
    Case {
        label: "sync storm: bfq without limits",
        sched: "bfq,limit_depths=0",
        background: Background::SyncWrites,
        wake: None,
    },
    Case { label: "sync storm: bfq", sched: "bfq", background: Background::SyncWrites, wake: None },
    Case {
        label: "wake=batch: bfq without limits",
        sched: "bfq,limit_depths=0",
        background: Background::AsyncWrites,
        wake: Some("batch"),
    },
    Case { label: "wake=batch: bfq", sched: "bfq", background: Background::AsyncWrites, wake: Some("batch") },
];

/// One round of one case.
struct Run {
    startup_s: f64,
    lat_p50_us: f64,
    lat_p99_us: f64,
    lat_max_us: f64,
    tag_waits: f64,
    tag_wait_ms: f64,
    bg_write_mib_s: f64,
}

/// A case over its rounds.
struct Row {
    case: &'static Case,
    startup_s: Spread,
    lat_p50_us: Spread,
    lat_p99_us: Spread,
    lat_max_us: Spread,
    tag_waits: Spread,
    tag_wait_ms: Spread,
    bg_write_mib_s: Spread,
    command: String,
}

struct Shape {
    reads: u64,
    delay: &'static str,
    writers: usize,
}

pub fn run(opts: &Options) -> Result<(Value, Vec<Panel>, String), ExperimentError> {
    let shape = if opts.quick {
        Shape { reads: 60, delay: "300ms", writers: 8 }
    } else {
        Shape { reads: 200, delay: "1", writers: 8 }
    };
    let runs = super::alternate(CASES.len(), opts.rounds, |i, round| {
        eprintln!("async-starvation: {} (round {})", CASES[i].label, round + 1);
        run_case(&CASES[i], &shape)
    })?;
    let rows: Vec<Row> = CASES.iter().zip(runs).map(|(case, runs)| row(case, &shape, &runs)).collect();
    let idle = rows[0].startup_s.median.max(1e-9);
    let table = table(&rows, idle, &shape);
    let doc = document(opts, &rows, idle, &shape);
    let panels = vec![Panel {
        title: "async-starvation: start-up time / idle (median)".into(),
        x_label: "case (table order)".into(),
        y_label: "x idle".into(),
        x: XAxis::Numeric { oversubscribed_from: None },
        series: vec![Series {
            spread: Vec::new(),
            origin: Origin::Measured,
            label: "start-up".into(),
            points: rows.iter().enumerate().map(|(i, r)| ((i + 1) as f64, r.startup_s.median / idle)).collect(),
        }],
    }];
    Ok((doc, panels, table))
}

fn run_case(case: &Case, shape: &Shape) -> Result<Run, ExperimentError> {
    let (out, _) = super::run_args(&case_args(case, shape))?;
    let app = out
        .entries
        .iter()
        .find(|e| e.opts.name == "app")
        .ok_or_else(|| ExperimentError::Failed("the app job did not report".into()))?;
    let writers = out.entries.iter().filter(|e| e.opts.name == "writeback");
    let bg_bytes: u64 = writers.clone().map(|e| e.run.write.bytes).sum();
    let bg_ns = writers.map(|e| e.run.elapsed_ns).max().unwrap_or(0);
    Ok(measure(app, bg_bytes, bg_ns))
}

/// One case's bench arguments: `writers` writeback jobs from the start
/// (unless idle); then the app's reads after `delay`, ending the run.
fn case_args(case: &Case, shape: &Shape) -> Vec<String> {
    let device = match case.wake {
        Some(wake) => format!("{DEVICE},wake={wake}"),
        None => DEVICE.to_string(),
    };
    let mut args = vec!["--device".to_string(), device, format!("--sched={}", case.sched)];
    if case.background != Background::None {
        args.extend(
            ["--name=writeback", "--rw=write", "--bs=64k", "--iodepth=32", "--runtime=120", "--time_based"]
                .map(String::from),
        );
        if case.background == Background::AsyncWrites {
            args.push("--mqblk_async=1".into());
        }
        args.push(format!("--numjobs={}", shape.writers));
    }
    args.extend(
        ["--name=app", "--rw=randread", "--bs=4k", "--iodepth=1", "--exitall", "--lat_percentiles=1"].map(String::from),
    );
    args.push(format!("--number_ios={}", shape.reads));
    args.push(format!("--startdelay={}", shape.delay));
    args
}

fn measure(app: &Entry, bg_bytes: u64, bg_ns: u64) -> Run {
    let r = &app.run.read;
    let secs_bg = (bg_ns as f64 / 1e9).max(1e-9);
    Run {
        startup_s: app.run.elapsed_ns as f64 / 1e9,
        lat_p50_us: r.lat_percentile(50.0) as f64 / 1e3,
        lat_p99_us: r.lat_percentile(99.0) as f64 / 1e3,
        lat_max_us: r.lat.max as f64 / 1e3,
        tag_waits: app.run.client.tag_waits as f64,
        tag_wait_ms: app.run.client.tag_wait_ns as f64 / 1e6,
        bg_write_mib_s: bg_bytes as f64 / (1 << 20) as f64 / secs_bg,
    }
}

fn row(case: &'static Case, shape: &Shape, runs: &[Run]) -> Row {
    Row {
        case,
        startup_s: Spread::over(runs, |r| r.startup_s),
        lat_p50_us: Spread::over(runs, |r| r.lat_p50_us),
        lat_p99_us: Spread::over(runs, |r| r.lat_p99_us),
        lat_max_us: Spread::over(runs, |r| r.lat_max_us),
        tag_waits: Spread::over(runs, |r| r.tag_waits),
        tag_wait_ms: Spread::over(runs, |r| r.tag_wait_ms),
        bg_write_mib_s: Spread::over(runs, |r| r.bg_write_mib_s),
        command: format!("mqblk bench {}", case_args(case, shape).join(" ")),
    }
}

/// The JSON document: the source's figures, the device, every case.
fn document(opts: &Options, rows: &[Row], idle: f64, shape: &Shape) -> Value {
    let results: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "case": r.case.label,
                "scheduler": r.case.sched,
                "background": match r.case.background {
                    Background::None => "none",
                    Background::AsyncWrites => "async writes",
                    Background::SyncWrites => "sync writes",
                },
                "wake": r.case.wake.unwrap_or(mqblk::Wake::default().name()),
                "startup_s": r.startup_s.json(),
                "startup_vs_idle": r.startup_s.median / idle,
                "read_lat_p50_us": r.lat_p50_us.json(),
                "read_lat_p99_us": r.lat_p99_us.json(),
                "read_lat_max_us": r.lat_max_us.json(),
                "app_tag_waits": r.tag_waits.json(),
                "app_tag_wait_ms": r.tag_wait_ms.json(),
                "background_write_mib_s": r.bg_write_mib_s.json(),
                "command": r.command,
            })
        })
        .collect();
    json!({
        "experiment": "async-starvation",
        "source": "bfq: limit tags for writes and async I/O (Paolo Valente, 2017): application start 0.6 s idle, \
                   45 s with background writes before the patch (bfq without the limits), 1.2 s after",
        "quick": opts.quick,
        "device": DEVICE,
        "device_model": DEVICE_MODEL,
        "depth_limits": LIMITS,
        "job": format!("{} writeback jobs (64k sequential writes, iodepth 32; async unless the row says sync) from the \
                        start; after {} s the app reads {} random 4k blocks at iodepth 1; the run ends when it is done",
                        shape.writers, shape.delay, shape.reads),
        "results": results,
    })
}

fn table(rows: &[Row], idle: f64, shape: &Shape) -> String {
    let mut out = format!(
        "\n== async-starvation ({DEVICE_MODEL}; {} writers; app: {} random 4k reads at iodepth 1) ==\n\
         {LIMITS}\n\
         cells: median (min-max) over the rounds\n\n\
         {:<31} | {:>22} | {:>6} | {:>19} | {:>22} | {:>22} | {:>16} | {:>19} | writeback MiB/s\n",
        shape.writers,
        shape.reads,
        "case",
        "start-up s",
        "x idle",
        "read p50 us",
        "read p99 us",
        "read max us",
        "app tag waits",
        "app tag-wait ms",
    );
    for r in rows {
        out.push_str(&format!(
            "{:<31} | {:>22} | {:>6.1} | {:>19} | {:>22} | {:>22} | {:>16} | {:>19} | {}\n",
            r.case.label,
            r.startup_s.show(3),
            r.startup_s.median / idle,
            r.lat_p50_us.show(0),
            r.lat_p99_us.show(0),
            r.lat_max_us.show(0),
            r.tag_waits.show(0),
            r.tag_wait_ms.show(1),
            r.bg_write_mib_s.show(0),
        ));
    }
    out.push_str(
        "\nsource: idle 0.6 s; background writes 45 s before the patch (bfq without the limits: 75x), \
         1.2 s after (2x)\n",
    );
    out
}
