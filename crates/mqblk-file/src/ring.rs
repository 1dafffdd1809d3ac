//! One io_uring per hardware queue: requests become SQEs, a batch is
//! submitted at `last` / `commit_rqs`, and completions are reaped either
//! by the ring's completion thread (interrupt style: it sleeps in
//! io_uring_enter until a CQE arrives) or, on poll queues, by the client
//! that polls.
//!
//! Each in-flight request sits in the slot of its driver tag with its
//! iovecs and progress, so nothing is allocated per I/O. A request over a
//! kernel buffer (a ublk request's pages) becomes a chain of three SQEs
//! instead (kbuf.rs), through the ring's sparse buffer table. Short reads and
//! writes are resubmitted for the remainder, EAGAIN is retried, any other
//! errno becomes the request's status.
//!
//! Relies on: the io-uring crate; the block layer's guarantee that a tag
//! is in flight at most once (so its slot has one owner at a time);
//! sqe.rs for the SQE each request becomes, kbuf.rs for the chain,
//! completion_thread.rs for the reaper of a ring no client polls,
//! salvage.rs for a ring whose completion thread died.

use std::cell::UnsafeCell;
use std::os::fd::RawFd;

use std::sync::atomic::{AtomicUsize, Ordering};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use parking_lot::Mutex;

use mqblk::driver::Rq;
use mqblk::Status;

mod completion_thread;
mod kbuf;
mod salvage;
mod sqe;

pub(crate) use completion_thread::spawn_completion_thread;

use kbuf::{Chain, STEP_MASK};
use sqe::advance;

/// io_uring_enter: wait for completions (<linux/io_uring.h>).
const IORING_ENTER_GETEVENTS: u32 = 1;

/// user_data of the NOP that stops a completion thread.
const STOP: u64 = u64::MAX;
/// user_data of the cancel `salvage` issues.
const CANCEL: u64 = u64::MAX - 2;

/// How the ring addresses the file.
#[derive(Clone, Copy)]
pub(crate) enum FileRef {
    /// Registered file, index 0.
    Fixed,
    Raw(RawFd),
}

/// A request's iovec array (max_segments entries, reused per tag): its
/// physical segments (`Rq::for_each_phys_segment`).
type Iovecs = Box<[libc::iovec]>;

/// A driver tag's slot: its iovec array (max_segments entries, kept for
/// the tag's next request, so nothing moves or is allocated per I/O) and
/// the request in flight, if any.
struct Slot {
    iov: Iovecs,
    io: Option<Inflight>,
}

/// A request in flight: the token and how far it got.
struct Inflight {
    rq: Rq,
    /// First iovec not fully transferred, and the iovec count.
    first: usize,
    nr: usize,
    /// Device offset and length of the whole request, bytes done.
    offset: u64,
    len: u64,
    done: u64,
    /// A kernel-buffer request's chain (kbuf.rs); None for memory.
    chain: Option<Chain>,
}

