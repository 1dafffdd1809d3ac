//! A tag wakeup policy written outside mqblk: every freed tag wakes one
//! sleeping submitter (the kernel's sbitmap before batched wakeups).
//! Registered under the name `one`, then offered to the whole `mqblk`
//! command line, so that any device spec can choose it with `wake=one`:
//!
//! ```text
//! cargo run -p mqblk-cli --example wake_one -- bench \
//!     --device null:gb=1,hw_queue_depth=4,wake=one \
//!     --rw=randread --iodepth=4 --numjobs=8 --runtime=2
//! ```
//!
//! A policy only runs when tags are contended (submitters sleep for one):
//! above, 8 jobs of depth 4 share 4 tags per hardware queue. Compare the
//! context switches per I/O with `wake=batch` and `wake=handoff`.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};

use mqblk::sbitmap::{SbitmapQueue, WakePolicy};

/// Submitters woken by every instance (one per tag set) in this process.
static WOKEN: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Default)]
struct WakeOne;

impl WakePolicy for WakeOne {
    fn name(&self) -> &'static str {
        "one"
    }

    /// Called after `nr` bits are free in the bitmap, only while someone
    /// waits. Waking through `wake_up_nr` is the contract: it wakes the
    /// waiter at the head of the next wait queue in round-robin order.
    fn bits_freed(&self, sbq: &SbitmapQueue, nr: u32) {
        let woken = sbq.wake_up_nr(nr);
        WOKEN.fetch_add(u64::from(woken), Ordering::Relaxed);
    }

    /// Lines for the stats dump (`mqblk bench --stats`).
    fn show(&self, out: &mut String) {
        let _ = writeln!(out, "woken={}", WOKEN.load(Ordering::Relaxed));
    }
}

fn main() -> ExitCode {
    // The one call that makes `wake=one` mean this policy.
    mqblk::sbitmap::register_wake_policy("one", || Box::new(WakeOne));
    let code = mqblk_cli::run(std::env::args());
    eprintln!("wake=one: woke {} submitters", WOKEN.load(Ordering::Relaxed));
    code
}
