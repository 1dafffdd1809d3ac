//! `mqblk experiment plug-merge --quick` end to end: the JSON and plot are
//! written, every cell carries its rounds and command, and the direction
//! holds: sync bios that bypass the plug (blk_sq_make_request before
//! "blk-mq: fix plugging in blk_sq_make_request") never merge, plugged
//! ones with outermost-only flushing do. Counts, not speed: merges are
//! deterministic however loaded the machine is.

mod common;

#[test]
fn sync_bypass_never_merges_and_outermost_does() {
    let run = common::quick_experiment("plug-merge");
    let table = &run.table;
    assert!(table.contains("measured") && table.contains("model"), "ratio beside the closed form: {table}");
    assert!(table.contains("873,224"), "the source's figures beside the table: {table}");
    let v = &run.json;
    assert_eq!(v["experiment"], "plug-merge");
    let rounds = v["rounds"].as_u64().unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 3 + 2, "serial: three variants; no-per-request-cost: two");
    for r in results {
        for key in ["bw_kib_per_sec", "merges", "requests", "bios"] {
            for stat in ["median", "min", "max"] {
                assert!(r[key][stat].is_number(), "{key}.{stat} missing in {r}");
            }
            assert_eq!(r[key]["runs"].as_array().unwrap().len() as u64, rounds, "{r}");
        }
        assert!(r["command"].as_str().unwrap().starts_with("mqblk bench --device null:"), "{r}");
        assert!(r["bios"]["min"].as_f64().unwrap() > 0.0, "{r}");
        let runs = |k: &str| r[k]["runs"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect::<Vec<_>>();
        for ((bios, requests), merges) in runs("bios").iter().zip(runs("requests")).zip(runs("merges")) {
            assert_eq!(*bios, requests + merges, "every bio is a request or merged into one: {r}");
        }
    }
    let by = |device: &str, variant: &str| {
        results.iter().find(|r| r["device"] == device && r["variant"] == variant).unwrap_or_else(|| panic!("{variant}"))
    };
    for device in ["serial", "no-per-request-cost"] {
        assert_eq!(by(device, "sync-bypass")["merges"]["max"], 0.0, "{device}: the 2015 baseline never merges");
        assert!(by(device, "outermost")["merges"]["min"].as_f64().unwrap() > 0.0, "{device}: the fix merges");
    }
    assert_eq!(by("serial", "flush_each")["hypothetical"], true);
    assert_eq!(v["ratios"].as_array().unwrap().len(), 2);
    let svg = &run.svg;
    assert!(svg.starts_with("<svg") && svg.matches("<polyline").count() == 2 * 3, "one line per variant per panel");
}
