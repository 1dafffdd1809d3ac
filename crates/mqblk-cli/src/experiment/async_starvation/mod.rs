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
//! The source's kernel (4.15-rc, 2017) is modelled in its wakeup,
//! `wake=batch2017` (v4.13-era lib/sbitmap.c: one wait queue's waiters
//! woken per wake_batch frees), and in its request allocation: every
//! writeback request, like every read of the app, takes a scheduler tag in
//! blk_mq_get_tag, sleeping there per request when none is free. The
//! cause, made here: the writeback jobs (async writes, iodepth 32 each, 8
//! of them: 256 wanted for 64 tags) hold every scheduler tag; a read of the
//! app that finds none sleeps among them; bfq, favouring the app's
//! weight-raised queue, idles for the read that cannot come (slice_idle,
//! 8 ms) while the writes that would free tags wait in bfq.
//!
//! Rows: the idle device; the schedulers (none, mq-deadline, kyber); bfq
//! without its limits (the source's "before") and with them ("after");
//! the "before" without bfq's idling (slice_idle=0, isolating what the
//! idle slice adds to each tag wait); the pair against a storm of sync
//! writes (what the 75% limit is for); all with the 2017 wakeup. Then the
//! bfq pair with today's kernel wakeup (`wake=batch`) and with mqblk's own
//! (`wake=handoff`), labelled: handoff gives freed tags to sleepers in
//! order, so the app never barges past the writers and waits on every
//! read. Reports the start-up time (the app's run time) against the idle
//! device, its read latency (submission to completion, tag waits
//! included) and its tag waits, each the median and spread (min-max) of
//! the rounds, and below the table how much of the "before" time is tag
//! waits. Then (not in quick runs) how much of the headline is the device:
//! idle, before and after again with the device's service time halved and
//! doubled (`SCALES`). Last, the device's calibration (device.rs): the
//! drive's published figures, where each comes from, and what the model
//! predicts of each.

mod device;

use serde_json::{json, Value};

use super::plot::{Panel, Series};
use super::{ExperimentError, Options, Spread};
use crate::bench::report::Entry;
use device::{scaled_device, DEVICE, DEVICE_MODEL};

/// The sensitivity rows' scales of the device's service time: 0.5 is a
/// device twice as fast (half the per-request time, twice the bandwidth),
/// 2 one twice as slow.
const SCALES: &[f64] = &[0.5, 2.0];
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
    /// The wakeup policy (`wake=`).
    wake: &'static str,
}

/// The wakeup of the source's kernel (2017: v4.13-era lib/sbitmap.c, with
/// blk_mq_get_tag sleeping non-exclusively per request).
const SOURCE_WAKE: &str = "batch2017";

const fn case(label: &'static str, sched: &'static str, background: Background, wake: &'static str) -> Case {
    Case { label, sched, background, wake }
}

const BEFORE: &str = "bfq without limits (before)";
const AFTER: &str = "bfq (after)";

const CASES: &[Case] = &[
    case("idle", "none", Background::None, SOURCE_WAKE),
    case("none", "none", Background::AsyncWrites, SOURCE_WAKE),
    case("mq-deadline", "mq-deadline", Background::AsyncWrites, SOURCE_WAKE),
    case("kyber", "kyber", Background::AsyncWrites, SOURCE_WAKE),
    case(BEFORE, "bfq,limit_depths=0", Background::AsyncWrites, SOURCE_WAKE),
    case(AFTER, "bfq", Background::AsyncWrites, SOURCE_WAKE),
    // Isolates what bfq's idling adds to a tag wait: the same "before"
    // without the 8 ms idle slice.
    case("bfq without limits, slice_idle=0", "bfq,limit_depths=0,slice_idle=0", Background::AsyncWrites, SOURCE_WAKE),
    case("sync storm: bfq without limits", "bfq,limit_depths=0", Background::SyncWrites, SOURCE_WAKE),
    case("sync storm: bfq", "bfq", Background::SyncWrites, SOURCE_WAKE),
    // Other wakeups, labelled: today's kernel and mqblk's own.
    case("wake=batch (6.2+): bfq without limits", "bfq,limit_depths=0", Background::AsyncWrites, "batch"),
    case("wake=batch (6.2+): bfq", "bfq", Background::AsyncWrites, "batch"),
    case("wake=handoff (mqblk): bfq without limits", "bfq,limit_depths=0", Background::AsyncWrites, "handoff"),
    case("wake=handoff (mqblk): bfq", "bfq", Background::AsyncWrites, "handoff"),
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
        run_case(&CASES[i], DEVICE, &shape)
    })?;
    let rows: Vec<Row> = CASES.iter().zip(runs).map(|(case, runs)| row(case, DEVICE, &shape, &runs)).collect();
    let idle = rows[0].startup_s.median.max(1e-9);
    // Not in quick runs: three more cases per scale.
    let sensitivity = if opts.quick { Vec::new() } else { sensitivity(opts, &shape)? };
    let mut table = table(&rows, idle, &shape);
    table.push_str(&sensitivity_table(&sensitivity, &rows, idle));
    table.push_str(&device::calibration());
    let mut doc = document(opts, &rows, idle, &shape);
    doc["device_calibration"] = device::calibration_json();
    doc["sensitivity"] = sensitivity.iter().map(Scaled::json).collect::<Vec<_>>().into();
    Ok((doc, panels(&rows, idle), table))
}

