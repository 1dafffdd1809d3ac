//! What a request becomes on the ring: the SQE for the rest of a slot's
//! request (READ/WRITE for one segment, their fixed forms inside the
//! registered buffer, READV/WRITEV otherwise, fsync, fallocate), and how a
//! short transfer moves its iovecs on for the resubmission.
//!
//! Relies on: ring.rs (the slot, its iovecs and progress; the registered
//! region); the io-uring crate's opcodes.

use std::sync::atomic::Ordering;

use io_uring::{opcode, squeue, types};

use mqblk::{Op, ReqFlags};

use super::{FileRef, Inflight, Ring, Slot};

impl Ring {
    /// The SQE for what is left of the slot's request.
    pub(super) fn entry(&self, slot: &Slot, user_data: u64) -> squeue::Entry {
        let inf = slot.io.as_ref().expect("a request in the slot");
        let off = inf.offset + inf.done;
        let left = inf.len - inf.done;
        macro_rules! with_fd {
            ($build:expr) => {
                match self.file {
                    FileRef::Fixed => $build(types::Fixed(0)),
                    FileRef::Raw(fd) => $build(types::Fd(fd)),
                }
            };
        }
        let iov = slot.iov[inf.first..].as_ptr();
        let nr = (inf.nr - inf.first) as u32;
        // One segment (most requests): IORING_OP_READ/WRITE, as fio issues
        // them; the kernel then has no iovec array to import.
        let single = (nr == 1 && slot.iov[inf.first].iov_len <= u32::MAX as usize).then(|| slot.iov[inf.first]);
        let fua = if inf.rq.flags().contains(ReqFlags::FUA) { libc::RWF_DSYNC } else { 0 };
        // A segment inside the registered region: the fixed opcodes (no
        // page pinning per I/O).
        let fixed = single.filter(|v| self.fixed.get().is_some_and(|r| r.contains(v.iov_base as usize, v.iov_len)));
        if fixed.is_some() {
            self.fixed_ios.fetch_add(1, Ordering::Relaxed);
        }
        let e = match (inf.rq.op(), single) {
            (Op::Read, Some(v)) if fixed.is_some() => {
                with_fd!(|fd| opcode::ReadFixed::new(fd, v.iov_base.cast(), v.iov_len as u32, 0).offset(off).build())
            }
            (Op::Write, Some(v)) if fixed.is_some() => {
                with_fd!(|fd| opcode::WriteFixed::new(fd, v.iov_base.cast(), v.iov_len as u32, 0)
                    .offset(off)
                    .rw_flags(fua)
                    .build())
            }
            (Op::Read, Some(v)) => {
                with_fd!(|fd| opcode::Read::new(fd, v.iov_base.cast(), v.iov_len as u32).offset(off).build())
            }
            (Op::Write, Some(v)) => with_fd!(|fd| opcode::Write::new(fd, v.iov_base.cast(), v.iov_len as u32)
                .offset(off)
                .rw_flags(fua)
                .build()),
            (Op::Read, None) => with_fd!(|fd| opcode::Readv::new(fd, iov, nr).offset(off).build()),
            (Op::Write, None) => {
                with_fd!(|fd| opcode::Writev::new(fd, iov, nr).offset(off).rw_flags(fua).build())
            }
            (Op::Flush, _) => with_fd!(|fd| opcode::Fsync::new(fd).flags(types::FsyncFlags::DATASYNC).build()),
            // Files: a punched hole reads as zeros (discard and write zeroes).
            (Op::Discard | Op::WriteZeroes, _) => with_fd!(|fd| opcode::Fallocate::new(fd, left)
                .offset(off)
                .mode(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE)
                .build()),
            _ => opcode::Nop::new().build(), // refused before queueing (limits)
        };
        e.user_data(user_data)
    }
}

/// Moves `inf`'s iovecs (`iov`) past `n` more transferred bytes.
pub(super) fn advance(iov: &mut [libc::iovec], inf: &mut Inflight, mut n: u64) {
    while n > 0 && inf.first < inf.nr {
        let v = &mut iov[inf.first];
        if n >= v.iov_len as u64 {
            n -= v.iov_len as u64;
            inf.first += 1;
        } else {
            // SAFETY: stays inside the segment this iovec describes.
            v.iov_base = unsafe { v.iov_base.cast::<u8>().add(n as usize) }.cast();
            v.iov_len -= n as usize;
            n = 0;
        }
    }
}
