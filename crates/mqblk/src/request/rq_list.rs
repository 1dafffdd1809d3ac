//! `RqList`: an ordered list of requests (the kernel's `struct rq_list`),
//! what a plug holds and what `Driver::queue_rqs` receives.
//!
//! Relies on: the `Rq` token (rq.rs); nothing else.

use std::fmt;

use super::Rq;

/// An ordered list of requests (the kernel's `struct rq_list`): what a
/// plug holds and what `Driver::queue_rqs` receives. Taking from the front
/// is O(1) and moves nothing; the storage is reused, so a plug never
/// allocates once its list has grown to its largest size. Iterating takes
/// the requests from the front.
///
/// A driver that takes at most two requests of a plug's batch at once
/// (its queue holds two), handing the rest back:
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq, RqList};
/// use mqblk::{Bio, Buf, Device, QueueLimits, Status, TagSetConfig};
///
/// struct TwoAtOnce(Arc<Mutex<Vec<usize>>>);
///
/// impl Driver for TwoAtOnce {
///     fn name(&self) -> &str { "two-at-once" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
///     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
///         rq.complete(Status::Ok);
///         QueueRqResult::Queued
///     }
///     fn queue_rqs(&self, _hctx: &Hctx, rqs: &mut RqList) {
///         self.0.lock().unwrap().push(rqs.len());
///         assert!(rqs.front().is_some_and(|rq| rq.sector() == 0), "in submission order");
///         let mut taken = RqList::with_capacity(2);
///         while let Some(rq) = rqs.pop_front() {
///             if taken.len() == 2 {
///                 rqs.push_front(rq); // full: back in front, where it was
///                 break;
///             }
///             taken.push_back(rq);
///         }
///         if let Some(rq) = taken.back_mut() {
///             *rq.driver_data() = 1; // e.g. "ring the doorbell after this one"
///         }
///         for rq in taken {
///             rq.complete(Status::Ok);
///         }
///         // What is left in `rqs` is kept, in order, and dispatched later.
///     }
/// }
///
/// let batches = Arc::new(Mutex::new(Vec::new()));
/// let dev = Device::with_driver(Box::new(TwoAtOnce(batches.clone())))?;
/// let mut client = dev.client();
/// {
///     let mut plug = client.plug();
///     for i in 0..4 {
///         // Not adjacent: four requests.
///         plug.submit(Bio::write(i * 8192, Buf::new(4096)), i).unwrap();
///     }
/// }
/// client.drain();
/// assert_eq!(batches.lock().unwrap()[0], 4, "the whole batch at once");
/// assert_eq!(dev.stats().completed, 4);
/// # Ok::<(), mqblk::Error>(())
/// ```
#[derive(Default)]
pub struct RqList {
    /// Requests from `head` on; slots before it were taken.
    rqs: Vec<Option<Rq>>,
    head: usize,
}

impl RqList {
    /// An empty list with room for `capacity` requests.
    pub fn with_capacity(capacity: usize) -> Self {
        Self { rqs: Vec::with_capacity(capacity), head: 0 }
    }

    /// Requests in the list.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.rqs.len() - self.head
    }

    /// Is the list empty?
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends a request.
    #[inline(always)]
    pub fn push_back(&mut self, rq: Rq) {
        self.rqs.push(Some(rq));
    }

    /// Takes the first request.
    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<Rq> {
        let rq = self.rqs.get_mut(self.head)?.take();
        self.head += 1;
        if self.head == self.rqs.len() {
            self.reset();
        }
        rq
    }

    /// Every request was taken: reuse the storage from the start.
    #[inline(always)]
    fn reset(&mut self) {
        debug_assert!(self.rqs.iter().all(Option::is_none));
        // SAFETY: shrinking the length only forgets elements, which is
        // always sound; here every one is `None` (all were taken), so
        // nothing is even leaked, and `clear` would just walk them.
        unsafe { self.rqs.set_len(0) };
        self.head = 0;
    }

    /// Puts a request back in front (a driver that was busy).
    pub fn push_front(&mut self, rq: Rq) {
        if self.head > 0 {
            self.head -= 1;
            self.rqs[self.head] = Some(rq);
        } else {
            self.rqs.insert(0, Some(rq));
        }
    }

    /// The requests, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Rq> {
        self.rqs[self.head..].iter().flatten()
    }

    /// The first request.
    pub fn front(&self) -> Option<&Rq> {
        self.rqs.get(self.head).and_then(Option::as_ref)
    }

    /// The last request, to adjust.
    pub fn back_mut(&mut self) -> Option<&mut Rq> {
        if self.is_empty() {
            return None;
        }
        self.rqs.last_mut().and_then(Option::as_mut)
    }

    /// Moves the requests from position `at` on to the back of `other`.
    pub(crate) fn move_tail_to(&mut self, at: usize, other: &mut RqList) {
        let start = (self.head + at).min(self.rqs.len());
        other.rqs.extend(self.rqs.drain(start..));
        if self.head == self.rqs.len() {
            self.rqs.clear();
            self.head = 0;
        }
    }
}

impl Iterator for RqList {
    type Item = Rq;
    fn next(&mut self) -> Option<Rq> {
        self.pop_front()
    }
}

impl fmt::Debug for RqList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.rqs[self.head..].iter().flatten()).finish()
    }
}
