//! The blktrace record (`struct blk_io_trace`, include/uapi/linux/blktrace_api.h,
//! version 7): 48 bytes in the writer's byte order, then `pdu_len` bytes
//! of payload. blkparse and btt read it as the kernel's relay files give
//! it; they tell the byte order from the magic.
//!
//! Layout (byte offsets): magic 0, sequence 4, time 8, sector 16, bytes 24,
//! action 28, pid 32, device 36, cpu 40, error 44, pdu_len 46.
//!
//! `action` is a category mask in its upper 16 bits (`BLK_TC_*`) and an
//! action code in its lower 16 (`__BLK_TA_*`). The payloads used here are
//! the kernel's: UNPLUG's request count and SPLIT's new sector as
//! big-endian u64s, a PROCESS note's 16-byte command name.
//!
//! Relies on: bio.rs for the op and flags the categories come from.

use crate::bio::{Op, ReqFlags};

/// `BLK_IO_TRACE_MAGIC | BLK_IO_TRACE_VERSION`.
pub(crate) const MAGIC_VERSION: u32 = 0x6561_7400 | 0x07;
/// Size of the fixed part.
pub(crate) const RECORD_BYTES: usize = 48;
/// The largest payload written here (a PROCESS note's `comm`).
pub(crate) const MAX_PDU_BYTES: usize = 16;

/// Category bits (`enum blktrace_cat`), before the shift into `action`.
pub(crate) mod category {
    pub(crate) const READ: u32 = 1 << 0;
    pub(crate) const WRITE: u32 = 1 << 1;
    pub(crate) const FLUSH: u32 = 1 << 2;
    pub(crate) const SYNC: u32 = 1 << 3;
    pub(crate) const QUEUE: u32 = 1 << 4;
    pub(crate) const REQUEUE: u32 = 1 << 5;
    pub(crate) const ISSUE: u32 = 1 << 6;
    pub(crate) const COMPLETE: u32 = 1 << 7;
    pub(crate) const FS: u32 = 1 << 8;
    pub(crate) const NOTIFY: u32 = 1 << 10;
    pub(crate) const DISCARD: u32 = 1 << 13;
    pub(crate) const FUA: u32 = 1 << 15;
}

/// `BLK_TC_SHIFT`: categories sit above the action code.
const CATEGORY_SHIFT: u32 = 16;

/// The traced actions: the `__BLK_TA_*` code with the category the
/// kernel's `BLK_TA_*` adds to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Action {
    /// A bio entered the block layer (Q).
    Queue = 1 | (category::QUEUE << CATEGORY_SHIFT),
    /// A bio merged at the back of a request (M).
    BackMerge = 2 | (category::QUEUE << CATEGORY_SHIFT),
    /// A bio merged at the front of a request (F).
    FrontMerge = 3 | (category::QUEUE << CATEGORY_SHIFT),
    /// A request (tag) was allocated for a bio (G).
    GetRq = 4 | (category::QUEUE << CATEGORY_SHIFT),
    /// The driver sent a request back, to be issued again (R).
    Requeue = 6 | (category::REQUEUE << CATEGORY_SHIFT),
    /// A request was handed to the driver (D).
    Issue = 7 | (category::ISSUE << CATEGORY_SHIFT),
    /// The driver completed a request (C).
    Complete = 8 | (category::COMPLETE << CATEGORY_SHIFT),
    /// A plug started collecting requests (P).
    Plug = 9 | (category::QUEUE << CATEGORY_SHIFT),
    /// A plug's list was issued by its owner (U).
    UnplugIo = 10 | (category::QUEUE << CATEGORY_SHIFT),
    /// A plug's list was issued because its owner was going to sleep (T:
    /// the kernel's flush from schedule(), named after the old unplug timer).
    UnplugTimer = 11 | (category::QUEUE << CATEGORY_SHIFT),
    /// A request went into the scheduler or the dispatch list (I).
    Insert = 12 | (category::QUEUE << CATEGORY_SHIFT),
    /// A bio was split at the queue's limits (X); no category, as in the kernel.
    Split = 13,
    /// A note naming a thread (`BLK_TN_PROCESS`).
    NoteProcess = category::NOTIFY << CATEGORY_SHIFT,
}

/// The category bits an op and its flags add to an action (the kernel's
/// `__blk_add_trace`): the direction, then sync, FUA, flush and discard.
pub(crate) fn op_categories(op: Op, flags: ReqFlags) -> u32 {
    let mut c = if op.is_write() && op != Op::Flush { category::WRITE } else { category::READ };
    if flags.contains(ReqFlags::SYNC) {
        c |= category::SYNC;
    }
    if flags.contains(ReqFlags::FUA) {
        c |= category::FUA;
    }
    match op {
        Op::Flush => c |= category::FLUSH,
        Op::Discard => c |= category::DISCARD,
        _ => {}
    }
    c << CATEGORY_SHIFT
}

/// The categories request events add (`BLK_TC_FS`: not a passthrough request).
pub(crate) const FS_CATEGORY: u32 = category::FS << CATEGORY_SHIFT;

/// One event as a producer records it; the writer adds the device and
/// the stream (blktrace's CPU) when it encodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) sequence: u32,
    pub(crate) time_ns: u64,
    pub(crate) sector: u64,
    pub(crate) bytes: u32,
    pub(crate) action: u32,
    pub(crate) pid: u32,
    pub(crate) error: u16,
    pub(crate) pdu_len: u16,
    pub(crate) pdu: [u8; MAX_PDU_BYTES],
}

