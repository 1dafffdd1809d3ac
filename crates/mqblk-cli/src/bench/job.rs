//! One job thread: fio's I/O loop over an mqblk client.
//!
//! The loop fills the queue to `iodepth` in chunks of
//! `iodepth_batch_submit`, each chunk of more than two I/Os under one plug
//! and each of its I/Os under an inner plug (`plug`, `plug_per_io`: as an
//! io_submit call and the kernel's direct-I/O path do, so adjacent I/Os of
//! a chunk merge), then reaps at least `iodepth_batch_complete_min`
//! (at least one) and at most `iodepth_batch_complete_max` completions
//! (job/complete.rs), like fio's `do_io`; job/submit.rs has the
//! submission side. Every in-flight I/O owns one slot (its `user_data`)
//! with its buffer and timestamps, allocated before the run: nothing is
//! allocated per I/O.
//!
//! A job with `read_iolog` takes each I/O (direction, offset, length) and
//! its time from the trace (replay.rs) instead of its pattern, and ends
//! with the trace (job/replayed.rs); with `write_iolog`, each I/O is
//! logged as it is issued (iolog.rs). Each is a copy of the loop of its
//! own (`REPLAY`, `SHAPED`), as timing is (`TIMED`): the synthetic loop
//! without a log tests neither per I/O, and its slots carry nothing for
//! them.
//!
//! Timing (unless `gtod_reduce`): one clock read per I/O at issue; the next
//! issue's read closes the previous I/O's submission latency (they are back
//! to back), one read closes each chunk, and one read per reap stamps all of
//! its completions.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering};

use crossbeam_utils::CachePadded;
use mqblk::clock::Clock;
use mqblk::{Bio, Buf, Client, Device, ReqFlags};

use super::buffers::BufferFiller;
use super::cmdprio::CmdPrio;
use super::errors::ErrorKind;
use super::files::Syncer;
use super::flow::FlowMember;
use super::iolog::IologWriter;
use super::job_setup::{buffer_sizes, job_depth, job_region, new_iolog_writer, new_verifier, new_zbd, slot_buffers};
use super::latency::LatencyTarget;
use super::log::Logs;
use super::options::JobOptions;
use super::pattern::Pattern;
use super::replay::OpenTrace;
use super::shape::{Pacer, Think};
use super::start::StartGate;
pub use super::stats::JobResult;
use super::stats::{Dir, DirStats, Rusage};
use super::trim::{self, Trims};
use super::verify::Verifier;
use super::zbd::{SharedZones, ZbdJob};

/// The kernel's io_submit plugs only batches above this many I/Os (and
/// io_uring likewise, `max_ios > 2`).
const AIO_PLUG_THRESHOLD: usize = 2;

pub const PHASE_RAMP: u8 = 0;
pub const PHASE_RUN: u8 = 1;
pub const PHASE_STOP: u8 = 2;

/// A job's run control, shared with the supervisor: its phase, and the
/// run's start gate (start.rs), which every job passes before its clock
/// starts.
#[derive(Debug)]
pub struct Control<'g> {
    pub phase: AtomicU8,
    pub start: &'g StartGate,
    /// The device's zones, shared by the phase's `zonemode=zbd` jobs.
    pub zones: Option<std::sync::Arc<SharedZones>>,
}

/// A job's progress, published once per loop iteration for the progress
/// bar and the bandwidth samples.
#[derive(Debug, Default)]
pub struct Live {
    /// Counted by the start gate (start.rs): set up, or failed before.
    pub arrived: AtomicBool,
    /// Set/up is over (buffers allocated, startdelay slept): the job's
    /// ramp and runtime count from here, as in fio (allocating 256 MiB of
    /// buffers in a debug build took the whole 1 s runtime of an
    /// experiment cell, which then ran no I/O).
    pub ready: AtomicBool,
    pub ios: CachePadded<AtomicU64>,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub trim_bytes: AtomicU64,
    pub measuring: AtomicBool,
    pub done: AtomicBool,
    /// The job thread's id (gettid; 0 until it starts), so the supervisor
    /// can tell its CPU time from the device's threads'.
    pub tid: AtomicI32,
}

