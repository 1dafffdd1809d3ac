//! NBD_CMD_BLOCK_STATUS: the base:allocation context's extents, from the
//! device's block status (holes and data) or, where the device cannot
//! tell, one data extent.
//!
//! Relies on: transmission.rs (the connection's state, its reply buffer);
//! proto.rs (chunk headers, the context id, the extent states); the
//! device's block status map.

use super::Transmission;
use crate::proto::*;
use crate::Error;

impl Transmission<'_> {
    /// NBD_CMD_BLOCK_STATUS for base:allocation: the device's holes
    /// (HOLE|ZERO) and data, or one data extent when the device cannot
    /// tell (always true: "allocated" is the safe answer).
    pub(super) fn block_status(&mut self, r: &Request) -> Result<(), Error> {
        if !self.neg.base_allocation {
            self.reply_header(r.cookie, r.offset, EINVAL, None);
            return self.flush_out();
        }
        let len = u64::from(r.length).min(self.export.size() - r.offset).max(1);
        let mut extents = std::mem::take(&mut self.extents);
        let known = self.export.device.block_status().is_some_and(|m| m.extents_into(r.offset, len, &mut extents));
        if !known {
            // The device cannot tell: all of it is data (the safe answer).
            extents.clear();
            extents.push((len, false));
        }
        if r.flags & CMD_FLAG_REQ_ONE != 0 {
            extents.truncate(1);
        }
        chunk_header(&mut self.out, REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, r.cookie, 4 + 8 * extents.len() as u32);
        self.out.extend_from_slice(&BASE_ALLOCATION_ID.to_be_bytes());
        for &(bytes, hole) in &extents {
            self.out.extend_from_slice(&(bytes.min(u64::from(u32::MAX)) as u32).to_be_bytes());
            self.out.extend_from_slice(&(if hole { STATE_HOLE | STATE_ZERO } else { 0 }).to_be_bytes());
        }
        self.extents = extents;
        self.flush_out()
    }
}
