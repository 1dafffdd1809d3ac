//! The bio a ublk request becomes when its data is in the tag's buffer
//! (the kernel's copy, or user copy): reads, writes and zone appends take
//! the buffer shaped to the request; flush, discard, write zeroes and zone
//! management carry none. What no bio expresses is an errno.
//!
//! Relies on: queue.rs (`Tag` and its buffer); uapi.rs (ops and flags).

use mqblk::zoned::ZoneMgmt;
use mqblk::{Bio, ReqFlags, SECTOR_SHIFT};

use super::Tag;
use crate::uapi::{self, IoDesc};

/// The bio for a request and what a success returns (bytes for reads and
/// writes, 0 otherwise), or the errno to fail it with. Takes the tag's
/// buffer for reads and writes.
pub(super) fn bio_for(desc: &IoDesc, tag: &mut Tag) -> Result<(Bio, i32), i32> {
    match desc.op() {
        // A flush names no sectors: the kernel's flush requests carry
        // start sector (sector_t)-1 (seen from Linux 6.12).
        uapi::UBLK_IO_OP_FLUSH => return Ok((Bio::flush(), 0)),
        uapi::UBLK_IO_OP_ZONE_RESET_ALL => return Ok((Bio::zone_reset_all(), 0)),
        _ => {}
    }
    let offset = desc.start_sector.checked_mul(512).ok_or(libc::EINVAL)?;
    let bytes = u64::from(desc.nr_sectors) << SECTOR_SHIFT;
    let fua = desc.flags() & uapi::UBLK_IO_F_FUA != 0;
    let flags = if fua { ReqFlags::FUA } else { ReqFlags::NONE };
    let mgmt = |m: ZoneMgmt| Ok((Bio::zone_mgmt(m, offset), 0));
    match desc.op() {
        uapi::UBLK_IO_OP_READ | uapi::UBLK_IO_OP_WRITE | uapi::UBLK_IO_OP_ZONE_APPEND => {
            let buf = tag.buf.as_mut().ok_or(libc::EIO)?;
            if bytes > buf.capacity() as u64 || bytes == 0 {
                return Err(libc::EINVAL);
            }
            let mut buf = tag.buf.take().ok_or(libc::EIO)?;
            buf.set_len(bytes as usize);
            let result = i32::try_from(bytes).map_err(|_| libc::EINVAL)?;
            let bio = match desc.op() {
                uapi::UBLK_IO_OP_READ => Bio::read(offset, buf),
                uapi::UBLK_IO_OP_WRITE => Bio::write(offset, buf).with_flags(flags),
                _ => Bio::zone_append(offset, buf).with_flags(flags),
            };
            Ok((bio, result))
        }
        uapi::UBLK_IO_OP_ZONE_OPEN => mgmt(ZoneMgmt::Open),
        uapi::UBLK_IO_OP_ZONE_CLOSE => mgmt(ZoneMgmt::Close),
        uapi::UBLK_IO_OP_ZONE_FINISH => mgmt(ZoneMgmt::Finish),
        uapi::UBLK_IO_OP_ZONE_RESET => mgmt(ZoneMgmt::Reset),
        uapi::UBLK_IO_OP_DISCARD => Ok((Bio::discard(offset, bytes), 0)),
        uapi::UBLK_IO_OP_WRITE_ZEROES => {
            // REQ_NOUNMAP (blkdev_issue_zeroout without BLKDEV_ZERO_UNMAP,
            // the BLKZEROOUT ioctl's): the range must stay provisioned.
            let nounmap = desc.flags() & uapi::UBLK_IO_F_NOUNMAP != 0;
            let flags = if nounmap { flags | ReqFlags::NOUNMAP } else { flags };
            Ok((Bio::write_zeroes(offset, bytes).with_flags(flags), 0))
        }
        _ => Err(libc::EOPNOTSUPP),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::TagState;
    use mqblk::Buf;

    fn tag(bytes: usize) -> Tag {
        let buf = Buf::new(bytes);
        let addr = buf.as_ptr() as u64;
        Tag { buf: Some(buf), addr, state: TagState::Fetching }
    }

    fn desc(op: u8, flags: u32, start_sector: u64, nr_sectors: u32) -> IoDesc {
        IoDesc { op_flags: u32::from(op) | flags, nr_sectors, start_sector, addr: 0 }
    }

    #[test]
    fn read_takes_the_tag_buffer_shaped_to_the_request() {
        let mut t = tag(8192);
        let (bio, result) = bio_for(&desc(uapi::UBLK_IO_OP_READ, 0, 8, 4), &mut t).unwrap();
        assert_eq!((bio.op, bio.offset, bio.len, result), (mqblk::Op::Read, 4096, 2048, 2048));
        assert!(t.buf.is_none(), "the buffer moved into the bio");
        assert_eq!(bio.segs.into_buf().unwrap().as_ptr() as u64, t.addr);
    }

    #[test]
    fn fua_write_carries_the_flag() {
        let mut t = tag(4096);
        let (bio, _) = bio_for(&desc(uapi::UBLK_IO_OP_WRITE, uapi::UBLK_IO_F_FUA, 0, 8), &mut t).unwrap();
        assert!(bio.flags.contains(ReqFlags::FUA));
    }

    #[test]
    fn a_nounmap_write_zeroes_carries_the_flag() {
        let mut t = tag(4096);
        let zeroes = uapi::UBLK_IO_OP_WRITE_ZEROES;
        let (bio, _) = bio_for(&desc(zeroes, uapi::UBLK_IO_F_NOUNMAP, 0, 8), &mut t).unwrap();
        assert!(bio.flags.contains(ReqFlags::NOUNMAP));
        let (bio, _) = bio_for(&desc(zeroes, 0, 0, 8), &mut t).unwrap();
        assert!(!bio.flags.contains(ReqFlags::NOUNMAP), "may unmap: {:?}", bio.flags);
    }

    #[test]
    fn dataless_ops_keep_the_buffer() {
        let mut t = tag(4096);
        for (op, want) in [
            (uapi::UBLK_IO_OP_FLUSH, mqblk::Op::Flush),
            (uapi::UBLK_IO_OP_DISCARD, mqblk::Op::Discard),
            (uapi::UBLK_IO_OP_WRITE_ZEROES, mqblk::Op::WriteZeroes),
        ] {
            let (bio, result) = bio_for(&desc(op, 0, 0, 16), &mut t).unwrap();
            assert_eq!((bio.op, result), (want, 0));
            assert!(t.buf.is_some());
        }
    }

    #[test]
    fn flush_ignores_its_start_sector() {
        // The kernel's flush requests have sector (sector_t)-1.
        let mut t = tag(4096);
        let (bio, result) = bio_for(&desc(uapi::UBLK_IO_OP_FLUSH, 0, u64::MAX, 0), &mut t).unwrap();
        assert_eq!((bio.op, result), (mqblk::Op::Flush, 0));
    }

    #[test]
    fn bad_requests_get_an_errno_not_a_panic() {
        let mut t = tag(4096);
        assert_eq!(bio_for(&desc(uapi::UBLK_IO_OP_WRITE_SAME, 0, 0, 8), &mut t).unwrap_err(), libc::EOPNOTSUPP);
        assert_eq!(bio_for(&desc(99, 0, 0, 8), &mut t).unwrap_err(), libc::EOPNOTSUPP);
        assert_eq!(bio_for(&desc(uapi::UBLK_IO_OP_READ, 0, 0, 9), &mut t).unwrap_err(), libc::EINVAL);
        assert_eq!(bio_for(&desc(uapi::UBLK_IO_OP_READ, 0, 0, 0), &mut t).unwrap_err(), libc::EINVAL);
        assert_eq!(bio_for(&desc(uapi::UBLK_IO_OP_READ, 0, u64::MAX, 8), &mut t).unwrap_err(), libc::EINVAL);
        assert!(t.buf.is_some(), "a refused request leaves the buffer with the tag");
    }

    #[test]
    fn zone_ops_map_to_zone_bios() {
        let mut t = tag(4096);
        for (op, want) in [
            (uapi::UBLK_IO_OP_ZONE_OPEN, mqblk::Op::ZoneOpen),
            (uapi::UBLK_IO_OP_ZONE_CLOSE, mqblk::Op::ZoneClose),
            (uapi::UBLK_IO_OP_ZONE_FINISH, mqblk::Op::ZoneFinish),
            (uapi::UBLK_IO_OP_ZONE_RESET, mqblk::Op::ZoneReset),
        ] {
            let (bio, result) = bio_for(&desc(op, 0, 2048, 0), &mut t).unwrap();
            assert_eq!((bio.op, bio.offset, result), (want, 2048 * 512, 0));
        }
        let (bio, _) = bio_for(&desc(uapi::UBLK_IO_OP_ZONE_RESET_ALL, 0, 0, 0), &mut t).unwrap();
        assert_eq!(bio.op, mqblk::Op::ZoneResetAll);
        assert!(t.buf.is_some(), "zone management moves no data");
    }

    #[test]
    fn zone_append_takes_the_buffer_like_a_write() {
        let mut t = tag(8192);
        let (bio, result) = bio_for(&desc(uapi::UBLK_IO_OP_ZONE_APPEND, uapi::UBLK_IO_F_FUA, 4096, 8), &mut t).unwrap();
        assert_eq!((bio.op, bio.offset, bio.len, result), (mqblk::Op::ZoneAppend, 4096 * 512, 4096, 4096));
        assert!(bio.flags.contains(ReqFlags::FUA));
        assert!(t.buf.is_none());
    }
}
