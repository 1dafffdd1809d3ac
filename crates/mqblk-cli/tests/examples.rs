//! The policy examples (examples/sstf.rs, examples/wake_one.rs) run a
//! short bench with their policy chosen by name, and their policy ran:
//! each prints its own counter after the run.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The example's binary, built beside the `mqblk` binary (cargo test and
/// nextest build examples; if not, build it now).
fn example(name: &str) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_mqblk"));
    let path = bin.parent().expect("target dir").join("examples").join(name);
    if !path.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "mqblk-cli", "--example", name])
            .status()
            .expect("run cargo");
        assert!(status.success(), "cargo build --example {name}");
    }
    path
}

/// Runs `example bench ARGS --output-format=json`: the JSON and stderr.
fn bench(name: &str, args: &[&str]) -> (Value, String) {
    let out = Command::new(example(name))
        .arg("bench")
        .args(args)
        .arg("--output-format=json")
        .output()
        .expect("run the example");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{name} bench {args:?} failed: {stderr}");
    (serde_json::from_slice(&out.stdout).expect("valid JSON on stdout"), stderr)
}

/// The number in the example's closing line `PREFIX N ...`.
fn counter(stderr: &str, prefix: &str) -> u64 {
    let line = stderr.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no '{prefix}': {stderr}"));
    line.split_whitespace().next().and_then(|n| n.parse().ok()).expect("a count")
}

#[test]
fn sstf_example_schedules_every_request() {
    let (v, stderr) = bench(
        "sstf",
        &[
            "--device",
            "null:gb=1,irqmode=1,sched=sstf",
            "--name=r",
            "--rw=randread",
            "--iodepth=16",
            "--number_ios=3000",
        ],
    );
    assert_eq!(v["jobs"][0]["read"]["total_ios"], 3000);
    assert_eq!(v["mqblk"]["dispatched"], 3000);
    assert_eq!(counter(&stderr, "sstf: dispatched "), 3000, "every request went through sstf");
}

#[test]
fn wake_one_example_wakes_submitters_waiting_for_tags() {
    let (v, stderr) = bench(
        "wake_one",
        &[
            "--device",
            "null:gb=1,irqmode=1,hw_queue_depth=4,wake=one",
            "--name=r",
            "--rw=randread",
            "--iodepth=4",
            "--numjobs=8",
            "--number_ios=1000",
        ],
    );
    let ios: u64 = v["jobs"].as_array().unwrap().iter().map(|j| j["read"]["total_ios"].as_u64().unwrap()).sum();
    assert_eq!(ios, 8000);
    assert!(v["mqblk"]["tag_waits"].as_u64().unwrap() > 0, "8 jobs of depth 4 on 4 tags wait for tags");
    assert!(counter(&stderr, "wake=one: woke ") > 0, "the policy woke the waiters");
}

#[test]
fn an_unregistered_policy_name_is_refused_with_the_accepted_list() {
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["bench", "--device", "null:gb=1,sched=sstf", "--number_ios=10"])
        .output()
        .expect("run mqblk");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("'sstf'") && stderr.contains("mq-deadline"), "{stderr}");
}
