//! The supervisor: the main thread's watch over a phase's jobs while
//! they run. Every 20 ms it moves each job from ramp to run to stop
//! (`ramp_time`, `runtime`), stops the jobs `exitall` (with `exit_what`)
//! or steady state (steadystate.rs) says, takes the 500 ms bandwidth and
//! IOPS samples, draws the progress bar, and measures the process's CPU
//! while every job is measuring. Relies on the jobs' published counters
//! (job.rs `Live`) only: it never touches a job's I/O.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::job::{PHASE_RUN, PHASE_STOP};
use super::options::{ExitWhat, JobOptions};
use super::stats::{ProcessCpu, Rusage};
use super::{report, steadystate, thread_cpu, Running, Shared, SAMPLE_NS};

/// The process-CPU window: opened at the first tick at which every job is
/// measuring, closed just before the first job is told to stop (or at the
/// first tick after one ended). Process CPU and I/Os are read at the same
/// instants, so the figure per I/O does not depend on the 20 ms tick.
#[derive(Default)]
struct ProcessWindow {
    start: Option<WindowStart>,
    result: Option<ProcessCpu>,
}

/// What the window's opening saw.
struct WindowStart {
    at: Instant,
    rusage: Rusage,
    ios: u64,
    /// Every thread's CPU time (thread_cpu.rs).
    threads: HashMap<i32, u64>,
}

impl ProcessWindow {
    fn ios(shared: &[Shared]) -> u64 {
        shared.iter().map(|sh| sh.live.ios.load(Ordering::Relaxed)).sum()
    }

    /// Opens the window if it never was and every job is measuring now.
    fn maybe_open(&mut self, shared: &[Shared]) {
        let all =
            shared.iter().all(|sh| sh.live.measuring.load(Ordering::Acquire) && !sh.live.done.load(Ordering::Acquire));
        if self.start.is_none() && self.result.is_none() && all {
            self.start = Some(WindowStart {
                threads: thread_cpu::snapshot(),
                at: Instant::now(),
                rusage: Rusage::process_now(),
                ios: Self::ios(shared),
            });
        }
    }

    /// Closes an open window.
    fn close(&mut self, shared: &[Shared]) {
        let Some(start) = self.start.take() else { return };
        let ru = Rusage::process_now().since(&start.rusage);
        let (ios, window_ns) = (Self::ios(shared).saturating_sub(start.ios), start.at.elapsed().as_nanos() as u64);
        let spent = thread_cpu::since(&start.threads, &thread_cpu::snapshot());
        // Every job had started (the window opens once all measure), so
        // every job thread's id is set.
        let jobs: Vec<i32> = shared.iter().map(|sh| sh.live.tid.load(Ordering::Acquire)).collect();
        let supervisor = thread_cpu::current_tid();
        let (mut job_threads_ns, mut device_threads_ns, mut device_threads) = (0, 0, 0);
        for (tid, ns) in spent {
            if jobs.contains(&tid) {
                job_threads_ns += ns;
            } else if tid != supervisor {
                device_threads_ns += ns;
                device_threads += 1;
            }
        }
        self.result = Some(ProcessCpu {
            user_ns: ru.user_ns,
            sys_ns: ru.sys_ns,
            ios,
            window_ns,
            job_threads_ns,
            device_threads_ns,
            device_threads,
        });
    }
}

