//! The ublk user-space ABI (include/uapi/linux/ublk_cmd.h of Linux 6.12),
//! written out by hand: the command numbers (ioctl-encoded, as 6.12
//! requires unless the legacy opcodes are configured), the feature and
//! attribute bits, and the `#[repr(C)]` structs the kernel reads and
//! writes, with their sizes checked at compile time.
//!
//! Relies on: nothing but the kernel's ABI, and include/uapi/linux/blkzoned.h
//! for `struct blk_zone` (report zones). Only what this server uses is
//! here; the header has more (zero copy, recovery).

use std::mem::size_of;

/// The control device: ADD_DEV and friends go to it as io_uring commands.
pub const CONTROL_PATH: &str = "/dev/ublk-control";

/// `/dev/ublkcN`, the character device of device `id` (its queues' commands
/// and the mmap of the I/O descriptors).
pub fn char_path(id: u32) -> String {
    format!("/dev/ublkc{id}")
}

/// `/dev/ublkbN`, the block device the kernel exposes.
pub fn block_path(id: u32) -> String {
    format!("/dev/ublkb{id}")
}

// ---- ioctl encoding (asm-generic/ioctl.h) ---------------------------------
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;
const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((b'u' as u32) << 8) | nr
}
const fn ior(nr: u32, size: usize) -> u32 {
    ioc(IOC_READ, nr, size)
}
const fn iowr(nr: u32, size: usize) -> u32 {
    ioc(IOC_READ | IOC_WRITE, nr, size)
}

// ---- control commands (to /dev/ublk-control, SQE128) ----------------------
const CTRL: usize = size_of::<CtrlCmd>();
/// The CPUs the kernel maps to a queue (its number in `data[0]`), as a
/// cpu mask of `len` bytes.
pub const UBLK_U_CMD_GET_QUEUE_AFFINITY: u32 = ior(0x01, CTRL);
pub const UBLK_U_CMD_GET_DEV_INFO: u32 = ior(0x02, CTRL);
pub const UBLK_U_CMD_ADD_DEV: u32 = iowr(0x04, CTRL);
pub const UBLK_U_CMD_DEL_DEV: u32 = iowr(0x05, CTRL);
pub const UBLK_U_CMD_START_DEV: u32 = iowr(0x06, CTRL);
pub const UBLK_U_CMD_STOP_DEV: u32 = iowr(0x07, CTRL);
pub const UBLK_U_CMD_SET_PARAMS: u32 = iowr(0x08, CTRL);
pub const UBLK_U_CMD_GET_PARAMS: u32 = ior(0x09, CTRL);
pub const UBLK_U_CMD_START_USER_RECOVERY: u32 = iowr(0x10, CTRL);
pub const UBLK_U_CMD_END_USER_RECOVERY: u32 = iowr(0x11, CTRL);
/// GET_DEV_INFO that names /dev/ublkcN (at the start of its buffer): the
/// one info command an unprivileged device's owner may send, and one any
/// caller may send without knowing whether the device is unprivileged.
pub const UBLK_U_CMD_GET_DEV_INFO2: u32 = ior(0x12, CTRL);
pub const UBLK_U_CMD_GET_FEATURES: u32 = ior(0x13, CTRL);

/// GET_FEATURES answers with this many bytes (a u64 of UBLK_F_* bits).
pub const UBLK_FEATURES_LEN: u16 = 8;

// ---- I/O commands (to /dev/ublkcN, 64-byte SQEs) ----------------------------
const IO: usize = size_of::<IoCmd>();
pub const UBLK_U_IO_FETCH_REQ: u32 = iowr(0x20, IO);
pub const UBLK_U_IO_COMMIT_AND_FETCH_REQ: u32 = iowr(0x21, IO);

/// A fetch command's result: a request is in the descriptor of its tag.
pub const UBLK_IO_RES_OK: i32 = 0;
/// A fetch command's result: the device is going away, no re-fetch.
pub const UBLK_IO_RES_ABORT: i32 = -libc::ENODEV;

