//! libblkio's C API (blkio.h, libblkio.so.1) over mqblk devices.
//!
//! A C program creates an instance of driver `mqblk`, sets `path` to an
//! mqblk spec (`null:gb=1`, `file:path=disk.img`), connects, sets
//! `num-queues` / `num-poll-queues`, starts, and queues requests on each
//! `struct blkioq`: one mqblk [`Client`](mqblk::Client) per queue (poll
//! queues submit with `HIPRI`, landing on the device's poll queues).
//!
//! Every exported function runs inside `catch_unwind` ([`entry`]): a panic
//! becomes -EIO with a message, never an unwind into C. Errors are negative
//! errnos with a per-thread message for `blkio_get_error_msg`.
//!
//! Files: this one holds the instance (life cycle, queues); region.rs its
//! memory regions; props.rs the properties; queue.rs the requests and
//! `do_io`, queue/ffi.rs their exported `blkioq_*` functions.
//!
//! Relies on: mqblk's Device, Client, Bio and `Buf::borrowed` (buf.rs).

#![deny(unsafe_op_in_unsafe_fn)]

mod props;
mod queue;
mod region;

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use mqblk::{Device, DeviceConfig};

pub use queue::{blkio_completion, blkio_zone, Queue};
pub use region::blkio_mem_region;
use region::{free_region, MemRegion};

/// The device a `path` spec names (`null:`, `file:` or `nbd:`, each
/// registered here as an outside driver would be); a `file:` spec that
/// chose no ring layout gets one for `nr_queues` queues whose clients
/// reap their own rings (`FileConfig::reaped_by_clients`, then true):
/// the file driver's default, a completion thread per ring waking the
/// client, suits clients that cannot reap, but costs half the IOPS here
/// (BENCHMARKS.md, "The C library"). A queue's completion fd still
/// works: it is registered with its ring.
fn fast_file_config(spec: &str, nr_queues: c_int) -> Result<(DeviceConfig, bool), mqblk::ConfigError> {
    mqblk_null::register();
    mqblk_file::register();
    mqblk_nbd::client::register();
    let mut cfg = DeviceConfig::parse(spec)?;
    let nr_clients = usize::try_from(nr_queues).unwrap_or(1);
    let chose = cfg.driver_mut::<mqblk_file::FileConfig>().is_some_and(|f| f.reaped_by_clients(nr_clients));
    Ok((cfg, chose))
}

/// Most queues (regular plus poll) one instance may have: mqblk clients
/// are cheap, but every bound is named.
pub const MAX_QUEUES: usize = 256;
/// Most memory regions mapped at once.
pub const MAX_MEM_REGIONS: u64 = 1024;

/// An error of an entry point: the negative errno it returns and the
/// message `blkio_get_error_msg` gives.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) errno: c_int,
    pub(crate) msg: String,
}

pub(crate) fn fail<T>(errno: c_int, msg: impl Into<String>) -> Result<T, Failure> {
    Err(Failure { errno, msg: msg.into() })
}

thread_local! {
    static ERROR_MSG: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error_msg(msg: &str) {
    let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    ERROR_MSG.with(|m| *m.borrow_mut() = msg);
}

/// Runs one entry point: its result, or `-errno` with the message set, or
/// -EIO if it panicked (the panic stops here, never unwinding into C).
pub(crate) fn entry(f: impl FnOnce() -> Result<c_int, Failure>) -> c_int {
    entry_ret(|| f().unwrap_or_else(failed))
}

/// As `entry`, for a hot entry point whose body gives its C result itself,
/// reporting failures through [`failed`]: no `Result` (a `Failure` holds a
/// `String`) travels through memory on the path that succeeds.
#[inline(always)]
pub(crate) fn entry_ret(f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(panic) => panicked(panic),
    }
}

/// A failure's C result: its message set, its negative errno returned.
#[cold]
#[inline(never)]
pub(crate) fn failed(e: Failure) -> c_int {
    set_error_msg(&e.msg);
    -e.errno
}

#[cold]
#[inline(never)]
fn panicked(panic: Box<dyn std::any::Any + Send>) -> c_int {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    set_error_msg(&format!("internal error in mqblk-blkio: {what}"));
    -libc::EIO
}

/// `entry` for functions returning nothing: failures leave the message.
pub(crate) fn entry_void(f: impl FnOnce() -> Result<(), Failure>) {
    entry(|| f().map(|()| 0));
}

