//! fio's job options: parsing from the command line (`--opt=value`, each
//! `--name` starting a job, options before the first one global) and from
//! INI job files (`[global]` and job sections), with fio's names, defaults,
//! size suffixes and time units.

use std::fmt;

use super::values::parse_flag;
pub use super::values::{parse_int, parse_size, parse_time_ns};

/// An option error: names the option and what was wrong (exit code 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError(pub String);

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OptionError {}

fn err<T>(msg: impl Into<String>) -> Result<T, OptionError> {
    Err(OptionError(msg.into()))
}

/// Job options mqblk understands (fio names); aliases map to these.
pub const JOB_OPTIONS: &[&str] = &[
    "name",
    "rw",
    "readwrite",
    "rwmixread",
    "rwmixwrite",
    "bs",
    "blocksize",
    "size",
    "offset",
    "offset_increment",
    "zonemode",
    "iodepth",
    "iodepth_batch_submit",
    "iodepth_batch",
    "iodepth_batch_complete_min",
    "iodepth_batch_complete",
    "iodepth_batch_complete_max",
    "numjobs",
    "runtime",
    "timeout",
    "time_based",
    "ramp_time",
    "number_ios",
    "group_reporting",
    "randseed",
    "gtod_reduce",
    "clocksource",
    "plug",
    "plug_per_io",
    "mqblk_async",
    "hipri",
    "ioengine",
    "prio",
    "prioclass",
    "startdelay",
    "exitall",
    "filename",
    "verify",
    "direct",
    "registerfiles",
    "fixedbufs",
    "sqthread_poll",
    "device",
    "plug_nesting",
    "sched",
    "cpus_allowed",
    "cpus_allowed_policy",
];

/// `ioengine` values accepted; the sync ones run one I/O at a time.
pub const IOENGINES: &[&str] = &["io_uring", "libaio", "pvsync2", "pvsync", "psync", "sync"];
const SYNC_IOENGINES: &[&str] = &["pvsync2", "pvsync", "psync", "sync"];

/// The data direction pattern (`rw=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RwMode {
    Read,
    Write,
    RandRead,
    RandWrite,
    ReadWrite,
    RandRw,
}

