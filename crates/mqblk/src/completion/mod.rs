//! The completion side of a client: what completers reach.
//!
//! A [`ClientShared`] (one per client, owned by the queue for its whole life
//! and recycled between clients) holds the client's completion ring, how to
//! wake it, its bio slots and its counters. A [`BioSlot`] holds a bio that
//! needs storage beyond its request: the parent of a split bio (its buffer
//! and the count of pieces left), or a bio merged into another bio's request
//! (its buffer, cookie and place in the request's chain of bios).
//!
//! Relies on: ring.rs for the completion ring; sync.rs for sleeping;
//! batch.rs for a completer's deferred wakeups.

use std::os::fd::RawFd;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::buf::BioVec;
use crate::status::Status;
use crate::sync::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize, Ordering, SleepGate, UnsafeCell};
use mqblk_sync::ring::MpscRing;

mod batch;
mod counters;

pub use batch::CompletionBatch;
pub use counters::RwCount;
pub(crate) use counters::{ClientCounters, CounterTotals};

/// Where a completion goes: to the user (`do_io` returns it)...
pub(crate) const ORIGIN_USER: u8 = 0;
/// ... or to the blocking helpers (`read_at`/`write_at`), which the client
/// consumes itself and never returns from `do_io`.
pub(crate) const ORIGIN_BLOCKING: u8 = 1;
/// Or-ed into the origin of a bio submitted to a poll queue: its
/// completion arrives only when its client polls.
pub(crate) const ORIGIN_POLLED: u8 = 0x80;

/// One finished I/O, as `do_io` returns it: the cookie given at
/// submission, how it ended, and the bio's segments back (one buffer:
/// `segs.into_buf()`; a vector: `segs.into_vec()`).
///
/// ```
/// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
/// # ram::register();
/// use mqblk::{Bio, Buf, Device, Status};
///
/// let dev = Device::open("ram:size=64,irqmode=0,memory_backed=1")?;
/// let mut client = dev.client();
/// client.write_at(&[6; 4096], 0)?;
/// client.submit(Bio::read(0, Buf::new(4096)), 42)?;
/// let mut done = Vec::new();
/// client.do_io(&mut done, 1, 1, None)?;
/// let read = done.pop().unwrap();
/// assert_eq!((read.user_data, read.status), (42, Status::Ok));
/// assert_eq!(read.segs.into_buf().unwrap()[..], [6; 4096], "the read's buffer, filled");
/// assert_eq!(read.append_offset, None, "not a zone append");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Completion {
    /// The cookie given at submission.
    pub user_data: u64,
    /// How the I/O ended.
    pub status: Status,
    /// The bio's segments, given back (reads: filled with the data).
    pub segs: BioVec,
    /// Zone append: the byte offset the data was written at (where the
    /// zone's write pointer was).
    pub append_offset: Option<u64>,
    pub(crate) origin: u8,
    /// Bio slot + 1 this bio used (0: none), recycled at reap.
    pub(crate) slot: u32,
}

impl Completion {
    #[inline(always)]
    pub(crate) fn new(user_data: u64, status: Status, segs: BioVec, origin: u8) -> Self {
        Self { user_data, status, segs, append_offset: None, origin, slot: 0 }
    }
}

/// The non-atomic part of a bio slot: written by the owning client before
/// the bio is issued (or merged), read by one completer afterwards.
pub(crate) struct BioSlotData {
    pub(crate) user_data: u64,
    pub(crate) origin: u8,
    /// A split parent's segments (its pieces view them), or a merged
    /// bio's own.
    pub(crate) segs: BioVec,
    /// Merged bio: where it starts and how long it is (512-byte sectors).
    pub(crate) sector: u64,
    pub(crate) nr_sectors: u32,
    /// Merged bio: the sink to complete it to (the slot's own table's).
    pub(crate) owner: *const ClientShared,
    /// Merged bio: the next bio of the request's chain (null: last).
    pub(crate) next: *const BioSlot,
}

/// Storage for one outstanding bio of a client beyond its request. See the
/// module header for the two uses; a bio is never both split and merged.
pub(crate) struct BioSlot {
    index: u32,
    /// Split parent: pieces not yet completed.
    remaining: AtomicU32,
    /// Split parent: the first error (0: none).
    status: AtomicU8,
    data: UnsafeCell<BioSlotData>,
}

