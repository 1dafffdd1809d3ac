//! The exported `blkioq_*` functions: each checks the queue pointer and
//! runs its `Queue` method inside the entry guard (lib.rs `entry`).

use std::ffi::{c_int, c_void};

use mqblk::zoned::ZoneMgmt;

use super::{blkio_completion, blkio_zone, Queue};
use crate::{entry, entry_ret, entry_void, fail, failed, Failure};

/// Borrows the queue behind a C pointer.
///
/// # Safety
/// `q` is null or a queue `blkio_get_queue` / `blkio_get_poll_queue`
/// returned, not removed, used by no other thread during the call.
unsafe fn queue<'a>(q: *mut Queue) -> Result<&'a mut Queue, Failure> {
    // SAFETY: by the caller's contract.
    match unsafe { q.as_mut() } {
        Some(q) => Ok(q),
        None => fail(libc::EINVAL, "struct blkioq pointer is NULL"),
    }
}

/// Runs a request function: a NULL queue leaves only the error message.
///
/// # Safety
/// `q` as in [`queue`].
unsafe fn request(q: *mut Queue, f: impl FnOnce(&mut Queue)) {
    entry_void(|| {
        // SAFETY: by the caller's contract.
        f(unsafe { queue(q) }?);
        Ok(())
    })
}

/// # Safety
/// `q` as in [`queue`]; `buf` valid for `len` bytes until the completion.
#[no_mangle]
pub unsafe extern "C" fn blkioq_read(
    q: *mut Queue,
    start: u64,
    buf: *mut c_void,
    len: usize,
    user_data: *mut c_void,
    flags: u32,
) {
    // SAFETY: by the caller's contract.
    unsafe { request(q, |q| q.read(start, buf.cast(), len, user_data, flags)) }
}

/// # Safety
/// `q` as in [`queue`]; `buf` valid for `len` bytes until the completion.
#[no_mangle]
pub unsafe extern "C" fn blkioq_write(
    q: *mut Queue,
    start: u64,
    buf: *const c_void,
    len: usize,
    user_data: *mut c_void,
    flags: u32,
) {
    // SAFETY: by the caller's contract.
    unsafe { request(q, |q| q.write(start, buf.cast(), len, user_data, flags)) }
}

/// # Safety
/// `q` as in [`queue`]; `iovec` and its buffers valid until the completion.
#[no_mangle]
pub unsafe extern "C" fn blkioq_readv(
    q: *mut Queue,
    start: u64,
    iovec: *const libc::iovec,
    iovcnt: c_int,
    user_data: *mut c_void,
    flags: u32,
) {
    // SAFETY: by the caller's contract.
    unsafe { request(q, |q| q.readv(start, iovec, iovcnt, user_data, flags)) }
}

/// # Safety
/// `q` as in [`queue`]; `iovec` and its buffers valid until the completion.
#[no_mangle]
pub unsafe extern "C" fn blkioq_writev(
    q: *mut Queue,
    start: u64,
    iovec: *mut libc::iovec,
    iovcnt: c_int,
    user_data: *mut c_void,
    flags: u32,
) {
    // SAFETY: by the caller's contract.
    unsafe { request(q, |q| q.writev(start, iovec, iovcnt, user_data, flags)) }
}

/// # Safety
/// `q` as in [`queue`].
#[no_mangle]
pub unsafe extern "C" fn blkioq_write_zeroes(q: *mut Queue, start: u64, len: u64, user_data: *mut c_void, flags: u32) {
    // SAFETY: by the caller's contract.
    unsafe { request(q, |q| q.write_zeroes(start, len, user_data, flags)) }
}

/// # Safety
/// `q` as in [`queue`].
#[no_mangle]
pub unsafe extern "C" fn blkioq_discard(q: *mut Queue, start: u64, len: u64, user_data: *mut c_void, flags: u32) {
    // SAFETY: by the caller's contract.
    unsafe { request(q, |q| q.discard(start, len, user_data, flags)) }
}

/// # Safety
/// `q` as in [`queue`].
#[no_mangle]
pub unsafe extern "C" fn blkioq_flush(q: *mut Queue, user_data: *mut c_void, flags: u32) {
    // SAFETY: by the caller's contract.
    unsafe { request(q, |q| q.flush(user_data, flags)) }
}

/// # Safety
/// `q` as in [`queue`]; `zones` holds `nr_zones` writable zones.
#[no_mangle]
pub unsafe extern "C" fn blkioq_report_zones(
    q: *mut Queue,
    offset: u64,
    zones: *mut blkio_zone,
    nr_zones: u32,
    user_data: *mut c_void,
    flags: u32,
) {
    // SAFETY: by the caller's contract.
    unsafe { request(q, |q| q.report_zones(offset, zones, nr_zones, user_data, flags)) }
}

