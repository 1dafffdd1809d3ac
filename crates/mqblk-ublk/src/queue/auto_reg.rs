//! Auto buffer registration (UBLK_F_AUTO_BUF_REG, Linux 6.16: "ublk:
//! register buffer to local io_uring with provided buf index via
//! UBLK_F_AUTO_BUF_REG"): each FETCH and COMMIT_AND_FETCH names an index
//! of this queue's ring's buffer table (the tag's own), and the kernel
//! registers the next request's pages there before handing it over, then
//! unregisters them when the request is committed. A read or write is then
//! one READ_FIXED or WRITE_FIXED of the device's backing file
//! (`Device::backing_fd`) on this ring, the address being the offset into
//! the request's pages: no byte passes through the server, and there is no
//! registration or unregistration SQE of ours, as the file driver's
//! explicit chain has (mqblk-file's ring/kbuf.rs).
//!
//! Such a transfer bypasses mqblk's block layer (the kernel's, above
//! /dev/ublkbN, has scheduled the request already); flushes, discards and
//! write zeroes still go to the device as bios. A short transfer continues
//! with the rest, EAGAIN is tried again, an error is the request's result.
//! When the kernel could not register the pages (UBLK_AUTO_BUF_REG_FALLBACK
//! asked; the request comes marked UBLK_IO_F_NEED_REG_BUF), the request
//! takes the explicit path through the device instead (queue.rs), which
//! falls back to user copy in turn.
//!
//! Relies on: queue.rs (tags, their states, the descriptor area, the
//! commit); ring.rs (`push`); uapi.rs (the auto-registration word).

use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types};
use mqblk::Op;

use super::{Queue, TagState};
use crate::error::Error;
use crate::uapi;

/// user_data bit of a transfer on the backing file (tags are below 4096;
/// the eventfd and poll tokens are near u64::MAX, above every transfer).
pub(super) const TRANSFER: u64 = 1 << 32;

/// RWF_DSYNC: a FUA write is durable when it completes (as the file
/// driver does it).
const RWF_DSYNC: i32 = 2;

/// What a queue needs for auto registration.
pub(super) struct AutoReg {
    /// The device's backing file, open as long as the queue holds the
    /// device.
    fd: RawFd,
    /// Per tag: the bytes moved so far of the transfer in flight.
    done: Box<[u32]>,
}

impl AutoReg {
    /// Gives `ring` a sparse buffer table of `entries` (one per tag, index
    /// = tag; fewer only where a test wants some registrations to fail).
    pub(super) fn new(ring: &io_uring::IoUring, fd: RawFd, depth: u16, entries: u32) -> std::io::Result<Self> {
        ring.submitter().register_buffers_sparse(entries)?;
        Ok(Self { fd, done: vec![0; usize::from(depth)].into_boxed_slice() })
    }
}

/// The buffer table's size: one entry per tag, unless
/// MQBLK_UBLK_TEST_AUTO_TABLE_ENTRIES names fewer (tests/guest/ublk.sh
/// uses it so that the kernel cannot register the pages of the tags at or
/// beyond it, which takes them down the fallback path for real).
pub(super) fn table_entries(depth: u16) -> u32 {
    let wanted = std::env::var("MQBLK_UBLK_TEST_AUTO_TABLE_ENTRIES").ok().and_then(|v| v.parse::<u32>().ok());
    wanted.map_or(u32::from(depth), |n| n.clamp(1, u32::from(depth)))
}

impl Queue {
    /// Goes on with the transfers whose CQEs `handle_cqes` found, then
    /// starts the auto-registered reads and writes it found, each in the
    /// order the CQEs came. Commits first: the kernel takes SQEs in order,
    /// and a transfer it can do at once (a read or write of the page cache
    /// or a RAM disk) copies inside io_uring_enter, so a commit queued
    /// behind it would wait for that copy (measured on the 7.3 guest: with
    /// the commits last, 1 MiB reads switched 0.17 times an I/O, against
    /// 0.02 with them first; docs/results/ublk-zero-copy-auto-1m-2026-11-30.txt
    /// and ublk-zero-copy-auto-1m-commits-first-2026-11-30.txt).
    pub(super) fn serve_auto_registered(&mut self) -> Result<(), Error> {
        for i in 0..self.transfers.len() {
            let (tag_id, res) = self.transfers[i];
            self.transfer_done(tag_id, res)?;
        }
        self.transfers.clear();
        for i in 0..self.auto_starts.len() {
            self.start_transfer(self.auto_starts[i])?;
        }
        self.auto_starts.clear();
        Ok(())
    }

    /// Serves an auto-registered read or write: its first transfer.
    fn start_transfer(&mut self, tag_id: u16) -> Result<(), Error> {
        let desc = self.descs.get(tag_id);
        let bytes = desc.nr_sectors << 9;
        let op = if desc.op() == uapi::UBLK_IO_OP_READ { Op::Read } else { Op::Write };
        let result_bytes = i32::try_from(bytes).expect("a ublk request below 2 GiB");
        self.tags[usize::from(tag_id)].state = TagState::Serving { op, result_bytes };
        self.auto.as_mut().expect("auto registration").done[usize::from(tag_id)] = 0;
        self.push_transfer(tag_id)
    }

