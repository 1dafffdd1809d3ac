//! Service models of the null device: when a request would finish on a
//! device with limited internal parallelism, so that the source's HDD, SSD
//! and NVMe can be reproduced (`mqblk experiment tag-wakeup`, after "\[RFC\]
//! blk-mq: provide more tags for woken-up process when tag allocation is
//! busy", 2020).
//!
//! - `rotational=1`: one request at a time. Service time = `completion_nsec`
//!   (fixed per-request overhead, e.g. average rotational latency) + a seek
//!   that grows with the distance from where the previous request ended
//!   (track-to-track `seek_nsec / 10` up to full-stroke `seek_nsec`, by the
//!   square root of the distance over the capacity; zero for an adjacent
//!   request) + the transfer at `mbps` (0: free).
//! - `channels=N`: N internal channels, each serving one request at a time
//!   for `completion_nsec` + its transfer at `mbps` per channel (0: free);
//!   a request takes the channel free soonest. `channels=1` with `mbps` is
//!   the serial device of the plug-merge experiment: a fixed cost per
//!   request plus transfer time, so merging pays.
//! - otherwise `mbps` alone throttles the whole device (a shared timeline).
//!
//! Each model turns a request into a due time; the completion thread (or
//! the submitter, with irqmode=0) completes it then.

use mqblk_sync::{AtomicU64, Mutex, Ordering};

use crate::splitmix::SplitMix;

/// The rotational disk: a head position and one timeline.
pub(crate) struct Rotational {
    seek_nsec: u64,
    completion_nsec: u64,
    capacity_bytes: u64,
    bytes_per_sec: u64,
    /// (time the disk is free, byte position where the head is).
    state: Mutex<(u64, u64)>,
    pub(crate) seeks: AtomicU64,
    pub(crate) sequential: AtomicU64,
}

impl Rotational {
    pub(crate) fn new(seek_nsec: u64, completion_nsec: u64, capacity_bytes: u64, mbps: u64) -> Self {
        Self {
            seek_nsec,
            completion_nsec,
            capacity_bytes,
            bytes_per_sec: mbps << 20,
            state: Mutex::new((0, 0)),
            seeks: AtomicU64::new(0),
            sequential: AtomicU64::new(0),
        }
    }

    /// Seek time from byte position `from` to `to`.
    pub(crate) fn seek_ns(&self, from: u64, to: u64) -> u64 {
        let distance = from.abs_diff(to);
        if distance == 0 {
            return 0;
        }
        let track_to_track = self.seek_nsec / 10;
        let fraction = (distance as f64 / self.capacity_bytes as f64).min(1.0).sqrt();
        track_to_track + ((self.seek_nsec - track_to_track) as f64 * fraction) as u64
    }

    /// Serves `len` bytes at `pos`, arriving at `now`: returns when it ends.
    pub(crate) fn reserve(&self, now: u64, pos: u64, len: u64) -> u64 {
        let mut state = self.state.lock();
        let (free_at, head) = *state;
        let seek = self.seek_ns(head, pos);
        if seek == 0 {
            self.sequential.fetch_add(1, Ordering::Relaxed);
        } else {
            self.seeks.fetch_add(1, Ordering::Relaxed);
        }
        let xfer = transfer_ns(len, self.bytes_per_sec);
        let done = free_at.max(now) + self.completion_nsec + seek + xfer;
        *state = (done, pos + len);
        done
    }
}

/// Time to move `len` bytes at `bytes_per_sec` (0: free).
fn transfer_ns(len: u64, bytes_per_sec: u64) -> u64 {
    if bytes_per_sec == 0 {
        return 0;
    }
    (u128::from(len) * 1_000_000_000 / u128::from(bytes_per_sec)) as u64
}

/// An SSD or NVMe device's internal channels.
///
/// With every request alike, channels that start together finish together:
/// a queue kept full completes its requests in bursts of `nr`, one burst per
/// service time, for as long as the run lasts. A real SSD's reads vary in
/// time, so its completions drift apart and free tags one at a time.
/// `jitter_pct` draws each request's service time uniformly within that
/// many percent either side of its mean, which keeps the mean (and so the
/// bandwidth) and breaks the lockstep. Tag wakeups depend on which of the
/// two the device does: a burst of 32 frees serves every woken sleeper,
/// single frees leave most of 5.6's batch of woken sleepers without a tag.
pub(crate) struct Channels {
    service_nsec: u64,
    bytes_per_sec: u64,
    jitter_pct: u64,
    /// The jitter's draws.
    jitter_seq: SplitMix,
    /// When each channel is free.
    free_at: Box<[AtomicU64]>,
}

