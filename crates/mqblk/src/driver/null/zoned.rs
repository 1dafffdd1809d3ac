//! null_blk's zoned emulation (`zoned=1`): conventional zones first, then
//! sequential-write-required zones, with Linux 6.1 null_blk's state machine
//! (drivers/block/null_blk/zoned.c, summarised in KERNEL-FACTS.md) and the
//! locking design of "null_blk: improve zone locking" (2020).
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
//!   command, reads included: the design before that patch (whose
//!   `zone_lock` was a spin lock), kept as the baseline of `mqblk
//!   experiment zone-lock`.
//!
//! Lock order: zone, then resources. Implicitly closing another zone to
//! make room (round-robin, as null_blk) needs that zone's lock too; it is
//! only tried (try_lock), and if every candidate is busy the resource lock
//! is dropped and the check retried, so two writers can never deadlock.
//! Single-threaded, the result is the kernel's exactly.
//!
//! Relies on: zoned.rs (types), mem.rs (memory backing), parking_lot and
//! spin (the two lock kinds).

use std::ops::{Deref, DerefMut};

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};
use spin::mutex::{SpinMutex, SpinMutexGuard};

use std::sync::atomic::{AtomicU64, Ordering};

use super::mem::MemStore;
use crate::request::{Op, Rq, SECTOR_SHIFT};
use crate::status::Status;
use crate::zoned::{Zone, ZoneCond, ZoneType, ZonedLimits};

/// `zone_lock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneLock {
    PerZone,
    Global,
}

/// How a zone lock waits (chosen by memory backing, as null_blk does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneLockKind {
    /// Spins (no memory backing: nothing sleeps under the lock).
    Spin,
    /// Sleeps (memory backing: a write may allocate under the lock).
    Sleep,
}

impl ZoneLockKind {
    /// The kind null_blk uses with or without memory backing.
    pub fn for_memory_backed(memory_backed: bool) -> Self {
        if memory_backed {
            Self::Sleep
        } else {
            Self::Spin
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Spin => "spin",
            Self::Sleep => "sleep",
        }
    }
}

/// A zone's lock (or the global one): a spin lock or a sleeping mutex.
/// The kind is fixed when the device is made; each lock pays one
/// predictable branch on it, as null_blk's `if (dev->memory_backed)`.
enum ZoneMutex<T> {
    Spin(SpinMutex<T>),
    Sleep(Mutex<T>),
}

enum ZoneGuard<'a, T> {
    Spin(SpinMutexGuard<'a, T>),
    Sleep(MutexGuard<'a, T>),
}

impl<T> ZoneMutex<T> {
    fn new(kind: ZoneLockKind, value: T) -> Self {
        match kind {
            ZoneLockKind::Spin => Self::Spin(SpinMutex::new(value)),
            ZoneLockKind::Sleep => Self::Sleep(Mutex::new(value)),
        }
    }

    /// Locks, counting in `contended` an acquisition that found the lock
    /// held. Uncontended this is one compare-and-swap, as a plain lock.
    #[inline]
    fn lock(&self, contended: &AtomicU64) -> ZoneGuard<'_, T> {
        if let Some(guard) = self.try_lock() {
            return guard;
        }
        // Statistics only: Relaxed, and paid only by a waiter.
        contended.fetch_add(1, Ordering::Relaxed);
        match self {
            Self::Spin(m) => ZoneGuard::Spin(m.lock()),
            Self::Sleep(m) => ZoneGuard::Sleep(m.lock()),
        }
    }

    fn try_lock(&self) -> Option<ZoneGuard<'_, T>> {
        match self {
            Self::Spin(m) => m.try_lock().map(ZoneGuard::Spin),
            Self::Sleep(m) => m.try_lock().map(ZoneGuard::Sleep),
        }
    }
}

impl<T> Deref for ZoneGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        match self {
            ZoneGuard::Spin(g) => g,
            ZoneGuard::Sleep(g) => g,
        }
    }
}

impl<T> DerefMut for ZoneGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        match self {
            ZoneGuard::Spin(g) => g,
            ZoneGuard::Sleep(g) => g,
        }
    }
}

/// The zoned parameters of a null device (null_blk's names; MiB units):
/// `ZonedConfig::new()` is null_blk's defaults (256 MiB zones, no limits),
/// changed by a setter named as each field.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZonedConfig {
    pub zone_size_mb: u64,
    /// 0: the zone size.
    pub zone_capacity_mb: u64,
    pub zone_nr_conv: u32,
    pub zone_max_open: u32,
    pub zone_max_active: u32,
    /// 0: the zone size (null_blk's default).
    pub zone_append_max_sectors: u32,
    /// Sequential zones (the last ones) that start READONLY / OFFLINE.
    pub zone_readonly: u32,
    pub zone_offline: u32,
    pub zone_lock: ZoneLock,
}