mod complete;
mod replayed;
mod shaped;
mod submit;
mod verifying;

use replayed::ReplaySource;

/// An I/O in flight. A replayed I/O's length is kept beside it
/// (`ReplaySource`), so that the synthetic loop's slots stay this small.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    issue_ns: u64,
    slat_ns: u64,
    offset: u64,
    /// The I/O's length (sizes vary: blocksize.rs, zbd.rs).
    len_bytes: u32,
    dir: Dir,
    /// The I/O's priority (the job's, or cmdprio's pick), for log_prio:
    /// it fits in the padding after `dir`.
    ioprio: mqblk::IoPrio,
}

/// Runs one job to completion on the calling thread; `trace` is the
/// trace it replays (`read_iolog`, opened by `job_setup::new_replay`).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_job(
    opts: &JobOptions,
    dev: &Device,
    fixed: Option<&mqblk::FixedBufs>,
    clock: Clock,
    job_index: usize,
    ctrl: &Control,
    live: &Live,
    trace: Option<OpenTrace>,
) -> Result<JobResult, String> {
    // A trim job's reads and writes are of its trim's size (trim.rs).
    let opts = &*trim::loop_options(opts);
    let region = job_region(opts, dev, job_index)?;
    // Two copies of the loop, with and without clock reads (gtod_reduce),
    // so that neither tests the choice per I/O.
    if opts.gtod_reduce {
        run_source::<false>(opts, dev, fixed, clock, job_index, ctrl, live, region, trace)
    } else {
        run_source::<true>(opts, dev, fixed, clock, job_index, ctrl, live, region, trace)
    }
}

/// `run_job` for `TIMED`: a copy of the loop for each source of I/Os (the
/// pattern, or the trace it replays) with and without `write_iolog`, so
/// that none tests either per I/O.
#[allow(clippy::too_many_arguments)]
fn run_source<const TIMED: bool>(
    opts: &JobOptions,
    dev: &Device,
    fixed: Option<&mqblk::FixedBufs>,
    clock: Clock,
    job_index: usize,
    ctrl: &Control,
    live: &Live,
    region: (u64, u64),
    trace: Option<OpenTrace>,
) -> Result<JobResult, String> {
    match (trace.is_some(), opts.shaped()) {
        (false, false) => {
            run_loop::<TIMED, false, false>(opts, dev, fixed, clock, job_index, ctrl, live, region, trace)
        }
        (false, true) => run_loop::<TIMED, false, true>(opts, dev, fixed, clock, job_index, ctrl, live, region, trace),
        (true, false) => run_loop::<TIMED, true, false>(opts, dev, fixed, clock, job_index, ctrl, live, region, trace),
        (true, true) => run_loop::<TIMED, true, true>(opts, dev, fixed, clock, job_index, ctrl, live, region, trace),
    }
}

/// One copy of the loop: `TIMED` (not `gtod_reduce`), `REPLAY` (`trace`
/// is Some), `SHAPED` (`write_iolog`, fio's logs, rates, think time or trims).
#[allow(clippy::too_many_arguments)]
fn run_loop<const TIMED: bool, const REPLAY: bool, const SHAPED: bool>(
    opts: &JobOptions,
    dev: &Device,
    fixed: Option<&mqblk::FixedBufs>,
    clock: Clock,
    job_index: usize,
    ctrl: &Control,
    live: &Live,
    (offset, region_len): (u64, u64),
    trace: Option<OpenTrace>,
) -> Result<JobResult, String> {
    let depth = job_depth(opts, trace.as_ref());
    let zones = ctrl.zones.clone();
    let mut io = IoState::new(opts, dev, (fixed, zones), depth, job_index, (offset, region_len), trace)?;
    debug_assert_eq!(io.replay.is_some(), REPLAY);
    debug_assert_eq!(opts.shaped(), SHAPED);
    let job = JobLoop::<TIMED, REPLAY, SHAPED>::new(opts, clock, live, ctrl, depth, region_len);
    let mut progress = Progress {
        pattern: Pattern::new(opts, device_geometry(dev), job_index, offset, region_len)?,
        issued_bytes: 0,
        issued_ios: 0,
        total_ios: 0,
        error: 0,
        first_error: 0,
        lat_done: false,
        lat_reset_due: false,
        flush_due: false,
        measuring: false,
        source_done: false,
        paced: None,
        held_direction: None,
        think_due: false,
        trimmed_at: None,
        verify_due: false,
    };
    let mut client = dev.client_with_capacity(job.depth);
    ctrl.start.arrive_and_wait(&live.arrived);
    // fio's startdelay counts from the run's start.
    if opts.startdelay_ns > 0 && !start_delay(opts.startdelay_ns, ctrl) {
        return Ok(JobResult::empty());
    }
    job.start(ctrl, &mut io, &mut progress);
    if opts.verify.only && io.verifier.as_ref().is_some_and(|v| v.writes()) {
        job.dry_run(&mut io, &mut progress); // fio's verify_only: no writes
    } else {
        job.run(&mut client, ctrl, &mut io, &mut progress)?;
    }
    job.finish(client, io, &progress)
}