// SAFETY: `data` is written by the owning client while it alone knows the
// slot (before the bio's first request is issued, or before the request it
// is merged into is flushed from the plug), then read by exactly one
// completer: for a split parent, the one whose AcqRel fetch_sub on
// `remaining` took it to zero; for a merged bio, the owner of the request
// that carries it. Issue and completion hand requests over with
// Release/Acquire (the driver path), so the writes happen before. The raw
// pointers point at queue-owned sinks and their slots, which live as long as
// the queue.
unsafe impl Sync for BioSlot {}
// SAFETY: as above; nothing in a slot is tied to a thread.
unsafe impl Send for BioSlot {}

impl BioSlot {
    fn new(index: u32) -> Self {
        Self {
            index,
            remaining: AtomicU32::new(0),
            status: AtomicU8::new(0),
            data: UnsafeCell::new(BioSlotData {
                user_data: 0,
                origin: ORIGIN_USER,
                segs: BioVec::new(),
                sector: 0,
                nr_sectors: 0,
                owner: std::ptr::null(),
                next: std::ptr::null(),
            }),
        }
    }

    /// Reads the slot's data inside `f`. The reference cannot escape `f`,
    /// so two readers never hold a `&mut` beside a `&`.
    ///
    /// # Safety
    /// The caller is the slot's current user as described on the `Sync`
    /// impl (no one writes the data meanwhile).
    #[inline]
    pub(crate) unsafe fn with_data<R>(&self, f: impl FnOnce(&BioSlotData) -> R) -> R {
        // SAFETY: forwarded contract: no concurrent writer. (Under loom the
        // access is recorded here, so unordered uses show up as races.)
        self.data.with(|p| f(unsafe { &*p }))
    }

    /// Changes the slot's data inside `f`.
    ///
    /// # Safety
    /// The caller is the slot's current user as described on the `Sync`
    /// impl, and holds no other reference to the data while `f` runs (`f`
    /// must not reach this slot again).
    #[inline]
    pub(crate) unsafe fn with_data_mut<R>(&self, f: impl FnOnce(&mut BioSlotData) -> R) -> R {
        // SAFETY: forwarded contract: exclusive use for the closure's span.
        self.data.with_mut(|p| f(unsafe { &mut *p }))
    }

    /// Prepares the slot as the parent of a bio split into `pieces`,
    /// keeping its segments; returns their array, which the pieces' views
    /// read (it stays put until the last piece completes: in this slot, a
    /// vector's heap array, or the caller's iovecs). None without segments.
    ///
    /// # Safety
    /// The owning client calls this before issuing any piece.
    pub(crate) unsafe fn start_split(
        &self,
        pieces: u32,
        user_data: u64,
        origin: u8,
        segs: BioVec,
    ) -> Option<crate::buf::SegArrayRaw> {
        self.remaining.store(pieces, Ordering::Relaxed);
        self.status.store(0, Ordering::Relaxed);
        // SAFETY: forwarded contract: no piece is in flight yet.
        unsafe {
            self.with_data_mut(|d| {
                d.user_data = user_data;
                d.origin = origin;
                d.segs = segs;
                d.segs.seg_array_raw()
            })
        }
    }

    /// Ends a merged bio: delivers its completion and returns the next bio
    /// of the chain.
    ///
    /// # Safety
    /// The caller owns the request this bio was merged into, and it is
    /// being completed.
    pub(crate) unsafe fn complete_merged(&self, status: Status) -> *const BioSlot {
        // SAFETY: forwarded contract: the request's owner is the slot's user.
        // Everything is copied out before delivering: the slot may be reused
        // as soon as the completion is delivered.
        let (next, owner, mut c) = unsafe {
            self.with_data_mut(|d| (d.next, d.owner, Completion::new(d.user_data, status, d.segs.take(), d.origin)))
        };
        c.slot = self.index + 1;
        // SAFETY: owners are queue-owned sinks (see BioSlotData::owner).
        unsafe { &*owner }.deliver(c);
        next
    }
}

/// A sink's queue of inline completions: a plain ring (no atomics: one
/// thread at a time) that never grows, since a client has at most the
/// completion ring's capacity of completions outstanding.
struct LocalRing {
    slots: Box<[std::mem::MaybeUninit<Completion>]>,
    head: usize,
    len: usize,
}

