//! fio's terse report (`--output-format=terse`, `--minimal`): one line of
//! semicolon-separated fields per job (or group), field for field as fio's
//! `show_thread_status_terse_all` writes them for `--terse-version` 2 to
//! 5 (HOWTO.rst, "Terse output"), so that scripts which cut fields by
//! position read bench's lines as fio's:
//!
//! - version (v3+: then the "fio version"), job name, group id, error;
//! - per direction (read, write, and trim except in v3): KiB, KiB/s, IOPS,
//!   runtime ms; slat, clat (usec: min, max, mean, stddev); 20 clat
//!   percentile fields `P%=usec` (unused ones `0%=0`); total latency;
//!   bandwidth samples (KiB/s: min, max, % of the group, mean, stddev);
//!   v5 also the bandwidth sample count and the IOPS samples (min, max,
//!   mean, stddev, count);
//! - CPU: usr%, sys%, context switches, major and minor faults;
//! - 7 I/O depth shares, 10 microsecond and 12 millisecond latency shares;
//! - the description, if any (v2: on a line of its own).
//!
//! What bench does not measure is written as fio writes it when it has
//! nothing: the I/O depth shares (0.0%). fio's disk utilization fields
//! (v3+) come from the kernel's disk stats of the disks the job's files
//! live on; bench's device is none, so they are left out, as fio leaves
//! them out for a job on no disk (`ioengine=null`).

use std::fmt::Write as _;

use super::{sample_stats, Entry};
use crate::bench::lat_bins::LatDist;
use crate::bench::stats::{DirStats, Summary, PERCENTILES};

/// fio's `FIO_IO_U_LIST_MAX_LEN`: percentile fields per direction.
const PERCENTILE_FIELDS: usize = 20;

/// Every entry's terse line, for terse version `version` (2..=5).
pub fn to_terse(entries: &[Entry], version: u32) -> String {
    assert!((2..=5).contains(&version), "terse version {version}");
    let mut out = String::new();
    for e in entries {
        let group_bw = group_bw_bytes(entries, e.opts.groupid);
        terse_line(&mut out, e, version, group_bw);
    }
    out
}

/// Each direction's aggregate bandwidth (bytes/s) of group `groupid`, as
/// fio's group run stats (`rs->agg`): its bytes over its longest job.
fn group_bw_bytes(entries: &[Entry], groupid: u32) -> [f64; 3] {
    let members = entries.iter().filter(|e| e.opts.groupid == groupid);
    let secs = members.clone().map(|e| e.secs()).fold(1e-9, f64::max);
    let mut bw = [0.0; 3];
    for e in members {
        for (b, d) in bw.iter_mut().zip(e.run.dirs()) {
            *b += d.bytes as f64 / secs;
        }
    }
    bw
}

fn terse_line(out: &mut String, e: &Entry, version: u32, group_bw: [f64; 3]) {
    let name = &e.opts.name;
    if version == 2 {
        let _ = write!(out, "2;{name};{};{}", e.opts.groupid, e.run.error);
    } else {
        let fio_version = format!("mqblk-{}", env!("CARGO_PKG_VERSION"));
        let _ = write!(out, "{version};{fio_version};{name};{};{}", e.opts.groupid, e.run.error);
    }
    let dirs = e.run.dirs();
    let shown = if version == 3 { 2 } else { 3 };
    for (i, d) in dirs.iter().enumerate().take(shown) {
        terse_dir(out, e, d, i, version, group_bw[i]);
    }
    let (usr_cpu, sys_cpu) = e.cpu_pct();
    let ru = &e.run.rusage;
    let ctx = ru.voluntary_ctx + ru.involuntary_ctx;
    let _ = write!(out, ";{usr_cpu:.6}%;{sys_cpu:.6}%;{ctx};{};{}", ru.majflt, ru.minflt);
    for _ in 0..7 {
        out.push_str(";0.0%");
    }
    terse_lat_dist(out, e);
    if let Some(text) = &e.opts.description {
        if version == 2 {
            out.push('\n');
        }
        let _ = write!(out, ";{text}");
    }
    out.push('\n');
}