impl Default for ZonedConfig {
    fn default() -> Self {
        Self {
            zone_size_mb: 256,
            zone_capacity_mb: 0,
            zone_nr_conv: 0,
            zone_max_open: 0,
            zone_max_active: 0,
            zone_append_max_sectors: 0,
            zone_readonly: 0,
            zone_offline: 0,
            zone_lock: ZoneLock::PerZone,
        }
    }
}

impl ZonedConfig {
    /// null_blk's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    crate::config::setters! {
        zone_size_mb: u64,
        zone_capacity_mb: u64,
        zone_nr_conv: u32,
        zone_max_open: u32,
        zone_max_active: u32,
        zone_append_max_sectors: u32,
        zone_readonly: u32,
        zone_offline: u32,
        zone_lock: ZoneLock,
    }
}

/// What memory-backed reads past a sequential zone's wp return.
pub(crate) const NULL_FILL_PATTERN: u8 = 0xff;

#[derive(Debug, Clone, Copy)]
struct ZoneState {
    wp: u64,
    cond: ZoneCond,
}

/// Open/active accounting (`nr_zones_imp_open` etc.).
#[derive(Debug, Default)]
struct Res {
    imp_open: u32,
    exp_open: u32,
    closed: u32,
    /// Where the round-robin search for an implicitly open zone to close
    /// starts.
    imp_close_zone_no: u32,
    /// False for the scratch counts used without limits.
    tracked: bool,
}

#[derive(Clone, Copy)]
enum Count {
    ImpOpen,
    ExpOpen,
    Closed,
}

impl Res {
    fn field(&mut self, c: Count) -> &mut u32 {
        match c {
            Count::ImpOpen => &mut self.imp_open,
            Count::ExpOpen => &mut self.exp_open,
            Count::Closed => &mut self.closed,
        }
    }

    fn inc(&mut self, c: Count) {
        if self.tracked {
            *self.field(c) += 1;
        }
    }

    fn dec(&mut self, c: Count) {
        if self.tracked {
            let v = self.field(c);
            assert!(*v > 0, "zone resource count underflow");
            *v -= 1;
        }
    }
}

/// The resource lock when limits exist, else scratch counts nobody reads.
enum ResLock<'a> {
    Held(MutexGuard<'a, Res>),
    Unused(Res),
}

impl Deref for ResLock<'_> {
    type Target = Res;
    fn deref(&self) -> &Res {
        match self {
            ResLock::Held(g) => g,
            ResLock::Unused(r) => r,
        }
    }
}

impl DerefMut for ResLock<'_> {
    fn deref_mut(&mut self) -> &mut Res {
        match self {
            ResLock::Held(g) => g,
            ResLock::Unused(r) => r,
        }
    }
}

/// What a resource check asks for.
enum Admit {
    Yes,
    No(Status),
    /// Yes, once an implicitly open zone is closed.
    CloseImpOpen,
}

pub(crate) struct NullZoned {
    limits: ZonedLimits,
    nr_conv: u32,
    capacity_sectors: u64,
    zone_capacity_sectors: u64,
    zones: Box<[CachePadded<ZoneMutex<ZoneState>>]>,
    lock_kind: ZoneLockKind,
    need_res: bool,
    res: Mutex<Res>,
    global: Option<ZoneMutex<()>>,
    /// Zone (or global) lock acquisitions that found the lock held.
    contended: CachePadded<AtomicU64>,
}

