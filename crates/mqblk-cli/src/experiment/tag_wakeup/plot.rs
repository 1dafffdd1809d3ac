//! tag-wakeup's charts, drawn from its JSON document alone, so a committed
//! tag-wakeup.json can be drawn again (`mqblk experiment tag-wakeup
//! --replot FILE`). Table 1: context switches per second (the source's
//! unit) per profile on a logarithmic axis (ours are a fraction of the
//! source's, which counted every task), the cut (batch2020's switches per
//! I/O over the stash's) against jobs beside the source's, and the hdd's
//! IOPS; the nvme's cut against its channels' jitter; table 2: IOPS per
//! total iodepth. Our medians with their min-max, the source's figures
//! beside them, points where threads outnumber the CPUs shaded.

use serde_json::Value;

use super::{jitter, Source1, POLICIES, POLICY_TITLES, SRC_4K, SRC_HDD, SRC_NVME, SRC_SSD};
use crate::experiment::plot::{Panel, Series};
use crate::experiment::Spread;

/// A metric of a result cell as its median and spread.
fn metric(cell: &Value, key: &str) -> Option<Spread> {
    let runs: Vec<f64> = cell["metrics"][key]["runs"].as_array()?.iter().filter_map(Value::as_f64).collect();
    (!runs.is_empty()).then(|| Spread::of(&runs))
}

/// The result cells of one table and profile (and total iodepth), by jobs
/// ascending.
fn cells<'a>(doc: &'a Value, table: u64, profile: &str, depth: Option<u64>) -> Vec<&'a Value> {
    let mut out: Vec<&Value> = doc["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["table"] == table && c["profile"] == profile)
        .filter(|c| depth.map_or(true, |d| c["total_iodepth"] == d))
        .collect();
    out.sort_by_key(|c| c["jobs"].as_u64());
    out
}

fn jobs(c: &Value) -> f64 {
    c["jobs"].as_f64().unwrap_or(0.0)
}

/// One policy's series of a metric over `cells`.
fn series(cells: &[&Value], policy: usize, key: &str) -> Option<Series> {
    let of: Vec<&&Value> = cells.iter().filter(|c| c["policy"] == POLICIES[policy]).collect();
    let spreads: Vec<(f64, Spread)> = of.iter().filter_map(|c| Some((jobs(c), metric(c, key)?))).collect();
    if spreads.is_empty() {
        return None;
    }
    let points = spreads.iter().map(|(x, s)| (*x, s.median)).collect();
    let minmax = spreads.iter().map(|(_, s)| (s.min, s.max)).collect();
    Some(Series::measured(POLICY_TITLES[policy], points).with_spread(minmax))
}

/// The first job count at which the threads that run (the jobs, and the
/// device's completion thread per hardware queue) outnumber the CPUs.
fn oversubscribed_from(doc: &Value, profile: &str) -> f64 {
    let cpus = doc["provenance"]["cpus"]
        .as_u64()
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get() as u64));
    let queues = doc["profiles"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == profile))
        .and_then(|p| p["hw_queues"].as_u64())
        .unwrap_or(1);
    (cpus + 1).saturating_sub(queues).max(1) as f64
}

fn source_of(profile: &str) -> &'static Source1 {
    match profile {
        "hdd" => &SRC_HDD,
        "ssd" => &SRC_SSD,
        _ => &SRC_NVME,
    }
}

/// The source's two columns of `figures` as series.
fn source_series(source: &Source1, figures: &[(u32, u32)], labels: [&str; 2]) -> [Series; 2] {
    [0, 1].map(|i| {
        let points = source
            .jobs
            .iter()
            .zip(figures)
            .map(|(&j, v)| (j as f64, f64::from(if i == 0 { v.0 } else { v.1 })))
            .collect();
        Series::source(labels[i], points)
    })
}

