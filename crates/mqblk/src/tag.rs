//! Tags: the per-hardware-queue tag space and its request pool, after
//! block/blk-mq-tag.c.
//!
//! A tag names one in-flight request of a hardware queue. Reserved tags come
//! first: a normal tag is `bit + nr_reserved_tags`, as in the kernel, so the
//! two bitmaps share one request pool. Every tag owns one pre-allocated
//! `Request` slot; taking a tag is what grants exclusive use of the slot.
//!
//! Relies on: `SbitmapQueue` for allocation and sleeping.

use crate::request::Pool;
use crate::sbitmap::{AllocHint, BatchWake, SbitmapQueue, SbqWaiter, WakePolicy};
use crate::sync::Arc;

/// What a device asks of its tag set (`struct blk_mq_tag_set`), from its
/// driver's [`Driver::tag_set`](crate::driver::Driver::tag_set).
///
/// ```
/// use mqblk::TagSetConfig;
///
/// // Four queues of 64 tags, the last one a poll queue, 2 tags reserved.
/// let mut tags = TagSetConfig::new(4, 64);
/// tags.poll_queues = 1;
/// tags.reserved_tags = 2;
/// tags.validate()?;
/// tags.reserved_tags = 64;
/// assert!(tags.validate().unwrap_err().to_string().contains("reserved_tags"));
/// # Ok::<(), mqblk::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagSetConfig {
    /// Hardware queues (`submit_queues` for null_blk).
    pub nr_hw_queues: usize,
    /// Tags per hardware queue, reserved ones included (`hw_queue_depth`).
    pub queue_depth: u32,
    /// Tags set aside for callers that must not fail (reserved requests).
    pub reserved_tags: u32,
    /// Hand out tags in strict round-robin order (BLK_MQ_F_TAG_RR).
    pub round_robin: bool,
    /// How many of the hardware queues (the last ones) are poll queues
    /// (HCTX_TYPE_POLL): hipri requests go there and complete only when
    /// their submitter polls.
    pub poll_queues: usize,
    /// The default queues also serve the POLL map (the notification-toggling design of
    /// the RFC "virtio_blk: implement blk_mq_ops->poll()"): hipri requests
    /// stay on them, flagged, and their submitters poll those queues.
    /// Excludes `poll_queues`.
    pub shared_poll: bool,
    /// Every request completes when its submitter polls its default queue
    /// (no completion thread; the way fio's io_uring engine reaps its own
    /// ring). Excludes `shared_poll`.
    pub submitter_reaps: bool,
}

impl TagSetConfig {
    /// `nr_hw_queues` queues of `queue_depth` tags, nothing reserved, no
    /// poll queues.
    pub fn new(nr_hw_queues: usize, queue_depth: u32) -> Self {
        Self {
            nr_hw_queues,
            queue_depth,
            reserved_tags: 0,
            round_robin: false,
            poll_queues: 0,
            shared_poll: false,
            submitter_reaps: false,
        }
    }

    /// Checks the tag set a driver asks for; the error names the field.
    pub fn validate(&self) -> Result<(), crate::Error> {
        self.check().map_err(crate::Error::Setup)
    }

    fn check(&self) -> Result<(), String> {
        if self.nr_hw_queues == 0 || self.nr_hw_queues > 1024 {
            return Err(format!("nr_hw_queues={} (accepted: 1..=1024)", self.nr_hw_queues));
        }
        if self.queue_depth == 0 || self.queue_depth > 65536 {
            return Err(format!("queue_depth={} (accepted: 1..=65536)", self.queue_depth));
        }
        if self.poll_queues >= self.nr_hw_queues {
            return Err(format!(
                "poll_queues={} leaves no default queue among nr_hw_queues={}",
                self.poll_queues, self.nr_hw_queues
            ));
        }
        if self.shared_poll && self.submitter_reaps {
            return Err("shared_poll and submitter_reaps: a device's default queues are reaped one way".into());
        }
        if self.shared_poll && self.poll_queues > 0 {
            return Err(format!("shared_poll with poll_queues={}: a device polls one way", self.poll_queues));
        }
        if self.reserved_tags >= self.queue_depth {
            return Err(format!("reserved_tags={} must be below queue_depth={}", self.reserved_tags, self.queue_depth));
        }
        Ok(())
    }
}

