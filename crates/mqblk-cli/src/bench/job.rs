//! One job thread: fio's I/O loop over an mqblk client.
//!
//! The loop fills the queue to `iodepth` in chunks of
//! `iodepth_batch_submit`, each chunk of more than two I/Os under one plug
//! and each of its I/Os under an inner plug (`plug`, `plug_per_io`: as an
//! io_submit call and the kernel's direct-I/O path do, so adjacent I/Os of
//! a chunk merge), then reaps at least `iodepth_batch_complete_min`
//! (at least one) and at most `iodepth_batch_complete_max` completions, like
//! fio's `do_io`. Every in-flight I/O owns one slot (its `user_data`) with its
//! buffer and timestamps, allocated before the run: nothing is allocated per
//! I/O.
//!
//! Timing (unless `gtod_reduce`): one clock read per I/O at issue; the next
//! issue's read closes the previous I/O's submission latency (they are back
//! to back), one read closes each chunk, and one read per reap stamps all of
//! its completions.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering};

use crossbeam_utils::CachePadded;
use mqblk::clock::Clock;
use mqblk::{Bio, Buf, Client, ClientStats, Completion, Device, ReqFlags};

use super::job_setup::{job_region, new_verifier, new_zone_writer, slot_buffers};
use super::options::JobOptions;
use super::pattern::{Pattern, ZoneWriter};
use super::start::StartGate;
use super::stats::{DirStats, Rusage};
use super::verify::Verifier;

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
    pub measuring: AtomicBool,
    pub done: AtomicBool,
    /// The job thread's id (gettid; 0 until it starts), so the supervisor
    /// can tell its CPU time from the device's threads'.
    pub tid: AtomicI32,
}

/// What one job thread measured.
#[derive(Debug, Clone)]
pub struct JobResult {
    pub read: DirStats,
    pub write: DirStats,
    pub elapsed_ns: u64,
    pub rusage: Rusage,
    pub client: ClientStats,
    /// First error's errno (0: none), as fio's "error".
    pub error: i32,
}

impl JobResult {
    /// A job that did nothing (stopped before it started).
    pub fn empty() -> Self {
        Self {
            read: DirStats::default(),
            write: DirStats::default(),
            elapsed_ns: 0,
            rusage: Rusage::default(),
            client: ClientStats::default(),
            error: 0,
        }
    }

