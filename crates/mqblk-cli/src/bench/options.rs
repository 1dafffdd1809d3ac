//! fio's job options: the option table (fio's names), the error type and
//! `JobOptions` with fio's defaults. One option's value is parsed by
//! setter.rs; the command line and job files by parse.rs.

use std::fmt;

use super::blocksize::{BlockSizeOptions, BLOCKSIZE_OPTIONS};
use super::buffers::{BufferOptions, BUFFER_OPTIONS};
use super::cmdprio::{CmdPrioOptions, CMDPRIO_OPTIONS};
use super::distribution::{RandomDistribution, DISTRIBUTION_OPTIONS};
use super::errors::{ErrorOptions, ERROR_OPTIONS};
use super::files::{SyncOptions, FILE_OPTIONS};
use super::latency::{LatencyOptions, LATENCY_OPTIONS};
use super::log::{LogOptions, LOG_OPTIONS};
use super::numa::{NumaOptions, NUMA_OPTIONS};
use super::shape::{ShapeOptions, SHAPE_OPTIONS};
use super::steadystate::{SteadyOptions, STEADY_OPTIONS};
use super::verify::{VerifyOptions, VERIFY_OPTIONS};
use super::zones::{ZoneOptions, ZONE_OPTIONS};

pub use super::parse::{parse_bench_args, BenchPlan};
pub use super::rw::{RwMode, RwModifier};

/// An option error: names the option and what was wrong (exit code 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError(pub String);

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OptionError {}

pub(super) fn err<T>(msg: impl Into<String>) -> Result<T, OptionError> {
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
    "io_size",
    "io_limit",
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
    "lat_percentiles",
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
    "exit_what",
    "filename",
    "direct",
    "registerfiles",
    "fixedbufs",
    "sqthread_poll",
    "device",
    "plug_nesting",
    "sched",
    "cpus_allowed",
    "cpus_allowed_policy",
    "read_iolog",
    "read_iolog_chunked",
    "write_iolog",
    "replay_no_stall",
    "replay_time_scale",
    "replay_redirect",
    "replay_align",
    "replay_scale",
    "description",
    "thread",
    "threads",
    "stonewall",
    "wait_on_prev",
    "new_group",
    "wait_for",
    "loops",
    "buffered",
    "directory",
    "filesize",
    "norandommap",
    "randrepeat",
    "random_generator",
    "allow_file_create",
    "fill_device",
    "fill_fs",
    "create_serialize",
];

/// fio options bench knows and refuses, each with why: what they ask of a
/// device, mqblk's devices do not have.
pub const REFUSED_OPTIONS: &[(&str, &str)] = &[
    ("fdp", FDP),
    ("fdp_pli", FDP),
    ("fdp_pli_select", FDP),
    ("dataplacement", FDP),
    ("plids", FDP),
    ("md_per_io_size", PI),
    ("pi_act", PI),
    ("pi_chk", PI),
    ("apptag", PI),
    ("apptag_mask", PI),
    ("atomic", "atomic writes (RWF_ATOMIC) need a device's atomic write limits, which mqblk's queues do not state"),
    ("sprandom", SPRANDOM),
    ("spr_op", SPRANDOM),
    ("spr_num_regions", SPRANDOM),
];
const FDP: &str = "NVMe flexible data placement: mqblk's devices have no placement identifiers";
const PI: &str = "NVMe protection information: mqblk's devices keep no per-block metadata";
const SPRANDOM: &str = "SPRandom preconditions an SSD's flash translation layer to its steady-state spread of invalid \
                        blocks (from the drive's over-provisioning); mqblk's devices have no flash translation layer \
                        to precondition";

/// The option groups that live in their own modules, each with its names.
const OPTION_GROUPS: &[&[&str]] = &[
    SHAPE_OPTIONS,
    LOG_OPTIONS,
    STEADY_OPTIONS,
    NUMA_OPTIONS,
    CMDPRIO_OPTIONS,
    ERROR_OPTIONS,
    LATENCY_OPTIONS,
    BLOCKSIZE_OPTIONS,
    DISTRIBUTION_OPTIONS,
    ZONE_OPTIONS,
    VERIFY_OPTIONS,
    BUFFER_OPTIONS,
    FILE_OPTIONS,
];

