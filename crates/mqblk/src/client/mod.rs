//! `Client`: the per-thread handle on a device (the kernel's software
//! context, `struct blk_mq_ctx`, plus the submitter's side of libblkio's
//! queue API).
//!
//! A client submits bios with a `user_data` cookie and reaps completions from
//! its own completion ring with [`Client::do_io`]. Buffers move into the bio
//! and come back in the [`Completion`], so no one can touch them while the
//! device owns them. A client is `Send` but not `Sync`: it belongs to one
//! thread at a time.
//!
//! This file holds the client itself: construction, accessors, the plug
//! API and Drop. Submission (the door, merges, splits, tags, issue) is in
//! submit.rs; reaping (`do_io`, sleeping, the eventfd and poll fd) in
//! reap.rs; the blocking helpers (`read_at`, `write_at`,
//! `submit_and_wait`) in blocking.rs.
//!
//! Relies on: queue/ for limits, tags and dispatch; completion.rs for the
//! completion ring and bio slots; plug.rs for the plug.

mod blocking;
mod reap;
mod split;
mod submit;

pub use reap::CompletionSink;

use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::buf::Buf;
use crate::completion::ClientShared;
pub use crate::completion::{Completion, RwCount};
use crate::plug::PlugState;
use crate::queue::RequestQueue;
use crate::tag::AllocData;

/// Per-client counters ([`Client::stats`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClientStats {
    pub submitted: u64,
    pub completed: u64,
    /// Times this client slept waiting for a tag.
    pub tag_waits: u64,
    /// Time this client spent sleeping for tags (ns).
    pub tag_wait_ns: u64,
    /// Times this client slept in `do_io` waiting for completions.
    pub completion_sleeps: u64,
}

/// The queue map for the plain submission path, fixed for a client's life:
/// on a device whose submitters reap, every bio goes to the client's poll
/// queue, polled; elsewhere plain bios go to its default queue, and hipri
/// ones take the general path if the device polls.
#[derive(Debug, Clone, Copy)]
struct PlainMap {
    hctx: usize,
    /// ORIGIN_POLLED or 0.
    origin: u8,
    /// Hipri bios may take the plain path.
    hipri: bool,
}

impl PlainMap {
    fn new(q: &RequestQueue, default_hctx: usize, poll_hctx: Option<usize>) -> Self {
        match poll_hctx {
            Some(poll) if q.submitter_reaps() => {
                Self { hctx: poll, origin: crate::request::ORIGIN_POLLED, hipri: true }
            }
            Some(_) => Self { hctx: default_hctx, origin: 0, hipri: false },
            None => Self { hctx: default_hctx, origin: 0, hipri: true },
        }
    }
}

