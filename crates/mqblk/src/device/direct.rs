//! Direct access for reads ([`Device::direct_access`](super::Device::direct_access),
//! the kernel's DAX): reads served from the driver's own memory with no
//! request, checked as a read bio would be and counted in the stats.
//!
//! Relies on: the driver's `DirectAccess` capability (driver/caps.rs), the
//! request queue's limits and counters (queue/).

use super::Device;
use crate::driver::{self, ReadFn};
use crate::limits::{QueueLimits, MAX_BIO_BYTES};
use crate::sync::{AtomicU64, Ordering};

/// Direct access for reads ([`Device::direct_access`](super::Device::direct_access)). (The driver,
/// hidden here, is the example of [`driver::DirectAccess`].)
///
/// ```
/// # use std::sync::RwLock;
/// # use mqblk::driver::{Capabilities, DirectAccess, Driver, Hctx, QueueRqResult, ReadFn, Rq};
/// # use mqblk::{Op, QueueLimits, Status, TagSetConfig};
/// # /// 1 MiB of memory whose reads may skip the request path.
/// # struct Mem(RwLock<Vec<u8>>);
/// #
/// # impl Driver for Mem {
/// #     fn name(&self) -> &str { "mem" }
/// #     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
/// #     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
/// #     fn queue_rq(&self, _hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
/// #         let mut mem = self.0.write().unwrap();
/// #         match rq.op() {
/// #             Op::Write => rq.for_each_segment(|pos, data| mem[pos as usize..][..data.len()].copy_from_slice(data)),
/// #             Op::Read => rq.for_each_segment_mut(|pos, buf| {
/// #                 let len = buf.len();
/// #                 buf.copy_from_slice(&mem[pos as usize..][..len]);
/// #             }),
/// #             _ => {}
/// #         }
/// #         drop(mem);
/// #         rq.complete(Status::Ok);
/// #         QueueRqResult::Queued
/// #     }
/// #     fn capabilities(&self) -> Capabilities<'_> {
/// #         Capabilities::none().direct_access(self)
/// #     }
/// # }
/// #
/// # impl DirectAccess for Mem {
/// #     /// One slice of the memory, under its lock for the call.
/// #     fn read_direct(&self, offset: u64, len: u64, f: &mut ReadFn<'_>) -> Option<std::io::Result<()>> {
/// #         let mem = self.0.read().unwrap();
/// #         Some(f(&[IoSlice::new(&mem[offset as usize..(offset + len) as usize])]))
/// #     }
/// # }
/// use std::io::IoSlice;
/// use mqblk::Device;
///
/// let dev = Device::with_driver(Box::new(Mem(RwLock::new(vec![0; 1 << 20]))))?;
/// dev.client().write_at(&[7; 4096], 8192)?;
/// let direct = dev.direct_access().expect("memory it can read directly");
/// let mut sum = 0u64;
/// let mut add = |slices: &[IoSlice<'_>]| {
///     sum += slices.iter().flat_map(|s| s.iter()).map(|&b| u64::from(b)).sum::<u64>();
///     Ok(())
/// };
/// assert!(matches!(direct.read(8192, 4096, &mut add), Some(Ok(()))));
/// // A range a read bio could not have: declined, take the bio path.
/// assert!(direct.read(100, 512, &mut add).is_none(), "misaligned");
/// // This driver cannot lend its memory past the call.
/// assert!(!direct.lends());
/// assert!(direct.read_lent(0, 4096, &mut add).is_none());
/// assert_eq!(sum, 7 * 4096);
/// assert_eq!(dev.stats().direct_reads, 1);
/// # Ok::<(), mqblk::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct DirectReads<'a> {
    pub(super) dev: &'a Device,
    pub(super) ops: &'a dyn driver::DirectAccess,
}

impl DirectReads<'_> {
    /// Reads `[offset, offset + len)` without a request: `f` gets the bytes
    /// as slices of the device's own memory, in order, in one or more
    /// calls, valid only during the call (so no tag, no scheduler, no
    /// plug: for a server that writes the bytes straight to a socket, with
    /// one copy fewer). None if the driver declines this read (take the
    /// bio path then), or if the range is not one a read bio could have:
    /// empty, out of bounds or misaligned (the bio path refuses it with its
    /// error). Counted in `DeviceStats::direct_reads`.
    pub fn read(&self, offset: u64, len: u64, f: &mut ReadFn<'_>) -> Option<std::io::Result<()>> {
        self.counted(offset, len, &[&self.dev.q.direct_reads], || self.ops.read_direct(offset, len, f))
    }

    /// Whether `read_lent` can serve reads (a memory-backed null device on
    /// a kernel with 4 KiB pages; it may still decline one).
    pub fn lends(&self) -> bool {
        self.ops.lends_past_reads()
    }

    /// As `read`, but what `f` gets stays as it is after the call, for as
    /// long as anyone holds it by reference, whatever is written or
    /// discarded meanwhile: `f` may hand the slices to the kernel
    /// (vmsplice into a pipe, splice into a socket), and whoever reads them
    /// there, whenever, reads the data of this read. None as for `read`,
    /// and where the driver cannot lend past the call. Counted in
    /// `DeviceStats` (`direct_reads` and `direct_reads_lent`).
    pub fn read_lent(&self, offset: u64, len: u64, f: &mut ReadFn<'_>) -> Option<std::io::Result<()>> {
        let q = &self.dev.q;
        self.counted(offset, len, &[&q.direct_reads, &q.direct_reads_lent], || {
            self.ops.read_direct_lent(offset, len, f)
        })
    }

    /// Checks the range, counts the read first (`f` may hand the data to
    /// a reader who then looks at the stats), and takes the count back if
    /// the driver declines.
    fn counted(
        &self,
        offset: u64,
        len: u64,
        counters: &[&AtomicU64],
        read: impl FnOnce() -> Option<std::io::Result<()>>,
    ) -> Option<std::io::Result<()>> {
        if !read_range_ok(&self.dev.q.limits, offset, len) {
            return None;
        }
        for c in counters {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let result = read();
        if result.is_none() {
            for c in counters {
                c.fetch_sub(1, Ordering::Relaxed);
            }
        }
        result
    }
}

/// A range a read bio could have: not empty, inside the device, aligned to
/// its logical blocks, and not over the largest bio.
fn read_range_ok(limits: &QueueLimits, offset: u64, len: u64) -> bool {
    let lbs_mask = u64::from(limits.logical_block_size) - 1;
    let in_bounds = offset.checked_add(len).is_some_and(|end| end <= limits.capacity_bytes);
    len > 0 && in_bounds && (offset | len) & lbs_mask == 0 && len <= MAX_BIO_BYTES
}