impl Channels {
    pub(crate) fn new(nr: usize, service_nsec: u64, mbps: u64, jitter_pct: u64) -> Self {
        assert!(nr > 0, "at least one channel");
        assert!(jitter_pct < 100, "a jitter of 100% or more would allow no service time at all");
        Self {
            service_nsec,
            bytes_per_sec: mbps << 20,
            jitter_pct,
            jitter_seq: SplitMix::new(0),
            free_at: (0..nr).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Serves a request of `len` bytes arriving at `now` on the channel
    /// free soonest; returns when it ends.
    pub(crate) fn reserve(&self, now: u64, len: u64) -> u64 {
        let busy = self.jittered(self.service_nsec + transfer_ns(len, self.bytes_per_sec));
        loop {
            let (index, free_at) = self
                .free_at
                .iter()
                .enumerate()
                .map(|(i, c)| (i, c.load(Ordering::Acquire)))
                .min_by_key(|&(_, t)| t)
                .expect("at least one channel");
            let done = free_at.max(now) + busy;
            if self.free_at[index].compare_exchange(free_at, done, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                return done;
            }
        }
    }

    /// `busy_ns` moved uniformly within `jitter_pct` percent either side.
    fn jittered(&self, busy_ns: u64) -> u64 {
        let span = busy_ns * self.jitter_pct / 100;
        if span == 0 {
            return busy_ns;
        }
        let draw = self.jitter_seq.next();
        busy_ns - span + draw % (2 * span + 1)
    }
}

/// A device-wide bandwidth limit (`mbps`): transfers are laid end to end on
/// one timeline; a request completes when its transfer would have finished.
pub(crate) struct Throttle {
    pub(crate) bytes_per_sec: u64,
    pub(crate) next_free_ns: AtomicU64,
}

impl Throttle {
    /// Reserves the transfer of `bytes` starting no earlier than `now`;
    /// returns when it finishes.
    pub(crate) fn reserve(&self, now: u64, bytes: u64) -> u64 {
        let xfer_ns = (u128::from(bytes) * 1_000_000_000 / u128::from(self.bytes_per_sec)) as u64;
        let mut cur = self.next_free_ns.load(Ordering::Relaxed);
        loop {
            let done = cur.max(now) + xfer_ns;
            match self.next_free_ns.compare_exchange_weak(cur, done, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return done,
                Err(actual) => cur = actual,
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn rotational_seeks_grow_with_distance_and_adjacent_is_free() {
        let r = Rotational::new(8_000_000, 0, 1 << 40, 0);
        assert_eq!(r.seek_ns(4096, 4096), 0);
        let near = r.seek_ns(0, 1 << 20);
        let far = r.seek_ns(0, 1 << 39);
        assert!(near >= 800_000 && near < far && far <= 8_000_000, "{near} {far}");
        // Back to back: the second request starts when the first ends.
        let a = r.reserve(1_000, 0, 1 << 20);
        let b = r.reserve(1_000, 1 << 20, 1 << 20);
        assert_eq!(b, a, "adjacent, no transfer cost: no extra time");
        let c = r.reserve(1_000, 1 << 39, 4096);
        assert_eq!(c, b + r.seek_ns(2 << 20, 1 << 39));
    }

    #[test]
    fn channels_serve_in_parallel_then_queue() {
        let ch = Channels::new(2, 100, 0, 0);
        assert_eq!(ch.reserve(1_000, 4096), 1_100);
        assert_eq!(ch.reserve(1_000, 4096), 1_100);
        assert_eq!(ch.reserve(1_000, 4096), 1_200, "third request waits for a channel");
    }

    #[test]
    fn one_channel_is_serial_with_transfer_time() {
        // 1 MiB/s: 1 KiB takes 976,562 ns.
        let ch = Channels::new(1, 100, 1, 0);
        let one = ch.reserve(0, 1024);
        assert_eq!(one, 100 + 976_562);
        let merged = ch.reserve(one, 16 * 1024);
        assert_eq!(merged - one, 100 + 15_625_000, "a merged request pays the fixed cost once");
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "safe arithmetic over 4,000 draws: the other channel tests run the same code under Miri, which interprets this one for minutes"
    )]
    fn jitter_spreads_service_times_around_the_mean_and_within_bounds() {
        // One channel, requests back to back: each end - start is one
        // service time.
        let ch = Channels::new(1, 100_000, 0, 25);
        let (mut prev, mut sum, mut lo, mut hi) = (0, 0u64, u64::MAX, 0);
        let n = 4000;
        for _ in 0..n {
            let done = ch.reserve(0, 4096);
            let busy = done - prev;
            (lo, hi, sum, prev) = (lo.min(busy), hi.max(busy), sum + busy, done);
        }
        assert!(lo >= 75_000 && hi <= 125_000, "within 25% either side: {lo}..{hi}");
        assert!(lo < 76_000 && hi > 124_000, "the whole range is drawn: {lo}..{hi}");
        let mean = sum / n;
        assert!(mean.abs_diff(100_000) < 1_500, "the mean service time is kept: {mean}");
    }

    #[test]
    fn channels_started_together_finish_together_unless_jittered() {
        let alike = Channels::new(4, 100_000, 0, 0);
        let ends: Vec<u64> = (0..4).map(|_| alike.reserve(0, 4096)).collect();
        assert!(ends.iter().all(|&e| e == 100_000), "{ends:?}");
        let jittered = Channels::new(4, 100_000, 0, 25);
        let mut ends: Vec<u64> = (0..4).map(|_| jittered.reserve(0, 4096)).collect();
        ends.dedup();
        assert!(ends.len() > 1, "jittered channels drift apart: {ends:?}");
    }
}
