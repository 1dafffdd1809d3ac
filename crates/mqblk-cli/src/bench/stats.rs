//! Per-job measurements (`JobResult`): latency summaries and histograms
//! per data direction (fio's three: read, write, trim; `Dir`), and the thread's CPU use and context switches
//! (getrusage);
//! and the whole process's CPU while every job ran, split into the job
//! threads' and the device's threads' (`ProcessCpu`).

use hdrhistogram::Histogram;
use mqblk::ClientStats;

/// fio's data directions, in fio's order (its `DDIR_READ`, `DDIR_WRITE`,
/// `DDIR_TRIM`): an index into per-direction arrays, as u8 so that a slot
/// keeps it in one byte and indexing by it needs no bounds check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Dir {
    #[default]
    Read = 0,
    Write = 1,
    Trim = 2,
}

impl Dir {
    /// Read or write, from a pattern's choice.
    #[inline(always)]
    pub fn of_write(is_write: bool) -> Self {
        if is_write {
            Dir::Write
        } else {
            Dir::Read
        }
    }
}

/// What one job thread measured.
#[derive(Debug, Clone)]
pub struct JobResult {
    pub read: DirStats,
    pub write: DirStats,
    pub trim: DirStats,
    pub elapsed_ns: u64,
    pub rusage: Rusage,
    pub client: ClientStats,
    /// First error's errno (0: none), as fio's "error".
    pub error: i32,
    /// The first error's errno even if the job went past it
    /// (`continue_on_error`: fio's "first_error"; 0: none).
    pub first_error: i32,
    /// The queue depth a `latency_target` search settled on (fio's
    /// "latency_depth"; else the job's iodepth).
    pub latency_depth: usize,
    /// When the job started measuring, ms since the Unix epoch (fio's
    /// "job_start"; 0: it never started).
    pub job_start_ms: u64,
    /// What its verification checked (verify/).
    pub verify: super::verify::VerifyCounts,
}

impl JobResult {
    /// A job that did nothing (stopped before it started).
    pub fn empty() -> Self {
        Self {
            read: DirStats::default(),
            write: DirStats::default(),
            trim: DirStats::default(),
            elapsed_ns: 0,
            rusage: Rusage::default(),
            client: ClientStats::default(),
            error: 0,
            first_error: 0,
            latency_depth: 0,
            job_start_ms: 0,
            verify: Default::default(),
        }
    }

    /// The three directions' stats, in `Dir` order.
    pub fn dirs(&self) -> [&DirStats; 3] {
        [&self.read, &self.write, &self.trim]
    }

    /// Every direction's completed I/Os.
    pub fn total_ios(&self) -> u64 {
        self.dirs().iter().map(|d| d.ios).sum()
    }

    /// Adds another job's measurements (group reporting): totals add up,
    /// the run lasts as long as the longest job, the first error stays.
    pub fn merge(&mut self, o: &JobResult) {
        self.read.merge(&o.read);
        self.write.merge(&o.write);
        self.trim.merge(&o.trim);
        self.elapsed_ns = self.elapsed_ns.max(o.elapsed_ns);
        self.rusage.add(&o.rusage);
        self.client.submitted += o.client.submitted;
        self.client.completed += o.client.completed;
        self.client.tag_waits += o.client.tag_waits;
        self.client.tag_wait_ns += o.client.tag_wait_ns;
        self.client.completion_sleeps += o.client.completion_sleeps;
        if self.error == 0 {
            self.error = o.error;
        }
        if self.first_error == 0 {
            self.first_error = o.first_error;
        }
        self.verify.merge(&o.verify);
        self.job_start_ms = match (self.job_start_ms, o.job_start_ms) {
            (0, b) => b,
            (a, 0) => a,
            (a, b) => a.min(b),
        };
    }
}

/// fio's default completion-latency percentiles.
pub const PERCENTILES: &[f64] =
    &[1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99];

/// min / max / mean / stddev without a histogram (slat, lat).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub n: u64,
    pub min: u64,
    pub max: u64,
    sum: f64,
    sum_sq: f64,
}

impl Default for Summary {
    fn default() -> Self {
        Self { n: 0, min: u64::MAX, max: 0, sum: 0.0, sum_sq: 0.0 }
    }
}

impl Summary {
    #[inline]
    pub fn add(&mut self, v: u64) {
        self.n += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        // Through i64: one conversion instruction, where u64 -> f64 takes
        // several (x86 has no unsigned conversion before AVX-512); a
        // latency in ns is far below 2^63.
        let f = v as i64 as f64;
        self.sum += f;
        self.sum_sq += f * f;
    }

