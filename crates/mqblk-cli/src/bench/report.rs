//! Reports: fio's JSON shape (`--output-format=json`) and a fio-like human
//! report, each with mqblk's block-layer counters.

use std::fmt::Write as _;

use mqblk::DeviceStats;
use serde_json::{json, Map, Value};

use super::job::JobResult;
use super::options::JobOptions;
use super::stats::{DirStats, ProcessCpu, Summary, PERCENTILES};

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
    pub read_samples: Samples,
    pub write_samples: Samples,
    /// fio's steady-state detection (`ss`), when the job has it.
    pub steadystate: Option<super::steadystate::Steady>,
}

impl Entry {
    pub fn from_result(opts: &JobOptions, r: &JobResult, read_samples: Samples, write_samples: Samples) -> Self {
        Self { opts: opts.clone(), nr_jobs: 1, run: r.clone(), read_samples, write_samples, steadystate: None }
    }

    /// Folds another job into this group entry (fio's group_reporting).
    pub fn merge(&mut self, o: &Entry) {
        self.nr_jobs += o.nr_jobs;
        self.run.merge(&o.run);
        merge_samples(&mut self.read_samples, &o.read_samples);
        merge_samples(&mut self.write_samples, &o.write_samples);
    }

    fn secs(&self) -> f64 {
        (self.run.elapsed_ns as f64 / 1e9).max(1e-9)
    }

    pub fn total_ios(&self) -> u64 {
        self.run.read.ios + self.run.write.ios
    }

    pub fn iops(&self, d: &DirStats) -> f64 {
        d.ios as f64 / self.secs()
    }

