//! fio's `zonemode=zbd` on a zoned device: writes at zones' write
//! pointers, within the open-zone limits, with fio's periodic zone
//! resets, and reads kept below the write pointers.
//!
//! The rules are fio's (HOWTO `zonemode`, `max_open_zones`,
//! `job_max_open_zones`, `zone_reset_threshold`, `zone_reset_frequency`,
//! `read_beyond_wp`; zbd.c `zbd_adjust_block`):
//! - A write goes to the write pointer of a zone the job has open: for a
//!   sequential job the zone after the one it filled; for a random job
//!   the zone holding a random offset, or, when no more zones may be
//!   opened (`max_open_zones` over all jobs, `job_max_open_zones` per
//!   job), one of its open zones at random. A full zone is closed; a full
//!   zone chosen again is reset first. The length is cut to the zone's
//!   capacity, in multiples of the smallest write size.
//! - Once the zones hold `zone_reset_threshold` x the job's region in
//!   written bytes, every 1 / `zone_reset_frequency`-th write resets its
//!   zone first (fio's garbage-collection model).
//! - Unless `read_beyond_wp`, a read goes below its zone's write pointer:
//!   a random read folds its offset into the written part, a sequential
//!   one moves on to the next zone holding data, and a read with no
//!   written zone left ends the job (fio's end of file).
//! - A trim is a zone reset (fio's zbd_do_io_u_trim): its block size must
//!   be the zone size; a random trim of an empty zone moves on to the next
//!   zone holding data (zbd_adjust_block's DDIR_TRIM). Here a trim also
//!   passes over a zone another job has open for writing, and holds the
//!   zone it resets as its owner until the reset completes, so no write
//!   is in flight to a zone being reset.
//!
//! The device's zones are shared by every job of a phase (`SharedZones`:
//! write pointers and owners as atomics). A zone is written by one job at
//! a time, its owner, from opening until it is full and the owner's
//! writes to it have completed: so writes to a zone arrive in order and
//! no zone is reset under a write in flight. fio lets several jobs write
//! one open zone in turn under a lock; here each job keeps its own open
//! zones within the same limits.
//!
//! Relies on: the device's zone report (mqblk::zoned) for the zones and
//! their write pointers when the phase starts.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use mqblk::Device;

use super::options::JobOptions;
use super::pattern::Pattern;
use super::zones::ZoneMode;

/// No job owns the zone.
const NO_OWNER: u32 = 0;

/// One zone of the device, as the jobs share it.
#[derive(Debug)]
struct ZoneSlot {
    start_bytes: u64,
    capacity_bytes: u64,
    /// Sequential write required (has a write pointer).
    sequential: bool,
    /// Bytes written from the zone's start (its owner's writes issued).
    written_bytes: AtomicU64,
    /// The job (`job_index + 1`) writing the zone, or `NO_OWNER`.
    owner: AtomicU32,
}

/// The device's zones, shared by a phase's zbd jobs.
#[derive(Debug)]
pub struct SharedZones {
    zones: Vec<ZoneSlot>,
    zone_bytes: u64,
    /// Zones owned (open for writing) over all jobs, and the limit
    /// (`max_open_zones`; 0: none).
    open: AtomicU32,
    max_open: u32,
    /// Bytes written in every zone: `zone_reset_threshold`'s measure.
    written_bytes: AtomicU64,
}

impl SharedZones {
    /// The zones of `dev` for `jobs`, if any is a zbd job: each job's
    /// `max_open_zones` (default the device's limit) must agree, as fio's
    /// limit is one for all jobs.
    pub fn for_jobs(jobs: &[JobOptions], dev: &Device) -> Result<Option<Arc<Self>>, String> {
        let zbd: Vec<&JobOptions> = jobs.iter().filter(|j| j.zones.mode == ZoneMode::Zbd).collect();
        let Some(first) = zbd.first() else { return Ok(None) };
        let limits = dev
            .limits()
            .zoned
            .ok_or_else(|| format!("job '{}': zonemode=zbd on a device that is not zoned", first.name))?;
        let max_open = first.zones.max_open_zones.unwrap_or(limits.max_open_zones);
        if let Some(other) = zbd.iter().find(|j| j.zones.max_open_zones.unwrap_or(limits.max_open_zones) != max_open) {
            return Err(format!(
                "job '{}': max_open_zones differs from job '{}'s: fio's limit is one for all jobs",
                other.name, first.name
            ));
        }
        let report = dev.zones().ok_or("zonemode=zbd: the device reports no zones")?;
        let all = report.report(0, usize::MAX).map_err(|s| format!("zonemode=zbd: zone report failed: {s}"))?;
        let zones: Vec<ZoneSlot> = all
            .iter()
            .map(|z| ZoneSlot {
                start_bytes: z.start << 9,
                capacity_bytes: z.capacity << 9,
                sequential: z.ztype == mqblk::zoned::ZoneType::SeqWriteRequired,
                written_bytes: AtomicU64::new((z.wp.saturating_sub(z.start)) << 9),
                owner: AtomicU32::new(NO_OWNER),
            })
            .collect();
        let written = zones.iter().filter(|z| z.sequential).map(|z| z.written_bytes.load(Ordering::Relaxed)).sum();
        Ok(Some(Arc::new(Self {
            zones,
            zone_bytes: limits.zone_sectors << 9,
            open: AtomicU32::new(0),
            max_open,
            written_bytes: AtomicU64::new(written),
        })))
    }