/// Our cut against jobs (each round's batch2020 / stash voluntary
/// switches per I/O, paired by round) and the source's (per I/O: switches
/// per second over IOPS, 5.6.15's over the patch's).
fn cut_panel(doc: &Value, profile: &str, cells: &[&Value]) -> Panel {
    fn of<'a>(cells: &'a [&'a Value], policy: &'a str) -> impl Iterator<Item = &'a &'a Value> {
        cells.iter().filter(move |c| c["policy"] == policy)
    }
    let mut points = Vec::new();
    let mut minmax = Vec::new();
    for batch in of(cells, "batch2020") {
        let Some(stash) = of(cells, "stash").find(|c| c["jobs"] == batch["jobs"]) else { continue };
        let runs = |c: &Value| metric(c, "ctx_voluntary_per_io").map(|s| s.runs).unwrap_or_default();
        let ratios: Vec<f64> = runs(batch).iter().zip(runs(stash)).map(|(b, s)| b / s.max(1e-9)).collect();
        if ratios.is_empty() {
            continue;
        }
        let s = Spread::of(&ratios);
        points.push((jobs(batch), s.median));
        minmax.push((s.min, s.max));
    }
    let source = source_of(profile);
    let source_points = source
        .jobs
        .iter()
        .zip(source.cs.iter().zip(source.iops))
        .map(|(&j, (cs, iops))| {
            (j as f64, (f64::from(cs.0) / f64::from(iops.0)) / (f64::from(cs.1) / f64::from(iops.1)))
        })
        .collect();
    Panel::numeric(format!("1 MB randread, {profile}: the cut (batch2020 / stash)"), "jobs", "x switches per I/O")
        .oversubscribed_from(oversubscribed_from(doc, profile))
        .with(Series::measured("ours: 5.6's switches per I/O over the stash's", points).with_spread(minmax))
        .with(Series::source("source: 5.6.15's over the patch's (per I/O)", source_points))
}

/// The nvme's cut against its channels' jitter, the source's cut at 72
/// jobs (its device's jitter unknown) drawn across.
fn jitter_panel(sweep: &Value) -> Option<Panel> {
    let rows = sweep["rows"].as_array()?;
    let pct = |r: &Value| r["jitter_pct"].as_f64().unwrap_or(0.0);
    let spreads: Vec<(f64, Spread)> = rows
        .iter()
        .filter_map(|r| {
            let runs: Vec<f64> = r["cut"]["runs"].as_array()?.iter().filter_map(Value::as_f64).collect();
            (!runs.is_empty()).then(|| (pct(r), Spread::of(&runs)))
        })
        .collect();
    let jobs = sweep["jobs"].as_u64().unwrap_or(0);
    let source = sweep["source_cut_72_jobs"].as_f64().unwrap_or_else(jitter::source_cut);
    let across = vec![(pct(rows.first()?), source), (pct(rows.last()?), source)];
    Some(
        Panel::numeric(
            format!("1 MB randread, nvme, {jobs} jobs: the cut by jitter"),
            "channel jitter (%)",
            "x switches per I/O",
        )
        .with(
            Series::measured(
                "ours: 5.6's switches per I/O over the stash's",
                spreads.iter().map(|(x, s)| (*x, s.median)).collect(),
            )
            .with_spread(spreads.iter().map(|(_, s)| (s.min, s.max)).collect()),
        )
        .with(Series::source("source, 72 jobs (its jitter unknown)", across)),
    )
}

