//! The null device's data path: a request's data moved to or from the
//! medium (store.rs), through the volatile write cache when there is one
//! (cache.rs), with bad blocks failing all or part of it (badblocks.rs),
//! and the medium's own errors failing it with EIO.
//!
//! Relies on: mod.rs (`NullDriver`'s fields), request/ for the
//! segments of a (merged) request.

use std::io;

use super::store::Store;
use super::NullDriver;
use mqblk::driver::Rq;
use mqblk::Status;
use mqblk::{Op, ReqFlags};
use mqblk_sync::Ordering;

impl NullDriver {
    /// Moves the data (memory backing) and decides the status.
    #[inline]
    pub(super) fn handle(&self, rq: &mut Rq) -> Status {
        if let Some(z) = &self.zoned {
            return z.process(rq, self.mem.as_ref().map(Store::memory));
        }
        if !self.badblocks.is_empty() {
            if let Some(ok_bytes) = self.bad_prefix(rq) {
                return self.handle_partial(rq, ok_bytes);
            }
        }
        let Some(mem) = &self.mem else { return Status::Ok };
        let pos = rq.pos_bytes();
        let fua = rq.flags().contains(ReqFlags::FUA);
        let mut res = Ok(());
        match rq.op() {
            Op::Read => rq.for_each_segment_mut(|pos, seg| keep_first_err(&mut res, || self.read_data(mem, pos, seg))),
            Op::Write => {
                rq.for_each_segment(|pos, seg| keep_first_err(&mut res, || self.write_data(mem, pos, seg, fua)))
            }
            Op::Discard => res = self.zero_data(mem, pos, rq.len_bytes(), false),
            Op::WriteZeroes => res = self.zero_data(mem, pos, rq.len_bytes(), rq.flags().contains(ReqFlags::NOUNMAP)),
            Op::Flush => {
                res = match &self.cache {
                    Some(c) => c.flush(mem),
                    None => mem.sync(),
                }
            }
            // Zone ops reach only zoned devices (check_bio).
            _ => return Status::NotSupp,
        }
        match res {
            Ok(()) => Status::Ok,
            Err(e) => self.medium_error(rq, e),
        }
    }

    /// The file under a `backing_file` device failed: the request fails
    /// with EIO (never acknowledged); the stats count it and keep the
    /// last error's text.
    #[cold]
    fn medium_error(&self, rq: &Rq, e: io::Error) -> Status {
        self.medium_errors.fetch_add(1, Ordering::Relaxed);
        *self.last_medium_error.lock() =
            format!("{:?} of {} bytes at byte {}: {e}", rq.op(), rq.len_bytes(), rq.pos_bytes());
        Status::IoErr
    }

    /// Data moves through the write cache when there is one.
    #[inline]
    fn read_data(&self, mem: &Store, pos: u64, out: &mut [u8]) -> io::Result<()> {
        match &self.cache {
            Some(c) => c.read(mem, pos, out),
            None => mem.read(pos, out),
        }
    }

    /// Without a cache a FUA write still syncs a file medium.
    #[inline]
    fn write_data(&self, mem: &Store, pos: u64, data: &[u8], fua: bool) -> io::Result<()> {
        match &self.cache {
            Some(c) => c.write(mem, pos, data, fua),
            None => {
                mem.write(pos, data)?;
                if fua {
                    mem.sync()?;
                }
                Ok(())
            }
        }
    }

    #[inline]
    fn zero_data(&self, mem: &Store, pos: u64, len: u64, nounmap: bool) -> io::Result<()> {
        match &self.cache {
            Some(c) => c.zero(mem, pos, len, nounmap),
            None if nounmap => mem.zero_in_place(pos, len),
            None => mem.zero(pos, len),
        }
    }

    /// A request on a bad range: how many of its leading bytes still
    /// transfer (None: it touches no bad sector).
    #[cold]
    fn bad_prefix(&self, rq: &Rq) -> Option<u64> {
        match rq.op() {
            Op::Read | Op::Write | Op::Discard | Op::WriteZeroes => {}
            _ => return None,
        }
        let ok_sectors = self.badblocks.check(rq.sector(), u64::from(rq.nr_sectors()))?;
        Some(ok_sectors << mqblk::SECTOR_SHIFT)
    }

    /// Transfers the first `ok_bytes` of a request that hit a bad range
    /// and fails it: `end_rq` completes those bytes, the rest ends with
    /// EIO (the kernel's partial `blk_update_request`).
    #[cold]
    fn handle_partial(&self, rq: &mut Rq, ok_bytes: u64) -> Status {
        let start = rq.pos_bytes();
        let limit = start + ok_bytes;
        let mut res = Ok(());
        if let Some(mem) = &self.mem {
            let fua = rq.flags().contains(ReqFlags::FUA);
            match rq.op() {
                Op::Read => rq.for_each_segment_mut(|pos, seg| {
                    let n = (limit.saturating_sub(pos) as usize).min(seg.len());
                    keep_first_err(&mut res, || self.read_data(mem, pos, &mut seg[..n]));
                }),
                Op::Write => rq.for_each_segment(|pos, seg| {
                    let n = (limit.saturating_sub(pos) as usize).min(seg.len());
                    keep_first_err(&mut res, || self.write_data(mem, pos, &seg[..n], fua));
                }),
                _ => res = self.zero_data(mem, start, ok_bytes, keeps_pages(rq)),
            }
        }
        if let Err(e) = res {
            // Nothing is known to have transferred.
            return self.medium_error(rq, e);
        }
        *rq.driver_data() = ok_bytes;
        Status::IoErr
    }
}

/// A write zeroes with REQ_NOUNMAP zeroes in place; a discard or any
/// other write zeroes frees what it zeroes.
fn keeps_pages(rq: &Rq) -> bool {
    rq.op() == Op::WriteZeroes && rq.flags().contains(ReqFlags::NOUNMAP)
}

/// Runs `f` unless an earlier segment failed, keeping the first error.
#[inline]
fn keep_first_err(res: &mut io::Result<()>, f: impl FnOnce() -> io::Result<()>) {
    if res.is_ok() {
        *res = f();
    }
}
