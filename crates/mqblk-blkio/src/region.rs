//! Memory regions (`blkio_alloc_mem_region`, `blkio_map_mem_region` and
//! their inverses): regions the library allocates (a memfd, mapped shared
//! and populated) and regions the program maps, tracked per instance with
//! their bounds (`MAX_MEM_REGIONS`, no overlap, `mem-region-alignment`).
//!
//! Relies on: lib.rs (the instance, its state and the entry-point
//! plumbing); props.rs for the alignment; libc (memfd_create, mmap).

use std::ffi::{c_int, c_void};

use crate::{entry, entry_void, errno, fail, instance, props, Blkio, Failure, State, MAX_MEM_REGIONS};

/// A memory region the instance knows of (allocated and/or mapped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemRegion {
    addr: usize,
    len: usize,
    fd: c_int,
    allocated: bool,
    mapped: bool,
}

/// `struct blkio_mem_region`, as blkio.h lays it out.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct blkio_mem_region {
    pub addr: *mut c_void,
    pub len: usize,
    pub iova: u64,
    pub fd_offset: i64,
    pub fd: c_int,
    pub flags: u32,
}

const _: () = assert!(std::mem::size_of::<blkio_mem_region>() == 40);
const _: () = assert!(std::mem::offset_of!(blkio_mem_region, fd) == 32);

impl Blkio {
    fn region_alignment(&self) -> Result<usize, Failure> {
        Ok(props::mem_region_alignment(self.device()?) as usize)
    }

    fn check_region(&self, r: &blkio_mem_region, what: &str) -> Result<(), Failure> {
        let align = self.region_alignment()?;
        if r.addr.is_null() || r.len == 0 {
            return fail(libc::EINVAL, format!("{what}: region address is NULL or its length 0"));
        }
        if r.addr as usize % align != 0 || r.len % align != 0 {
            return fail(
                libc::EINVAL,
                format!("{what}: addr and len must be multiples of mem-region-alignment={align}"),
            );
        }
        if r.iova != 0 || r.flags != 0 {
            return fail(libc::EINVAL, format!("{what}: iova and flags are reserved and must be 0"));
        }
        Ok(())
    }

    fn alloc_mem_region(&mut self, len: usize) -> Result<blkio_mem_region, Failure> {
        // Once connected (libblkio's own tests allocate before starting).
        if self.state == State::Created {
            return fail(libc::EINVAL, "blkio_alloc_mem_region: connect first (blkio_connect)");
        }
        let align = self.region_alignment()?;
        if len == 0 || len % align != 0 {
            return fail(
                libc::EINVAL,
                format!(
                    "blkio_alloc_mem_region: len={len} must be a positive multiple of mem-region-alignment={align}"
                ),
            );
        }
        // SAFETY: a NUL-terminated name and valid flags; the fd is ours.
        let fd = unsafe { libc::memfd_create(c"mqblk-blkio".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return fail(errno(), "blkio_alloc_mem_region: memfd_create failed");
        }
        // SAFETY: fd is a valid memfd we just created.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            let e = errno();
            // SAFETY: closing the fd we own.
            unsafe { libc::close(fd) };
            return fail(e, format!("blkio_alloc_mem_region: cannot size a memfd to {len} bytes"));
        }
        // MAP_POPULATE: the region is for I/O buffers, and a page left to
        // fault in on its first I/O may fault in an io_uring worker; a
        // worker that sleeps with work pending makes io_uring start
        // another, which then competes with the submitter for a CPU
        // (docs/results/blkio-iowq-threads.txt).
        // SAFETY: a fresh shared mapping of the whole memfd; no existing
        // memory is affected (addr is NULL: the kernel picks it).
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            let e = errno();
            // SAFETY: closing the fd we own.
            unsafe { libc::close(fd) };
            return fail(e, format!("blkio_alloc_mem_region: mmap of {len} bytes failed"));
        }
        self.regions.push(MemRegion { addr: addr as usize, len, fd, allocated: true, mapped: false });
        Ok(blkio_mem_region { addr, len, iova: 0, fd_offset: 0, fd, flags: 0 })
    }

    fn find_region(&self, r: &blkio_mem_region) -> Option<usize> {
        self.regions.iter().position(|m| m.addr == r.addr as usize && m.len == r.len)
    }

    fn free_mem_region(&mut self, r: &blkio_mem_region) -> Result<(), Failure> {
        let Some(i) = self.find_region(r).filter(|&i| self.regions[i].allocated) else {
            return fail(libc::EINVAL, "blkio_free_mem_region: not a region blkio_alloc_mem_region returned");
        };
        if self.regions[i].mapped {
            return fail(libc::EBUSY, "blkio_free_mem_region: the region is still mapped (unmap it first)");
        }
        free_region(self.regions.swap_remove(i));
        Ok(())
    }

    fn map_mem_region(&mut self, r: &blkio_mem_region) -> Result<(), Failure> {
        self.require_started("blkio_map_mem_region")?;
        if r.len == 0 || r.addr.is_null() {
            // A region that is empty, or starts at address 0 (where Linux
            // never maps user memory: mmap_min_addr), can hold no buffer,
            // so there is nothing to map. fio maps one for jobs that move
            // no data (trim only: no buffers, so its address is NULL and
            // its length max-bs times iodepth), and libblkio accepts it.
            return Ok(());
        }
        self.check_region(r, "blkio_map_mem_region")?;
        let (start, end) = (r.addr as usize, r.addr as usize + r.len);
        if let Some(i) = self.find_region(r) {
            if self.regions[i].mapped {
                return fail(libc::EEXIST, "blkio_map_mem_region: the region is already mapped");
            }
            self.regions[i].mapped = true;
            return Ok(());
        }
        let mapped = self.regions.iter().filter(|m| m.mapped).count() as u64;
        if mapped >= MAX_MEM_REGIONS {
            return fail(
                libc::ENOSPC,
                format!("blkio_map_mem_region: max-mem-regions={MAX_MEM_REGIONS} already mapped"),
            );
        }
        if self.regions.iter().any(|m| m.mapped && start < m.addr + m.len && m.addr < end) {
            return fail(libc::EINVAL, "blkio_map_mem_region: the region overlaps a mapped one");
        }
        self.regions.push(MemRegion { addr: start, len: r.len, fd: -1, allocated: false, mapped: true });
        Ok(())
    }

    fn unmap_mem_region(&mut self, r: &blkio_mem_region) {
        if let Some(i) = self.find_region(r) {
            self.regions[i].mapped = false;
            if !self.regions[i].allocated {
                self.regions.swap_remove(i);
            }
        }
    }
}

