//! A request over a kernel buffer (`KernelBuf`: a ublk request's pages) on
//! the ring, with no copy through this process: two linked SQEs, and an
//! unregistration once the transfer's CQE is in.
//!
//! 1. UBLK_U_IO_REGISTER_IO_BUF on the ublk character device puts the
//!    request's pages in this ring's buffer table at index 1 + the driver
//!    tag (index 0 is the registered region's, `Ring::register_fixed`);
//!    linked (IOSQE_IO_LINK), so a failed registration cancels the rest.
//! 2. READ_FIXED or WRITE_FIXED on the file with that index, the address
//!    being the offset into the buffer (a registered kernel buffer starts
//!    at 0). Its CQE ends the request (or runs a new chain for the rest).
//! 3. At that CQE, UBLK_U_IO_UNREGISTER_IO_BUF gives the index back, on
//!    its own (posting a CQE only if it fails). At the end of the reaper's
//!    batch (`Ring::finish_batch`) one io_uring_enter submits every
//!    unregistration the batch queued, which run inline, and only then do
//!    their requests end: the tag's next request may register at the same
//!    index, and a ublk request is committed only once no table holds its
//!    pages, as when the unregistration was the chain's last link.
//!
//! Why the unregistration is not the chain's third link: a transfer that
//! io_uring punts to a worker (a direct write that must update the file's
//! mtime answers EAGAIN to the non-blocking attempt: `file_modified_flags`
//! with IOCB_NOWAIT) has its worker run the next link too, and a
//! uring_cmd from a worker takes the ring's `uring_lock`, which the
//! submitting thread holds: on 1 MiB writes the workers spun on that mutex
//! (`mutex_spin_on_owner` in a profile of the 7.3 guest).
//!
//! The ublk driver allows the registration from any task since "ublk:
//! allow UBLK_IO_(UN)REGISTER_IO_BUF on any task" (UBLK_F_BUF_REG_OFF_DAEMON
//! says so), which is what lets this ring, not the ublk queue's own, hold
//! the buffer. A short transfer runs a new chain for the rest; a failed
//! registration (or a transfer that found no buffer at the index, EFAULT)
//! ends the request with `Status::DevResource`, which tells its submitter
//! (the ublk server) to serve it by copying instead: nothing moved.
//!
//! Relies on: ring.rs (slots, the SQ lock, the sparse buffer table set up
//! in `Ring::new`, the reapers calling `finish_batch` after each batch); <linux/ublk_cmd.h> for the commands and their payload.

use std::sync::atomic::Ordering;

use io_uring::{opcode, squeue, types};

use mqblk::{KernelBuf, Op, ReqFlags, Status};

use super::{FileRef, Inflight, Ring, Slot};

/// `_IOWR('u', 0x23, struct ublksrv_io_cmd)` and `_IOWR('u', 0x24, ...)`.
const UBLK_U_IO_REGISTER_IO_BUF: u32 = 0xc010_7523;
const UBLK_U_IO_UNREGISTER_IO_BUF: u32 = 0xc010_7524;

/// user_data of a chain's SQEs: the driver tag in bits 0-31, the step in
/// bits 32-33 (0: a request of memory, `Ring::entry`).
pub(super) const STEP_MASK: u64 = 3 << 32;
const STEP_REGISTER: u64 = 1 << 32;
const STEP_TRANSFER: u64 = 2 << 32;
const STEP_UNREGISTER: u64 = 3 << 32;

/// A kernel-buffer request's chain in flight: the buffer, and what its
/// registration answered.
#[derive(Debug, Clone, Copy)]
pub(super) struct Chain {
    pub(super) kbuf: KernelBuf,
    register_res: i32,
}

impl Chain {
    pub(super) fn new(kbuf: KernelBuf) -> Self {
        Self { kbuf, register_res: 0 }
    }
}

/// The buffer table index of a driver tag's kernel buffer.
pub(super) fn table_index(tag: usize) -> u16 {
    u16::try_from(tag + 1).expect("a driver tag below 65535")
}

/// `struct ublksrv_io_cmd { __u16 q_id; __u16 tag; __s32 result; __u64
/// addr; }`, addr being the buffer table index.
fn io_cmd(kbuf: KernelBuf, index: u16) -> [u8; 16] {
    let mut cmd = [0u8; 16];
    cmd[0..2].copy_from_slice(&kbuf.q_id.to_ne_bytes());
    cmd[2..4].copy_from_slice(&kbuf.tag.to_ne_bytes());
    cmd[8..16].copy_from_slice(&u64::from(index).to_ne_bytes());
    cmd
}

impl Ring {
    /// Pushes the chain for what is left of the slot's request.
    pub(super) fn push_chain(&self, slot: &mut Slot, tag: usize) {
        let inf = slot.io.as_mut().expect("a request in the slot");
        let index = table_index(tag);
        let (off, left) = (inf.offset + inf.done, (inf.len - inf.done) as u32);
        let chain = inf.chain.as_mut().expect("a kernel-buffer request");
        chain.register_res = 0;
        let chain = *chain;
        // The fixed opcodes address a registered kernel buffer from 0.
        let at = inf.done as usize as *mut u8;
        let fua = if inf.rq.flags().contains(ReqFlags::FUA) { libc::RWF_DSYNC } else { 0 };
        let transfer = match (inf.rq.op(), self.file) {
            (Op::Read, FileRef::Fixed) => opcode::ReadFixed::new(types::Fixed(0), at, left, index).offset(off).build(),
            (Op::Read, FileRef::Raw(fd)) => opcode::ReadFixed::new(types::Fd(fd), at, left, index).offset(off).build(),
            (_, FileRef::Fixed) => {
                opcode::WriteFixed::new(types::Fixed(0), at, left, index).offset(off).rw_flags(fua).build()
            }
            (_, FileRef::Raw(fd)) => {
                opcode::WriteFixed::new(types::Fd(fd), at, left, index).offset(off).rw_flags(fua).build()
            }
        };
        let entries = [
            opcode::UringCmd16::new(types::Fd(chain.kbuf.fd), UBLK_U_IO_REGISTER_IO_BUF)
                .cmd(io_cmd(chain.kbuf, index))
                .build()
                .flags(squeue::Flags::IO_LINK)
                .user_data(tag as u64 | STEP_REGISTER),
            transfer.user_data(tag as u64 | STEP_TRANSFER),
        ];
        self.kernel_ios.fetch_add(1, Ordering::Relaxed);
        self.push_linked(&entries);
    }

