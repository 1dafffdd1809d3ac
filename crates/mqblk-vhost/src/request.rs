//! One virtio-blk request read from a descriptor chain (virtio 1.2, 5.2.6):
//! the 16-byte header (`type`, `ioprio`, `sector`), the data, and the
//! one-byte status at the end of the device-writable part.
//!
//! The framing is not assumed (VIRTIO_F_ANY_LAYOUT is implied by
//! VERSION_1): the chain is split into its device-readable bytes followed
//! by its device-writable bytes, the header is the first 16 readable bytes
//! and the status the last writable byte, wherever the descriptor
//! boundaries fall. A bad request is a typed [`ParseError`] whose
//! [`status`](ParseError::status) is what the guest gets; none panics.
//!
//! Relies on: vm-memory (the guest's memory, checked before use);
//! virtio-queue's `Descriptor`; config.rs (`DiskLimits`), regions.rs.

use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_UNSUPP, VIRTIO_BLK_T_DISCARD, VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_GET_ID,
    VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT, VIRTIO_BLK_T_WRITE_ZEROES, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP,
};
use virtio_queue::desc::split::Descriptor;
use vm_memory::{Bytes, GuestAddress, GuestMemory, Permissions};

use crate::config::DiskLimits;
use crate::queue::Mem;
use crate::regions::Regions;

/// Bytes of the request header (`struct virtio_blk_outhdr`).
pub const HEADER_BYTES: u64 = 16;
/// Bytes of one discard / write-zeroes range.
pub const RANGE_BYTES: u64 = 16;
/// Bytes of the GET_ID answer.
pub const ID_BYTES: usize = 20;

/// A run of guest memory, checked to lie inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub addr: GuestAddress,
    pub len: u32,
}

/// What the request asks for, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read { offset: u64, len: u64 },
    Write { offset: u64, len: u64 },
    Flush,
    GetId,
    Discard { offset: u64, len: u64 },
    WriteZeroes { offset: u64, len: u64, unmap: bool },
}

impl Kind {
    /// Bytes of data moved between guest and device (reads and writes).
    pub fn data_bytes(&self) -> u64 {
        match *self {
            Kind::Read { len, .. } | Kind::Write { len, .. } => len,
            _ => 0,
        }
    }
}

/// A request that parsed: its kind, where its status byte goes and, in the
/// caller's vector, its data segments (device-writable for reads and
/// GET_ID, device-readable for writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub kind: Kind,
    pub status: GuestAddress,
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("descriptor at {addr:#x} of {len} bytes lies outside guest memory")]
    OutsideMemory { addr: u64, len: u32 },
    #[error("more than {0} descriptors")]
    TooManyDescriptors(usize),
    /// The chain stopped at a descriptor whose NEXT flag is set: it loops,
    /// outgrows its table, names a descriptor past the table's end, or
    /// leads to an indirect table that is unreadable or malformed
    /// (virtio-queue ends such a chain early rather than fail it).
    #[error("the chain ends at a descriptor that names a next one")]
    Truncated,
    #[error("a device-readable descriptor after a device-writable one")]
    ReadableAfterWritable,
    #[error("no device-writable byte for the status")]
    NoStatus,
    #[error("header of {0} bytes, not 16")]
    ShortHeader(u64),
    #[error("unknown request type {0}")]
    UnknownType(u32),
    #[error("a write to a read-only disk")]
    ReadOnly,
    #[error("{len} bytes at {offset} past the end of the disk")]
    PastEnd { offset: u64, len: u64 },
    #[error("{len} bytes at {offset} not aligned to the {block} byte block")]
    Misaligned { offset: u64, len: u64, block: u32 },
    #[error("{0} data bytes: empty or over the request limit")]
    BadLength(u64),
    #[error("data in the wrong direction for the request type")]
    WrongDirection,
    #[error("{0} ranges in one discard or write zeroes (at most 1)")]
    Ranges(u64),
    #[error("range flags {0:#x} not supported")]
    RangeFlags(u32),
    #[error("guest memory: {0}")]
    Memory(&'static str),
}

impl ParseError {
    /// The virtio-blk status the guest gets.
    pub fn status(&self) -> u8 {
        match self {
            ParseError::UnknownType(_) | ParseError::RangeFlags(_) => VIRTIO_BLK_S_UNSUPP as u8,
            _ => VIRTIO_BLK_S_IOERR as u8,
        }
    }
}

/// A refused request: the error, and where its status goes (None: the
/// chain has no writable byte, so the guest can only be given the
/// descriptor back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub error: ParseError,
    pub status: Option<GuestAddress>,
}

/// A chain's descriptors, walked: byte counts of each part, where the
/// writable part starts in `data`, and the first error met.
struct Walk {
    readable_bytes: u64,
    writable_bytes: u64,
    first_writable: Option<usize>,
    refused: Option<ParseError>,
}