impl RwMode {
    fn parse(v: &str) -> Result<Self, OptionError> {
        Ok(match v {
            "read" => RwMode::Read,
            "write" => RwMode::Write,
            "randread" => RwMode::RandRead,
            "randwrite" => RwMode::RandWrite,
            "rw" | "readwrite" => RwMode::ReadWrite,
            "randrw" => RwMode::RandRw,
            _ => {
                return err(format!(
                    "rw: bad value '{v}' (accepted: read, write, randread, randwrite, rw, readwrite, randrw)"
                ))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
            RwMode::RandRead => "randread",
            RwMode::RandWrite => "randwrite",
            RwMode::ReadWrite => "rw",
            RwMode::RandRw => "randrw",
        }
    }

    pub fn is_random(self) -> bool {
        matches!(self, RwMode::RandRead | RwMode::RandWrite | RwMode::RandRw)
    }

    /// Share of reads in percent, given rwmixread.
    pub fn read_pct(self, rwmixread: u32) -> u32 {
        match self {
            RwMode::Read | RwMode::RandRead => 100,
            RwMode::Write | RwMode::RandWrite => 0,
            RwMode::ReadWrite | RwMode::RandRw => rwmixread,
        }
    }
}

/// One job's options after defaults and inheritance from `[global]`.
#[derive(Debug, Clone, PartialEq)]
pub struct JobOptions {
    pub name: String,
    pub rw: RwMode,
    pub rwmixread: u32,
    pub bs_read: u64,
    pub bs_write: u64,
    /// Bytes of I/O per job (None: the device size minus offset).
    pub size: Option<u64>,
    pub offset: u64,
    /// fio's `offset_increment`: job N starts at offset + N x this.
    pub offset_increment: u64,
    /// fio's `zonemode=zbd`: writes go to zones' write pointers (zones
    /// of the job's region chosen at random for rand*, in order
    /// otherwise; a full zone is reset before it is written again).
    pub zonemode_zbd: bool,
    pub iodepth: usize,
    pub iodepth_batch_submit: usize,
    pub iodepth_batch_complete_min: usize,
    pub iodepth_batch_complete_max: usize,
    pub numjobs: usize,
    /// Run-time limit in ns (0: none).
    pub runtime_ns: u64,
    pub time_based: bool,
    pub ramp_time_ns: u64,
    /// Stop after this many I/Os (0: no limit).
    pub number_ios: u64,
    pub group_reporting: bool,
    pub randseed: u64,
    pub gtod_reduce: bool,
    /// Timestamps from the TSC (fio's clocksource=cpu) or clock_gettime;
    /// None: fio's default (the TSC when reliable).
    pub clocksource: Option<mqblk::ClockSource>,
    /// mqblk: submit each chunk of `iodepth_batch_submit` I/Os under one
    /// plug (default 1; 0 submits without plugging).
    pub plug: bool,
    /// mqblk: each I/O of a chunk under its own inner plug, as the kernel's
    /// direct-I/O path does (default 1).
    pub plug_per_io: bool,
    /// mqblk: writes are async (no SYNC flag), like page-cache writeback;
    /// by default they are sync, like O_DIRECT writes. Reads are always
    /// sync, as in the kernel.
    pub mqblk_async: bool,
    /// fio's `hipri`: I/O completed by polling (on the device's poll
    /// queues; without any, it completes like any other).
    pub hipri: bool,
    /// fio's `ioengine`, as far as it changes the job's loop: the sync
    /// engines (`psync`, `pvsync`, `pvsync2`, `sync`) submit one I/O and
    /// wait for it, so iodepth is 1 whatever was asked; the async ones
    /// (`libaio`, `io_uring`) keep iodepth. All run on the mqblk device.
    pub ioengine: String,
    /// fio's `prio` (0-7) and `prioclass` (1 RT, 2 BE, 3 IDLE).
    pub ioprio: mqblk::IoPrio,
    /// fio's `startdelay`: the job starts this late (ns).
    pub startdelay_ns: u64,
    /// fio's `exitall`: when this job finishes, every job stops.
    pub exitall: bool,
    /// fio's `filename`, `direct` and `registerfiles`: with a filename the
    /// device is `file:path=FILENAME,direct=D,registerfiles=R` (the
    /// io_uring driver), shared by every job.
    pub filename: Option<String>,
    /// fio's `verify=crc32c`: written blocks carry a checksum and are read
    /// back and checked when the job's writes are done (verify.rs).
    pub verify: bool,
    pub direct: bool,
    pub registerfiles: bool,
    /// fio's `fixedbufs`: the job's buffers are slots of a region
    /// registered with the device (`FixedBufs`; the file driver then uses
    /// io_uring's fixed-buffer opcodes).
    pub fixedbufs: bool,
    /// fio's `cpus_allowed`: the CPUs the job's thread may run on; with
    /// `cpus_allowed_policy=split` each clone of the job gets one of them.
    pub cpus_allowed: Option<super::cpus::CpuList>,
    pub cpus_allowed_split: bool,
    /// The options as given, for the JSON "job options" object.
    pub given: Vec<(String, String)>,
}

impl JobOptions {
    /// fio's defaults.
    fn defaults(name: &str) -> Self {
        Self {
            name: name.to_string(),
            rw: RwMode::Read,
            rwmixread: 50,
            bs_read: 4096,
            bs_write: 4096,
            size: None,
            offset: 0,
            offset_increment: 0,
            zonemode_zbd: false,
            iodepth: 1,
            iodepth_batch_submit: 1,
            iodepth_batch_complete_min: 1,
            iodepth_batch_complete_max: 0,
            numjobs: 1,
            runtime_ns: 0,
            time_based: false,
            ramp_time_ns: 0,
            number_ios: 0,
            group_reporting: false,
            randseed: 0x89,
            gtod_reduce: false,
            clocksource: None,
            plug: true,
            plug_per_io: true,
            mqblk_async: false,
            hipri: false,
            ioengine: "io_uring".to_string(),
            ioprio: mqblk::IoPrio::default(),
            startdelay_ns: 0,
            exitall: false,
            filename: None,
            verify: false,
            direct: false,
            registerfiles: true,
            fixedbufs: false,
            cpus_allowed: None,
            cpus_allowed_split: false,
            given: Vec::new(),
        }
    }

    /// Completion batch upper bound. As fio's option fix-up: unset (or
    /// below the minimum) it equals `iodepth_batch_complete_min`, so by
    /// default a job reaps one completion per call, like fio; both 0
    /// (fio's polling mode) reaps whatever is there, up to `iodepth`.
    pub fn complete_max(&self) -> usize {
        let (min, max) = (self.iodepth_batch_complete_min, self.iodepth_batch_complete_max);
        if min == 0 && max == 0 {
            return self.iodepth;
        }
        max.max(min).clamp(1, self.iodepth)
    }

    fn set(&mut self, key: &str, value: Option<&str>) -> Result<(), OptionError> {
        let v = || value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")));
        match key {
            "name" => self.name = v()?.to_string(),
            "rw" | "readwrite" => self.rw = RwMode::parse(v()?)?,
            "rwmixread" => self.rwmixread = parse_int(key, v()?, 0, 100)? as u32,
            "rwmixwrite" => self.rwmixread = 100 - parse_int(key, v()?, 0, 100)? as u32,
            "bs" | "blocksize" => {
                let v = v()?;
                let (r, w) = v.split_once(',').unwrap_or((v, v));
                self.bs_read = parse_size(key, r)?;
                self.bs_write = if w.is_empty() { self.bs_read } else { parse_size(key, w)? };
                if self.bs_read == 0 || self.bs_write == 0 {
                    return err(format!("{key}: block size must be positive, got '{v}'"));
                }
            }
            "size" => self.size = Some(parse_size(key, v()?)?),
            "offset" => self.offset = parse_size(key, v()?)?,
            "offset_increment" => self.offset_increment = parse_size(key, v()?)?,
            "zonemode" => {
                self.zonemode_zbd = match v()? {
                    "zbd" => true,
                    "none" => false,
                    other => return err(format!("zonemode={other} (accepted: none, zbd)")),
                }
            }
            "iodepth" => self.iodepth = parse_int(key, v()?, 1, 65536)? as usize,
            "iodepth_batch_submit" | "iodepth_batch" => {
                self.iodepth_batch_submit = parse_int(key, v()?, 0, 65536)? as usize
            }
            "iodepth_batch_complete_min" | "iodepth_batch_complete" => {
                self.iodepth_batch_complete_min = parse_int(key, v()?, 0, 65536)? as usize
            }
            "iodepth_batch_complete_max" => self.iodepth_batch_complete_max = parse_int(key, v()?, 0, 65536)? as usize,
            "numjobs" => self.numjobs = parse_int(key, v()?, 1, 4096)? as usize,
            "runtime" | "timeout" => self.runtime_ns = parse_time_ns(key, v()?)?,
            "time_based" => self.time_based = parse_flag(key, value)?,
            "ramp_time" => self.ramp_time_ns = parse_time_ns(key, v()?)?,
            "number_ios" => self.number_ios = parse_int(key, v()?, 0, u64::MAX)?,
            "group_reporting" => self.group_reporting = parse_flag(key, value)?,
            "randseed" => self.randseed = parse_int(key, v()?, 0, u64::MAX)?,
            "gtod_reduce" => self.gtod_reduce = parse_flag(key, value)?,
            "clocksource" => {
                use mqblk::ClockSource;
                self.clocksource = Some(match v()? {
                    "cpu" => ClockSource::Cpu,
                    "clock_gettime" | "gettimeofday" => ClockSource::ClockGettime,
                    other => {
                        return err(format!(
                            "clocksource: bad value '{other}' (accepted: cpu, clock_gettime, gettimeofday)"
                        ))
                    }
                })
            }
            "plug" => self.plug = parse_flag(key, value)?,
            "plug_per_io" => self.plug_per_io = parse_flag(key, value)?,
            "mqblk_async" => self.mqblk_async = parse_flag(key, value)?,
            "hipri" => self.hipri = parse_flag(key, value)?,
            "ioengine" => {
                let v = v()?;
                if !IOENGINES.contains(&v) {
                    return err(format!("ioengine: bad value '{v}' (accepted: {})", IOENGINES.join(", ")));
                }
                self.ioengine = v.to_string();
            }
            "prio" => self.ioprio.level = parse_int(key, v()?, 0, 7)? as u8,
            "prioclass" => {
                use mqblk::IoPrioClass;
                self.ioprio.class = match parse_int(key, v()?, 1, 3)? {
                    1 => IoPrioClass::Rt,
                    2 => IoPrioClass::Be,
                    _ => IoPrioClass::Idle,
                }
            }
            "startdelay" => self.startdelay_ns = parse_time_ns(key, v()?)?,
            "exitall" => self.exitall = parse_flag(key, value)?,
            "filename" => self.filename = Some(v()?.to_string()),
            "direct" => self.direct = parse_flag(key, value)?,
            "verify" => {
                self.verify = match v()? {
                    "0" | "none" => false,
                    "crc32c" | "crc32c-intel" => true,
                    other => return err(format!("verify={other} (accepted: crc32c, none)")),
                }
            }
            "registerfiles" => self.registerfiles = parse_flag(key, value)?,
            "cpus_allowed" => self.cpus_allowed = Some(super::cpus::CpuList::parse(key, v()?)?),
            "cpus_allowed_policy" => {
                self.cpus_allowed_split = match v()? {
                    "shared" => false,
                    "split" => true,
                    other => return err(format!("cpus_allowed_policy={other} (accepted: shared, split)")),
                }
            }
            // Options of fio's io_uring engine that mqblk cannot honour say so.
            "fixedbufs" => self.fixedbufs = parse_flag(key, value)?,
            "sqthread_poll" if parse_flag(key, value)? => {
                return err("sqthread_poll=1: the file driver submits from the clients' threads, it has no SQ \
                            polling thread; use sqthread_poll=0")
            }
            "sqthread_poll" => {}
            _ => return err(unknown_option(key, JOB_OPTIONS)),
        }
        if key != "name" {
            self.given.push((key.to_string(), value.unwrap_or("").to_string()));
        }
        Ok(())
    }

    /// The queue depth the job really uses: 1 with a sync engine.
    pub fn effective_iodepth(&self) -> usize {
        if SYNC_IOENGINES.contains(&self.ioengine.as_str()) {
            1
        } else {
            self.iodepth
        }
    }

    fn validate(&self) -> Result<(), OptionError> {
        if self.time_based && self.runtime_ns == 0 {
            return err(format!("job '{}': time_based needs a runtime", self.name));
        }
        Ok(())
    }
}

/// Options of `mqblk bench`'s command line only (not of job files).
const BENCH_OPTIONS: &[&str] = &["output-format", "stats"];

/// "unknown option 'KEY'", with the closest of `known` when one is near
/// enough to be a typo (Damerau-Levenshtein: a transposition counts one),
/// else every known option.
fn unknown_option(key: &str, known: &[&str]) -> String {
    let max_distance = (key.chars().count() / 3).max(1);
    let closest = known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(key, k), *k))
        .filter(|(d, _)| *d <= max_distance)
        .min_by_key(|(d, _)| *d);
    if let Some((_, k)) = closest {
        return format!("unknown option '{key}' (did you mean '{k}'?)");
    }
    let mut known = known.to_vec();
    known.sort_unstable();
    format!("unknown option '{key}' (known: {})", known.join(", "))
}

