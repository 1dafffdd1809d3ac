//! `KernelBuf`: a bio's data that lives in the kernel, not in this process:
//! the pages of a ublk request, which a driver issuing I/O through
//! io_uring registers in its own ring's buffer table
//! (UBLK_U_IO_REGISTER_IO_BUF) and reads or writes with the fixed opcodes,
//! so the data never passes through the server's memory ("ublk: zc
//! register/unregister bvec", Linux 6.15; any task may register since
//! "ublk: allow UBLK_IO_(UN)REGISTER_IO_BUF on any task", which
//! UBLK_F_BUF_REG_OFF_DAEMON announces).
//!
//! The block layer cannot touch such data: a bio over a kernel buffer is
//! one segment that is never merged (`ReqFlags::KERNEL_BUF` keeps it out
//! of every merge) and never split (submission refuses one a request
//! could not hold whole), and only a device whose driver takes kernel
//! buffers accepts it (`QueueLimits::kernel_buffers`). Its segment's
//! "address" is the byte offset into the buffer (0), which is how the
//! fixed opcodes address a registered kernel buffer.
//!
//! Relies on: nothing; vec.rs packs it into a `BioVec`'s words.

use std::os::fd::RawFd;

/// A ublk request's data, named by the ublk character device it came
/// through and its queue and tag.
///
/// ```
/// use mqblk::{Bio, KernelBuf, Op, ReqFlags};
///
/// let kbuf = KernelBuf { fd: 7, q_id: 1, tag: 42 };
/// let bio = Bio::read_kernel(1 << 20, kbuf, 65536);
/// assert_eq!((bio.op, bio.len, bio.segs.nr_segs()), (Op::Read, 65536, 1));
/// assert_eq!(bio.segs.kernel_buf(), Some(kbuf));
/// assert!(bio.flags.contains(ReqFlags::KERNEL_BUF), "never merged");
/// assert!(bio.segs.into_vec().is_empty(), "no Buf to give back");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelBuf {
    /// The ublk character device (/dev/ublkcN) the request came through.
    pub fd: RawFd,
    /// The request's ublk queue.
    pub q_id: u16,
    /// The request's tag in that queue.
    pub tag: u16,
}

/// The top bit of a packed kernel buffer: the word is never null.
const PACKED: usize = 1 << 63;

impl KernelBuf {
    /// The buffer in one word (never 0): fd in bits 32-62, q_id 16-31,
    /// tag 0-15.
    pub(crate) fn pack(self) -> usize {
        assert!(self.fd >= 0, "a kernel buffer's fd {} is not an open file", self.fd);
        PACKED | (self.fd as usize) << 32 | usize::from(self.q_id) << 16 | usize::from(self.tag)
    }

    /// The buffer `pack` made `word` of.
    pub(crate) fn unpack(word: usize) -> Self {
        debug_assert_ne!(word & PACKED, 0, "a packed kernel buffer");
        Self { fd: ((word & !PACKED) >> 32) as RawFd, q_id: (word >> 16) as u16, tag: word as u16 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_keeps_every_field() {
        for kbuf in [
            KernelBuf { fd: 0, q_id: 0, tag: 0 },
            KernelBuf { fd: i32::MAX, q_id: u16::MAX, tag: u16::MAX },
            KernelBuf { fd: 3, q_id: 2, tag: 4095 },
        ] {
            assert_ne!(kbuf.pack(), 0);
            assert_eq!(KernelBuf::unpack(kbuf.pack()), kbuf);
        }
    }
}
