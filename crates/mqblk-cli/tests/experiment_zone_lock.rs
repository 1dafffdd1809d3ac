//! `mqblk experiment zone-lock --quick` end to end: the JSON and plot are
//! written, every cell carries its rounds, spread and command, and the
//! direction of "null_blk: improve zone locking" holds where the machine
//! can show it: at 2 jobs (no more than this VM's CPUs), random reads
//! with a spin lock per zone are not slower than with one device lock.

use std::process::Command;

use serde_json::Value;

#[test]
fn per_zone_reads_are_not_below_global_at_two_jobs() {
    let dir = std::env::temp_dir().join(format!("mqblk-exp-zl-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["experiment", "zone-lock", "--quick", "--out", dir.to_str().unwrap()])
        .output()
        .expect("run mqblk");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("3,340") && table.contains("mq-deadline"), "the source's figures: {table}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("zone-lock.json")).unwrap()).unwrap();
    let rounds = v["rounds"].as_u64().unwrap();
    let cpus = v["cpus"].as_u64().unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2 * 2 * 2 * 2, "sched x workload x jobs x lock");
    for r in results {
        let k = &r["kiops"];
        assert!(k["min"].as_f64().unwrap() > 0.0, "{r}");
        assert!(k["median"].as_f64().unwrap() <= k["max"].as_f64().unwrap(), "{r}");
        assert_eq!(k["runs"].as_array().unwrap().len() as u64, rounds, "{r}");
        assert!(r["command"].as_str().unwrap().contains("zone_lock="), "{r}");
        assert_eq!(r["oversubscribed"], r["jobs"].as_u64().unwrap() > cpus, "{r}");
        assert_eq!(r["lock_kind"], "spin", "no memory backing: spin locks, as the kernel's");
    }
    let median = |sched: &str, lock: &str| {
        let r = results
            .iter()
            .find(|r| r["sched"] == sched && r["workload"] == "randread" && r["jobs"] == 2 && r["zone_lock"] == lock)
            .unwrap();
        r["kiops"]["median"].as_f64().unwrap()
    };
    let (global, per_zone) = (median("none", "global"), median("none", "per-zone"));
    assert!(per_zone >= global, "2 jobs, randread: per-zone {per_zone:.0} KIOPS below global {global:.0}\n{table}");
    assert!(std::fs::read_to_string(dir.join("zone-lock.svg")).unwrap().contains("<polyline"));
}
