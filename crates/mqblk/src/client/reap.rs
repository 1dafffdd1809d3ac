//! Reaping: how completions come back to a client (step 10 of the path of
//! one I/O in ARCHITECTURE.md). `do_io` pops the client's completion ring,
//! sleeping only when fewer than `min` are there; a client with polled I/O
//! polls its queue instead of sleeping. The completion eventfd and the poll
//! fd let event loops wait instead.
//!
//! Waking: a completion delivered from another thread wakes the client only
//! if it is really asleep in `do_io` (a `sleeping` flag checked after the
//! push; the client sets it before its last look at the ring: a Dekker pair,
//! so no wakeup is lost and no syscall is made when nobody sleeps). The
//! eventfd is armed the same way once the ring is drained.
//!
//! Relies on: completion.rs for the ring, the sleep and the eventfd;
//! queue/ for the hctx to poll; sync.rs for the fence.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::request::{ORIGIN_BLOCKING, ORIGIN_POLLED};
use crate::sync::{dekker_fence, Ordering};

use super::{Client, Completion};

/// Where `Client::do_io_each` hands each completion it reaps: any
/// `FnMut(Completion)`, or a type of the caller's.
///
/// ```
/// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
/// # ram::register();
/// use mqblk::{Bio, Buf, Completion, CompletionSink, Device};
///
/// /// Counts bytes read, keeping no completion. `do_io_each` takes the sink
/// /// by value: this one borrows the count, to keep it across calls.
/// struct BytesRead<'a>(&'a mut usize);
///
/// impl CompletionSink for BytesRead<'_> {
///     #[inline(always)]
///     fn complete(&mut self, c: Completion) {
///         *self.0 += c.segs.len_bytes() as usize;
///     }
/// }
///
/// let dev = Device::open("ram:size=64")?; // completed on ram's completion thread
/// let mut client = dev.client();
/// for i in 0..4 {
///     client.submit(Bio::read(i * 8192, Buf::new(8192)), i)?;
/// }
/// let (mut bytes, mut reaped) = (0, 0);
/// while reaped < 4 {
///     reaped += client.do_io_each(1, 4, None, BytesRead(&mut bytes))?;
/// }
/// assert_eq!(bytes, 4 * 8192);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait CompletionSink {
    /// Takes one reaped completion.
    fn complete(&mut self, c: Completion);
}

impl<F: FnMut(Completion)> CompletionSink for F {
    #[inline(always)]
    fn complete(&mut self, c: Completion) {
        self(c)
    }
}