/// One job's I/O loop: fio's `do_io`. Its settings, fixed for the run,
/// are read through `&self`; what changes per I/O is split in two, passed
/// by `&mut`: `IoState` (slots, buffers, stats: handed to calls outside
/// the loop) and `Progress` (the pattern and counters: touched only by
/// the loop's inlined steps, so they stay in registers). Every step is
/// inlined into `run`. `TIMED`: clock reads per I/O (not `gtod_reduce`);
/// `REPLAY`: the I/Os come from a trace (`read_iolog`), not the pattern;
/// `SHAPED`: each I/O may be logged (`write_iolog`, log.rs), paced or
/// followed by think time (shape.rs), or be a trim (trim.rs).
struct JobLoop<'a, const TIMED: bool, const REPLAY: bool, const SHAPED: bool> {
    opts: &'a JobOptions,
    clock: Clock,
    live: &'a Live,
    ctrl: &'a Control<'a>,
    depth: usize,
    /// I/Os submitted per chunk (`iodepth_batch_submit`, 0: `iodepth`).
    batch: usize,
    complete_min: usize,
    complete_max: usize,
    /// Total-latency histogram (`lat_percentiles`).
    lat_hist: bool,
    io_limit_bytes: u64,
    io_limit_count: u64,
    hipri: ReqFlags,
    write_flags: ReqFlags,
    /// I/O sizes vary: each buffer is cut to its I/O.
    sizes_vary: bool,
    /// Each direction's block size, by `Dir` (trims' only: reads' and
    /// writes' come from the pattern, blocksize.rs).
    bs: [u64; 3],
    /// Whether the job trims (only the `SHAPED` loop reads it).
    trims: Trims,
}

/// Per-I/O slots and buffers, allocated before the run, and what the job
/// measured.
struct IoState {
    /// `zonemode=zbd`: the job's zones (zbd.rs).
    zbd: Option<ZbdJob>,
    verifier: Option<Verifier>,
    /// `read_iolog`: the trace the job replays, and the length of each
    /// slot's I/O.
    replay: Option<ReplaySource>,
    /// `write_iolog`: the log of what the job issues.
    iolog: Option<IologWriter>,
    /// fio's rate limits and think time (shape.rs), and its logs (log.rs).
    pacer: Option<Pacer>,
    think: Option<Think>,
    logs: Option<Logs>,
    /// fio's flow control (flow.rs): the job's membership of its flow.
    flow: Option<FlowMember>,
    /// fio's per-command priorities (cmdprio.rs).
    cmdprio: Option<CmdPrio>,
    /// Each write's contents when they are refilled (buffers.rs).
    filler: Option<BufferFiller>,
    /// fio's fsync, end_fsync and sync on the device (files.rs).
    syncer: Option<Syncer>,
    /// fio's latency target's depth search and limit (latency.rs).
    lat_target: Option<LatencyTarget>,
    /// The device's (capacity, logical block size), bytes: a pattern's
    /// (verify's replay of the job's writes makes one afresh).
    geometry: (u64, u64),
    /// Indexed by an I/O's `user_data`.
    slots: Vec<Slot>,
    read_bufs: Vec<Option<Buf>>,
    write_bufs: Vec<Option<Buf>>,
    /// Slots not in flight.
    free: Vec<u32>,
    /// Each direction's measurements, indexed by `Dir`: one array (not
    /// fields) so that accounting selects its base address once.
    stats: [DirStats; 3],
    start_ns: u64,
    start_ru: Rusage,
    /// When the job started (not reset by a ramp): its rates' time base.
    shape_epoch_ns: u64,
    /// When the job started measuring, ms since the Unix epoch.
    start_epoch_ms: u64,
}

