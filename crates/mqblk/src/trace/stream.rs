//! Trace streams: one per thread that records events, blktrace's per-CPU
//! relay buffer. A stream's index is the records' `cpu` and its file's
//! suffix (NAME.blktrace.INDEX): blkparse wants each file in time order
//! with sequence numbers 1, 2, 3..., which one thread's events are, as
//! they are stamped and pushed by that thread alone. A CPU's events would
//! not be in user space: a thread can be preempted between the stamp and
//! the push.
//!
//! A thread finds its stream through a thread-local cache (the tracer's
//! id and the index), claiming one on its first event: the ring is
//! allocated then, never per event. Past `MAX_STREAMS` threads, events
//! are counted as dropped. A full ring drops the event and counts it, as
//! relay does; its sequence number is spent all the same, so blkparse
//! reports the gap.
//!
//! Relies on: mqblk-sync's `MpscRing` (used with one producer, the owner
//! thread, and one consumer, the writer), record.rs for `Event`.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use mqblk_sync::ring::MpscRing;

use super::record::{Action, Event, MAX_PDU_BYTES};

/// Threads a trace gives a stream to (blktrace's CPUs).
pub(crate) const MAX_STREAMS: usize = 64;
/// Events a stream holds before the writer drains it: 48 bytes each, so
/// 3 MiB a thread, about 5 ms of a thread at full speed. 64 under Miri,
/// which interprets the ring's construction slot by slot (65,536 slots
/// cost a test minutes there).
pub(crate) const STREAM_EVENTS: usize = if cfg!(miri) { 1 << 6 } else { 1 << 16 };

/// One thread's events on their way to the writer.
pub(crate) struct Stream {
    pub(crate) ring: MpscRing<Event>,
    /// The owner's thread id (blktrace's pid).
    pub(crate) pid: u32,
    /// The next sequence number; only the owner writes it.
    next_sequence: AtomicU32,
    /// Events lost to a full ring.
    pub(crate) dropped: AtomicU64,
}

impl Stream {
    fn new(pid: u32) -> Self {
        let stream = Self {
            ring: MpscRing::new(STREAM_EVENTS),
            pid,
            next_sequence: AtomicU32::new(1),
            dropped: AtomicU64::new(0),
        };
        // The first record names the thread (blkparse and btt show names).
        let mut note = Event::new(Action::NoteProcess as u32, 0, 0);
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("mqblk").as_bytes();
        let len = name.len().min(MAX_PDU_BYTES - 1);
        note.pdu[..len].copy_from_slice(&name[..len]);
        (note.pid, note.pdu_len, note.time_ns) = (pid, MAX_PDU_BYTES as u16, crate::clock::now_ns());
        stream.ring.push(note).expect("an empty ring has room");
        stream
    }

    /// Stamps `e` and queues it for the writer (owner thread only).
    #[inline]
    pub(crate) fn push(&self, mut e: Event) {
        // Relaxed: only this thread writes the counter.
        let sequence = self.next_sequence.load(Ordering::Relaxed);
        self.next_sequence.store(sequence.wrapping_add(1), Ordering::Relaxed);
        (e.sequence, e.pid, e.time_ns) = (sequence, self.pid, crate::clock::now_ns());
        if self.ring.push(e).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The streams of one trace, claimed in order.
pub(crate) struct Streams {
    /// The trace's identity in threads' caches (never 0).
    id: usize,
    slots: Box<[OnceLock<Stream>]>,
    /// Slots handed out (may pass `MAX_STREAMS`: those threads have none).
    claimed: AtomicUsize,
    /// Events of threads without a stream (counted by the tracer).
    pub(crate) unstreamed: AtomicU64,
}

/// A thread's cached stream: (trace id, stream index), or `NO_STREAM`.
const NO_STREAM: usize = usize::MAX;

thread_local! {
    static CURRENT: Cell<(usize, usize)> = const { Cell::new((0, NO_STREAM)) };
}

/// Trace identities, so a thread's cache never mistakes one trace for another.
static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

impl Streams {
    pub(crate) fn new() -> Self {
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            slots: (0..MAX_STREAMS).map(|_| OnceLock::new()).collect(),
            claimed: AtomicUsize::new(0),
            unstreamed: AtomicU64::new(0),
        }
    }

    /// This trace's identity (also the device's minor number).
    pub(crate) fn id(&self) -> usize {
        self.id
    }

    /// The calling thread's stream, claimed on its first event.
    #[inline]
    pub(crate) fn current(&self) -> Option<&Stream> {
        let (id, index) = CURRENT.with(Cell::get);
        let index = if id == self.id { index } else { self.claim() };
        self.slots.get(index)?.get()
    }

    /// Streams that may hold events, in index order (`None`: claimed, not
    /// yet set up by its thread).
    pub(crate) fn claimed(&self) -> impl Iterator<Item = Option<&Stream>> {
        let n = self.claimed.load(Ordering::Acquire).min(MAX_STREAMS);
        self.slots[..n].iter().map(OnceLock::get)
    }

    /// Finds the calling thread's stream (it may have traced another
    /// device since) or claims the next one; caches the answer.
    #[cold]
    #[inline(never)]
    fn claim(&self) -> usize {
        let pid = current_tid();
        let mine = self.claimed().position(|s| s.is_some_and(|s| s.pid == pid));
        let index = mine.unwrap_or_else(|| {
            let index = self.claimed.fetch_add(1, Ordering::AcqRel);
            match self.slots.get(index) {
                Some(slot) => {
                    // Set once, by the thread that claimed the index.
                    let _ = slot.set(Stream::new(pid));
                    index
                }
                None => NO_STREAM,
            }
        });
        CURRENT.with(|c| c.set((self.id, index)));
        index
    }
}

/// The calling thread's id (gettid).
#[cfg(not(miri))]
fn current_tid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    tid as u32
}

/// Under Miri, which has no gettid: a number per thread.
#[cfg(miri)]
fn current_tid() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    thread_local!(static TID: u32 = NEXT.fetch_add(1, Ordering::Relaxed));
    TID.with(|t| *t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_its_stream_and_numbers_its_events_from_1() {
        let streams = Streams::new();
        let s = streams.current().expect("a stream");
        s.push(Event::new(Action::Queue as u32, 8, 4096));
        s.push(Event::new(Action::Queue as u32, 16, 4096));
        assert!(std::ptr::eq(s, streams.current().unwrap()), "cached");
        // SAFETY: this test is the only consumer.
        let popped: Vec<Event> = std::iter::from_fn(|| unsafe { s.ring.pop() }).collect();
        assert_eq!(popped.len(), 3, "the note naming the thread, then the events");
        assert_eq!(popped[0].action, Action::NoteProcess as u32);
        assert_eq!((popped[1].sequence, popped[2].sequence), (1, 2));
        assert!(popped[1].time_ns <= popped[2].time_ns);
    }

    #[test]
    fn each_thread_gets_its_own_stream() {
        let streams = Streams::new();
        let first = streams.current().unwrap().pid;
        std::thread::scope(|s| {
            s.spawn(|| assert_ne!(streams.current().unwrap().pid, first));
        });
        assert_eq!(streams.claimed().count(), 2);
        // A second trace on this thread takes a stream of its own there,
        // and this one's cache is found again.
        let other = Streams::new();
        other.current().unwrap();
        assert_eq!(streams.current().unwrap().pid, first);
        assert_eq!(streams.claimed().count(), 2);
    }
}
