//! The kernel's descriptor area of one ublk queue (`struct
//! ublksrv_io_desc` per tag), mapped read-only from /dev/ublkcN: each
//! fetch's CQE means the tag's descriptor holds its next request.
//!
//! Relies on: uapi.rs (the area's offset and size, `IoDesc`); libc mmap.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

use crate::error::Error;
use crate::uapi::{self, IoDesc};

/// The kernel's descriptor area of one queue, mapped read-only.
pub(super) struct DescMap {
    ptr: NonNull<IoDesc>,
    bytes: usize,
    depth: u16,
}

impl DescMap {
    pub(super) fn map(cdev: &File, q_id: u16, depth: u16) -> Result<Self, Error> {
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let bytes = uapi::queue_desc_bytes(depth, page);
        let offset = uapi::queue_desc_offset(q_id, page);
        // SAFETY: a new shared read-only mapping of the device's descriptor
        // pages (the kernel refuses writable ones); nothing else lives at
        // the address the kernel picks, and the result is checked.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                cdev.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(Error::Mmap { q_id, source: io::Error::last_os_error() });
        }
        let ptr = NonNull::new(raw.cast::<IoDesc>()).ok_or(Error::Mmap { q_id, source: io::Error::other("null") })?;
        Ok(Self { ptr, bytes, depth })
    }

    /// A copy of tag `tag`'s descriptor. The kernel writes it before it
    /// completes the tag's fetch command and not again until the next
    /// fetch, so a copy taken after the CQE is stable.
    pub(super) fn get(&self, tag: u16) -> IoDesc {
        assert!(tag < self.depth, "tag {tag} beyond the queue depth {}", self.depth);
        // SAFETY: `tag < depth` and the mapping holds `depth` descriptors
        // (aligned: page-aligned base, 24-byte entries of 8-byte fields);
        // volatile because the kernel writes the memory.
        unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(usize::from(tag))) }
    }
}

impl Drop for DescMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`, once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes) };
    }
}

// SAFETY: the mapping is read only through `get` (copies); moving it to the
// queue thread moves the only handle.
unsafe impl Send for DescMap {}
