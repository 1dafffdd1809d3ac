//! `mqblk bench`: a fio-compatible benchmark over an mqblk device.
//!
//! Each job (times `numjobs`) runs on its own thread with its own client;
//! the main thread keeps time (ramp, runtime), samples bandwidth every
//! 500 ms, draws the progress bar on a terminal, and writes the report.

mod blktrace_input;
mod blocksize;
mod buffers;
mod cmdprio;
pub mod cpus;
mod distribution;
mod errors;
mod files;
mod flow;
mod iolog;
pub mod job;
mod job_setup;
mod lat_bins;
mod latency;
mod log;
mod numa;
pub mod options;
mod order;
mod output;
mod parse;
mod pattern;
mod percent;
mod placement;
mod replay;
pub mod report;
mod rw;
mod setter;
mod shape;
mod start;
pub mod stats;
mod steadystate;
mod supervise;
pub mod thread_cpu;
mod trim;
pub mod values;
pub mod verify;
mod zbd;
mod zones;

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mqblk::clock::Clock;
use mqblk::{Device, DeviceConfig};

use job::{Control, JobResult, Live, PHASE_RUN};
use options::{BenchPlan, JobOptions};
use report::{DeviceInfo, Entry, Samples};
use start::StartGate;
use stats::ProcessCpu;

/// The device of a bare `mqblk bench`.
pub const DEFAULT_DEVICE: &str = "null:gb=1";

/// `PROGRAM bench`'s usage line (PROGRAM: `mqblk`, or the name of a
/// program that runs the command line with policies of its own).
pub fn usage(program: &str) -> String {
    format!(
        "{program} bench [--device SPEC] [--output-format=normal|terse|json|json+[,...]] [--output=FILE] [--stats] \
         [--blktrace=DIR] [fio options] [jobfile ...]"
    )
}

/// The body of `mqblk bench --help`: mqblk's own options (with the
/// schedulers `--sched` can name, built in and registered), then fio's.
pub fn help() -> String {
    let scheds = mqblk::sched::elevator_names().join(", ");
    let mut out = String::from(
        "\
mqblk's options (also as --option VALUE):
  --device SPEC                 The device: driver:key=value,... (default null:gb=1,
                                completing on the CPU of a job that runs alone
                                with iodepth 32 or more, as null_blk's softirq)
  --output-format=LIST          fio's reports, comma-separated: normal (default),
                                terse, json, json+ (JSON with latency bins)
  --terse-version=2|3|4|5       The terse line's version (default 3); --minimal: terse
  --output=FILE                 Write the report to FILE instead of stdout
  --stats                       Append the device's debugfs-like counters
  --blktrace=DIR                Trace the block layer into DIR (blkparse -D DIR -i DRIVER)
  --sched=NAME[,tunable=value]  The device's I/O scheduler (or sched= in --device;
                                not both). NAME: {scheds}
  --plug_nesting=MODE           Plug nesting (flush_each: flush every level)

fio's options: --name=NAME starts a job; options before the first --name are
global; without --name, one job. Job files use fio's INI format ([global],
then a section per job). The fio options mqblk understands:
",
    )
    .replace("{scheds}", &scheds);
    let mut line = String::from(" ");
    for name in options::job_options().iter().filter(|o| !matches!(**o, "device" | "sched" | "plug_nesting")) {
        if line.len() + name.len() + 1 > 78 {
            out.push_str(&line);
            out.push('\n');
            line = String::from(" ");
        }
        line.push(' ');
        line.push_str(name);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// Why the benchmark could not run; the exit code tells bad input (2) from
/// a failure while running (1).
#[derive(Debug)]
pub enum BenchError {
    BadInput(String),
    Failed(String),
    /// The run finished and its report is this, but a job ended with an
    /// error (fio's exit status counts such jobs).
    JobErrors {
        report: String,
        jobs: usize,
    },
}

const SAMPLE_NS: u64 = 500_000_000;

/// Marks a job done when its thread leaves `run_job`, by return or unwind,
/// and tells the jobs that wait for exits.
struct DoneOnDrop<'a>(&'a std::sync::atomic::AtomicBool, &'a start::Exits);

impl Drop for DoneOnDrop<'_> {
    fn drop(&mut self) {
        self.1.exited(self.0);
    }
}

