//! `struct blkioq`: one mqblk client and the requests queued on it. The
//! zone requests are in zone.rs, readv/writev in vectored.rs (their pass
//! over the iovecs in iovec_pass.rs), what is
//! remembered of a request in flight in inflight.rs, `blkioq_do_io` in
//! reap.rs, the exported functions in ffi.rs.
//!
//! Buffers: a plain buffer goes to mqblk as `Buf::borrowed` over the
//! caller's memory: no copy, no allocation. An iovec array becomes one
//! vectored bio of borrowed segments (vectored.rs), in a segment vector
//! from the queue's pool (segvecs.rs).
//!
//! Requests that fail before reaching mqblk (bad arguments, read-only
//! instance) and requests served at once (zone reports, the zone "all"
//! ops mqblk lacks) complete through `ready`, a list `do_io` drains before
//! reaping the client.
//!
//! Relies on: mqblk's Client (submit, do_io, completion_fd), Bio, Buf.

use std::collections::VecDeque;
use std::ffi::{c_int, c_void, CString};
use std::time::Duration;

use mqblk::{Bio, Buf, Client, Device, ReqFlags};

mod ffi;
mod inflight;
mod iovec_pass;
mod reap;
mod segvecs;
mod vectored;
mod zone;

use inflight::{Inflight, SLOT_BIT};
use reap::Ready;

const BLKIO_REQ_FUA: u32 = 1 << 0;
const BLKIO_REQ_NO_UNMAP: u32 = 1 << 1;
const BLKIO_REQ_NO_FALLBACK: u32 = 1 << 2;

/// Completions (per queue) a client may have in flight, at least.
const MIN_QUEUE_DEPTH: usize = 256;
/// Sleep slice of `blkioq_do_io_interruptible` between checks for signals.
const SIGNAL_CHECK_SLICE: Duration = Duration::from_millis(1);

/// `struct blkio_completion`, as blkio.h lays it out.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct blkio_completion {
    pub user_data: *mut c_void,
    pub error_msg: *const libc::c_char,
    pub ret: c_int,
    pub reserved_: [u8; 12],
}

/// `struct blkio_zone`, as blkio.h lays it out.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct blkio_zone {
    pub start: u64,
    pub len: u64,
    pub capacity: u64,
    pub write_pointer: u64,
    pub zone_type: u8,
    pub zone_state: u8,
    pub reset: u8,
    pub reserved_: [u8; 29],
}

// The layouts of blkio.h (libblkio 1.5's ABI on LP64).
const _: () = assert!(std::mem::size_of::<blkio_completion>() == 32);
const _: () = assert!(std::mem::offset_of!(blkio_completion, ret) == 16);
const _: () = assert!(std::mem::size_of::<blkio_zone>() == 64);
const _: () = assert!(std::mem::offset_of!(blkio_zone, zone_type) == 32);

/// `struct blkioq`.
pub struct Queue {
    client: Client,
    device: Device,
    poll: bool,
    read_only: bool,
    inflight: Inflight,
    ready: VecDeque<Ready>,
    /// `do_io` scratch: reaped from the client, then staged for the caller.
    reaped: Vec<mqblk::Completion>,
    staged: Vec<Ready>,
    /// buf-alignment (the logical block size, a power of two) minus one.
    buf_align_mask: usize,
    completion_fd: c_int,
    completion_fd_enabled: bool,
}

// SAFETY: the raw pointers are the caller's cookies and iovec arrays, only
// handed back to it; like libblkio, a queue is used by one thread at a time.
unsafe impl Send for Queue {}

impl Queue {
    pub(crate) fn new(device: &Device, poll: bool, read_only: bool) -> Self {
        let depth = (device.tag_set().queue_depth as usize).max(MIN_QUEUE_DEPTH);
        let client = device.client_with_capacity(depth);
        let capacity = client.capacity();
        Self {
            client,
            device: device.clone(),
            poll,
            read_only,
            inflight: Inflight::new(capacity),
            ready: VecDeque::with_capacity(capacity),
            reaped: Vec::with_capacity(capacity),
            staged: Vec::with_capacity(capacity),
            buf_align_mask: device.limits().logical_block_size as usize - 1,
            completion_fd: -1,
            completion_fd_enabled: false,
        }
    }

    /// Completes a request at once with `-errno` and `msg`.
    fn complete_now(&mut self, user_data: *mut c_void, ret: c_int, msg: Option<String>) {
        let msg = msg.map(|m| CString::new(m.replace('\0', " ")).unwrap_or_default());
        self.ready.push_back(Ready { user_data, ret, msg });
        if self.completion_fd >= 0 && self.completion_fd_enabled {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes from a live u64 to our eventfd; a full
            // counter (EAGAIN) still leaves it readable, which is all we need.
            unsafe { libc::write(self.completion_fd, (&one as *const u64).cast(), 8) };
        }
    }