macro_rules! zone_op {
    ($fn:ident, $mgmt:expr) => {
        /// # Safety
        /// `q` as in `queue`.
        #[no_mangle]
        pub unsafe extern "C" fn $fn(q: *mut Queue, offset: u64, user_data: *mut c_void, flags: u32) {
            // SAFETY: by the caller's contract.
            unsafe { request(q, |q| q.zone_mgmt($mgmt, offset, user_data, flags)) }
        }
    };
}

macro_rules! zone_op_all {
    ($fn:ident, $mgmt:expr) => {
        /// # Safety
        /// `q` as in `queue`.
        #[no_mangle]
        pub unsafe extern "C" fn $fn(q: *mut Queue, user_data: *mut c_void, flags: u32) {
            // SAFETY: by the caller's contract.
            unsafe { request(q, |q| q.zone_mgmt_all($mgmt, user_data, flags)) }
        }
    };
}

zone_op!(blkioq_close_zone, ZoneMgmt::Close);
zone_op!(blkioq_finish_zone, ZoneMgmt::Finish);
zone_op!(blkioq_open_zone, ZoneMgmt::Open);
zone_op!(blkioq_reset_zone, ZoneMgmt::Reset);
zone_op_all!(blkioq_close_all_zones, ZoneMgmt::Close);
zone_op_all!(blkioq_finish_all_zones, ZoneMgmt::Finish);
zone_op_all!(blkioq_open_all_zones, ZoneMgmt::Open);
zone_op_all!(blkioq_reset_all_zones, ZoneMgmt::Reset);

/// # Safety
/// `q` as in [`queue`]; `completions` holds `max_completions` writable
/// entries; `timeout` null or a read-write timespec.
#[no_mangle]
pub unsafe extern "C" fn blkioq_do_io(
    q: *mut Queue,
    completions: *mut blkio_completion,
    min_completions: c_int,
    max_completions: c_int,
    timeout: *mut libc::timespec,
) -> c_int {
    // SAFETY: by the caller's contract.
    entry_ret(|| match unsafe { queue(q) } {
        Ok(q) => q.do_io(completions, min_completions, max_completions, timeout, None),
        Err(e) => failed(e),
    })
}

/// As `blkioq_do_io`, returning -EINTR when a signal that `sig` unblocks
/// arrives (it is delivered under `sig`). Not on poll queues (-ENOTSUP).
///
/// # Safety
/// As [`blkioq_do_io`]; `sig` null or a readable sigset.
#[no_mangle]
pub unsafe extern "C" fn blkioq_do_io_interruptible(
    q: *mut Queue,
    completions: *mut blkio_completion,
    min_completions: c_int,
    max_completions: c_int,
    timeout: *mut libc::timespec,
    sig: *const libc::sigset_t,
) -> c_int {
    entry(|| {
        // SAFETY: by the caller's contract.
        let q = unsafe { queue(q) }?;
        if q.poll {
            return fail(libc::ENOTSUP, "blkioq_do_io_interruptible: not supported on poll queues");
        }
        let mut current: libc::sigset_t;
        // SAFETY: null or readable by the caller's contract.
        let sig = match unsafe { sig.as_ref() } {
            Some(s) => s,
            None => {
                // SAFETY: reads this thread's mask into a local set.
                current = unsafe { std::mem::zeroed() };
                // SAFETY: as above.
                unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut current) };
                &current
            }
        };
        Ok(q.do_io(completions, min_completions, max_completions, timeout, Some(sig)))
    })
}

/// The queue's completion eventfd (non-blocking; owned by the library);
/// -1 on a poll queue.
///
/// # Safety
/// `q` as in [`queue`].
#[no_mangle]
pub unsafe extern "C" fn blkioq_get_completion_fd(q: *mut Queue) -> c_int {
    entry(|| {
        // SAFETY: by the caller's contract.
        let q = unsafe { queue(q) }?;
        if q.poll {
            return Ok(-1);
        }
        if q.completion_fd < 0 {
            q.completion_fd =
                q.client.standalone_completion_fd().or_else(|e| fail(e.errno(), format!("completion fd: {e}")))?;
        }
        Ok(q.completion_fd)
    })
}

/// Completion events on or off (mqblk may still signal when off, which
/// libblkio allows: spurious events).
///
/// # Safety
/// `q` as in [`queue`].
#[no_mangle]
pub unsafe extern "C" fn blkioq_set_completion_fd_enabled(q: *mut Queue, enable: bool) {
    // SAFETY: by the caller's contract.
    unsafe {
        request(q, |q| {
            if !q.poll {
                q.completion_fd_enabled = enable;
            }
        })
    }
}
