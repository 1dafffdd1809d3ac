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

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use crossbeam_utils::CachePadded;
use mqblk::Clock;
use mqblk::{Bio, Buf, Client, ClientStats, Completion, Device, ReqFlags};

use super::options::JobOptions;
use super::stats::{DirStats, Rusage};
use super::verify::Verifier;

/// The kernel's io_submit plugs only batches above this many I/Os (and
/// io_uring likewise, `max_ios > 2`).
const AIO_PLUG_THRESHOLD: usize = 2;

pub const PHASE_RAMP: u8 = 0;
pub const PHASE_RUN: u8 = 1;
pub const PHASE_STOP: u8 = 2;

/// Run control shared by the main thread and all jobs.
#[derive(Debug, Default)]
pub struct Control {
    pub phase: AtomicU8,
}

/// A job's progress, published once per loop iteration for the progress
/// bar and the bandwidth samples.
#[derive(Debug, Default)]
pub struct Live {
    pub ios: CachePadded<AtomicU64>,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub measuring: AtomicBool,
    pub done: AtomicBool,
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

/// Where the next I/O goes.
struct Pattern {
    random: bool,
    read_pct: u32,
    region_start: u64,
    region_len: u64,
    pos: u64,
    rng: u64,
}

impl Pattern {
    #[inline]
    fn next_rand(&mut self) -> u64 {
        // xorshift64*: fast and good enough for offsets.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    #[inline]
    fn next_is_write(&mut self) -> bool {
        match self.read_pct {
            100 => false,
            0 => true,
            pct => (self.next_rand() % 100) as u32 >= pct,
        }
    }

    #[inline]
    fn next_offset(&mut self, bs: u64) -> u64 {
        if self.random {
            let blocks = self.region_len / bs;
            // Multiply-high maps the random word onto 0..blocks without a
            // 64-bit division (Lemire's reduction; bias below 2^-40 here).
            let block = ((u128::from(self.next_rand()) * u128::from(blocks)) >> 64) as u64;
            return self.region_start + block * bs;
        }
        if self.pos + bs > self.region_len {
            self.pos = 0; // wrap (time_based runs loop over the region)
        }
        let off = self.region_start + self.pos;
        self.pos += bs;
        off
    }
}

/// fio's `zonemode=zbd` for writes: each goes to a zone's write pointer.
/// The job owns the sequential zones inside its region (give jobs their
/// own zones with `offset_increment`), so it tracks their write pointers
/// itself; a zone too full for the next write is reset first.
struct ZoneWriter {
    /// (zone start, capacity, write pointer), bytes.
    zones: Vec<(u64, u64, u64)>,
    cur: usize,
}

impl ZoneWriter {
    fn new(dev: &Device, region_start: u64, region_len: u64) -> Result<Self, String> {
        let all = dev.report_zones(0, usize::MAX).map_err(|s| format!("zonemode=zbd: zone report failed: {s}"))?;
        let zones: Vec<(u64, u64, u64)> = all
            .iter()
            .filter(|z| z.ztype == mqblk::zoned::ZoneType::SeqWriteRequired)
            .map(|z| (z.start << 9, z.capacity << 9, (z.wp - z.start) << 9))
            .filter(|&(start, cap, _)| start >= region_start && start + cap <= region_start + region_len)
            .collect();
        if zones.is_empty() {
            return Err("zonemode=zbd: no sequential zone lies inside the job's region".into());
        }
        Ok(Self { zones, cur: 0 })
    }