/// One direction's fields (`i`: its `Dir` index).
fn terse_dir(out: &mut String, e: &Entry, d: &DirStats, i: usize, version: u32, group_bw: f64) {
    // fio's runtime of a direction the job never did is 0, and so are
    // its rates.
    let runtime_ms = if d.ios > 0 || d.errors > 0 { e.run.elapsed_ns / 1_000_000 } else { 0 };
    let (bw_kib, iops) = match runtime_ms {
        0 => (0, 0),
        ms => (d.bytes * 1000 / ms / 1024, d.ios * 1000 / ms),
    };
    let _ = write!(out, ";{};{bw_kib};{iops};{runtime_ms}", d.bytes >> 10);
    terse_lat(out, &d.slat);
    terse_lat(out, &d.clat);
    let timed = !e.opts.gtod_reduce;
    for p in 0..PERCENTILE_FIELDS {
        match PERCENTILES.get(p) {
            Some(pct) if timed => {
                let ns = if e.opts.lat_percentiles { d.lat_percentile(*pct) } else { d.percentile(*pct) };
                let _ = write!(out, ";{pct:.6}%={}", ns / 1000);
            }
            _ => out.push_str(";0%=0"),
        }
    }
    terse_lat(out, &d.lat);
    let samples = &e.samples[i];
    let (min, max, mean, dev) = sample_stats(&samples.bw_kib);
    let agg_pct = match group_bw / 1024.0 {
        agg if agg >= 1.0 => (mean * 100.0 / agg).min(100.0),
        _ => 100.0,
    };
    if samples.bw_kib.is_empty() {
        out.push_str(";0;0;0.000000%;0.000000;0.000000");
    } else {
        let _ = write!(out, ";{};{};{agg_pct:.6}%;{mean:.6};{dev:.6}", min as u64, max as u64);
    }
    if version == 5 {
        let _ = write!(out, ";{}", samples.bw_kib.len());
        let (min, max, mean, dev) = sample_stats(&samples.iops);
        let _ = write!(out, ";{};{};{mean:.6};{dev:.6};{}", min as u64, max as u64, samples.iops.len());
    }
}

/// A latency's min, max (integer usec), mean and stddev (usec).
fn terse_lat(out: &mut String, s: &Summary) {
    if s.n == 0 {
        out.push_str(";0;0;0.000000;0.000000");
        return;
    }
    let _ = write!(out, ";{};{};{:.6};{:.6}", s.min / 1000, s.max / 1000, s.mean() / 1000.0, s.stddev() / 1000.0);
}

/// fio's 10 microsecond and 12 millisecond latency shares (completion
/// latency, every direction): the nanosecond ones count in the first
/// microsecond field, as fio's `stat_calc_lat_nu` keeps the format.
fn terse_lat_dist(out: &mut String, e: &Entry) {
    let hists: Vec<_> = e.run.dirs().iter().map(|d| &d.clat_hist).collect();
    let dist = LatDist::of(&hists);
    let total = e.total_ios();
    let mut us = LatDist::percent(&dist.us, total);
    us[0] += dist.ns.iter().sum::<u64>() as f64 * 100.0 / total.max(1) as f64;
    for p in us.iter().chain(&LatDist::percent(&dist.ms, total)) {
        let _ = write!(out, ";{p:3.2}%");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::options::JobOptions;
    use crate::bench::report::Samples;
    use crate::bench::stats::JobResult;

    fn entry() -> Entry {
        let mut run = JobResult::empty();
        run.elapsed_ns = 2_000_000_000;
        for v in 1..=1000u64 {
            run.read.ios += 1;
            run.read.bytes += 4096;
            run.read.record_latency(1_000, v * 1_000, false);
        }
        let mut opts = JobOptions::defaults("t");
        opts.description = Some("a job".into());
        let read = Samples { bw_kib: vec![1000.0, 3000.0], iops: vec![250.0, 750.0] };
        Entry::from_result(&opts, &run, [read, Samples::default(), Samples::default()])
    }

    #[test]
    fn field_counts_per_version_as_fio() {
        // fio's own counts: 5 + 2 x 41 + 34 (v3), trim too in v4, and v2
        // without the fio version; v5 adds 6 fields per direction. The
        // description adds one.
        for (version, fields) in [(2, 161), (3, 121), (4, 162), (5, 180)] {
            let line = to_terse(&[entry()], version);
            let n = line.trim_end().replace('\n', "").split(';').count();
            assert_eq!(n, fields + 1, "v{version}: {line}");
        }
    }

    #[test]
    fn read_fields_where_scripts_cut_them() {
        let line = to_terse(&[entry()], 3);
        let f: Vec<&str> = line.trim_end().split(';').collect();
        assert_eq!(&f[..5], ["3", &format!("mqblk-{}", env!("CARGO_PKG_VERSION")), "t", "0", "0"]);
        // KiB, KiB/s, IOPS, runtime ms (fields 6-9, from 1).
        assert_eq!(&f[5..9], ["4000", "2000", "500", "2000"]);
        // slat usec: min max mean stddev.
        assert_eq!(&f[9..11], ["1", "1"]);
        // clat percentiles: 50th of 1..=1000 us; 18th-20th unused.
        assert_eq!(f[17 + 6], format!("{:.6}%=500", 50.0));
        assert_eq!(&f[34..37], ["0%=0", "0%=0", "0%=0"]);
        // Bandwidth samples: min, max, % of the group (mean 2000 KiB/s of
        // the group's 2000 KiB/s), mean, stddev.
        assert_eq!(&f[41..44], ["1000", "3000", "100.000000%"]);
        assert_eq!(*f.last().unwrap(), "a job");
    }
}