/// Reads a C string argument.
///
/// # Safety
/// `s` is null or points to a NUL-terminated string.
pub(crate) unsafe fn c_str<'a>(s: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if s.is_null() {
        return fail(libc::EINVAL, format!("{what} is NULL"));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(s) };
    s.to_str().or_else(|_| fail(libc::EINVAL, format!("{what} is not valid UTF-8")))
}

/// An instance's state: properties and calls depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum State {
    Created,
    Connected,
    Started,
}

impl State {
    pub(crate) fn name(self) -> &'static str {
        match self {
            State::Created => "created",
            State::Connected => "connected",
            State::Started => "started",
        }
    }
}

/// `struct blkio`.
pub struct Blkio {
    pub(crate) state: State,
    pub(crate) path: Option<String>,
    pub(crate) read_only: bool,
    pub(crate) num_queues: c_int,
    pub(crate) num_poll_queues: c_int,
    pub(crate) device: Option<Device>,
    /// Indexed by queue number; a removed queue leaves None (indexes of
    /// the others do not shift). Boxed: `struct blkioq *` must stay put.
    queues: Vec<Option<Box<Queue>>>,
    poll_queues: Vec<Option<Box<Queue>>>,
    regions: Vec<MemRegion>,
}

impl Blkio {
    fn new() -> Self {
        Self {
            state: State::Created,
            path: None,
            read_only: false,
            num_queues: 1,
            num_poll_queues: 0,
            device: None,
            queues: Vec::new(),
            poll_queues: Vec::new(),
            regions: Vec::new(),
        }
    }

    pub(crate) fn device(&self) -> Result<&Device, Failure> {
        match &self.device {
            Some(d) => Ok(d),
            None => fail(libc::EINVAL, "the instance is not connected yet (call blkio_connect)"),
        }
    }

    fn connect(&mut self) -> Result<(), Failure> {
        if self.state != State::Created {
            return fail(libc::EBUSY, format!("blkio_connect: the instance is already {}", self.state.name()));
        }
        let Some(path) = self.path.as_deref() else {
            return fail(libc::EINVAL, "blkio_connect: set property \"path\" to an mqblk spec first (e.g. null:gb=1)");
        };
        // A plain file spec is opened in its fast configuration from the
        // start (so properties such as supports-poll-queues describe the
        // device the queues get); `start` gives it a ring per queue.
        let open = || fast_file_config(path, 1).map_err(mqblk::Error::from)?.0.build();
        let device = open().or_else(|e| fail(e.errno(), format!("blkio_connect: {path}: {e}")))?;
        self.device = Some(device);
        self.state = State::Connected;
        Ok(())
    }

    /// Can this device take poll queues (hipri bios polled on a queue)?
    pub(crate) fn supports_poll_queues(device: &Device) -> bool {
        device.tag_set().poll_queues > 0 || device.tag_set().submitter_reaps
    }

    fn start(&mut self) -> Result<(), Failure> {
        match self.state {
            State::Created => return fail(libc::EINVAL, "blkio_start: connect first (blkio_connect)"),
            State::Started => return fail(libc::EBUSY, "blkio_start: the instance is already started"),
            State::Connected => {}
        }
        let nr_queues = self.num_queues + self.num_poll_queues;
        let reopen = self.path.as_deref().and_then(|p| fast_file_config(p, nr_queues).ok());
        if let Some((cfg, true)) = reopen.filter(|_| nr_queues > 1) {
            // Reopened with one ring per queue (nothing was done on it yet).
            let spec = cfg.to_string();
            let device = cfg.build().or_else(|e| fail(e.errno(), format!("blkio_start: {spec}: {e}")))?;
            self.device = Some(device);
        }
        let device = self.device()?.clone();
        if self.num_poll_queues > 0 && !Self::supports_poll_queues(&device) {
            return fail(
                libc::EINVAL,
                format!(
                    "blkio_start: num-poll-queues={} but the device has no poll queues (add poll_queues=N to its spec)",
                    self.num_poll_queues
                ),
            );
        }
        let queues = (0..self.num_queues).map(|_| Some(Box::new(Queue::new(&device, false, self.read_only))));
        self.queues = queues.collect();
        let poll = (0..self.num_poll_queues).map(|_| Some(Box::new(Queue::new(&device, true, self.read_only))));
        self.poll_queues = poll.collect();
        self.state = State::Started;
        Ok(())
    }

