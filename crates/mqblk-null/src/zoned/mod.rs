//! null_blk's zoned emulation (`zoned=1`): conventional zones first, then
//! sequential-write-required zones, with Linux null_blk's state machine
//! (drivers/block/null_blk/zoned.c) and the
//! locking design of "null_blk: improve zone locking" (2020).
//!
//! Kernel version (`zoned_compat`): Linux 6.12 by default, 6.1 or 7 (7.x,
//! measured on Debian's 7.3) on request. All run the same state machine;
//! 7.x answered every oracle script as 6.12 (docs/results/zoned-oracle-7.txt:
//! once the script runner let the kernel's deferred work run between ops;
//! before, 7.3 alone refused writes to a zone reset after a failed write),
//! so `7` behaves as `6.12`. What 6.12 changed from 6.1, seen through the
//! kernel oracle (tests/oracle/) and read in its source:
//! - A failed write makes the zone refuse writes until its write pointer
//!   is learnt again ("block: Introduce zone write plugging", 6.10, with
//!   the recovery of "block: Prevent potential deadlocks in zone write plug
//!   error recovery", 6.13, in 6.12 stable). The block layer tracks each
//!   zone's write pointer in a zone write plug; when a write to a
//!   sequential zone fails, the plug is marked as needing a write pointer
//!   update, and until a zone report covering the zone, a zone reset, a
//!   zone finish or a reset all succeeds, every write to that zone fails
//!   with EIO without reaching the driver (even one at the true write
//!   pointer). A native zone append neither waits for nor sets that mark:
//!   it drops the zone's plug, and with it the mark. mqblk's null device
//!   is its only zoned driver, so this block-layer state is kept here, in
//!   the zone (`ZoneState::need_wp_update`). 6.1 has no zone write plugs:
//!   a write at the write pointer after a failed one succeeds.
//! - `zone_full=1` ("null_blk: Introduce the zone_full parameter", 6.11):
//!   sequential zones start FULL, their write pointer at the capacity.
//! - `zone_append_max_sectors` ("null_blk: Introduce zone_append_max_sectors
//!   attribute", 6.10) is aligned down to the block size and capped at the
//!   zone capacity (default: the capacity); 6.1 has no such parameter and
//!   allows appends of a whole zone size.
//!
//! - One write larger than a request (measured through `mqblk zone
//!   script --blkdev` in docs/results/zoned-spanning-writes.txt): both
//!   kernels split the bio at max_sectors (255, or 248 with bs=4096) and
//!   at the zone boundary (chunk_sectors), front piece first, as mqblk's
//!   block layer does; 6.1's writing task issues every piece in order,
//!   6.12 issues the first piece per zone and a kworker the zone's next
//!   ones, each after the previous completes ("block: Introduce zone write
//!   plugging"). The answers are the same in both kernels and in mqblk
//!   (both modes) for a write past the zone capacity (the pieces before
//!   the one that crosses it land, that one fails: EIO; 6.12 fails the
//!   rest before the driver, disk_zone_wplug_abort, 6.1 lets them fail at
//!   the driver, the zone is left alike), a write longer than a zone from
//!   its start, one that crosses into the next zone while the open and
//!   active limits leave room for every zone it opens, one off the write
//!   pointer that runs into the next zone (its first zone's pieces fail,
//!   the next zone's land, status EIO), and one past the device's end (a
//!   short write, then ENOSPC). The pwrite's status is the last piece's
//!   error if it failed, else the first failed piece's (bio_chain).
//! - A write that crosses zones when a zone it opens finds zone_max_open
//!   or zone_max_active reached: the order of its pieces decides which
//!   zone null_blk closes implicitly, or whether it refuses the next zone.
//!   6.1 issues them zone after zone. 6.12 and 7.x, on one CPU with the
//!   writing task not preempted by the zone write plug's work (the
//!   oracle's guests: one vCPU, the script runner SCHED_FIFO), issue every
//!   zone's first piece from the task, then the zones' further pieces one
//!   zone at a time in turn from their plugs' work once the task sleeps:
//!   the later zone's first piece meets the limit while the earlier zone
//!   is still open (it fails, ETOOMANYREFS or EOVERFLOW, or closes another
//!   open zone). When that work preempts the task, or runs beside it on
//!   another CPU, the answers change from run to run (measured:
//!   docs/results/zoned-oracle-7.txt). mqblk's block layer has no zone
//!   write plugs and issues a split bio's pieces in order, as 6.1; `mqblk
//!   zone script` issues such a write in the plugs' order for 6.12 and 7
//!   (crates/mqblk-cli/src/zone/plug.rs), and the generator makes them
//!   with `--spans-at-limits` (the oracle's scripts).
//!   From ordinary pages a pwrite over 1 MiB is several direct-I/O bios
//!   whose boundaries follow the buffer's physical layout, in both
//!   kernels: the script runner writes from huge pages so that a write is
//!   one bio, as a test of these paths needs.
//!
//! Both kernels as Debian ships them refuse a smaller last zone with a
//! zone capacity below the zone size ("null_blk: Do not allow runt zone
//! with zone capacity smaller then zone size", 6.10, also in 6.1 stable),
//! so mqblk refuses it in either mode.
//!
//! Locking (`zone_lock`), as null_blk since "null_blk: improve zone
//! locking" (2020) and its v3 (a lock of the right kind in each zone):
//! - `per-zone` (default): every zone has its own lock. Its kind follows
//!   memory backing, like the kernel's: without it a command never sleeps
//!   while holding the lock, so it is a spin lock (the `spin` crate's
//!   test-and-test-and-set `SpinMutex`, the kernel's `spin_lock_irq`);
//!   with it, writing may allocate pages (which may sleep in the kernel),
//!   so it is a sleeping mutex (parking_lot's, which like the kernel's
//!   mutex spins briefly before it sleeps). Unlike the kernel's, a user
//!   space spin lock's holder can be preempted: with more runnable
//!   threads than CPUs a waiter may spin through its time slice (the
//!   zone-lock experiment labels such rows oversubscribed). The
//!   device-wide resource lock is taken only when `zone_max_open` or
//!   `zone_max_active` is set, and only around changes of a zone's
//!   open/active state.
//! - `global`: one device lock (of the same kind) around every zoned
//!   command, reads included, and no other zone lock: the design before
//!   that patch (whose `zone_lock` was a spin lock, and the only lock a
//!   command took without memory backing), kept as the baseline of `mqblk
//!   experiment zone-lock`.
//!
//! Lock order: zone, then resources. Implicitly closing another zone to
//! make room (round-robin, as null_blk) needs that zone's lock too; it is
//! only tried (try_lock), and if every candidate is busy the resource lock
//! is dropped and the check retried, so two writers can never deadlock.
//! Single-threaded, the result is the kernel's exactly.
//!
//! Relies on: mqblk's zone types, mem/ (memory backing), parking_lot and
//! spin (the two lock kinds). The typed parameters are in config.rs, the
//! open/active accounting in res.rs, the locks in lock.rs, the zone
//! management commands in mgmt.rs.

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use std::sync::atomic::{AtomicU64, Ordering};