/// Tags per queue at most.
pub const UBLK_MAX_QUEUE_DEPTH: u16 = 4096;
/// Queues per device at most.
pub const UBLK_MAX_NR_QUEUES: u16 = 4096;

// ---- features (ublksrv_ctrl_dev_info.flags, GET_FEATURES) --------------------
pub const UBLK_F_SUPPORT_ZERO_COPY: u64 = 1 << 0;
pub const UBLK_F_URING_CMD_COMP_IN_TASK: u64 = 1 << 1;
pub const UBLK_F_NEED_GET_DATA: u64 = 1 << 2;
pub const UBLK_F_USER_RECOVERY: u64 = 1 << 3;
pub const UBLK_F_USER_RECOVERY_REISSUE: u64 = 1 << 4;
pub const UBLK_F_UNPRIVILEGED_DEV: u64 = 1 << 5;
pub const UBLK_F_CMD_IOCTL_ENCODE: u64 = 1 << 6;
pub const UBLK_F_USER_COPY: u64 = 1 << 7;
pub const UBLK_F_ZONED: u64 = 1 << 8;
/// Linux 6.13: while no server runs, fail I/O instead of holding it.
pub const UBLK_F_USER_RECOVERY_FAIL_IO: u64 = 1 << 9;
// Named for messages (GET_FEATURES of Linux 7.3 reports bits 0-20; the
// kernel adds PER_IO_DAEMON, BUF_REG_OFF_DAEMON and SAFE_STOP_DEV to every
// device's flags); mqblk asks for none of them yet.
pub const UBLK_F_UPDATE_SIZE: u64 = 1 << 10;
/// The kernel registers each request's pages in the server's io_uring
/// buffer table (Linux 6.16).
pub const UBLK_F_AUTO_BUF_REG: u64 = 1 << 11;
pub const UBLK_F_QUIESCE: u64 = 1 << 12;
pub const UBLK_F_PER_IO_DAEMON: u64 = 1 << 13;
pub const UBLK_F_BUF_REG_OFF_DAEMON: u64 = 1 << 14;
pub const UBLK_F_BATCH_IO: u64 = 1 << 15;
pub const UBLK_F_INTEGRITY: u64 = 1 << 16;
pub const UBLK_F_SAFE_STOP_DEV: u64 = 1 << 17;
pub const UBLK_F_NO_AUTO_PART_SCAN: u64 = 1 << 18;
pub const UBLK_F_SHMEM_ZC: u64 = 1 << 19;
pub const UBLK_F_IO_DESC_SIZE: u64 = 1 << 20;

/// Feature bits with their header names, for messages.
pub const FEATURE_NAMES: [(u64, &str); 21] = [
    (UBLK_F_SUPPORT_ZERO_COPY, "UBLK_F_SUPPORT_ZERO_COPY"),
    (UBLK_F_URING_CMD_COMP_IN_TASK, "UBLK_F_URING_CMD_COMP_IN_TASK"),
    (UBLK_F_NEED_GET_DATA, "UBLK_F_NEED_GET_DATA"),
    (UBLK_F_USER_RECOVERY, "UBLK_F_USER_RECOVERY"),
    (UBLK_F_USER_RECOVERY_REISSUE, "UBLK_F_USER_RECOVERY_REISSUE"),
    (UBLK_F_UNPRIVILEGED_DEV, "UBLK_F_UNPRIVILEGED_DEV"),
    (UBLK_F_CMD_IOCTL_ENCODE, "UBLK_F_CMD_IOCTL_ENCODE"),
    (UBLK_F_USER_COPY, "UBLK_F_USER_COPY"),
    (UBLK_F_ZONED, "UBLK_F_ZONED"),
    (UBLK_F_USER_RECOVERY_FAIL_IO, "UBLK_F_USER_RECOVERY_FAIL_IO"),
    (UBLK_F_UPDATE_SIZE, "UBLK_F_UPDATE_SIZE"),
    (UBLK_F_AUTO_BUF_REG, "UBLK_F_AUTO_BUF_REG"),
    (UBLK_F_QUIESCE, "UBLK_F_QUIESCE"),
    (UBLK_F_PER_IO_DAEMON, "UBLK_F_PER_IO_DAEMON"),
    (UBLK_F_BUF_REG_OFF_DAEMON, "UBLK_F_BUF_REG_OFF_DAEMON"),
    (UBLK_F_BATCH_IO, "UBLK_F_BATCH_IO"),
    (UBLK_F_INTEGRITY, "UBLK_F_INTEGRITY"),
    (UBLK_F_SAFE_STOP_DEV, "UBLK_F_SAFE_STOP_DEV"),
    (UBLK_F_NO_AUTO_PART_SCAN, "UBLK_F_NO_AUTO_PART_SCAN"),
    (UBLK_F_SHMEM_ZC, "UBLK_F_SHMEM_ZC"),
    (UBLK_F_IO_DESC_SIZE, "UBLK_F_IO_DESC_SIZE"),
];

