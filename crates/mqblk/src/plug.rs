//! Per-thread plugging (`struct blk_plug`, block/blk-core.c and blk-mq.c).
//!
//! While a client is plugged, its requests are held on the plug's list
//! instead of going to the driver, so that adjacent bios can merge into them
//! (merge.rs) and the list reaches the driver in one batch per hardware
//! queue, `last` marking the end of each (the driver rings its doorbell
//! once). A plug is an RAII guard ([`Plug`](crate::Plug), from
//! [`Client::plug`](crate::Client::plug)) that
//! derefs to the client, so code below it submits through it unchanged.
//!
//! Nesting ("blk-plug: don't flush nested plug lists", 2015): starting a
//! plug while one is active only counts a level; ending an inner level does
//! nothing; the outermost one flushes. As Shaohua Li answered that patch,
//! the kernel always worked this way. `plug_nesting=flush_each` is a
//! hypothetical for comparison, not any kernel's behaviour: every level
//! flushes the requests added since it started, and merges stay within a
//! level's own list.
//!
//! Sync bios (`plug_sync`): the zero merges that patch reported came from
//! elsewhere: blk-mq's single-queue path (`blk_sq_make_request`) did not
//! plug sync bios at all (`use_plug = !is_flush_fua && !is_sync`), so
//! O_DIRECT reads neither merged in the plug nor waited in it. Jeff
//! Moyer's "blk-mq: fix plugging in blk_sq_make_request" (patch 1/2 of
//! the same series) plugged them. `plug_sync=0` brings the old path back:
//! a sync bio ([`op_is_sync`]) bypasses an active plug (no plug merge, no
//! cached tag) and is issued at once. The default, 1, plugs
//! every bio, as Linux since 4.1.
//!
//! The list is flushed early, as the kernel does: before adding a request
//! when it already holds 32 (64 when it spans several hardware queues), or
//! when its last request is at least 128 KiB; and before the client sleeps
//! (for a tag, or for completions), since a thread must never wait for I/O
//! still held in its own plug. A plug started with an `nr_ios` hint takes
//! tags for that many requests with one batched bitmap operation and caches
//! them; cached tags left unused go back when the plug ends or the client
//! sleeps.
//!
//! With a scheduler, a flush inserts each queue's requests into it in one
//! call (`HwCtx::submit_list`).
//!
//! Relies on: hctx/ and sched/ to issue or insert lists, tag.rs for the
//! batched tags, and client/, which owns the `PlugState`.

use crate::bio::{op_is_sync, Op, ReqFlags};
use crate::completion::ClientCounters;
use crate::queue::{PlugNesting, RequestQueue};
use crate::request::{Rq, RqList};

/// Requests a plug holds before it flushes (the kernel's
/// BLK_MAX_REQUEST_COUNT); twice that when they span several queues.
pub const BLK_MAX_REQUEST_COUNT: usize = 32;
/// A plug flushes before adding a request behind one at least this large
/// (BLK_PLUG_FLUSH_SIZE).
pub const BLK_PLUG_FLUSH_SIZE: u64 = 128 * 1024;

/// A client's plug: its nesting, its list and its cached tags.
pub(crate) struct PlugState {
    /// Live `Plug` guards (0: not plugged).
    pub(crate) depth: u32,
    /// Where the innermost level's own requests start in `rqs`.
    level_start: usize,
    /// Plugged requests, in submission order.
    pub(crate) rqs: RqList,
    /// Spare lists for flushing part of `rqs` or one queue's requests.
    level_buf: RqList,
    group_buf: RqList,
    /// `rqs` spans more than one hardware queue.
    multiple_queues: bool,
    /// Start, size and queue of the last request of `rqs` (no pointer
    /// chasing on the submit path).
    last_sector: u64,
    last_len_bytes: u64,
    last_hctx: usize,
    /// Tags the outermost plug asked to batch (1: none).
    pub(crate) nr_ios: u32,
    /// Cached tags: `cached_base + i` for each bit i of `cached_mask`.
    cached_base: u32,
    cached_mask: usize,
    cached_hctx: usize,
    pub(crate) nesting: PlugNesting,
    /// `plug_sync=0`: sync bios bypass the plug (read once, when the
    /// client is made).
    bypass_sync: bool,
    /// The flush in progress is before its owner sleeps (traced as T).
    before_sleep: bool,
}