/// Keeps every job's timeline and samples until all are done; returns the
/// process's CPU while every job was measuring, and whether an `exitall`
/// job with `exit_what=all` ended the run.
pub(super) fn supervise(
    shared: &[Shared],
    running: &mut [Running],
    bar: &Option<indicatif::ProgressBar>,
) -> (Option<ProcessCpu>, bool) {
    let mut last_bar = (Instant::now(), 0u64);
    let mut window = ProcessWindow::default();
    let units: Vec<_> = shared.iter().map(|sh| (&sh.opts.steady, sh.opts.groupid, sh.opts.group_reporting)).collect();
    let mut steady = steadystate::SteadyWatch::new(&units);
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        if shared.iter().any(|sh| sh.live.done.load(Ordering::Acquire)) {
            window.close(shared);
        }
        window.maybe_open(shared);
        let mut all_done = true;
        // fio's steady state: a job (or group) whose window is steady stops.
        let started = |i: usize| running[i].started && shared[i].live.measuring.load(Ordering::Acquire);
        let counters = |i: usize| {
            let live = &shared[i].live;
            (
                live.ios.load(Ordering::Relaxed),
                live.read_bytes.load(Ordering::Relaxed)
                    + live.write_bytes.load(Ordering::Relaxed)
                    + live.trim_bytes.load(Ordering::Relaxed),
            )
        };
        for i in steady.tick(now, started, counters) {
            window.close(shared);
            shared[i].ctrl.phase.store(PHASE_STOP, Ordering::Release);
        }
        let exits = exitall_stops(shared);
        for (sh, r) in shared.iter().zip(running.iter_mut()) {
            if sh.live.done.load(Ordering::Acquire) {
                continue;
            }
            if exits.stops(sh.opts) {
                window.close(shared);
                sh.ctrl.phase.store(PHASE_STOP, Ordering::Release);
            }
            all_done = false;
            if !r.started {
                if !sh.live.ready.load(Ordering::Acquire) {
                    continue; // still setting up: its clock has not started
                }
                r.start(sh.opts, now);
            }
            if now >= r.ramp_end && sh.ctrl.phase.load(Ordering::Relaxed) < PHASE_RUN {
                sh.ctrl.phase.store(PHASE_RUN, Ordering::Release);
                r.last = (now, 0, [0; 3]);
            }
            r.measuring_from(sh.opts, &sh.live, now);
            if r.stop_at.is_some_and(|t| now >= t) {
                window.close(shared);
                sh.ctrl.phase.store(PHASE_STOP, Ordering::Release);
            }
            take_sample(sh, r, now);
        }
        if let Some(bar) = bar {
            let ios: u64 = shared.iter().map(|sh| sh.live.ios.load(Ordering::Relaxed)).sum();
            let dt = now.duration_since(last_bar.0).as_secs_f64();
            if dt >= 0.5 {
                let iops = ios.saturating_sub(last_bar.1) as f64 / dt;
                bar.set_message(format!("{} IOPS", report::fmt_num(iops)));
                bar.tick();
                last_bar = (now, ios);
            }
        }
        if all_done {
            window.close(shared);
            for (r, ss) in running.iter_mut().zip(steady.results(shared.len())) {
                r.steadystate = ss;
            }
            return (window.result, exits.end_run);
        }
    }
}

/// What the ends of the phase's `exitall` jobs stop (fio's `exit_what`):
/// the groups of those that stop their group, everything, and whether
/// the run ends with this phase.
struct ExitallStops {
    groups: Vec<u32>,
    phase: bool,
    end_run: bool,
}

impl ExitallStops {
    fn stops(&self, opts: &JobOptions) -> bool {
        self.phase || self.groups.contains(&opts.groupid)
    }
}

fn exitall_stops(shared: &[Shared]) -> ExitallStops {
    let mut stops = ExitallStops { groups: Vec::new(), phase: false, end_run: false };
    for sh in shared.iter().filter(|sh| sh.opts.exitall && sh.live.done.load(Ordering::Acquire)) {
        match sh.opts.exit_what {
            ExitWhat::Group => stops.groups.push(sh.opts.groupid),
            ExitWhat::Stonewall => stops.phase = true,
            ExitWhat::All => (stops.phase, stops.end_run) = (true, true),
        }
    }
    stops
}

/// Every 500 ms of measuring: each direction the job does gets a
/// bandwidth sample and an IOPS sample (the I/Os since the last sample,
/// split by the directions' bytes).
fn take_sample(sh: &Shared, r: &mut Running, now: Instant) {
    if !sh.live.measuring.load(Ordering::Acquire) {
        return;
    }
    let dt = now.duration_since(r.last.0);
    if dt.as_nanos() < u128::from(SAMPLE_NS) {
        return;
    }
    let ios = sh.live.ios.load(Ordering::Relaxed);
    let bytes = [&sh.live.read_bytes, &sh.live.write_bytes, &sh.live.trim_bytes].map(|b| b.load(Ordering::Relaxed));
    let secs = dt.as_secs_f64();
    let (_, last_ios, last_bytes) = r.last;
    let delta: Vec<u64> = bytes.iter().zip(last_bytes).map(|(b, l)| b.saturating_sub(l)).collect();
    let dios = ios.saturating_sub(last_ios) as f64;
    let total = delta.iter().sum::<u64>().max(1) as f64;
    let (reads, writes) = sh.opts.directions();
    let does = [reads, writes, sh.opts.rw.trims()];
    for ((samples, d), does) in r.samples.iter_mut().zip(delta).zip(does) {
        if does {
            samples.bw_kib.push(d as f64 / 1024.0 / secs);
            samples.iops.push(dios * d as f64 / total / secs);
        }
    }
    r.last = (now, ios, bytes);
}
