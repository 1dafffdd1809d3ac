//! Open/active zone accounting (null_blk's `nr_zones_imp_open`,
//! `nr_zones_exp_open`, `nr_zones_closed`) and the admission of a zone
//! that opens: `zone_max_open` / `zone_max_active`, making room by
//! implicitly closing another zone round-robin (null_check_zone_resources,
//! null_close_imp_open_zone).
//!
//! Relies on: the zone locks of mod.rs (taken before the resource lock;
//! other zones' locks only tried).

use std::ops::{Deref, DerefMut};

use parking_lot::MutexGuard;

use super::{NullZoned, ZoneCond};
use mqblk::Status;

/// Open/active accounting (`nr_zones_imp_open` etc.).
#[derive(Debug, Default)]
pub(super) struct Res {
    pub(super) imp_open: u32,
    pub(super) exp_open: u32,
    pub(super) closed: u32,
    /// Where the round-robin search for an implicitly open zone to close
    /// starts.
    pub(super) imp_close_zone_no: u32,
    /// False for the scratch counts used without limits.
    pub(super) tracked: bool,
}

#[derive(Clone, Copy)]
pub(super) enum Count {
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

    pub(super) fn inc(&mut self, c: Count) {
        if self.tracked {
            *self.field(c) += 1;
        }
    }

    pub(super) fn dec(&mut self, c: Count) {
        if self.tracked {
            let v = self.field(c);
            assert!(*v > 0, "zone resource count underflow");
            *v -= 1;
        }
    }
}

/// The resource lock when limits exist, else scratch counts nobody reads.
pub(super) enum ResLock<'a> {
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
pub(super) enum Admit {
    Yes,
    No(Status),
    /// Yes, once an implicitly open zone is closed.
    CloseImpOpen,
}

impl NullZoned {
    pub(super) fn res_lock(&self) -> ResLock<'_> {
        if self.need_res {
            ResLock::Held(self.res.lock())
        } else {
            ResLock::Unused(Res::default())
        }
    }

    /// The resource lock, with room made for zone `zno` (in `cond`, EMPTY
    /// or CLOSED) to open (null_check_zone_resources).
    pub(super) fn admit(&self, zno: usize, cond: ZoneCond) -> Result<ResLock<'_>, Status> {
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
}