/// Counts a job as arrived at the start gate when its thread leaves
/// `run_job` (a no-op if it arrived on its way).
struct ArriveOnDrop<'a>(&'a StartGate, &'a std::sync::atomic::AtomicBool);

impl Drop for ArriveOnDrop<'_> {
    fn drop(&mut self) {
        self.0.arrive(self.1);
    }
}

/// What a job thread shares with the supervisor.
struct Shared<'a> {
    opts: &'a JobOptions,
    /// Which of the job's `numjobs` clones this is.
    clone: usize,
    /// This clone's index among the plan's (its seed and region).
    job_index: usize,
    ctrl: Control<'a>,
    live: Live,
    /// The clones (of this phase) that must exit before this one starts.
    waits_for: Vec<usize>,
    exits: &'a start::Exits,
}

/// The supervisor's own view of one job: its timeline and samples.
struct Running {
    /// The timeline below starts when the job is ready (`Live::ready`).
    started: bool,
    ramp_end: Instant,
    stop_at: Option<Instant>,
    /// Each direction's samples, in `Dir` order.
    samples: [Samples; 3],
    /// The last sample's time, I/Os and each direction's bytes.
    last: (Instant, u64, [u64; 3]),
    /// fio's steady-state verdict (`ss`), at the end.
    steadystate: Option<steadystate::Steady>,
}

impl Running {
    /// The job is ready: its ramp counts from `now`, and so does its
    /// runtime when it does not ramp.
    fn start(&mut self, opts: &JobOptions, now: Instant) {
        self.started = true;
        self.ramp_end = now + Duration::from_nanos(opts.ramp_time_ns);
        self.stop_at =
            (opts.runtime_ns > 0 && opts.ramp_time_ns == 0).then(|| now + Duration::from_nanos(opts.runtime_ns));
        self.last = (self.ramp_end, 0, [0; 3]);
    }

    /// After a ramp, the runtime counts from when the job has seen the
    /// ramp end and reset its statistics (fio resets `td->epoch` there),
    /// so the measured part is never shorter than `runtime`.
    fn measuring_from(&mut self, opts: &JobOptions, live: &Live, now: Instant) {
        if self.stop_at.is_none() && opts.runtime_ns > 0 && live.measuring.load(Ordering::Acquire) {
            self.stop_at = Some(now + Duration::from_nanos(opts.runtime_ns));
        }
    }
}

/// What a run produced, before formatting.
pub struct RunOutput {
    pub entries: Vec<Entry>,
    pub device: DeviceInfo,
    /// The whole process's CPU while every job was measuring (None if the
    /// jobs never all measured at once, e.g. one ended before another began).
    pub process_cpu: Option<ProcessCpu>,
    /// The debugfs-like dump, taken after the run.
    pub stats: String,
}

/// Runs `plan` and formats its reports (fio's order: terse, JSON, normal;
/// then `--stats`); with `--output=FILE` they go to FILE and nothing is
/// returned to print.
pub fn run(plan: &BenchPlan) -> Result<String, BenchError> {
    let r = run_plan(plan)?;
    let o = &plan.output;
    let mut out = String::new();
    if o.terse {
        out.push_str(&report::to_terse(&r.entries, o.terse_version));
    }
    if o.json {
        let doc = report::to_json(&r.entries, &plan.global_given, &r.device, r.process_cpu, o.json_plus);
        out.push_str(&serde_json::to_string_pretty(&doc).expect("JSON encoding"));
        out.push('\n');
    }
    if o.normal {
        out.push_str(&report::to_human(&r.entries, &r.device, r.process_cpu));
    }
    if plan.stats {
        out.push_str("\n== stats ==\n");
        out.push_str(&r.stats);
    }
    let out = match &o.file {
        Some(path) => {
            std::fs::write(path, out).map_err(|e| BenchError::Failed(format!("--output={path}: {e}")))?;
            String::new()
        }
        None => out,
    };
    match r.entries.iter().filter(|e| e.run.error != 0).count() {
        0 => Ok(out),
        jobs => Err(BenchError::JobErrors { report: out, jobs }),
    }
}

