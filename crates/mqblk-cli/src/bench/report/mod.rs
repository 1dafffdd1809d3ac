//! Reports of a run, in fio's formats, each with mqblk's block-layer
//! counters: fio's JSON (`--output-format=json`, and json+ with latency
//! bins: json.rs), fio's terse line (terse.rs) and a fio-like human report
//! (normal.rs). This module holds what they share: the entries reported
//! (a job, or a group of jobs under group_reporting), their bandwidth
//! samples, the device's facts, and number formatting.

use mqblk::DeviceStats;

use super::job::JobResult;
use super::options::JobOptions;
use super::stats::DirStats;

mod json;
mod normal;
mod terse;

pub use json::to_json;
pub use normal::to_human;
pub use terse::to_terse;

/// Bandwidth (KiB/s) and IOPS samples of one direction, every 500 ms.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    pub bw_kib: Vec<f64>,
    pub iops: Vec<f64>,
}

/// One reported entry: a job, or a group of jobs under group_reporting.
#[derive(Debug, Clone)]
pub struct Entry {
    pub opts: JobOptions,
    pub nr_jobs: usize,
    /// What the job measured (summed over the group's jobs).
    pub run: JobResult,
    /// Each direction's samples, in `Dir` order (read, write, trim).
    pub samples: [Samples; 3],
    /// fio's steady-state detection (`ss`), when the job has it.
    pub steadystate: Option<super::steadystate::Steady>,
}

impl Entry {
    pub fn from_result(opts: &JobOptions, r: &JobResult, samples: [Samples; 3]) -> Self {
        Self { opts: opts.clone(), nr_jobs: 1, run: r.clone(), samples, steadystate: None }
    }

    /// Folds another job into this group entry (fio's group_reporting).
    pub fn merge(&mut self, o: &Entry) {
        self.nr_jobs += o.nr_jobs;
        self.run.merge(&o.run);
        for (a, b) in self.samples.iter_mut().zip(&o.samples) {
            merge_samples(a, b);
        }
    }

    fn secs(&self) -> f64 {
        (self.run.elapsed_ns as f64 / 1e9).max(1e-9)
    }

    pub fn total_ios(&self) -> u64 {
        self.run.total_ios()
    }

    pub fn iops(&self, d: &DirStats) -> f64 {
        d.ios as f64 / self.secs()
    }

    /// CPU ns per completed I/O (user + system) across the entry's jobs.
    pub fn cpu_ns_per_io(&self) -> f64 {
        let ios = self.total_ios().max(1) as f64;
        (self.run.rusage.user_ns + self.run.rusage.sys_ns) as f64 / ios
    }

    /// fio's usr_cpu and sys_cpu: percent of the run's time per job.
    fn cpu_pct(&self) -> (f64, f64) {
        let cpu_base = self.secs() * 1e9 * self.nr_jobs as f64;
        (self.run.rusage.user_ns as f64 / cpu_base * 100.0, self.run.rusage.sys_ns as f64 / cpu_base * 100.0)
    }
}

/// Group entries add their jobs' samples taken at the same instants.
fn merge_samples(a: &mut Samples, b: &Samples) {
    for (i, v) in b.bw_kib.iter().enumerate() {
        match a.bw_kib.get_mut(i) {
            Some(x) => *x += v,
            None => a.bw_kib.push(*v),
        }
    }
    for (i, v) in b.iops.iter().enumerate() {
        match a.iops.get_mut(i) {
            Some(x) => *x += v,
            None => a.iops.push(*v),
        }
    }
}

/// (min, max, mean, sample stddev) of samples; zeros without any.
fn sample_stats(v: &[f64]) -> (f64, f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0, 0.0);
    }
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(0.0, f64::max);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = if v.len() > 1 { v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64 } else { 0.0 };
    (min, max, mean, var.sqrt())
}

/// Device-level facts for the report.
pub struct DeviceInfo {
    pub spec: String,
    pub driver: String,
    pub nr_hw_queues: usize,
    /// Of those, poll queues (the last ones): only hipri I/O goes there.
    pub poll_queues: usize,
    pub queue_depth: u32,
    /// The I/O scheduler (`none`, ...).
    pub scheduler: String,
    pub stats: DeviceStats,
}

/// 12345678 -> "12.3M", like fio's num2str with 3 significant digits.
pub fn fmt_num(v: f64) -> String {
    let (div, suffix) = match v {
        v if v >= 1e12 => (1e12, "T"),
        v if v >= 1e9 => (1e9, "G"),
        v if v >= 1e6 => (1e6, "M"),
        v if v >= 1e3 => (1e3, "k"),
        _ => (1.0, ""),
    };
    let x = v / div;
    let digits = if x >= 100.0 || div == 1.0 {
        0
    } else if x >= 10.0 {
        1
    } else {
        2
    };
    format!("{x:.digits$}{suffix}")
}

/// Bytes per second as "46.9GiB/s (50.4GB/s)".
pub fn fmt_bw(bytes_per_sec: f64) -> String {
    format!("{}/s ({}/s)", fmt_bytes_bin(bytes_per_sec), fmt_bytes_dec(bytes_per_sec))
}

fn fmt_bytes_bin(b: f64) -> String {
    fmt_scaled(b, 1024.0, &["B", "KiB", "MiB", "GiB", "TiB", "PiB"])
}

fn fmt_bytes_dec(b: f64) -> String {
    fmt_scaled(b, 1000.0, &["B", "kB", "MB", "GB", "TB", "PB"])
}

/// `x` in the largest of `units` (each `base` times the previous) below it.
fn fmt_scaled(mut x: f64, base: f64, units: &[&str]) -> String {
    let mut i = 0;
    while x >= base && i + 1 < units.len() {
        x /= base;
        i += 1;
    }
    format!("{}{}", trim_num(x), units[i])
}

fn trim_num(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formatting() {
        assert_eq!(fmt_num(12_345_678.0), "12.3M");
        assert_eq!(fmt_num(999.0), "999");
        assert_eq!(fmt_num(1500.0), "1.50k");
        assert_eq!(fmt_bw(1024.0 * 1024.0), "1.00MiB/s (1.05MB/s)");
    }
}
