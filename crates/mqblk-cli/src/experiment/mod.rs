//! `mqblk experiment NAME`: reproduces a source document's experiment end to
//! end: builds the devices, runs the jobs through the bench engine, prints
//! tables shaped like the source's, and writes NAME.json and NAME.svg into
//! a results folder (NAME.png beside the SVG, so plots show on a repository
//! page). Every cell records the `mqblk bench` command that produced it.
//!
//! Every cell runs `--rounds` times (3 by default), the compared variants
//! alternating within each round and the order reversed every other round
//! (so a drift of the machine over a run falls on every variant alike);
//! tables print the median and the spread (min-max) over the rounds.

mod async_starvation;
mod loop_anchor;
pub mod plot;
mod plug_merge;
mod poll;
mod provenance;
mod spread;
mod tag_wakeup;
mod zone_lock;

use std::path::PathBuf;

use crate::bench;
pub use spread::{alternate, Spread};

/// The experiments `mqblk experiment` knows.
pub const EXPERIMENTS: &[&str] = &["tag-wakeup", "plug-merge", "async-starvation", "poll", "zone-lock"];

/// The experiment names the command line accepts: every experiment and
/// `all`, which runs them one after another.
const NAMES: &[&str] = &["tag-wakeup", "plug-merge", "async-starvation", "poll", "zone-lock", "all"];

#[derive(Debug)]
pub enum ExperimentError {
    BadInput(String),
    Failed(String),
}

/// Options common to every experiment (`mqblk experiment NAME [--quick]
/// [--out DIR]`).
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// The experiment to run (`all`: every one, in order).
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(NAMES.iter().copied()))]
    pub name: String,
    /// Reduced matrix, short runs: a minute or two each, tag-wakeup about three (CI smoke runs).
    #[arg(long)]
    pub quick: bool,
    /// The results folder for NAME.json and NAME.svg.
    #[arg(long = "out", value_name = "DIR", default_value = "results")]
    pub out_dir: PathBuf,
    /// Runs of every cell (median and spread are reported over them).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Runs nothing: draws NAME.svg and NAME.png into the results folder
    /// again from a NAME.json the experiment wrote (tag-wakeup only).
    #[arg(long, value_name = "JSON")]
    pub replot: Option<PathBuf>,
}

/// One measured cell of an experiment.
#[derive(Debug, Clone)]
pub struct Cell {
    pub jobs: usize,
    pub iodepth: usize,
    pub iops: f64,
    pub ctx_voluntary_per_sec: f64,
    pub ctx_per_sec: f64,
    pub ctx_voluntary_per_io: f64,
    /// The whole system's context switches (every CPU, every task: the
    /// kernel's `ctxt` in /proc/stat) over the run, per second of it and
    /// per I/O: what a figure taken with `vmstat` or `sar -w` counts.
    pub ctx_system_per_sec: f64,
    pub ctx_system_per_io: f64,
    pub tag_waits: u64,
    /// Bytes per second over all directions.
    pub bw_bytes_per_sec: f64,
    /// The device's block-layer counters after the run.
    pub stats: mqblk::DeviceStats,
    pub command: String,
}

/// Runs one `mqblk bench` argument list; returns its output and the
/// command line that reproduces it.
pub fn run_args(args: &[String]) -> Result<(bench::RunOutput, String), ExperimentError> {
    let plan = bench::options::parse_bench_args(args).map_err(|e| ExperimentError::BadInput(e.to_string()))?;
    let out = bench::run_plan(&plan).map_err(|e| ExperimentError::Failed(format!("{e:?}")))?;
    Ok((out, format!("mqblk bench {}", args.join(" "))))
}

/// Runs one `mqblk bench` argument list (group_reporting: one entry).
pub fn run_cell(args: &[String]) -> Result<Cell, ExperimentError> {
    let plan = bench::options::parse_bench_args(args).map_err(|e| ExperimentError::BadInput(e.to_string()))?;
    let (system_ctxt, started) = (system_context_switches()?, std::time::Instant::now());
    let out = bench::run_plan(&plan).map_err(|e| ExperimentError::Failed(format!("{e:?}")))?;
    // Over the whole of run_plan (the device's set-up and teardown too,
    // a few ms against the run's second or more).
    let system_ctxt = system_context_switches()?.saturating_sub(system_ctxt) as f64;
    let system_secs = started.elapsed().as_secs_f64().max(1e-9);
    let e = out.entries.first().ok_or_else(|| ExperimentError::Failed("no job ran".into()))?;
    let secs = (e.run.elapsed_ns as f64 / 1e9).max(1e-9);
    let ios = e.total_ios().max(1) as f64;
    Ok(Cell {
        jobs: e.nr_jobs,
        iodepth: e.opts.effective_iodepth(),
        iops: e.total_ios() as f64 / secs,
        ctx_voluntary_per_sec: e.run.rusage.voluntary_ctx as f64 / secs,
        ctx_per_sec: (e.run.rusage.voluntary_ctx + e.run.rusage.involuntary_ctx) as f64 / secs,
        ctx_voluntary_per_io: e.run.rusage.voluntary_ctx as f64 / ios,
        ctx_system_per_sec: system_ctxt / system_secs,
        ctx_system_per_io: system_ctxt / ios,
        tag_waits: out.device.stats.tag_waits,
        bw_bytes_per_sec: (e.run.read.bytes + e.run.write.bytes) as f64 / secs,
        stats: out.device.stats,
        command: format!("mqblk bench {}", args.join(" ")),
    })
}

