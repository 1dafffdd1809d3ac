//! `mqblk bench`'s arguments and fio job files: the command line
//! (`--opt=value`, each `--name` starting a job, options before the first
//! one global; mqblk's own `--output-format`, `--stats`, `--device`) and
//! INI job files (`[global]` and job sections), collected in order into a
//! `BenchPlan`.

use super::options::{err, is_job_option, job_options, unknown_option, JobOptions, OptionError};
use super::output::{OutputOptions, OUTPUT_OPTIONS};

/// Options of `mqblk bench`'s command line only (not of job files).
const BENCH_OPTIONS: &[&str] = &["stats", "blktrace"];

/// The unknown-option message of the command line, where mqblk's own
/// options are known too.
fn unknown_cli_option(key: &str) -> String {
    let mut known = job_options();
    known.extend(BENCH_OPTIONS);
    known.extend(OUTPUT_OPTIONS);
    unknown_option(key, &known)
}

/// What `mqblk bench` was asked to run.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchPlan {
    pub jobs: Vec<JobOptions>,
    pub device: Option<String>,
    /// The device of jobs that name a `filename` (fio's way), instead.
    pub file: Option<mqblk_file::FileConfig>,
    /// `plug_nesting=` and `sched=`: the device's block-layer options.
    pub plug_nesting: Option<String>,
    pub sched: Option<String>,
    /// The reports to print (output.rs).
    pub output: OutputOptions,
    pub stats: bool,
    pub global_given: Vec<(String, String)>,
    /// `--blktrace=DIR`: trace the device's block layer into DIR.
    pub blktrace: Option<String>,
}

/// The default job of a bare `mqblk bench`: 4k randread, iodepth 32, 10 s.
fn default_job() -> JobOptions {
    let mut job = JobOptions::defaults("randread");
    for (k, v) in [("rw", "randread"), ("bs", "4k"), ("iodepth", "32"), ("runtime", "10"), ("time_based", "1")] {
        job.set(k, Some(v)).expect("default job options are valid");
    }
    job
}

/// Options in the order given: (key, value; None for a bare flag).
type OptionList = Vec<(String, Option<String>)>;

/// What parsing produced: the jobs, the global options as given, the
/// device spec, and the file device of jobs that name a `filename`.
type Parsed = (Vec<JobOptions>, Vec<(String, String)>, Option<String>, Option<mqblk_file::FileConfig>);

/// Collects options in order: `device` and `plug_nesting` are plan-level
/// (device options), the rest job options.
#[derive(Default)]
struct Collector {
    global: OptionList,
    /// Job options given on the command line after a job file: they
    /// override the file's own, in every job (how a job file is shortened
    /// without editing it).
    overrides: OptionList,
    jobs: Vec<(String, OptionList)>,
    device: Option<String>,
    plug_nesting: Option<String>,
    sched: Option<String>,
}

impl Collector {
    fn add(&mut self, key: &str, value: Option<String>) {
        if key == "device" {
            self.device = value;
            return;
        }
        if key == "plug_nesting" {
            self.plug_nesting = Some(value.unwrap_or_default());
            return;
        }
        if key == "sched" {
            self.sched = Some(value.unwrap_or_default());
            return;
        }
        match self.jobs.last_mut() {
            Some((_, opts)) => opts.push((key.to_string(), value)),
            None => self.global.push((key.to_string(), value)),
        }
    }

    fn finish(self) -> Result<Parsed, OptionError> {
        let mut base = JobOptions::defaults("");
        for (k, v) in &self.global {
            base.set(k, v.as_deref())?;
        }
        let global_given = base.given.clone();
        let mut jobs = Vec::new();
        for (name, opts) in &self.jobs {
            let mut job = base.clone();
            job.name = name.clone();
            for (k, v) in opts.iter().chain(&self.overrides) {
                job.set(k, v.as_deref())?;
            }
            job.validate()?;
            jobs.push(job);
        }
        super::order::check_waits(&jobs)?;
        super::order::assign_groups(&mut jobs);
        let file = file_device(&jobs, self.device.is_some())?;
        Ok((jobs, global_given, self.device, file))
    }
}

