//! The queue's statistics: `DeviceStats` (device-wide counters summed over
//! hardware queues and clients' counters), the queue's own counters, and
//! the debugfs-like dump (`Device::show_stats`): per hardware queue its
//! counters and its tags' sbitmap state, then the scheduler's and the
//! driver's own lines.
//!
//! Relies on: the queue (mod.rs); hctx/ for per-queue counters;
//! completion.rs for the clients' counters; sbitmap for its dump.

use std::fmt::Write as _;

use crate::completion::{CounterTotals, RwCount};
use crate::sync::Ordering;

use super::RequestQueue;

/// Device-wide counters, summed over hardware queues and clients
/// ([`Device::stats`](crate::Device::stats)).
///
/// ```
/// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
/// # ram::register();
/// use mqblk::{Bio, Buf, Device};
///
/// // Requests of at most 8 sectors (4 KiB): larger bios are split.
/// let dev = Device::open("ram:size=64,irqmode=0,max_sectors=8")?;
/// let mut client = dev.client();
/// client.write_at(&[1; 16384], 0)?;
/// client.read_at(&mut [0; 4096], 0)?;
/// let stats = dev.stats();
/// assert_eq!((stats.bios.write, stats.bios.read, stats.bios.total()), (1, 1, 2));
/// assert_eq!((stats.splits, stats.requests.write), (1, 4), "one bio, four requests");
/// assert_eq!((stats.dispatched, stats.completed), (5, 5));
/// assert_eq!(stats.nr_requests, 0, "no scheduler");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DeviceStats {
    /// Requests handed to the driver's `queue_rq`.
    pub dispatched: u64,
    /// Requests the driver completed.
    pub completed: u64,
    /// Bios larger than a request, split into several.
    pub splits: u64,
    /// Bios submitted, by direction (reads; everything else). A split bio
    /// counts once.
    pub bios: RwCount,
    /// Requests made from bios (one per bio not merged, or per split
    /// piece), by direction.
    pub requests: RwCount,
    /// Bios merged into another bio's request, by direction (fio's disk
    /// stats "merge"); `front_merges` of them preceded the request.
    pub merges: RwCount,
    /// Merges of a bio in front of a request.
    pub front_merges: u64,
    /// Plug lists issued to the driver.
    pub plug_flushes: u64,
    /// `queue_rq` calls answered Busy.
    pub busy: u64,
    /// Times a submitter slept waiting for a tag.
    pub tag_waits: u64,
    /// Of those, waits for a scheduler tag: with a scheduler, submitters
    /// beyond `nr_requests` per hardware queue wait here, before the
    /// scheduler sees their requests.
    pub sched_tag_waits: u64,
    /// Scheduler tags per hardware queue (`nr_requests`; 0: no scheduler).
    pub nr_requests: u32,
    /// Time submitters spent sleeping for tags, summed (ns).
    pub tag_wait_ns: u64,
    /// Requests whose timeout handler ran.
    pub timeouts: u64,
    /// Reads served by direct access ([`DirectReads`](crate::DirectReads)),
    /// outside the counts above.
    pub direct_reads: u64,
    /// Of those, reads whose pages were lent past the call
    /// (`DirectReads::read_lent`: a socket holding them by reference).
    pub direct_reads_lent: u64,
}

impl RequestQueue {
    pub(crate) fn note_tag_wait(&self, wait_ns: u64, sched_tag: bool) {
        self.tag_waits.fetch_add(1, Ordering::Relaxed);
        if sched_tag {
            self.sched_tag_waits.fetch_add(1, Ordering::Relaxed);
        }
        self.tag_wait_ns.fetch_add(wait_ns, Ordering::Relaxed);
    }