/// Where the job is: its offset pattern and counts.
struct Progress {
    pattern: Pattern,
    issued_bytes: u64,
    issued_ios: u64,
    total_ios: u64,
    /// The error that ends the job's I/O (0: none).
    error: i32,
    /// The first error, even one the job went past (`continue_on_error`).
    first_error: i32,
    /// The latency target's search is over (`SHAPED` only).
    lat_done: bool,
    /// Its final window starts once the I/O in flight is in: the
    /// statistics start again then (`SHAPED` only).
    lat_reset_due: bool,
    /// `fsync=N`: a flush once the I/O in flight is in (`SHAPED` only).
    flush_due: bool,
    measuring: bool,
    /// The replayed trace is over (read only by the `REPLAY` loop).
    source_done: bool,
    /// The `SHAPED` loop's stalls: until when (job ns) the rate holds the
    /// next I/O back and whether the I/O in flight is waited for first;
    /// the direction it was chosen for (kept past the stall, so the mix
    /// holds); a think time due.
    paced: Option<(u64, bool)>,
    held_direction: Option<bool>,
    think_due: bool,
    /// A trimwrite's trim whose write is due next: its offset.
    trimmed_at: Option<u64>,
    /// `verify_backlog` blocks written since the last check.
    verify_due: bool,
}

impl IoState {
    /// fio's job setup: the zones and verifier, the log, and every slot's
    /// buffers (for a replay, of the trace's largest transfers).
    fn new(
        opts: &JobOptions,
        dev: &Device,
        (fixed, zones): (Option<&mqblk::FixedBufs>, Option<std::sync::Arc<SharedZones>>),
        depth: usize,
        job_index: usize,
        (offset, region_len): (u64, u64),
        trace: Option<OpenTrace>,
    ) -> Result<Self, String> {
        let read_pct = opts.rw.read_pct(opts.rwmixread);
        let zbd = new_zbd(opts, zones, job_index, (offset, region_len))?;
        let verifier = new_verifier(opts, (offset, region_len), depth, job_index, dev.driver_name())?;
        let (replay, trace) = trace.unzip();
        let sizes = buffer_sizes(opts, read_pct, trace.as_ref());
        let replay = replay.map(|r| ReplaySource::new(r, depth));
        let (read_bufs, write_bufs) = slot_buffers(fixed, depth, sizes, (&opts.buffers, job_index));
        let iolog = new_iolog_writer(opts, opts.filename.as_deref().unwrap_or(dev.driver_name()))?;
        let (reads, writes) = opts.directions();
        let seed = opts.randseed ^ (job_index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let pacer = Pacer::new(&opts.shape, [opts.bs_read, opts.bs_write], reads && writes, seed);
        let logs = Logs::new(&opts.logs, &opts.name, job_index + 1)?;
        Ok(Self {
            zbd,
            verifier,
            replay,
            iolog,
            pacer,
            think: Think::new(&opts.shape),
            logs,
            cmdprio: CmdPrio::new(&opts.cmdprio, seed ^ 0xc3d0),
            syncer: Syncer::new(&opts.sync),
            filler: BufferFiller::new(&opts.buffers, seed ^ 0xb0f, opts.randseed, region_len / opts.bs_write.max(1)),
            lat_target: LatencyTarget::new(&opts.latency, depth),
            flow: (opts.shape.flow_weight > 0).then(|| FlowMember::join(opts.shape.flow_id, opts.shape.flow_weight)),
            geometry: device_geometry(dev),
            slots: vec![Slot::default(); depth],
            read_bufs,
            write_bufs,
            free: (0..depth as u32).rev().collect(),
            stats: Default::default(),
            start_ns: 0,
            start_ru: Rusage::default(),
            shape_epoch_ns: 0,
            start_epoch_ms: 0,
        })
    }
}

impl<'a, const TIMED: bool, const REPLAY: bool, const SHAPED: bool> JobLoop<'a, TIMED, REPLAY, SHAPED> {
    fn new(
        opts: &'a JobOptions,
        clock: Clock,
        live: &'a Live,
        ctrl: &'a Control<'a>,
        depth: usize,
        region_len: u64,
    ) -> Self {
        // Writes are sync (O_DIRECT) unless the job is async (writeback).
        let hipri = if opts.hipri { ReqFlags::HIPRI } else { ReqFlags::NONE };
        let write_flags = if opts.mqblk_async { ReqFlags::NONE } else { ReqFlags::SYNC } | hipri;
        Self {
            opts,
            clock,
            live,
            ctrl,
            depth,
            // fio: iodepth_batch_submit=0 means iodepth.
            batch: if opts.iodepth_batch_submit == 0 { depth } else { opts.iodepth_batch_submit },
            complete_min: opts.iodepth_batch_complete_min.max(1),
            complete_max: opts.complete_max(),
            lat_hist: opts.lat_percentiles,
            // A replay ends with its trace (fio: its size is the trace's).
            // fio's `loops`: the job's bytes that many times over.
            io_limit_bytes: if opts.time_based || REPLAY {
                u64::MAX
            } else {
                opts.io_size.unwrap_or(region_len).saturating_mul(opts.loops)
            },
            io_limit_count: if opts.number_ios == 0 { u64::MAX } else { opts.number_ios },
            hipri,
            write_flags,
            sizes_vary: !opts.one_block_size() || opts.zonemode_zbd,
            bs: [opts.bs_read, opts.bs_write, opts.bs_trim],
            trims: Trims::of(opts),
        }
    }