/// The names of the bits set in `flags` ("0x.." for unknown bits).
pub fn feature_names(flags: u64) -> Vec<String> {
    let mut names: Vec<String> =
        FEATURE_NAMES.iter().filter(|(bit, _)| flags & bit != 0).map(|(_, n)| (*n).to_string()).collect();
    let known = FEATURE_NAMES.iter().fold(0, |acc, (bit, _)| acc | bit);
    if flags & !known != 0 {
        names.push(format!("{:#x}", flags & !known));
    }
    names
}

// ---- device states -----------------------------------------------------------
pub const UBLK_S_DEV_DEAD: u16 = 0;
pub const UBLK_S_DEV_LIVE: u16 = 1;
pub const UBLK_S_DEV_QUIESCED: u16 = 2;
/// Linux 6.13: no server, I/O failed (UBLK_F_USER_RECOVERY_FAIL_IO).
pub const UBLK_S_DEV_FAIL_IO: u16 = 3;

/// A device state's name as the kernel's constants spell it.
pub fn state_name(state: u16) -> &'static str {
    match state {
        UBLK_S_DEV_DEAD => "DEAD",
        UBLK_S_DEV_LIVE => "LIVE",
        UBLK_S_DEV_QUIESCED => "QUIESCED",
        UBLK_S_DEV_FAIL_IO => "FAIL_IO",
        _ => "UNKNOWN",
    }
}

// ---- I/O ops and flags (ublksrv_io_desc.op_flags) ----------------------------
pub const UBLK_IO_OP_READ: u8 = 0;
pub const UBLK_IO_OP_WRITE: u8 = 1;
pub const UBLK_IO_OP_FLUSH: u8 = 2;
pub const UBLK_IO_OP_DISCARD: u8 = 3;
pub const UBLK_IO_OP_WRITE_SAME: u8 = 4;
pub const UBLK_IO_OP_WRITE_ZEROES: u8 = 5;
pub const UBLK_IO_OP_ZONE_OPEN: u8 = 10;
pub const UBLK_IO_OP_ZONE_CLOSE: u8 = 11;
pub const UBLK_IO_OP_ZONE_FINISH: u8 = 12;
/// Zone append: the commit returns the written sector (`zone_append_lba`,
/// in the command's `addr` field).
pub const UBLK_IO_OP_ZONE_APPEND: u8 = 13;
pub const UBLK_IO_OP_ZONE_RESET_ALL: u8 = 14;
pub const UBLK_IO_OP_ZONE_RESET: u8 = 15;
/// Report zones: `nr_sectors` holds the number of zones wanted; the server
/// writes that many `BlkZone`s (fewer: a zero-length zone ends the list)
/// into the request's buffer by user copy.
pub const UBLK_IO_OP_REPORT_ZONES: u8 = 18;