/// Pushes every descriptor of `chain` (at most `max`) into `data`,
/// checking each lies in `mem`, that readable ones come first, and that
/// the chain really ended (its last descriptor has no NEXT flag).
fn walk(chain: impl Iterator<Item = Descriptor>, mem: &Mem, max: usize, data: &mut Vec<Segment>) -> Walk {
    let mut w = Walk { readable_bytes: 0, writable_bytes: 0, first_writable: None, refused: None };
    let mut last_has_next = false;
    let mut regions = Regions::new(mem);
    for (i, desc) in chain.enumerate() {
        if i >= max {
            w.refused.get_or_insert(ParseError::TooManyDescriptors(max));
            return w;
        }
        last_has_next = desc.has_next();
        let seg = Segment { addr: desc.addr(), len: desc.len() };
        let access = if desc.is_write_only() { Permissions::Write } else { Permissions::Read };
        // One region (nearly always the one before), else vm-memory's own
        // check: a range across regions is guest memory too.
        if regions.find(seg.addr, seg.len).is_none() && !mem.check_range(seg.addr, seg.len as usize, access) {
            w.refused.get_or_insert(ParseError::OutsideMemory { addr: seg.addr.0, len: seg.len });
        }
        if desc.is_write_only() {
            w.first_writable.get_or_insert(data.len());
            w.writable_bytes += u64::from(seg.len);
        } else {
            if w.first_writable.is_some() {
                w.refused.get_or_insert(ParseError::ReadableAfterWritable);
            }
            w.readable_bytes += u64::from(seg.len);
        }
        data.push(seg);
    }
    if last_has_next {
        w.refused.get_or_insert(ParseError::Truncated);
    }
    w
}

/// Reads the request in `chain` (its descriptors, as virtio-queue yields
/// them, indirect tables followed) from `mem`, holding it to `disk`.
/// `data` receives the data segments (cleared first).
pub fn parse(
    chain: impl Iterator<Item = Descriptor>,
    mem: &Mem,
    disk: &DiskLimits,
    data: &mut Vec<Segment>,
) -> Result<Request, Refused> {
    data.clear();
    let w = walk(chain, mem, disk.max_descriptors(), data);
    let status = status_address(data, w.writable_bytes, w.refused.is_none());
    let fail = |error| Refused { error, status };
    if let Some(error) = w.refused {
        return Err(fail(error));
    }
    let status = status.ok_or(fail(ParseError::NoStatus))?;
    if w.readable_bytes < HEADER_BYTES {
        return Err(fail(ParseError::ShortHeader(w.readable_bytes)));
    }
    let first_writable = w.first_writable.unwrap_or(data.len());
    let mut header = [0u8; HEADER_BYTES as usize];
    read_segments(mem, &data[..first_writable], 0, &mut header).map_err(fail)?;
    let req_type = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
    let sector = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
    let out_bytes = w.readable_bytes - HEADER_BYTES;
    let in_bytes = w.writable_bytes - 1;
    let kind = match req_type {
        VIRTIO_BLK_T_IN => Kind::Read { offset: byte_offset(sector).map_err(fail)?, len: in_bytes },
        VIRTIO_BLK_T_OUT => Kind::Write { offset: byte_offset(sector).map_err(fail)?, len: out_bytes },
        VIRTIO_BLK_T_FLUSH => Kind::Flush,
        VIRTIO_BLK_T_GET_ID => Kind::GetId,
        VIRTIO_BLK_T_DISCARD | VIRTIO_BLK_T_WRITE_ZEROES => {
            range(mem, &data[..first_writable], req_type, out_bytes, disk).map_err(fail)?
        }
        other => return Err(fail(ParseError::UnknownType(other))),
    };
    check(&kind, out_bytes, in_bytes, disk).map_err(fail)?;
    // Keep only the data segments.
    match kind {
        Kind::Read { .. } | Kind::GetId => keep(data, first_writable, in_bytes),
        Kind::Write { .. } => {
            data.truncate(first_writable);
            skip_header(data);
        }
        _ => data.clear(),
    }
    Ok(Request { kind, status })
}

/// The address of the last writable byte, if there is one and the chain's
/// descriptors passed the memory check.
fn status_address(segs: &[Segment], writable_bytes: u64, checked: bool) -> Option<GuestAddress> {
    if writable_bytes == 0 || !checked {
        return None;
    }
    let last = segs.iter().rev().find(|s| s.len > 0)?;
    Some(GuestAddress(last.addr.0 + u64::from(last.len) - 1))
}

fn byte_offset(sector: u64) -> Result<u64, ParseError> {
    sector.checked_mul(512).ok_or(ParseError::PastEnd { offset: u64::MAX, len: 0 })
}

