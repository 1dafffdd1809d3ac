//! `mqblk bench --blktrace=DIR` end to end: Debian's blkparse reads the
//! files without a complaint, its event counts per action are the
//! bench's own counters (Q bios, G requests, D dispatches, C completions,
//! M and F merges, X the pieces split off), and btt reads blkparse's dump;
//! on unsplit I/O its Q2C and D2C averages agree with the bench's mean
//! latency within a factor of 2. (Split bios give btt no latencies, as
//! the kernel's traces of them do not: one Q for the whole bio, and btt
//! pairs a completion only with the Qs inside its range.)
//!
//! The null device completes on a timer 100 us after submission
//! (irqmode=2), so the device time dominates every latency and the
//! comparison holds on a busy machine. Needs blkparse and btt (Debian's
//! blktrace package, installed by scripts/test-all.sh). `mqblk serve`
//! traces through the device spec's `blktrace=DIR`, driven by qemu-io.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod common;
use common::nbd::{run, Server};

/// A fresh directory for one test's trace.
fn trace_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mqblk-blktrace-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `mqblk bench --output-format=json --blktrace=DIR` with `args`.
fn bench_traced(dir: &Path, args: &[&str]) -> Value {
    let trace = format!("--blktrace={}", dir.display());
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["bench", "--output-format=json", &trace])
        .args(args)
        .output()
        .expect("run mqblk");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mqblk bench failed: {stderr}");
    assert!(stderr.contains("blktrace:") && stderr.contains(" 0 dropped"), "the trace's summary: {stderr}");
    serde_json::from_slice(&out.stdout).expect("valid JSON on stdout")
}

/// Runs a tool in the trace's directory `dir` and returns its stdout,
/// asserting it succeeded and wrote nothing to stderr. In `dir` because
/// btt writes its per-device data files (`0,1_iops_fp.dat`,
/// `sys_mbps_fp.dat`, ...) into the directory it runs in, which for a
/// test is the crate's own.
fn run_tool(dir: &Path, tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {tool} (blktrace package): {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{tool} {args:?} failed: {stderr}");
    assert!(stderr.trim().is_empty(), "{tool} {args:?} complained: {stderr}");
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// blkparse's events per action letter, and the dump btt reads.
fn blkparse(dir: &Path) -> (HashMap<String, u64>, PathBuf) {
    let dump = dir.join("dump.bin");
    let dir_arg = dir.to_str().expect("UTF-8 path");
    let text =
        run_tool(dir, "blkparse", &["-D", dir_arg, "-i", "null", "-f", "@@ %a %S %N\\n", "-d", dump.to_str().unwrap()]);
    assert!(text.contains("Input file"), "blkparse found the files: {text}");
    assert!(text.contains("Skips: 0 forward"), "no sequence number missing: {text}");
    let mut counts = HashMap::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("@@ ")) {
        let action = line.split_whitespace().next().expect("an action");
        *counts.entry(action.to_string()).or_insert(0) += 1;
    }
    (counts, dump)
}

/// btt's (Q2C, D2C) averages over all devices, in ns.
fn btt_q2c_d2c_ns(dump: &Path) -> (f64, f64) {
    let out = run_tool(dump.parent().expect("the trace's directory"), "btt", &["-i", dump.to_str().unwrap()]);
    let avg = |name: &str| {
        let line = out.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} in btt's output: {out}"));
        let secs: f64 = line.split_whitespace().nth(2).expect("AVG column").parse().expect("a number");
        secs * 1e9
    };
    (avg("Q2C"), avg("D2C"))
}

/// The bench's counters in the JSON's "mqblk" object.
fn counter(v: &Value, key: &str) -> u64 {
    match &v["mqblk"][key] {
        Value::Array(rw) => rw.iter().map(|n| n.as_u64().unwrap()).sum(),
        n => n.as_u64().unwrap_or_else(|| panic!("mqblk.{key} in {v}")),
    }
}

/// Checks blkparse's counts against the bench's counters.
fn check_counts(v: &Value, counts: &HashMap<String, u64>) {
    let n = |a: &str| counts.get(a).copied().unwrap_or(0);
    let (bios, requests, merges) = (counter(v, "bios"), counter(v, "requests"), counter(v, "merges"));
    assert_eq!(n("Q"), bios, "Q: one per bio ({counts:?})");
    assert_eq!(n("G"), requests, "G: one per request");
    assert_eq!(n("D"), counter(v, "dispatched"), "D: one per dispatch");
    assert_eq!(n("C"), counter(v, "completed"), "C: one per completion");
    assert_eq!(n("R"), counter(v, "busy"), "R: one per Busy");
    assert_eq!(n("M") + n("F"), merges, "M and F: one per merged bio");
    assert_eq!(n("F"), counter(v, "front_merges"));
    // A plug list starts with P and ends with U (or T, before a sleep).
    assert_eq!(n("U") + n("T"), counter(v, "plug_flushes"), "U and T: one per plug list issued");
    assert_eq!(n("P"), counter(v, "plug_flushes"), "P: one per plug list");
    // Each bio is one request, or none if merged, or one per piece: the
    // pieces split off are the requests beyond that.
    assert_eq!(n("X"), requests + merges - bios, "X: one per piece split off");
}