    fn refuse(&mut self, user_data: *mut c_void, errno: c_int, msg: String) {
        self.complete_now(user_data, -errno, Some(msg));
    }

    #[inline]
    fn check_flags(&mut self, user_data: *mut c_void, flags: u32, allowed: u32, what: &str) -> bool {
        if flags & !allowed != 0 {
            self.refuse_flags(user_data, flags, allowed, what);
            return false;
        }
        true
    }

    // Out of line, so that the checks that pass cost only their compare.
    #[cold]
    #[inline(never)]
    fn refuse_flags(&mut self, user_data: *mut c_void, flags: u32, allowed: u32, what: &str) {
        let msg = format!("{what}: flags {flags:#x} not accepted (allowed: {allowed:#x})");
        self.refuse(user_data, libc::EINVAL, msg);
    }

    fn check_writable(&mut self, user_data: *mut c_void, what: &str) -> bool {
        if self.read_only {
            self.refuse(user_data, libc::EBADF, format!("{what}: the instance is read-only"));
            return false;
        }
        true
    }

    /// Hands a bio to mqblk; a refusal completes the request with its
    /// errno, and its segment vector, if any, goes back to the pool. Its
    /// buffers borrow memory (inflight.rs); a bounce buffer's owner goes
    /// in a slot (`submit_bounced`).
    #[inline(always)]
    fn submit(&mut self, mut bio: Bio, user_data: *mut c_void) {
        if self.poll {
            bio = bio.with_flags(ReqFlags::HIPRI);
        }
        let cookie = user_data as u64;
        if cookie & SLOT_BIT == 0 {
            // The common case: nothing to remember but the cookie, which
            // travels as mqblk's user_data (the client bounds what is in
            // flight).
            if let Err(rejected) = self.client.submit(bio, cookie) {
                self.rejected(*rejected, user_data, None);
            }
            return;
        }
        let Some(slot) = self.inflight.take_slot(user_data, None) else {
            let max = self.inflight.capacity();
            self.inflight.end_segments(bio.segs);
            return self.refuse(user_data, libc::EAGAIN, too_many_in_flight(max));
        };
        if let Err(rejected) = self.client.submit(bio, slot) {
            self.rejected(*rejected, user_data, Some(slot));
        }
    }

    /// A write of a bounce buffer (the write-zeroes fallback): the bio
    /// borrows it, and its slot keeps it until the completion gives it
    /// back to the pool. Apart from `submit`, whose inlined fast path it
    /// would only lengthen.
    #[inline(never)]
    fn submit_bounced(&mut self, offset: u64, mut bounce: Buf, flags: ReqFlags, user_data: *mut c_void) {
        // SAFETY: the slot keeps `bounce` (its bytes do not move with it)
        // until the completion is settled, or the refusal gives it back;
        // nothing else touches it meanwhile, and a write only reads it.
        let view = unsafe { Buf::borrowed(bounce.as_mut_ptr(), bounce.len()) };
        let mut bio = Bio::write(offset, view).with_flags(flags);
        if self.poll {
            bio = bio.with_flags(ReqFlags::HIPRI);
        }
        let Some(slot) = self.inflight.take_slot(user_data, Some(bounce)) else {
            let max = self.inflight.capacity();
            self.inflight.end_segments(bio.segs);
            return self.refuse(user_data, libc::EAGAIN, too_many_in_flight(max));
        };
        if let Err(rejected) = self.client.submit(bio, slot) {
            self.rejected(*rejected, user_data, Some(slot));
        }
    }

    /// A bio mqblk refused: its slot and segments go back, and the request
    /// completes with the refusal's errno and message.
    #[cold]
    #[inline(never)]
    fn rejected(&mut self, rejected: mqblk::Rejected, user_data: *mut c_void, slot: Option<u64>) {
        self.inflight.end_segments(rejected.bio.segs);
        if let Some(slot) = slot {
            self.inflight.put_refused_slot(slot);
        }
        let msg = match rejected.error {
            mqblk::SubmitError::TooManyInFlight { max } => too_many_in_flight(max),
            ref e => e.to_string(),
        };
        self.refuse(user_data, rejected.error.errno(), msg);
    }

    /// Is a caller buffer one mqblk takes as it is: non-null, not empty,
    /// no longer than the largest bio, address and length multiples of
    /// buf-alignment? (Knowing this, `Buf::borrowed`'s own checks fold away.)
    #[inline(always)]
    fn buf_ok(&self, addr: usize, len: usize) -> bool {
        addr != 0 && len != 0 && len as u64 <= mqblk::MAX_BIO_BYTES && (addr | len) & self.buf_align_mask == 0
    }