/// The headline's three cases (idle, before, after) on the device with its
/// service time scaled.
struct Scaled {
    scale: f64,
    device: String,
    /// idle, before, after.
    rows: Vec<Row>,
}

impl Scaled {
    /// Start-up time of row `i` against this device's idle start-up.
    fn x_idle(&self, i: usize) -> f64 {
        self.rows[i].startup_s.median / self.rows[0].startup_s.median.max(1e-9)
    }

    fn json(&self) -> Value {
        json!({
            "scale": self.scale,
            "device": self.device,
            "idle_startup_s": self.rows[0].startup_s.json(),
            "before_startup_s": self.rows[1].startup_s.json(),
            "after_startup_s": self.rows[2].startup_s.json(),
            "before_vs_idle": self.x_idle(1),
            "after_vs_idle": self.x_idle(2),
            "commands": self.rows.iter().map(|r| r.command.clone()).collect::<Vec<_>>(),
        })
    }
}

/// How much of the headline is the device: idle, before and after again
/// at each of `SCALES`, alternating within each round.
fn sensitivity(opts: &Options, shape: &Shape) -> Result<Vec<Scaled>, ExperimentError> {
    let headline: Vec<&'static Case> = ["idle", BEFORE, AFTER]
        .iter()
        .map(|label| CASES.iter().find(|c| c.label == *label).expect("a headline case"))
        .collect();
    let mut out = Vec::new();
    for &scale in SCALES {
        let device = scaled_device(scale);
        let runs = super::alternate(headline.len(), opts.rounds, |i, round| {
            eprintln!("async-starvation: device x{scale}: {} (round {})", headline[i].label, round + 1);
            run_case(headline[i], &device, shape)
        })?;
        let rows = headline.iter().zip(runs).map(|(case, runs)| row(case, &device, shape, &runs)).collect();
        out.push(Scaled { scale, device, rows });
    }
    Ok(out)
}

/// The sensitivity rows beside the calibrated device's (scale 1).
fn sensitivity_table(scaled: &[Scaled], rows: &[Row], idle: f64) -> String {
    if scaled.is_empty() {
        return String::new();
    }
    let find = |label: &str| rows.iter().find(|r| r.case.label == label).map_or(0.0, |r| r.startup_s.median);
    let mut out = format!(
        "\nsensitivity to the device (the headline's cases with the service time scaled: per-request time x k, \
         bandwidth / k; wake={SOURCE_WAKE}): start-up s (x idle), medians\n\
         {:<5} | {:<72} | {:>8} | {:>17} | {:>15}\n",
        "k", "device", "idle", "before", "after"
    );
    let line = |k: &str, device: &str, idle: f64, before: f64, after: f64| {
        format!(
            "{k:<5} | {device:<72} | {idle:>8.3} | {before:>8.3} ({:>5.1}) | {after:>7.3} ({:>4.1})\n",
            before / idle.max(1e-9),
            after / idle.max(1e-9)
        )
    };
    out.push_str(&line("1", DEVICE, idle, find(BEFORE), find(AFTER)));
    for s in scaled {
        let m = |i: usize| s.rows[i].startup_s.median;
        out.push_str(&line(&s.scale.to_string(), &s.device, m(0), m(1), m(2)));
    }
    out
}