    fn require_started(&self, what: &str) -> Result<(), Failure> {
        if self.state != State::Started {
            return fail(
                libc::EINVAL,
                format!("{what}: the instance is {}, not started (call blkio_start)", self.state.name()),
            );
        }
        Ok(())
    }

    fn nr_live_queues(&self) -> usize {
        self.queues.iter().chain(&self.poll_queues).filter(|q| q.is_some()).count()
    }

    fn add_queue(&mut self, poll: bool) -> Result<c_int, Failure> {
        let what = if poll { "blkio_add_poll_queue" } else { "blkio_add_queue" };
        self.require_started(what)?;
        if self.nr_live_queues() >= MAX_QUEUES {
            return fail(libc::EBUSY, format!("{what}: the instance already has max-queues={MAX_QUEUES} queues"));
        }
        let device = self.device()?.clone();
        if poll && !Self::supports_poll_queues(&device) {
            return fail(libc::EINVAL, format!("{what}: the device has no poll queues"));
        }
        let queue = Some(Box::new(Queue::new(&device, poll, self.read_only)));
        let list = if poll { &mut self.poll_queues } else { &mut self.queues };
        list.push(queue);
        Ok((list.len() - 1) as c_int)
    }

    fn queue_slot(&mut self, poll: bool, index: c_int) -> Result<&mut Option<Box<Queue>>, Failure> {
        let kind = if poll { "poll queue" } else { "queue" };
        self.require_started(&format!("get/remove {kind}"))?;
        let list = if poll { &mut self.poll_queues } else { &mut self.queues };
        let slot = usize::try_from(index).ok().and_then(|i| list.get_mut(i));
        match slot {
            Some(slot @ Some(_)) => Ok(slot),
            _ => fail(libc::ENOENT, format!("there is no {kind} {index}")),
        }
    }
}

impl Drop for Blkio {
    fn drop(&mut self) {
        // Queues first: each waits for its I/O, which may use the regions.
        self.queues.clear();
        self.poll_queues.clear();
        for m in self.regions.drain(..) {
            free_region(m);
        }
    }
}

pub(crate) fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// Borrows the instance behind a C pointer.
///
/// # Safety
/// `b` is null or a pointer `blkio_create` returned, not yet destroyed,
/// used by no other thread during the call.
pub(crate) unsafe fn instance<'a>(b: *mut Blkio) -> Result<&'a mut Blkio, Failure> {
    // SAFETY: by the caller's contract.
    match unsafe { b.as_mut() } {
        Some(b) => Ok(b),
        None => fail(libc::EINVAL, "struct blkio pointer is NULL"),
    }
}

/// The message of the last failure on this thread.
#[no_mangle]
pub extern "C" fn blkio_get_error_msg() -> *const c_char {
    ERROR_MSG.with(|m| m.borrow().as_ptr())
}

/// # Safety
/// `driver` is a C string; `bp` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn blkio_create(driver: *const c_char, bp: *mut *mut Blkio) -> c_int {
    entry(|| {
        if bp.is_null() {
            return fail(libc::EINVAL, "blkio_create: bp is NULL");
        }
        // SAFETY: bp is non-null and writable by the caller's contract.
        unsafe { *bp = std::ptr::null_mut() };
        // SAFETY: a C string by the caller's contract.
        let name = unsafe { c_str(driver, "driver") }?;
        if name != "mqblk" {
            return fail(
                libc::ENOENT,
                format!("blkio_create: unknown driver \"{name}\" (this libblkio has \"mqblk\")"),
            );
        }
        // SAFETY: as above.
        unsafe { *bp = Box::into_raw(Box::new(Blkio::new())) };
        Ok(0)
    })
}

/// # Safety
/// `b` as in [`instance`].
#[no_mangle]
pub unsafe extern "C" fn blkio_connect(b: *mut Blkio) -> c_int {
    // SAFETY: by the caller's contract.
    entry(|| unsafe { instance(b) }?.connect().map(|()| 0))
}

/// # Safety
/// `b` as in [`instance`].
#[no_mangle]
pub unsafe extern "C" fn blkio_start(b: *mut Blkio) -> c_int {
    // SAFETY: by the caller's contract.
    entry(|| unsafe { instance(b) }?.start().map(|()| 0))
}