/// The plan's device: its `--device` spec (or the file of its jobs'
/// `filename`, or the default), with the device options given as bench
/// options. A file device gets a ring per job thread, reaped by the job,
/// unless its spec chose a ring layout (the job threads reap).
pub fn device_config(plan: &BenchPlan) -> Result<DeviceConfig, BenchError> {
    crate::register_drivers();
    let mut cfg = match (&plan.file, &plan.device) {
        (Some(file), _) => DeviceConfig::new(file.clone()),
        (None, spec) => {
            let spec = spec.as_deref().unwrap_or(DEFAULT_DEVICE);
            DeviceConfig::parse(spec).map_err(|e| BenchError::BadInput(format!("--device {spec}: {e}")))?
        }
    };
    if let Some(file) = cfg.driver_mut::<mqblk_file::FileConfig>() {
        file.reaped_by_clients(plan.jobs.iter().map(|j| j.numjobs).sum());
    }
    if let Some(name) = &plan.plug_nesting {
        let nesting = mqblk::PlugNesting::from_name(name).ok_or_else(|| {
            let accepted = mqblk::PlugNesting::NAMES.join(", ");
            BenchError::BadInput(format!("--plug_nesting={name}: accepted: {accepted}"))
        })?;
        cfg.queue_mut().plug_nesting = nesting;
    }
    if let Some(dir) = &plan.blktrace {
        cfg.queue_mut().blktrace = Some(dir.into());
    }
    if let Some(sched) = &plan.sched {
        // Two choices of one scheduler: refused rather than one winning
        // silently (a job file's device and a command line's --sched, say).
        if let Some(spec) = plan.device.as_deref().filter(|spec| spec_names_sched(spec)) {
            return Err(BenchError::BadInput(format!(
                "--device {spec} and --sched={sched} both choose the scheduler: give it in one of them"
            )));
        }
        cfg.queue_mut().sched = sched.parse().map_err(|e| BenchError::BadInput(format!("--sched={sched}: {e}")))?;
    }
    Ok(cfg)
}

/// Whether a device spec has a `sched=` key.
fn spec_names_sched(spec: &str) -> bool {
    mqblk::config::SpecParams::parse(spec).is_ok_and(|p| p.is_set("sched"))
}

/// The device as the user gave it, for errors: `--device SPEC` (or the
/// jobs' `--filename`, or bench's default device), and `--sched` if given.
/// Not the spec printed back from the parsed configuration, which holds
/// defaults and `--sched`'s choice the user never typed in that form.
fn device_as_given(plan: &BenchPlan) -> String {
    let device = match (&plan.file, &plan.device) {
        (Some(file), _) => format!("--filename={}", file.path),
        (None, Some(spec)) => format!("--device {spec}"),
        (None, None) => format!("the default device {DEFAULT_DEVICE}"),
    };
    match &plan.sched {
        Some(sched) => format!("{device} --sched={sched}"),
        None => device,
    }
}