    /// Starts the clocks; measuring from now unless the run is ramping.
    fn start(&self, ctrl: &Control, io: &mut IoState, p: &mut Progress) {
        p.measuring = ctrl.phase.load(Ordering::Acquire) != PHASE_RAMP;
        io.start_ns = self.clock.now_ns();
        io.shape_epoch_ns = io.start_ns;
        io.start_epoch_ms = epoch_ms();
        io.start_ru = Rusage::thread_now();
        if let Some(replay) = io.replay.as_mut() {
            replay.trace.start();
        }
        self.live.measuring.store(p.measuring, Ordering::Release);
        self.live.ready.store(true, Ordering::Release);
    }

    /// fio's `do_io`: fill the queue, reap, until the job's limits or the
    /// run's end, then wait out what is in flight. Inlined into `run_job`,
    /// so that the job's state is in `run_job`'s frame (addressed from the
    /// stack pointer or kept in registers, as when the loop was one
    /// function) rather than behind pointers.
    #[inline(always)]
    fn run(&self, client: &mut Client, ctrl: &Control, io: &mut IoState, p: &mut Progress) -> Result<(), String> {
        loop {
            let phase = ctrl.phase.load(Ordering::Acquire);
            if !p.measuring && phase != PHASE_RAMP {
                self.end_ramp(io, p);
            }
            let can_issue = phase != PHASE_STOP && p.error == 0 && self.below_limits(p);
            if can_issue {
                self.fill_queue(client, io, p)?;
            }
            if SHAPED && (p.paced.is_some() || p.think_due) {
                self.stall(client, ctrl, io, p)?;
                continue;
            }
            let in_flight = client.in_flight();
            if in_flight == 0 {
                if can_issue {
                    continue;
                }
                break;
            }
            self.reap(client, in_flight, io, p)?;
            self.publish(io, p);
            if SHAPED && p.verify_due {
                self.backlog_check(client, io, p)?;
            }
        }
        Ok(())
    }

