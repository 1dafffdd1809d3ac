//! How a request's data moves when it is not through the tag's buffer
//! that the kernel copies (ublk's classic mode): user copy, where the
//! thread reads a write's data from /dev/ublkcN before its bio and writes
//! a read's data there after it; and zero copy, a bio over the request's
//! own pages (`KernelBuf`), with user copy as its fallback when the pages
//! cannot be registered.
//!
//! Relies on: queue.rs (the tag, its state and buffer), bio.rs
//! (`bio_for`); uapi.rs (the descriptor, user copy's offsets).

use std::fs::File;
use std::os::unix::fs::FileExt;

use mqblk::{Bio, Buf, KernelBuf, Op, ReqFlags, SECTOR_SHIFT};

use super::{bio_for, Queue, Tag, TagState};
use crate::error::Error;
use crate::uapi::{self, IoDesc};

impl Queue {
    /// Serves again, by user copy through the tag's buffer (made now if
    /// this is its first fallback), a zero-copy request whose pages could
    /// not be registered: nothing of it moved.
    pub(super) fn copy_instead(&mut self, tag_id: u16) -> Result<(), Error> {
        self.stats.copy_fallbacks += 1;
        let q_id = self.q_id;
        let desc = self.descs.get(tag_id);
        let tag = &mut self.tags[usize::from(tag_id)];
        log::debug!("queue {q_id}: tag {tag_id}: the request's pages could not be registered; copying instead");
        if tag.buf.is_none() {
            tag.buf = Some(Buf::new(self.buf_bytes));
        }
        let submitted = match bio_with_data(&desc, tag, true, &self.cdev, q_id, tag_id) {
            Ok((bio, _)) => self.client.submit(bio, u64::from(tag_id)).map_err(|rejected| {
                let rejected = *rejected;
                tag.buf = rejected.bio.segs.into_buf().ok();
                -rejected.error.errno()
            }),
            Err(errno) => Err(-errno),
        };
        if let Err(result) = submitted {
            tag.state = TagState::Fetching;
            self.stats.errors += 1;
            self.push_commit(tag_id, result, 0)?;
        }
        Ok(())
    }
}

/// The bio over the request's own pages for a read or write (zero copy),
/// and what a success returns; None for any other op, or a length no bio
/// takes (then `bio_with_data` answers it).
pub(super) fn zero_copy_bio(desc: &IoDesc, kbuf: KernelBuf) -> Option<Result<(Bio, i32), i32>> {
    let offset = desc.start_sector.checked_mul(512)?;
    let bytes = u64::from(desc.nr_sectors) << SECTOR_SHIFT;
    let result = i32::try_from(bytes).ok().filter(|&b| b > 0)?;
    let fua = desc.flags() & uapi::UBLK_IO_F_FUA != 0;
    let bio = match desc.op() {
        uapi::UBLK_IO_OP_READ => Bio::read_kernel(offset, kbuf, bytes as usize),
        uapi::UBLK_IO_OP_WRITE if fua => Bio::write_kernel(offset, kbuf, bytes as usize).with_flags(ReqFlags::FUA),
        uapi::UBLK_IO_OP_WRITE => Bio::write_kernel(offset, kbuf, bytes as usize),
        _ => return None,
    };
    Some(Ok((bio, result)))
}

/// `bio_for`, with a write's (or zone append's) data read in first under
/// user copy; a failed copy gives the buffer back to the tag.
pub(super) fn bio_with_data(
    desc: &IoDesc,
    tag: &mut Tag,
    user_copy: bool,
    cdev: &File,
    q_id: u16,
    tag_id: u16,
) -> Result<(Bio, i32), i32> {
    bio_for(desc, tag).and_then(|(mut bio, result_bytes)| {
        if user_copy && matches!(bio.op, Op::Write | Op::ZoneAppend) {
            if let Err(errno) = copy_in(cdev, q_id, tag_id, &mut bio) {
                tag.buf = bio.segs.take().into_buf().ok();
                return Err(errno);
            }
        }
        Ok((bio, result_bytes))
    })
}

/// User copy in: a write's (or zone append's) data from the kernel's
/// request into the bio's buffer. Err(errno) on a short or failed copy.
fn copy_in(cdev: &File, q_id: u16, tag: u16, bio: &mut Bio) -> Result<(), i32> {
    let buf = bio.segs.as_mut_slice().first_mut().ok_or(libc::EIO)?;
    cdev.read_exact_at(buf, uapi::user_copy_offset(q_id, tag)).map_err(|e| {
        log::debug!("queue {q_id}: tag {tag}: reading the request's data: {e}");
        e.raw_os_error().unwrap_or(libc::EIO)
    })
}

/// User copy out: `data` into the kernel's request (a read's data, a zone
/// report). Err(errno) on a short or failed copy.
pub(super) fn copy_out(cdev: &File, q_id: u16, tag: u16, data: &[u8]) -> Result<(), i32> {
    cdev.write_all_at(data, uapi::user_copy_offset(q_id, tag)).map_err(|e| {
        log::debug!("queue {q_id}: tag {tag}: writing the request's data: {e}");
        e.raw_os_error().unwrap_or(libc::EIO)
    })
}
