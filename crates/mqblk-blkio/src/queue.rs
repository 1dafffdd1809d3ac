//! `struct blkioq`: one mqblk client, the requests queued on it and
//! `blkioq_do_io`.
//!
//! Buffers: a plain buffer (and a readv/writev whose iovecs are one
//! contiguous range) goes to mqblk as `Buf::borrowed` over the caller's
//! memory: no copy, no allocation. Scattered iovecs go through a bounce
//! buffer from the queue's pool (gathered before a write, scattered after a
//! read); the pool grows to the largest such I/O once and is reused.
//!
//! Requests that fail before reaching mqblk (bad arguments, read-only
//! instance) and requests served at once (zone reports, the zone "all"
//! ops mqblk lacks) complete through `ready`, a list `do_io` drains before
//! reaping the client.
//!
//! Relies on: mqblk's Client (submit, do_io, completion_fd), Bio, Buf.

use std::collections::VecDeque;
use std::ffi::{c_int, c_void, CString};
use std::time::{Duration, Instant};

use mqblk::zoned::{ZoneCond, ZoneMgmt, ZoneType};
use mqblk::{Bio, Buf, Client, Device, ReqFlags, SECTOR_SIZE};

use crate::props::MAX_SEGMENTS;
use crate::{fail, Failure};

mod ffi;

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

/// A finished request waiting for `do_io`.
struct Ready {
    user_data: *mut c_void,
    ret: c_int,
    msg: Option<CString>,
}

/// What the queue remembers of a request in flight (indexed by the
/// mqblk `user_data`).
#[derive(Clone, Copy)]
struct Slot {
    user_data: *mut c_void,
    /// A bounced read: the iovecs to scatter the data into.
    scatter: Option<(*const libc::iovec, usize)>,
}

const EMPTY_SLOT: Slot = Slot { user_data: std::ptr::null_mut(), scatter: None };

/// An mqblk user_data with this bit set names a slot: a request with
/// scatter state, or one whose cookie has the bit itself. Clear, it is the
/// caller's cookie as given (user-space addresses on Linux never set it, so
/// pointer cookies take the short path).
const SLOT_BIT: u64 = 1 << 63;

/// `struct blkioq`.
pub struct Queue {
    client: Client,
    device: Device,
    poll: bool,
    read_only: bool,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    ready: VecDeque<Ready>,
    /// `do_io` scratch: reaped from the client, then staged for the caller.
    reaped: Vec<mqblk::Completion>,
    staged: Vec<Ready>,
    /// Messages of the completions the last `do_io` returned (they live
    /// until the next `do_io`).
    messages: Vec<CString>,
    bounce_pool: Vec<Buf>,
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
            slots: vec![EMPTY_SLOT; capacity],
            free_slots: (0..capacity as u32).rev().collect(),
            ready: VecDeque::with_capacity(capacity),
            reaped: Vec::with_capacity(capacity),
            staged: Vec::with_capacity(capacity),
            messages: Vec::new(),
            bounce_pool: Vec::new(),
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

    fn check_flags(&mut self, user_data: *mut c_void, flags: u32, allowed: u32, what: &str) -> bool {
        if flags & !allowed != 0 {
            self.refuse(
                user_data,
                libc::EINVAL,
                format!("{what}: flags {flags:#x} not accepted (allowed: {allowed:#x})"),
            );
            return false;
        }
        true
    }

    fn check_writable(&mut self, user_data: *mut c_void, what: &str) -> bool {
        if self.read_only {
            self.refuse(user_data, libc::EBADF, format!("{what}: the instance is read-only"));
            return false;
        }
        true
    }

    /// Hands a bio to mqblk; a refusal completes the request with its errno.
    fn submit(&mut self, mut bio: Bio, user_data: *mut c_void, scatter: Option<(*const libc::iovec, usize)>) {
        if self.poll {
            bio = bio.with_flags(ReqFlags::HIPRI);
        }
        let cookie = user_data as u64;
        if scatter.is_none() && cookie & SLOT_BIT == 0 {
            // The common case: nothing to remember but the cookie, which
            // travels as mqblk's user_data (the client bounds what is in
            // flight).
            if let Err(rejected) = self.client.submit(bio, cookie) {
                let rejected = *rejected;
                self.recycle(rejected.bio.buf);
                let msg = match rejected.error {
                    mqblk::SubmitError::TooManyInFlight { max } => too_many_in_flight(max),
                    ref e => e.to_string(),
                };
                self.refuse(user_data, rejected.error.errno(), msg);
            }
            return;
        }
        let Some(slot) = self.free_slots.pop() else {
            let max = self.slots.len();
            self.recycle(bio.buf.take());
            return self.refuse(user_data, libc::EAGAIN, too_many_in_flight(max));
        };
        self.slots[slot as usize] = Slot { user_data, scatter };
        if let Err(rejected) = self.client.submit(bio, u64::from(slot) | SLOT_BIT) {
            let rejected = *rejected;
            self.free_slots.push(slot);
            self.recycle(rejected.bio.buf);
            self.refuse(user_data, rejected.error.errno(), rejected.error.to_string());
        }
    }