/// Waits for every queue's I/O, frees allocated regions, and sets `*bp`
/// to NULL.
///
/// # Safety
/// `bp` is null or points to null or to an instance `blkio_create` gave.
#[no_mangle]
pub unsafe extern "C" fn blkio_destroy(bp: *mut *mut Blkio) {
    entry_void(|| {
        // SAFETY: by the caller's contract.
        let Some(slot) = (unsafe { bp.as_mut() }) else { return Ok(()) };
        if !slot.is_null() {
            // SAFETY: made by Box::into_raw in blkio_create, destroyed once
            // (the pointer is cleared).
            drop(unsafe { Box::from_raw(*slot) });
            *slot = std::ptr::null_mut();
        }
        Ok(())
    })
}

unsafe fn get_queue(b: *mut Blkio, index: c_int, poll: bool) -> *mut Queue {
    let mut out = std::ptr::null_mut();
    entry(|| {
        // SAFETY: by the caller's contract.
        let slot = unsafe { instance(b) }?.queue_slot(poll, index)?;
        out = slot.as_deref_mut().map_or(std::ptr::null_mut(), |q| q as *mut Queue);
        Ok(0)
    });
    out
}

/// # Safety
/// `b` as in [`instance`].
#[no_mangle]
pub unsafe extern "C" fn blkio_get_queue(b: *mut Blkio, index: c_int) -> *mut Queue {
    // SAFETY: by the caller's contract.
    unsafe { get_queue(b, index, false) }
}

/// # Safety
/// `b` as in [`instance`].
#[no_mangle]
pub unsafe extern "C" fn blkio_get_poll_queue(b: *mut Blkio, index: c_int) -> *mut Queue {
    // SAFETY: by the caller's contract.
    unsafe { get_queue(b, index, true) }
}

/// # Safety
/// `b` as in [`instance`].
#[no_mangle]
pub unsafe extern "C" fn blkio_add_queue(b: *mut Blkio) -> c_int {
    // SAFETY: by the caller's contract.
    entry(|| unsafe { instance(b) }?.add_queue(false))
}

/// # Safety
/// `b` as in [`instance`].
#[no_mangle]
pub unsafe extern "C" fn blkio_add_poll_queue(b: *mut Blkio) -> c_int {
    // SAFETY: by the caller's contract.
    entry(|| unsafe { instance(b) }?.add_queue(true))
}

/// Removes a queue (waiting for its I/O); its `struct blkioq *` dies.
///
/// # Safety
/// `b` as in [`instance`].
#[no_mangle]
pub unsafe extern "C" fn blkio_remove_queue(b: *mut Blkio, index: c_int) -> c_int {
    // SAFETY: by the caller's contract.
    entry(|| unsafe { instance(b) }?.queue_slot(false, index).map(|slot| *slot = None).map(|()| 0))
}

/// # Safety
/// `b` as in [`instance`].
#[no_mangle]
pub unsafe extern "C" fn blkio_remove_poll_queue(b: *mut Blkio, index: c_int) -> c_int {
    // SAFETY: by the caller's contract.
    entry(|| unsafe { instance(b) }?.queue_slot(true, index).map(|slot| *slot = None).map(|()| 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> String {
        // SAFETY: blkio_get_error_msg returns this thread's NUL-terminated message.
        unsafe { CStr::from_ptr(blkio_get_error_msg()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_becomes_eio_with_a_message() {
        assert_eq!(entry(|| panic!("boom {}", 7)), -libc::EIO);
        assert!(message().contains("internal error in mqblk-blkio: boom 7"), "{}", message());
    }

    #[test]
    fn a_failure_becomes_its_negative_errno_and_message() {
        assert_eq!(entry(|| fail(libc::EBUSY, "busy here")), -libc::EBUSY);
        assert_eq!(message(), "busy here");
        assert_eq!(entry(|| Ok(5)), 5);
        assert_eq!(message(), "busy here", "success leaves the last message");
    }

    #[test]
    fn messages_are_per_thread() {
        entry(|| fail(libc::EINVAL, "main thread"));
        std::thread::spawn(|| {
            assert_eq!(message(), "");
            entry(|| fail(libc::EIO, "other thread"));
            assert_eq!(message(), "other thread");
        })
        .join()
        .unwrap();
        assert_eq!(message(), "main thread");
    }
}