impl Client {
    /// Reaps completions into `out`: at least `min` (sleeping as needed,
    /// at most `timeout`) and at most `max`. Returns how many were added;
    /// fewer than `min` only if the timeout passed. `min` may not exceed the
    /// I/Os in flight (it could never be met).
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use std::time::Duration;
    /// use mqblk::{Bio, Buf, Device};
    ///
    /// let dev = Device::open("ram:size=64")?; // completed on ram's completion thread
    /// let mut client = dev.client();
    /// for i in 0..3 {
    ///     client.submit(Bio::write(i * 4096, Buf::new(4096)), i)?;
    /// }
    /// let mut done = Vec::new();
    /// // min 0: a poll, never sleeps.
    /// let now = client.do_io(&mut done, 0, 16, None)?;
    /// // Then wait for the rest, at most 10 s.
    /// let rest = client.do_io(&mut done, 3 - now, 16, Some(Duration::from_secs(10)))?;
    /// assert_eq!(now + rest, 3);
    /// let mut cookies: Vec<u64> = done.iter().map(|c| c.user_data).collect();
    /// cookies.sort();
    /// assert_eq!(cookies, [0, 1, 2]);
    /// assert!(client.do_io(&mut done, 1, 1, None).is_err(), "nothing in flight to wait for");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn do_io(
        &mut self,
        out: &mut Vec<Completion>,
        min: usize,
        max: usize,
        timeout: Option<Duration>,
    ) -> Result<usize, Error> {
        self.do_io_each(min, max, timeout, |c| out.push(c))
    }

    /// As [`do_io`](Self::do_io), handing each completion to `each` as it
    /// is reaped instead of collecting them: for a caller that keeps its
    /// own array (the C library writes straight into the caller's
    /// `struct blkio_completion` array, with no vector in between). On an
    /// error nothing has been reaped.
    ///
    /// `each` is a closure, or any [`CompletionSink`]: a type of the
    /// caller's whose `complete` is `#[inline(always)]` is then inlined into
    /// the reaping loop (a closure is a call per completion unless the
    /// compiler chooses otherwise, and it moves each completion once more).
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use mqblk::{Bio, Buf, Device};
    ///
    /// let dev = Device::open("ram:size=64,irqmode=0")?;
    /// let mut client = dev.client();
    /// client.submit(Bio::write(0, Buf::new(4096)), 1)?;
    /// let mut ok = 0;
    /// client.do_io_each(1, 8, None, |c: mqblk::Completion| ok += usize::from(c.status.is_ok()))?;
    /// assert_eq!(ok, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A sink type of the caller's: see [`CompletionSink`].
    #[inline]
    pub fn do_io_each(
        &mut self,
        min: usize,
        max: usize,
        timeout: Option<Duration>,
        mut each: impl CompletionSink,
    ) -> Result<usize, Error> {
        if min > max || min > self.in_flight {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("do_io: min={min} exceeds max={max} or the {} I/Os in flight", self.in_flight),
            )));
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        if min == 0 && self.polled_outstanding > 0 {
            // A pure poll (e.g. after `poll_fd` fired) reaps the queue our
            // polled I/O waits on, without sleeping.
            if let Some(poll) = self.poll_hctx {
                // Our own completions reaped here come back without the
                // ring (completion.rs `deliver`), and need no eventfd
                // write: we take them below, and `reap_ring` re-arms the
                // fd once the ring is drained.
                self.disarm_completion_fd();
                let _mark = self.shared.mark_owner();
                self.q.hctx(poll).reap();
            }
        }
        let mut got = 0;
        if !self.backlog.is_empty() {
            // Through `dyn`, so that `each` has one static call site (in
            // reap_ring) and can be inlined there.
            got = self.drain_backlog(&mut each, max);
        }
        loop {
            got += self.reap_ring(&mut each, max - got);
            if got >= min || got == max {
                break; // min == 0 makes this a pure poll
            }
            let remaining = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(r) if !r.is_zero() => Some(r),
                    _ => break,
                },
                None => None,
            };
            self.sleep_for_completions(remaining);
        }
        self.in_flight -= got;
        self.stats.completed += got as u64;
        Ok(got)
    }

    /// Hands up to `max` completions of blocking calls' backlog to `each`.
    #[cold]
    fn drain_backlog(&mut self, each: &mut dyn CompletionSink, max: usize) -> usize {
        let mut got = 0;
        while got < max {
            let Some(c) = self.backlog.pop_front() else { break };
            each.complete(c);
            got += 1;
        }
        got
    }

    /// Hands up to `max` user completions from the ring to `each`.
    #[inline]
    pub(super) fn reap_ring(&mut self, each: &mut impl CompletionSink, max: usize) -> usize {
        let mut got = 0;
        while got < max {
            // SAFETY: `&mut self`: this client is the ring's only consumer.
            let Some(c) = (unsafe { self.shared.take() }) else {
                if self.rearm_notify() {
                    continue;
                }
                break;
            };
            if c.slot != 0 {
                self.free_slots.push(c.slot - 1);
            }
            if c.origin & ORIGIN_POLLED != 0 {
                self.polled_outstanding -= 1;
                self.hybrid_slept = false;
            }
            if c.origin & !ORIGIN_POLLED == ORIGIN_BLOCKING {
                self.blocking_done = Some(c);
                continue;
            }
            each.complete(c);
            got += 1;
        }
        got
    }

    /// Stops the completion eventfd from firing until the next `do_io`
    /// drains the ring and arms it again. For an event loop that is awake
    /// and will call `do_io` before it sleeps: completions delivered
    /// meanwhile (a driver that completes inline, during `submit`) then
    /// cost no eventfd write, and the loop no wakeup. A completer racing
    /// with this may still signal once: a spurious wakeup.
    pub fn disarm_completion_fd(&self) {
        if self.notify && self.shared.notify_armed.load(Ordering::Relaxed) {
            self.shared.notify_armed.store(false, Ordering::Relaxed);
        }
    }

    /// With an eventfd, arm it once the ring is drained; returns true if a
    /// completion slipped in meanwhile (so the caller keeps reaping).
    fn rearm_notify(&self) -> bool {
        if !self.notify {
            return false;
        }
        self.shared.notify_armed.store(true, Ordering::SeqCst);
        dekker_fence();
        // SAFETY: `&self` of the owning client, on its thread.
        unsafe { self.shared.has_ready() }
    }

    pub(super) fn sleep_for_completions(&mut self, timeout: Option<Duration>) {
        // Never sleep on I/O held in our own plug.
        self.plug.flush_before_sleep(&self.q, &self.shared.counters);
        if let (Some(poll), true) = (self.poll_hctx, self.polled_outstanding > 0) {
            // Polled I/O completes only when we poll: reap instead of
            // sleeping (the caller loops, re-checking its ring and timeout).
            // Hybrid polling sleeps first, once per wait, then spins.
            let delay = self.q.hybrid_poll_delay();
            if !delay.is_zero() && !self.hybrid_slept {
                self.hybrid_slept = true;
                self.stats.completion_sleeps += 1;
                // A sleep of a few us is worth it only if it is not
                // stretched by the default 50 us timer slack (the kernel's
                // hybrid poll used an hrtimer without slack): this thread
                // sleeps precisely from now on.
                crate::clock::set_precise_timer_slack();
                std::thread::sleep(delay.min(timeout.unwrap_or(delay)));
            }
            // As in `do_io_each`: what we poll, we take ourselves.
            self.disarm_completion_fd();
            let _mark = self.shared.mark_owner();
            if self.q.hctx(poll).poll() == 0 {
                std::hint::spin_loop();
            }
            return;
        }
        // Never sleep on tags granted to us (handoff policy) and not used.
        self.release_granted();
        // SAFETY: the owning client, on its thread.
        if unsafe { self.shared.sleep_until_delivery(timeout) } {
            self.stats.completion_sleeps += 1;
        }
    }

    /// An eventfd that becomes readable when completions are ready. After it
    /// fires, read it and call `do_io` (min 0) until it returns fewer than
    /// asked: draining the ring re-arms the notification. Hipri I/O on
    /// poll queues completes only inside `do_io` (somebody must poll), so
    /// it makes the eventfd fire only when another client reaped it.
    ///
    /// A device whose submitters reap (file `reap=client`) also completes
    /// I/O only inside `do_io`: wait on `poll_fd` as well (the NBD server
    /// does), or ask for `standalone_completion_fd` instead.
    ///
    /// The fd belongs to the device (it stays open until the device is
    /// dropped, and a later client may be given it): do not close it.
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use mqblk::{Bio, Buf, Device};
    ///
    /// let dev = Device::open("ram:size=64,irqmode=0")?;
    /// let mut client = dev.client();
    /// let fd = client.completion_fd()?;
    /// // A device whose submitters do not reap: one fd is enough, and
    /// // there is no poll fd to wait on beside it.
    /// assert_eq!(client.standalone_completion_fd()?, fd);
    /// assert_eq!(client.poll_fd(), None);
    ///
    /// client.submit(Bio::write(0, Buf::new(4096)), 1)?;
    /// // An event loop waits for the fd, reads it, then reaps with min 0.
    /// let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    /// // SAFETY: one valid pollfd.
    /// assert_eq!(unsafe { libc::poll(&mut pfd, 1, 10_000) }, 1);
    /// let mut count = 0u64;
    /// // SAFETY: an eventfd is read 8 bytes at a time, into a u64.
    /// assert_eq!(unsafe { libc::read(fd, (&mut count as *mut u64).cast(), 8) }, 8);
    /// let mut done = Vec::new();
    /// assert_eq!(client.do_io(&mut done, 0, 16, None)?, 1);
    ///
    /// // Awake and about to reap anyway: completions need not signal.
    /// client.disarm_completion_fd();
    /// client.submit(Bio::write(0, Buf::new(4096)), 2)?;
    /// assert_eq!(client.do_io(&mut done, 0, 16, None)?, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn completion_fd(&mut self) -> Result<RawFd, Error> {
        self.completion_fd_inner(false)
    }

    /// As `completion_fd`, but an fd that is enough to wait on alone, even
    /// on a device whose submitters reap (libblkio's completion fd): there
    /// it is registered with the ring this client reaps (the file driver's
    /// IORING_REGISTER_EVENTFD), so the kernel signals it for every
    /// completion on that ring. A ring signals one fd: a second client on
    /// the same ring gets `Error::Busy` (give each client its own ring:
    /// file `submit_queues`). Elsewhere it is the same fd as
    /// `completion_fd`'s (example: [`Client::completion_fd`]).
    pub fn standalone_completion_fd(&mut self) -> Result<RawFd, Error> {
        self.completion_fd_inner(true)
    }

    fn completion_fd_inner(&mut self, standalone: bool) -> Result<RawFd, Error> {
        let fd = self.shared.eventfd().map_err(Error::Io)?;
        if standalone && !self.notify_registered {
            if let Some(poll) = self.poll_hctx.filter(|_| self.q.submitter_reaps()) {
                self.q.hctx(poll).set_notify_fd(Some(fd))?;
                self.notify_registered = true;
            }
        }
        if !self.notify {
            self.notify = true;
            self.shared.notify_armed.store(true, Ordering::SeqCst);
            // Completions already queued must be signalled too.
            // SAFETY: the owning client, on its thread.
            if unsafe { self.shared.has_ready() } && self.shared.notify_armed.swap(false, Ordering::SeqCst) {
                self.shared.signal();
            }
        }
        Ok(fd)
    }

    /// For a client whose I/O is polled (file `reap=client`): an fd that
    /// becomes readable when the queue it polls has completions; when it
    /// does, call `do_io` with min 0, which reaps that queue without
    /// sleeping. Wait on it beside `completion_fd` (a completion another
    /// client reaped for us signals the eventfd). None when the device
    /// has no such fd (polling there means calling `do_io`; example:
    /// [`Client::completion_fd`]).
    pub fn poll_fd(&self) -> Option<RawFd> {
        let poll = self.poll_hctx?;
        self.q.submitter_reaps().then(|| self.q.hctx(poll).poll_fd()).flatten()
    }

    /// Waits for every outstanding I/O and drops the completions (example:
    /// [`Client`]).
    pub fn drain(&mut self) {
        let mut sink = Vec::with_capacity(self.capacity());
        while self.in_flight > 0 {
            sink.clear();
            let _ = self.do_io(&mut sink, 1, usize::MAX, None);
        }
    }
}