/// Whether `key` is a job option bench knows (or knows to refuse).
pub fn is_job_option(key: &str) -> bool {
    JOB_OPTIONS.contains(&key)
        || OPTION_GROUPS.iter().any(|group| group.contains(&key))
        || REFUSED_OPTIONS.iter().any(|(k, _)| *k == key)
}

/// An option group's settings from `(key, value)` pairs, each of which
/// must be the group's (the groups' unit tests).
#[cfg(test)]
pub(super) fn group_from<T: Default>(
    set: &[(&str, &str)],
    apply: impl Fn(&mut T, &str, Option<&str>) -> Result<bool, OptionError>,
) -> T {
    let mut group = T::default();
    for (k, v) in set {
        assert!(apply(&mut group, k, Some(v)).unwrap(), "{k} is not one of the group's options");
    }
    group
}

/// Every job option bench knows.
pub fn job_options() -> Vec<&'static str> {
    JOB_OPTIONS.iter().chain(OPTION_GROUPS.iter().copied().flatten()).copied().collect()
}

/// `ioengine` values accepted: the engines mqblk's client stands in for.
/// The sync ones run one I/O at a time; the async ones (and fio's `null`
/// engine, whose role the device given plays) keep iodepth.
pub const IOENGINES: &[&str] = &["io_uring", "libaio", "posixaio", "null", "pvsync2", "pvsync", "psync", "sync"];
const SYNC_IOENGINES: &[&str] = &["pvsync2", "pvsync", "psync", "sync"];

/// One job's options after defaults and inheritance from `[global]`.
#[derive(Debug, Clone, PartialEq)]
pub struct JobOptions {
    pub name: String,
    pub rw: RwMode,
    pub rwmixread: u32,
    pub bs_read: u64,
    pub bs_write: u64,
    /// The third of `bs=R,W,T`: the size of a trim.
    pub bs_trim: u64,
    /// Bytes of I/O per job (None: the device size minus offset).
    pub size: Option<u64>,
    /// fio's `io_size` (alias `io_limit`): bytes to transfer before the
    /// job ends (None: `size`); beyond the region, the job loops over it.
    pub io_size: Option<u64>,
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
    /// fio's `lat_percentiles`: total-latency percentiles too (default 0,
    /// as fio: completion-latency percentiles only).
    pub lat_percentiles: bool,
    /// Timestamps from the TSC (fio's clocksource=cpu) or clock_gettime;
    /// None: fio's default (the TSC when reliable).
    pub clocksource: Option<mqblk::clock::ClockSource>,
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
    /// fio's `exitall`: when this job finishes, the jobs `exit_what`
    /// names stop.
    pub exitall: bool,
    pub exit_what: ExitWhat,
    /// fio's `filename`, `direct` and `registerfiles`: with a filename the
    /// device is `file:path=FILENAME,direct=D,registerfiles=R` (the
    /// io_uring driver), shared by every job.
    pub filename: Option<String>,
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
    /// fio's `read_iolog` (replay.rs): the job replays this trace instead
    /// of generating I/O, as `replay` says.
    pub read_iolog: Option<String>,
    pub replay: ReplayOptions,
    /// fio's `write_iolog`: a version-3 iolog of the I/O the job issues.
    pub write_iolog: Option<String>,
    /// fio's `description`: free text, shown in the report.
    pub description: Option<String>,
    /// fio's `stonewall` (alias `wait_on_prev`): start after every job
    /// before this one has exited (order.rs).
    pub stonewall: bool,
    /// fio's `new_group`: start a new reporting group.
    pub new_group: bool,
    /// fio's `wait_for`: start once every clone of this job has exited.
    pub wait_for: Option<String>,
    /// fio's group id (order.rs), set once every job is parsed.
    pub groupid: u32,
    /// fio's `loops`: the job's I/O (its `size` or `io_size`) this many
    /// times over (a time-based job ignores it).
    pub loops: u64,
    /// fio's `directory`: where the job's files are (with `--device`, the
    /// device stands for every file).
    pub directory: Option<String>,
    /// fio's `filesize`: each file's size; the job's size when `size` is
    /// not given.
    pub filesize: Option<u64>,
    /// The `:N` of `rw=` (fio's `rw_sequencer` modifier): for a
    /// sequential pattern, bytes added to the offset after each I/O
    /// (negative: backwards); for a random one, I/Os issued in sequence
    /// from each random offset.
    pub rw_modifier: RwModifier,
    /// fio's `norandommap`: random offsets drawn independently, blocks
    /// repeating; by default (the random map) each block once per pass.
    pub norandommap: bool,
    /// fio's `randrepeat` (default 1): the same offsets every run; 0
    /// seeds from the clock.
    pub randrepeat: bool,
    /// fio's `random_generator=lfsr`: every block once per pass whatever
    /// `norandommap` says (tausworthe, tausworthe64: the default draws).
    pub random_lfsr: bool,
    /// fio's `allow_file_create` (default 1): without it, a job's missing
    /// file is an error instead of being laid out.
    pub allow_file_create: bool,
    /// fio's rates and think time (shape.rs).
    pub shape: ShapeOptions,
    /// fio's latency, bandwidth and IOPS logs (log.rs).
    pub logs: LogOptions,
    /// fio's steady-state detection (steadystate.rs).
    pub steady: SteadyOptions,
    /// fio's `numa_cpu_nodes` and `numa_mem_policy` (numa.rs).
    pub numa: NumaOptions,
    /// fio's per-command priorities (cmdprio.rs).
    pub cmdprio: CmdPrioOptions,
    /// fio's error policy (errors.rs).
    pub errors: ErrorOptions,
    /// fio's latency target and limit (latency.rs).
    pub latency: LatencyOptions,
    /// fio's write-buffer contents (buffers.rs).
    pub buffers: BufferOptions,
    /// fio's flushes and file-layout options (files.rs).
    pub sync: SyncOptions,
    /// Sizes and offsets given in percent of the device (percent.rs).
    pub percents: super::percent::SizePercents,
    /// fio's `bsrange`, `bssplit`, `blockalign` ... (blocksize.rs).
    pub block_sizes: BlockSizeOptions,
    /// fio's `random_distribution` (distribution.rs).
    pub distribution: RandomDistribution,
    /// fio's zone options and sizes in zones (zones.rs, zbd.rs).
    pub zones: ZoneOptions,
    /// fio's verify options (verify/).
    pub verify: VerifyOptions,
    /// fio's `fill_device` (alias `fill_fs`): without `size`, the job's
    /// region runs to the device's end (`filesize` aside).
    pub fill_device: bool,
    /// The options as given, for the JSON "job options" object.
    pub given: Vec<(String, String)>,
}

