//! Read replies beyond a header and the bio's buffer: direct reads,
//! written to the socket from the device's own memory (sendmsg of its
//! lent pages, or spliced: splice.rs) without a bio, and sparse reads,
//! whose holes go out as OFFSET_HOLE chunks (sparse.rs) on structured
//! connections.
//!
//! Relies on: transmission.rs (the connection's state, `send_until` and
//! `copy_from`, the size thresholds); proto.rs (chunk headers); the
//! device's direct access and block status.

use super::{copy_from, send_until, Transmission, DIRECT_READ_PIN_WAIT, SPARSE_READ_BYTES};
use crate::proto::*;
use crate::Error;

impl Transmission<'_> {
    /// Answers a (checked) read by the device's direct access: the reply's
    /// header, then the data written straight from the device's memory.
    /// False, having sent nothing, where the device does not offer it or a
    /// sparse reply is due (a structured read with a hole worth a chunk:
    /// the bio path sends those). Requests read before it are submitted
    /// first, so a write the client sent earlier is at least on its way.
    pub(super) fn read_direct(&mut self, r: &Request) -> Result<bool, Error> {
        let (offset, len) = (r.offset, u64::from(r.length));
        if self.sparse_reads
            && r.flags & CMD_FLAG_DF == 0
            && len >= SPARSE_READ_BYTES
            && self.export.device.block_status().is_some_and(|m| m.extents_into(offset, len, &mut self.extents))
            && crate::sparse::read_runs(&self.extents, len, &mut self.runs)
        {
            return Ok(false);
        }
        self.submit_batch()?;
        self.reply_header(r.cookie, offset, 0, Some(len as usize));
        if self.splicer.as_ref().is_some_and(|sp| sp.fits(offset, len)) && self.read_spliced(offset, len)? {
            return Ok(true);
        }
        // The device's pages stay pinned while the callee runs (no page
        // of the store is reclaimed meanwhile, device-wide), so the callee
        // waits for room in the socket only so long: what the socket has
        // not taken by then is copied out, and written once the read has
        // returned.
        let fd = self.s.as_raw_fd();
        let until = std::time::Instant::now() + DIRECT_READ_PIN_WAIT;
        let (out, spill) = (&self.out, &mut self.spill);
        let mut header: &[u8] = out;
        let Some(direct) = self.export.device.direct_access() else {
            self.out.clear();
            return Ok(false);
        };
        let sent = direct.read(offset, len, &mut |slices| {
            let head = std::mem::take(&mut header);
            let at = if spill.is_empty() { send_until(fd, head, slices, 0, until)? } else { 0 };
            copy_from(head, slices, at, spill);
            Ok(())
        });
        let Some(result) = sent else {
            // Declined: nothing was written, the header not sent.
            self.out.clear();
            return Ok(false);
        };
        self.out.clear();
        result.map_err(Error::Socket)?;
        if !self.spill.is_empty() {
            self.s.write_all(&self.spill).map_err(Error::Socket)?;
            self.spill.clear();
        }
        Ok(true)
    }

    /// The data of a direct read by reference (splice.rs), after the
    /// header queued in `out`; false, with nothing sent, where the device
    /// declines (bad blocks appeared, or it stopped lending).
    fn read_spliced(&mut self, offset: u64, len: u64) -> Result<bool, Error> {
        let fd = self.s.as_raw_fd();
        let sp = self.splicer.as_mut().expect("checked by the caller");
        let sent = sp.send(&self.export.device, &mut *self.s, fd, &self.out, (offset, len));
        if sent.map_err(Error::Socket)? {
            self.out.clear();
            return Ok(true);
        }
        Ok(false)
    }

    /// The hole and data runs of a read at `offset` into `self.runs`;
    /// true if it has a hole worth a chunk of its own.
    pub(super) fn sparse_runs(&mut self, offset: u64, d: &[u8]) -> bool {
        let len = d.len() as u64;
        let Some(map) = self.export.device.block_status() else { return false };
        map.extents_into(offset, len, &mut self.extents) && crate::sparse::read_runs(&self.extents, len, &mut self.runs)
    }

    /// A structured read reply in chunks: OFFSET_HOLE for the holes of
    /// `self.runs` (they read as zeros), OFFSET_DATA for the rest, then a
    /// final NONE chunk.
    pub(super) fn reply_sparse(&mut self, cookie: u64, offset: u64, d: &[u8]) -> Result<(), Error> {
        let runs = std::mem::take(&mut self.runs);
        for &(at, bytes, hole) in &runs {
            let chunk_offset = (offset + at).to_be_bytes();
            if hole {
                chunk_header(&mut self.out, 0, REPLY_TYPE_OFFSET_HOLE, cookie, 12);
                self.out.extend_from_slice(&chunk_offset);
                self.out.extend_from_slice(&(bytes as u32).to_be_bytes());
            } else {
                chunk_header(&mut self.out, 0, REPLY_TYPE_OFFSET_DATA, cookie, 8 + bytes as u32);
                self.out.extend_from_slice(&chunk_offset);
                self.queue_data(&d[at as usize..(at + bytes) as usize])?;
            }
        }
        self.runs = runs;
        chunk_header(&mut self.out, REPLY_FLAG_DONE, REPLY_TYPE_NONE, cookie, 0);
        Ok(())
    }
}
