//! `mqblk experiment zone-lock --quick` end to end: the JSON and plot are
//! written, every cell carries its rounds, spread and command, and the
//! direction of "null_blk: improve zone locking" holds at 2 jobs (no more
//! than this VM's CPUs) with no scheduler: the per-zone spin locks are
//! contended less often than the one device lock (the mechanism, counted
//! by the driver), and per-zone random reads are not clearly slower.
//!
//! Why not "per-zone KIOPS >= global KIOPS" on the medians, as first
//! planned: it failed 1 run in 9 in this debug build (2026-11-23, load
//! average 8-18 from other work). Measured why: in a debug build the I/O
//! path is several microseconds while the locked section is short, so at
//! 2 jobs only about 5 of 1000 acquisitions of the global lock find it
//! held, and the KIOPS of the two locks differ by less than the noise
//! (e.g. global 1074/1162/1004 vs per-zone 1214/999/1000 KIOPS). The
//! release build at defaults shows the gain (BENCHMARKS.md).

mod common;

#[test]
fn per_zone_reads_are_not_below_global_at_two_jobs() {
    let run = common::quick_experiment("zone-lock");
    let table = &run.table;
    assert!(table.contains("3,340") && table.contains("mq-deadline"), "the source's figures: {table}");
    let v = &run.json;
    let rounds = v["rounds"].as_u64().unwrap();
    let cpus = v["cpus"].as_u64().unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2 * (2 + 1) * 2, "workload x (none: 1 and 2 jobs; mq-deadline: 2 jobs) x lock");
    for r in results {
        let k = &r["kiops"];
        assert!(k["min"].as_f64().unwrap() > 0.0, "{r}");
        assert!(k["median"].as_f64().unwrap() <= k["max"].as_f64().unwrap(), "{r}");
        assert_eq!(k["runs"].as_array().unwrap().len() as u64, rounds, "{r}");
        assert!(r["command"].as_str().unwrap().contains("zone_lock="), "{r}");
        assert_eq!(r["oversubscribed"], r["jobs"].as_u64().unwrap() > cpus, "{r}");
        assert_eq!(r["lock_kind"], "spin", "no memory backing: spin locks, as the kernel's");
    }
    let median = |lock: &str, key: &str| {
        let r = results
            .iter()
            .find(|r| r["sched"] == "none" && r["workload"] == "randread" && r["jobs"] == 2 && r["zone_lock"] == lock)
            .unwrap();
        r[key]["median"].as_f64().unwrap()
    };
    let (global, per_zone) = (median("global", "lock_contended_per_kio"), median("per-zone", "lock_contended_per_kio"));
    assert!(
        per_zone < global,
        "2 jobs, randread: per-zone locks contended {per_zone:.2}/kIO, global {global:.2}\n{table}"
    );
    let (global, per_zone) = (median("global", "kiops"), median("per-zone", "kiops"));
    assert!(per_zone >= 0.75 * global, "2 jobs, randread: per-zone {per_zone:.0} KIOPS, global {global:.0}\n{table}");
    assert!(run.svg.contains("<polyline"));
}