/// The context switches of the whole system since boot: /proc/stat's
/// `ctxt` line.
fn system_context_switches() -> Result<u64, ExperimentError> {
    let stat =
        std::fs::read_to_string("/proc/stat").map_err(|e| ExperimentError::Failed(format!("/proc/stat: {e}")))?;
    stat.lines()
        .find_map(|l| l.strip_prefix("ctxt ").and_then(|n| n.trim().parse().ok()))
        .ok_or_else(|| ExperimentError::Failed("/proc/stat has no ctxt line".into()))
}

/// Runs the experiment (or `all` of them): tables on stdout, NAME.json,
/// NAME.txt (the tables), NAME.svg and NAME.png in the results folder.
pub fn run(opts: &Options) -> Result<String, ExperimentError> {
    if opts.name != "all" {
        return run_one(opts);
    }
    let mut out = String::new();
    for name in EXPERIMENTS {
        let started = std::time::Instant::now();
        let one = Options { name: name.to_string(), ..opts.clone() };
        out.push_str(&run_one(&one)?);
        out.push_str(&format!("({name}: {:.0} s)\n", started.elapsed().as_secs_f64()));
    }
    Ok(out)
}

/// Draws NAME.svg and NAME.png again from `json_path`, running nothing.
fn replot(opts: &Options, json_path: &std::path::Path) -> Result<String, ExperimentError> {
    let text = std::fs::read_to_string(json_path)
        .map_err(|e| ExperimentError::BadInput(format!("{}: {e}", json_path.display())))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| ExperimentError::BadInput(format!("{}: {e}", json_path.display())))?;
    if doc["experiment"] != opts.name.as_str() {
        return Err(ExperimentError::BadInput(format!(
            "{} holds experiment {}, not {}",
            json_path.display(),
            doc["experiment"],
            opts.name
        )));
    }
    let panels = match opts.name.as_str() {
        "tag-wakeup" => tag_wakeup::plot::panels(&doc),
        other => return Err(ExperimentError::BadInput(format!("--replot draws tag-wakeup only, not {other}"))),
    };
    std::fs::create_dir_all(&opts.out_dir)
        .map_err(|e| ExperimentError::Failed(format!("cannot create {}: {e}", opts.out_dir.display())))?;
    let (svg, png) = (opts.out_dir.join(format!("{}.svg", opts.name)), opts.out_dir.join(format!("{}.png", opts.name)));
    plot::write_chart(&panels, panels.len().clamp(1, 3), &svg, &png).map_err(ExperimentError::Failed)?;
    Ok(format!("drew {} and {} from {}\n", svg.display(), png.display(), json_path.display()))
}

fn run_one(opts: &Options) -> Result<String, ExperimentError> {
    if let Some(json_path) = &opts.replot {
        return replot(opts, json_path);
    }
    let started = provenance::Start::now();
    let (mut doc, panels, table) = match opts.name.as_str() {
        "tag-wakeup" => tag_wakeup::run(opts)?,
        "plug-merge" => plug_merge::run(opts)?,
        "async-starvation" => async_starvation::run(opts)?,
        "poll" => poll::run(opts)?,
        "zone-lock" => zone_lock::run(opts)?,
        other => return Err(ExperimentError::BadInput(format!("unknown experiment '{other}'"))),
    };
    if let Some(map) = doc.as_object_mut() {
        map.insert("rounds".into(), opts.rounds.into());
        map.insert("provenance".into(), started.finish());
        map.insert("table".into(), table.clone().into());
    }
    std::fs::create_dir_all(&opts.out_dir)
        .map_err(|e| ExperimentError::Failed(format!("cannot create {}: {e}", opts.out_dir.display())))?;
    let path = |ext: &str| opts.out_dir.join(format!("{}.{ext}", opts.name));
    let (json_path, svg_path, png_path, txt_path) = (path("json"), path("svg"), path("png"), path("txt"));
    let json = serde_json::to_string_pretty(&doc).expect("JSON encoding") + "\n";
    std::fs::write(&json_path, json).map_err(|e| ExperimentError::Failed(format!("{}: {e}", json_path.display())))?;
    std::fs::write(&txt_path, &table).map_err(|e| ExperimentError::Failed(format!("{}: {e}", txt_path.display())))?;
    plot::write_chart(&panels, panels.len().clamp(1, 3), &svg_path, &png_path).map_err(ExperimentError::Failed)?;
    Ok(format!(
        "{table}\nwrote {}, {}, {} and {}\n",
        json_path.display(),
        txt_path.display(),
        svg_path.display(),
        png_path.display()
    ))
}