    /// CPU ns per completed I/O (user + system) across the entry's jobs.
    pub fn cpu_ns_per_io(&self) -> f64 {
        let ios = self.total_ios().max(1) as f64;
        (self.run.rusage.user_ns + self.run.rusage.sys_ns) as f64 / ios
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

fn summary_json(s: &Summary) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("min".into(), json!(s.min_or_zero()));
    m.insert("max".into(), json!(s.max));
    m.insert("mean".into(), json!(s.mean()));
    m.insert("stddev".into(), json!(s.stddev()));
    m.insert("N".into(), json!(s.n));
    m
}

fn dir_json(e: &Entry, d: &DirStats, samples: &Samples, timed: bool) -> Value {
    let secs = e.secs();
    let bw_bytes = d.bytes as f64 / secs;
    let mut clat = summary_json(&d.clat);
    let mut lat = summary_json(&d.lat);
    if timed && d.ios > 0 {
        let pct: Map<String, Value> =
            PERCENTILES.iter().map(|p| (format!("{p:.6}"), json!(d.percentile(*p)))).collect();
        clat.insert("percentile".into(), Value::Object(pct));
    }
    if timed && d.ios > 0 && e.opts.lat_percentiles {
        // Total latency, tag waits included.
        let pct: Map<String, Value> =
            PERCENTILES.iter().map(|p| (format!("{p:.6}"), json!(d.lat_percentile(*p)))).collect();
        lat.insert("percentile".into(), Value::Object(pct));
    }
    let (bw_min, bw_max, bw_mean, bw_dev) = sample_stats(&samples.bw_kib);
    let (iops_min, iops_max, iops_mean, iops_dev) = sample_stats(&samples.iops);
    json!({
        "io_bytes": d.bytes,
        "io_kbytes": d.bytes / 1024,
        "bw_bytes": bw_bytes as u64,
        "bw": (bw_bytes / 1024.0) as u64,
        "iops": e.iops(d),
        "runtime": e.run.elapsed_ns / 1_000_000,
        "total_ios": d.ios,
        "short_ios": 0,
        "drop_ios": 0,
        "errors": d.errors,
        "slat_ns": Value::Object(summary_json(&d.slat)),
        "clat_ns": Value::Object(clat),
        "lat_ns": Value::Object(lat),
        "bw_min": bw_min as u64,
        "bw_max": bw_max as u64,
        "bw_agg": if d.bytes > 0 { 100.0 } else { 0.0 },
        "bw_mean": bw_mean,
        "bw_dev": bw_dev,
        "bw_samples": samples.bw_kib.len(),
        "iops_min": iops_min as u64,
        "iops_max": iops_max as u64,
        "iops_mean": iops_mean,
        "iops_stddev": iops_dev,
        "iops_samples": samples.iops.len(),
    })
}

fn options_json(given: &[(String, String)]) -> Value {
    Value::Object(given.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

fn ctx_json(e: &Entry) -> Value {
    let secs = e.secs();
    let ios = e.total_ios().max(1) as f64;
    json!({
        "ctx_voluntary": e.run.rusage.voluntary_ctx,
        "ctx_involuntary": e.run.rusage.involuntary_ctx,
        "ctx_voluntary_per_sec": e.run.rusage.voluntary_ctx as f64 / secs,
        "ctx_involuntary_per_sec": e.run.rusage.involuntary_ctx as f64 / secs,
        "ctx_voluntary_per_io": e.run.rusage.voluntary_ctx as f64 / ios,
        "tag_waits": e.run.client.tag_waits,
        "completion_sleeps": e.run.client.completion_sleeps,
        "cpu_ns_per_io": e.cpu_ns_per_io(),
    })
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

/// fio's JSON document, plus "mqblk" objects.
pub fn to_json(
    entries: &[Entry],
    global_given: &[(String, String)],
    dev: &DeviceInfo,
    process_cpu: Option<ProcessCpu>,
) -> Value {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let jobs: Vec<Value> = entries.iter().enumerate().map(|(i, e)| job_json(i, e)).collect();
    json!({
        "fio version": format!("mqblk-{}", env!("CARGO_PKG_VERSION")),
        "timestamp": now.as_secs(),
        "timestamp_ms": now.as_millis() as u64,
        "global options": options_json(global_given),
        "jobs": jobs,
        "mqblk": device_json(entries, dev, process_cpu),
    })
}

/// One job's object in fio's "jobs" array (`i`: its job_index).
fn job_json(i: usize, e: &Entry) -> Value {
    let timed = !e.opts.gtod_reduce;
    let cpu_base = e.secs() * 1e9 * e.nr_jobs as f64;
    let mut job = json!({
        "jobname": e.opts.name,
        "groupid": e.opts.groupid,
        "job_index": i,
        "jobs": e.nr_jobs,
        "error": e.run.error,
        "eta": 0,
        "elapsed": (e.run.elapsed_ns as f64 / 1e9).ceil() as u64,
        "job options": options_json(&e.opts.given),
        "read": dir_json(e, &e.run.read, &e.read_samples, timed),
        "write": dir_json(e, &e.run.write, &e.write_samples, timed),
        "trim": dir_json(e, &DirStats::default(), &Samples::default(), false),
        "job_runtime": e.run.elapsed_ns / 1_000_000,
        "job_start": e.run.job_start_ms,
        "usr_cpu": e.run.rusage.user_ns as f64 / cpu_base * 100.0,
        "sys_cpu": e.run.rusage.sys_ns as f64 / cpu_base * 100.0,
        "ctx": e.run.rusage.voluntary_ctx + e.run.rusage.involuntary_ctx,
        "majf": e.run.rusage.majflt,
        "minf": e.run.rusage.minflt,
        "mqblk": ctx_json(e),
    });
    if let Some(ss) = &e.steadystate {
        job["steadystate"] = ss.to_json();
    }
    if e.opts.latency.target_ns > 0 {
        let l = &e.opts.latency;
        job["latency_depth"] = json!(e.run.latency_depth);
        job["latency_target"] = json!(l.target_ns);
        job["latency_percentile"] = json!(l.percentile);
        job["latency_window"] = json!(l.window_ns);
    }
    // fio adds these when the job may go past errors.
    if e.opts.errors.continue_on.iter().any(|c| *c) || e.opts.errors.ignore.iter().any(Option::is_some) {
        job["total_err"] = json!(e.run.read.errors + e.run.write.errors);
        job["first_error"] = json!(e.run.first_error);
    }
    job
}

/// The "mqblk" object: the device's facts and block-layer counters, and
/// the run's context switches and process CPU.
fn device_json(entries: &[Entry], dev: &DeviceInfo, process_cpu: Option<ProcessCpu>) -> Value {
    let total_secs = entries.iter().map(|e| e.secs()).fold(0.0, f64::max).max(1e-9);
    let vol: u64 = entries.iter().map(|e| e.run.rusage.voluntary_ctx).sum();
    let invol: u64 = entries.iter().map(|e| e.run.rusage.involuntary_ctx).sum();
    let s = &dev.stats;
    json!({
        "device": dev.spec,
        "driver": dev.driver,
        "nr_hw_queues": dev.nr_hw_queues,
        "hw_queue_depth": dev.queue_depth,
        "poll_queues": dev.poll_queues,
        "scheduler": dev.scheduler,
        "nr_requests": s.nr_requests,
        "dispatched": s.dispatched,
        "completed": s.completed,
        "bios": [s.bios.read, s.bios.write],
        "requests": [s.requests.read, s.requests.write],
        "merges": [s.merges.read, s.merges.write],
        "merges_total": s.merges.total(),
        "front_merges": s.front_merges,
        "back_merges": s.merges.total() - s.front_merges,
        "plug_flushes": s.plug_flushes,
        "busy": s.busy,
        "tag_waits": s.tag_waits,
        "sched_tag_waits": s.sched_tag_waits,
        "timeouts": s.timeouts,
        "ctx_voluntary": vol,
        "ctx_involuntary": invol,
        "ctx_voluntary_per_sec": vol as f64 / total_secs,
        "ctx_involuntary_per_sec": invol as f64 / total_secs,
        "process_cpu": process_cpu.map(|p| json!({
            "usr_ns": p.user_ns,
            "sys_ns": p.sys_ns,
            "ios": p.ios,
            "window_ns": p.window_ns,
            "cpu_ns_per_io": p.cpu_ns_per_io(),
            "cpus_busy": p.cpus_busy(),
            "job_threads_cpu_ns_per_io": p.job_threads_ns_per_io(),
            "device_threads_cpu_ns_per_io": p.device_threads_ns_per_io(),
            "device_threads": p.device_threads,
        })),
    })
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

fn human_dir(out: &mut String, label: &str, e: &Entry, d: &DirStats) {
    if d.ios == 0 && d.errors == 0 {
        return;
    }
    let secs = e.secs();
    let _ = writeln!(
        out,
        "  {label}: IOPS={}, BW={}({}/{}msec)",
        fmt_num(e.iops(d)),
        fmt_bw(d.bytes as f64 / secs),
        fmt_bytes_bin(d.bytes as f64),
        e.run.elapsed_ns / 1_000_000
    );
    if e.opts.gtod_reduce {
        return;
    }
    for (name, s) in [("slat", &d.slat), ("clat", &d.clat), (" lat", &d.lat)] {
        let _ = writeln!(
            out,
            "    {name} (nsec): min={}, max={}, avg={:.2}, stdev={:.2}",
            s.min_or_zero(),
            s.max,
            s.mean(),
            s.stddev()
        );
    }
    let _ = writeln!(out, "    clat percentiles (nsec):");
    for row in PERCENTILES.chunks(4) {
        let cells: Vec<String> = row.iter().map(|p| format!("{p:5.2}th=[{:>8}]", d.percentile(*p))).collect();
        let _ = writeln!(out, "     | {}", cells.join(", "));
    }
}

/// The fio-like human report.
pub fn to_human(entries: &[Entry], dev: &DeviceInfo, process_cpu: Option<ProcessCpu>) -> String {
    let mut out = String::new();
    for e in entries {
        human_job(&mut out, e);
    }
    let mut groups: Vec<u32> = entries.iter().map(|e| e.opts.groupid).collect();
    groups.dedup();
    for group in groups {
        let members: Vec<Entry> = entries.iter().filter(|e| e.opts.groupid == group).cloned().collect();
        human_run_status(&mut out, group, &members);
    }
    if let Some(p) = process_cpu {
        // Not fio's: the jobs' cpu lines count their own threads only.
        let _ = writeln!(
            out,
            "\nProcess CPU (all threads, while every job ran): {:.2} CPUs busy, {:.2} usec per I/O ({} I/Os in {} msec)",
            p.cpus_busy(),
            p.cpu_ns_per_io() / 1e3,
            p.ios,
            p.window_ns / 1_000_000
        );
        let _ = writeln!(
            out,
            "  of which job threads {:.2} usec per I/O, the device's {} thread(s) {:.2} usec per I/O",
            p.job_threads_ns_per_io() / 1e3,
            p.device_threads,
            p.device_threads_ns_per_io() / 1e3
        );
    }
    human_device(&mut out, dev);
    out
}

/// One job's (or group's) block: its header, each direction, CPU use.
fn human_job(out: &mut String, e: &Entry) {
    let _ = writeln!(
        out,
        "{}: (groupid={}, jobs={}): err={:2}: rw={}, bs={}, iodepth={}",
        e.opts.name,
        e.opts.groupid,
        e.nr_jobs,
        e.run.error,
        e.opts.rw.name(),
        e.opts.bs_read,
        e.opts.effective_iodepth()
    );
    if let Some(text) = &e.opts.description {
        let _ = writeln!(out, "  Description  : [{text}]");
    }
    human_dir(out, "read", e, &e.run.read);
    human_dir(out, "write", e, &e.run.write);
    if let Some(ss) = &e.steadystate {
        out.push_str(&ss.to_human());
    }
    if e.run.first_error != 0 && e.run.error == 0 {
        let text = std::io::Error::from_raw_os_error(e.run.first_error);
        let total = e.run.read.errors + e.run.write.errors;
        let _ = writeln!(out, "     errors    : total={total}, first_error={}/<{text}>", e.run.first_error);
    }
    let cpu_base = e.secs() * 1e9 * e.nr_jobs as f64;
    let _ = writeln!(
        out,
        "  cpu          : usr={:.2}%, sys={:.2}%, ctx={}, majf={}, minf={}",
        e.run.rusage.user_ns as f64 / cpu_base * 100.0,
        e.run.rusage.sys_ns as f64 / cpu_base * 100.0,
        e.run.rusage.voluntary_ctx + e.run.rusage.involuntary_ctx,
        e.run.rusage.majflt,
        e.run.rusage.minflt
    );
    let _ = writeln!(
        out,
        "  mqblk        : ctx vol={} ({:.1}/s) invol={}, tag_waits={}, completion_sleeps={}, cpu={:.1} ns/io",
        e.run.rusage.voluntary_ctx,
        e.run.rusage.voluntary_ctx as f64 / e.secs(),
        e.run.rusage.involuntary_ctx,
        e.run.client.tag_waits,
        e.run.client.completion_sleeps,
        e.cpu_ns_per_io()
    );
    let _ = writeln!(out);
}

/// fio's "Run status group" lines: each direction's total over the
/// group's jobs.
fn human_run_status(out: &mut String, group: u32, entries: &[Entry]) {
    let _ = writeln!(out, "Run status group {group} (all jobs):");
    for (label, pick) in [("READ", 0), ("WRITE", 1)] {
        let bytes: u64 = entries.iter().map(|e| if pick == 0 { e.run.read.bytes } else { e.run.write.bytes }).sum();
        if bytes == 0 {
            continue;
        }
        let run_ms: Vec<u64> = entries.iter().map(|e| e.run.elapsed_ns / 1_000_000).collect();
        let max_secs = entries.iter().map(|e| e.secs()).fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "  {label:>5}: bw={}, io={} ({}), run={}-{}msec",
            fmt_bw(bytes as f64 / max_secs),
            fmt_bytes_bin(bytes as f64),
            fmt_bytes_dec(bytes as f64),
            run_ms.iter().min().copied().unwrap_or(0),
            run_ms.iter().max().copied().unwrap_or(0)
        );
    }
}

/// The block layer's counters, and fio's disk stats line.
fn human_device(out: &mut String, dev: &DeviceInfo) {
    let s = &dev.stats;
    let _ = writeln!(out);
    let _ = writeln!(out, "Block layer stats ({}):", dev.spec);
    let default_queues = dev.nr_hw_queues - dev.poll_queues;
    let _ = writeln!(
        out,
        "  hw queues: {default_queues} default + {} poll (hipri I/O only) x {} driver tags; scheduler {}{}",
        dev.poll_queues,
        dev.queue_depth,
        dev.scheduler,
        if s.nr_requests > 0 {
            format!(" with nr_requests={} scheduler tags per queue", s.nr_requests)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "  {}: dispatched={}, completed={}, busy={}, tag_waits={} (for scheduler tags: {}), timeouts={}, plug_flushes={}",
        dev.driver, s.dispatched, s.completed, s.busy, s.tag_waits, s.sched_tag_waits, s.timeouts, s.plug_flushes
    );
    // fio's disk stats line: requests and merges, read/write.
    let _ = writeln!(out);
    let _ = writeln!(out, "Disk stats (read/write):");
    let _ = writeln!(
        out,
        "  {}: ios={}/{}, merge={}/{}, bios={}/{}, front_merges={}",
        dev.driver,
        s.requests.read,
        s.requests.write,
        s.merges.read,
        s.merges.write,
        s.bios.read,
        s.bios.write,
        s.front_merges
    );
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