pub(crate) struct Ring {
    ring: IoUring,
    file: FileRef,
    /// Pushing to the SQ (any submitter; the completion thread resubmits).
    sq_lock: Mutex<()>,
    /// Reaping the CQ on poll rings (several clients may poll), with the
    /// reaper's list of what it took (user_data, result), reused.
    cq_lock: Mutex<Vec<(u64, i32)>>,
    /// Per driver tag: its iovecs and the request in flight.
    slots: Box<[UnsafeCell<Slot>]>,
    /// Requests queued and not yet ended (a stop waits for them).
    inflight: AtomicUsize,
    /// SQEs issued with the fixed opcodes (shown by `show`).
    pub(crate) fixed_ios: AtomicUsize,
    /// Kernel-buffer chains issued (kbuf.rs; shown by `show`).
    pub(crate) kernel_ios: AtomicUsize,
    /// The SQ's size (what `enter` asks to submit).
    sq_entries: u32,
    /// The ring has a sparse buffer table of 1 + depth entries: index 0
    /// for the registered region, 1 + tag for each tag's kernel buffer.
    pub(crate) kernel_buffers: bool,
    /// Reaped by polling clients, not by a completion thread.
    pub(crate) polled: bool,
    /// IORING_SETUP_IOPOLL (else a waiting poller sleeps in the kernel).
    iopoll: bool,
    /// Single issuer: created disabled, enabled by the first thread that
    /// queues to it, which must then be the only one: a request from any
    /// other thread fails at once (the kernel would refuse its submission
    /// with EEXIST and leave it in the SQ forever).
    issuer: std::sync::OnceLock<std::thread::ThreadId>,
    single_issuer: bool,
    /// The completion thread died (it panicked): no request is queued to
    /// the ring any more; those in flight were salvaged (`salvage`).
    dead: std::sync::atomic::AtomicBool,
    /// The registered buffer region (buffer index 0), once registered;
    /// the ring keeps it alive while it may use it.
    fixed: std::sync::OnceLock<mqblk::FixedBufs>,
    /// The eventfd registered with the ring (IORING_REGISTER_EVENTFD), if
    /// a client asked for one (`set_eventfd`).
    eventfd: Mutex<Option<RawFd>>,
}

// SAFETY: a slot is touched by the thread that owns its tag: the submitter
// until the SQE is pushed (under `sq_lock`, whose release orders the
// writes), then the one reaper that sees its CQE (the completion thread,
// or a poller under `cq_lock`); the kernel's CQE publication orders the
// two. The ring's SQ and CQ are shared under the locks above.
unsafe impl Sync for Ring {}
// SAFETY: as above; nothing is tied to a thread.
unsafe impl Send for Ring {}

impl Ring {
    pub(crate) fn new(
        depth: u32,
        file: RawFd,
        register: bool,
        iopoll: bool,
        polled: bool,
        single_issuer: bool,
        max_segs: usize,
    ) -> std::io::Result<Self> {
        let mut b = IoUring::builder();
        if iopoll {
            b.setup_iopoll();
        }
        if single_issuer {
            // Completion task work then waits for the issuer's own
            // io_uring_enter (fio's setup): no wakeup from another context.
            // TASKRUN_FLAG: the kernel marks the SQ when such work waits,
            // so a poll that must not sleep knows when to enter (`poll`).
            b.setup_single_issuer().setup_defer_taskrun().setup_r_disabled().setup_taskrun_flag();
        }
        // No inter-processor interrupt to run completion task work: it runs
        // when the submitting thread next enters the kernel (as fio sets).
        b.setup_coop_taskrun();
        // Room for a kernel-buffer chain's three CQEs per request.
        let ring = b.setup_cqsize(depth.next_power_of_two() * 4).build(depth.next_power_of_two())?;
        let sq_entries = ring.params().sq_entries();
        // The buffer table, sparse until something registers in it. Not on
        // IOPOLL rings, which cannot issue the ublk commands a kernel
        // buffer needs; a kernel without sparse tables (before 5.19) has
        // no zero-copy ublk either.
        let kernel_buffers = !iopoll && ring.submitter().register_buffers_sparse(depth + 1).is_ok();
        let file_ref = if register {
            ring.submitter().register_files(&[file])?;
            FileRef::Fixed
        } else {
            FileRef::Raw(file)
        };
        let empty_iov = || -> Iovecs {
            vec![libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; max_segs].into_boxed_slice()
        };
        Ok(Self {
            ring,
            file: file_ref,
            sq_lock: Mutex::new(()),
            cq_lock: Mutex::new(Vec::with_capacity(depth.next_power_of_two() as usize * 4)),
            slots: (0..depth).map(|_| UnsafeCell::new(Slot { iov: empty_iov(), io: None })).collect(),
            inflight: AtomicUsize::new(0),
            fixed_ios: AtomicUsize::new(0),
            kernel_ios: AtomicUsize::new(0),
            sq_entries,
            kernel_buffers,
            polled: polled || iopoll,
            iopoll,
            issuer: std::sync::OnceLock::new(),
            single_issuer,
            dead: std::sync::atomic::AtomicBool::new(false),
            fixed: std::sync::OnceLock::new(),
            eventfd: Mutex::new(None),
        })
    }