/// The device of jobs that name a `filename` or a `directory` (fio's way),
/// when `--device` names none: the io_uring file driver, one for all jobs,
/// so they must agree on it. Like fio's io_uring engine, each job reaps
/// its own ring (`device_config` gives one per job thread); a missing file
/// is laid out at the jobs' size. With `--device`, the device stands for
/// every file the jobs name, as `--filename` would.
fn file_device(jobs: &[JobOptions], device_given: bool) -> Result<Option<mqblk_file::FileConfig>, OptionError> {
    if device_given {
        return Ok(None);
    }
    let mut jobs = jobs.to_vec();
    for job in jobs.iter_mut().filter(|j| j.filename.is_none()) {
        // fio's file of a job in a directory: NAME.CLONE.FILE.
        job.filename = job.directory.as_ref().map(|dir| format!("{dir}/{}.0.0", job.name));
        if job.filename.is_some() && job.numjobs > 1 {
            return err(format!(
                "job '{}': directory= with numjobs={} names a file per clone, and without --device bench runs one \
                 device: give filename= or --device",
                job.name, job.numjobs
            ));
        }
    }
    let Some(first) = jobs.iter().find(|j| j.filename.is_some()) else { return Ok(None) };
    let key = |j: &JobOptions| (j.filename.clone(), j.direct, j.registerfiles);
    if jobs.iter().any(|j| key(j) != key(first)) {
        return err("jobs name different filename/direct/registerfiles: mqblk bench runs one device");
    }
    let path = first.filename.as_deref().unwrap_or_default();
    if path.contains(',') {
        return err(format!("filename={path}: a path with ',' cannot name a device (',' separates a spec's keys)"));
    }
    let mut file = mqblk_file::FileConfig::new(path).direct(first.direct).register_files(first.registerfiles);
    if !std::path::Path::new(path).exists() {
        if !first.allow_file_create {
            return err(format!("filename={path} does not exist, and allow_file_create=0 forbids laying it out"));
        }
        let size = jobs.iter().filter_map(|j| j.size.or(j.filesize).map(|s| j.offset + s)).max();
        let Some(size) = size else {
            return err(format!("filename={path} does not exist: give size= so it can be created"));
        };
        file = file.create(true).size_bytes(size);
    }
    Ok(Some(file))
}

/// Parses `mqblk bench` arguments (everything after `bench`).
pub fn parse_bench_args(args: &[String]) -> Result<BenchPlan, OptionError> {
    let mut c = Collector::default();
    let cli = parse_cli(args, &mut c)?;
    for path in &cli.job_files {
        let text = std::fs::read_to_string(path).map_err(|e| OptionError(format!("job file '{path}': {e}")))?;
        parse_job_file(&text, path, &mut c)?;
    }
    let (output, stats, blktrace) = (cli.output, cli.stats, cli.blktrace);
    if c.jobs.is_empty() && !cli.any_job_option && cli.job_files.is_empty() {
        let (device, plug_nesting, sched) = (c.device.take(), c.plug_nesting.take(), c.sched.take());
        return Ok(BenchPlan {
            jobs: vec![default_job()],
            device,
            file: None,
            plug_nesting,
            sched,
            output,
            stats,
            global_given: Vec::new(),
            blktrace,
        });
    }
    if c.jobs.is_empty() {
        // Options but no --name: one job, named after its pattern like fio's
        // default naming would be unhelpful ("job0").
        let rw = c.global.iter().rev().find(|(k, _)| k == "rw" || k == "readwrite");
        let name = rw.and_then(|(_, v)| v.clone()).unwrap_or_else(|| "read".to_string());
        c.jobs.push((name, std::mem::take(&mut c.global)));
    }
    let (plug_nesting, sched) = (c.plug_nesting.take(), c.sched.take());
    let (jobs, global_given, device, file) = c.finish()?;
    Ok(BenchPlan { jobs, device, file, plug_nesting, sched, output, stats, global_given, blktrace })
}

/// What the command line held besides job options.
#[derive(Default)]
struct CliArgs {
    output: OutputOptions,
    stats: bool,
    blktrace: Option<String>,
    job_files: Vec<String>,
    any_job_option: bool,
}

