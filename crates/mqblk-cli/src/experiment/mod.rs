//! `mqblk experiment NAME`: reproduces a source document's experiment end to
//! end: builds the devices, runs the jobs through the bench engine, prints
//! tables shaped like the source's, and writes NAME.json and NAME.svg into
//! a results folder. Every cell records the `mqblk bench` command that
//! produced it.

mod async_starvation;
mod loop_anchor;
mod plug_merge;
mod poll;
pub mod svg;
mod tag_wakeup;
mod zone_lock;

use std::path::PathBuf;

use crate::bench;

/// The experiments `mqblk experiment` knows.
pub const EXPERIMENTS: &[&str] = &["tag-wakeup", "plug-merge", "async-starvation", "poll", "zone-lock"];

#[derive(Debug)]
pub enum ExperimentError {
    BadInput(String),
    Failed(String),
}

/// Options common to every experiment (`mqblk experiment NAME [--quick]
/// [--out DIR]`).
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// The experiment to run.
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(EXPERIMENTS.iter().copied()))]
    pub name: String,
    /// Reduced matrix, short runs: under a minute (CI smoke runs).
    #[arg(long)]
    pub quick: bool,
    /// The results folder for NAME.json and NAME.svg.
    #[arg(long = "out", value_name = "DIR", default_value = "results")]
    pub out_dir: PathBuf,
}

/// One measured cell of an experiment.
#[derive(Debug, Clone)]
pub struct Cell {
    pub jobs: usize,
    pub policy: String,
    pub iodepth: usize,
    pub iops: f64,
    pub ctx_voluntary_per_sec: f64,
    pub ctx_per_sec: f64,
    pub ctx_voluntary_per_io: f64,
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
    let out = bench::run_plan(&plan).map_err(|e| ExperimentError::Failed(format!("{e:?}")))?;
    let e = out.entries.first().ok_or_else(|| ExperimentError::Failed("no job ran".into()))?;
    let secs = (e.run.elapsed_ns as f64 / 1e9).max(1e-9);
    let ios = e.total_ios().max(1) as f64;
    let spec = plan.device.clone().unwrap_or_default();
    let policy =
        spec.split(',').find_map(|kv| kv.strip_prefix("wake=")).unwrap_or(mqblk::Wake::default().name()).to_string();
    Ok(Cell {
        jobs: e.nr_jobs,
        policy,
        iodepth: e.opts.effective_iodepth(),
        iops: e.total_ios() as f64 / secs,
        ctx_voluntary_per_sec: e.run.rusage.voluntary_ctx as f64 / secs,
        ctx_per_sec: (e.run.rusage.voluntary_ctx + e.run.rusage.involuntary_ctx) as f64 / secs,
        ctx_voluntary_per_io: e.run.rusage.voluntary_ctx as f64 / ios,
        tag_waits: out.device.stats.tag_waits,
        bw_bytes_per_sec: (e.run.read.bytes + e.run.write.bytes) as f64 / secs,
        stats: out.device.stats,
        command: format!("mqblk bench {}", args.join(" ")),
    })
}

/// Runs the experiment: tables on stdout, NAME.json and NAME.svg in the
/// results folder.
pub fn run(opts: &Options) -> Result<String, ExperimentError> {
    let (doc, panels, table) = match opts.name.as_str() {
        "tag-wakeup" => tag_wakeup::run(opts)?,
        "plug-merge" => plug_merge::run(opts)?,
        "async-starvation" => async_starvation::run(opts)?,
        "poll" => poll::run(opts)?,
        "zone-lock" => zone_lock::run(opts)?,
        other => return Err(ExperimentError::BadInput(format!("unknown experiment '{other}'"))),
    };
    std::fs::create_dir_all(&opts.out_dir)
        .map_err(|e| ExperimentError::Failed(format!("cannot create {}: {e}", opts.out_dir.display())))?;
    let json_path = opts.out_dir.join(format!("{}.json", opts.name));
    let svg_path = opts.out_dir.join(format!("{}.svg", opts.name));
    let json = serde_json::to_string_pretty(&doc).expect("JSON encoding") + "\n";
    std::fs::write(&json_path, json).map_err(|e| ExperimentError::Failed(format!("{}: {e}", json_path.display())))?;
    std::fs::write(&svg_path, svg::chart(&panels, panels.len().clamp(1, 3)))
        .map_err(|e| ExperimentError::Failed(format!("{}: {e}", svg_path.display())))?;
    Ok(format!("{table}\nwrote {} and {}\n", json_path.display(), svg_path.display()))
}