impl Event {
    /// An event without payload.
    pub(crate) fn new(action: u32, sector: u64, bytes: u32) -> Self {
        Self { sequence: 0, time_ns: 0, sector, bytes, action, pid: 0, error: 0, pdu_len: 0, pdu: [0; MAX_PDU_BYTES] }
    }

    /// With a big-endian u64 payload (UNPLUG's count, SPLIT's new sector).
    pub(crate) fn with_be64(mut self, value: u64) -> Self {
        self.pdu[..8].copy_from_slice(&value.to_be_bytes());
        self.pdu_len = 8;
        self
    }

    /// The record's bytes for stream `cpu` of `device` into `out`; returns
    /// how many (48 plus the payload).
    pub(crate) fn encode(&self, device: u32, cpu: u32, out: &mut [u8; RECORD_BYTES + MAX_PDU_BYTES]) -> usize {
        let fields: [(usize, &[u8]); 11] = [
            (0, &MAGIC_VERSION.to_ne_bytes()),
            (4, &self.sequence.to_ne_bytes()),
            (8, &self.time_ns.to_ne_bytes()),
            (16, &self.sector.to_ne_bytes()),
            (24, &self.bytes.to_ne_bytes()),
            (28, &self.action.to_ne_bytes()),
            (32, &self.pid.to_ne_bytes()),
            (36, &device.to_ne_bytes()),
            (40, &cpu.to_ne_bytes()),
            (44, &self.error.to_ne_bytes()),
            (46, &self.pdu_len.to_ne_bytes()),
        ];
        for (at, bytes) in fields {
            out[at..at + bytes.len()].copy_from_slice(bytes);
        }
        let pdu_len = usize::from(self.pdu_len);
        debug_assert!(pdu_len <= MAX_PDU_BYTES);
        out[RECORD_BYTES..RECORD_BYTES + pdu_len].copy_from_slice(&self.pdu[..pdu_len]);
        RECORD_BYTES + pdu_len
    }
}

/// The kernel's `dev_t` as blktrace records it: major in the upper 12
/// bits, minor in the lower 20 (MINORBITS).
pub(crate) fn dev_t(major: u32, minor: u32) -> u32 {
    debug_assert!(major < 1 << 12 && minor < 1 << 20);
    (major << 20) | minor
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
    }

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_ne_bytes(b[at..at + 2].try_into().unwrap())
    }

    #[test]
    fn fields_sit_at_the_kernel_struct_offsets() {
        let mut e = Event::new(Action::Complete as u32, 0x1122_3344_5566, 8192);
        (e.sequence, e.time_ns, e.pid, e.error) = (7, 123_456_789, 4242, (-libc::EIO) as u16);
        let mut out = [0u8; RECORD_BYTES + MAX_PDU_BYTES];
        assert_eq!(e.encode(dev_t(252, 3), 5, &mut out), 48);
        assert_eq!(u32_at(&out, 0), 0x6561_7407, "magic << 8 | version 7");
        assert_eq!(u32_at(&out, 4), 7);
        assert_eq!(u64_at(&out, 8), 123_456_789);
        assert_eq!(u64_at(&out, 16), 0x1122_3344_5566);
        assert_eq!(u32_at(&out, 24), 8192);
        assert_eq!(u32_at(&out, 28), 0x0080_0008, "BLK_TA_COMPLETE");
        assert_eq!(u32_at(&out, 32), 4242);
        assert_eq!(u32_at(&out, 36), (252 << 20) | 3);
        assert_eq!(u32_at(&out, 40), 5);
        assert_eq!(u16_at(&out, 44), 0xfffb, "-EIO as the kernel's u16");
        assert_eq!(u16_at(&out, 46), 0);
    }

    #[test]
    fn actions_match_blktrace_api_h() {
        let expected = [
            (Action::Queue, 0x0010_0001),
            (Action::BackMerge, 0x0010_0002),
            (Action::FrontMerge, 0x0010_0003),
            (Action::GetRq, 0x0010_0004),
            (Action::Requeue, 0x0020_0006),
            (Action::Issue, 0x0040_0007),
            (Action::Complete, 0x0080_0008),
            (Action::Plug, 0x0010_0009),
            (Action::UnplugIo, 0x0010_000a),
            (Action::UnplugTimer, 0x0010_000b),
            (Action::Insert, 0x0010_000c),
            (Action::Split, 0x0000_000d),
            (Action::NoteProcess, 0x0400_0000),
        ];
        for (action, value) in expected {
            assert_eq!(action as u32, value, "{action:?}");
        }
    }

    #[test]
    fn payload_is_big_endian_after_the_record() {
        let e = Event::new(Action::UnplugIo as u32, 0, 0).with_be64(3);
        let mut out = [0u8; RECORD_BYTES + MAX_PDU_BYTES];
        assert_eq!(e.encode(0, 0, &mut out), 56);
        assert_eq!(u16_at(&out, 46), 8);
        assert_eq!(out[48..56], [0, 0, 0, 0, 0, 0, 0, 3]);
    }

    #[test]
    fn categories_follow_op_and_flags() {
        let c = |op, flags| op_categories(op, flags) >> CATEGORY_SHIFT;
        assert_eq!(c(Op::Read, ReqFlags::NONE), category::READ);
        assert_eq!(c(Op::Write, ReqFlags::SYNC), category::WRITE | category::SYNC);
        assert_eq!(c(Op::Write, ReqFlags::FUA), category::WRITE | category::FUA);
        assert_eq!(
            c(Op::Flush, ReqFlags::NONE),
            category::READ | category::FLUSH,
            "as the kernel: op 2 is not a write"
        );
        assert_eq!(c(Op::Discard, ReqFlags::NONE), category::WRITE | category::DISCARD);
    }
}
