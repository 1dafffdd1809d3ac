//! `mqblk experiment zone-lock --quick` end to end: the JSON and plot are
//! written, every cell carries its rounds, spread and command, both
//! schedulers run the same hardware-queue count, and each claim of the
//! headline holds at 2 jobs (no more than this VM's CPUs):
//! - reads under none: the per-zone spin locks are found held less than
//!   half as often as the one device lock whenever that was found held at
//!   all (the mechanism, counted by the driver), and per-zone reads are not
//!   slower;
//! - writes that each take the source's 206 us (timer completions: the
//!   zone lock a sliver of a write, as in the source) take at least ten
//!   times as long per write as the same writes completed inline (the
//!   difference the write-inline row isolates), and are about unchanged
//!   by the lock (best rounds within a factor 1.5 either way).
//!
//! Why reads assert "not slower" (per-zone's best round >= 0.75x global's)
//! and not a gain on the KIOPS medians: in a debug build on this shared 2-CPU machine the
//! two locks' KIOPS differ by less than the noise. Two --quick runs of 3
//! rounds on 2026-11-26, load average 10-30 from other work, gave
//! per-zone / global 1.20 (1.16-1.37)x and 0.94 (0.89-1.23)x, while the
//! global lock was found held 18-24 times per 1000 reads and the per-zone
//! locks almost never. The gain is a release-build figure on a quiet
//! machine (BENCHMARKS.md); here the mechanism behind it is asserted, with
//! a wide margin on throughput.

mod common;

#[test]
fn per_zone_locks_relieve_reads_and_leave_source_length_writes_unchanged() {
    let run = common::quick_experiment("zone-lock");
    let table = &run.table;
    assert!(
        table.contains("read (libaio@qd=8 x 96 jobs) = 3340 KIOPS") && table.contains("write (psync x 96 jobs) = 465"),
        "the source's figures as printed: {table}"
    );
    let v = &run.json;
    let rounds = v["rounds"].as_u64().unwrap();
    let cpus = v["cpus"].as_u64().unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), (3 + 2) * 2, "(none: read, write, write-inline; mq-deadline: read, write) x lock");
    for r in results {
        let k = &r["kiops"];
        assert!(k["min"].as_f64().unwrap() > 0.0, "{r}");
        assert!(k["median"].as_f64().unwrap() <= k["max"].as_f64().unwrap(), "{r}");
        assert_eq!(k["runs"].as_array().unwrap().len() as u64, rounds, "{r}");
        let command = r["command"].as_str().unwrap();
        assert!(command.contains("zone_lock=") && command.contains("submit_queues=2,"), "{r}");
        assert_eq!(r["hw_queues"], 2, "the same queue count under both schedulers: {r}");
        assert_eq!(r["oversubscribed"], r["jobs"].as_u64().unwrap() > cpus, "{r}");
        assert_eq!(r["lock_kind"], "spin", "no memory backing: spin locks, as the kernel's");
    }
    let stat = |workload: &str, lock: &str, key: &str, stat: &str| {
        let r = results
            .iter()
            .find(|r| r["sched"] == "none" && r["workload"] == workload && r["jobs"] == 2 && r["zone_lock"] == lock)
            .unwrap_or_else(|| panic!("none {workload} {lock}"));
        r[key][stat].as_f64().unwrap()
    };
    // The mechanism, in the round where the two jobs ran side by side the
    // most (on a loaded machine they may seldom share the CPUs, and then
    // neither lock is found held).
    let held = |w: &str, lock: &str| stat(w, lock, "lock_contended_per_kio", "max");
    let (global, per_zone) = (held("read", "global"), held("read", "per-zone"));
    assert!(per_zone <= global, "reads: per-zone locks found held {per_zone:.2}/kIO, global {global:.2}\n{table}");
    if global >= 1.0 {
        assert!(per_zone < global / 2.0, "reads: per-zone {per_zone:.2}/kIO, global {global:.2}\n{table}");
    }
    // Throughput: each lock's best round. Other work on the machine only
    // ever slows a cell down (a timer thread woken late, a job descheduled),
    // so the best round is the least disturbed one.
    let best = |workload: &str, lock: &str| stat(workload, lock, "kiops", "max");
    let (global, per_zone) = (best("read", "global"), best("read", "per-zone"));
    assert!(per_zone >= 0.75 * global, "reads: per-zone {per_zone:.0} KIOPS, global {global:.0}\n{table}");

    let us_per_write = |workload: &str| {
        let r = v["ratios"].as_array().unwrap().iter().find(|r| r["sched"] == "none" && r["workload"] == workload);
        r.unwrap()["us_per_io_per_job_global"].as_f64().unwrap()
    };
    let (timed, inline) = (us_per_write("write"), us_per_write("write-inline"));
    assert!(timed >= 206.0 && timed > 10.0 * inline, "us per write per job: {timed:.1} vs inline {inline:.1}\n{table}");
    let ratio = best("write", "per-zone") / best("write", "global");
    assert!((1.0 / 1.5..1.5).contains(&ratio), "206 us writes about unchanged by the lock: {ratio:.2}x\n{table}");
    assert!(run.svg.starts_with("<svg"));
}