    /// Queues what is left of the tag's transfer: from the bytes done on,
    /// in the file and in the request's pages alike.
    fn push_transfer(&mut self, tag_id: u16) -> Result<(), Error> {
        let desc = self.descs.get(tag_id);
        let auto = self.auto.as_ref().expect("auto registration");
        let done = auto.done[usize::from(tag_id)];
        let (fd, len) = (types::Fd(auto.fd), (desc.nr_sectors << 9) - done);
        let offset = (desc.start_sector << 9) + u64::from(done);
        // A registered kernel buffer starts at address 0: the address is
        // the offset into the request's pages.
        let addr = done as usize;
        let sqe = if desc.op() == uapi::UBLK_IO_OP_READ {
            opcode::ReadFixed::new(fd, addr as *mut u8, len, tag_id).offset(offset).build()
        } else {
            let fua = desc.flags() & uapi::UBLK_IO_F_FUA != 0;
            let rw_flags = if fua { RWF_DSYNC } else { 0 };
            opcode::WriteFixed::new(fd, addr as *const u8, len, tag_id).offset(offset).rw_flags(rw_flags).build()
        };
        self.push(&sqe.user_data(TRANSFER | u64::from(tag_id)))
    }

    /// A transfer's CQE: the rest is queued after a short one (or again
    /// after EAGAIN); else the request is committed with its bytes or the
    /// error.
    fn transfer_done(&mut self, tag_id: u16, res: i32) -> Result<(), Error> {
        let Some(tag) = self.tags.get_mut(usize::from(tag_id)) else {
            log::error!("queue {}: a transfer's CQE for tag {tag_id}, beyond the queue", self.q_id);
            return Ok(());
        };
        let TagState::Serving { result_bytes, .. } = tag.state else {
            log::error!("queue {}: a transfer's CQE for tag {tag_id} in state {:?}", self.q_id, tag.state);
            return Ok(());
        };
        let auto = self.auto.as_mut().expect("auto registration");
        let done = &mut auto.done[usize::from(tag_id)];
        let result = match res {
            n if n > 0 => {
                *done += n as u32;
                assert!(*done <= result_bytes as u32, "a transfer moved more than its request");
                if *done < result_bytes as u32 {
                    return self.push_transfer(tag_id);
                }
                result_bytes
            }
            e if e == -libc::EAGAIN || e == -libc::EINTR => return self.push_transfer(tag_id),
            // Nothing moved: the file ends before the device does (it was
            // cut short under us).
            0 => -libc::EIO,
            e => e,
        };
        tag.state = TagState::Fetching;
        self.stats.zero_copy_ios += 1;
        self.stats.auto_registered_ios += 1;
        if result < 0 {
            self.stats.errors += 1;
            log::debug!(
                "queue {}: tag {tag_id}: transfer failed: {}",
                self.q_id,
                std::io::Error::from_raw_os_error(-result)
            );
        }
        self.push_commit(tag_id, result, 0)
    }

    /// The SQE of a FETCH or COMMIT_AND_FETCH, carrying in its `addr` the
    /// auto registration of the tag's next request under auto registration.
    pub(super) fn with_auto_buf_reg(&self, sqe: squeue::Entry, tag: u16) -> squeue::Entry {
        if self.auto.is_none() {
            return sqe;
        }
        with_sqe_addr(sqe, uapi::auto_buf_reg(tag, uapi::UBLK_AUTO_BUF_REG_FALLBACK))
    }
}

/// Sets an SQE's `addr` (bytes 16-23 of `struct io_uring_sqe`), which the
/// io-uring crate's UringCmd16 builder leaves 0.
///
/// squeue::Entry is #[repr(C)] around the 64-byte struct io_uring_sqe
/// (transmute checks the size), made only of integers, and its builders
/// start from zeroes: every byte is initialised, and any bytes are a valid
/// SQE, so both transmutes below are sound.
fn with_sqe_addr(sqe: squeue::Entry, addr: u64) -> squeue::Entry {
    // SAFETY: an initialised 64-byte SQE read as its bytes (see above).
    let mut raw: [u8; 64] = unsafe { std::mem::transmute::<squeue::Entry, [u8; 64]>(sqe) };
    raw[16..24].copy_from_slice(&addr.to_ne_bytes());
    // SAFETY: any 64 bytes are a valid SQE (see above).
    unsafe { std::mem::transmute::<[u8; 64], squeue::Entry>(raw) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registration_goes_in_the_sqe_addr_only() {
        let cmd = [7u8; 16];
        let sqe = opcode::UringCmd16::new(types::Fd(3), 0x1234).cmd(cmd).build().user_data(9);
        let sqe = with_sqe_addr(sqe, uapi::auto_buf_reg(42, uapi::UBLK_AUTO_BUF_REG_FALLBACK));
        // SAFETY: as in `with_sqe_addr`.
        let raw: [u8; 64] = unsafe { std::mem::transmute::<squeue::Entry, [u8; 64]>(sqe) };
        assert_eq!(raw[16..24], [42, 0, 1, 0, 0, 0, 0, 0], "index 42, flags FALLBACK, reserved 0");
        assert_eq!(raw[48..64], cmd, "the ublksrv_io_cmd is untouched");
        assert_eq!(u64::from_ne_bytes(raw[32..40].try_into().unwrap()), 9, "user_data");
        assert_eq!(u32::from_ne_bytes(raw[4..8].try_into().unwrap()), 3, "fd");
    }

    #[test]
    fn the_table_has_an_entry_per_tag() {
        // The test knob is unset here.
        assert_eq!(table_entries(64), 64);
    }
}