    /// Why a buffer `buf_ok` refused is refused.
    #[cold]
    #[inline(never)]
    fn bad_buf(&self, addr: usize, len: usize, what: &str) -> String {
        if addr == 0 {
            return format!("{what}: buffer is NULL");
        }
        if len == 0 {
            return format!("{what}: length 0 (nothing to transfer)");
        }
        if len as u64 > mqblk::MAX_BIO_BYTES {
            return format!("{what}: length {len} exceeds the largest request ({} bytes)", mqblk::MAX_BIO_BYTES);
        }
        format!(
            "{what}: buffer address {addr:#x} and length {len} must be multiples of buf-alignment={}",
            self.buf_align_mask + 1
        )
    }

    #[inline(always)]
    fn read(&mut self, start: u64, buf: *mut u8, len: usize, user_data: *mut c_void, flags: u32) {
        if !self.check_flags(user_data, flags, 0, "blkioq_read") {
            return;
        }
        if !self.buf_ok(buf as usize, len) {
            return self.refuse(user_data, libc::EINVAL, self.bad_buf(buf as usize, len, "blkioq_read"));
        }
        // SAFETY: the caller keeps `buf` valid and untouched until the
        // request's completion is returned (libblkio's contract), and
        // `Client` drop (blkio_remove_queue, blkio_destroy) waits for it.
        let buf = unsafe { Buf::borrowed(buf, len) };
        self.submit(Bio::read(start, buf), user_data);
    }

    fn write(&mut self, start: u64, buf: *const u8, len: usize, user_data: *mut c_void, flags: u32) {
        if !self.check_flags(user_data, flags, BLKIO_REQ_FUA, "blkioq_write")
            || !self.check_writable(user_data, "blkioq_write")
        {
            return;
        }
        if !self.buf_ok(buf as usize, len) {
            return self.refuse(user_data, libc::EINVAL, self.bad_buf(buf as usize, len, "blkioq_write"));
        }
        // SAFETY: as in `read`; a write only reads the memory (the cast to
        // *mut is never written through for Op::Write).
        let buf = unsafe { Buf::borrowed(buf.cast_mut(), len) };
        self.submit(Bio::write(start, buf).with_flags(fua(flags)), user_data);
    }

    fn write_zeroes(&mut self, start: u64, len: u64, user_data: *mut c_void, flags: u32) {
        let allowed = BLKIO_REQ_FUA | BLKIO_REQ_NO_UNMAP | BLKIO_REQ_NO_FALLBACK;
        if !self.check_flags(user_data, flags, allowed, "blkioq_write_zeroes")
            || !self.check_writable(user_data, "blkioq_write_zeroes")
        {
            return;
        }
        // NO_UNMAP is the block layer's REQ_NOUNMAP: null keeps the range's
        // pages. The file driver keeps a file's blocks with ZERO_RANGE
        // where the file system has it and by writing zeros where it has
        // not (tmpfs), which NO_FALLBACK forbids and this layer cannot
        // tell apart: on files NO_UNMAP takes the fallback below (and
        // NO_FALLBACK is refused).
        let nounmap = flags & BLKIO_REQ_NO_UNMAP != 0;
        let native =
            self.device.limits().max_write_zeroes_sectors > 0 && !(nounmap && self.device.driver_name() == "file");
        if native {
            let nounmap = if nounmap { ReqFlags::NOUNMAP } else { ReqFlags::NONE };
            return self.submit(Bio::write_zeroes(start, len).with_flags(fua(flags) | nounmap), user_data);
        }
        if flags & BLKIO_REQ_NO_FALLBACK != 0 {
            let msg = "blkioq_write_zeroes: no write zeroes without a fallback to writes here (NO_FALLBACK given)";
            return self.refuse(user_data, libc::ENOTSUP, msg.into());
        }
        // The fallback: a write of a zeroed bounce buffer.
        let Some(len) = (len <= mqblk::MAX_BIO_BYTES).then_some(len as usize) else {
            let msg =
                format!("blkioq_write_zeroes: {len} bytes exceed the largest request ({} bytes)", mqblk::MAX_BIO_BYTES);
            return self.refuse(user_data, libc::EINVAL, msg);
        };
        let bounce = self.inflight.take_bounce(len);
        self.submit_bounced(start, bounce, fua(flags), user_data);
    }

    fn discard(&mut self, start: u64, len: u64, user_data: *mut c_void, flags: u32) {
        if self.check_flags(user_data, flags, 0, "blkioq_discard") && self.check_writable(user_data, "blkioq_discard") {
            self.submit(Bio::discard(start, len), user_data);
        }
    }

    fn flush(&mut self, user_data: *mut c_void, flags: u32) {
        if self.check_flags(user_data, flags, 0, "blkioq_flush") {
            self.submit(Bio::flush(), user_data);
        }
    }
}

fn too_many_in_flight(max: usize) -> String {
    format!("the queue already has {max} requests in flight: reap some with blkioq_do_io")
}

fn fua(flags: u32) -> ReqFlags {
    if flags & BLKIO_REQ_FUA != 0 {
        ReqFlags::FUA
    } else {
        ReqFlags::NONE
    }
}
