//! The null device's capabilities beyond the request path, each offered
//! by `NullDriver::capabilities` (lib.rs) only where the device has what it
//! needs: zone reports (`zoned=1`), direct reads and block status (memory
//! backing), power cuts (a write cache) and live attributes (`badblocks`).
//!
//! Relies on: lib.rs (`NullDriver`'s fields); zoned/ for reports, store.rs
//! and mem/ for direct reads and holes, cache.rs for power cuts,
//! badblocks.rs for the attribute.

use mqblk::Status;

use crate::mem::{self, MemStore};
use crate::store::Store;
use crate::NullDriver;

impl NullDriver {
    /// The memory store, where a read may be served from it directly: a
    /// plain memory-backed device (`direct_reads`) with no bad blocks now.
    fn direct_store(&self) -> Option<&MemStore> {
        match &self.mem {
            Some(Store::Memory(mem)) if self.direct_reads && self.badblocks.is_empty() => Some(mem),
            _ => None,
        }
    }
}

/// Zone reports: offered when `zoned=1`.
impl mqblk::driver::Zoned for NullDriver {
    fn report_zones(&self, sector: u64, nr: usize, out: &mut Vec<mqblk::zoned::Zone>) -> Result<(), Status> {
        let z = self.zoned.as_ref().expect("offered only when zoned");
        z.report(sector, nr, out);
        Ok(())
    }
}

/// Direct access: offered when memory-backed; each read may still decline.
impl mqblk::driver::DirectAccess for NullDriver {
    /// Memory-backed, and a read would do nothing but copy: no cache in
    /// front of the store, no faults or bad blocks, no zones, no service
    /// model or completion thread (whose timing a direct read would skip).
    fn read_direct(&self, offset: u64, len: u64, f: &mut mqblk::driver::ReadFn<'_>) -> Option<std::io::Result<()>> {
        Some(self.direct_store()?.lend(offset, len, f))
    }

    /// Memory-backed (as `read_direct` is), on a kernel with 4 KiB pages
    /// that takes lent frames back (mem/lent.rs).
    #[cfg(not(loom))]
    fn lends_past_reads(&self) -> bool {
        matches!(&self.mem, Some(Store::Memory(mem)) if self.direct_reads && mem.lends())
    }

    /// As `read_direct`, the pages kept for whoever holds them (mem/lent.rs).
    #[cfg(not(loom))]
    fn read_direct_lent(
        &self,
        offset: u64,
        len: u64,
        f: &mut mqblk::driver::ReadFn<'_>,
    ) -> Option<std::io::Result<()>> {
        self.direct_store()?.lend_past(offset, len, f)
    }
}

/// Holes and data: offered when memory-backed.
impl mqblk::driver::BlockStatus for NullDriver {
    /// Memory-backed: unwritten pages are holes. Without memory backing
    /// reads return whatever the buffer held, so nothing is claimed.
    fn block_status(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) {
        let mem = self.mem.as_ref().expect("offered only when memory-backed");
        mqblk::driver::extents_by(offset, len, mem::PAGE_SIZE, out, |pos| !mem.is_present(pos));
    }

    /// Memory-backed: a page-table lookup per page (a file asks the
    /// kernel, SEEK_DATA, per page: not cheap).
    fn is_cheap(&self) -> bool {
        matches!(self.mem, Some(Store::Memory(_)))
    }
}

/// Power cuts: offered with a volatile write cache (`cache_size`).
impl mqblk::driver::PowerControl for NullDriver {
    /// Drops the write cache: unflushed writes are lost (torn into the
    /// medium with `powercut_tear`); the device goes on with the durable
    /// state.
    fn power_cut(&self, hold_off: bool) -> Result<u64, mqblk::Error> {
        let (Some(c), Some(mem)) = (&self.cache, &self.mem) else {
            unreachable!("offered only with a write cache, which needs memory_backed=1")
        };
        Ok(c.power_cut(mem, hold_off))
    }

    fn power_on(&self) -> Result<u64, mqblk::Error> {
        let conflict =
            |message: &str| mqblk::config::ConfigError::Conflict { driver: "null".into(), message: message.into() };
        let c = self.cache.as_ref().expect("offered only with a write cache");
        c.power_on().ok_or_else(|| conflict("power_on: the power is on (power_off first)").into())
    }
}

/// Live attributes (`badblocks`): always offered.
impl mqblk::driver::Attributes for NullDriver {
    /// null_blk's configfs attributes that change a live device:
    /// `badblocks` (`+START-END`, `-START-END`).
    fn set_attr(&self, key: &str, value: &str) -> Result<(), mqblk::Error> {
        let conflict = |message: String| mqblk::config::ConfigError::Conflict { driver: "null".into(), message };
        match key {
            "badblocks" if self.zoned.is_some() => {
                Err(conflict("badblocks on a zoned device is not supported (zoned=1)".into()).into())
            }
            "badblocks" => self.badblocks.store(value).map_err(|e| conflict(e).into()),
            _ => Err(conflict(format!("no attribute '{key}' to set on a live device (accepted: badblocks)")).into()),
        }
    }

    fn attr(&self, key: &str) -> Result<String, mqblk::Error> {
        match key {
            "badblocks" => Ok(self.badblocks.list()),
            _ => Err(mqblk::config::ConfigError::Conflict {
                driver: "null".into(),
                message: format!("no attribute '{key}' (accepted: badblocks)"),
            }
            .into()),
        }
    }
}