impl PlugState {
    pub(crate) fn new(nesting: PlugNesting, plug_sync: bool) -> Self {
        let cap = 2 * BLK_MAX_REQUEST_COUNT;
        Self {
            depth: 0,
            level_start: 0,
            rqs: RqList::with_capacity(cap),
            level_buf: RqList::with_capacity(cap),
            group_buf: RqList::with_capacity(cap),
            multiple_queues: false,
            last_sector: 0,
            last_len_bytes: 0,
            last_hctx: 0,
            nr_ios: 1,
            cached_base: 0,
            cached_mask: 0,
            cached_hctx: 0,
            nesting,
            bypass_sync: !plug_sync,
            before_sleep: false,
        }
    }

    /// Does a bio of `op` and `flags` go through the plug? While plugged,
    /// every bio does, unless `plug_sync=0` and it is sync (the pre-4.1
    /// `use_plug` of blk_sq_make_request). On the default the second test
    /// is one load of a bool the client owns.
    #[inline(always)]
    pub(crate) fn takes(&self, op: Op, flags: ReqFlags) -> bool {
        self.depth > 0 && !(self.bypass_sync && op_is_sync(op, flags))
    }

    /// Enters a level; returns (outermost, the previous level's start) for
    /// the guard to hand back to `finish`.
    #[inline(always)]
    pub(crate) fn start(&mut self, nr_ios: u32) -> (bool, usize) {
        let outermost = self.depth == 0;
        self.depth += 1;
        if outermost {
            // An inner plug's hint is ignored, as in the kernel.
            self.nr_ios = nr_ios.clamp(1, BLK_MAX_REQUEST_COUNT as u32);
        }
        let prev = self.level_start;
        if self.nesting == PlugNesting::FlushEach {
            self.level_start = self.rqs.len();
        }
        (outermost, prev)
    }

    /// Leaves a level, flushing as the nesting mode says.
    #[inline(always)]
    pub(crate) fn finish(&mut self, q: &RequestQueue, counters: &ClientCounters, outermost: bool, prev_start: usize) {
        debug_assert!(self.depth > 0, "plug finished more often than started");
        if !outermost && self.nesting == PlugNesting::Outermost {
            self.depth -= 1; // an inner level: nothing to do
            return;
        }
        self.finish_slow(q, counters, outermost, prev_start);
    }

    #[inline(never)]
    fn finish_slow(&mut self, q: &RequestQueue, counters: &ClientCounters, outermost: bool, prev_start: usize) {
        self.depth -= 1;
        if self.nesting == PlugNesting::FlushEach {
            self.flush_from(q, counters, self.level_start.min(self.rqs.len()));
            self.level_start = prev_start.min(self.rqs.len());
        }
        if outermost {
            self.flush(q, counters);
            self.nr_ios = 1;
            self.level_start = 0;
        }
    }

    /// The request a new bio for hardware queue `hctx` may merge into: the
    /// last one of the current level's list (the whole list unless
    /// `flush_each`), if it is for the same queue.
    #[inline]
    pub(crate) fn merge_candidate(&mut self, hctx: usize) -> Option<&mut Rq> {
        let floor = if self.nesting == PlugNesting::FlushEach { self.level_start } else { 0 };
        if self.rqs.len() > floor && self.last_hctx == hctx {
            self.rqs.back_mut()
        } else {
            None
        }
    }

    /// Adds a plugged request, flushing the list first if it is full or
    /// ends with a large request (`blk_add_rq_to_plug`).
    #[inline(always)]
    pub(crate) fn add(&mut self, q: &RequestQueue, counters: &ClientCounters, rq: Rq, hctx: usize, len_bytes: u64) {
        let len = self.rqs.len();
        if len != 0 {
            let limit = if self.multiple_queues { 2 * BLK_MAX_REQUEST_COUNT } else { BLK_MAX_REQUEST_COUNT };
            if len >= limit || self.last_len_bytes >= BLK_PLUG_FLUSH_SIZE {
                self.flush_list(q, counters);
            } else if self.last_hctx != hctx {
                self.multiple_queues = true;
            }
        }
        if let Some(t) = q.trace() {
            if self.rqs.is_empty() {
                t.plug(); // the list's first request (after a flush too)
            }
        }
        debug_assert_eq!(len_bytes, rq.len_bytes());
        self.last_len_bytes = len_bytes;
        self.last_sector = rq.sector();
        self.last_hctx = hctx;
        self.rqs.push_back(rq);
    }

    /// A merge grew the last request: it now starts at `sector` and is
    /// `len_bytes` long.
    #[inline]
    pub(crate) fn last_grew(&mut self, sector: u64, len_bytes: u64) {
        (self.last_sector, self.last_len_bytes) = (sector, len_bytes);
    }