    /// Adds another job's measurements (group reporting): totals add up,
    /// the run lasts as long as the longest job, the first error stays.
    pub fn merge(&mut self, o: &JobResult) {
        self.read.merge(&o.read);
        self.write.merge(&o.write);
        self.elapsed_ns = self.elapsed_ns.max(o.elapsed_ns);
        self.rusage.add(&o.rusage);
        self.client.submitted += o.client.submitted;
        self.client.completed += o.client.completed;
        self.client.tag_waits += o.client.tag_waits;
        self.client.tag_wait_ns += o.client.tag_wait_ns;
        self.client.completion_sleeps += o.client.completion_sleeps;
        if self.error == 0 {
            self.error = o.error;
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    issue_ns: u64,
    slat_ns: u64,
    offset: u64,
    is_write: bool,
}

/// Runs one job to completion on the calling thread.
pub fn run_job(
    opts: &JobOptions,
    dev: &Device,
    fixed: Option<&mqblk::FixedBufs>,
    clock: Clock,
    job_index: usize,
    ctrl: &Control,
    live: &Live,
) -> Result<JobResult, String> {
    let (offset, region_len) = job_region(opts, dev, job_index)?;
    // Two copies of the loop, with and without clock reads (gtod_reduce),
    // so that neither tests the choice per I/O.
    if opts.gtod_reduce {
        run_loop::<false>(opts, dev, fixed, clock, job_index, ctrl, live, offset, region_len)
    } else {
        run_loop::<true>(opts, dev, fixed, clock, job_index, ctrl, live, offset, region_len)
    }
}

/// `run_job` after the start delay, for `TIMED` (not `gtod_reduce`).
#[allow(clippy::too_many_arguments)]
fn run_loop<const TIMED: bool>(
    opts: &JobOptions,
    dev: &Device,
    fixed: Option<&mqblk::FixedBufs>,
    clock: Clock,
    job_index: usize,
    ctrl: &Control,
    live: &Live,
    offset: u64,
    region_len: u64,
) -> Result<JobResult, String> {
    let job = JobLoop::<TIMED>::new(opts, clock, live, region_len);
    let read_pct = opts.rw.read_pct(opts.rwmixread);
    let mut progress = Progress {
        pattern: Pattern {
            random: opts.rw.is_random(),
            read_pct,
            region_start: offset,
            region_len,
            pos: 0,
            blocks: (0, 0),
            rng: opts.randseed.wrapping_add((job_index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1,
        },
        issued_bytes: 0,
        issued_ios: 0,
        total_ios: 0,
        error: 0,
        measuring: false,
    };
    let mut io = IoState::new(opts, dev, fixed, job.depth, read_pct, job_index, offset, region_len)?;
    let mut client = dev.client_with_capacity(job.depth);
    ctrl.start.arrive_and_wait(&live.arrived);
    // fio's startdelay counts from the run's start.
    if opts.startdelay_ns > 0 && !start_delay(opts.startdelay_ns, ctrl) {
        return Ok(JobResult::empty());
    }
    job.start(ctrl, &mut io, &mut progress);
    job.run(&mut client, ctrl, &mut io, &mut progress)?;
    job.finish(client, io, &progress)
}

/// One job's I/O loop: fio's `do_io`. Its settings, fixed for the run,
/// are read through `&self`; what changes per I/O is split in two, passed
/// by `&mut`: `IoState` (slots, buffers, stats: handed to calls outside
/// the loop) and `Progress` (the pattern and counters: touched only by
/// the loop's inlined steps, so they stay in registers). Every step is
/// inlined into `run`. `TIMED`: clock reads per I/O (not `gtod_reduce`).
struct JobLoop<'a, const TIMED: bool> {
    opts: &'a JobOptions,
    clock: Clock,
    live: &'a Live,
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
}

/// Per-I/O slots and buffers, allocated before the run, and what the job
/// measured.
struct IoState {
    zone_writer: Option<ZoneWriter>,
    verifier: Option<Verifier>,
    /// Indexed by an I/O's `user_data`.
    slots: Vec<Slot>,
    read_bufs: Vec<Option<Buf>>,
    write_bufs: Vec<Option<Buf>>,
    /// Slots not in flight.
    free: Vec<u32>,
    /// Reads' and writes' measurements, indexed by `is_write`: one array
    /// (not two fields) so that accounting selects its base address once.
    stats: [DirStats; 2],
    start_ns: u64,
    start_ru: Rusage,
}

/// Where the job is: its offset pattern and counts.
struct Progress {
    pattern: Pattern,
    issued_bytes: u64,
    issued_ios: u64,
    total_ios: u64,
    /// First error's errno (0: none).
    error: i32,
    measuring: bool,
}

impl IoState {
    /// fio's job setup: the zones and verifier, and every slot's buffers.
    #[allow(clippy::too_many_arguments)]
    fn new(
        opts: &JobOptions,
        dev: &Device,
        fixed: Option<&mqblk::FixedBufs>,
        depth: usize,
        read_pct: u32,
        job_index: usize,
        offset: u64,
        region_len: u64,
    ) -> Result<Self, String> {
        let zone_writer = new_zone_writer(opts, dev, offset, region_len)?;
        let verifier = new_verifier(opts, read_pct, offset, region_len)?;
        let (read_bufs, write_bufs) = slot_buffers(opts, fixed, depth, read_pct, job_index);
        Ok(Self {
            zone_writer,
            verifier,
            slots: vec![Slot::default(); depth],
            read_bufs,
            write_bufs,
            free: (0..depth as u32).rev().collect(),
            stats: [DirStats::default(), DirStats::default()],
            start_ns: 0,
            start_ru: Rusage::default(),
        })
    }
}

impl<'a, const TIMED: bool> JobLoop<'a, TIMED> {
    fn new(opts: &'a JobOptions, clock: Clock, live: &'a Live, region_len: u64) -> Self {
        let depth = opts.effective_iodepth();
        // Writes are sync (O_DIRECT) unless the job is async (writeback).
        let hipri = if opts.hipri { ReqFlags::HIPRI } else { ReqFlags::NONE };
        let write_flags = if opts.mqblk_async { ReqFlags::NONE } else { ReqFlags::SYNC } | hipri;
        Self {
            opts,
            clock,
            live,
            depth,
            // fio: iodepth_batch_submit=0 means iodepth.
            batch: if opts.iodepth_batch_submit == 0 { depth } else { opts.iodepth_batch_submit },
            complete_min: opts.iodepth_batch_complete_min.max(1),
            complete_max: opts.complete_max(),
            lat_hist: opts.lat_percentiles,
            io_limit_bytes: if opts.time_based { u64::MAX } else { opts.io_size.unwrap_or(region_len) },
            io_limit_count: if opts.number_ios == 0 { u64::MAX } else { opts.number_ios },
            hipri,
            write_flags,
        }
    }

    /// Starts the clocks; measuring from now unless the run is ramping.
    fn start(&self, ctrl: &Control, io: &mut IoState, p: &mut Progress) {
        p.measuring = ctrl.phase.load(Ordering::Acquire) != PHASE_RAMP;
        io.start_ns = self.clock.now_ns();
        io.start_ru = Rusage::thread_now();
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
            let in_flight = client.in_flight();
            if in_flight == 0 {
                if can_issue {
                    continue;
                }
                break;
            }
            self.reap(client, in_flight, io, p)?;
            self.publish(io, p);
        }
        Ok(())
    }

    /// Ramp over: forget what was measured, start the clock now.
    #[cold]
    fn end_ramp(&self, io: &mut IoState, p: &mut Progress) {
        io.stats = [DirStats::default(), DirStats::default()];
        p.total_ios = 0;
        p.measuring = true;
        io.start_ns = self.clock.now_ns();
        io.start_ru = Rusage::thread_now();
        self.live.measuring.store(true, Ordering::Release);
    }

    /// The job may issue more: below `size` (unless `time_based`) and
    /// `number_ios`.
    #[inline(always)]
    fn below_limits(&self, p: &Progress) -> bool {
        p.issued_bytes < self.io_limit_bytes && p.issued_ios < self.io_limit_count
    }

    /// Fills the queue to `iodepth` in chunks of up to `batch` I/Os.
    #[inline(always)]
    fn fill_queue(&self, client: &mut Client, io: &mut IoState, p: &mut Progress) -> Result<(), String> {
        loop {
            // Every I/O in flight holds a slot: the free ones are the room
            // left below iodepth.
            debug_assert_eq!(io.free.len(), self.depth - client.in_flight());
            let ios_left = self.io_limit_count - p.issued_ios;
            let chunk = self.batch.min(io.free.len()).min(usize::try_from(ios_left).unwrap_or(usize::MAX));
            if chunk == 0 || self.submit_chunk(client, io, p, chunk)? < chunk {
                return Ok(());
            }
        }
    }

    /// One chunk of `chunk` I/Os (an io_submit call; fewer if the job's
    /// byte limit comes first): under one plug, each I/O under its own
    /// inner plug when `plug_per_io` (the kernel's direct-I/O path).
    /// Returns how many I/Os it submitted.
    #[inline(always)]
    fn submit_chunk(
        &self,
        client: &mut Client,
        io: &mut IoState,
        p: &mut Progress,
        chunk: usize,
    ) -> Result<usize, String> {
        // Like io_submit and io_uring, plug only a chunk of more than
        // AIO_PLUG_THRESHOLD I/Os: a plug cannot help one or two. Its
        // nr_ios hint is what the chunk will submit (io_submit passes its
        // own count), so no tags are batched that it cannot use.
        let plugged = self.opts.plug && chunk > AIO_PLUG_THRESHOLD;
        let mut outer;
        let c: &mut Client = if plugged {
            outer = client.plug_nr_ios(chunk as u32);
            &mut outer
        } else {
            client
        };
        let mut prev: Option<u32> = None;
        let mut in_chunk = 0;
        while in_chunk < chunk && p.issued_bytes < self.io_limit_bytes {
            let idx = io.free.pop().expect("a free slot per I/O below iodepth");
            self.submit_one(c, idx, prev, plugged, io, p)?;
            prev = Some(idx);
            in_chunk += 1;
        }
        if in_chunk > 0 && TIMED {
            close_slat(&self.clock, &mut io.slots, prev);
        }
        Ok(in_chunk)
    }

    /// Issues one I/O in slot `idx`; its clock read closes the previous
    /// I/O's (`prev`) submission latency.
    #[inline(always)]
    fn submit_one(
        &self,
        c: &mut Client,
        idx: u32,
        prev: Option<u32>,
        plugged: bool,
        io: &mut IoState,
        p: &mut Progress,
    ) -> Result<(), String> {
        let is_write = p.pattern.next_is_write();
        let bs = if is_write { self.opts.bs_write } else { self.opts.bs_read };
        let offset = self.next_offset(c, is_write, bs, io, p)?;
        let bio = self.prep_bio(idx, is_write, offset, io);
        let t = if TIMED { self.clock.now_ns() } else { 0 };
        if let Some(prev) = prev {
            io.slots[prev as usize].slat_ns = t - io.slots[prev as usize].issue_ns;
        }
        io.slots[idx as usize] = Slot { issue_ns: t, slat_ns: 0, offset, is_write };
        let submitted = if plugged && self.opts.plug_per_io {
            c.plug().submit(bio, u64::from(idx))
        } else {
            c.submit(bio, u64::from(idx))
        };
        if let Err(rejected) = submitted {
            return Err(format!("job '{}': submit failed: {}", self.opts.name, rejected.error));
        }
        p.issued_bytes += bs;
        p.issued_ios += 1;
        Ok(())
    }

    /// The next I/O's offset: a zone's write pointer for a `zonemode=zbd`
    /// write (resetting a full zone first), else the job's pattern.
    #[inline(always)]
    fn next_offset(
        &self,
        c: &mut Client,
        is_write: bool,
        bs: u64,
        io: &mut IoState,
        p: &mut Progress,
    ) -> Result<u64, String> {
        match io.zone_writer.as_mut() {
            Some(zw) if is_write => {
                let (offset, reset) = zw.next(&mut p.pattern, bs);
                if let Some(zone) = reset {
                    let reset = Bio::zone_mgmt(mqblk::zoned::ZoneMgmt::Reset, zone);
                    c.submit_and_wait(reset).map_err(|e| format!("job '{}': zone reset: {e}", self.opts.name))?;
                }
                Ok(offset)
            }
            _ => Ok(p.pattern.next_offset(bs)),
        }
    }

    /// The bio for slot `idx`, with its buffer (a write's filled for
    /// verify).
    #[inline(always)]
    fn prep_bio(&self, idx: u32, is_write: bool, offset: u64, io: &mut IoState) -> Bio {
        if is_write {
            let mut buf = io.write_bufs[idx as usize].take().expect("slot owns its write buffer");
            if let Some(v) = io.verifier.as_mut() {
                v.fill(&mut buf, offset);
            }
            Bio::write(offset, buf).with_flags(self.write_flags)
        } else {
            Bio::read(offset, io.read_bufs[idx as usize].take().expect("slot owns its read buffer"))
                .with_flags(self.hipri)
        }
        .with_ioprio(self.opts.ioprio)
    }

    /// Reaps at least `iodepth_batch_complete_min` (at most what is in
    /// flight) and at most `iodepth_batch_complete_max` completions,
    /// accounting each as it is reaped (no vector in between); one clock
    /// read, at the first completion, stamps them all.
    #[inline(always)]
    fn reap(&self, client: &mut Client, in_flight: usize, io: &mut IoState, p: &mut Progress) -> Result<(), String> {
        let min = self.complete_min.min(in_flight);
        client
            .do_io_each(min, self.complete_max, None, Reaped { job: self, now: None, io, p })
            .map_err(|e| format!("job '{}': do_io: {e}", self.opts.name))?;
        Ok(())
    }

    /// Accounts one completion (fio's `io_completed`): its direction's
    /// stats and latencies or the job's first error, the verifier's map,
    /// and the slot and its buffer free again.
    #[inline(always)]
    fn account(&self, c: Completion, now: u64, io: &mut IoState, p: &mut Progress) {
        let idx = c.user_data as usize;
        let slot = io.slots[idx];
        let stats = &mut io.stats[usize::from(slot.is_write)];
        let bs = if slot.is_write { self.opts.bs_write } else { self.opts.bs_read };
        if c.status.is_ok() {
            if let (true, Some(v)) = (slot.is_write, io.verifier.as_mut()) {
                v.written(slot.offset);
            }
            stats.ios += 1;
            stats.bytes += bs;
            if TIMED {
                let clat = now.saturating_sub(slot.issue_ns + slot.slat_ns);
                stats.record_latency(slot.slat_ns, clat, self.lat_hist);
            }
        } else {
            stats.errors += 1;
            if p.error == 0 {
                p.error = c.status.errno();
            }
        }
        let buf = c.buf.expect("data I/O completions carry their buffer");
        if slot.is_write {
            io.write_bufs[idx] = Some(buf);
        } else {
            io.read_bufs[idx] = Some(buf);
        }
        io.free.push(idx as u32);
        p.total_ios += 1;
    }

    /// Publishes progress for the progress bar and bandwidth samples.
    #[inline(always)]
    fn publish(&self, io: &IoState, p: &Progress) {
        self.live.ios.store(p.total_ios, Ordering::Relaxed);
        self.live.read_bytes.store(io.stats[0].bytes, Ordering::Relaxed);
        self.live.write_bytes.store(io.stats[1].bytes, Ordering::Relaxed);
    }

    /// Stops the clocks, verifies (fio does so after the job's writes,
    /// outside its measurements) and gathers the result.
    fn finish(&self, mut client: Client, mut io: IoState, p: &Progress) -> Result<JobResult, String> {
        let elapsed_ns = self.clock.now_ns() - io.start_ns;
        let rusage = Rusage::thread_now().since(&io.start_ru);
        if let Some(v) = &io.verifier {
            if p.error == 0 {
                let bufs = io.write_bufs.drain(..).flatten().collect();
                v.run(&mut client, bufs).map_err(|e| format!("job '{}': verify: {e}", self.opts.name))?;
            }
        }
        let [read, write] = io.stats;
        Ok(JobResult { read, write, elapsed_ns, rusage, client: client.stats(), error: p.error })
    }
}

/// The reap's sink: accounts each completion where it is reaped (a
/// `CompletionSink` rather than a closure, so that it is inlined into the
/// reaping loop); one clock read, at the first completion, stamps them all.
struct Reaped<'j, 'a, const TIMED: bool> {
    job: &'j JobLoop<'a, TIMED>,
    now: Option<u64>,
    io: &'j mut IoState,
    p: &'j mut Progress,
}

impl<const TIMED: bool> mqblk::CompletionSink for Reaped<'_, '_, TIMED> {
    #[inline(always)]
    fn complete(&mut self, c: Completion) {
        let t = if TIMED { *self.now.get_or_insert_with(|| self.job.clock.now_ns()) } else { 0 };
        self.job.account(c, t, self.io, self.p);
    }
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

/// Ends the open chunk: the last I/O's submission latency runs to now.
#[inline]
fn close_slat(clock: &Clock, slots: &mut [Slot], last: Option<u32>) {
    if let Some(p) = last {
        let t = clock.now_ns();
        slots[p as usize].slat_ns = t - slots[p as usize].issue_ns;
    }
}