/// Checks btt's Q2C and D2C averages against the bench's mean write latency.
fn check_latency(v: &Value, dump: &Path) {
    let lat_ns = v["jobs"][0]["write"]["lat_ns"]["mean"].as_f64().expect("mean latency");
    let (q2c_ns, d2c_ns) = btt_q2c_d2c_ns(dump);
    for (name, ns) in [("Q2C", q2c_ns), ("D2C", d2c_ns)] {
        assert!(ns > lat_ns / 2.0 && ns < lat_ns * 2.0, "btt's {name} {ns} ns vs the bench's latency {lat_ns} ns");
    }
}

#[test]
fn plugged_sequential_writes_merge_in_the_trace_as_in_the_counters() {
    let dir = trace_dir("merge");
    // Batches of 16 contiguous 4 KiB writes under one plug: they merge.
    let v = bench_traced(
        &dir,
        &[
            "--device=null:gb=1,irqmode=2,completion_nsec=100000",
            "--name=seq",
            "--rw=write",
            "--bs=4k",
            "--iodepth=32",
            "--iodepth_batch_submit=16",
            "--iodepth_batch_complete_min=16",
            "--size=8m",
        ],
    );
    let (counts, dump) = blkparse(&dir);
    assert!(counter(&v, "merges") > 0, "the job merged: {}", v["mqblk"]);
    assert!(counts["P"] > 0 && counts["U"] > 0, "plugged: {counts:?}");
    check_counts(&v, &counts);
    check_latency(&v, &dump);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bios_past_max_sectors_split_in_the_trace_as_in_the_counters() {
    let dir = trace_dir("split");
    // 192 KiB writes: 384 sectors, two requests each at max_sectors=255.
    let v = bench_traced(
        &dir,
        &[
            "--device=null:gb=1,irqmode=2,completion_nsec=100000",
            "--name=big",
            "--rw=write",
            "--bs=192k",
            "--iodepth=4",
            "--size=24m",
        ],
    );
    let (counts, dump) = blkparse(&dir);
    assert_eq!(counts["X"], counter(&v, "bios"), "one split each: {counts:?}");
    check_counts(&v, &counts);
    let btt = run_tool(&dir, "btt", &["-i", dump.to_str().unwrap()]);
    assert!(btt.contains("All Devices"), "btt read the dump: {btt}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_scheduler_s_inserts_show_between_getting_a_request_and_its_dispatch() {
    let dir = trace_dir("sched");
    let v = bench_traced(
        &dir,
        &[
            "--device=null:gb=1,irqmode=2,completion_nsec=100000",
            "--sched=mq-deadline",
            "--name=seq",
            "--rw=write",
            "--bs=4k",
            "--iodepth=32",
            "--iodepth_batch_submit=16",
            "--iodepth_batch_complete_min=16",
            "--size=8m",
        ],
    );
    let (counts, dump) = blkparse(&dir);
    check_counts(&v, &counts);
    // A plug's requests go into the scheduler (I); a lone request it would
    // dispatch next anyway goes straight to the driver, without one.
    assert!(counts["I"] > 0 && counts["I"] <= counts["G"], "inserted: {counts:?}");
    check_latency(&v, &dump);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `mqblk serve` takes the same key in its device spec (so does `ublk
/// add`): qemu-io's write, read and flush over NBD leave a trace that
/// blkparse reads, complete once the server stops on SIGTERM and says so.
/// `--no-direct-reads`: a memory-backed export's reads of 64 KiB and more
/// go around the block layer (`Device::read_direct`), so no event.
#[test]
fn serve_traces_its_device_through_the_spec_key() {
    let dir = trace_dir("serve");
    let spec = format!("null:size=64,memory_backed=1,blktrace={}", dir.display());
    let mut s = Server::start("blktrace", &["--device", &spec, "--no-direct-reads"]);
    let io = ["-c", "write -P 0x5a 0 64k", "-c", "read -P 0x5a 0 64k", "-c", "flush"];
    run("qemu-io", &[&["-f", "raw"][..], &io, &[&s.uri()]].concat());
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    assert!(s.child.wait().unwrap().success(), "clean exit on SIGTERM");
    let mut stderr = String::new();
    s.child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(stderr.contains("blktrace:") && stderr.contains(" 0 dropped"), "the trace's summary: {stderr}");

    let text = run_tool(&dir, "blkparse", &["-D", dir.to_str().unwrap(), "-i", "null", "-f", "@@ %a %d %n\\n"]);
    assert!(text.contains("Skips: 0 forward"), "no sequence number missing: {text}");
    let events: Vec<Vec<&str>> =
        text.lines().filter_map(|l| l.strip_prefix("@@ ")).map(|l| l.split_whitespace().collect()).collect();
    let queued = |rw: char, sectors: &str| events.iter().any(|e| e[0] == "Q" && e[1].contains(rw) && e[2] == sectors);
    assert!(queued('W', "128") && queued('R', "128"), "the 64 KiB write and read queued: {events:?}");
    assert!(events.iter().any(|e| e[0] == "Q" && e[1].starts_with('F')), "the flush queued: {events:?}");
    let count = |a: &str| events.iter().filter(|e| e[0] == a).count();
    assert_eq!(count("D"), count("C"), "every dispatched request completed: {events:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