/// fio's `exit_what`: which jobs an `exitall` job's end stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitWhat {
    /// The running jobs of its reporting group (fio's default).
    Group,
    /// Every running job; the run goes on with the next stonewalled
    /// phase.
    Stonewall,
    /// Every job: the run ends.
    All,
}

impl JobOptions {
    /// fio's defaults.
    pub(super) fn defaults(name: &str) -> Self {
        Self {
            name: name.to_string(),
            rw: RwMode::Read,
            rwmixread: 50,
            bs_read: 4096,
            bs_write: 4096,
            bs_trim: 4096,
            size: None,
            io_size: None,
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
            lat_percentiles: false,
            clocksource: None,
            plug: true,
            plug_per_io: true,
            mqblk_async: false,
            hipri: false,
            ioengine: "io_uring".to_string(),
            ioprio: mqblk::IoPrio::default(),
            startdelay_ns: 0,
            exitall: false,
            exit_what: ExitWhat::Group,
            filename: None,
            direct: false,
            registerfiles: true,
            fixedbufs: false,
            cpus_allowed: None,
            cpus_allowed_split: false,
            read_iolog: None,
            replay: ReplayOptions::default(),
            write_iolog: None,
            description: None,
            stonewall: false,
            new_group: false,
            wait_for: None,
            groupid: 0,
            loops: 1,
            directory: None,
            filesize: None,
            rw_modifier: RwModifier::None,
            norandommap: false,
            randrepeat: true,
            allow_file_create: true,
            random_lfsr: false,
            shape: ShapeOptions::default(),
            logs: LogOptions::default(),
            steady: SteadyOptions::default(),
            numa: NumaOptions::default(),
            cmdprio: CmdPrioOptions::default(),
            errors: ErrorOptions::default(),
            latency: LatencyOptions::default(),
            buffers: BufferOptions::default(),
            sync: SyncOptions::default(),
            percents: Default::default(),
            block_sizes: BlockSizeOptions::default(),
            distribution: RandomDistribution::default(),
            zones: ZoneOptions::default(),
            verify: VerifyOptions::default(),
            fill_device: false,
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

    /// The queue depth the job really uses: 1 with a sync engine.
    pub fn effective_iodepth(&self) -> usize {
        if SYNC_IOENGINES.contains(&self.ioengine.as_str()) {
            1
        } else {
            self.iodepth
        }
    }

    /// Whether the job runs the job loop's copy that shapes or logs each
    /// I/O (job.rs' `SHAPED`).
    /// Trims run there too (trim.rs), so the synthetic copy never tests
    /// for them.
    pub fn shaped(&self) -> bool {
        self.write_iolog.is_some()
            || self.shape.any()
            || self.logs.any()
            || self.cmdprio.any()
            || self.latency.any()
            || self.buffers.refills()
            || self.sync.any()
            || self.verify.enabled()
            || self.zonemode_zbd
            || self.rw.trims()
    }

    /// Whether the job may read and write: as its mix says, or both when
    /// it replays a trace.
    pub fn directions(&self) -> (bool, bool) {
        let read_pct = self.rw.read_pct(self.rwmixread);
        let replay = self.read_iolog.is_some();
        let trims_only = matches!(self.rw, RwMode::Trim | RwMode::RandTrim);
        (replay || read_pct > 0, replay || (read_pct < 100 && !trims_only))
    }

    pub(super) fn validate(&self) -> Result<(), OptionError> {
        if self.time_based && self.runtime_ns == 0 {
            return err(format!("job '{}': time_based needs a runtime", self.name));
        }
        self.shape.validate(&self.name)?;
        self.logs.validate(&self.name, self.gtod_reduce)?;
        self.steady.validate(&self.name)?;
        self.numa.validate(&self.name)?;
        self.cmdprio.validate(&self.name)?;
        self.latency.validate(&self.name, self.gtod_reduce)?;
        self.validate_block_sizes()?;
        self.validate_zones()?;
        super::trim::validate(self)?;
        super::verify::resolve(self)?;
        self.validate_iolog()
    }

    /// read_iolog and write_iolog name one file per job: one clone, and
    /// none of the options that shape generated I/O.
    fn validate_iolog(&self) -> Result<(), OptionError> {
        if self.read_iolog.is_none() {
            return match (&self.write_iolog, self.numjobs) {
                (Some(_), n) if n > 1 => {
                    err(format!("job '{}': write_iolog with numjobs={n}: give each job its own log", self.name))
                }
                _ => Ok(()),
            };
        }
        let conflict = [
            (self.numjobs > 1, "numjobs > 1"),
            (self.verify.enabled(), "verify"),
            (self.zonemode_zbd, "zonemode=zbd"),
            (self.fixedbufs, "fixedbufs"),
        ];
        match conflict.iter().find(|(bad, _)| *bad) {
            Some((_, what)) => err(format!("job '{}': read_iolog with {what} is not supported", self.name)),
            None => Ok(()),
        }
    }
}

/// How `read_iolog` replays: the `replay_*` options, with fio's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayOptions {
    /// `read_iolog_chunked`: read the trace a chunk at a time.
    pub chunked: bool,
    /// `replay_no_stall`: issue as fast as the queue allows, in order.
    pub no_stall: bool,
    /// `replay_time_scale`: percent of the trace's rate (100).
    pub time_scale_pct: u64,
    /// `replay_redirect`: the trace's files are all this one (mqblk replays
    /// every file onto its one device anyway; with this set, re-adding and
    /// re-opening a file are ignored, as in fio).
    pub redirect: Option<String>,
    /// `replay_align`: offsets rounded down to this power of 2 (0: none).
    pub align_bytes: u64,
    /// `replay_scale`: offsets divided by this (1).
    pub scale: u64,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self { chunked: false, no_stall: false, time_scale_pct: 100, redirect: None, align_bytes: 0, scale: 1 }
    }
}

/// "unknown option 'KEY'", with the closest of `known` when one is near
/// enough to be a typo (Damerau-Levenshtein: a transposition counts one),
/// else every known option.
pub(super) fn unknown_option(key: &str, known: &[&str]) -> String {
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
