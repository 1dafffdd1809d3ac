//! fio's options for how a job meets failures and its machine, through
//! `mqblk bench` on null devices: the error policy (`continue_on_error`,
//! `ignore_error`, `error_dump`) against null_blk's bad blocks, and the
//! NUMA placement of a job (`numa_cpu_nodes`, `numa_mem_policy`).

use std::process::{Command, Output};

use serde_json::Value;

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk")).arg("bench").args(args).output().expect("run mqblk bench")
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "exit {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("bench's JSON")
}

/// Sectors 0-7 (the first 4 KiB block) fail every write with EIO.
const BAD_FIRST_BLOCK: &str = "null:gb=1,memory_backed=1,badblocks=+0-7";

#[test]
fn by_default_the_first_error_ends_the_job_and_is_dumped() {
    let out = bench(&["--device", BAD_FIRST_BLOCK, "--name=w", "--rw=write", "--size=1m", "--output-format=json"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON even when a job failed");
    let job = &v["jobs"][0];
    assert_eq!(job["error"], 5, "EIO ends the job");
    assert_eq!(job["write"]["total_ios"], 0, "no write after the first, failed one");
    assert!(job.get("total_err").is_none(), "fio adds total_err only with continue_on_error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("io_u error: Input/output error") && stderr.contains("write offset=0, buflen=4096"),
        "{stderr}"
    );
}

#[test]
fn continue_on_error_counts_non_fatal_errors_and_goes_on() {
    let args = ["--device", BAD_FIRST_BLOCK, "--name=w", "--rw=write", "--size=1m"];
    let v =
        json(&bench(&[&args[..], &["--continue_on_error=write", "--error_dump=0", "--output-format=json"]].concat()));
    let job = &v["jobs"][0];
    assert_eq!(
        (job["error"].as_i64(), job["total_err"].as_u64(), job["first_error"].as_i64()),
        (Some(0), Some(1), Some(5))
    );
    assert_eq!(job["write"]["total_ios"], 255, "every block but the bad one written");
    // error_dump=0: the errors the job went past are not printed.
    let out = bench(&[&args[..], &["--continue_on_error=write", "--error_dump=0"]].concat());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("io_u error"));
    let human = String::from_utf8_lossy(&out.stdout);
    assert!(human.contains("errors    : total=1, first_error=5/<Input/output error"), "{human}");
    // Reads are another kind: continue_on_error=read does not cover writes.
    let out = bench(&[&args[..], &["--continue_on_error=read", "--output-format=json"]].concat());
    assert_eq!(out.status.code(), Some(1), "a job error fails the run");
    let v: Value = serde_json::from_slice(&out.stdout).expect("the report");
    assert_eq!(v["jobs"][0]["error"], 5);
}

#[test]
fn ignore_error_replaces_the_kinds_list() {
    // EIO on writes is not in the list ENOSPC:EDQUOT, so the job ends.
    let args = ["--device", BAD_FIRST_BLOCK, "--name=w", "--rw=write", "--size=1m", "--output-format=json"];
    let out = bench(&[&args[..], &["--continue_on_error=write", "--ignore_error=,ENOSPC:EDQUOT"]].concat());
    let v: Value = serde_json::from_slice(&out.stdout).expect("the report");
    assert_eq!((out.status.code(), v["jobs"][0]["error"].as_i64()), (Some(1), Some(5)));
    let v = json(&bench(&[&args[..], &["--ignore_error=,EIO"]].concat()));
    assert_eq!((v["jobs"][0]["error"].as_i64(), v["jobs"][0]["total_err"].as_u64()), (Some(0), Some(1)));
    let out = bench(&[&args[..], &["--ignore_error=,ENOWHERE"]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ignore_error: bad error 'ENOWHERE'"));
}

#[test]
fn numa_options_place_the_job_on_node_zero_and_name_a_missing_node() {
    let base = ["--device", "null:gb=1", "--name=r", "--rw=randread", "--size=4m", "--output-format=json"];
    let v = json(&bench(&[&base[..], &["--numa_cpu_nodes=0", "--numa_mem_policy=bind:0"]].concat()));
    assert_eq!(v["jobs"][0]["read"]["total_ios"], 1024);
    let out = bench(&[&base[..], &["--numa_cpu_nodes=0-63"]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not online"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn latency_target_finds_the_depth_below_the_devices_knee() {
    // A null device with 4 tags completing each request after 100 µs: at
    // depth 8 an I/O waits at most one round for a tag (about 200 µs),
    // from depth 9 on a fifth of them wait two (300 µs), past the 250 µs
    // target. The search starts at 1 and must settle at 8 or below, then
    // end after its final window, long before the 20 s runtime.
    let device = "null:gb=1,irqmode=2,completion_nsec=100000,hw_queue_depth=4,submit_queues=1";
    let v = json(&bench(&[
        "--device",
        device,
        "--name=l",
        "--rw=randread",
        "--iodepth=64",
        "--latency_target=250",
        "--latency_window=100ms",
        "--latency_percentile=95",
        "--time_based",
        "--runtime=20",
        "--output-format=json",
    ]));
    let job = &v["jobs"][0];
    assert_eq!(job["error"], 0);
    let depth = job["latency_depth"].as_u64().unwrap();
    assert!((1..=8).contains(&depth), "settled at depth {depth}");
    assert_eq!((job["latency_target"].as_u64(), job["latency_window"].as_u64()), (Some(250_000), Some(100_000_000)));
    assert!(job["job_runtime"].as_u64().unwrap() < 19_000, "the search ended the job");
    // max_latency: an I/O over 1 µs fails the job with ETIMEDOUT.
    let out =
        bench(&["--device", device, "--name=m", "--rw=read", "--size=1m", "--max_latency=1", "--output-format=json"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["jobs"][0]["error"], ETIMEDOUT);
    assert!(String::from_utf8_lossy(&out.stderr).contains("exceeds the specified maximum"));
}

/// ETIMEDOUT on Linux.
const ETIMEDOUT: i64 = 110;

#[test]
fn continue_on_error_verify_goes_past_blocks_that_read_back_wrong() {
    // A null device that keeps nothing: every block reads back as zeros,
    // so each of the 256 fails its check (EILSEQ, fio's verify error).
    let base = ["--device", "null:gb=1", "--name=v", "--rw=write", "--size=1m", "--verify=crc32c"];
    let out = bench(&[&base[..], &["--output-format=json"]].concat());
    assert_eq!(out.status.code(), Some(1), "a verify failure fails the run");
    let v: Value = serde_json::from_slice(&out.stdout).expect("the report");
    assert_eq!(v["jobs"][0]["error"], 84);
    let v = json(&bench(&[&base[..], &["--continue_on_error=verify", "--output-format=json"]].concat()));
    let job = &v["jobs"][0];
    assert_eq!((job["error"].as_i64(), job["first_error"].as_i64()), (Some(0), Some(84)));
    assert_eq!(job["total_err"], 256, "every block counted");
    assert_eq!(job["mqblk"]["verify"]["failed"], 256);
}

#[test]
fn fsync_end_fsync_and_sync_flush_and_write_fua() {
    // 256 writes of 4 KiB with fsync=16 and end_fsync: 16 flushes, then
    // one more at the end: 273 requests reach the device.
    let device = "null:gb=1,memory_backed=1,cache_size=64";
    let base = ["--device", device, "--name=w", "--rw=write", "--size=1m", "--output-format=json"];
    let v = json(&bench(&[&base[..], &["--fsync=16", "--end_fsync=1"]].concat()));
    assert_eq!(v["mqblk"]["dispatched"], 273);
    assert_eq!(v["jobs"][0]["write"]["total_ios"], 256, "flushes are not counted as writes");
    // sync=1 writes with FUA, and fsync=8 flushes twice in 16 writes:
    // blktrace shows them as the kernel's rwbs "WFS" and "FN".
    let dir = std::env::temp_dir().join(format!("mqblk-sync-trace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let trace = format!("--blktrace={}", dir.display());
    let args = ["--device", device, "--name=w", "--rw=write", "--size=64k", "--fsync=8", "--sync=1", &trace];
    json(&bench(&[&args[..], &["--output-format=json"]].concat()));
    // In the trace's directory: the blktrace tools write beside where they run.
    let out =
        Command::new("blkparse").current_dir(&dir).arg("-D").arg(&dir).args(["-i", "null"]).output().expect("blkparse");
    let text = String::from_utf8_lossy(&out.stdout);
    let queued = |rwbs: &str| {
        text.lines()
            .filter(|l| l.split_whitespace().nth(5) == Some("Q") && l.split_whitespace().nth(6) == Some(rwbs))
            .count()
    };
    assert_eq!((queued("WFS"), queued("FN")), (16, 2), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