/// The unknown-option message of the command line, where mqblk's own
/// options are known too.
fn unknown_cli_option(key: &str) -> String {
    let known: Vec<&str> = JOB_OPTIONS.iter().chain(BENCH_OPTIONS).copied().collect();
    unknown_option(key, &known)
}

/// What `mqblk bench` was asked to run.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchPlan {
    pub jobs: Vec<JobOptions>,
    pub device: Option<String>,
    /// `plug_nesting=` and `sched=`: device options, added to the spec.
    pub plug_nesting: Option<String>,
    pub sched: Option<String>,
    pub json: bool,
    pub stats: bool,
    pub global_given: Vec<(String, String)>,
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

/// What parsing produced: the jobs, the global options as given, the device.
type Parsed = (Vec<JobOptions>, Vec<(String, String)>, Option<String>);

/// Collects options in order: `device` and `plug_nesting` are plan-level
/// (device options), the rest job options.
struct Collector {
    global: OptionList,
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
            for (k, v) in opts {
                job.set(k, v.as_deref())?;
            }
            job.validate()?;
            jobs.push(job);
        }
        let device = file_device(&jobs, self.device)?;
        Ok((jobs, global_given, device))
    }
}

/// The device of jobs that name a `filename` (fio's way): the io_uring
/// file driver, one for all jobs, so they must agree on it.
fn file_device(jobs: &[JobOptions], device: Option<String>) -> Result<Option<String>, OptionError> {
    let Some(first) = jobs.iter().find(|j| j.filename.is_some()) else { return Ok(device) };
    if device.is_some() {
        return err("--filename and --device both name the device: give one");
    }
    let key = |j: &JobOptions| (j.filename.clone(), j.direct, j.registerfiles);
    if jobs.iter().any(|j| key(j) != key(first)) {
        return err("jobs name different filename/direct/registerfiles: mqblk bench runs one device");
    }
    let path = first.filename.as_deref().unwrap_or_default();
    if path.contains(',') || path.contains(':') {
        return err(format!("filename={path}: a path with ',' or ':' cannot go into a device spec"));
    }
    // As fio's io_uring engine, each job reaps its own ring: one ring per
    // job thread, and no completion threads.
    let nr_jobs: usize = jobs.iter().map(|j| j.numjobs).sum();
    let mut spec = format!(
        "file:path={path},direct={},registerfiles={},reap=client,submit_queues={}",
        u8::from(first.direct),
        u8::from(first.registerfiles),
        nr_jobs.clamp(1, 64)
    );
    // Like fio, lay out a missing file at the job's size.
    if !std::path::Path::new(path).exists() {
        let size = jobs.iter().filter_map(|j| j.size.map(|s| j.offset + s)).max();
        let Some(size) = size else {
            return err(format!("filename={path} does not exist: give size= so it can be created"));
        };
        spec.push_str(&format!(",create=1,size={size}"));
    }
    Ok(Some(spec))
}