/// op_flags bits above the op byte.
pub const UBLK_IO_F_FUA: u32 = 1 << 13;
pub const UBLK_IO_F_NOUNMAP: u32 = 1 << 15;
/// The kernel could not auto-register this request's pages (with
/// UBLK_AUTO_BUF_REG_FALLBACK asked): the server registers them itself,
/// or copies.
pub const UBLK_IO_F_NEED_REG_BUF: u32 = 1 << 17;

/// `struct ublk_auto_buf_reg`'s flags: on a failed auto registration,
/// hand the request over anyway, marked UBLK_IO_F_NEED_REG_BUF (else the
/// kernel fails the request).
pub const UBLK_AUTO_BUF_REG_FALLBACK: u8 = 1;

/// `struct ublk_auto_buf_reg { __u16 index; __u8 flags; __u8 reserved0;
/// __u32 reserved1; }` as the u64 a FETCH or COMMIT_AND_FETCH SQE carries
/// in its own `addr` field (not in `ublksrv_io_cmd.addr`, which stays 0:
/// a FETCH with it there fails with EINVAL): register the request's pages
/// at `index` of the ring's buffer table.
pub fn auto_buf_reg(index: u16, flags: u8) -> u64 {
    u64::from(index) | u64::from(flags) << 16
}

// ---- parameter attributes and types --------------------------------------------
pub const UBLK_ATTR_READ_ONLY: u32 = 1 << 0;
pub const UBLK_ATTR_ROTATIONAL: u32 = 1 << 1;
pub const UBLK_ATTR_VOLATILE_CACHE: u32 = 1 << 2;
pub const UBLK_ATTR_FUA: u32 = 1 << 3;

pub const UBLK_PARAM_TYPE_BASIC: u32 = 1 << 0;
pub const UBLK_PARAM_TYPE_DISCARD: u32 = 1 << 1;
pub const UBLK_PARAM_TYPE_DEVT: u32 = 1 << 2;
pub const UBLK_PARAM_TYPE_ZONED: u32 = 1 << 3;

// ---- user copy (UBLK_F_USER_COPY) ---------------------------------------------
// The server reads a write's data from, and writes a read's data to,
// /dev/ublkcN at an offset naming the queue, the tag and the position in
// the request: UBLKSRV_IO_BUF_OFFSET + (q_id << UBLK_QID_OFF) +
// (tag << UBLK_TAG_OFF) + offset.
const UBLKSRV_IO_BUF_OFFSET: u64 = 0x8000_0000;
const UBLK_IO_BUF_BITS: u32 = 25;
const UBLK_TAG_OFF: u32 = UBLK_IO_BUF_BITS;
const UBLK_TAG_BITS: u32 = 16;
const UBLK_QID_OFF: u32 = UBLK_TAG_OFF + UBLK_TAG_BITS;

/// The /dev/ublkcN file offset of the start of request `tag`'s data on
/// queue `q_id` (user copy).
pub fn user_copy_offset(q_id: u16, tag: u16) -> u64 {
    UBLKSRV_IO_BUF_OFFSET + (u64::from(q_id) << UBLK_QID_OFF) + (u64::from(tag) << UBLK_TAG_OFF)
}

/// `struct ublksrv_ctrl_cmd`: the first 32 bytes of a control SQE's cmd area.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CtrlCmd {
    /// The device; for ADD_DEV, the wanted id or u32::MAX for any.
    pub dev_id: u32,
    /// u16::MAX unless the command is about one queue.
    pub queue_id: u16,
    /// Length of the buffer at `addr`.
    pub len: u16,
    /// A buffer in this process (dev info, params, features).
    pub addr: u64,
    /// Inline data (START_DEV: the server's pid).
    pub data: [u64; 1],
    /// Unprivileged devices (and GET_DEV_INFO2): the length of the
    /// /dev/ublkcN path at the start of the buffer at `addr`, which `len`
    /// includes; the kernel checks the caller's access to that node.
    pub dev_path_len: u16,
    pub pad: u16,
    pub reserved: u32,
}