mod config;
mod lock;
mod mgmt;
mod res;

pub use config::{ZonedCompat, ZonedConfig};

use lock::{ZoneGuard, ZoneMutex};
pub use lock::{ZoneLock, ZoneLockKind};
use res::{Count, Res};

use super::mem::MemStore;
use mqblk::driver::Rq;
use mqblk::zoned::{Zone, ZoneCond, ZoneType, ZonedLimits};
use mqblk::Status;
use mqblk::{Op, SECTOR_SHIFT};

/// What memory-backed reads past a sequential zone's wp return.
pub(crate) const NULL_FILL_PATTERN: u8 = 0xff;

#[derive(Debug, Clone, Copy)]
struct ZoneState {
    wp: u64,
    cond: ZoneCond,
    /// 6.12: a write to this zone failed and nothing has told the block
    /// layer the write pointer since (BLK_ZONE_WPLUG_NEED_WP_UPDATE):
    /// writes fail until a report, reset, finish or reset all.
    need_wp_update: bool,
}

impl ZoneState {
    fn new(wp: u64, cond: ZoneCond) -> Self {
        Self { wp, cond, need_wp_update: false }
    }

    /// Moves the zone to `next`, which its condition must allow (the zone
    /// state machine, `ZoneCond::may_become`).
    #[inline]
    fn set_cond(&mut self, next: ZoneCond) {
        debug_assert!(self.cond.may_become(next), "zone: illegal transition {:?} -> {next:?}", self.cond);
        self.cond = next;
    }
}

