//! The README's scheduler with a tunable of its own ("Writing a policy"):
//! reads first, up to `read_batch` of them in a row while writes wait,
//! registered as `reads-first` and offered to the whole `mqblk` command
//! line. The README shows the same code without the counters; at exit the
//! program prints how many reads and writes it dispatched.
//!
//! ```text
//! cargo run --release -p mqblk-cli --example reads_first -- bench \
//!     --device null:gb=1,irqmode=2,completion_nsec=100000,hw_queue_depth=4,nr_requests=64 \
//!     --sched=reads-first,read_batch=8 --stats \
//!     --name=r --rw=randread --iodepth=16 --runtime=2 --time_based \
//!     --name=w --rw=randwrite --iodepth=16 --runtime=2 --time_based
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use mqblk::sched::{Elevator, ElevatorArgs, Op, Rq, RqList};

/// Reads and writes dispatched by every instance in this process.
static READS: AtomicU64 = AtomicU64::new(0);
static WRITES: AtomicU64 = AtomicU64::new(0);

/// Each hardware queue's requests, reads and writes apart, in arrival order.
#[derive(Default)]
struct Queues {
    reads: VecDeque<Rq>,
    writes: VecDeque<Rq>,
    reads_in_a_row: u64,
}

/// Up to `read_batch` reads, then one write, while both wait.
struct ReadsFirst {
    read_batch: u64,
    hctxs: Vec<Mutex<Queues>>,
}

impl Elevator for ReadsFirst {
    fn insert_requests(&self, hctx: usize, rqs: &mut RqList) {
        let mut q = self.hctxs[hctx].lock().unwrap();
        while let Some(rq) = rqs.pop_front() {
            if rq.op() == Op::Read {
                q.reads.push_back(rq)
            } else {
                q.writes.push_back(rq)
            }
        }
    }

    fn dispatch_request(&self, hctx: usize) -> Option<Rq> {
        let mut q = self.hctxs[hctx].lock().unwrap();
        if !q.writes.is_empty() && (q.reads.is_empty() || q.reads_in_a_row >= self.read_batch) {
            q.reads_in_a_row = 0;
            WRITES.fetch_add(1, Ordering::Relaxed);
            return q.writes.pop_front();
        }
        let rq = q.reads.pop_front()?;
        q.reads_in_a_row += 1;
        READS.fetch_add(1, Ordering::Relaxed);
        Some(rq)
    }

    fn has_work(&self, hctx: usize) -> bool {
        let q = self.hctxs[hctx].lock().unwrap();
        !q.reads.is_empty() || !q.writes.is_empty()
    }

    /// Lines for `--stats` (the device's dump).
    fn show(&self, out: &mut String) {
        out.push_str(&format!("sched/reads-first read_batch={}\n", self.read_batch));
    }
}

fn reads_first(args: &ElevatorArgs) -> Result<Box<dyn Elevator>, mqblk::Error> {
    // read_batch: 4 unless given, accepted from 1 to 1024; any other value
    // is refused with an error that names the key.
    let read_batch = args.tunables.u64_in("read_batch", 4, 1, 1024)?;
    let hctxs = (0..args.nr_hw_queues).map(|_| Mutex::default()).collect();
    Ok(Box::new(ReadsFirst { read_batch, hctxs }))
}

fn main() -> std::process::ExitCode {
    mqblk::sched::register_elevator("reads-first", &["read_batch"], reads_first);
    let code = mqblk_cli::run(std::env::args());
    let (reads, writes) = (READS.load(Ordering::Relaxed), WRITES.load(Ordering::Relaxed));
    eprintln!("reads-first: dispatched {reads} reads, {writes} writes");
    code
}