/// `struct ublksrv_ctrl_dev_info`: what ADD_DEV asks for and answers, and
/// GET_DEV_INFO reports.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DevInfo {
    pub nr_hw_queues: u16,
    pub queue_depth: u16,
    /// UBLK_S_DEV_*.
    pub state: u16,
    pub pad0: u16,
    /// The largest request in bytes (the per-tag buffer size).
    pub max_io_buf_bytes: u32,
    pub dev_id: u32,
    /// The serving process, -1 when none.
    pub ublksrv_pid: i32,
    pub pad1: u32,
    /// UBLK_F_* wanted (ADD_DEV) and granted (its answer).
    pub flags: u64,
    /// For the server's own use; the kernel keeps it.
    pub ublksrv_flags: u64,
    /// The adder's uid and gid (set by the kernel at ADD_DEV): the owner
    /// of an unprivileged device, to whom the udev rule gives its nodes.
    pub owner_uid: u32,
    pub owner_gid: u32,
    pub reserved1: u64,
    pub reserved2: u64,
}

/// `struct ublksrv_io_desc`: one per tag in the mmapped area, written by
/// the kernel before it completes the tag's fetch command.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IoDesc {
    /// Op in bits 0-7, UBLK_IO_F_* above.
    pub op_flags: u32,
    pub nr_sectors: u32,
    pub start_sector: u64,
    /// The buffer address this tag's last command gave.
    pub addr: u64,
}

impl IoDesc {
    pub fn op(&self) -> u8 {
        (self.op_flags & 0xff) as u8
    }

    /// The UBLK_IO_F_* bits (unshifted: compare with the constants).
    pub fn flags(&self) -> u32 {
        self.op_flags & !0xff
    }
}

/// `struct ublksrv_io_cmd`: the 16 bytes of a FETCH or COMMIT_AND_FETCH SQE.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IoCmd {
    pub q_id: u16,
    pub tag: u16,
    /// COMMIT: bytes done, or a negative errno.
    pub result: i32,
    /// The tag's buffer in this process.
    pub addr: u64,
}

impl IoCmd {
    /// The command as the SQE's 16-byte cmd area holds it (native endian,
    /// as the kernel reads the struct).
    pub fn to_bytes(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[0..2].copy_from_slice(&self.q_id.to_ne_bytes());
        out[2..4].copy_from_slice(&self.tag.to_ne_bytes());
        out[4..8].copy_from_slice(&self.result.to_ne_bytes());
        out[8..16].copy_from_slice(&self.addr.to_ne_bytes());
        out
    }
}

impl CtrlCmd {
    /// The command in the first 32 bytes of an SQE128's 80-byte cmd area.
    pub fn to_bytes(self) -> [u8; 80] {
        let mut out = [0u8; 80];
        out[0..4].copy_from_slice(&self.dev_id.to_ne_bytes());
        out[4..6].copy_from_slice(&self.queue_id.to_ne_bytes());
        out[6..8].copy_from_slice(&self.len.to_ne_bytes());
        out[8..16].copy_from_slice(&self.addr.to_ne_bytes());
        out[16..24].copy_from_slice(&self.data[0].to_ne_bytes());
        out[24..26].copy_from_slice(&self.dev_path_len.to_ne_bytes());
        out[26..28].copy_from_slice(&self.pad.to_ne_bytes());
        out[28..32].copy_from_slice(&self.reserved.to_ne_bytes());
        out
    }
}

/// `struct ublk_param_basic`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ParamBasic {
    /// UBLK_ATTR_*.
    pub attrs: u32,
    pub logical_bs_shift: u8,
    pub physical_bs_shift: u8,
    pub io_opt_shift: u8,
    pub io_min_shift: u8,
    /// The largest request in sectors (at most max_io_buf_bytes / 512).
    pub max_sectors: u32,
    /// Zone size in sectors on zoned devices, else 0.
    pub chunk_sectors: u32,
    pub dev_sectors: u64,
    pub virt_boundary_mask: u64,
}

