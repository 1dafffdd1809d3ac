//! A request over a kernel buffer (`KernelBuf`: a ublk request's pages) on
//! the ring, with no copy through this process: three linked SQEs.
//!
//! 1. UBLK_U_IO_REGISTER_IO_BUF on the ublk character device puts the
//!    request's pages in this ring's buffer table at index 1 + the driver
//!    tag (index 0 is the registered region's, `Ring::register_fixed`);
//!    linked (IOSQE_IO_LINK), so a failed registration cancels the rest.
//! 2. READ_FIXED or WRITE_FIXED on the file with that index, the address
//!    being the offset into the buffer (a registered kernel buffer starts
//!    at 0); hard-linked (IOSQE_IO_HARDLINK), so the unregistration runs
//!    even when the transfer fails or is short; its CQE is posted only
//!    then (IOSQE_CQE_SKIP_SUCCESS).
//! 3. UBLK_U_IO_UNREGISTER_IO_BUF gives the index back. Its CQE ends the
//!    chain, and only then does the request end: the tag's next request
//!    may register at the same index, and the ublk request may complete
//!    only once no table holds its pages.
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
//! in `Ring::new`); <linux/ublk_cmd.h> for the commands and their payload.

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
/// first two steps answered.
#[derive(Debug, Clone, Copy)]
pub(super) struct Chain {
    pub(super) kbuf: KernelBuf,
    register_res: i32,
    transfer_res: i32,
}

impl Chain {
    pub(super) fn new(kbuf: KernelBuf) -> Self {
        Self { kbuf, register_res: 0, transfer_res: 0 }
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
        // The transfer posts a CQE only if it moves less (or fails): until
        // then, it moved everything.
        (chain.register_res, chain.transfer_res) = (0, i32::try_from(left).expect("a request below 2 GiB"));
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
        let ublk = types::Fd(chain.kbuf.fd);
        let cmd = io_cmd(chain.kbuf, index);
        let entries = [
            opcode::UringCmd16::new(ublk, UBLK_U_IO_REGISTER_IO_BUF)
                .cmd(cmd)
                .build()
                .flags(squeue::Flags::IO_LINK)
                .user_data(tag as u64 | STEP_REGISTER),
            // SKIP_SUCCESS: a whole transfer posts no CQE (one wakeup of a
            // reaper fewer); a short or failed one does, since io_uring
            // clears the flag of a request that does not move all it was
            // asked to ("io_uring: add support for IOSQE_CQE_SKIP_SUCCESS").
            transfer
                .flags(squeue::Flags::IO_HARDLINK | squeue::Flags::SKIP_SUCCESS)
                .user_data(tag as u64 | STEP_TRANSFER),
            opcode::UringCmd16::new(ublk, UBLK_U_IO_UNREGISTER_IO_BUF)
                .cmd(cmd)
                .build()
                .user_data(tag as u64 | STEP_UNREGISTER),
        ];
        self.kernel_ios.fetch_add(1, Ordering::Relaxed);
        self.push_linked(&entries);
    }

    /// A CQE of a chain (`user_data`'s step not 0): ends the request once
    /// its chain is over, or runs it again for the rest. `salvaging`: the
    /// completion thread died; nothing is submitted again, and a partial
    /// transfer is an error.
    pub(super) fn chain_cqe(&self, user_data: u64, res: i32, salvaging: bool) {
        let tag = (user_data & !STEP_MASK) as usize;
        // SAFETY: this CQE makes us the tag's owner (see the Sync impl).
        let slot = unsafe { &mut *self.slots[tag].get() };
        let Some(inf) = slot.io.as_mut() else { return };
        let chain = inf.chain.as_mut().expect("a chain's CQE for a kernel-buffer request");
        match user_data & STEP_MASK {
            STEP_REGISTER => chain.register_res = res,
            STEP_TRANSFER => chain.transfer_res = res,
            _ => {
                let status = match chain_outcome(inf, res) {
                    Some(status) => status,
                    None if salvaging => Status::IoErr,
                    None => {
                        self.push_chain(slot, tag);
                        self.submit();
                        return;
                    }
                };
                let inf = slot.io.take().expect("checked above");
                self.inflight.fetch_sub(1, Ordering::Release);
                inf.rq.complete(status);
            }
        }
    }
}

/// How a chain that ended with its unregistration's `unregister_res`
/// leaves the request: its status, or None to run it again for the rest.
fn chain_outcome(inf: &mut Inflight, unregister_res: i32) -> Option<Status> {
    let chain = inf.chain.expect("a kernel-buffer request");
    if chain.register_res < 0 {
        // Nothing was registered (the rest was cancelled): the submitter
        // may serve the request another way.
        return Some(Status::DevResource);
    }
    if unregister_res < 0 {
        // The index may still hold the pages: the request must not end as
        // done; its tag's next registration there fails and falls back.
        return Some(Status::IoErr);
    }
    match chain.transfer_res {
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
