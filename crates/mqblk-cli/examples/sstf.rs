//! An I/O scheduler written outside mqblk: SSTF (shortest seek time
//! first), registered under the name `sstf` and then offered to the whole
//! `mqblk` command line, so that any device spec can choose it:
//!
//! ```text
//! cargo run -p mqblk-cli --example sstf -- bench --device null:gb=1,sched=sstf \
//!     --rw=randread --iodepth=32 --runtime=2
//! ```
//!
//! SSTF dispatches, of the requests it holds, the one whose first sector
//! is nearest to where the previous one ended (the disk head). It can
//! starve far requests under a steady stream of near ones: mq-deadline's
//! FIFOs with expiry times exist for that.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use mqblk::driver::{Rq, RqList};
use mqblk::sched::Elevator;

/// Requests dispatched by every SSTF instance of this process.
static DISPATCHED: AtomicU64 = AtomicU64::new(0);

/// One hardware queue's requests.
#[derive(Default)]
struct HctxQueue {
    /// Queued requests by (first sector, scheduler tag): the tag makes
    /// keys unique when two requests start at the same sector.
    sorted: BTreeMap<(u64, u32), Rq>,
    /// The sector after the last dispatched request.
    head: u64,
}

struct Sstf {
    hctxs: Vec<Mutex<HctxQueue>>,
}

impl Sstf {
    fn new(nr_hw_queues: usize) -> Self {
        Self { hctxs: (0..nr_hw_queues).map(|_| Mutex::default()).collect() }
    }
}

/// Every request may use every scheduler tag: `limit_depth` keeps its
/// default (no shallow depth).
impl Elevator for Sstf {
    fn insert_requests(&self, hctx: usize, rqs: &mut RqList) {
        let mut q = self.hctxs[hctx].lock().unwrap();
        while let Some(rq) = rqs.pop_front() {
            q.sorted.insert((rq.sector(), rq.sched_tag()), rq);
        }
    }

    fn dispatch_request(&self, hctx: usize) -> Option<Rq> {
        let mut q = self.hctxs[hctx].lock().unwrap();
        let head = q.head;
        // The nearest request at or after the head, and the nearest before.
        let after = q.sorted.range((head, 0)..).next().map(|(k, _)| *k);
        let before = q.sorted.range(..(head, 0)).next_back().map(|(k, _)| *k);
        let key = match (after, before) {
            (Some(a), Some(b)) => {
                if a.0 - head <= head - b.0 {
                    a
                } else {
                    b
                }
            }
            (Some(k), None) | (None, Some(k)) => k,
            (None, None) => return None,
        };
        let rq = q.sorted.remove(&key).expect("a key just found");
        q.head = rq.sector() + u64::from(rq.nr_sectors());
        DISPATCHED.fetch_add(1, Ordering::Relaxed);
        Some(rq)
    }

    fn has_work(&self, hctx: usize) -> bool {
        !self.hctxs[hctx].lock().unwrap().sorted.is_empty()
    }

    /// Lines for `mqblk bench --stats` (the device's stats dump).
    fn show(&self, out: &mut String) {
        let _ = writeln!(out, "sstf_dispatched={}", DISPATCHED.load(Ordering::Relaxed));
    }
}

fn main() -> ExitCode {
    // The one call that makes `sched=sstf` mean this scheduler.
    mqblk::sched::register_elevator("sstf", &[], |args| Ok(Box::new(Sstf::new(args.nr_hw_queues))));
    let code = mqblk_cli::run(std::env::args());
    eprintln!("sstf: dispatched {} requests", DISPATCHED.load(Ordering::Relaxed));
    code
}