/// `struct ublk_param_discard`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ParamDiscard {
    pub discard_alignment: u32,
    /// Must be non-zero when the type is set.
    pub discard_granularity: u32,
    pub max_discard_sectors: u32,
    pub max_write_zeroes_sectors: u32,
    /// 1 when discard is supported (6.12 takes single-segment discards only).
    pub max_discard_segments: u16,
    pub reserved0: u16,
}

/// `struct ublk_param_devt` (read only: GET_PARAMS fills it).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ParamDevt {
    pub char_major: u32,
    pub char_minor: u32,
    pub disk_major: u32,
    pub disk_minor: u32,
}

/// `struct ublk_param_zoned`: set with UBLK_PARAM_TYPE_ZONED on a device
/// added with UBLK_F_ZONED (which needs UBLK_F_USER_COPY). The zone size is
/// the basic part's `chunk_sectors`; the kernel counts the zones as
/// `dev_sectors / chunk_sectors`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ParamZoned {
    pub max_open_zones: u32,
    pub max_active_zones: u32,
    /// Must be non-zero.
    pub max_zone_append_sectors: u32,
    pub reserved: [u8; 20],
}

/// `struct blk_zone` (include/uapi/linux/blkzoned.h): one entry of a zone
/// report, 64 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlkZone {
    pub start: u64,
    pub len: u64,
    pub wp: u64,
    /// BLK_ZONE_TYPE_*: 1 conventional, 2 sequential write required.
    pub ztype: u8,
    /// BLK_ZONE_COND_*.
    pub cond: u8,
    pub non_seq: u8,
    pub reset: u8,
    pub resv: [u8; 4],
    /// Valid since the kernel sets BLK_ZONE_REP_CAPACITY in its reports.
    pub capacity: u64,
    pub reserved: [u8; 24],
}

pub const BLK_ZONE_TYPE_CONVENTIONAL: u8 = 1;
pub const BLK_ZONE_TYPE_SEQWRITE_REQ: u8 = 2;

impl BlkZone {
    /// The entry as the kernel reads it (native endian).
    pub fn to_bytes(self) -> [u8; 64] {
        let mut out = [0u8; 64];
        out[0..8].copy_from_slice(&self.start.to_ne_bytes());
        out[8..16].copy_from_slice(&self.len.to_ne_bytes());
        out[16..24].copy_from_slice(&self.wp.to_ne_bytes());
        out[24] = self.ztype;
        out[25] = self.cond;
        out[26] = self.non_seq;
        out[27] = self.reset;
        out[28..32].copy_from_slice(&self.resv);
        out[32..40].copy_from_slice(&self.capacity.to_ne_bytes());
        out[40..64].copy_from_slice(&self.reserved);
        out
    }
}

/// `struct ublk_params` as of 6.12 (basic, discard, devt, zoned). `len`
/// says how much of it the kernel may read; newer kernels' longer struct
/// takes a shorter one.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Params {
    pub len: u32,
    /// UBLK_PARAM_TYPE_*: the parts that are filled.
    pub types: u32,
    pub basic: ParamBasic,
    pub discard: ParamDiscard,
    pub devt: ParamDevt,
    pub zoned: ParamZoned,
}

// The kernel reads these layouts: any drift is an ABI break.
const _: () = assert!(size_of::<CtrlCmd>() == 32);
const _: () = assert!(size_of::<DevInfo>() == 64);
const _: () = assert!(size_of::<IoDesc>() == 24);
const _: () = assert!(size_of::<IoCmd>() == 16);
const _: () = assert!(size_of::<ParamBasic>() == 32);
const _: () = assert!(size_of::<ParamDiscard>() == 20);
const _: () = assert!(size_of::<ParamDevt>() == 16);
const _: () = assert!(size_of::<ParamZoned>() == 32);
const _: () = assert!(size_of::<Params>() == 112);
const _: () = assert!(size_of::<BlkZone>() == 64);

