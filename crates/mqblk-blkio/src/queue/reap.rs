//! `blkioq_do_io`: collecting a queue's completions into the caller's
//! array. The common call (no timeout, no signal mask, nothing completed
//! at submission) settles each of the client's completions straight into
//! the array as it is reaped; the others gather first, so that a call that
//! times out or fails loses nothing.
//!
//! Relies on: mqblk's Client (do_io, do_io_each, CompletionSink);
//! inflight.rs to settle.

use std::ffi::{c_int, c_void, CString};
use std::time::{Duration, Instant};

use mqblk::{Completion, CompletionSink};

use super::inflight::Inflight;
use super::{blkio_completion, Queue, SIGNAL_CHECK_SLICE};
use crate::{fail, failed, Failure};

/// A finished request waiting for `do_io`.
pub(super) struct Ready {
    pub(super) user_data: *mut c_void,
    pub(super) ret: c_int,
    pub(super) msg: Option<CString>,
}

impl Queue {
    pub(super) fn outstanding(&self) -> usize {
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
        for c in reaped.drain(..).rev() {
            let (user_data, ret, msg) = self.inflight.settle(c);
            self.ready.push_front(Ready { user_data, ret, msg });
        }
        self.reaped = reaped;
        while let Some(r) = self.staged.pop() {
            self.ready.push_front(r);
        }
    }

    /// `blkioq_do_io`: the number of completions written to `out`, or a
    /// negative errno with the message set.
    #[inline(always)]
    pub(super) fn do_io(
        &mut self,
        out: *mut blkio_completion,
        min: c_int,
        max: c_int,
        timeout: *mut libc::timespec,
        sig: Option<&libc::sigset_t>,
    ) -> c_int {
        if min < 0 || max < min || (out.is_null() && max > 0) || min as usize > self.outstanding() {
            return failed(self.bad_do_io(out, min, max));
        }
        // The messages the last call returned live until this one.
        self.inflight.forget_messages();
        if timeout.is_null() && sig.is_none() && self.ready.is_empty() {
            return self.do_io_direct(out, min as usize, max as usize);
        }
        self.do_io_gathering(out, min as usize, max as usize, timeout, sig).unwrap_or_else(failed)
    }

    /// `do_io` with a timeout, a signal mask or requests completed at
    /// submission: gathers first, so that a call that times out or fails
    /// loses nothing.
    #[inline(never)]
    fn do_io_gathering(
        &mut self,
        out: *mut blkio_completion,
        min: usize,
        max: usize,
        timeout: *mut libc::timespec,
        sig: Option<&libc::sigset_t>,
    ) -> Result<c_int, Failure> {
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
            let error_msg = self.inflight.keep_message(r.msg);
            // SAFETY: i < n <= max, and `out` holds max writable completions.
            unsafe { out.add(i).write(completion(r.user_data, r.ret, error_msg)) };
            i += 1;
        }
        self.staged = staged;
        let mut reaped = std::mem::take(&mut self.reaped);
        for c in reaped.drain(..) {
            let (user_data, ret, msg) = self.inflight.settle(c);
            let error_msg = self.inflight.keep_message(msg);
            // SAFETY: as above.
            unsafe { out.add(i).write(completion(user_data, ret, error_msg)) };
            i += 1;
        }
        self.reaped = reaped;
        Ok(n as c_int)
    }

    /// Why `do_io`'s arguments were refused (out of line: the checks that
    /// pass cost only their compares).
    #[cold]
    #[inline(never)]
    fn bad_do_io(&self, out: *mut blkio_completion, min: c_int, max: c_int) -> Failure {
        let msg = if min < 0 || max < min {
            format!("blkioq_do_io: min_completions={min}, max_completions={max}")
        } else if out.is_null() && max > 0 {
            "blkioq_do_io: completions is NULL but max_completions > 0".into()
        } else {
            let outstanding = self.outstanding();
            format!("blkioq_do_io: min_completions={min} exceeds the {outstanding} requests outstanding")
        };
        Failure { errno: libc::EINVAL, msg }
    }

    /// `do_io` without a timeout, a signal mask or requests completed at
    /// submission (the common case): each of the client's completions is
    /// settled and written to the caller's array as it is reaped.
    #[inline(always)]
    fn do_io_direct(&mut self, out: *mut blkio_completion, min: usize, max: usize) -> c_int {
        debug_assert!(self.reaped.is_empty() && self.staged.is_empty());
        // SAFETY: `out` holds `max` writable completions (null only if
        // `max` is 0): one past its end is in bounds or the same pointer.
        let end = unsafe { out.add(max) };
        let sink = IntoArray { inflight: &mut self.inflight, next: out, end };
        match self.client.do_io_each(min, max, None, sink) {
            Ok(n) => n as c_int,
            // do_io_each reaps nothing when it fails.
            Err(e) => failed(Failure { errno: e.errno(), msg: format!("blkioq_do_io: {e}") }),
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

/// Settles each completion the client reaps straight into the caller's
/// array: a sink type whose `complete` is inlined into mqblk's reaping
/// loop (a closure would be a call per completion and one more move of
/// it). Three words, as mqblk keeps it in memory.
struct IntoArray<'a> {
    inflight: &'a mut Inflight,
    /// Where the next completion goes, and the end of the caller's array.
    next: *mut blkio_completion,
    end: *mut blkio_completion,
}

impl CompletionSink for IntoArray<'_> {
    #[inline(always)]
    fn complete(&mut self, c: Completion) {
        let (user_data, ret, msg) = self.inflight.settle(c);
        let error_msg = self.inflight.keep_message(msg);
        assert!(self.next < self.end, "the client handed out more than max completions");
        // SAFETY: next < end: inside the caller's array of writable completions.
        unsafe {
            self.next.write(completion(user_data, ret, error_msg));
            self.next = self.next.add(1);
        }
    }
}

fn completion(user_data: *mut c_void, ret: c_int, error_msg: *const libc::c_char) -> blkio_completion {
    blkio_completion { user_data, error_msg, ret, reserved_: [0; 12] }
}