impl LocalRing {
    fn new(capacity: usize) -> Self {
        assert!(capacity.is_power_of_two());
        Self { slots: (0..capacity).map(|_| std::mem::MaybeUninit::uninit()).collect(), head: 0, len: 0 }
    }

    /// Appends `make()`'s completion, made in place.
    #[inline(always)]
    fn push(&mut self, make: impl FnOnce() -> Completion) {
        assert!(self.len < self.slots.len(), "completion ring overflow: client in-flight accounting is broken");
        let i = (self.head + self.len) & (self.slots.len() - 1);
        self.slots[i].write(make());
        self.len += 1;
    }

    #[inline(always)]
    fn pop(&mut self) -> Option<Completion> {
        if self.len == 0 {
            return None;
        }
        let i = self.head;
        self.head = (i + 1) & (self.slots.len() - 1);
        self.len -= 1;
        // SAFETY: slots from `head` for `len` hold values pushed and not
        // yet popped; this one leaves the ring here.
        Some(unsafe { self.slots[i].assume_init_read() })
    }
}

impl Drop for LocalRing {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

/// The calling thread's identity, never 0: the thread pointer. On x86_64
/// Linux one load: the x86-64 TLS ABI puts the thread control block's
/// pointer to itself at %fs:0 (what `pthread_self` returns). Elsewhere
/// (and under Miri) `pthread_self`, a libc call. A thread-local would do
/// too, but in a shared library (the C layer) each access is a
/// `__tls_get_addr` call. Under loom, whose threads share an OS thread, a
/// loom thread-local id.
#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
#[inline(always)]
fn current_thread() -> usize {
    let tp: usize;
    // SAFETY: reads the word at %fs:0, which the TLS ABI maps for every
    // thread (the TCB's self-pointer); no memory is written.
    unsafe {
        std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags, pure))
    };
    tp
}

#[cfg(all(not(all(target_arch = "x86_64", target_os = "linux", not(miri))), not(loom)))]
#[inline(always)]
fn current_thread() -> usize {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as usize }
}

#[cfg(loom)]
fn current_thread() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    loom::thread_local! {
        static ID: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ID.with(|id| *id)
}

/// A sink's mark of the thread running a call of its owning client
/// (`mark_owner`); dropping it restores the previous mark, also when a
/// panic unwinds.
pub(crate) struct OwnerMark {
    sink: *const ClientShared,
    prev: usize,
}

impl Drop for OwnerMark {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: the marking client holds the sink (an Arc) for longer
        // than the mark, a local of its call.
        unsafe { &*self.sink }.submitter.store(self.prev, Ordering::Relaxed);
    }
}

/// The part of a client that completers reach: its completion ring and how
/// to wake it. Owned by the queue for the queue's whole life (recycled
/// between clients), so a completer can never touch a freed one.
pub(crate) struct ClientShared {
    ring: MpscRing<Completion>,
    /// Completions delivered on the owning client's own thread while it
    /// submits (a driver that completes inline, inside `queue_rq`) or polls
    /// its queue in `do_io`: no other thread can be reaping then, so they
    /// need none of the ring's atomics and no wakeup. Touched only by the
    /// thread of a call on the owning client (see `OwnerMark`); reaped
    /// before the ring. Bounded by the ring's capacity like every
    /// completion, so it never grows.
    local: UnsafeCell<LocalRing>,
    /// The thread running a call of the owning client (its
    /// `current_thread`; 0: none): see `mark_owner`.
    submitter: AtomicUsize,
    slots: Box<[BioSlot]>,
    gate: SleepGate,
    /// The completion eventfd, made when a client first asks for it. It
    /// belongs to the sink, not to the client: a completer that has just
    /// pushed a completion may signal it after the client is gone, so it is
    /// closed only with the sink, when the queue drops and no completer can
    /// reach it (a client closing it could let the fd number be reused, and
    /// the late signal would write 8 bytes into someone else's file).
    eventfd: std::sync::OnceLock<std::os::fd::OwnedFd>,
    /// The next completion must signal `eventfd`.
    pub(crate) notify_armed: AtomicBool,
    /// On its own line: written per I/O by the client, never by completers.
    pub(crate) counters: CachePadded<ClientCounters>,
    /// The client's tag waiter, so that a queue freeze can give back tags
    /// a handoff granted it in advance while it is outside the door.
    pub(crate) waiter: crate::sync::Mutex<Option<crate::sync::Arc<crate::sbitmap::SbqWaiter>>>,
}