    fn written(&self, z: usize) -> u64 {
        self.zones[z].written_bytes.load(Ordering::Relaxed)
    }

    /// Takes zone `z` for `owner` if no job has it and the open limit
    /// allows one more.
    fn try_open(&self, z: usize, owner: u32) -> bool {
        let limit_ok = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (self.max_open == 0 || n < self.max_open).then_some(n + 1)
            })
            .is_ok();
        if !limit_ok {
            return false;
        }
        // Acquire pairs with the Release of `close`: the previous owner's
        // write pointer is seen.
        if self.zones[z].owner.compare_exchange(NO_OWNER, owner, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            return true;
        }
        self.open.fetch_sub(1, Ordering::AcqRel);
        false
    }

    fn close(&self, z: usize) {
        // Release pairs with `try_open`'s Acquire.
        self.zones[z].owner.store(NO_OWNER, Ordering::Release);
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A job that ends gives its zones back: open ones stay as written, for
/// the next phase's jobs (a `wait_for` job, say) to open and write on.
impl Drop for ZbdJob {
    fn drop(&mut self) {
        for &z in self.open.iter().chain(&self.closing) {
            self.shared.close(z);
        }
    }
}

/// fio's zbd_verify_bs for trims: the trim block size is the zone size
/// (bench's trims have one size: `bs`'s third value).
fn check_trim_size(opts: &JobOptions, zone_bytes: u64) -> Result<(), String> {
    match opts.bs_trim {
        bs if bs != zone_bytes => {
            Err(format!("zonemode=zbd: the trim block size {bs} is not the zone size {zone_bytes}"))
        }
        _ => Ok(()),
    }
}

/// What the job does for its next write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ZoneWrite {
    /// Write `len` bytes at `offset`, resetting the zone at `reset` first.
    At { offset: u64, len: u64, reset: Option<u64> },
    /// No zone may be written now (every one it could open is another
    /// job's or over the limit): try again after completions.
    Wait,
}

/// `zone_reset_frequency` after `zone_reset_threshold`: a reset every
/// `every` writes once the zones hold `threshold_bytes`.
#[derive(Debug)]
struct ResetPolicy {
    threshold_bytes: u64,
    every: u64,
    countdown: u64,
}

/// One job's view of the zones: those of its region, the ones it has
/// open, its writes in flight per zone.
#[derive(Debug)]
pub(super) struct ZbdJob {
    shared: Arc<SharedZones>,
    owner: u32,
    /// The device zones of the job's region: `first..first + count`.
    first: usize,
    count: usize,
    /// Zones the job owns, and of those, full ones waiting for their
    /// writes in flight before they close.
    open: Vec<usize>,
    closing: Vec<usize>,
    /// Writes in flight per zone of the region.
    in_flight: Vec<u32>,
    job_max_open: usize,
    /// The sequential writer's zone (relative to `first`).
    cur: usize,
    random: bool,
    min_write_bytes: u64,
    min_read_bytes: u64,
    read_beyond_wp: bool,
    reset: Option<ResetPolicy>,
}