pub(crate) struct NullZoned {
    limits: ZonedLimits,
    nr_conv: u32,
    capacity_sectors: u64,
    zone_capacity_sectors: u64,
    zones: Box<[CachePadded<ZoneMutex<ZoneState>>]>,
    /// 6.12's zone write plug errors (see the module doc).
    wp_update_after_error: bool,
    lock_kind: ZoneLockKind,
    need_res: bool,
    res: Mutex<Res>,
    global: Option<ZoneMutex<()>>,
    /// Zone (or global) lock acquisitions that found the lock held.
    contended: CachePadded<AtomicU64>,
}

impl NullZoned {
    /// Builds the zones of a device of `capacity_bytes` with logical blocks
    /// of `bs` bytes (null_init_zoned_dev); their locks spin unless the
    /// device is `memory_backed`.
    pub(crate) fn new(cfg: &ZonedConfig, capacity_bytes: u64, bs: u32, memory_backed: bool) -> Result<Self, String> {
        let lock_kind = ZoneLockKind::for_memory_backed(memory_backed);
        let capacity_sectors = capacity_bytes >> SECTOR_SHIFT;
        let (zone_sectors, cap_mb) = Self::check_zones(cfg, capacity_sectors)?;
        let nr_zones = capacity_sectors.div_ceil(zone_sectors) as u32;
        // null_blk's adjustments, in its order.
        let nr_conv = cfg.zone_nr_conv.min(nr_zones - 1);
        let nr_seq = nr_zones - nr_conv;
        let (max_open, max_active) = Self::open_limits(cfg, nr_seq);
        if cfg.zone_readonly + cfg.zone_offline > nr_seq {
            return Err(format!(
                "zone_readonly={} + zone_offline={} exceed the {nr_seq} sequential zones",
                cfg.zone_readonly, cfg.zone_offline
            ));
        }
        let zone_capacity_sectors = (cap_mb << 20) >> SECTOR_SHIFT;
        let append = Self::append_max_sectors(cfg, zone_sectors, zone_capacity_sectors, bs);
        let first_readonly = nr_zones - cfg.zone_readonly - cfg.zone_offline;
        let first_offline = nr_zones - cfg.zone_offline;
        let zones = (0..nr_zones)
            .map(|i| {
                let start = u64::from(i) * zone_sectors;
                let state = if i < nr_conv {
                    ZoneState::new(start + zone_sectors, ZoneCond::NotWp)
                } else if i >= first_offline {
                    ZoneState::new(start, ZoneCond::Offline)
                } else if i >= first_readonly {
                    ZoneState::new(start, ZoneCond::ReadOnly)
                } else if cfg.zone_full {
                    // As null_init_zoned_dev: at the capacity, not the zone's end.
                    let len = zone_sectors.min(capacity_sectors - start);
                    ZoneState::new(start + len.min(zone_capacity_sectors), ZoneCond::Full)
                } else {
                    ZoneState::new(start, ZoneCond::Empty)
                };
                CachePadded::new(ZoneMutex::new(lock_kind, state))
            })
            .collect();
        Ok(Self {
            limits: ZonedLimits {
                zone_sectors,
                nr_zones,
                max_open_zones: max_open,
                max_active_zones: max_active,
                zone_append_max_sectors: append,
            },
            nr_conv,
            capacity_sectors,
            zone_capacity_sectors,
            zones,
            wp_update_after_error: cfg.compat.zone_write_plugs(),
            lock_kind,
            need_res: max_open > 0 || max_active > 0,
            res: Mutex::new(Res { imp_close_zone_no: nr_conv, tracked: true, ..Res::default() }),
            global: (cfg.zone_lock == ZoneLock::Global).then(|| ZoneMutex::new(lock_kind, ())),
            contended: CachePadded::new(AtomicU64::new(0)),
        })
    }

