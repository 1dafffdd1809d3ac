//! How long a cache line takes to go from one CPU to another and back: two
//! threads, each pinned to its CPU, hand a counter back and forth through
//! one atomic. On a VM the host decides where the two vCPUs run (two
//! hyperthreads of a core, two cores, two sockets), so this round trip
//! changes from run to run, and with it every figure of two threads that
//! stream to each other (bench's job and the null device's completion
//! thread on two CPUs: scripts/default-job-stability.sh).
//!
//!   cargo run --release -p mqblk-sync --example cacheline_pingpong [CPU_A CPU_B [ROUNDS [RUNS]]]
//!
//! Prints the mean round trip in ns of each run (default: CPUs 0 and 1,
//! 2,000,000 round trips, 5 runs, a 1 s pause before each, as an idle
//! vCPU is where the host moves it).
//!
//! SPDX-License-Identifier: MIT OR Apache-2.0

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn pin(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    assert!(cpu < libc::CPU_SETSIZE as usize, "CPU {cpu} beyond CPU_SETSIZE");
    // SAFETY: cpu < CPU_SETSIZE (asserted above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is this thread; the set is initialised above.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    assert_eq!(rc, 0, "sched_setaffinity to CPU {cpu}: {}", std::io::Error::last_os_error());
}

/// One run: the mean ns of a round trip over `rounds`.
fn run(cpu_a: usize, cpu_b: usize, rounds: u64) -> f64 {
    let flag = Arc::new(AtomicU64::new(0));
    let other = flag.clone();
    let echo = std::thread::spawn(move || {
        pin(cpu_b);
        for i in 0..rounds {
            while other.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            other.store(2 * i + 2, Ordering::Release);
        }
    });
    pin(cpu_a);
    let start = Instant::now();
    for i in 0..rounds {
        flag.store(2 * i + 1, Ordering::Release);
        while flag.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / rounds as f64;
    echo.join().expect("echo thread");
    ns
}

fn main() {
    let args: Vec<usize> =
        std::env::args().skip(1).map(|a| a.parse().unwrap_or_else(|_| panic!("not a number: {a}"))).collect();
    let arg = |i: usize, default: usize| args.get(i).copied().unwrap_or(default);
    let (cpu_a, cpu_b, rounds, runs) = (arg(0, 0), arg(1, 1), arg(2, 2_000_000), arg(3, 5));
    for r in 1..=runs {
        std::thread::sleep(Duration::from_secs(1));
        println!("run {r}: CPU {cpu_a} <-> CPU {cpu_b}: {:.1} ns per round trip", run(cpu_a, cpu_b, rounds as u64));
    }
}