/// The tags of one hardware queue (`struct blk_mq_tags`).
pub(crate) struct Tags {
    nr_tags: u32,
    nr_reserved_tags: u32,
    pub(crate) bitmap_tags: SbitmapQueue,
    pub(crate) breserved_tags: Option<SbitmapQueue>,
    /// One request slot per tag (the kernel's `static_rqs`).
    pub(crate) pool: Pool,
}

/// What a tag allocation needs from its caller (the kernel's
/// `blk_mq_alloc_data`): the caller's hint, its waiter, its wait queue and
/// the depth it may use.
#[derive(Debug)]
pub(crate) struct AllocData {
    pub(crate) hint: AllocHint,
    pub(crate) waiter: Arc<SbqWaiter>,
    pub(crate) ws_index: usize,
    /// Shallow depth a scheduler may impose (u32::MAX: none).
    pub(crate) shallow_depth: u32,
    /// Tags the caller needs together if it must wait (the pieces left of
    /// a split bio); a handoff policy gathers that many before waking it.
    pub(crate) want: u32,
}

impl AllocData {
    pub(crate) fn new(seed: u32, ws_index: usize) -> Self {
        Self { hint: AllocHint::new(seed), waiter: SbqWaiter::new(), ws_index, shallow_depth: u32::MAX, want: 1 }
    }
}

/// How a tag request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TagGot {
    pub(crate) tag: u32,
    pub(crate) slept: bool,
    /// Time spent on the slow path (sleeping for a tag), 0 on the fast path.
    pub(crate) wait_ns: u64,
}

impl Tags {
    pub(crate) fn new(config: &TagSetConfig, policy: Box<dyn WakePolicy>) -> Self {
        Self::with_min_shallow(config, policy, u32::MAX)
    }

    /// Tags whose callers may be limited to a shallow depth as low as
    /// `min_shallow_depth` (a scheduler's `limit_depth`): the wake batch is
    /// sized so such a caller is still woken (`sbitmap_queue_min_shallow_depth`).
    pub(crate) fn with_min_shallow(config: &TagSetConfig, policy: Box<dyn WakePolicy>, min_shallow_depth: u32) -> Self {
        let nr_tags = config.queue_depth;
        let nr_reserved_tags = config.reserved_tags;
        let normal = nr_tags - nr_reserved_tags;
        let min_shallow = min_shallow_depth.clamp(1, normal);
        let bitmap_tags = SbitmapQueue::with_policy(normal, None, config.round_robin, min_shallow, policy);
        let breserved_tags = (nr_reserved_tags > 0).then(|| {
            SbitmapQueue::with_policy(
                nr_reserved_tags,
                None,
                config.round_robin,
                nr_reserved_tags,
                Box::<BatchWake>::default(),
            )
        });
        Self { nr_tags, nr_reserved_tags, bitmap_tags, breserved_tags, pool: Pool::new(nr_tags) }
    }

    pub(crate) fn nr_tags(&self) -> u32 {
        self.nr_tags
    }

    pub(crate) fn nr_reserved_tags(&self) -> u32 {
        self.nr_reserved_tags
    }

    /// Gets a tag, sleeping until one frees unless `nowait`.
    #[inline(always)]
    pub(crate) fn get(
        &self,
        data: &mut AllocData,
        reserved: bool,
        nowait: bool,
        before_sleep: impl FnMut(),
    ) -> Option<TagGot> {
        let (sbq, offset) = match (&self.breserved_tags, reserved) {
            (Some(sbq), true) => (sbq, 0),
            (None, true) => return None, // no reserved tags configured
            (_, false) => (&self.bitmap_tags, self.nr_reserved_tags),
        };
        let shallow_depth = data.shallow_depth.min(sbq.depth());
        // A handoff policy may have granted this caller bits while it waited.
        if let Some(bit) = data.waiter.take_granted(sbq) {
            return Some(TagGot { tag: bit + offset, slept: false, wait_ns: 0 });
        }
        if let Some(bit) = sbq.get_shallow(&mut data.hint, shallow_depth) {
            return Some(TagGot { tag: bit + offset, slept: false, wait_ns: 0 });
        }
        if nowait {
            return None;
        }
        data.waiter.set_want(data.want);
        // The clock is read only here, off the fast path: the tag-wait time
        // is what the experiments report beside the tag-wait count.
        let start_ns = crate::clock::now_ns();
        let (bit, slept) = sbq.get_or_wait(&mut data.hint, shallow_depth, &data.waiter, data.ws_index, before_sleep);
        let wait_ns = if slept { crate::clock::now_ns().saturating_sub(start_ns) } else { 0 };
        Some(TagGot { tag: bit + offset, slept, wait_ns })
    }