    /// Returns a bounce buffer to the pool (borrowed buffers just drop).
    fn recycle(&mut self, buf: Option<Buf>) {
        if let Some(buf) = buf.filter(|b| !b.is_borrowed()) {
            self.bounce_pool.push(buf);
        }
    }

    fn take_bounce(&mut self, len: usize) -> Buf {
        match self.bounce_pool.iter().position(|b| b.capacity() >= len) {
            Some(i) => {
                let mut buf = self.bounce_pool.swap_remove(i);
                buf.set_len(len);
                buf
            }
            None => Buf::new(len),
        }
    }

    /// Checks a caller buffer: non-null and aligned to buf-alignment.
    fn check_buf(&self, addr: usize, len: usize, what: &str) -> Result<(), String> {
        if addr == 0 && len > 0 {
            return Err(format!("{what}: buffer is NULL"));
        }
        if (addr | len) & self.buf_align_mask != 0 {
            return Err(format!(
                "{what}: buffer address {addr:#x} and length {len} must be multiples of buf-alignment={}",
                self.buf_align_mask + 1
            ));
        }
        Ok(())
    }

    fn read(&mut self, start: u64, buf: *mut u8, len: usize, user_data: *mut c_void, flags: u32) {
        if !self.check_flags(user_data, flags, 0, "blkioq_read") {
            return;
        }
        if let Err(msg) = self.check_buf(buf as usize, len, "blkioq_read") {
            return self.refuse(user_data, libc::EINVAL, msg);
        }
        // SAFETY: the caller keeps `buf` valid and untouched until the
        // request's completion is returned (libblkio's contract), and
        // `Client` drop (blkio_remove_queue, blkio_destroy) waits for it.
        let buf = unsafe { Buf::borrowed(buf, len) };
        self.submit(Bio::read(start, buf), user_data, None);
    }

    fn write(&mut self, start: u64, buf: *const u8, len: usize, user_data: *mut c_void, flags: u32) {
        if !self.check_flags(user_data, flags, BLKIO_REQ_FUA, "blkioq_write")
            || !self.check_writable(user_data, "blkioq_write")
        {
            return;
        }
        if let Err(msg) = self.check_buf(buf as usize, len, "blkioq_write") {
            return self.refuse(user_data, libc::EINVAL, msg);
        }
        // SAFETY: as in `read`; a write only reads the memory (the cast to
        // *mut is never written through for Op::Write).
        let buf = unsafe { Buf::borrowed(buf.cast_mut(), len) };
        self.submit(Bio::write(start, buf).with_flags(fua(flags)), user_data, None);
    }

    /// Checks an iovec array; returns its total length and, if the
    /// segments are one contiguous range, its start.
    ///
    /// # Safety
    /// `iov` is null or points to `iovcnt` readable iovecs.
    unsafe fn check_iovecs(
        &self,
        iov: *const libc::iovec,
        iovcnt: c_int,
        what: &str,
    ) -> Result<(usize, Option<*mut u8>), String> {
        if iov.is_null() || !(1..=MAX_SEGMENTS).contains(&iovcnt) {
            return Err(format!("{what}: iovec is NULL or iovcnt={iovcnt} outside 1..={MAX_SEGMENTS}"));
        }
        // SAFETY: non-null, `iovcnt` elements by the caller's contract.
        let iovecs = unsafe { std::slice::from_raw_parts(iov, iovcnt as usize) };
        let mut total = 0usize;
        let mut contiguous = true;
        for (i, v) in iovecs.iter().enumerate() {
            self.check_buf(v.iov_base as usize, v.iov_len, &format!("{what}: iovec[{i}]"))?;
            contiguous &= i == 0 || iovecs[i - 1].iov_base as usize + iovecs[i - 1].iov_len == v.iov_base as usize;
            total = total.checked_add(v.iov_len).ok_or_else(|| format!("{what}: total length overflows"))?;
        }
        Ok((total, contiguous.then_some(iovecs[0].iov_base.cast())))
    }