// SAFETY: every field is Sync but `local`, which only the thread running a
// call of the owning client touches (the client is `&mut` and belongs to
// one thread at a time): `deliver` under that thread's mark (`submitter`),
// `take` and `has_ready` by their contracts.
unsafe impl Sync for ClientShared {}

impl ClientShared {
    pub(crate) fn new(capacity: usize) -> Self {
        let ring = MpscRing::new(capacity);
        let slots = (0..ring.capacity() as u32).map(BioSlot::new).collect();
        let local = UnsafeCell::new(LocalRing::new(ring.capacity()));
        Self {
            ring,
            local,
            submitter: AtomicUsize::new(0),
            slots,
            gate: SleepGate::default(),
            eventfd: std::sync::OnceLock::new(),
            notify_armed: AtomicBool::new(false),
            counters: CachePadded::new(ClientCounters::default()),
            waiter: crate::sync::Mutex::new(None),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    pub(crate) fn slot(&self, index: u32) -> &BioSlot {
        &self.slots[index as usize]
    }

    /// Consumer: is a completion ready?
    ///
    /// # Safety
    /// Only the owning client (one thread at a time) may call this.
    pub(crate) unsafe fn has_ready(&self) -> bool {
        // SAFETY: forwarded contract: the owner's thread is the only one
        // that touches `local` (see `deliver`).
        !unsafe { self.local.with(|l| (*l).len == 0) } || self.ring.has_ready()
    }

    /// Consumer: sleeps until a completion is delivered (or `timeout`),
    /// unless one is already there. Returns true if it slept.
    ///
    /// # Safety
    /// Only the owning client (one thread at a time) may call this.
    pub(crate) unsafe fn sleep_until_delivery(&self, timeout: Option<Duration>) -> bool {
        // SAFETY: forwarded contract (the check runs on the caller's thread).
        self.gate.sleep_unless(|| unsafe { self.has_ready() }, timeout)
    }

    /// Consumer: the next completion, if any: inline ones first.
    ///
    /// # Safety
    /// Only the owning client (one thread at a time) may call this.
    #[inline(always)]
    pub(crate) unsafe fn take(&self) -> Option<Completion> {
        // SAFETY: forwarded contract: the owner's thread alone touches
        // `local`, and it is the ring's single consumer.
        unsafe { self.local.with_mut(|l| (*l).pop()).or_else(|| self.ring.pop()) }
    }

    /// Marks the calling thread as running a call of this sink's owning
    /// client (a submission, or a poll of its queue in `do_io`) until the
    /// mark drops: completions for this sink delivered meanwhile on this
    /// thread go to `local`.
    #[inline(always)]
    pub(crate) fn mark_owner(&self) -> OwnerMark {
        // Only the owning client's thread writes its own identity here, so
        // a completer that reads its own is that thread, inside the call
        // (any other thread reads 0 or the owner's).
        // (A plain load and store, no RMW: only the owning client writes.)
        let prev = self.submitter.load(Ordering::Relaxed);
        self.submitter.store(current_thread(), Ordering::Relaxed);
        OwnerMark { sink: self, prev }
    }

    /// One piece of split bio `index` completed with `status`; the last one
    /// to complete delivers the bio's completion.
    ///
    /// The bio's status is the kernel's: the last piece is the parent of
    /// the chain (bio_split + bio_chain), and its own error overrides; the
    /// other pieces' first error (in completion order) stands otherwise.
    #[cold]
    #[inline(never)]
    pub(crate) fn piece_done(&self, index: u32, status: Status, last_piece: bool) {
        let slot = &self.slots[index as usize];
        if status != Status::Ok {
            if last_piece {
                slot.status.store(status as u8, Ordering::Release);
            } else {
                let _ = slot.status.compare_exchange(0, status as u8, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
        if slot.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let status = Status::from_u8(slot.status.load(Ordering::Acquire));
        // SAFETY: the last piece's completer is the slot's user (see BioSlot).
        let mut c = unsafe { slot.with_data_mut(|d| Completion::new(d.user_data, status, d.segs.take(), d.origin)) };
        c.slot = index + 1;
        self.deliver(c);
    }

    /// Hands a completion to the client and wakes it if it sleeps.
    #[inline(always)]
    pub(crate) fn deliver(&self, completion: Completion) {
        if self.marked() {
            // SAFETY: `marked`: this thread runs a call of the owning client.
            unsafe { self.push_local(|| completion) };
            return;
        }
        if self.ring.push(completion).is_err() {
            // The client never has more bios outstanding than the ring holds.
            panic!("completion ring overflow: client in-flight accounting is broken");
        }
        if batch::defer_wakeup(self) {
            return; // woken when the completer's batch ends (batch.rs)
        }
        self.wake();
    }

    /// Wakes the client if it sleeps, and signals its eventfd if armed:
    /// after a completion is in the ring.
    #[inline(always)]
    fn wake(&self) {
        self.gate.notify();
        self.notify_if_armed();
    }

    /// Does this thread run a call of the owning client (its
    /// `OwnerMark`)?
    #[inline(always)]
    fn marked(&self) -> bool {
        self.submitter.load(Ordering::Relaxed) == current_thread()
    }

    /// Delivers to `local` (the client is awake: it is us).
    ///
    /// # Safety
    /// `marked()`: the calling thread runs a call of the owning client,
    /// which holds it `&mut`, so no other thread touches `local`.
    #[inline(always)]
    unsafe fn push_local(&self, make: impl FnOnce() -> Completion) {
        // SAFETY: forwarded contract.
        unsafe { self.local.with_mut(|l| (*l).push(make)) };
        self.notify_if_armed();
    }

    /// If this thread runs a call of the owning client (its
    /// `OwnerMark`), delivers `make()`'s completion to `local` and
    /// returns true: the client is awake (it is us), so it needs no
    /// wakeup, and no other thread reaps or delivers to `local` meanwhile.
    /// The completion is made only then, so a caller can build it straight
    /// in place.
    #[inline(always)]
    pub(crate) fn deliver_local(&self, make: impl FnOnce() -> Completion) -> bool {
        if !self.marked() {
            return false;
        }
        // SAFETY: `marked`: this thread runs a call of the owning client.
        unsafe { self.push_local(make) };
        true
    }

    /// Signals the completion eventfd if it is armed.
    #[inline(always)]
    fn notify_if_armed(&self) {
        // A load first: a client without an armed eventfd costs no RMW.
        if self.notify_armed.load(Ordering::SeqCst) && self.notify_armed.swap(false, Ordering::SeqCst) {
            self.signal();
        }
    }

    /// The sink's completion eventfd, made on first use (by the owning
    /// client: one thread at a time).
    pub(crate) fn eventfd(&self) -> std::io::Result<RawFd> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        if let Some(fd) = self.eventfd.get() {
            return Ok(fd.as_raw_fd());
        }
        // SAFETY: plain syscall; the returned fd is checked below.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(self.eventfd.get_or_init(|| fd).as_raw_fd())
    }

    /// Signals the eventfd (made before it was armed).
    pub(crate) fn signal(&self) {
        use std::os::fd::AsRawFd;
        let Some(fd) = self.eventfd.get() else { return };
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the sink's own eventfd,
        // open as long as the sink; an error (counter overflow, impossible
        // in practice) leaves the fd readable.
        unsafe {
            libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    /// Disarms the eventfd and consumes any pending signal, so that the
    /// next client of this sink starts with a quiet fd (a completer of the
    /// previous client may still signal it late: a spurious wakeup, which
    /// eventfd users must tolerate anyway).
    ///
    /// The fd was handed out, and its user may have made it blocking (fio's
    /// libblkio engine clears O_NONBLOCK on it), so it is read only when
    /// poll(2) says it is readable: a read of an empty blocking eventfd
    /// would hang this drop forever. Completers only add to the count and
    /// this is the only reader left, so readable stays readable.
    pub(crate) fn quiet_eventfd(&self) {
        use std::os::fd::AsRawFd;
        self.notify_armed.store(false, Ordering::SeqCst);
        let Some(fd) = self.eventfd.get() else { return };
        // Miri has no poll(2); its eventfds stay as made, non-blocking.
        #[cfg(not(miri))]
        {
            let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd; a timeout of 0 only looks.
            if unsafe { libc::poll(&mut pfd, 1, 0) } != 1 {
                return;
            }
        }
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our eventfd, which
        // poll found readable (or, under Miri, non-blocking), so the read
        // does not block.
        unsafe {
            libc::read(fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8);
        }
    }
}