    pub fn merge(&mut self, o: &Summary) {
        self.n += o.n;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sum += o.sum;
        self.sum_sq += o.sum_sq;
    }

    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum / self.n as f64
        }
    }

    /// Sample standard deviation, as fio reports it.
    pub fn stddev(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let n = self.n as f64;
        ((self.sum_sq - self.sum * self.sum / n) / (n - 1.0)).max(0.0).sqrt()
    }

    pub fn min_or_zero(&self) -> u64 {
        if self.n == 0 {
            0
        } else {
            self.min
        }
    }
}

/// Everything measured for one direction (read, write or trim) of one job.
#[derive(Debug, Clone)]
pub struct DirStats {
    pub ios: u64,
    pub bytes: u64,
    pub errors: u64,
    pub slat: Summary,
    pub clat: Summary,
    pub lat: Summary,
    pub clat_hist: Histogram<u64>,
    /// Total latency (submission + completion: includes waiting for a
    /// tag), for fio's `lat_ns` percentiles.
    pub lat_hist: Histogram<u64>,
}

impl Default for DirStats {
    fn default() -> Self {
        Self {
            ios: 0,
            bytes: 0,
            errors: 0,
            slat: Summary::default(),
            clat: Summary::default(),
            lat: Summary::default(),
            // 1 ns .. 1 h at 3 significant digits: allocated once per job.
            clat_hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds"),
            lat_hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds"),
        }
    }
}

impl DirStats {
    pub fn merge(&mut self, o: &DirStats) {
        self.ios += o.ios;
        self.bytes += o.bytes;
        self.errors += o.errors;
        self.slat.merge(&o.slat);
        self.clat.merge(&o.clat);
        self.lat.merge(&o.lat);
        // Same bounds on both sides: cannot fail.
        self.clat_hist.add(&o.clat_hist).expect("histograms share bounds");
        self.lat_hist.add(&o.lat_hist).expect("histograms share bounds");
    }

    /// Records one I/O's latencies; the total latency's histogram only
    /// with `lat_hist` (fio's `lat_percentiles`).
    #[inline]
    pub fn record_latency(&mut self, slat_ns: u64, clat_ns: u64, lat_hist: bool) {
        self.slat.add(slat_ns);
        self.clat.add(clat_ns);
        self.lat.add(slat_ns + clat_ns);
        self.clat_hist.saturating_record(clat_ns.max(1));
        if lat_hist {
            self.lat_hist.saturating_record((slat_ns + clat_ns).max(1));
        }
    }

    /// Total-latency percentile `p` (0..=100), ns.
    pub fn lat_percentile(&self, p: f64) -> u64 {
        if self.lat_hist.is_empty() {
            0
        } else {
            self.lat_hist.value_at_quantile(p / 100.0)
        }
    }

    pub fn percentile(&self, p: f64) -> u64 {
        if self.clat_hist.is_empty() {
            0
        } else {
            self.clat_hist.value_at_quantile(p / 100.0)
        }
    }
}

/// CPU use of one thread between two points (getrusage RUSAGE_THREAD).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rusage {
    pub user_ns: u64,
    pub sys_ns: u64,
    pub voluntary_ctx: u64,
    pub involuntary_ctx: u64,
    pub minflt: u64,
    pub majflt: u64,
}

impl Rusage {
    /// The calling thread's counters now.
    pub fn thread_now() -> Self {
        Self::now(libc::RUSAGE_THREAD)
    }

    /// The whole process's counters now: every thread, the device's
    /// completion threads included.
    pub fn process_now() -> Self {
        Self::now(libc::RUSAGE_SELF)
    }

    fn now(who: libc::c_int) -> Self {
        // SAFETY: rusage is plain data; zeroed is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: RUSAGE_THREAD or RUSAGE_SELF with a valid out pointer.
        unsafe {
            libc::getrusage(who, &mut ru);
        }
        let tv_ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
        Self {
            user_ns: tv_ns(ru.ru_utime),
            sys_ns: tv_ns(ru.ru_stime),
            voluntary_ctx: ru.ru_nvcsw as u64,
            involuntary_ctx: ru.ru_nivcsw as u64,
            minflt: ru.ru_minflt as u64,
            majflt: ru.ru_majflt as u64,
        }
    }

