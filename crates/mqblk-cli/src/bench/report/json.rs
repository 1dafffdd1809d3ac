//! fio's JSON report (`--output-format=json`), plus "mqblk" objects with
//! the device's facts and block-layer counters; with json+, each
//! latency's "bins" (fio's histogram buckets, lat_bins.rs), as
//! `fio_jsonplus_clat2csv` reads them.

use serde_json::{json, Map, Value};

use super::{sample_stats, DeviceInfo, Entry, Samples};
use crate::bench::lat_bins;
use crate::bench::stats::{DirStats, ProcessCpu, Summary, PERCENTILES};

fn summary_json(s: &Summary) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("min".into(), json!(s.min_or_zero()));
    m.insert("max".into(), json!(s.max));
    m.insert("mean".into(), json!(s.mean()));
    m.insert("stddev".into(), json!(s.stddev()));
    m.insert("N".into(), json!(s.n));
    m
}

/// fio's "bins" object: bucket value (ns, as a string key) to I/Os.
fn bins_json(hist: &hdrhistogram::Histogram<u64>) -> Value {
    Value::Object(lat_bins::bins(hist).into_iter().map(|(v, n)| (v.to_string(), json!(n))).collect())
}

/// One direction's object; `plus`: json+ (latency bins too).
fn dir_json(e: &Entry, d: &DirStats, samples: &Samples, timed: bool, plus: bool) -> Value {
    let secs = e.secs();
    let bw_bytes = d.bytes as f64 / secs;
    let mut clat = summary_json(&d.clat);
    let mut lat = summary_json(&d.lat);
    if timed && d.ios > 0 {
        let pct: Map<String, Value> =
            PERCENTILES.iter().map(|p| (format!("{p:.6}"), json!(d.percentile(*p)))).collect();
        clat.insert("percentile".into(), Value::Object(pct));
        if plus {
            clat.insert("bins".into(), bins_json(&d.clat_hist));
        }
    }
    if timed && d.ios > 0 && e.opts.lat_percentiles {
        // Total latency, tag waits included.
        let pct: Map<String, Value> =
            PERCENTILES.iter().map(|p| (format!("{p:.6}"), json!(d.lat_percentile(*p)))).collect();
        lat.insert("percentile".into(), Value::Object(pct));
        if plus {
            lat.insert("bins".into(), bins_json(&d.lat_hist));
        }
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
        "verify": verify_json(&e.run.verify),
    })
}

/// fio's JSON document, plus "mqblk" objects; `plus`: fio's json+.
pub fn to_json(
    entries: &[Entry],
    global_given: &[(String, String)],
    dev: &DeviceInfo,
    process_cpu: Option<ProcessCpu>,
    plus: bool,
) -> Value {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let jobs: Vec<Value> = entries.iter().enumerate().map(|(i, e)| job_json(i, e, plus)).collect();
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
fn job_json(i: usize, e: &Entry, plus: bool) -> Value {
    let timed = !e.opts.gtod_reduce;
    let (usr_cpu, sys_cpu) = e.cpu_pct();
    let mut job = json!({
        "jobname": e.opts.name,
        "groupid": e.opts.groupid,
        "job_index": i,
        "jobs": e.nr_jobs,
        "error": e.run.error,
        "eta": 0,
        "elapsed": (e.run.elapsed_ns as f64 / 1e9).ceil() as u64,
        "job options": options_json(&e.opts.given),
        "read": dir_json(e, &e.run.read, &e.samples[0], timed, plus),
        "write": dir_json(e, &e.run.write, &e.samples[1], timed, plus),
        "trim": dir_json(e, &e.run.trim, &e.samples[2], timed, plus),
        "job_runtime": e.run.elapsed_ns / 1_000_000,
        "job_start": e.run.job_start_ms,
        "usr_cpu": usr_cpu,
        "sys_cpu": sys_cpu,
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
        let verify_failed = e.run.verify.failed;
        job["total_err"] = json!(e.run.read.errors + e.run.write.errors + e.run.trim.errors + verify_failed);
        job["first_error"] = json!(e.run.first_error);
    }
    job
}

/// What the job's verification checked (fio reports verify reads as
/// reads; bench keeps them apart from the measured I/O).
fn verify_json(v: &crate::bench::verify::VerifyCounts) -> Value {
    json!({ "blocks": v.blocks, "during_run": v.during_run, "failed": v.failed })
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