impl ZbdJob {
    /// Job `job_index`'s view of `shared` over its region.
    pub(super) fn new(
        opts: &JobOptions,
        shared: Arc<SharedZones>,
        job_index: usize,
        (offset, len): (u64, u64),
    ) -> Result<Self, String> {
        let zone = shared.zone_bytes;
        let first = (offset / zone) as usize;
        let count = ((offset + len).div_ceil(zone) as usize).min(shared.zones.len()) - first;
        let (min_write_bytes, max_write_bytes) = opts.bs_limits(1);
        if opts.rw.read_pct(opts.rwmixread) < 100 {
            let seq = shared.zones[first..first + count].iter().filter(|z| z.sequential);
            if let Some(z) = seq.clone().find(|z| z.capacity_bytes < max_write_bytes) {
                return Err(format!(
                    "zonemode=zbd: a write of {max_write_bytes} bytes exceeds the zone capacity of {} bytes",
                    z.capacity_bytes
                ));
            }
            if seq.count() == 0 {
                return Err("zonemode=zbd: no sequential zone lies inside the job's region".into());
            }
        }
        let z = &opts.zones;
        let reset = (z.reset_frequency > 0.0).then(|| {
            let every = (1.0 / z.reset_frequency).min(f64::from(u32::MAX)) as u64;
            ResetPolicy { threshold_bytes: (len as f64 * z.reset_threshold) as u64, every, countdown: every }
        });
        if opts.rw.trims() {
            check_trim_size(opts, zone)?;
        }
        let job_max_open = if z.job_max_open_zones == 0 { count } else { z.job_max_open_zones as usize };
        Ok(Self {
            shared,
            owner: job_index as u32 + 1,
            first,
            count,
            open: Vec::with_capacity(job_max_open.min(count)),
            closing: Vec::with_capacity(count),
            in_flight: vec![0; count],
            job_max_open,
            cur: 0,
            random: opts.rw.is_random(),
            min_write_bytes,
            min_read_bytes: opts.bs_limits(0).0,
            read_beyond_wp: z.read_beyond_wp,
            reset,
        })
    }

    /// The next write of up to `bs` bytes (`pattern` draws random zones).
    pub(super) fn next_write(&mut self, pattern: &mut Pattern, bs: u64) -> ZoneWrite {
        self.close_finished();
        let Some(z) = self.pick_zone(pattern) else { return ZoneWrite::Wait };
        let mut reset = None;
        let mut written = self.shared.written(z);
        let full = written + self.min_write_bytes > self.shared.zones[z].capacity_bytes;
        if full || self.reset_due() {
            if self.in_flight[z - self.first] > 0 {
                // Not under its own writes in flight: after them.
                return if full { ZoneWrite::Wait } else { self.write_at(z, written, bs, None) };
            }
            let (shared, slot) = (&self.shared, &self.shared.zones[z]);
            shared.written_bytes.fetch_sub(written, Ordering::Relaxed);
            slot.written_bytes.store(0, Ordering::Relaxed);
            written = 0;
            reset = Some(slot.start_bytes);
        }
        self.write_at(z, written, bs, reset)
    }

    /// A write at zone `z`'s write pointer (`written` bytes in), cut to
    /// its capacity; a zone it fills is closed once its writes complete.
    fn write_at(&mut self, z: usize, written: u64, bs: u64, reset: Option<u64>) -> ZoneWrite {
        let slot = &self.shared.zones[z];
        let room = slot.capacity_bytes - written;
        let len = bs.min(room) / self.min_write_bytes * self.min_write_bytes;
        slot.written_bytes.store(written + len, Ordering::Relaxed);
        self.shared.written_bytes.fetch_add(len, Ordering::Relaxed);
        self.in_flight[z - self.first] += 1;
        if written + len + self.min_write_bytes > slot.capacity_bytes {
            self.open.retain(|&o| o != z);
            self.closing.push(z);
            if !self.random {
                self.cur = (self.cur + 1) % self.count;
            }
        }
        ZoneWrite::At { offset: slot.start_bytes + written, len, reset }
    }