pub fn panels(doc: &Value) -> Vec<Panel> {
    let mut panels = Vec::new();
    let profiles: Vec<&str> =
        ["hdd", "ssd", "nvme"].into_iter().filter(|p| !cells(doc, 1, p, None).is_empty()).collect();
    for &profile in &profiles {
        let cells = cells(doc, 1, profile, None);
        let source = source_of(profile);
        let mut panel =
            Panel::numeric(format!("1 MB randread, {profile}: context switches/s"), "jobs", "voluntary ctx switches/s")
                .log_values()
                .oversubscribed_from(oversubscribed_from(doc, profile));
        for p in 0..POLICIES.len() {
            if let Some(s) = series(&cells, p, "ctx_voluntary_per_sec") {
                panel = panel.with(s);
            }
        }
        for s in source_series(source, source.cs, ["source 5.6.15", "source 5.6.15-patched (stash)"]) {
            panel = panel.with(s);
        }
        panels.push(panel);
    }
    for &profile in &profiles {
        panels.push(cut_panel(doc, profile, &cells(doc, 1, profile, None)));
    }
    if profiles.contains(&"hdd") {
        let cells = cells(doc, 1, "hdd", None);
        let mut panel = Panel::numeric("1 MB randread, hdd: IOPS", "jobs", "IOPS")
            .oversubscribed_from(oversubscribed_from(doc, "hdd"));
        for p in 0..POLICIES.len() {
            if let Some(s) = series(&cells, p, "iops") {
                panel = panel.with(s);
            }
        }
        for s in source_series(&SRC_HDD, SRC_HDD.iops, ["source 5.6.15", "source 5.6.15-patched (stash)"]) {
            panel = panel.with(s);
        }
        panels.push(panel);
    }
    panels.extend(jitter_panel(&doc["jitter"]));
    let mut depths: Vec<u64> = doc["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["table"] == 2)
        .filter_map(|c| c["total_iodepth"].as_u64())
        .collect();
    depths.sort_unstable();
    depths.dedup();
    for depth in depths {
        let cells = cells(doc, 2, "ssd", Some(depth));
        let mut panel = Panel::numeric(format!("4k randread, total iodepth {depth}: IOPS"), "jobs", "IOPS")
            .oversubscribed_from(oversubscribed_from(doc, "ssd"));
        for p in 0..POLICIES.len() {
            if let Some(s) = series(&cells, p, "iops") {
                panel = panel.with(s);
            }
        }
        for (i, label) in [(0, "source 5.6"), (1, "source 5.6 patched (stash)")] {
            let points = SRC_4K
                .iter()
                .filter(|s| s.0 as u64 == depth)
                .map(|s| (s.1 as f64, f64::from(if i == 0 { s.2 } else { s.3 }) * 1000.0))
                .collect();
            panel = panel.with(Series::source(label, points));
        }
        panels.push(panel);
    }
    panels
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::experiment::plot::Origin;

    /// A table 1 cell of the nvme profile: `runs` of voluntary switches
    /// per I/O and per second.
    fn cell(policy: &str, jobs: u64, per_io: &[f64]) -> Value {
        let per_sec: Vec<f64> = per_io.iter().map(|v| v * 3000.0).collect();
        json!({
            "table": 1, "profile": "nvme", "jobs": jobs, "total_iodepth": 65 * jobs, "policy": policy,
            "metrics": {
                "ctx_voluntary_per_io": { "runs": per_io },
                "ctx_voluntary_per_sec": { "runs": per_sec },
            },
        })
    }

    fn doc() -> Value {
        json!({
            "experiment": "tag-wakeup",
            "provenance": { "cpus": 2 },
            "profiles": [{ "name": "nvme", "hw_queues": 4 }],
            "results": [
                cell("batch2020", 1, &[0.2, 0.2, 0.2]),
                cell("stash", 1, &[0.2, 0.2, 0.2]),
                cell("batch2020", 72, &[2.0, 1.8, 1.5]),
                cell("stash", 72, &[0.4, 0.3, 0.5]),
            ],
            "jitter": {
                "jobs": 72,
                "source_cut_72_jobs": 6.0,
                "rows": [
                    { "jitter_pct": 0, "cut": { "runs": [2.0, 2.2, 1.9] } },
                    { "jitter_pct": 50, "cut": { "runs": [5.0, 4.8, 5.1] } },
                ],
            },
        })
    }

    fn panel<'a>(panels: &'a [Panel], title: &str) -> &'a Panel {
        panels.iter().find(|p| p.title.contains(title)).unwrap_or_else(|| panic!("no panel '{title}'"))
    }

    #[test]
    fn the_cut_pairs_the_policies_round_by_round() {
        let panels = panels(&doc());
        let cut = panel(&panels, "nvme: the cut");
        let ours = &cut.series[0];
        assert_eq!(ours.origin, Origin::Measured);
        // Rounds 5x, 6x, 3x: median 5, min 3, max 6 (the ratio of the
        // medians, 1.8 / 0.4, would be 4.5).
        assert_eq!(ours.points, vec![(1.0, 1.0), (72.0, 5.0)]);
        assert_eq!(ours.spread[1], (3.0, 6.0));
        // The source's per I/O at 72 jobs: 24,221 / 2,984 over 4,054 / 2,990.
        let source = &cut.series[1];
        assert!((source.points.last().unwrap().1 - 5.99).abs() < 0.01, "{:?}", source.points);
    }

    #[test]
    fn switches_per_second_go_on_a_log_axis_and_threads_count_the_device_threads() {
        let panels = panels(&doc());
        let rates = panel(&panels, "nvme: context switches/s");
        assert!(rates.log_y);
        // 4 completion threads on 2 CPUs: one job already oversubscribes.
        assert!(
            matches!(rates.x, crate::experiment::plot::XAxis::Numeric { oversubscribed_from: Some(x) } if x == 1.0)
        );
        let jitter = panel(&panels, "the cut by jitter");
        assert_eq!(jitter.series[0].points, vec![(0.0, 2.0), (50.0, 5.0)]);
        assert_eq!(jitter.series[1].points, vec![(0.0, 6.0), (50.0, 6.0)]);
    }
}