    /// The next write's offset, and the zone to reset before it, if any.
    fn next(&mut self, pattern: &mut Pattern, bs: u64) -> (u64, Option<u64>) {
        let n = self.zones.len();
        let fits = |z: &(u64, u64, u64)| z.2 + bs <= z.1;
        let z = if pattern.random {
            (pattern.next_rand() % n as u64) as usize
        } else {
            if !fits(&self.zones[self.cur]) {
                self.cur = (self.cur + 1) % n; // sequential: on to the next zone
            }
            self.cur
        };
        let mut reset = None;
        if !fits(&self.zones[z]) {
            reset = Some(self.zones[z].0);
            self.zones[z].2 = 0;
        }
        let (start, _, wp) = &mut self.zones[z];
        let off = *start + *wp;
        *wp += bs;
        (off, reset)
    }
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
    let capacity = dev.limits().capacity_bytes;
    let offset = opts.offset.saturating_add((job_index as u64).saturating_mul(opts.offset_increment));
    if offset >= capacity {
        return Err(format!("job '{}': offset {offset} is beyond the device size {capacity}", opts.name));
    }
    let max_bs = opts.bs_read.max(opts.bs_write);
    let region_len = opts.size.unwrap_or(capacity - offset).min(capacity - offset);
    if region_len < max_bs {
        return Err(format!("job '{}': size {region_len} is smaller than the block size {max_bs}", opts.name));
    }
    let read_pct = opts.rw.read_pct(opts.rwmixread);
    let mut pattern = Pattern {
        random: opts.rw.is_random(),
        read_pct,
        region_start: offset,
        region_len,
        pos: 0,
        rng: opts.randseed.wrapping_add((job_index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1,
    };
    let depth = opts.effective_iodepth();
    // Writes are sync (O_DIRECT) unless the job is async (writeback).
    let hipri = if opts.hipri { ReqFlags::HIPRI } else { ReqFlags::NONE };
    let write_flags = if opts.mqblk_async { ReqFlags::NONE } else { ReqFlags::SYNC } | hipri;
    if opts.startdelay_ns > 0 && !start_delay(opts.startdelay_ns, ctrl) {
        return Ok(JobResult::empty());
    }
    let mut zone_writer = match opts.zonemode_zbd {
        true if dev.limits().zoned.is_none() => {
            return Err(format!("job '{}': zonemode=zbd on a device that is not zoned", opts.name))
        }
        true => Some(ZoneWriter::new(dev, offset, region_len).map_err(|e| format!("job '{}': {e}", opts.name))?),
        false => None,
    };
    let mut verifier = match opts.verify && read_pct < 100 {
        true if opts.zonemode_zbd => {
            return Err(format!(
                "job '{}': verify with zonemode=zbd is not supported (zone resets erase blocks)",
                opts.name
            ))
        }
        true => {
            Some(Verifier::new(offset, region_len, opts.bs_write).map_err(|e| format!("job '{}': {e}", opts.name))?)
        }
        false => None,
    };
    let mut client = dev.client_with_capacity(depth);
    let mut slots = vec![Slot::default(); depth];
    // Buffers of our own, or slots of the registered pool (fixedbufs=1).
    let new_buf = |len: u64| match fixed {
        Some(pool) => pool.take(len as usize).expect("the fixedbufs pool has a slot for every job buffer"),
        None => Buf::new(len as usize),
    };
    let mut read_bufs: Vec<Option<Buf>> = (0..depth).map(|_| (read_pct > 0).then(|| new_buf(opts.bs_read))).collect();
    let mut write_bufs: Vec<Option<Buf>> = (0..depth)
        .map(|_| {
            (read_pct < 100).then(|| {
                let mut b = new_buf(opts.bs_write);
                fill_random(&mut b, job_index);
                b
            })
        })
        .collect();
    let mut free: Vec<u32> = (0..depth as u32).rev().collect();
    let mut done: Vec<Completion> = Vec::with_capacity(depth);

    let io_limit_bytes = if opts.time_based { u64::MAX } else { region_len };
    let io_limit_count = if opts.number_ios == 0 { u64::MAX } else { opts.number_ios };
    // fio: iodepth_batch_submit=0 means iodepth.
    let batch = if opts.iodepth_batch_submit == 0 { depth } else { opts.iodepth_batch_submit };
    let complete_min = opts.iodepth_batch_complete_min.max(1);
    let complete_max = opts.complete_max();
    let timed = !opts.gtod_reduce;

    let mut read = DirStats::default();
    let mut write = DirStats::default();
    let mut measuring = ctrl.phase.load(Ordering::Acquire) != PHASE_RAMP;
    let mut start_ns = clock.now_ns();
    let mut start_ru = Rusage::thread_now();
    live.measuring.store(measuring, Ordering::Release);
    let (mut issued_bytes, mut issued_ios, mut total_ios) = (0u64, 0u64, 0u64);
    let mut error = 0;

    loop {
        let phase = ctrl.phase.load(Ordering::Acquire);
        if !measuring && phase != PHASE_RAMP {
            // Ramp over: forget what was measured, start the clock now.
            read = DirStats::default();
            write = DirStats::default();
            total_ios = 0;
            measuring = true;
            start_ns = clock.now_ns();
            start_ru = Rusage::thread_now();
            live.measuring.store(true, Ordering::Release);
        }
        let can_issue =
            phase != PHASE_STOP && error == 0 && issued_bytes < io_limit_bytes && issued_ios < io_limit_count;
        if can_issue {
            // Chunks of up to `batch` I/Os, each under one plug (an
            // io_submit call's plug), each I/O under its own inner plug
            // when `plug_per_io` (the kernel's direct-I/O path).
            while client.in_flight() < depth && issued_bytes < io_limit_bytes && issued_ios < io_limit_count {
                // The plug's nr_ios hint is what this chunk will really
                // submit (io_submit passes its own count), so no tags are
                // batched that the chunk cannot use.
                let chunk = batch.min(depth - client.in_flight()).min(free.len());
                // Like io_submit and io_uring, plug only a chunk of more
                // than AIO_PLUG_THRESHOLD I/Os: a plug cannot help one or two.
                let plugged = opts.plug && chunk > AIO_PLUG_THRESHOLD;
                let mut outer;
                let c: &mut Client = if plugged {
                    outer = client.plug_nr_ios(chunk as u32);
                    &mut outer
                } else {
                    &mut client
                };
                let mut prev: Option<u32> = None;
                let mut in_chunk = 0;
                while in_chunk < batch
                    && c.in_flight() < depth
                    && issued_bytes < io_limit_bytes
                    && issued_ios < io_limit_count
                {
                    let Some(idx) = free.pop() else { break };
                    let is_write = pattern.next_is_write();
                    let bs = if is_write { opts.bs_write } else { opts.bs_read };
                    let offset = match zone_writer.as_mut() {
                        Some(zw) if is_write => {
                            let (offset, reset) = zw.next(&mut pattern, bs);
                            if let Some(zone) = reset {
                                let reset = Bio::zone_mgmt(mqblk::zoned::ZoneMgmt::Reset, zone);
                                c.submit_and_wait(reset)
                                    .map_err(|e| format!("job '{}': zone reset: {e}", opts.name))?;
                            }
                            offset
                        }
                        _ => pattern.next_offset(bs),
                    };
                    let bio = if is_write {
                        let mut buf = write_bufs[idx as usize].take().expect("slot owns its write buffer");
                        if let Some(v) = verifier.as_mut() {
                            v.fill(&mut buf, offset);
                        }
                        Bio::write(offset, buf).with_flags(write_flags)
                    } else {
                        Bio::read(offset, read_bufs[idx as usize].take().expect("slot owns its read buffer"))
                            .with_flags(hipri)
                    }
                    .with_ioprio(opts.ioprio);
                    let t = if timed { clock.now_ns() } else { 0 };
                    if let Some(p) = prev {
                        slots[p as usize].slat_ns = t - slots[p as usize].issue_ns;
                    }
                    slots[idx as usize] = Slot { issue_ns: t, slat_ns: 0, offset, is_write };
                    let submitted = if plugged && opts.plug_per_io {
                        c.plug().submit(bio, u64::from(idx))
                    } else {
                        c.submit(bio, u64::from(idx))
                    };
                    if let Err(rejected) = submitted {
                        return Err(format!("job '{}': submit failed: {}", opts.name, rejected.error));
                    }
                    prev = Some(idx);
                    issued_bytes += bs;
                    issued_ios += 1;
                    in_chunk += 1;
                }
                if in_chunk == 0 {
                    break;
                }
                if timed {
                    close_slat(&clock, &mut slots, prev);
                }
            }
        }
        let in_flight = client.in_flight();
        if in_flight == 0 {
            if can_issue {
                continue;
            }
            break;
        }
        let min = complete_min.min(in_flight);
        done.clear();
        client.do_io(&mut done, min, complete_max, None).map_err(|e| format!("job '{}': do_io: {e}", opts.name))?;
        let now = if timed { clock.now_ns() } else { 0 };
        for c in done.drain(..) {
            let idx = c.user_data as usize;
            let slot = slots[idx];
            let stats = if slot.is_write { &mut write } else { &mut read };
            let bs = if slot.is_write { opts.bs_write } else { opts.bs_read };
            if c.status.is_ok() {
                if let (true, Some(v)) = (slot.is_write, verifier.as_mut()) {
                    v.written(slot.offset);
                }
                stats.ios += 1;
                stats.bytes += bs;
                if timed {
                    let clat = now.saturating_sub(slot.issue_ns + slot.slat_ns);
                    stats.record_latency(slot.slat_ns, clat);
                }
            } else {
                stats.errors += 1;
                if error == 0 {
                    error = c.status.errno();
                }
            }
            let buf = c.buf.expect("data I/O completions carry their buffer");
            if slot.is_write {
                write_bufs[idx] = Some(buf);
            } else {
                read_bufs[idx] = Some(buf);
            }
            free.push(idx as u32);
            total_ios += 1;
        }
        live.ios.store(total_ios, Ordering::Relaxed);
        live.read_bytes.store(read.bytes, Ordering::Relaxed);
        live.write_bytes.store(write.bytes, Ordering::Relaxed);
    }
    let elapsed_ns = clock.now_ns() - start_ns;
    let rusage = Rusage::thread_now().since(&start_ru);
    // fio verifies after the job's writes, outside its measurements.
    if let Some(v) = &verifier {
        if error == 0 {
            let bufs = write_bufs.drain(..).flatten().collect();
            v.run(&mut client, bufs).map_err(|e| format!("job '{}': verify: {e}", opts.name))?;
        }
    }
    Ok(JobResult { read, write, elapsed_ns, rusage, client: client.stats(), error })
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

/// Write buffers hold pseudo-random bytes (fio's default buffer content), so
/// a device that compresses or dedups gains nothing.
fn fill_random(buf: &mut Buf, seed: usize) {
    let mut x = 0x1234_5678_9abc_def1u64 ^ (seed as u64).wrapping_mul(0x9e37_79b9);
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}