pub(crate) fn free_region(m: MemRegion) {
    if m.allocated {
        // SAFETY: the mapping and fd blkio_alloc_mem_region made, freed once
        // (the region left the list).
        unsafe {
            libc::munmap(m.addr as *mut c_void, m.len);
            libc::close(m.fd);
        }
    }
}

/// Reads a region argument.
///
/// # Safety
/// `r` is null or points to a readable `blkio_mem_region`.
unsafe fn region_arg<'a>(r: *const blkio_mem_region, what: &str) -> Result<&'a blkio_mem_region, Failure> {
    // SAFETY: by the caller's contract.
    match unsafe { r.as_ref() } {
        Some(r) => Ok(r),
        None => fail(libc::EINVAL, format!("{what}: region is NULL")),
    }
}

/// # Safety
/// `b` as in [`instance`]; `region` null or writable.
#[no_mangle]
pub unsafe extern "C" fn blkio_alloc_mem_region(b: *mut Blkio, region: *mut blkio_mem_region, len: usize) -> c_int {
    entry(|| {
        if region.is_null() {
            return fail(libc::EINVAL, "blkio_alloc_mem_region: region is NULL");
        }
        // SAFETY: by the caller's contract.
        let r = unsafe { instance(b) }?.alloc_mem_region(len)?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { region.write(r) };
        Ok(0)
    })
}

/// # Safety
/// `b` as in [`instance`]; `region` null or readable.
#[no_mangle]
pub unsafe extern "C" fn blkio_free_mem_region(b: *mut Blkio, region: *const blkio_mem_region) {
    entry_void(|| {
        // SAFETY: by the caller's contract.
        let (b, r) = unsafe { (instance(b)?, region_arg(region, "blkio_free_mem_region")?) };
        b.free_mem_region(r)
    })
}

/// # Safety
/// `b` as in [`instance`]; `region` null or readable.
#[no_mangle]
pub unsafe extern "C" fn blkio_map_mem_region(b: *mut Blkio, region: *const blkio_mem_region) -> c_int {
    entry(|| {
        // SAFETY: by the caller's contract.
        let (b, r) = unsafe { (instance(b)?, region_arg(region, "blkio_map_mem_region")?) };
        b.map_mem_region(r).map(|()| 0)
    })
}

/// # Safety
/// `b` as in [`instance`]; `region` null or readable.
#[no_mangle]
pub unsafe extern "C" fn blkio_unmap_mem_region(b: *mut Blkio, region: *const blkio_mem_region) {
    entry_void(|| {
        // SAFETY: by the caller's contract.
        let (b, r) = unsafe { (instance(b)?, region_arg(region, "blkio_unmap_mem_region")?) };
        b.unmap_mem_region(r);
        Ok(())
    })
}