/// Bytes of one queue's descriptor area as the kernel maps it: a page
/// multiple holding `depth` descriptors.
pub fn queue_desc_bytes(depth: u16, page_size: usize) -> usize {
    (usize::from(depth) * size_of::<IoDesc>()).div_ceil(page_size) * page_size
}

/// The mmap offset of queue `q_id`'s descriptors: each queue's area is
/// spaced as if it had the largest depth.
pub fn queue_desc_offset(q_id: u16, page_size: usize) -> u64 {
    (u64::from(q_id)) * queue_desc_bytes(UBLK_MAX_QUEUE_DEPTH, page_size) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_numbers_match_the_header() {
        // Values of the _IOR/_IOWR macros of ublk_cmd.h, computed by hand.
        assert_eq!(UBLK_U_CMD_ADD_DEV, 0xc020_7504);
        assert_eq!(UBLK_U_CMD_GET_DEV_INFO, 0x8020_7502);
        assert_eq!(UBLK_U_CMD_GET_QUEUE_AFFINITY, 0x8020_7501);
        assert_eq!(UBLK_U_CMD_GET_FEATURES, 0x8020_7513);
        assert_eq!(UBLK_U_CMD_GET_DEV_INFO2, 0x8020_7512);
        assert_eq!(UBLK_U_CMD_DEL_DEV, 0xc020_7505);
        assert_eq!(UBLK_U_CMD_START_USER_RECOVERY, 0xc020_7510);
        assert_eq!(UBLK_U_CMD_END_USER_RECOVERY, 0xc020_7511);
        assert_eq!(UBLK_U_IO_FETCH_REQ, 0xc010_7520);
        assert_eq!(UBLK_U_IO_COMMIT_AND_FETCH_REQ, 0xc010_7521);
    }

    #[test]
    fn user_copy_offsets_encode_queue_and_tag() {
        // UBLKSRV_IO_BUF_OFFSET + (q_id << 41) + (tag << 25), ublk_cmd.h.
        assert_eq!(user_copy_offset(0, 0), 0x8000_0000);
        assert_eq!(user_copy_offset(0, 1), 0x8000_0000 + (1 << 25));
        assert_eq!(user_copy_offset(2, 3), 0x8000_0000 + (2 << 41) + (3 << 25));
    }

    #[test]
    fn blk_zone_bytes_follow_the_kernel_layout() {
        let z = BlkZone { start: 1, len: 2, wp: 3, ztype: 2, cond: 4, capacity: 5, ..BlkZone::default() };
        let b = z.to_bytes();
        assert_eq!((b[0], b[8], b[16], b[24], b[25], b[32]), (1, 2, 3, 2, 4, 5));
    }

    #[test]
    fn descriptor_areas_are_page_multiples() {
        assert_eq!(queue_desc_bytes(64, 4096), 4096);
        assert_eq!(queue_desc_bytes(171, 4096), 8192);
        assert_eq!(queue_desc_offset(1, 4096), 98304);
    }

    #[test]
    fn feature_names_name_unknown_bits() {
        assert_eq!(feature_names(UBLK_F_CMD_IOCTL_ENCODE | 1 << 40), ["UBLK_F_CMD_IOCTL_ENCODE", "0x10000000000"]);
        // What Linux 7.3's GET_FEATURES reported: every bit named.
        let names = feature_names(0x1f_ffff);
        assert_eq!(names.len(), 21, "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("UBLK_F_")), "{names:?}");
        assert_eq!(
            feature_names(0x26000),
            ["UBLK_F_PER_IO_DAEMON", "UBLK_F_BUF_REG_OFF_DAEMON", "UBLK_F_SAFE_STOP_DEV"]
        );
    }
}