/// The source's start-up times against its idle 0.6 s, by case label.
const SOURCE_X_IDLE: &[(&str, f64)] = &[("idle", 1.0), (BEFORE, 45.0 / 0.6), (AFTER, 1.2 / 0.6)];

/// One panel of bars: start-up time against idle per case, the spread of
/// the rounds (each round's time over the idle median), and the source's
/// three figures beside ours.
fn panels(rows: &[Row], idle: f64) -> Vec<Panel> {
    let names: Vec<String> = rows.iter().map(|r| r.case.label.to_string()).collect();
    let ours: Vec<(f64, f64)> = rows.iter().enumerate().map(|(i, r)| (i as f64, r.startup_s.median / idle)).collect();
    let spread: Vec<(f64, f64)> = rows.iter().map(|r| (r.startup_s.min / idle, r.startup_s.max / idle)).collect();
    let source: Vec<(f64, f64)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| SOURCE_X_IDLE.iter().find(|(l, _)| *l == r.case.label).map(|(_, x)| (i as f64, *x)))
        .collect();
    vec![Panel::categories("application start-up time (x idle)", "x idle", names)
        .with(Series::measured(format!("ours (wake={SOURCE_WAKE} unless named), median"), ours).with_spread(spread))
        .with(Series::source("source (Linux 4.15-rc, PLEXTOR PX-256M5S)", source))]
}

fn run_case(case: &Case, device: &str, shape: &Shape) -> Result<Run, ExperimentError> {
    let (out, _) = super::run_args(&case_args(case, device, shape))?;
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
fn case_args(case: &Case, device: &str, shape: &Shape) -> Vec<String> {
    let device = format!("{device},wake={}", case.wake);
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

fn row(case: &'static Case, device: &str, shape: &Shape, runs: &[Run]) -> Row {
    Row {
        case,
        startup_s: Spread::over(runs, |r| r.startup_s),
        lat_p50_us: Spread::over(runs, |r| r.lat_p50_us),
        lat_p99_us: Spread::over(runs, |r| r.lat_p99_us),
        lat_max_us: Spread::over(runs, |r| r.lat_max_us),
        tag_waits: Spread::over(runs, |r| r.tag_waits),
        tag_wait_ms: Spread::over(runs, |r| r.tag_wait_ms),
        bg_write_mib_s: Spread::over(runs, |r| r.bg_write_mib_s),
        command: format!("mqblk bench {}", case_args(case, device, shape).join(" ")),
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
                "wake": r.case.wake,
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

/// The headline's magnitude taken apart: how much of the "before" start-up
/// time is the app sleeping for tags, how many of its reads did, and what
/// the start-up would be if every read had (the source's 45 s is 75 idle
/// start-ups: about one idle slice per read).
fn explain(rows: &[Row], idle: f64, shape: &Shape) -> String {
    let Some(before) = rows.iter().find(|r| r.case.label == BEFORE) else { return String::new() };
    let waits = before.tag_waits.median;
    let wait_s = before.tag_wait_ms.median / 1e3;
    let per_wait_ms = if waits > 0.0 { before.tag_wait_ms.median / waits } else { 0.0 };
    let all_wait = idle + shape.reads as f64 * per_wait_ms / 1e3;
    format!(
        "before (wake={SOURCE_WAKE}): {waits:.0} of {} reads slept for a tag, {per_wait_ms:.1} ms each ({wait_s:.2} s of \
         the {:.2} s start-up); had every read slept as long, the start-up would be {:.0}x idle. \
         slice_idle=0 removes bfq's idling from the same case.\n",
        shape.reads,
        before.startup_s.median,
        all_wait / idle.max(1e-9)
    )
}

fn table(rows: &[Row], idle: f64, shape: &Shape) -> String {
    let mut out = format!(
        "\n== async-starvation ({DEVICE_MODEL}; {} writers; app: {} random 4k reads at iodepth 1) ==\n\
         {LIMITS}\n\
         cells: median (min-max) over the rounds\n\n\
         {:<41} | {:>22} | {:>6} | {:>19} | {:>22} | {:>22} | {:>16} | {:>19} | writeback MiB/s\n",
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
            "{:<41} | {:>22} | {:>6.1} | {:>19} | {:>22} | {:>22} | {:>16} | {:>19} | {}\n",
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
    out.push_str(&explain(rows, idle, shape));
    out
}