/// Reads the command line: mqblk's own options, job options into the
/// collector, anything not `--` a job file.
fn parse_cli(args: &[String], c: &mut Collector) -> Result<CliArgs, OptionError> {
    let mut cli = CliArgs::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let Some(opt) = arg.strip_prefix("--") else {
            cli.job_files.push(arg.clone());
            continue;
        };
        let after_file = !cli.job_files.is_empty();
        let (key, inline) = match opt.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (opt.to_string(), None),
        };
        // Our own options also take "--opt value".
        let mut take_value = |inline: Option<String>| -> Result<String, OptionError> {
            if let Some(v) = inline {
                return Ok(v);
            }
            let v = args.get(i).cloned().ok_or_else(|| OptionError(format!("--{key}: needs a value")))?;
            i += 1;
            Ok(v)
        };
        match key.as_str() {
            "minimal" => _ = cli.output.set(&key, inline.as_deref())?,
            _ if OUTPUT_OPTIONS.contains(&key.as_str()) => {
                let v = take_value(inline)?;
                cli.output.set(&key, Some(&v))?;
            }
            "stats" => cli.stats = true,
            "blktrace" => cli.blktrace = Some(take_value(inline)?),
            "device" => c.device = Some(take_value(inline)?),
            "plug_nesting" => c.plug_nesting = Some(take_value(inline)?),
            "sched" => c.sched = Some(take_value(inline)?),
            "name" if after_file => {
                return err("--name after a job file: options after a job file override its jobs' options; \
                     give command-line jobs before the file");
            }
            "name" => {
                let v = take_value(inline)?;
                c.jobs.push((v, Vec::new()));
                cli.any_job_option = true;
            }
            _ if is_job_option(&key) && after_file => c.overrides.push((key, inline)),
            _ if is_job_option(&key) => {
                c.add(&key, inline);
                cli.any_job_option = true;
            }
            _ => return err(unknown_cli_option(&key)),
        }
    }
    Ok(cli)
}

/// fio's substitutions in a job file's line (`fio_option_dup_subs` and
/// `fio_keyword_replace`): `${NAME}` by the environment variable NAME
/// (empty when unset, as fio), and the keywords `$pagesize`, `$ncpus` and
/// `$mb_memory` by this machine's values.
fn expand_env(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("${") {
        let Some(end) = rest[at + 2..].find('}') else { break };
        out.push_str(&rest[..at]);
        out.push_str(&std::env::var(&rest[at + 2..at + 2 + end]).unwrap_or_default());
        rest = &rest[at + 2 + end + 1..];
    }
    out.push_str(rest);
    if !out.contains('$') {
        return out;
    }
    // SAFETY: sysconf reads constants of the running system.
    let (page, pages) = unsafe { (libc::sysconf(libc::_SC_PAGESIZE), libc::sysconf(libc::_SC_PHYS_PAGES)) };
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    out.replace("$pagesize", &page.to_string())
        .replace("$ncpus", &ncpus.to_string())
        .replace("$mb_memory", &(page * pages / (1 << 20)).to_string())
}