    /// The zone the next trim resets, from `offset` (the job's pattern's):
    /// its start, taken by this job until `trim_completed`; None when no
    /// zone can be reset now (each empty, for a random trim, or another
    /// job's).
    pub(super) fn next_trim(&mut self, offset: u64) -> Option<u64> {
        let shared = &self.shared;
        let orig = (offset / shared.zone_bytes) as usize;
        let from = orig.clamp(self.first, self.first + self.count - 1) - self.first;
        let zones = (0..self.count).map(|i| self.first + (from + i) % self.count);
        let tries = if self.random { self.count } else { 1 };
        for z in zones.take(tries) {
            let slot = &shared.zones[z];
            if !slot.sequential || (self.random && shared.written(z) == 0) {
                continue;
            }
            // Acquire pairs with `close`'s and `trim_completed`'s Release.
            if slot.owner.compare_exchange(NO_OWNER, self.owner, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            let written = slot.written_bytes.swap(0, Ordering::Relaxed);
            shared.written_bytes.fetch_sub(written, Ordering::Relaxed);
            return Some(slot.start_bytes);
        }
        None
    }

    /// The reset of the zone at `offset` completed: the zone is free.
    pub(super) fn trim_completed(&mut self, offset: u64) {
        let z = (offset / self.shared.zone_bytes) as usize;
        self.shared.zones[z].owner.store(NO_OWNER, Ordering::Release);
    }

    /// A write at `offset` completed.
    pub(super) fn completed(&mut self, offset: u64) {
        let z = (offset / self.shared.zone_bytes) as usize - self.first;
        self.in_flight[z] -= 1;
    }

    /// Full zones whose writes have all completed are closed.
    fn close_finished(&mut self) {
        let mut i = 0;
        while i < self.closing.len() {
            let z = self.closing[i];
            if self.in_flight[z - self.first] == 0 {
                self.shared.close(z);
                self.closing.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// The zone of the next write, open for this job, if any may be.
    fn pick_zone(&mut self, pattern: &mut Pattern) -> Option<usize> {
        let start = if self.random { (pattern.next_rand() % self.count as u64) as usize } else { self.cur };
        let wanted = self.first + start;
        if self.open.contains(&wanted) {
            return Some(wanted);
        }
        if self.random && !self.open.is_empty() && self.open.len() >= self.job_max_open {
            return Some(self.open[(pattern.next_rand() % self.open.len() as u64) as usize]);
        }
        if self.open.len() < self.job_max_open {
            // The wanted zone, else the next one this job may open.
            for i in 0..self.count {
                let z = self.first + (start + i) % self.count;
                if self.openable(z) && self.shared.try_open(z, self.owner) {
                    self.open.push(z);
                    if !self.random {
                        self.cur = z - self.first;
                    }
                    return Some(z);
                }
            }
        }
        if self.open.is_empty() {
            return None;
        }
        Some(self.open[(pattern.next_rand() % self.open.len() as u64) as usize])
    }

    /// A sequential zone of this job's not being closed.
    fn openable(&self, z: usize) -> bool {
        self.shared.zones[z].sequential && !self.closing.contains(&z)
    }

    /// `zone_reset_frequency`: this write resets its zone first.
    fn reset_due(&mut self) -> bool {
        let Some(policy) = self.reset.as_mut() else { return false };
        if self.shared.written_bytes.load(Ordering::Relaxed) < policy.threshold_bytes {
            return false;
        }
        policy.countdown = policy.countdown.saturating_sub(1);
        if policy.countdown > 0 {
            return false;
        }
        policy.countdown = policy.every;
        true
    }

    /// A read of `bs` bytes at `offset` kept below its zone's write
    /// pointer (unless `read_beyond_wp`): (offset, length), or None when
    /// no zone of the region holds data (fio's end of file).
    pub(super) fn adjust_read(&self, offset: u64, bs: u64) -> Option<(u64, u64)> {
        let shared = &self.shared;
        let orig = (offset / shared.zone_bytes) as usize;
        if self.read_beyond_wp || !shared.zones[orig].sequential {
            return Some((offset, bs));
        }
        let min = self.min_read_bytes;
        let mut z = orig;
        let mut range = shared.written(z);
        let mut offset = offset;
        if range < min || (!self.random && offset + min > shared.zones[z].start_bytes + range) {
            z = self.zone_with_data(orig)?;
            if !shared.zones[z].sequential {
                return Some((shared.zones[z].start_bytes, bs));
            }
            range = shared.written(z);
            if !self.random {
                offset = shared.zones[z].start_bytes;
            }
        }
        let start = shared.zones[z].start_bytes;
        if range <= bs {
            offset = start;
        } else if self.random {
            let into = offset - shared.zones[orig].start_bytes;
            offset = start + into % (range - bs) / min * min;
        }
        let len = bs.min(start + range - offset) / min * min;
        Some((offset, len))
    }

    /// The first zone after `from` (wrapping in the region) holding at
    /// least one smallest read.
    fn zone_with_data(&self, from: usize) -> Option<usize> {
        (1..=self.count)
            .map(|i| self.first + (from - self.first + i) % self.count)
            .find(|&z| !self.shared.zones[z].sequential || self.shared.written(z) >= self.min_read_bytes)
    }
}