/// Runs `plan` and returns its measurements: its phases (order.rs) one
/// after another on one device.
pub fn run_plan(plan: &BenchPlan) -> Result<RunOutput, BenchError> {
    // Bench's own device completes on its one job thread's CPU.
    let placed = placement::resolve(plan).map_err(BenchError::Failed)?;
    let plan = placed.as_ref().unwrap_or(plan);
    for cpus in plan.jobs.iter().filter_map(|j| j.cpus_allowed.as_ref()) {
        cpus::check_available(&cpus.0).map_err(BenchError::BadInput)?;
    }
    let cfg = device_config(plan)?;
    // The spec the report prints: the device as built, defaults included.
    let spec = cfg.to_string();
    let dev = cfg.build().map_err(|e| BenchError::BadInput(format!("{}: {e}", device_as_given(plan))))?;
    // Sizes in zones ("8z") need the device's zone size.
    let plan = &zones::resolve(plan, &dev).map_err(BenchError::BadInput)?;
    // Sizes in percent ("50%") need its capacity.
    let plan = &percent::resolve(plan, &dev).map_err(BenchError::BadInput)?;
    // Every clone's region fits the device (as fio's "offset extends end").
    let clones = plan.jobs.iter().flat_map(|j| std::iter::repeat(j).take(j.numjobs));
    for (index, job) in clones.enumerate() {
        job_setup::job_region(job, &dev, index).map_err(BenchError::BadInput)?;
    }
    let fixed = fixed_bufs(plan, &dev)?;
    let clock = bench_clock(plan)?;
    trim::check_device(&plan.jobs, &dev).map_err(BenchError::BadInput)?;
    let bar = progress_bar(plan.output.progress_bar());
    let phases = order::phases(&plan.jobs);
    let mut entries: Vec<Entry> = Vec::new();
    let mut process_cpu = None;
    for phase in &phases {
        let (phase_entries, cpu, end_run) = run_phase(plan, phase.clone(), &dev, fixed.as_ref(), clock, &bar)?;
        for entry in phase_entries {
            // fio's group_reporting: one entry per group.
            match entries
                .iter_mut()
                .find(|e| entry.opts.group_reporting && e.opts.group_reporting && e.opts.groupid == entry.opts.groupid)
            {
                Some(group) => group.merge(&entry),
                None => entries.push(entry),
            }
        }
        // The process's CPU per I/O needs every job measuring at once.
        process_cpu = if phases.len() == 1 { cpu } else { None };
        if end_run {
            break; // fio's exit_what=all: the later phases never start
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if let Some(line) = crate::blktrace_stop_line(&dev) {
        eprintln!("{}", line.map_err(|e| BenchError::Failed(format!("--{e}")))?);
    }
    let info = DeviceInfo {
        spec,
        driver: dev.driver_name().to_string(),
        nr_hw_queues: dev.nr_hw_queues(),
        poll_queues: dev.tag_set().poll_queues,
        queue_depth: dev.tag_set().queue_depth,
        scheduler: dev.scheduler(),
        stats: dev.stats(),
    };
    Ok(RunOutput { entries, device: info, process_cpu, stats: dev.show_stats() })
}

/// Runs the jobs of one phase (`plan.jobs[phase]`), each clone on its
/// thread: the jobs that wait for none start together; a `wait_for` job's
/// clones start together once its waitee's have all exited.
fn run_phase(
    plan: &BenchPlan,
    phase: std::ops::Range<usize>,
    dev: &Device,
    fixed: Option<&mqblk::FixedBufs>,
    clock: Clock,
    bar: &Option<indicatif::ProgressBar>,
) -> Result<(Vec<Entry>, Option<ProcessCpu>, bool), BenchError> {
    let jobs = &plan.jobs[phase.clone()];
    let waitees = order::waitees(&plan.jobs, phase.clone());
    // A gate for the jobs that wait for none, and one per waiting job.
    let free_clones = jobs.iter().zip(&waitees).filter(|(_, w)| w.is_empty()).map(|(j, _)| j.numjobs).sum();
    let gates: Vec<StartGate> =
        std::iter::once(StartGate::new(free_clones)).chain(jobs.iter().map(|j| StartGate::new(j.numjobs))).collect();
    let exits = start::Exits::default();
    // Job indices count every clone of the plan, as fio's thread numbers.
    let first_index = plan.jobs[..phase.start].iter().map(|j| j.numjobs).sum();
    let zones = zbd::SharedZones::for_jobs(jobs, dev).map_err(BenchError::BadInput)?;
    let (shared, mut running) = job_clones(jobs, first_index, &waitees, &gates, &exits, zones, Instant::now());
    let traces = open_traces(&shared, dev)?;
    let (results, process_cpu): (Vec<Result<JobResult, String>>, _) = std::thread::scope(|scope| {
        let handles: Vec<_> = shared
            .iter()
            .zip(traces)
            .enumerate()
            .map(|(i, (r, trace))| {
                let fixed = fixed.filter(|_| r.opts.fixedbufs);
                let shared = &shared;
                std::thread::Builder::new()
                    .name(format!("job{i}"))
                    .spawn_scoped(scope, move || {
                        // Done whatever the outcome (even a panic), so the
                        // supervisor stops and waiting jobs go on.
                        let _done = DoneOnDrop(&r.live.done, r.exits);
                        // Arrived at the start gate whatever the outcome,
                        // so no other job waits for this one.
                        let _arrived = ArriveOnDrop(r.ctrl.start, &r.live.arrived);
                        r.exits.wait_for(|| r.waits_for.iter().all(|&w| shared[w].live.done.load(Ordering::Acquire)));
                        r.live.tid.store(thread_cpu::current_tid(), Ordering::Release);
                        if let Some(cpus) = &r.opts.cpus_allowed {
                            cpus::pin_current_thread(&cpus.for_job(r.opts.cpus_allowed_split, r.clone))?;
                        }
                        // fio's numa_cpu_nodes and numa_mem_policy, before
                        // the job allocates its buffers on this thread.
                        if let Some(cpus) = r.opts.numa.cpus()? {
                            cpus::pin_current_thread(&cpus)?;
                        }
                        r.opts.numa.apply_mem_policy()?;
                        job::run_job(r.opts, dev, fixed, clock, r.job_index, &r.ctrl, &r.live, trace)
                    })
                    .expect("spawn job thread")
            })
            .collect();
        let (process_cpu, end_run) = supervise::supervise(&shared, &mut running, bar);
        let results = handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("job thread panicked".into())));
        (results.collect(), (process_cpu, end_run))
    });
    let (process_cpu, end_run) = process_cpu;
    Ok((report_entries(&shared, running, results)?, process_cpu, end_run))
}