/// A discard or write-zeroes request's one range.
fn range<M: GuestMemory>(
    mem: &M,
    readable: &[Segment],
    req_type: u32,
    out_bytes: u64,
    disk: &DiskLimits,
) -> Result<Kind, ParseError> {
    if out_bytes != RANGE_BYTES {
        return Err(ParseError::Ranges(out_bytes / RANGE_BYTES));
    }
    let mut r = [0u8; RANGE_BYTES as usize];
    read_segments(mem, readable, HEADER_BYTES, &mut r)?;
    let sector = u64::from_le_bytes(r[0..8].try_into().expect("8 bytes"));
    let sectors = u32::from_le_bytes(r[8..12].try_into().expect("4 bytes"));
    let flags = u32::from_le_bytes(r[12..16].try_into().expect("4 bytes"));
    let offset = byte_offset(sector)?;
    let len = u64::from(sectors) * 512;
    if req_type == VIRTIO_BLK_T_DISCARD {
        if flags != 0 {
            return Err(ParseError::RangeFlags(flags));
        }
        if disk.max_discard_sectors == 0 {
            return Err(ParseError::UnknownType(req_type));
        }
        if sectors > disk.max_discard_sectors {
            return Err(ParseError::BadLength(len));
        }
        return Ok(Kind::Discard { offset, len });
    }
    if flags & !VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP != 0 {
        return Err(ParseError::RangeFlags(flags));
    }
    if disk.max_write_zeroes_sectors == 0 {
        return Err(ParseError::UnknownType(req_type));
    }
    if sectors > disk.max_write_zeroes_sectors {
        return Err(ParseError::BadLength(len));
    }
    // No UNMAP flag (Linux's virtio_blk: a REQ_NOUNMAP request): the range
    // must stay allocated, and the bio carries ReqFlags::NOUNMAP.
    Ok(Kind::WriteZeroes { offset, len, unmap: flags & VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP != 0 })
}

/// Read-only, range, alignment and direction checks.
fn check(kind: &Kind, out_bytes: u64, in_bytes: u64, disk: &DiskLimits) -> Result<(), ParseError> {
    let (offset, len) = match *kind {
        Kind::Flush => return Ok(()),
        Kind::GetId => return if in_bytes == 0 { Err(ParseError::WrongDirection) } else { Ok(()) },
        Kind::Read { offset, len } => {
            if out_bytes != 0 {
                return Err(ParseError::WrongDirection);
            }
            (offset, len)
        }
        Kind::Write { offset, len } | Kind::Discard { offset, len } | Kind::WriteZeroes { offset, len, .. } => {
            if disk.read_only {
                return Err(ParseError::ReadOnly);
            }
            if matches!(kind, Kind::Write { .. }) && in_bytes != 0 {
                return Err(ParseError::WrongDirection);
            }
            (offset, len)
        }
    };
    let data_op = matches!(kind, Kind::Read { .. } | Kind::Write { .. });
    if len == 0 || (data_op && len > disk.max_data_bytes()) {
        return Err(ParseError::BadLength(len));
    }
    let block = u64::from(disk.logical_block_size);
    if offset % block != 0 || len % block != 0 {
        return Err(ParseError::Misaligned { offset, len, block: disk.logical_block_size });
    }
    match offset.checked_add(len) {
        Some(end) if end <= disk.capacity_bytes => Ok(()),
        _ => Err(ParseError::PastEnd { offset, len }),
    }
}

/// Keeps `bytes` bytes of the segments from index `from` (the writable
/// part less its status byte).
fn keep(data: &mut Vec<Segment>, from: usize, mut bytes: u64) {
    data.drain(..from);
    data.retain_mut(|s| {
        let take = bytes.min(u64::from(s.len));
        bytes -= take;
        s.len = take as u32;
        take > 0
    });
}

/// Drops the header's 16 bytes from the front of the readable segments.
fn skip_header(data: &mut Vec<Segment>) {
    let mut skip = HEADER_BYTES;
    data.retain_mut(|s| {
        let cut = skip.min(u64::from(s.len));
        skip -= cut;
        s.addr = GuestAddress(s.addr.0 + cut);
        s.len -= cut as u32;
        s.len > 0
    });
}

/// Copies `out.len()` bytes from the segments' bytes starting at `skip`.
pub fn read_segments<M: GuestMemory>(
    mem: &M,
    segs: &[Segment],
    mut skip: u64,
    out: &mut [u8],
) -> Result<(), ParseError> {
    let mut done = 0;
    for s in segs {
        if done == out.len() {
            break;
        }
        let len = u64::from(s.len);
        if skip >= len {
            skip -= len;
            continue;
        }
        let n = ((len - skip) as usize).min(out.len() - done);
        mem.read_slice(&mut out[done..done + n], GuestAddress(s.addr.0 + skip))
            .map_err(|_| ParseError::Memory("read failed"))?;
        done += n;
        skip = 0;
    }
    if done == out.len() {
        Ok(())
    } else {
        Err(ParseError::Memory("chain shorter than its data"))
    }
}

/// Copies `data` into the segments, in order; returns the bytes written.
pub fn write_segments<M: GuestMemory>(mem: &M, segs: &[Segment], data: &[u8]) -> Result<usize, ParseError> {
    let mut done = 0;
    for s in segs {
        if done == data.len() {
            break;
        }
        let n = (s.len as usize).min(data.len() - done);
        mem.write_slice(&data[done..done + n], s.addr).map_err(|_| ParseError::Memory("write failed"))?;
        done += n;
    }
    Ok(done)
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