    /// null_init_zoned_dev's checks of the zone size and capacity against
    /// a device of `capacity_sectors` (and of `zone_full` against the
    /// kernel followed): the zone size in sectors and the zone capacity in
    /// MB.
    fn check_zones(cfg: &ZonedConfig, capacity_sectors: u64) -> Result<(u64, u64), String> {
        if !cfg.zone_size_mb.is_power_of_two() {
            return Err(format!("zone_size={} MB must be a power of two", cfg.zone_size_mb));
        }
        let zone_sectors = (cfg.zone_size_mb << 20) >> SECTOR_SHIFT;
        if zone_sectors > capacity_sectors {
            return Err(format!("zone_size={} MB is larger than the device", cfg.zone_size_mb));
        }
        let cap_mb = if cfg.zone_capacity_mb == 0 { cfg.zone_size_mb } else { cfg.zone_capacity_mb };
        if cap_mb > cfg.zone_size_mb {
            return Err(format!("zone_capacity={cap_mb} MB is larger than zone_size={} MB", cfg.zone_size_mb));
        }
        // "null_blk: Do not allow runt zone with zone capacity smaller then
        // zone size": no real device has both, and both oracle kernels
        // (6.12, and 6.1 through its stable backport) refuse them.
        if cap_mb != cfg.zone_size_mb && capacity_sectors % zone_sectors != 0 {
            return Err(format!(
                "a smaller last zone (the size is not a multiple of zone_size={} MB) is not allowed with \
                 zone_capacity={cap_mb} MB below the zone size",
                cfg.zone_size_mb
            ));
        }
        if cfg.zone_full && cfg.compat == ZonedCompat::Linux6_1 {
            return Err("zone_full=1 is a Linux 6.12 parameter: null_blk 6.1 has none (zoned_compat=6.1)".into());
        }
        Ok((zone_sectors, cap_mb))
    }

    /// `zone_max_open` and `zone_max_active` as null_blk adjusts them, in
    /// its order, for `nr_seq` sequential zones (0: no limit).
    fn open_limits(cfg: &ZonedConfig, nr_seq: u32) -> (u32, u32) {
        let mut max_active = cfg.zone_max_active;
        if max_active >= nr_seq {
            max_active = 0;
        }
        let mut max_open = cfg.zone_max_open;
        if max_active > 0 && max_open > max_active {
            max_open = max_active;
        } else if max_open >= nr_seq {
            max_open = 0;
        }
        (max_open, max_active)
    }

    /// The largest zone append in sectors. 6.12 ("null_blk: Introduce
    /// zone_append_max_sectors attribute") aligns the parameter down to the
    /// block size and caps it at the zone capacity, whose value is also the
    /// default. There 0 asks the block layer to emulate zone appends with
    /// writes, which land where native appends would: mqblk keeps them
    /// native and takes 0 (or a value below one block) as the default. 6.1
    /// has no parameter and allows the zone size.
    fn append_max_sectors(cfg: &ZonedConfig, zone_sectors: u64, capacity_sectors: u64, bs: u32) -> u32 {
        let requested = u64::from(cfg.zone_append_max_sectors);
        let sectors = match cfg.compat {
            ZonedCompat::Linux6_1 if requested == 0 => zone_sectors,
            ZonedCompat::Linux6_1 => requested,
            ZonedCompat::Linux6_12 | ZonedCompat::Linux7 => {
                let block_sectors = u64::from(bs >> SECTOR_SHIFT).max(1);
                match requested / block_sectors * block_sectors {
                    0 => capacity_sectors,
                    aligned => aligned.min(capacity_sectors),
                }
            }
        };
        sectors.min(u64::from(u32::MAX)) as u32
    }

    pub(crate) fn limits(&self) -> ZonedLimits {
        self.limits
    }

    /// "per-zone spin contended=N", "global sleep contended=N", ... (for
    /// the device's dump): the lock's scope and kind, and how many
    /// acquisitions found it held.
    pub(crate) fn lock_name(&self) -> String {
        let scope = if self.global.is_some() { "global" } else { "per-zone" };
        let contended = self.contended.load(Ordering::Relaxed);
        format!("{scope} {} contended={contended}", self.lock_kind.name())
    }