    /// # Safety
    /// `iov` as in `check_iovecs`, and it and its buffers stay valid until
    /// the completion is returned.
    unsafe fn readv(&mut self, start: u64, iov: *const libc::iovec, iovcnt: c_int, user_data: *mut c_void, flags: u32) {
        if !self.check_flags(user_data, flags, 0, "blkioq_readv") {
            return;
        }
        // SAFETY: by the caller's contract.
        let (total, contiguous) = match unsafe { self.check_iovecs(iov, iovcnt, "blkioq_readv") } {
            Ok(v) => v,
            Err(msg) => return self.refuse(user_data, libc::EINVAL, msg),
        };
        match contiguous {
            // SAFETY: one contiguous caller range, valid until completion.
            Some(base) => self.submit(Bio::read(start, unsafe { Buf::borrowed(base, total) }), user_data, None),
            None => {
                let buf = self.take_bounce(total);
                self.submit(Bio::read(start, buf), user_data, Some((iov, iovcnt as usize)));
            }
        }
    }

    /// # Safety
    /// As `readv`.
    unsafe fn writev(
        &mut self,
        start: u64,
        iov: *const libc::iovec,
        iovcnt: c_int,
        user_data: *mut c_void,
        flags: u32,
    ) {
        if !self.check_flags(user_data, flags, BLKIO_REQ_FUA, "blkioq_writev")
            || !self.check_writable(user_data, "blkioq_writev")
        {
            return;
        }
        // SAFETY: by the caller's contract.
        let (total, contiguous) = match unsafe { self.check_iovecs(iov, iovcnt, "blkioq_writev") } {
            Ok(v) => v,
            Err(msg) => return self.refuse(user_data, libc::EINVAL, msg),
        };
        let buf = match contiguous {
            // SAFETY: one contiguous caller range, valid until completion;
            // a write only reads it.
            Some(base) => unsafe { Buf::borrowed(base, total) },
            None => {
                let mut buf = self.take_bounce(total);
                let mut at = 0;
                // SAFETY: checked above: `iovcnt` readable iovecs.
                for v in unsafe { std::slice::from_raw_parts(iov, iovcnt as usize) } {
                    // SAFETY: each segment is readable for its length.
                    let seg = unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) };
                    buf[at..at + v.iov_len].copy_from_slice(seg);
                    at += v.iov_len;
                }
                buf
            }
        };
        self.submit(Bio::write(start, buf).with_flags(fua(flags)), user_data, None);
    }

    fn write_zeroes(&mut self, start: u64, len: u64, user_data: *mut c_void, flags: u32) {
        let allowed = BLKIO_REQ_FUA | BLKIO_REQ_NO_UNMAP | BLKIO_REQ_NO_FALLBACK;
        if !self.check_flags(user_data, flags, allowed, "blkioq_write_zeroes")
            || !self.check_writable(user_data, "blkioq_write_zeroes")
        {
            return;
        }
        // The file driver's write zeroes punches a hole (deallocates): with
        // NO_UNMAP it falls back to writing zeroes. Elsewhere (null) write
        // zeroes keeps the space, as NO_UNMAP asks.
        let unmaps = self.device.driver_name() == "file";
        let native = self.device.limits().max_write_zeroes_sectors > 0 && !(unmaps && flags & BLKIO_REQ_NO_UNMAP != 0);
        if native {
            return self.submit(Bio::write_zeroes(start, len).with_flags(fua(flags)), user_data, None);
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
        let mut buf = self.take_bounce(len);
        buf.fill(0);
        self.submit(Bio::write(start, buf).with_flags(fua(flags)), user_data, None);
    }

    fn discard(&mut self, start: u64, len: u64, user_data: *mut c_void, flags: u32) {
        if self.check_flags(user_data, flags, 0, "blkioq_discard") && self.check_writable(user_data, "blkioq_discard") {
            self.submit(Bio::discard(start, len), user_data, None);
        }
    }

    fn flush(&mut self, user_data: *mut c_void, flags: u32) {
        if self.check_flags(user_data, flags, 0, "blkioq_flush") {
            self.submit(Bio::flush(), user_data, None);
        }
    }

    fn zone_mgmt(&mut self, mgmt: ZoneMgmt, offset: u64, user_data: *mut c_void, flags: u32) {
        let what = format!("blkioq_{}_zone", mgmt.name().to_lowercase());
        if self.check_flags(user_data, flags, 0, &what) && self.check_writable(user_data, &what) {
            self.submit(Bio::zone_mgmt(mgmt, offset), user_data, None);
        }
    }

    /// Open, close or finish every zone in a condition `mgmt` applies to
    /// (mqblk has only reset-all as one op): one op per zone, waited for
    /// here, the request completing once all are done.
    fn zone_mgmt_all(&mut self, mgmt: ZoneMgmt, user_data: *mut c_void, flags: u32) {
        let what = format!("blkioq_{}_all_zones", mgmt.name().to_lowercase());
        if !self.check_flags(user_data, flags, 0, &what) || !self.check_writable(user_data, &what) {
            return;
        }
        if mgmt == ZoneMgmt::Reset {
            return self.submit(Bio::zone_reset_all(), user_data, None);
        }
        let zones = match self.device.limits().zoned {
            Some(z) => self.device.report_zones(0, z.nr_zones as usize),
            None => return self.refuse(user_data, libc::ENOTSUP, format!("{what}: the device is not zoned")),
        };
        let zones = match zones {
            Ok(zones) => zones,
            Err(e) => return self.refuse(user_data, e.errno(), format!("{what}: {e}")),
        };
        let applies = |c: ZoneCond| match mgmt {
            ZoneMgmt::Close => c.is_open(),
            ZoneMgmt::Finish => c.is_active(),
            ZoneMgmt::Open => c == ZoneCond::Closed,
            ZoneMgmt::Reset => unreachable!("handled above"),
        };
        for z in zones.iter().filter(|z| z.ztype != ZoneType::Conventional && applies(z.cond)) {
            let offset = z.start * SECTOR_SIZE;
            match self.client.submit_and_wait_completion(Bio::zone_mgmt(mgmt, offset)) {
                Ok(c) if c.status.is_ok() => {}
                Ok(c) => {
                    return self.refuse(
                        user_data,
                        c.status.errno(),
                        format!("{what}: zone at {offset}: {}", c.status.name()),
                    )
                }
                Err(e) => return self.refuse(user_data, e.errno(), format!("{what}: zone at {offset}: {e}")),
            }
        }
        self.complete_now(user_data, 0, None);
    }

    /// # Safety
    /// `zones` is null or points to `nr_zones` writable zones.
    unsafe fn report_zones(
        &mut self,
        offset: u64,
        zones: *mut blkio_zone,
        nr_zones: u32,
        user_data: *mut c_void,
        flags: u32,
    ) {
        if !self.check_flags(user_data, flags, 0, "blkioq_report_zones") {
            return;
        }
        if zones.is_null() && nr_zones > 0 {
            return self.refuse(user_data, libc::EINVAL, "blkioq_report_zones: zones is NULL".into());
        }
        let report = match self.device.report_zones(offset, nr_zones as usize) {
            Ok(report) => report,
            Err(e) => return self.refuse(user_data, e.errno(), format!("blkioq_report_zones at {offset}: {e}")),
        };
        for (i, z) in report.iter().enumerate() {
            let out = blkio_zone {
                start: z.start * SECTOR_SIZE,
                len: z.len * SECTOR_SIZE,
                capacity: z.capacity * SECTOR_SIZE,
                write_pointer: z.wp * SECTOR_SIZE,
                zone_type: match z.ztype {
                    ZoneType::Conventional => 0x1,
                    ZoneType::SeqWriteRequired => 0x2,
                },
                zone_state: z.cond as u8,
                reset: 0,
                reserved_: [0; 29],
            };
            // SAFETY: i < report.len() <= nr_zones, writable by the contract.
            unsafe { zones.add(i).write(out) };
        }
        self.complete_now(user_data, report.len() as c_int, None);
    }

    /// Settles a reaped completion: recycles its slot, scatters a bounced
    /// read, recycles the bounce buffer. Returns the caller's cookie, ret
    /// and, for a failure, the message.
    fn settle(&mut self, c: &mut mqblk::Completion) -> (*mut c_void, c_int, Option<CString>) {
        let slot = if c.user_data & SLOT_BIT == 0 {
            Slot { user_data: c.user_data as *mut c_void, scatter: None }
        } else {
            let index = (c.user_data & !SLOT_BIT) as u32;
            self.free_slots.push(index);
            std::mem::replace(&mut self.slots[index as usize], EMPTY_SLOT)
        };
        if let (Some((iov, iovcnt)), Some(buf), true) = (slot.scatter, c.buf.as_ref(), c.status.is_ok()) {
            let mut at = 0;
            // SAFETY: the caller keeps the iovec array and its buffers valid
            // until this completion is returned (checked at submission).
            for v in unsafe { std::slice::from_raw_parts(iov, iovcnt) } {
                // SAFETY: each segment is writable for its length.
                unsafe { std::ptr::copy_nonoverlapping(buf[at..].as_ptr(), v.iov_base.cast::<u8>(), v.iov_len) };
                at += v.iov_len;
            }
        }
        self.recycle(c.buf.take());
        match c.status.errno() {
            0 => (slot.user_data, 0, None),
            errno => {
                let msg = CString::new(format!("I/O failed: {}", c.status.name())).unwrap_or_default();
                (slot.user_data, -errno, Some(msg))
            }
        }
    }

    fn outstanding(&self) -> usize {
        self.client.in_flight() + self.ready.len()
    }

    /// Collects up to `max` completions, at least `min` unless `deadline`
    /// passes: first those waiting in `ready` (moved to `staged`), then
    /// the client's (appended to `reaped`, settled only when handed out,
    /// so the common case, nothing in `ready`, copies each completion
    /// once: from the client's ring to the caller's array).
    fn gather(&mut self, min: usize, max: usize, deadline: Option<Instant>) -> Result<(), Failure> {
        while self.staged.len() + self.reaped.len() < max {
            let Some(r) = self.ready.pop_front() else { break };
            self.staged.push(r);
        }
        let have = self.staged.len() + self.reaped.len();
        let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let result = self.client.do_io(&mut self.reaped, min.saturating_sub(have), max - have, timeout);
        result.map(drop).or_else(|e| fail(e.errno(), format!("blkioq_do_io: {e}")))
    }

    /// Puts everything gathered back at the head of `ready`, in order, for
    /// the next `do_io` (nothing is lost when a call fails or times out).
    fn unstage(&mut self) {
        let mut reaped = std::mem::take(&mut self.reaped);
        for mut c in reaped.drain(..).rev() {
            let (user_data, ret, msg) = self.settle(&mut c);
            self.ready.push_front(Ready { user_data, ret, msg });
        }
        self.reaped = reaped;
        while let Some(r) = self.staged.pop() {
            self.ready.push_front(r);
        }
    }

    fn do_io(
        &mut self,
        out: *mut blkio_completion,
        min: c_int,
        max: c_int,
        timeout: *mut libc::timespec,
        sig: Option<&libc::sigset_t>,
    ) -> Result<c_int, Failure> {
        if min < 0 || max < min {
            return fail(libc::EINVAL, format!("blkioq_do_io: min_completions={min}, max_completions={max}"));
        }
        if out.is_null() && max > 0 {
            return fail(libc::EINVAL, "blkioq_do_io: completions is NULL but max_completions > 0");
        }
        if min as usize > self.outstanding() {
            return fail(
                libc::EINVAL,
                format!("blkioq_do_io: min_completions={min} exceeds the {} requests outstanding", self.outstanding()),
            );
        }
        // SAFETY: null or a timespec the caller lets us read and update.
        let timeout = unsafe { timeout.as_mut() };
        let deadline = match &timeout {
            Some(t) if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) => {
                return fail(libc::EINVAL, "blkioq_do_io: timeout is not a valid timespec");
            }
            // The clock is read only when there is a timeout to keep.
            Some(t) => Some(Instant::now() + Duration::new(t.tv_sec as u64, t.tv_nsec as u32)),
            None => None,
        };
        if !self.messages.is_empty() {
            self.messages.clear();
        }
        let (min, max) = (min as usize, max as usize);
        if deadline.is_none() && sig.is_none() && self.ready.is_empty() {
            return self.do_io_direct(out, min, max);
        }
        let result = match sig {
            None => self.gather(min, max, deadline),
            Some(sig) => self.gather_interruptible(min, max, deadline, sig),
        };
        if let Some(t) = timeout {
            let left = deadline.map_or(Duration::ZERO, |d| d.saturating_duration_since(Instant::now()));
            t.tv_sec = left.as_secs() as libc::time_t;
            t.tv_nsec = libc::c_long::from(left.subsec_nanos() as i32);
        }
        let n = self.staged.len() + self.reaped.len();
        if result.is_err() || n < min {
            self.unstage();
            result?;
            return fail(libc::ETIME, format!("blkioq_do_io: timed out with fewer than {min} completions"));
        }
        let mut i = 0;
        let mut staged = std::mem::take(&mut self.staged);
        for r in staged.drain(..) {
            let error_msg = self.keep_message(r.msg);
            // SAFETY: i < n <= max, and `out` holds max writable completions.
            unsafe { out.add(i).write(completion(r.user_data, r.ret, error_msg)) };
            i += 1;
        }
        self.staged = staged;
        let mut reaped = std::mem::take(&mut self.reaped);
        for mut c in reaped.drain(..) {
            let (user_data, ret, msg) = self.settle(&mut c);
            let error_msg = self.keep_message(msg);
            // SAFETY: as above.
            unsafe { out.add(i).write(completion(user_data, ret, error_msg)) };
            i += 1;
        }
        self.reaped = reaped;
        Ok(n as c_int)
    }

    /// `do_io` without a timeout, a signal mask or requests completed at
    /// submission (the common case): the client's completions go straight
    /// to the caller's array, each settled as it is written.
    fn do_io_direct(&mut self, out: *mut blkio_completion, min: usize, max: usize) -> Result<c_int, Failure> {
        debug_assert!(self.reaped.is_empty() && self.staged.is_empty());
        let n = match self.client.do_io(&mut self.reaped, min, max, None) {
            Ok(n) => n,
            Err(e) => {
                self.unstage();
                return fail(e.errno(), format!("blkioq_do_io: {e}"));
            }
        };
        let mut reaped = std::mem::take(&mut self.reaped);
        for (i, c) in reaped.iter_mut().enumerate() {
            let (user_data, ret, msg) = self.settle(c);
            let error_msg = if msg.is_some() { self.keep_message(msg) } else { std::ptr::null() };
            // SAFETY: i < n <= max, and `out` holds max writable completions.
            unsafe { out.add(i).write(completion(user_data, ret, error_msg)) };
        }
        reaped.clear();
        self.reaped = reaped;
        Ok(n as c_int)
    }

    /// Keeps a completion's message alive until the next `do_io`; returns
    /// the pointer the caller sees (null for none).
    fn keep_message(&mut self, msg: Option<CString>) -> *const libc::c_char {
        match msg {
            Some(m) => {
                self.messages.push(m);
                self.messages.last().map_or(std::ptr::null(), |m| m.as_ptr())
            }
            None => std::ptr::null(),
        }
    }

    /// As `gather`, waiting in short slices and returning EINTR once a
    /// signal that `sig` unblocks is pending (delivering it under `sig`).
    fn gather_interruptible(
        &mut self,
        min: usize,
        max: usize,
        deadline: Option<Instant>,
        sig: &libc::sigset_t,
    ) -> Result<(), Failure> {
        loop {
            if signal_pending_under(sig) {
                return fail(libc::EINTR, "blkioq_do_io_interruptible: interrupted by a signal");
            }
            let slice = Instant::now() + SIGNAL_CHECK_SLICE;
            let until = deadline.map_or(slice, |d| d.min(slice));
            self.gather(min, max, Some(until))?;
            if self.staged.len() + self.reaped.len() >= min || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(());
            }
        }
    }
}

/// Is a signal pending that the mask `sig` would let through? If so,
/// install `sig` for a moment so the signal is delivered (its handler
/// runs), as ppoll would, then restore the thread's mask.
fn signal_pending_under(sig: &libc::sigset_t) -> bool {
    // SAFETY: sigset_t is plain data; sigpending and sigismember only read
    // and write these local sets.
    unsafe {
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pending);
        if libc::sigpending(&mut pending) != 0 {
            return false;
        }
        let deliverable =
            (1..libc::SIGRTMAX()).any(|s| libc::sigismember(&pending, s) == 1 && libc::sigismember(sig, s) == 0);
        if deliverable {
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_SETMASK, sig, &mut old);
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        deliverable
    }
}

fn too_many_in_flight(max: usize) -> String {
    format!("the queue already has {max} requests in flight: reap some with blkioq_do_io")
}

fn completion(user_data: *mut c_void, ret: c_int, error_msg: *const libc::c_char) -> blkio_completion {
    blkio_completion { user_data, error_msg, ret, reserved_: [0; 12] }
}

fn fua(flags: u32) -> ReqFlags {
    if flags & BLKIO_REQ_FUA != 0 {
        ReqFlags::FUA
    } else {
        ReqFlags::NONE
    }
}