    /// Queues the unregistration of a tag's kernel buffer: its CQE comes
    /// only if it fails (IOSQE_CQE_SKIP_SUCCESS), and it is submitted by
    /// `finish_batch` at the end of the reaper's batch.
    fn push_unregister(&self, kbuf: KernelBuf, tag: usize) {
        let unregister = opcode::UringCmd16::new(types::Fd(kbuf.fd), UBLK_U_IO_UNREGISTER_IO_BUF)
            .cmd(io_cmd(kbuf, table_index(tag)))
            .build()
            .flags(squeue::Flags::SKIP_SUCCESS)
            .user_data(tag as u64 | STEP_UNREGISTER);
        self.push(&unregister);
        self.submit_pending.store(true, Ordering::Release);
    }

    /// Ends the batch of a reaper: submits what its CQEs queued
    /// (unregistrations, chains run again), then ends the kernel-buffer
    /// requests whose transfers were over. Before that submission their
    /// pages are still in the table; after it they are not (an
    /// unregistration runs inline), so a ublk request is committed only
    /// once no table holds them. One io_uring_enter for the batch, which
    /// must come now: no later CQE may come to carry it (at queue depth 1,
    /// the next request waits for this one).
    pub(super) fn finish_batch(&self) {
        if !self.submit_pending.swap(false, Ordering::AcqRel) {
            return;
        }
        self.submit();
        let mut ended = self.ended.lock();
        for (rq, status) in ended.drain(..) {
            self.inflight.fetch_sub(1, Ordering::Release);
            rq.complete(status);
        }
    }

    /// A CQE of a chain (`user_data`'s step not 0): ends the request once
    /// its transfer is in, or runs it again for the rest. `salvaging`: the
    /// completion thread died; nothing is submitted again, and a partial
    /// transfer is an error.
    pub(super) fn chain_cqe(&self, user_data: u64, res: i32, salvaging: bool) {
        let tag = (user_data & !STEP_MASK) as usize;
        match user_data & STEP_MASK {
            STEP_UNREGISTER => {
                // Only a failure posts; its request ended once the batch
                // that queued it was submitted. The index may still hold
                // those pages: the tag's next registration fails and that
                // request is copied instead.
                self.unregister_failures.fetch_add(1, Ordering::Relaxed);
                return;
            }
            STEP_REGISTER | STEP_TRANSFER => {}
            step => unreachable!("a chain step {step:#x}"),
        }
        // SAFETY: this CQE makes us the tag's owner (see the Sync impl).
        let slot = unsafe { &mut *self.slots[tag].get() };
        let Some(inf) = slot.io.as_mut() else { return };
        let chain = inf.chain.as_mut().expect("a chain's CQE for a kernel-buffer request");
        if user_data & STEP_MASK == STEP_REGISTER {
            chain.register_res = res;
            return;
        }
        let chain = *chain;
        if chain.register_res >= 0 {
            self.push_unregister(chain.kbuf, tag);
        }
        let status = match chain_outcome(inf, res) {
            Some(status) => status,
            None if salvaging => Status::IoErr,
            None => {
                // The unregistration is ahead of the new registration in
                // the SQ, and both run inline in order.
                self.push_chain(slot, tag);
                self.submit_pending.store(true, Ordering::Release);
                return;
            }
        };
        let inf = slot.io.take().expect("checked above");
        if chain.register_res >= 0 {
            // Ended (and counted out of flight) by `finish_batch`, after
            // its unregistration.
            self.ended.lock().push((inf.rq, status));
        } else {
            self.inflight.fetch_sub(1, Ordering::Release);
            inf.rq.complete(status);
        }
    }
}

/// How a chain whose transfer answered `transfer_res` leaves the request:
/// its status, or None to run it again for the rest.
fn chain_outcome(inf: &mut Inflight, transfer_res: i32) -> Option<Status> {
    let chain = inf.chain.expect("a kernel-buffer request");
    if chain.register_res < 0 {
        // Nothing was registered (the transfer was cancelled): the
        // submitter may serve the request another way.
        return Some(Status::DevResource);
    }
    match transfer_res {
        // No usable buffer at the index, though the registration said 0
        // (a character device whose uring_cmd is not ublk's: Linux 6.18's
        // /dev/null answers 0): nothing moved, so the same way out.
        r if r == -libc::EFAULT => Some(Status::DevResource),
        r if r == -libc::EAGAIN || r == -libc::EINTR => None,
        r if r < 0 => Some(Status::from_errno(-r)),
        0 => Some(Status::IoErr), // end of file: the file shrank under the device
        r => {
            inf.done += r as u64;
            (inf.done >= inf.len).then_some(Status::Ok)
        }
    }
}