/// Parses an INI job file into the collector: `[global]` then job sections.
fn parse_job_file(text: &str, path: &str, c: &mut Collector) -> Result<(), OptionError> {
    let mut in_global = false;
    let mut seen_section = false;
    for (lineno, raw) in text.lines().enumerate() {
        let expanded = expand_env(raw);
        // fio's strip_blank_end: a ';' or '#' anywhere starts a comment.
        let line = expanded.split([';', '#']).next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("{path}:{}", lineno + 1);
        if let Some(section) = line.strip_prefix('[') {
            let Some(name) = section.strip_suffix(']') else {
                return err(format!("{}: unterminated section header '{line}'", at()));
            };
            let name = name.trim();
            seen_section = true;
            in_global = name == "global";
            if in_global && !c.jobs.is_empty() {
                return err(format!("{}: [global] after a job section is not supported", at()));
            }
            if !in_global {
                c.jobs.push((name.to_string(), Vec::new()));
            }
            continue;
        }
        if !seen_section {
            return err(format!("{}: option '{line}' outside any section", at()));
        }
        let (key, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim().to_string())),
            None => (line, None),
        };
        if !is_job_option(key) {
            return err(format!("{}: {}", at(), unknown_option(key, &job_options())));
        }
        if in_global {
            if key == "device" {
                c.device = value;
            } else {
                c.global.push((key.to_string(), value));
            }
        } else {
            c.add(key, value);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::options::RwMode;
    use crate::bench::values::{parse_size, parse_time_ns};

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn sizes_and_times() {
        assert_eq!(parse_size("bs", "4k").unwrap(), 4096);
        assert_eq!(parse_size("bs", "4KiB").unwrap(), 4096);
        assert_eq!(parse_size("size", "1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("size", "512").unwrap(), 512);
        assert!(parse_size("bs", "4x").unwrap_err().0.contains("bs"));
        assert_eq!(parse_time_ns("runtime", "10").unwrap(), 10_000_000_000);
        assert_eq!(parse_time_ns("runtime", "500ms").unwrap(), 500_000_000);
        assert!(parse_time_ns("runtime", "ten").unwrap_err().0.contains("runtime"));
    }

    #[test]
    fn bare_bench_is_the_default_job() {
        let plan = parse_bench_args(&[]).unwrap();
        let job = &plan.jobs[0];
        assert_eq!(job.rw, RwMode::RandRead);
        assert_eq!((job.bs_read, job.iodepth, job.runtime_ns, job.time_based), (4096, 32, 10_000_000_000, true));
    }

    #[test]
    fn cli_globals_then_jobs() {
        let plan = parse_bench_args(&args(
            "--bs=8k --iodepth=4 --name=a --rw=randwrite --name=b --rw=read --iodepth=2 --output-format=json --device null:irqmode=0",
        ))
        .unwrap();
        assert!(plan.output.json);
        assert_eq!(plan.device.as_deref(), Some("null:irqmode=0"));
        assert_eq!(plan.jobs.len(), 2);
        assert_eq!((plan.jobs[0].name.as_str(), plan.jobs[0].rw, plan.jobs[0].iodepth), ("a", RwMode::RandWrite, 4));
        assert_eq!((plan.jobs[1].bs_read, plan.jobs[1].iodepth), (8192, 2));
    }

    #[test]
    fn unknown_and_bad_options_name_themselves() {
        assert!(parse_bench_args(&args("--iodpeth=4")).unwrap_err().0.contains("'iodpeth'"));
        let e = parse_bench_args(&args("--iodepht=4")).unwrap_err().0;
        assert_eq!(e, "unknown option 'iodepht' (did you mean 'iodepth'?)");
        let e = parse_bench_args(&args("--output_format=json")).unwrap_err().0;
        assert!(e.ends_with("(did you mean 'output-format'?)"), "{e}");
        let e = parse_bench_args(&args("--frobnicate=1")).unwrap_err().0;
        assert!(e.contains("(known: ") && e.contains("iodepth"), "no near option: every option is listed: {e}");
        assert!(parse_bench_args(&args("--rw=sideways")).unwrap_err().0.starts_with("rw:"));
        assert!(parse_bench_args(&args("--iodepth=0")).unwrap_err().0.starts_with("iodepth:"));
        assert!(parse_bench_args(&args("--time_based --name=x")).unwrap_err().0.contains("runtime"));
    }

    #[test]
    fn job_file_with_global_section() {
        let text = "; comment\n[global]\nbs=16k\ntime_based\nruntime=2\n\n[reader]\nrw=randread\niodepth=8\n[writer]\nrw=write\n";
        let mut c = Collector::default();
        parse_job_file(text, "t.fio", &mut c).unwrap();
        let (jobs, _, _, _) = c.finish().unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[0].bs_read, jobs[0].iodepth, jobs[0].time_based), (16384, 8, true));
        assert_eq!(jobs[1].rw, RwMode::Write);
        let mut c = Collector::default();
        let e = parse_job_file("[a]\nfoo=1\n", "t.fio", &mut c).unwrap_err();
        assert!(e.0.contains("t.fio:2") && e.0.contains("'foo'"), "{}", e.0);
    }

    #[test]
    fn job_files_substitute_the_environment_and_fios_keywords() {
        std::env::set_var("MQBLK_TEST_RW", "randwrite");
        assert_eq!(expand_env("rw=${MQBLK_TEST_RW}"), "rw=randwrite");
        assert_eq!(expand_env("rw=${MQBLK_TEST_UNSET_VAR}x"), "rw=x", "unset: empty, as fio");
        let ncpus = std::thread::available_parallelism().unwrap().get();
        assert_eq!(expand_env("numjobs=$ncpus"), format!("numjobs={ncpus}"));
        assert_eq!(expand_env("bs=$pagesize"), "bs=4096");
        assert_eq!(expand_env("a ${unterminated"), "a ${unterminated");
    }

    #[test]
    fn completion_batches_follow_fio_fixups() {
        let job = |a: &str| parse_bench_args(&args(a)).unwrap().jobs[0].clone();
        assert_eq!(job("--name=a --iodepth=128").complete_max(), 1, "fio: max defaults to min (1)");
        assert_eq!(job("--name=a --iodepth=128 --iodepth_batch_complete=16").complete_max(), 16);
        assert_eq!(job("--name=a --iodepth=128 --iodepth_batch_complete_max=64").complete_max(), 64);
        assert_eq!(job("--name=a --iodepth=8 --iodepth_batch_complete_max=64").complete_max(), 8, "capped by iodepth");
        let poll = job("--name=a --iodepth=32 --iodepth_batch_complete_min=0 --iodepth_batch_complete_max=0");
        assert_eq!(poll.complete_max(), 32, "both 0: reap whatever is there");
    }

    #[test]
    fn sync_engines_run_at_depth_one() {
        let job = |a: &str| parse_bench_args(&args(a)).unwrap().jobs[0].clone();
        assert_eq!(job("--name=a --iodepth=32 --ioengine=pvsync2").effective_iodepth(), 1);
        assert_eq!(job("--name=a --iodepth=32 --ioengine=libaio").effective_iodepth(), 32);
        let e = parse_bench_args(&args("--name=a --ioengine=spdk")).unwrap_err().0;
        assert!(e.contains("ioengine") && e.contains("pvsync2"), "{e}");
    }

    #[test]
    fn plug_options() {
        let plan = parse_bench_args(&args("--plug_nesting=flush_each --name=a --plug_per_io=0")).unwrap();
        assert_eq!(plan.plug_nesting.as_deref(), Some("flush_each"));
        assert!(plan.jobs[0].plug && !plan.jobs[0].plug_per_io);
        let plan = parse_bench_args(&args("--name=a --plug=0")).unwrap();
        assert!(!plan.jobs[0].plug);
        assert!(parse_bench_args(&args("--name=a --plug=maybe")).unwrap_err().0.contains("plug"));
    }

    #[test]
    fn rwmix_and_bs_pairs() {
        let plan = parse_bench_args(&args("--name=m --rw=randrw --rwmixwrite=30 --bs=4k,64k")).unwrap();
        let j = &plan.jobs[0];
        assert_eq!(j.rw.read_pct(j.rwmixread), 70);
        assert_eq!((j.bs_read, j.bs_write), (4096, 65536));
    }

    #[test]
    fn iolog_options() {
        use crate::bench::options::ReplayOptions;
        let plan = parse_bench_args(&args(
            "--name=r --read_iolog=t.log --replay_no_stall=1 --replay_time_scale=200 --replay_align=4k \
             --replay_scale=2 --read_iolog_chunked --replay_redirect=/dev/x --write_iolog=o.log",
        ))
        .unwrap();
        let j = &plan.jobs[0];
        assert_eq!((j.read_iolog.as_deref(), j.write_iolog.as_deref()), (Some("t.log"), Some("o.log")));
        let want = ReplayOptions {
            chunked: true,
            no_stall: true,
            time_scale_pct: 200,
            redirect: Some("/dev/x".into()),
            align_bytes: 4096,
            scale: 2,
        };
        assert_eq!(j.replay, want);
        assert_eq!(JobOptions::defaults("d").replay, ReplayOptions::default(), "fio's defaults");
        let e = |a: &str| parse_bench_args(&args(a)).unwrap_err().0;
        assert!(e("--name=r --replay_align=3000").contains("power of 2"));
        assert!(e("--name=r --replay_time_scale=0").starts_with("replay_time_scale"));
        assert!(e("--name=r --read_iolog=t --numjobs=2").contains("numjobs"));
        assert!(e("--name=r --read_iolog=t --verify=crc32c").contains("verify"));
    }
}
