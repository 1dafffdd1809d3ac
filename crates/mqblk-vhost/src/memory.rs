//! The guest's memory as the queues see it: each memory table the
//! frontend sends (SET_MEM_TABLE) is checked against its files before any
//! queue uses it, and the mappings whose files could still shrink are
//! guarded against SIGBUS (guard.rs).
//!
//! Steps of `MemoryWatch::update`, on the connection's thread:
//! 1. vhost-user-backend has mapped the regions and swapped them into the
//!    daemon's `GuestMemoryAtomic` (which only that thread reads: the
//!    rings' used index at SET_VRING_ADDR); the queues read another one,
//!    `served`.
//! 2. Each region is checked (`protection`): for a regular file (a memfd
//!    is one) `mmap_offset + memory_size` must fit in its size, else the
//!    table is refused, naming the region and the sizes. Mapped past its
//!    file's end, a region's first access there would be SIGBUS.
//! 3. A region whose file carries F_SEAL_SHRINK (QEMU's memfd backend
//!    seals by default) needs nothing more. Any other could be truncated
//!    later: its mapping is registered with the guard, whose handler
//!    survives the fault and sets the connection's `faulted` flag, which
//!    the queues read (a load per request) and answer by ending the
//!    connection.
//! 4. The table is copied into `served` only then, so no queue ever reads
//!    an unchecked or unguarded mapping. A refused table is undone: the
//!    daemon's memory goes back to the last good one, the frontend gets
//!    an error reply and vhost-user-backend ends the connection.
//!
//! A replaced table stays guarded while requests still borrow it (a
//! slot's `Arc`): after each update, tables that nothing but this watch
//! holds are let go. Their count is exact then: the served memory's swap
//! (arc-swap) turns every reader's borrowed load of the old table into a
//! counted one before it returns. At the connection's end, when no thread
//! touches guest memory any more, every guard is released.
//!
//! Relies on: guard.rs; vm-memory (`GuestMemoryAtomic`, regions' files).

use std::fmt;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryRegion, GuestRegionMmap};

use crate::guard::{self, Guarded};
use crate::queue::Mem;

/// Why a memory table is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableError {
    /// The region runs past the end of its file.
    PastEnd { region: usize, guest_addr: u64, offset: u64, size: u64, file_bytes: u64 },
    /// `mmap_offset + memory_size` overflows.
    Overflow { region: usize, offset: u64, size: u64 },
    /// Its file could not be inspected or guarded.
    File { region: usize, what: &'static str, error: String },
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableError::PastEnd { region, guest_addr, offset, size, file_bytes } => write!(
                f,
                "memory region {region} (guest address {guest_addr:#x}, {size} bytes at file offset {offset}) \
                 runs past the end of its file ({file_bytes} bytes)"
            ),
            TableError::Overflow { region, offset, size } => {
                write!(f, "memory region {region}: file offset {offset} + {size} bytes overflows")
            }
            TableError::File { region, what, error } => write!(f, "memory region {region}: {what}: {error}"),
        }
    }
}

impl std::error::Error for TableError {}

/// What a region needs so that no access to it can end the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protection {
    /// Its file cannot shrink (F_SEAL_SHRINK), or is not a regular file.
    None,
    /// A SIGBUS guard over its mapping, whose pages are this large.
    Guard { page_bytes: usize },
}

/// Checks region `index` against its file (steps 2 and 3 of the header).
pub(crate) fn protection(index: usize, region: &GuestRegionMmap<()>) -> Result<Protection, TableError> {
    let Some(file_offset) = region.file_offset() else { return Ok(Protection::None) };
    let file = file_offset.file();
    let fail = |what, error: io::Error| TableError::File { region: index, what, error: error.to_string() };
    let meta = file.metadata().map_err(|e| fail("cannot fstat its file", e))?;
    if !meta.file_type().is_file() {
        // A device's size is not st_size, and it cannot be truncated.
        return Ok(Protection::None);
    }
    let (offset, size) = (file_offset.start(), region.len());
    let end = offset.checked_add(size).ok_or(TableError::Overflow { region: index, offset, size })?;
    if end > meta.len() {
        return Err(TableError::PastEnd {
            region: index,
            guest_addr: region.start_addr().0,
            offset,
            size,
            file_bytes: meta.len(),
        });
    }
    // SAFETY: F_GET_SEALS reads the seals of a live fd; files that take no
    // seals answer EINVAL, which is "not sealed".
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    if seals >= 0 && seals & libc::F_SEAL_SHRINK != 0 {
        return Ok(Protection::None);
    }
    Ok(Protection::Guard { page_bytes: page_bytes(file) })
}