/// A per-thread handle on a device (the kernel's software context): it
/// submits bios with a `user_data` cookie and reaps their completions from
/// its own completion ring ([`Client::do_io`]). Buffers move into the bio
/// and come back in the [`Completion`], so no one can touch them while the
/// device owns them. A client is `Send` but not `Sync`: it belongs to one
/// thread at a time. Dropping it waits for its outstanding I/O.
///
/// ```
/// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
/// # ram::register();
/// use mqblk::{Bio, Buf, Device};
///
/// // Two submit queues and one poll queue (ram's default poll_queues=1).
/// let dev = Device::open("ram:size=64,submit_queues=2,irqmode=0")?;
/// let mut a = dev.client();
/// let b = dev.client_with_capacity(8);
/// assert_eq!((a.hctx_index(), b.hctx_index()), (0, 1), "spread over the queues");
/// assert_eq!(a.poll_hctx_index(), Some(2), "hipri bios go to the poll queue");
/// assert_eq!((a.capacity(), b.capacity()), (64, 8), "a queue's depth by default");
///
/// a.submit(Bio::read(0, Buf::new(4096)), 7)?;
/// assert_eq!(a.in_flight(), 1, "submitted, not yet reaped");
/// a.drain();
/// let stats = a.stats();
/// assert_eq!((stats.submitted, stats.completed, a.in_flight()), (1, 1, 0));
///
/// // A client may move to another thread, with its I/O.
/// std::thread::spawn(move || drop(b)).join().unwrap();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Client {
    q: Arc<RequestQueue>,
    shared: Arc<ClientShared>,
    /// The hardware queue of the submission in progress (the default one
    /// between submissions).
    cur_hctx: usize,
    /// This client's default queue, and its poll queue if the device has
    /// poll queues (hipri bios go there: the kernel's HCTX_TYPE_POLL map).
    default_hctx: usize,
    poll_hctx: Option<usize>,
    /// Bios on the poll queue not yet reaped: while any, waiting polls.
    polled_outstanding: usize,
    /// This wait already took its hybrid-polling sleep (reset when a
    /// completion is reaped).
    hybrid_slept: bool,
    alloc: AllocData,
    /// Submitted and not yet handed back (by `do_io` or a blocking helper).
    in_flight: usize,
    /// Completions collected while a blocking helper waited.
    backlog: VecDeque<Completion>,
    /// The blocking helper's completion, once it arrives.
    blocking_done: Option<Completion>,
    bounce: Option<Buf>,
    /// This client asked for the completion eventfd (`completion_fd`).
    notify: bool,
    /// Its eventfd is registered with the ring of `poll_hctx`
    /// (`standalone_completion_fd`), to be unregistered on drop.
    notify_registered: bool,
    /// `RequestQueue::plain_max_bytes`: bios up to this long may take the
    /// plain submission path (submit.rs `is_plain`).
    plain_max_bytes: u64,
    /// How many segments a checked iovec array no longer than
    /// `plain_max_bytes` may have and fit one request wherever they lie
    /// (limits.rs `segments_fit_anywhere_up_to`).
    plain_fit_segs: u64,
    /// Where the plain path sends bios (the queue map, worked out once).
    plain: PlainMap,
    /// Free bio slots of `shared` (only this client touches the list).
    free_slots: Vec<u32>,
    /// Identity for schedulers (the kernel's process).
    client_id: u32,
    /// An empty request list to hand single requests to a scheduler.
    scratch: crate::request::RqList,
    plug: PlugState,
    stats: ClientStats,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("hctx", &self.cur_hctx)
            .field("in_flight", &self.in_flight)
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl Client {
    pub(crate) fn new(q: Arc<RequestQueue>, shared: Arc<ClientShared>, seq: usize) -> Self {
        let hctx_index = seq % q.nr_default_queues();
        let poll_hctx = if q.shared_poll() || q.submitter_reaps() {
            Some(hctx_index)
        } else {
            (q.nr_poll_queues() > 0).then(|| q.nr_default_queues() + seq % q.nr_poll_queues())
        };
        let capacity = shared.capacity();
        // Spread clients' hints, and their waits over the 8 wait queues (as
        // hctxs spread over them).
        let alloc = AllocData::new((seq as u32).wrapping_mul(0x9e37_79b9), seq);
        *shared.waiter.lock() = Some(alloc.waiter.clone());
        Self {
            cur_hctx: hctx_index,
            default_hctx: hctx_index,
            poll_hctx,
            polled_outstanding: 0,
            hybrid_slept: false,
            alloc,
            shared,
            in_flight: 0,
            backlog: VecDeque::with_capacity(capacity),
            blocking_done: None,
            bounce: None,
            notify: false,
            notify_registered: false,
            plug: PlugState::new(q.plug_nesting(), q.plug_sync),
            plain_max_bytes: q.plain_max_bytes(),
            plain_fit_segs: q.limits.segments_fit_anywhere_up_to(q.plain_max_bytes()),
            plain: PlainMap::new(&q, hctx_index, poll_hctx),
            q,
            free_slots: (0..capacity as u32).rev().collect(),
            client_id: seq as u32,
            scratch: crate::request::RqList::with_capacity(1),
            stats: ClientStats::default(),
        }
    }

    /// The hardware queue this client submits to.
    pub fn hctx_index(&self) -> usize {
        self.default_hctx
    }

    /// The poll queue this client's hipri bios go to, if the device has
    /// poll queues.
    pub fn poll_hctx_index(&self) -> Option<usize> {
        self.poll_hctx
    }

    /// The most I/Os this client may have outstanding (submitted and not yet
    /// reaped).
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// I/Os submitted and not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// This client's counters.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// Starts a plug (`blk_start_plug`): until the returned guard drops,
    /// requests are held so adjacent bios merge and reach the driver in one
    /// batch. Submit through the guard (it derefs to the client); nested
    /// plugs only count levels, and only the outermost one flushes (see
    /// plug.rs for every flush rule).
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use mqblk::{Bio, Buf, Device};
    /// let dev = Device::open("ram:size=64,irqmode=0").unwrap();
    /// let mut client = dev.client();
    /// {
    ///     let mut plug = client.plug();
    ///     for i in 0..4u64 {
    ///         plug.submit(Bio::read(i * 4096, Buf::new(4096)), i).unwrap();
    ///     }
    ///     assert_eq!(plug.plugged_requests(), 1, "four adjacent reads, one request");
    /// } // flushed here
    /// let mut done = Vec::new();
    /// client.do_io(&mut done, 4, 4, None).unwrap();
    /// assert_eq!(dev.stats().merges.read, 3);
    /// ```
    pub fn plug(&mut self) -> Plug<'_> {
        Plug::new(self, 1)
    }

    /// Starts a plug expecting `nr_ios` requests (`blk_start_plug_nr_ios`):
    /// the first one takes tags for up to that many (at most 32) in one
    /// batch. Ignored by an inner plug.
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use mqblk::{Bio, Buf, Device};
    ///
    /// let dev = Device::open("ram:size=64,irqmode=0")?;
    /// let mut client = dev.client();
    /// {
    ///     let mut plug = client.plug_nr_ios(8);
    ///     assert_eq!(plug.plug_depth(), 1);
    ///     // Far apart: eight requests, no merge.
    ///     for i in 0..8u64 {
    ///         plug.submit(Bio::write(i << 20, Buf::new(4096)), i)?;
    ///         assert_eq!(plug.plugged_requests(), i as usize + 1);
    ///         assert_eq!(plug.plug_cached_tags(), 7 - i as u32, "tags taken in one batch");
    ///     }
    ///     plug.flush_plug(); // issued now; the plug stays active
    ///     assert_eq!((plug.plugged_requests(), plug.plug_depth()), (0, 1));
    /// }
    /// assert_eq!(client.plug_depth(), 0);
    /// client.drain();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn plug_nr_ios(&mut self, nr_ios: u32) -> Plug<'_> {
        Plug::new(self, nr_ios)
    }

    /// Runs `f` under a plug of `nr_ios` and ends the plug. Plugs nest:
    /// only the outermost one flushes when it ends.
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use mqblk::{Bio, Buf, Device};
    ///
    /// let dev = Device::open("ram:size=64,irqmode=0")?;
    /// let mut client = dev.client();
    /// client.with_plug(2, |c| {
    ///     c.submit(Bio::write(0, Buf::new(4096)), 1).unwrap();
    ///     c.with_plug(1, |inner| {
    ///         assert_eq!(inner.plug_depth(), 2);
    ///         inner.submit(Bio::write(4096, Buf::new(4096)), 2).unwrap();
    ///     });
    ///     assert_eq!(c.plugged_requests(), 1, "the inner plug did not flush; the bios merged");
    /// });
    /// assert_eq!(client.plugged_requests(), 0);
    /// client.drain();
    /// assert_eq!(dev.stats().merges.write, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_plug<R>(&mut self, nr_ios: u32, f: impl FnOnce(&mut Client) -> R) -> R {
        let mut plug = self.plug_nr_ios(nr_ios);
        f(&mut plug)
    }

    /// Issues everything the plug holds now (`blk_flush_plug`); the plug
    /// stays active (example: [`Client::plug_nr_ios`]).
    pub fn flush_plug(&mut self) {
        self.plug.flush(&self.q, &self.shared.counters);
    }

    /// Plug levels active on this client (0: not plugged).
    pub fn plug_depth(&self) -> u32 {
        self.plug.depth
    }

    /// Requests held in the plug, not yet issued to the driver.
    pub fn plugged_requests(&self) -> usize {
        self.plug.rqs.len()
    }

    /// Tags the plug has cached for its next requests.
    pub fn plug_cached_tags(&self) -> u32 {
        self.plug.nr_cached()
    }

    #[inline(always)]
    pub(crate) fn plug_state(&mut self) -> &mut PlugState {
        &mut self.plug
    }

    #[inline(always)]
    pub(crate) fn finish_plug(&mut self, outermost: bool, prev_start: usize) {
        self.plug.finish(&self.q, &self.shared.counters, outermost, prev_start);
    }

    /// Gives back tags a handoff wakeup granted to this client and it did
    /// not use, to whichever tags granted them (driver or scheduler).
    fn release_granted(&self) {
        for index in std::iter::once(self.default_hctx).chain(self.poll_hctx) {
            let hctx = self.q.hctx(index);
            hctx.tags.release_granted(&self.alloc);
            if let Some(s) = hctx.sched() {
                s.tags.release_granted(&self.alloc);
            }
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // A guard forgotten with mem::forget leaves requests plugged.
        self.plug.flush(&self.q, &self.shared.counters);
        // The device owns our buffers until their I/Os complete: wait.
        self.drain();
        self.release_granted();
        self.shared.quiet_eventfd();
        if let Some(poll) = self.poll_hctx.filter(|_| self.notify_registered) {
            // The ring may serve another client's completion fd next.
            let _ = self.q.hctx(poll).set_notify_fd(None);
        }
        self.q.release_client(self.shared.clone());
        self.q.put_user();
    }
}

/// An active plug level: derefs to the client. Dropping it ends the level;
/// the outermost level flushes what the plug holds. Made by
/// [`Client::plug`] and [`Client::plug_nr_ios`] (examples there).
pub struct Plug<'a> {
    client: &'a mut Client,
    outermost: bool,
    prev_start: usize,
}

impl<'a> Plug<'a> {
    #[inline(always)]
    fn new(client: &'a mut Client, nr_ios: u32) -> Self {
        let (outermost, prev_start) = client.plug_state().start(nr_ios);
        Self { client, outermost, prev_start }
    }
}

impl Deref for Plug<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client
    }
}

impl DerefMut for Plug<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client
    }
}

impl Drop for Plug<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.client.finish_plug(self.outermost, self.prev_start);
    }
}

impl std::fmt::Debug for Plug<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plug").field("outermost", &self.outermost).finish()
    }
}