/// Each job clone's trace (`read_iolog`), parsed and checked against the
/// device before any job starts: a bad one is bad input.
fn open_traces(shared: &[Shared<'_>], dev: &Device) -> Result<Vec<Option<replay::OpenTrace>>, BenchError> {
    shared.iter().map(|sh| job_setup::new_replay(sh.opts, dev).map_err(BenchError::BadInput)).collect()
}

/// Every job's clones (`numjobs`), each with its run control and its
/// supervisor's timeline from `start`: the ramp, then the runtime. A
/// clone passes `gates[0]` unless its job waits for others (`waitees`,
/// indices into `jobs`): then its job's own gate, after every clone of
/// those has exited.
fn job_clones<'a>(
    jobs: &'a [JobOptions],
    first_index: usize,
    waitees: &[Vec<usize>],
    gates: &'a [StartGate],
    exits: &'a start::Exits,
    zones: Option<std::sync::Arc<zbd::SharedZones>>,
    start: Instant,
) -> (Vec<Shared<'a>>, Vec<Running>) {
    let mut shared: Vec<Shared> = Vec::new();
    let mut running: Vec<Running> = Vec::new();
    let mut first_clone = Vec::with_capacity(jobs.len());
    for (j, opts) in jobs.iter().enumerate() {
        first_clone.push(shared.len());
        let waits_for: Vec<usize> =
            waitees[j].iter().flat_map(|&w| first_clone[w]..first_clone[w] + jobs[w].numjobs).collect();
        let gate = if waits_for.is_empty() { &gates[0] } else { &gates[1 + j] };
        for clone in 0..opts.numjobs {
            let ramp_end = start + Duration::from_nanos(opts.ramp_time_ns);
            let ctrl = Control { phase: Default::default(), start: gate, zones: zones.clone() };
            if opts.ramp_time_ns == 0 {
                ctrl.phase.store(PHASE_RUN, Ordering::Release);
            }
            let job_index = first_index + shared.len();
            shared.push(Shared {
                opts,
                clone,
                job_index,
                ctrl,
                live: Live::default(),
                waits_for: waits_for.clone(),
                exits,
            });
            running.push(Running {
                started: false,
                ramp_end,
                stop_at: None,
                samples: Default::default(),
                last: (ramp_end, 0, [0; 3]),
                steadystate: None,
            });
        }
    }
    (shared, running)
}