    /// Could a bio of `nr_sectors` at `sector` be contiguous with the last
    /// request? (A check on plain fields before looking at the request.)
    #[inline(always)]
    pub(crate) fn touches_last(&self, sector: u64, nr_sectors: u32) -> bool {
        let last_end = self.last_sector + (self.last_len_bytes >> crate::request::SECTOR_SHIFT);
        !self.rqs.is_empty() && (sector == last_end || sector + u64::from(nr_sectors) == self.last_sector)
    }

    /// Issues the whole list and gives back cached tags: before the client
    /// sleeps, and when the outermost plug ends.
    pub(crate) fn flush(&mut self, q: &RequestQueue, counters: &ClientCounters) {
        self.flush_list(q, counters);
        self.release_cached(q);
    }

    /// `flush` because the client is going to sleep (the kernel's flush
    /// from schedule(): blktrace's T instead of U).
    pub(crate) fn flush_before_sleep(&mut self, q: &RequestQueue, counters: &ClientCounters) {
        self.before_sleep = true;
        self.flush(q, counters);
        self.before_sleep = false;
    }

    /// Issues the whole list (cached tags stay: more requests are coming).
    #[inline(never)]
    fn flush_list(&mut self, q: &RequestQueue, counters: &ClientCounters) {
        if self.rqs.is_empty() {
            return;
        }
        counters.plug_flush();
        if let Some(t) = q.trace() {
            t.unplug(self.rqs.len(), self.before_sleep);
        }
        self.level_start = 0;
        if self.multiple_queues {
            issue_by_queue(q, &mut self.rqs, &mut self.group_buf);
            self.multiple_queues = false;
        } else if self.rqs.len() == 1 {
            // One request: the plain path, no batch bookkeeping.
            let rq = self.rqs.pop_front().expect("one request");
            q.hctx(rq.hctx_index()).submit(rq, &mut self.group_buf, None);
        } else {
            let index = self.rqs.front().expect("not empty").hctx_index();
            q.hctx(index).submit_list(&mut self.rqs);
        }
        debug_assert!(self.rqs.is_empty());
    }

    /// Issues the requests from `start` on (one `flush_each` level's own).
    fn flush_from(&mut self, q: &RequestQueue, counters: &ClientCounters, start: usize) {
        if start == 0 {
            return self.flush_list(q, counters);
        }
        if start == self.rqs.len() {
            return;
        }
        counters.plug_flush();
        if let Some(t) = q.trace() {
            t.unplug(self.rqs.len() - start, self.before_sleep);
        }
        self.rqs.move_tail_to(start, &mut self.level_buf);
        issue_by_queue(q, &mut self.level_buf, &mut self.group_buf);
    }

    /// A cached tag of hardware queue `hctx`, if any.
    #[inline(always)]
    pub(crate) fn take_cached(&mut self, hctx: usize) -> Option<u32> {
        if self.cached_mask == 0 || self.cached_hctx != hctx {
            return None;
        }
        let i = self.cached_mask.trailing_zeros();
        self.cached_mask &= self.cached_mask - 1;
        Some(self.cached_base + i)
    }

    /// Caches a batch of tags of `hctx` (`base + i` for each bit of `mask`).
    pub(crate) fn cache(&mut self, hctx: usize, base: u32, mask: usize) {
        debug_assert_eq!(self.cached_mask, 0, "tags cached twice");
        (self.cached_hctx, self.cached_base, self.cached_mask) = (hctx, base, mask);
    }

    pub(crate) fn nr_cached(&self) -> u32 {
        self.cached_mask.count_ones()
    }

    /// Frees cached tags nobody used.
    pub(crate) fn release_cached(&mut self, q: &RequestQueue) {
        while let Some(tag) = self.take_cached(self.cached_hctx) {
            q.hctx(self.cached_hctx).pool().put(tag);
        }
    }
}

/// Issues `list` one hardware queue at a time, each queue's requests in
/// their order (the kernel groups a plug list by queue the same way).
fn issue_by_queue(q: &RequestQueue, list: &mut RqList, group: &mut RqList) {
    while let Some(first) = list.front() {
        let index = first.hctx_index();
        for _ in 0..list.len() {
            let rq = list.pop_front().expect("counted");
            if rq.hctx_index() == index {
                group.push_back(rq);
            } else {
                list.push_back(rq);
            }
        }
        q.hctx(index).submit_list(group);
    }
}
