//! The fio-like human report (`--output-format=normal`): each job's (or
//! group's) directions, latencies and CPU, fio's "Run status group" lines,
//! then the block layer's counters.

use std::fmt::Write as _;

use super::{fmt_bw, fmt_bytes_bin, fmt_bytes_dec, fmt_num, DeviceInfo, Entry};
use crate::bench::stats::{DirStats, ProcessCpu, PERCENTILES};

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
    human_dir(out, "trim", e, &e.run.trim);
    if let Some(ss) = &e.steadystate {
        out.push_str(&ss.to_human());
    }
    if e.run.first_error != 0 && e.run.error == 0 {
        let text = std::io::Error::from_raw_os_error(e.run.first_error);
        let total = e.run.read.errors + e.run.write.errors + e.run.trim.errors + e.run.verify.failed;
        let _ = writeln!(out, "     errors    : total={total}, first_error={}/<{text}>", e.run.first_error);
    }
    let (usr_cpu, sys_cpu) = e.cpu_pct();
    let _ = writeln!(
        out,
        "  cpu          : usr={usr_cpu:.2}%, sys={sys_cpu:.2}%, ctx={}, majf={}, minf={}",
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
    let v = &e.run.verify;
    if v.blocks > 0 || v.failed > 0 {
        let _ = writeln!(
            out,
            "  verify: {} blocks checked ({} during the run), {} failed",
            v.blocks, v.during_run, v.failed
        );
    }
    let _ = writeln!(out);
}

/// fio's "Run status group" lines: each direction's total over the
/// group's jobs.
fn human_run_status(out: &mut String, group: u32, entries: &[Entry]) {
    let _ = writeln!(out, "Run status group {group} (all jobs):");
    for (label, dir) in [("READ", 0), ("WRITE", 1), ("TRIM", 2)] {
        let bytes: u64 = entries.iter().map(|e| e.run.dirs()[dir].bytes).sum();
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