/// The phase's report entries, one per job clone (run_plan folds
/// `group_reporting` groups); the first job error fails the run.
fn report_entries(
    shared: &[Shared<'_>],
    running: Vec<Running>,
    results: Vec<Result<JobResult, String>>,
) -> Result<Vec<Entry>, BenchError> {
    let mut entries: Vec<Entry> = Vec::new();
    for ((sh, r), res) in shared.iter().zip(running).zip(results) {
        let res = res.map_err(BenchError::Failed)?;
        let mut entry = Entry::from_result(sh.opts, &res, r.samples);
        entry.steadystate = r.steadystate;
        entries.push(entry);
    }
    Ok(entries)
}

/// fio's `fixedbufs`: one registered pool for every job that asks, with a
/// slot per buffer those jobs keep (a read and a write buffer per iodepth
/// slot, as their mix needs).
fn fixed_bufs(plan: &BenchPlan, dev: &Device) -> Result<Option<mqblk::FixedBufs>, BenchError> {
    let jobs: Vec<&JobOptions> = plan.jobs.iter().filter(|j| j.fixedbufs).collect();
    if jobs.is_empty() {
        return Ok(None);
    }
    let slot_bytes = jobs.iter().map(|j| j.max_bs()).max().unwrap_or(4096) as usize;
    let nr_slots: usize = jobs
        .iter()
        .map(|j| {
            let pct = j.rw.read_pct(j.rwmixread);
            j.numjobs * j.effective_iodepth() * (usize::from(pct > 0) + usize::from(pct < 100))
        })
        .sum();
    let bytes = nr_slots.saturating_mul(slot_bytes.next_multiple_of(mqblk::BUF_ALIGN));
    if bytes > mqblk::FixedBufs::MAX_REGION_BYTES {
        return Err(BenchError::BadInput(format!(
            "fixedbufs=1: {nr_slots} buffers of {slot_bytes} bytes exceed io_uring's 1 GiB of registered memory"
        )));
    }
    let pool = mqblk::FixedBufs::new(nr_slots, slot_bytes);
    let Some(registered) = dev.fixed_buffers() else {
        return Err(BenchError::BadInput(format!(
            "fixedbufs=1: the {} driver has no registered buffers (the file driver, --filename, has); use fixedbufs=0",
            dev.driver_name()
        )));
    };
    registered.register(&pool).map_err(|e| BenchError::BadInput(format!("fixedbufs=1: {e}")))?;
    Ok(Some(pool))
}

/// One clock for all jobs: the first explicit `clocksource`, else fio's
/// default (the TSC when reliable, else clock_gettime).
fn bench_clock(plan: &BenchPlan) -> Result<Clock, BenchError> {
    match plan.jobs.iter().find_map(|j| j.clocksource) {
        Some(source) => Clock::new(source).map_err(|e| BenchError::BadInput(format!("clocksource: {e}"))),
        None => Ok(Clock::best()),
    }
}

fn progress_bar(human: bool) -> Option<indicatif::ProgressBar> {
    if !human || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}").expect("valid template"),
    );
    Some(bar)
}