impl NullZoned {
    /// Builds the zones of a device of `capacity_bytes` (null_init_zoned_dev);
    /// their locks spin unless the device is `memory_backed`.
    pub(crate) fn new(cfg: &ZonedConfig, capacity_bytes: u64, memory_backed: bool) -> Result<Self, String> {
        let lock_kind = ZoneLockKind::for_memory_backed(memory_backed);
        if !cfg.zone_size_mb.is_power_of_two() {
            return Err(format!("zone_size={} MB must be a power of two", cfg.zone_size_mb));
        }
        let zone_sectors = (cfg.zone_size_mb << 20) >> SECTOR_SHIFT;
        let capacity_sectors = capacity_bytes >> SECTOR_SHIFT;
        if zone_sectors > capacity_sectors {
            return Err(format!("zone_size={} MB is larger than the device", cfg.zone_size_mb));
        }
        let cap_mb = if cfg.zone_capacity_mb == 0 { cfg.zone_size_mb } else { cfg.zone_capacity_mb };
        if cap_mb > cfg.zone_size_mb {
            return Err(format!("zone_capacity={cap_mb} MB is larger than zone_size={} MB", cfg.zone_size_mb));
        }
        let nr_zones = capacity_sectors.div_ceil(zone_sectors) as u32;
        // null_blk's adjustments, in its order.
        let nr_conv = cfg.zone_nr_conv.min(nr_zones - 1);
        let nr_seq = nr_zones - nr_conv;
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
        if cfg.zone_readonly + cfg.zone_offline > nr_seq {
            return Err(format!(
                "zone_readonly={} + zone_offline={} exceed the {nr_seq} sequential zones",
                cfg.zone_readonly, cfg.zone_offline
            ));
        }
        let append = if cfg.zone_append_max_sectors == 0 { zone_sectors as u32 } else { cfg.zone_append_max_sectors };
        let zone_capacity_sectors = (cap_mb << 20) >> SECTOR_SHIFT;
        let first_readonly = nr_zones - cfg.zone_readonly - cfg.zone_offline;
        let first_offline = nr_zones - cfg.zone_offline;
        let zones = (0..nr_zones)
            .map(|i| {
                let start = u64::from(i) * zone_sectors;
                let state = if i < nr_conv {
                    ZoneState { wp: start + zone_sectors, cond: ZoneCond::NotWp }
                } else if i >= first_offline {
                    ZoneState { wp: start, cond: ZoneCond::Offline }
                } else if i >= first_readonly {
                    ZoneState { wp: start, cond: ZoneCond::ReadOnly }
                } else {
                    ZoneState { wp: start, cond: ZoneCond::Empty }
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
            lock_kind,
            need_res: max_open > 0 || max_active > 0,
            res: Mutex::new(Res { imp_close_zone_no: nr_conv, tracked: true, ..Res::default() }),
            global: (cfg.zone_lock == ZoneLock::Global).then(|| ZoneMutex::new(lock_kind, ())),
            contended: CachePadded::new(AtomicU64::new(0)),
        })
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

    fn lock_zone(&self, zno: usize) -> ZoneGuard<'_, ZoneState> {
        self.zones[zno].lock(&self.contended)
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

    fn res_lock(&self) -> ResLock<'_> {
        if self.need_res {
            ResLock::Held(self.res.lock())
        } else {
            ResLock::Unused(Res::default())
        }
    }

    /// Fills `out` with up to `nr` zones from the one holding `sector`.
    pub(crate) fn report(&self, sector: u64, nr: usize, out: &mut Vec<Zone>) {
        let _global = self.lock_global();
        let first = (sector / self.limits.zone_sectors) as usize;
        for zno in first..self.zones.len().min(first.saturating_add(nr)) {
            let st = *self.lock_zone(zno);
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

    /// null_zone_write.
    fn write(&self, rq: &mut Rq, mem: Option<&MemStore>, append: bool) -> Status {
        let mut sector = rq.sector();
        let nr = u64::from(rq.nr_sectors());
        let zno = (sector / self.limits.zone_sectors) as usize;
        if self.is_conv(zno) {
            if append {
                return Status::IoErr;
            }
            Self::write_data(rq, sector, mem);
            return Status::Ok;
        }
        let mut z = self.lock_zone(zno);
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
            z.cond = ZoneCond::ImpOpen;
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
            z.cond = ZoneCond::Full;
        }
        Status::Ok
    }

    /// The resource lock, with room made for zone `zno` (in `cond`, EMPTY
    /// or CLOSED) to open (null_check_zone_resources).
    fn admit(&self, zno: usize, cond: ZoneCond) -> Result<ResLock<'_>, Status> {
        loop {
            let mut res = self.res_lock();
            match self.check_resources(&res, cond) {
                Admit::Yes => return Ok(res),
                Admit::No(status) => return Err(status),
                Admit::CloseImpOpen => {
                    if self.close_imp_open_zone(zno, &mut res) {
                        return Ok(res);
                    }
                }
            }
            // Every implicitly open zone is busy: let its holder finish.
            drop(res);
            std::thread::yield_now();
        }
    }

    fn check_active(&self, res: &Res) -> Result<(), Status> {
        let max = self.limits.max_active_zones;
        if max == 0 || res.exp_open + res.imp_open + res.closed < max {
            Ok(())
        } else {
            Err(Status::ZoneActiveResource)
        }
    }

    fn check_resources(&self, res: &Res, cond: ZoneCond) -> Admit {
        if cond == ZoneCond::Empty {
            if let Err(s) = self.check_active(res) {
                return Admit::No(s);
            }
        }
        let max_open = self.limits.max_open_zones;
        if max_open == 0 || res.exp_open + res.imp_open < max_open {
            return Admit::Yes;
        }
        if res.imp_open > 0 && self.check_active(res).is_ok() {
            return Admit::CloseImpOpen;
        }
        Admit::No(Status::ZoneOpenResource)
    }

    /// Closes the next implicitly open zone round-robin (not `busy_zno`,
    /// whose lock the caller holds). False if every candidate is locked.
    fn close_imp_open_zone(&self, busy_zno: usize, res: &mut Res) -> bool {
        let (first, end) = (self.nr_conv as usize, self.zones.len());
        let mut zno = res.imp_close_zone_no as usize;
        if zno >= end {
            zno = first;
        }
        for _ in first..end {
            let this = zno;
            zno = if zno + 1 >= end { first } else { zno + 1 };
            if this == busy_zno {
                continue;
            }
            let Some(mut z) = self.zones[this].try_lock() else { continue };
            if z.cond == ZoneCond::ImpOpen {
                let _ = self.close_zone(this, &mut z, res);
                res.imp_close_zone_no = zno as u32;
                return true;
            }
        }
        false
    }

    /// __null_close_zone.
    fn close_zone(&self, zno: usize, z: &mut ZoneState, res: &mut Res) -> Status {
        match z.cond {
            ZoneCond::Closed => return Status::Ok,
            ZoneCond::ImpOpen => res.dec(Count::ImpOpen),
            ZoneCond::ExpOpen => res.dec(Count::ExpOpen),
            _ => return Status::IoErr,
        }
        if z.wp == self.zone_start(zno) {
            z.cond = ZoneCond::Empty;
        } else {
            z.cond = ZoneCond::Closed;
            res.inc(Count::Closed);
        }
        Status::Ok
    }

    fn mgmt(&self, op: Op, sector: u64, mem: Option<&MemStore>) -> Status {
        let zno = (sector / self.limits.zone_sectors) as usize;
        if self.is_conv(zno) {
            return Status::IoErr;
        }
        let mut z = self.lock_zone(zno);
        match op {
            Op::ZoneReset => self.reset_zone(zno, &mut z, mem),
            Op::ZoneOpen => self.open_zone(zno, &mut z),
            Op::ZoneClose => {
                let mut res = self.res_lock();
                self.close_zone(zno, &mut z, &mut res)
            }
            Op::ZoneFinish => self.finish_zone(zno, &mut z),
            _ => Status::NotSupp,
        }
    }

    fn reset_all(&self, mem: Option<&MemStore>) {
        for zno in self.nr_conv as usize..self.zones.len() {
            let mut z = self.lock_zone(zno);
            if !matches!(z.cond, ZoneCond::Empty | ZoneCond::ReadOnly | ZoneCond::Offline) {
                let _ = self.reset_zone(zno, &mut z, mem);
            }
        }
    }

    fn reset_zone(&self, zno: usize, z: &mut ZoneState, mem: Option<&MemStore>) -> Status {
        {
            let mut res = self.res_lock();
            match z.cond {
                ZoneCond::Empty => return Status::Ok,
                ZoneCond::ImpOpen => res.dec(Count::ImpOpen),
                ZoneCond::ExpOpen => res.dec(Count::ExpOpen),
                ZoneCond::Closed => res.dec(Count::Closed),
                ZoneCond::Full => {}
                _ => return Status::IoErr,
            }
            z.cond = ZoneCond::Empty;
            z.wp = self.zone_start(zno);
        }
        if let Some(mem) = mem {
            mem.zero(self.zone_start(zno) << SECTOR_SHIFT, self.zone_len(zno) << SECTOR_SHIFT);
        }
        Status::Ok
    }

    fn open_zone(&self, zno: usize, z: &mut ZoneState) -> Status {
        let mut res = match z.cond {
            ZoneCond::ExpOpen => return Status::Ok,
            ZoneCond::Empty | ZoneCond::Closed => match self.admit(zno, z.cond) {
                Ok(res) => res,
                Err(status) => return status,
            },
            ZoneCond::ImpOpen => self.res_lock(),
            _ => return Status::IoErr,
        };
        match z.cond {
            ZoneCond::ImpOpen => res.dec(Count::ImpOpen),
            ZoneCond::Closed => res.dec(Count::Closed),
            _ => {}
        }
        z.cond = ZoneCond::ExpOpen;
        res.inc(Count::ExpOpen);
        Status::Ok
    }

    fn finish_zone(&self, zno: usize, z: &mut ZoneState) -> Status {
        let mut res = match z.cond {
            ZoneCond::Full => return Status::Ok,
            ZoneCond::Empty | ZoneCond::Closed => match self.admit(zno, z.cond) {
                Ok(res) => res,
                Err(status) => return status,
            },
            ZoneCond::ImpOpen | ZoneCond::ExpOpen => self.res_lock(),
            _ => return Status::IoErr,
        };
        match z.cond {
            ZoneCond::ImpOpen => res.dec(Count::ImpOpen),
            ZoneCond::ExpOpen => res.dec(Count::ExpOpen),
            ZoneCond::Closed => res.dec(Count::Closed),
            _ => {}
        }
        z.cond = ZoneCond::Full;
        z.wp = self.zone_start(zno) + self.zone_len(zno);
        Status::Ok
    }
}