    /// Zone `zno`'s state, for a caller that holds `lock_global()`'s guard
    /// (every caller does: `process`, `report` and what they call). Under
    /// `zone_lock=global` that lock alone excludes every other command, so
    /// the zone's own lock is not taken: null_blk before "null_blk: improve
    /// zone locking" took its device `zone_lock` and nothing else (the
    /// bitmap of zone locks only with memory backing).
    #[inline]
    fn lock_zone(&self, zno: usize) -> ZoneGuard<'_, ZoneState> {
        match &self.global {
            Some(global) => {
                debug_assert!(global.is_locked(), "zone {zno} reached without the global zone lock");
                // Under zone_lock=global every access to a zone's state
                // holds that lock: through here, or (close_imp_open_zone)
                // through try_lock on a zone other than the one whose guard
                // the caller holds; no caller takes a second guard of a zone
                // it holds (under per-zone locks that would spin forever).
                // SAFETY: the caller holds the global lock while the guard lives.
                unsafe { self.zones[zno].under_global() }
            }
            None => self.zones[zno].lock(&self.contended),
        }
    }

    fn lock_global(&self) -> Option<ZoneGuard<'_, ()>> {
        self.global.as_ref().map(|g| g.lock(&self.contended))
    }

    fn zone_start(&self, zno: usize) -> u64 {
        zno as u64 * self.limits.zone_sectors
    }

    /// Zone length: the last zone may be smaller.
    fn zone_len(&self, zno: usize) -> u64 {
        self.limits.zone_sectors.min(self.capacity_sectors - self.zone_start(zno))
    }

    fn zone_capacity(&self, zno: usize) -> u64 {
        if self.is_conv(zno) {
            self.zone_len(zno)
        } else {
            self.zone_len(zno).min(self.zone_capacity_sectors)
        }
    }

    fn is_conv(&self, zno: usize) -> bool {
        zno < self.nr_conv as usize
    }

    /// Fills `out` with up to `nr` zones from the one holding `sector`.
    pub(crate) fn report(&self, sector: u64, nr: usize, out: &mut Vec<Zone>) {
        let _global = self.lock_global();
        let first = (sector / self.limits.zone_sectors) as usize;
        for zno in first..self.zones.len().min(first.saturating_add(nr)) {
            let st = {
                let mut z = self.lock_zone(zno);
                // A report tells the block layer the write pointer again
                // (6.12's disk_zone_wplug_sync_wp_offset).
                z.need_wp_update = false;
                *z
            };
            out.push(Zone {
                start: self.zone_start(zno),
                len: self.zone_len(zno),
                capacity: self.zone_capacity(zno),
                wp: st.wp,
                ztype: if self.is_conv(zno) { ZoneType::Conventional } else { ZoneType::SeqWriteRequired },
                cond: st.cond,
            });
        }
    }

    /// Runs a request on the zones (null_process_zoned_cmd). The block
    /// layer keeps every request inside one zone.
    pub(crate) fn process(&self, rq: &mut Rq, mem: Option<&MemStore>) -> Status {
        let _global = self.lock_global();
        match rq.op() {
            Op::Read => self.read(rq, mem),
            Op::Write | Op::WriteZeroes => self.write(rq, mem, false),
            Op::ZoneAppend => self.write(rq, mem, true),
            Op::ZoneResetAll => {
                self.reset_all(mem);
                Status::Ok
            }
            Op::ZoneReset | Op::ZoneOpen | Op::ZoneClose | Op::ZoneFinish => self.mgmt(rq.op(), rq.sector(), mem),
            Op::Flush => Status::Ok,
            Op::Discard => Status::NotSupp,
        }
    }

    fn read(&self, rq: &mut Rq, mem: Option<&MemStore>) -> Status {
        let zno = (rq.sector() / self.limits.zone_sectors) as usize;
        let st = self.lock_zone(zno);
        if st.cond == ZoneCond::Offline {
            return Status::IoErr;
        }
        let Some(mem) = mem else { return Status::Ok };
        // Memory-backed sequential zones read 0xff at and past the wp
        // (null_blk's nullb_fill_pattern; the kernel oracle showed it on
        // 6.1, where a plain guess would have said zeros).
        let valid_end_bytes = if self.is_conv(zno) { u64::MAX } else { st.wp << SECTOR_SHIFT };
        rq.for_each_segment_mut(|pos, seg| {
            let valid = valid_end_bytes.saturating_sub(pos).min(seg.len() as u64) as usize;
            mem.read(pos, &mut seg[..valid]);
            seg[valid..].fill(NULL_FILL_PATTERN);
        });
        Status::Ok
    }

    fn write_data(rq: &Rq, sector: u64, mem: Option<&MemStore>) {
        let Some(mem) = mem else { return };
        let base = sector << SECTOR_SHIFT;
        let shift = base.wrapping_sub(rq.pos_bytes());
        if rq.op() == Op::WriteZeroes {
            mem.zero(base, rq.len_bytes());
            return;
        }
        // A zone append writes at the wp, not at the request's sector.
        rq.for_each_segment(|pos, seg| mem.write(pos.wrapping_add(shift), seg));
    }

    /// A write or zone append to a zone: 6.12's zone write plug (the
    /// module doc), then null_zone_write.
    fn write(&self, rq: &mut Rq, mem: Option<&MemStore>, append: bool) -> Status {
        let zno = (rq.sector() / self.limits.zone_sectors) as usize;
        if self.is_conv(zno) {
            // Conventional zones have no write plug.
            if append {
                return Status::IoErr;
            }
            Self::write_data(rq, rq.sector(), mem);
            return Status::Ok;
        }
        let mut z = self.lock_zone(zno);
        if self.wp_update_after_error {
            if append {
                // A native append drops the zone's plug and its mark
                // (blk_zone_wplug_handle_native_zone_append).
                z.need_wp_update = false;
            } else if z.need_wp_update {
                return Status::IoErr;
            }
        }
        let status = self.null_zone_write(rq, &mut z, zno, mem, append);
        self.debug_check(zno, &z);
        if status != Status::Ok && !append && self.wp_update_after_error {
            // blk_zone_write_plug_bio_endio: a failed write leaves the
            // block layer unsure of the write pointer.
            z.need_wp_update = true;
        }
        status
    }

    /// null_zone_write, under the zone's lock.
    fn null_zone_write(
        &self,
        rq: &mut Rq,
        z: &mut ZoneState,
        zno: usize,
        mem: Option<&MemStore>,
        append: bool,
    ) -> Status {
        let mut sector = rq.sector();
        let nr = u64::from(rq.nr_sectors());
        if matches!(z.cond, ZoneCond::Full | ZoneCond::ReadOnly | ZoneCond::Offline) {
            return Status::IoErr;
        }
        if append {
            sector = z.wp;
            rq.set_append_sector(sector);
        } else if sector != z.wp {
            return Status::IoErr;
        }
        let start = self.zone_start(zno);
        if z.wp + nr > start + self.zone_capacity(zno) {
            return Status::IoErr;
        }
        if matches!(z.cond, ZoneCond::Closed | ZoneCond::Empty) {
            let mut res = match self.admit(zno, z.cond) {
                Ok(res) => res,
                Err(status) => return status,
            };
            if z.cond == ZoneCond::Closed {
                res.dec(Count::Closed);
            }
            res.inc(Count::ImpOpen);
            z.set_cond(ZoneCond::ImpOpen);
        }
        Self::write_data(rq, sector, mem);
        z.wp += nr;
        if z.wp == start + self.zone_capacity(zno) {
            let mut res = self.res_lock();
            match z.cond {
                ZoneCond::ExpOpen => res.dec(Count::ExpOpen),
                ZoneCond::ImpOpen => res.dec(Count::ImpOpen),
                _ => {}
            }
            z.set_cond(ZoneCond::Full);
        }
        Status::Ok
    }

    /// The write pointer agrees with the zone's condition: at the start
    /// when empty, inside the writable part when open or closed (a closed
    /// zone holds data), at the capacity or the zone's end when full.
    #[inline]
    fn debug_check(&self, zno: usize, z: &ZoneState) {
        if !cfg!(debug_assertions) {
            return;
        }
        let (start, cap, len) = (self.zone_start(zno), self.zone_capacity(zno), self.zone_len(zno));
        let ok = match z.cond {
            ZoneCond::Empty => z.wp == start,
            ZoneCond::ImpOpen | ZoneCond::ExpOpen => z.wp >= start && z.wp < start + cap,
            ZoneCond::Closed => z.wp > start && z.wp < start + cap,
            ZoneCond::Full => z.wp == start + cap || z.wp == start + len,
            _ => true,
        };
        assert!(ok, "zone {zno}: write pointer {} disagrees with {:?} (start {start}, capacity {cap})", z.wp, z.cond);
    }
}

#[cfg(test)]
mod tests;