    /// Ramp over: forget what was measured, start the clock now.
    #[cold]
    fn end_ramp(&self, io: &mut IoState, p: &mut Progress) {
        io.stats = Default::default();
        p.total_ios = 0;
        p.measuring = true;
        io.start_ns = self.clock.now_ns();
        io.start_epoch_ms = epoch_ms();
        io.start_ru = Rusage::thread_now();
        self.live.measuring.store(true, Ordering::Release);
    }

    /// The job may issue more: below `size` (unless `time_based`) and
    /// `number_ios`, and before the end of a replayed trace.
    #[inline(always)]
    fn below_limits(&self, p: &Progress) -> bool {
        p.issued_bytes < self.io_limit_bytes
            && p.issued_ios < self.io_limit_count
            && !((REPLAY || SHAPED) && p.source_done)
            && !(SHAPED && p.lat_done)
    }

    /// Publishes progress for the progress bar and bandwidth samples.
    #[inline(always)]
    fn publish(&self, io: &IoState, p: &Progress) {
        self.live.ios.store(p.total_ios, Ordering::Relaxed);
        self.live.read_bytes.store(io.stats[0].bytes, Ordering::Relaxed);
        self.live.write_bytes.store(io.stats[1].bytes, Ordering::Relaxed);
        if SHAPED {
            // Only the SHAPED loop trims (trim.rs).
            self.live.trim_bytes.store(io.stats[2].bytes, Ordering::Relaxed);
        }
    }

    /// Stops the clocks, verifies (fio does so after the job's writes,
    /// outside its measurements) and gathers the result.
    fn finish(&self, mut client: Client, mut io: IoState, p: &Progress) -> Result<JobResult, String> {
        let elapsed_ns = self.clock.now_ns() - io.start_ns;
        let rusage = Rusage::thread_now().since(&io.start_ru);
        if let Some(log) = io.iolog.take() {
            log.finish().map_err(|e| format!("job '{}': {e}", self.opts.name))?;
        }
        if let Some(logs) = io.logs.take() {
            logs.finish(elapsed_ns).map_err(|e| format!("job '{}': log: {e}", self.opts.name))?;
        }
        if io.syncer.as_ref().is_some_and(|s| s.flush_at_end()) && p.error == 0 {
            // fio's end_fsync: the job's writes are all in (it waited for
            // its I/O), then one flush.
            client.submit_and_wait(Bio::flush()).map_err(|e| format!("job '{}': end_fsync: {e}", self.opts.name))?;
        }
        let (end_error, verify) = self.verify_end(&mut client, &mut io, p)?;
        // A verify failure the error policy goes past (continue_on_error=
        // verify) leaves the job without error, counted in total_err.
        let past = p.error == 0 && end_error != 0 && self.opts.errors.continues(ErrorKind::Verify, end_error);
        let error = if past { 0 } else { end_error };
        let first_error = if p.first_error != 0 { p.first_error } else { end_error };
        let [read, write, trim] = io.stats;
        let job_start_ms = io.start_epoch_ms;
        let latency_depth = io.lat_target.as_ref().map_or(self.depth, |lt| lt.qd);
        let client = client.stats();
        Ok(JobResult {
            read,
            write,
            trim,
            elapsed_ns,
            rusage,
            client,
            error,
            first_error,
            latency_depth,
            job_start_ms,
            verify,
        })
    }
}

/// The device's (capacity, logical block size), bytes.
fn device_geometry(dev: &Device) -> (u64, u64) {
    let limits = dev.limits();
    (limits.capacity_bytes, u64::from(limits.logical_block_size))
}

/// Now, in ms since the Unix epoch.
fn epoch_ms() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    now.as_millis() as u64
}

/// Sleeps for fio's `startdelay`; false if the run stopped meanwhile.
fn start_delay(delay_ns: u64, ctrl: &Control) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_nanos(delay_ns);
    while std::time::Instant::now() < until {
        if ctrl.phase.load(Ordering::Acquire) == PHASE_STOP {
            return false;
        }
        let left = until.saturating_duration_since(std::time::Instant::now());
        std::thread::sleep(left.min(std::time::Duration::from_millis(10)));
    }
    true
}