/// Parses `mqblk bench` arguments (everything after `bench`).
pub fn parse_bench_args(args: &[String]) -> Result<BenchPlan, OptionError> {
    let mut c = Collector { global: Vec::new(), jobs: Vec::new(), device: None, plug_nesting: None, sched: None };
    let mut json = false;
    let mut stats = false;
    let mut job_files = Vec::new();
    let mut any_job_option = false;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let Some(opt) = arg.strip_prefix("--") else {
            job_files.push(arg.clone());
            continue;
        };
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
            "output-format" => {
                let v = take_value(inline)?;
                json = match v.as_str() {
                    "json" => true,
                    "normal" => false,
                    _ => return err(format!("--output-format: bad value '{v}' (accepted: normal, json)")),
                };
            }
            "stats" => stats = true,
            "device" => c.device = Some(take_value(inline)?),
            "plug_nesting" => c.plug_nesting = Some(take_value(inline)?),
            "sched" => c.sched = Some(take_value(inline)?),
            "name" => {
                let v = take_value(inline)?;
                c.jobs.push((v, Vec::new()));
                any_job_option = true;
            }
            _ if JOB_OPTIONS.contains(&key.as_str()) => {
                c.add(&key, inline);
                any_job_option = true;
            }
            _ => return err(unknown_cli_option(&key)),
        }
    }
    for path in &job_files {
        let text = std::fs::read_to_string(path).map_err(|e| OptionError(format!("job file '{path}': {e}")))?;
        parse_job_file(&text, path, &mut c)?;
    }
    if c.jobs.is_empty() && !any_job_option && job_files.is_empty() {
        let (device, plug_nesting, sched) = (c.device.take(), c.plug_nesting.take(), c.sched.take());
        return Ok(BenchPlan {
            jobs: vec![default_job()],
            device,
            plug_nesting,
            sched,
            json,
            stats,
            global_given: Vec::new(),
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
    let (jobs, global_given, device) = c.finish()?;
    Ok(BenchPlan { jobs, device, plug_nesting, sched, json, stats, global_given })
}

/// Parses an INI job file into the collector: `[global]` then job sections.
fn parse_job_file(text: &str, path: &str, c: &mut Collector) -> Result<(), OptionError> {
    let mut in_global = false;
    let mut seen_section = false;
    for (lineno, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
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
        if !JOB_OPTIONS.contains(&key) {
            return err(format!("{}: {}", at(), unknown_option(key, JOB_OPTIONS)));
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
        assert!(plan.json);
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
        let mut c = Collector { global: Vec::new(), jobs: Vec::new(), device: None, plug_nesting: None, sched: None };
        parse_job_file(text, "t.fio", &mut c).unwrap();
        let (jobs, _, _) = c.finish().unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[0].bs_read, jobs[0].iodepth, jobs[0].time_based), (16384, 8, true));
        assert_eq!(jobs[1].rw, RwMode::Write);
        let mut c = Collector { global: Vec::new(), jobs: Vec::new(), device: None, plug_nesting: None, sched: None };
        let e = parse_job_file("[a]\nfoo=1\n", "t.fio", &mut c).unwrap_err();
        assert!(e.0.contains("t.fio:2") && e.0.contains("'foo'"), "{}", e.0);
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
}