    /// Takes up to `nr` normal tags with one compare-and-swap on one bitmap
    /// word (a plug's batch, `blk_mq_get_tags`): returns the first tag and a
    /// mask of those obtained (bit i: tag `first + i`). Never sleeps; None
    /// when the caller is depth-limited or no word has a free bit.
    pub(crate) fn get_batch(&self, data: &mut AllocData, nr: u32) -> Option<(u32, usize)> {
        let sbq = &self.bitmap_tags;
        if data.shallow_depth < sbq.depth() {
            return None; // a limited caller takes tags one at a time
        }
        let nr = nr.clamp(1, crate::sbitmap::BITS_PER_WORD);
        sbq.get_batch(nr, &mut data.hint).map(|(bit, mask)| (bit + self.nr_reserved_tags, mask))
    }

    /// Frees `tag`, waking waiters per the wakeup policy.
    #[inline(always)]
    pub(crate) fn put(&self, tag: u32) {
        debug_assert!(tag < self.nr_tags, "tag {tag} beyond {}", self.nr_tags);
        if tag < self.nr_reserved_tags {
            return self.put_reserved(tag);
        }
        self.bitmap_tags.clear(tag - self.nr_reserved_tags, None);
    }

    #[inline(never)]
    fn put_reserved(&self, tag: u32) {
        let sbq = self.breserved_tags.as_ref().expect("reserved tag without reserved bitmap");
        sbq.clear(tag, None);
    }

    /// Gives back tags granted to `data`'s waiter and not used.
    pub(crate) fn release_granted(&self, data: &AllocData) {
        if data.waiter.nr_granted() != 0 {
            self.bitmap_tags.release_granted(&data.waiter);
        }
    }

    /// Busy tags (a racy snapshot).
    pub(crate) fn busy(&self) -> u32 {
        self.bitmap_tags.sb().weight() + self.breserved_tags.as_ref().map_or(0, |s| s.sb().weight())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn reserved_tags_come_first() {
        let mut config = TagSetConfig::new(1, 8);
        config.reserved_tags = 2;
        let tags = Tags::new(&config, Box::<BatchWake>::default());
        let mut data = AllocData::new(0, 0);
        let normal = tags.get(&mut data, false, true, || {}).unwrap();
        assert!(normal.tag >= 2, "normal tags are offset by the reserved ones");
        let reserved = tags.get(&mut data, true, true, || {}).unwrap();
        assert!(reserved.tag < 2);
        assert_eq!(tags.busy(), 2);
        tags.put(normal.tag);
        tags.put(reserved.tag);
        assert_eq!(tags.busy(), 0);
    }

    #[test]
    fn nowait_fails_when_exhausted() {
        let config = TagSetConfig::new(1, 4);
        let tags = Tags::new(&config, Box::<BatchWake>::default());
        let mut data = AllocData::new(0, 0);
        for _ in 0..4 {
            tags.get(&mut data, false, true, || {}).unwrap();
        }
        assert!(tags.get(&mut data, false, true, || {}).is_none());
    }

    #[test]
    fn config_validation_names_the_field() {
        let mut config = TagSetConfig::new(1, 4);
        config.reserved_tags = 4;
        assert!(config.validate().unwrap_err().to_string().contains("reserved_tags"));
        assert!(TagSetConfig::new(0, 4).validate().unwrap_err().to_string().contains("nr_hw_queues"));
    }
}