    /// Takes the request into its tag's slot and queues its SQE; submits
    /// when `submit` (the batch's last request).
    pub(crate) fn queue(&self, mut rq: Rq, submit: bool) {
        if self.dead.load(Ordering::Acquire) {
            return rq.complete(Status::IoErr);
        }
        if self.single_issuer {
            // The first issuer enables the ring and becomes its only one.
            let me = std::thread::current().id();
            let issuer = *self.issuer.get_or_init(|| {
                self.ring.submitter().register_enable_rings().expect("enabling a disabled io_uring");
                me
            });
            if issuer != me {
                return rq.complete(Status::IoErr);
            }
        }
        let tag = rq.tag() as usize;
        // SAFETY: the tag is ours until its CQE (see the Sync impl); the
        // reference is last used before the SQE is pushed.
        let slot = unsafe { &mut *self.slots[tag].get() };
        debug_assert!(slot.io.is_none(), "a tag is in flight at most once");
        let mut nr = 0;
        let chain = rq.kernel_buf().map(Chain::new);
        if rq.op().has_data() && chain.is_none() {
            // The request's physical segments (contiguous memory coalesced):
            // at most max_segments, the iovec array's length.
            let iov = &mut slot.iov;
            rq.for_each_phys_segment(|addr, len| {
                iov[nr] = libc::iovec { iov_base: addr.cast(), iov_len: len };
                nr += 1;
            });
        }
        let (offset, len) = (rq.pos_bytes(), rq.len_bytes());
        // Counted before it is pushed, and `dead` checked after: either a
        // dying completion thread's `salvage` sees this request in flight
        // and waits for its CQE, or we see `dead` (SeqCst on both sides).
        self.inflight.fetch_add(1, Ordering::SeqCst);
        if self.dead.load(Ordering::SeqCst) {
            self.inflight.fetch_sub(1, Ordering::SeqCst);
            return rq.complete(Status::IoErr);
        }
        slot.io = Some(Inflight { rq, first: 0, nr, offset, len, done: 0, chain });
        if chain.is_some() {
            self.push_chain(slot, tag);
        } else {
            let entry = self.entry(slot, tag as u64);
            self.push(&entry);
        }
        if submit {
            self.submit();
        }
    }

    fn push(&self, entry: &squeue::Entry) {
        self.push_linked(std::slice::from_ref(entry));
    }

    /// Pushes SQEs together, so a link is a run of adjacent SQEs (another
    /// submitter's SQE between them would join the chain).
    fn push_linked(&self, entries: &[squeue::Entry]) {
        let _g = self.sq_lock.lock();
        loop {
            // SAFETY: `sq_lock` makes us the only user of the SQ; the
            // entries' iovecs and buffers live in the slot until their CQEs
            // (a chain's buffer lives in the kernel).
            let pushed = unsafe { self.ring.submission_shared().push_multiple(entries) };
            if pushed.is_ok() {
                return;
            }
            // Full (only if submissions lag): hand what is queued to the kernel.
            let _ = self.enter(0);
        }
    }