    pub fn since(&self, start: &Rusage) -> Rusage {
        Rusage {
            user_ns: self.user_ns.saturating_sub(start.user_ns),
            sys_ns: self.sys_ns.saturating_sub(start.sys_ns),
            voluntary_ctx: self.voluntary_ctx.saturating_sub(start.voluntary_ctx),
            involuntary_ctx: self.involuntary_ctx.saturating_sub(start.involuntary_ctx),
            minflt: self.minflt.saturating_sub(start.minflt),
            majflt: self.majflt.saturating_sub(start.majflt),
        }
    }

    pub fn add(&mut self, o: &Rusage) {
        self.user_ns += o.user_ns;
        self.sys_ns += o.sys_ns;
        self.voluntary_ctx += o.voluntary_ctx;
        self.involuntary_ctx += o.involuntary_ctx;
        self.minflt += o.minflt;
        self.majflt += o.majflt;
    }
}

/// The whole process's CPU (getrusage RUSAGE_SELF: the job threads, the
/// device's completion threads, the supervisor) over the window in which
/// every job was measuring, with the I/Os completed in that window: what a
/// job's own CPU (RUSAGE_THREAD) leaves out, e.g. a null device's
/// completion threads spinning to their due times.
///
/// The same window split by thread (thread_cpu.rs): the job threads
/// (submitting, and with hipri polling), and the device's own threads
/// (every thread but the jobs and the supervisor: a null device's
/// completion threads, a file device's rings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessCpu {
    pub user_ns: u64,
    pub sys_ns: u64,
    pub ios: u64,
    pub window_ns: u64,
    /// The job threads' CPU time in the window, summed.
    pub job_threads_ns: u64,
    /// The device's threads' CPU time in the window, summed.
    pub device_threads_ns: u64,
    /// How many device threads ran in the window.
    pub device_threads: u32,
}

impl ProcessCpu {
    /// CPU time per I/O, ns.
    pub fn cpu_ns_per_io(&self) -> f64 {
        (self.user_ns + self.sys_ns) as f64 / self.ios.max(1) as f64
    }

    /// The job threads' CPU time per I/O, ns.
    pub fn job_threads_ns_per_io(&self) -> f64 {
        self.job_threads_ns as f64 / self.ios.max(1) as f64
    }

    /// The device's threads' CPU time per I/O, ns.
    pub fn device_threads_ns_per_io(&self) -> f64 {
        self.device_threads_ns as f64 / self.ios.max(1) as f64
    }

    /// CPUs kept busy on average (1.0: one CPU all the time).
    pub fn cpus_busy(&self) -> f64 {
        (self.user_ns + self.sys_ns) as f64 / self.window_ns.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_mean_and_stddev() {
        let mut s = Summary::default();
        for v in [2, 4, 4, 4, 5, 5, 7, 9] {
            s.add(v);
        }
        assert_eq!((s.min, s.max, s.n), (2, 9, 8));
        assert!((s.mean() - 5.0).abs() < 1e-9);
        assert!((s.stddev() - 2.138_089_935).abs() < 1e-6);
    }

    #[test]
    fn percentiles_from_histogram() {
        let mut d = DirStats::default();
        for v in 1..=1000u64 {
            d.record_latency(10, v * 1000, v % 2 == 0);
        }
        let p50 = d.percentile(50.0);
        assert!((499_000..=501_000).contains(&p50), "{p50}");
        assert_eq!(d.lat.min, 1010);
        // The total-latency histogram saw only the I/Os asked for.
        assert_eq!(d.lat_hist.len(), 500);
        assert!(d.lat_percentile(0.0) >= 2010, "{}", d.lat_percentile(0.0));
    }

    #[test]
    fn process_rusage_counts_other_threads() {
        // The thread spins until its own CPU clock says 30 ms (a wall-clock
        // spin gets less on a loaded machine); the process must count them.
        fn thread_cpu_ns() -> u64 {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: writes one timespec we own.
            assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) }, 0);
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        }
        let a = Rusage::process_now();
        std::thread::spawn(|| {
            let start = thread_cpu_ns();
            while thread_cpu_ns() - start < 30_000_000 {
                std::hint::spin_loop();
            }
        })
        .join()
        .unwrap();
        let d = Rusage::process_now().since(&a);
        assert!(d.user_ns + d.sys_ns >= 25_000_000, "{d:?}");
    }

    #[test]
    fn rusage_counts_a_sleep_as_voluntary_switch() {
        let a = Rusage::thread_now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let d = Rusage::thread_now().since(&a);
        assert!(d.voluntary_ctx >= 1);
    }
}
