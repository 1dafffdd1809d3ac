//! A ublk queue's io_uring: built with the cheapest task-work delivery
//! the kernel offers, and the SQEs the queue thread queues on it (FETCH_REQ
//! and COMMIT_AND_FETCH_REQ per tag, the poll of the client's completion
//! eventfd), submitted with the thread's next io_uring_enter.
//!
//! Relies on: queue.rs (`Queue`'s ring, tags and eventfd); uapi.rs
//! (`IoCmd`, command numbers); the io-uring crate.

use std::io;
use std::os::fd::AsRawFd;

use io_uring::{opcode, squeue, types, IoUring};

use super::{Queue, EVENTFD_TOKEN, POLL_FD_TOKEN};
use crate::error::Error;
use crate::uapi::{self, IoCmd};

impl Queue {
    /// Queues COMMIT_AND_FETCH_REQ for `tag`; `zone_append_lba` goes in
    /// the address field, which carries it for zone appends (user copy).
    pub(super) fn push_commit(&mut self, tag: u16, result: i32, zone_append_lba: u64) -> Result<(), Error> {
        let addr = if self.user_copy { zone_append_lba } else { self.tags[usize::from(tag)].addr };
        self.push_io_cmd(uapi::UBLK_U_IO_COMMIT_AND_FETCH_REQ, tag, result, addr)
    }

    /// Queues one FETCH or COMMIT_AND_FETCH command for `tag`.
    pub(super) fn push_io_cmd(&mut self, op: u32, tag: u16, result: i32, addr: u64) -> Result<(), Error> {
        let cmd = IoCmd { q_id: self.q_id, tag, result, addr };
        let sqe = opcode::UringCmd16::new(types::Fd(self.cdev.as_raw_fd()), op)
            .cmd(cmd.to_bytes())
            .build()
            .user_data(u64::from(tag));
        let sqe = self.with_auto_buf_reg(sqe, tag);
        self.push(&sqe)
    }

    /// Polls the queue the client reaps itself, if it has one (one shot,
    /// re-armed after it fires).
    pub(super) fn arm_poll_fd(&mut self) -> Result<(), Error> {
        let Some(fd) = self.poll_fd else { return Ok(()) };
        let sqe = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).build().user_data(POLL_FD_TOKEN);
        self.push(&sqe)
    }

    /// Polls the client's completion eventfd (one shot, re-armed after it
    /// fires).
    pub(super) fn arm_eventfd(&mut self) -> Result<(), Error> {
        let sqe =
            opcode::PollAdd::new(types::Fd(self.completion_fd), libc::POLLIN as u32).build().user_data(EVENTFD_TOKEN);
        self.push(&sqe)
    }

    /// Clears the eventfd's count (it is non-blocking: EAGAIN means zero).
    pub(super) fn drain_eventfd(&mut self) {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from the client's eventfd.
        let _ = unsafe { libc::read(self.completion_fd, std::ptr::addr_of_mut!(count).cast(), 8) };
    }

    pub(super) fn push(&mut self, sqe: &squeue::Entry) -> Result<(), Error> {
        loop {
            // SAFETY: our SQEs name no memory of ours but the tags'
            // buffers (by address, for the kernel's copies), which live as
            // long as the queue; the ring is dropped first (field order).
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return Ok(());
            }
            // Full (cannot happen with one command per tag and a ring of
            // depth + 1 or more, but cheap to survive): submit what is there.
            self.ring.submit().map_err(|e| Error::Queue { q_id: self.q_id, what: "io_uring_enter", source: e })?;
        }
    }
}

/// The queue's ring. ublk hands each request to the queue thread as task
/// work (`io_uring_cmd_complete_in_task`); by default the kernel signals
/// the thread for it (TWA_SIGNAL), which costs an interrupt of the task and
/// a trip through the signal path per wakeup. With DEFER_TASKRUN (6.1,
/// which needs SINGLE_ISSUER: the ring is made and used by this thread
/// alone) the work waits on the ring until the thread enters the kernel to
/// wait, which it does anyway, as the ublk selftests' server does. Measured
/// in the 6.12 guest: server CPU per 4k read 39.6 -> 31.8 us at QD1 and
/// 11.4 -> 8.8 us at QD32 (docs/results/ublk-compare-disarm.txt, then
/// ublk-compare-taskrun.txt). COOP_TASKRUN (5.19, what libublk sets) is
/// the fallback, then no flag.
pub(super) fn build_ring(entries: u32) -> io::Result<IoUring<squeue::Entry>> {
    let cq_entries = entries * 2;
    let deferred = IoUring::builder()
        .setup_cqsize(cq_entries)
        .setup_coop_taskrun()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries);
    match deferred {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
        other => return other,
    }
    match IoUring::builder().setup_cqsize(cq_entries).setup_coop_taskrun().build(entries) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::builder().setup_cqsize(cq_entries).build(entries),
        other => other,
    }
}