    /// io_uring_enter for everything queued (any thread may; the kernel
    /// serialises).
    pub(crate) fn submit(&self) {
        loop {
            match self.enter(0) {
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) || e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::yield_now();
                }
                _ => return,
            }
        }
    }

    /// io_uring_enter submitting everything queued by then, then (`wait`
    /// above 0) waiting for that many completions. to_submit is the SQ's
    /// size, not the count this thread saw queued: the kernel takes what
    /// is there up to the tail, and a tail is always at the end of a push
    /// (`push_linked`), so a link is never split. A count read earlier
    /// could end inside a chain another thread pushed since (another
    /// submitter having taken what this thread saw), and the kernel would
    /// issue the chain's first SQEs as a link of their own and the rest
    /// later, unlinked. The wait is an io_uring_enter of its own, since the
    /// kernel skips GETEVENTS when it submitted fewer than asked.
    fn enter(&self, wait: u32) -> std::io::Result<usize> {
        if wait > 0 && self.sq_is_empty() {
            // SAFETY: no signal mask; to_submit 0: only waits.
            return unsafe { self.ring.submitter().enter::<libc::sigset_t>(0, wait, IORING_ENTER_GETEVENTS, None) };
        }
        let submit_flags = if self.iopoll { IORING_ENTER_GETEVENTS } else { 0 };
        // SAFETY: no signal mask; the SQEs' buffers live until their CQEs
        // (see `push_linked`).
        let submitted =
            unsafe { self.ring.submitter().enter::<libc::sigset_t>(self.sq_entries, 0, submit_flags, None) };
        if wait == 0 {
            return submitted;
        }
        // SAFETY: as above; to_submit 0: only waits.
        unsafe { self.ring.submitter().enter::<libc::sigset_t>(0, wait, IORING_ENTER_GETEVENTS, None) }
    }

    /// Whether nothing waits in the SQ (what another thread pushes after
    /// this look, that thread submits).
    fn sq_is_empty(&self) -> bool {
        let _g = self.sq_lock.lock();
        // SAFETY: `sq_lock` makes this the only SubmissionQueue; it only
        // reads the head and tail.
        unsafe { self.ring.submission_shared().is_empty() }
    }

    /// Reaps what the CQ holds into `out` (user_data, result).
    fn drain_cq(&self, out: &mut Vec<(u64, i32)>) {
        // SAFETY: the caller is the CQ's only reaper (completion thread, or
        // a poller under `cq_lock`).
        let cq = unsafe { self.ring.completion_shared() };
        out.extend(cq.map(|c: cqueue::Entry| (c.user_data(), c.result())));
    }

    /// Ends or continues the request of a CQE's `user_data` (its driver
    /// tag, and for a kernel-buffer chain its step) with `res`.
    fn complete(&self, user_data: u64, res: i32) {
        if user_data & STEP_MASK != 0 {
            return self.chain_cqe(user_data, res, false);
        }
        let tag = user_data as usize;
        // SAFETY: this CQE makes us the tag's owner (see the Sync impl).
        let slot = unsafe { &mut *self.slots[tag].get() };
        let inf = slot.io.as_mut().expect("a CQE for a tag in flight");
        let status = if res == -libc::EAGAIN || res == -libc::EINTR {
            None // retry as is
        } else if res < 0 {
            Some(Status::from_errno(-res))
        } else if inf.rq.op().has_data() {
            let n = res as u64;
            if n == 0 && inf.done < inf.len {
                Some(Status::IoErr) // end of file: the file shrank under the device
            } else {
                inf.done += n;
                advance(&mut slot.iov, inf, n);
                (inf.done >= inf.len).then_some(Status::Ok)
            }
        } else {
            Some(Status::Ok)
        };
        match status {
            None => {
                let entry = self.entry(slot, tag as u64);
                self.push(&entry);
                self.submit();
            }
            Some(status) => {
                let inf = slot.io.take().expect("checked above");
                self.inflight.fetch_sub(1, Ordering::Relaxed);
                inf.rq.complete(status);
            }
        }
    }

    /// A poller's reap; returns how many requests ended or moved on.
    /// IOPOLL rings: io_uring_enter drives the device's polling. Other
    /// polled rings (`reap=client`): if nothing is there and `wait`, the
    /// poller sleeps in io_uring_enter until a completion arrives.
    pub(crate) fn poll(&self, wait: bool) -> usize {
        let Some(mut scratch) = self.cq_lock.try_lock() else {
            if wait && !self.iopoll {
                // Another client reaps (perhaps asleep in the kernel until a
                // completion arrives, ours included): sleep until it is
                // done instead of spinning, then let our caller look at
                // what it delivered to us before polling again.
                drop(self.cq_lock.lock());
            }
            return 0;
        };
        scratch.clear();
        if self.iopoll {
            // SAFETY: GETEVENTS with min_complete 0 only reaps.
            let _ = unsafe { self.ring.submitter().enter::<libc::sigset_t>(0, 0, IORING_ENTER_GETEVENTS, None) };
        } else {
            self.drain_cq(&mut scratch);
            // Requests in flight all end with a CQE and only we reap
            // while holding cq_lock, so waiting for one cannot hang, even
            // if our own completion was reaped by another client already
            // (we then wake at the next completion of the ring).
            if wait && scratch.is_empty() && self.inflight.load(Ordering::Relaxed) > 0 {
                let _ = self.enter(1);
            } else if scratch.is_empty() && self.single_issuer && self.taskrun_pending() {
                // DEFER_TASKRUN: completions that io_uring's workers
                // finished wait as task work until the issuer enters, and
                // a poller that never waits (a completion fd's reader,
                // a busy loop) would otherwise never see them.
                // SAFETY: GETEVENTS with min_complete 0 only runs that work.
                let _ = unsafe { self.ring.submitter().enter::<libc::sigset_t>(0, 0, IORING_ENTER_GETEVENTS, None) };
            }
        }
        self.drain_cq(&mut scratch);
        for &(user_data, res) in scratch.iter() {
            self.complete(user_data, res);
        }
        scratch.len()
    }

    /// Whether the kernel holds completion task work for this ring
    /// (IORING_SQ_TASKRUN; single-issuer rings set TASKRUN_FLAG for it).
    fn taskrun_pending(&self) -> bool {
        let _g = self.sq_lock.lock();
        // SAFETY: `sq_lock` makes this the only SubmissionQueue; it only
        // reads the flags word.
        unsafe { self.ring.submission_shared().taskrun() }
    }

    /// Registers `region` as buffer 0 of this ring (once).
    pub(crate) fn register_fixed(&self, region: &mqblk::FixedBufs) -> std::io::Result<()> {
        if self.fixed.get().is_some() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a fixed buffer pool is registered already (one per device)",
            ));
        }
        let (base, len) = region.span();
        let iov = libc::iovec { iov_base: base as *mut libc::c_void, iov_len: len };
        // SAFETY: the region stays allocated while the ring may use it: the
        // ring keeps an Arc to it (set below) until the ring is dropped.
        unsafe {
            if self.kernel_buffers {
                self.ring.submitter().register_buffers_update(0, &[iov], None)?;
            } else {
                self.ring.submitter().register_buffers(&[iov])?;
            }
        }
        let _ = self.fixed.set(region.clone());
        Ok(())
    }

    pub(crate) fn is_iopoll(&self) -> bool {
        self.iopoll
    }

    /// Has the kernel signal `fd` (an eventfd) for every CQE this ring
    /// posts (IORING_REGISTER_EVENTFD), or stops that (None): so a client
    /// of a polled ring can sleep on its eventfd alone, as libblkio's
    /// completion fd wants, and still learn of completions only a reap
    /// would collect. Completion task work that io_uring defers to the
    /// submitter (COOP_TASKRUN) still wakes a submitter asleep in a read of
    /// the eventfd: the kernel's TWA_SIGNAL_NO_IPI skips only the IPI to a
    /// running task, not the wakeup of a sleeping one. A ring has one such
    /// fd: registering a second fails with EBUSY.
    pub(crate) fn set_eventfd(&self, fd: Option<RawFd>) -> std::io::Result<()> {
        let mut current = self.eventfd.lock();
        match (*current, fd) {
            (a, b) if a == b => return Ok(()),
            (Some(_), Some(_)) => return Err(std::io::Error::from_raw_os_error(libc::EBUSY)),
            (None, Some(fd)) => self.ring.submitter().register_eventfd(fd)?,
            (Some(_), None) => self.ring.submitter().unregister_eventfd()?,
            (None, None) => unreachable!("equal, handled above"),
        }
        *current = fd;
        Ok(())
    }

    /// The ring's fd: readable when completions wait in the CQ (for
    /// polled, non-IOPOLL rings, whose clients reap).
    pub(crate) fn fd(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.ring.as_raw_fd()
    }

    /// A read of `iov` at offset 0, waited for on this (poll) ring before
    /// any request uses it; returns the CQE's result.
    pub(crate) fn probe_read(&self, iov: &libc::iovec) -> i32 {
        const PROBE: u64 = u64::MAX - 1;
        let entry = match self.file {
            FileRef::Fixed => opcode::Readv::new(types::Fixed(0), iov, 1).build(),
            FileRef::Raw(fd) => opcode::Readv::new(types::Fd(fd), iov, 1).build(),
        };
        self.push(&entry.user_data(PROBE));
        let _g = self.cq_lock.lock();
        let mut got = Vec::new();
        loop {
            // SAFETY: submits the probe and polls for its completion; the
            // iovec outlives the call (we wait for the CQE).
            let r = unsafe { self.ring.submitter().enter::<libc::sigset_t>(1, 1, IORING_ENTER_GETEVENTS, None) };
            if let Err(e) = r {
                if e.raw_os_error() != Some(libc::EINTR) {
                    return -e.raw_os_error().unwrap_or(libc::EIO);
                }
            }
            self.drain_cq(&mut got);
            if let Some(&(_, res)) = got.iter().find(|(u, _)| *u == PROBE) {
                return res;
            }
        }
    }

    /// Stops the completion thread once everything queued before it ends.
    pub(crate) fn stop(&self) {
        self.push(&opcode::Nop::new().build().user_data(STOP));
        self.submit();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A request at this byte offset makes the completion thread panic on
    /// its CQE (one test uses it; no other test reads there).
    pub(crate) static PANIC_AT_OFFSET: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

    pub(super) fn maybe_inject_panic(ring: &Ring, tag: usize) {
        // SAFETY: the completion thread owns the tag of a CQE it reaped.
        let offset = unsafe { (*ring.slots[tag].get()).io.as_ref().map(|inf| inf.offset) };
        if offset.is_some() && offset == Some(PANIC_AT_OFFSET.load(Ordering::Relaxed)) {
            panic!("injected: the completion thread dies on the CQE of offset {offset:?}");
        }
    }

    /// A completion thread that panics fails nothing silently and hangs no
    /// one: the request whose CQE it was handling still ends (here with
    /// its real result), later requests fail at once, and the device drops.
    #[test]
    #[cfg_attr(miri, ignore = "Miri does not emulate io_uring")]
    fn a_dead_completion_thread_hangs_no_request() {
        use mqblk::{Bio, Buf, Device, Status};
        crate::register();
        let path = std::env::temp_dir().join(format!("mqblk-dead-cq-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 64 << 10]).unwrap();
        let dev = Device::open(&format!("file:path={}", path.display())).unwrap();
        let mut c = dev.client();
        let mut done = Vec::new();
        let timeout = Some(std::time::Duration::from_secs(30));
        PANIC_AT_OFFSET.store(8192, Ordering::Relaxed);
        c.submit(Bio::read(8192, Buf::new(4096)), 1).unwrap();
        assert_eq!(c.do_io(&mut done, 1, 1, timeout).unwrap(), 1, "the request being handled still ends");
        assert_eq!((done[0].user_data, done[0].status), (1, Status::Ok));
        assert_eq!(done[0].segs.as_slice()[0][..4], [7; 4]);
        done.clear();
        c.submit(Bio::read(0, Buf::new(4096)), 2).unwrap();
        assert_eq!(c.do_io(&mut done, 1, 1, timeout).unwrap(), 1, "a request after the death fails at once");
        assert_eq!((done[0].user_data, done[0].status), (2, Status::IoErr));
        drop(c);
        drop(dev);
        std::fs::remove_file(&path).unwrap();
    }
}
