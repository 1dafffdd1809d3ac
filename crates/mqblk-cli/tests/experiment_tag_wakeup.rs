//! `mqblk experiment tag-wakeup --quick` end to end, through the built
//! binary: the JSON holds every cell's median and spread and its commands,
//! and the source's directions hold. Directions only: medians of the quick
//! rounds compared side by side, no absolute figure (this machine is shared
//! and noisy).

mod common;

use serde_json::Value;

fn run_quick() -> (String, Value, String) {
    let run = common::quick_experiment("tag-wakeup");
    (run.table, run.json, run.svg)
}

fn median(cell: &Value, metric: &str) -> f64 {
    cell["metrics"][metric]["median"].as_f64().unwrap_or_else(|| panic!("{metric} missing in {cell}"))
}

fn cell<'a>(results: &'a [Value], table: u64, profile: &str, jobs: u64, policy: &str) -> &'a Value {
    results
        .iter()
        .find(|c| c["table"] == table && c["profile"] == profile && c["jobs"] == jobs && c["policy"] == policy)
        .unwrap_or_else(|| panic!("no cell table {table} {profile} jobs={jobs} {policy}"))
}

#[test]
fn tag_wakeup_quick_reproduces_the_source_directions() {
    let (table, v, svg) = run_quick();
    for heading in ["table 1, ssd", "table 2, ssd", "tag waits per I/O", "mean tag-wait time per wait (us)", "source"] {
        assert!(table.contains(heading), "{heading} missing in\n{table}");
    }
    assert_eq!(v["experiment"], "tag-wakeup");
    assert_eq!(v["quick"], true);
    let rounds = v["rounds"].as_u64().unwrap();
    let results = v["results"].as_array().unwrap();
    // 1 MB: ssd and nvme x jobs 1, 48; 4k: total iodepth 1024 x jobs 1, 128.
    assert_eq!(results.len(), (2 * 2 + 2) * 4, "rows x policies");
    for c in results {
        for metric in ["iops", "ctx_voluntary_per_sec", "ctx_voluntary_per_io", "tag_waits_per_io", "tag_wait_us_mean"]
        {
            let m = &c["metrics"][metric];
            let (lo, mid, hi) = (m["min"].as_f64().unwrap(), m["median"].as_f64().unwrap(), m["max"].as_f64().unwrap());
            assert!(lo <= mid && mid <= hi, "{metric}: {m}");
            assert_eq!(m["runs"].as_array().unwrap().len() as u64, rounds, "{metric}: {m}");
        }
        assert!(c["metrics"]["iops"]["min"].as_f64().unwrap() > 0.0, "{c}");
        let commands = c["commands"].as_array().unwrap();
        assert_eq!(commands.len() as u64, rounds);
        assert!(commands.iter().all(|s| s.as_str().unwrap().starts_with("mqblk bench --device null:")), "{c}");
        // Every cell meant to contend for tags does, in every round; but
        // one 4k job on the 4k device (2.56M IOPS) is CPU-bound far below
        // the rate at which it would hold 256 tags (100 us each), so
        // whether it ever waits depends on the machine's speed.
        let one_cpu_bound_job = c["table"] == 2 && c["jobs"] == 1;
        if c["contention"] == true && !one_cpu_bound_job {
            assert!(c["metrics"]["tag_waits"]["min"].as_f64().unwrap() > 0.0, "no tag wait in a contention cell: {c}");
        }
    }
    // Every 1 MB row contends (65 reads of 4 requests per job over 256
    // tags, per queue on the nvme); so does 4k at 128 jobs x iodepth 8.
    assert!(results.iter().filter(|c| c["table"] == 1).all(|c| c["contention"] == true));
    assert_eq!(cell(results, 2, "ssd", 128, "batch2020")["contention"], true);
    // Table 1 runs the same iodepth per job whatever the jobs (the
    // source's fio jobs: iodepth=1024 each), not a total split over them.
    for profile in ["ssd", "nvme"] {
        let depth = |jobs| cell(results, 1, profile, jobs, "batch2020")["iodepth_per_job"].as_u64().unwrap();
        assert_eq!(depth(1), depth(48), "{profile}");
    }
    // The source's main result (SSD, 48 jobs: 19,015 vs 3,617 context
    // switches/s, 5x): against the source kernel's wakeup, the RFC sleeps
    // less per I/O; so does mqblk's handoff. A margin of 1.5x.
    let batch = median(cell(results, 1, "ssd", 48, "batch2020"), "ctx_voluntary_per_io");
    for policy in ["stash", "handoff"] {
        let other = median(cell(results, 1, "ssd", 48, policy), "ctx_voluntary_per_io");
        assert!(1.5 * other < batch, "{policy} {other:.3} vs batch2020 {batch:.3} voluntary context switches per I/O");
    }
    // The NVMe's too (72 jobs over 4 queues: 24,221 vs 4,054 per second,
    // 6x), once its channels' completions drift apart as a real device's
    // do (jitter_pct): the quick run's 48 jobs, 12 per queue.
    let batch = median(cell(results, 1, "nvme", 48, "batch2020"), "ctx_voluntary_per_io");
    let stash = median(cell(results, 1, "nvme", 48, "stash"), "ctx_voluntary_per_io");
    assert!(1.5 * stash < batch, "nvme: stash {stash:.3} vs batch2020 {batch:.3} voluntary context switches per I/O");
    // The nvme's cut against its channels' jitter: every jitter value,
    // both policies over every round, the cut each round's ratio, and why
    // a real device has jitter. The quick run's cells are short, so only
    // the direction the sweep shows is asserted: drifting completions
    // (25%) give the stash more to cut than channels in lockstep (0%).
    let sweep = &v["jitter"];
    assert_eq!(sweep["profile"], "nvme");
    assert_eq!(sweep["jobs"], 48, "the quick run's headline jobs");
    assert!(table.contains("the cut against the channels' jitter") && table.contains("lockstep"), "{table}");
    let rows = sweep["rows"].as_array().unwrap();
    let pcts: Vec<u64> = rows.iter().map(|r| r["jitter_pct"].as_u64().unwrap()).collect();
    assert_eq!(pcts, vec![0, 10, 25, 50]);
    for r in rows {
        assert!(r["device"].as_str().unwrap().contains(&format!(",jitter_pct={},", r["jitter_pct"])), "{r}");
        for policy in ["batch2020", "stash"] {
            let per_io = &r["policies"][policy]["ctx_voluntary_per_io"];
            assert_eq!(per_io["runs"].as_array().unwrap().len() as u64, rounds, "{r}");
            assert!(per_io["min"].as_f64().unwrap() > 0.0, "{r}");
        }
        let cut = &r["cut"];
        let ratios: Vec<f64> = r["policies"]["batch2020"]["ctx_voluntary_per_io"]["runs"]
            .as_array()
            .unwrap()
            .iter()
            .zip(r["policies"]["stash"]["ctx_voluntary_per_io"]["runs"].as_array().unwrap())
            .map(|(b, s)| b.as_f64().unwrap() / s.as_f64().unwrap())
            .collect();
        let runs: Vec<f64> = cut["runs"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(runs.len(), ratios.len(), "{r}");
        assert!(runs.iter().zip(&ratios).all(|(a, b)| (a - b).abs() < 1e-9), "the cut is each round's ratio: {r}");
    }
    let cut = |pct: u64| rows.iter().find(|r| r["jitter_pct"] == pct).unwrap()["cut"]["median"].as_f64().unwrap();
    assert!(cut(25) > cut(0), "the cut at 25% jitter {:.2} vs in lockstep {:.2}", cut(25), cut(0));
    // The plots carry the source's figures beside ours, the cut against
    // jobs and against jitter.
    assert!(svg.contains("source 5.6.15"), "the source's figures are plotted");
    for title in ["nvme: the cut (batch2020 / stash)", "the cut by jitter"] {
        assert!(svg.contains(title), "no panel '{title}'");
    }
}