    pub(crate) fn note_split(&self) {
        self.splits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> DeviceStats {
        let mut s = DeviceStats {
            tag_waits: self.tag_waits.load(Ordering::Relaxed),
            sched_tag_waits: self.sched_tag_waits.load(Ordering::Relaxed),
            nr_requests: self.nr_requests.load(Ordering::Relaxed),
            tag_wait_ns: self.tag_wait_ns.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            splits: self.splits.load(Ordering::Relaxed),
            direct_reads: self.direct_reads.load(Ordering::Relaxed),
            direct_reads_lent: self.direct_reads_lent.load(Ordering::Relaxed),
            ..DeviceStats::default()
        };
        for hctx in self.hctxs.iter() {
            s.dispatched += hctx.stats.queued.load(Ordering::Relaxed);
            s.completed += hctx.stats.completed.load(Ordering::Relaxed);
            s.busy += hctx.stats.busy.load(Ordering::Relaxed);
        }
        let mut t = CounterTotals::default();
        for sink in self.all_clients.lock().iter() {
            sink.counters.add_to(&mut t);
        }
        (s.bios, s.requests, s.merges) = (t.bios, t.requests, t.merges);
        (s.front_merges, s.plug_flushes) = (t.front_merges, t.plug_flushes);
        s
    }

    /// The debugfs-like dump: per hardware queue, its counters and its
    /// tags' sbitmap state, then the driver's own lines.
    pub(crate) fn show(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "driver={}", self.driver.name());
        let _ = writeln!(out, "nr_hw_queues={}", self.hctxs.len());
        let _ = writeln!(out, "tag_waits={}", self.tag_waits.load(Ordering::Relaxed));
        let _ = writeln!(out, "sched_tag_waits={}", self.sched_tag_waits.load(Ordering::Relaxed));
        let _ = writeln!(out, "tag_wait_ns={}", self.tag_wait_ns.load(Ordering::Relaxed));
        let _ = writeln!(out, "timeouts={}", self.timeouts.load(Ordering::Relaxed));
        let _ = writeln!(out, "splits={}", self.splits.load(Ordering::Relaxed));
        let _ = writeln!(out, "direct_reads={}", self.direct_reads.load(Ordering::Relaxed));
        let _ = writeln!(out, "direct_reads_lent={}", self.direct_reads_lent.load(Ordering::Relaxed));
        let s = self.stats();
        let _ = writeln!(out, "plug_nesting={}", self.plug_nesting.name());
        let _ = writeln!(out, "plug_sync={}", u8::from(self.plug_sync));
        let _ = writeln!(out, "scheduler={}", self.sched_name.lock().as_str());
        let _ = writeln!(out, "nr_requests={}", self.nr_requests.load(Ordering::Relaxed));
        let _ = writeln!(out, "bios={} {}", s.bios.read, s.bios.write);
        let _ = writeln!(out, "requests={} {}", s.requests.read, s.requests.write);
        let _ = writeln!(out, "merges={} {} front={}", s.merges.read, s.merges.write, s.front_merges);
        let _ = writeln!(out, "plug_flushes={}", s.plug_flushes);
        for hctx in self.hctxs.iter() {
            let i = hctx.index();
            let st = &hctx.stats;
            let _ = writeln!(out, "hctx{i}/queued={}", st.queued.load(Ordering::Relaxed));
            let _ = writeln!(out, "hctx{i}/completed={}", st.completed.load(Ordering::Relaxed));
            let _ = writeln!(out, "hctx{i}/busy={}", st.busy.load(Ordering::Relaxed));
            let _ = writeln!(out, "hctx{i}/run={}", st.run.load(Ordering::Relaxed));
            let _ = writeln!(out, "hctx{i}/delayed_runs={}", st.delayed_runs.load(Ordering::Relaxed));
            let _ = writeln!(out, "hctx{i}/dispatch={}", hctx.dispatch_len());
            let _ = writeln!(out, "hctx{i}/tags/nr_tags={}", hctx.tags.nr_tags());
            let _ = writeln!(out, "hctx{i}/tags/nr_reserved_tags={}", hctx.tags.nr_reserved_tags());
            let _ = writeln!(out, "hctx{i}/tags/active={}", hctx.tags.busy());
            for line in hctx.tags.bitmap_tags.show().lines() {
                let _ = writeln!(out, "hctx{i}/tags/bitmap_tags/{line}");
            }
            if let Some(reserved) = &hctx.tags.breserved_tags {
                for line in reserved.show().lines() {
                    let _ = writeln!(out, "hctx{i}/tags/breserved_tags/{line}");
                }
            }
        }
        if let Some(s) = self.hctxs[0].sched() {
            s.elevator.show(&mut out);
        }
        self.driver.show(&mut out);
        out
    }
}