/// hugetlbfs's f_type (linux/magic.h).
const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;

/// The page size of a file's mappings: a hugetlbfs file's huge page
/// (its f_bsize), else the base page. (Other file systems' block sizes,
/// ZFS's 128 KiB records say, say nothing of how the file is mapped.)
fn page_bytes(file: &std::fs::File) -> usize {
    // SAFETY: sysconf has no memory preconditions.
    let base = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    // SAFETY: statfs is plain data; zeroed is a valid value.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fills a live struct for a live fd.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) } != 0 || fs.f_type as u64 != HUGETLBFS_MAGIC {
        return base;
    }
    match usize::try_from(fs.f_bsize) {
        Ok(huge) if huge.is_power_of_two() && huge > base => huge,
        _ => base,
    }
}

/// The guest memory of one connection: what the queues read, and the
/// guards over it (see the module header).
pub struct MemoryWatch {
    served: GuestMemoryAtomic<Mem>,
    /// Set by the SIGBUS handler when an access faulted in a guarded
    /// mapping of this connection.
    faulted: Arc<AtomicBool>,
    /// Each guarded table still held, with its guards.
    guarded: Mutex<Vec<(Arc<Mem>, Vec<Guarded>)>>,
}

impl MemoryWatch {
    /// A watch over `served`, the memory the queues read (empty until the
    /// first table).
    pub fn new(served: GuestMemoryAtomic<Mem>) -> Self {
        Self { served, faulted: Arc::new(AtomicBool::new(false)), guarded: Mutex::new(Vec::new()) }
    }

    /// The memory the queues read.
    pub fn served(&self) -> &GuestMemoryAtomic<Mem> {
        &self.served
    }

    /// The flag a guarded access that faulted sets.
    pub fn faulted(&self) -> &Arc<AtomicBool> {
        &self.faulted
    }

    /// Whether a guarded access faulted (the frontend's file shrank).
    pub fn has_faulted(&self) -> bool {
        self.faulted.load(Ordering::Acquire)
    }

    /// Takes the table vhost-user-backend mapped into `daemon`: checks it,
    /// guards it and serves it, or refuses it and puts the last good one
    /// back into `daemon` (steps 2 to 4 of the header).
    pub fn update(&self, daemon: &GuestMemoryAtomic<Mem>) -> Result<(), TableError> {
        let table = daemon.memory().into_inner();
        let guards = match self.guard_table(&table) {
            Ok(guards) => guards,
            Err(e) => {
                let good = Mem::clone(&self.served.memory());
                daemon.lock().unwrap_or_else(|e| e.into_inner()).replace(good);
                return Err(e);
            }
        };
        self.served.lock().unwrap_or_else(|e| e.into_inner()).replace(Mem::clone(&table));
        let mut guarded = self.guarded.lock().unwrap_or_else(|e| e.into_inner());
        // Exact after the swap above (module header): 1 is this list's own.
        guarded.retain(|(table, _)| Arc::strong_count(table) > 1);
        if !guards.is_empty() {
            guarded.push((self.served.memory().into_inner(), guards));
        }
        Ok(())
    }

    /// The guards `table` needs, registered; none if a region is refused.
    fn guard_table(&self, table: &Mem) -> Result<Vec<Guarded>, TableError> {
        let mut guards = Vec::new();
        for (index, region) in table.iter().enumerate() {
            if let Protection::Guard { page_bytes } = protection(index, region)? {
                let guarded = guard::guard(region.as_ptr(), region.size(), page_bytes, &self.faulted).map_err(|e| {
                    TableError::File { region: index, what: "cannot guard its mapping", error: e.to_string() }
                })?;
                guards.push(guarded);
            }
        }
        Ok(guards)
    }

    /// Tables guarded now.
    pub fn guarded_tables(&self) -> usize {
        self.guarded.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Releases every guard: the connection is over and nothing touches
    /// its guest memory any more.
    pub fn release(&self) {
        self.guarded.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

#[cfg(all(test, not(miri)))]
#[path = "memory_tests.rs"]
mod tests;
