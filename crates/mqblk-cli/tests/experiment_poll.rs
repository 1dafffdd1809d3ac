//! `mqblk experiment poll --quick` end to end ("virtio_blk: implement
//! blk_mq_ops->poll()", 2021): the JSON's shape, the calibration against
//! the source's figures, and the direction of every claim the headline
//! makes, each a ratio of figures measured side by side in one run, with
//! generous margins (the machine is shared):
//! - notification toggling (the patch's design, the headline) gains IOPS at 4k,
//!   and a polled 4k I/O completes sooner than an interrupt-driven one;
//! - at 128k, where the device's bandwidth sets the pace with the
//!   interrupt too, polling saves a much smaller share of an I/O's time
//!   at the median than at 4k (the source's 128k gained 0%). IOPS at 64k and 128k are not asserted: the
//!   source's gained nothing, ours gain 2-18% in quick runs (the interrupt
//!   path's tail on 2 shared CPUs lowers the mean, not the median; seen at
//!   128k: toggle +6.9% and +12.4% with the median I/O 1.3 and 0.4 us
//!   slower polled), and BENCHMARKS names 64k not reproduced;
//! - 16k costs the device more than 4k (the transfer term);
//! - polling job threads spend more CPU per I/O than the interrupt path's
//!   job threads, and the device's completion threads less.
//!
//! The calibration must come near its target: the grid's 4k randread cell
//! with interrupts measures a per-I/O time within `QUICK_TOLERANCE` (25%)
//! of the source's, or the directions are not checked on the source's
//! device. The experiment's own tolerance (10%, `target_met` in the JSON)
//! is the full run's claim: a quick run's calibration takes 3 steps of 3
//! probes of 200 ms, and this VM's per-I/O time is bimodal (a cell now and
//! then settles 2-3x slower), so quick runs on a quiet machine missed 10%
//! in 2 of 5 tries (by 13-14%); the directions hold on a device that far
//! off, and `target_met` must still say whether the 10% was met.
//!
//! The IOPS assertions and the target are the ones a loaded machine can break: a
//! spinning poller gets only its fair share of a CPU that other processes
//! want (seen: polling job threads running a quarter of the time at a load
//! of 10 on 2 cores, and "gains" of -70%), while a sleeping job is
//! favoured at wakeup. So they pool the rounds of randread and randwrite
//! in which the polling job threads held their CPUs (ran at least 70% of
//! the time, from their own CPU time); a run with no such round is made
//! again (up to `ATTEMPTS` quick runs), as is a run that missed the
//! target, and the checks fail if none has one: they never pass having
//! checked nothing, nor on a device that missed the target.
//!
//! One run serves every check (nextest runs each test in a process of its
//! own, and two runs side by side would compete for the CPUs): the test
//! runs each check and reports every one that failed.

mod common;

use serde_json::Value;

/// A named check of one run's table and JSON; panics if the claim fails.
type Check = (&'static str, fn(&str, &Value));

/// Quick runs made at most, until one has a round in which the polling job
/// threads held their CPUs for both the IOPS and the per-I/O checks.
const ATTEMPTS: usize = 3;

/// How far a quick run's calibrated device may be from the source's
/// per-I/O time for its directions to count (see the module docs).
const QUICK_TOLERANCE: f64 = 0.25;

/// Whether the run's calibrated device came within `QUICK_TOLERANCE`.
fn near_target(v: &Value) -> bool {
    let cal = &v["calibration"];
    match (cal["measured_ns_per_io_4k_randread_hipri0"].as_f64(), cal["target_ns_per_io"].as_f64()) {
        (Some(measured), Some(target)) => (measured / target - 1.0).abs() <= QUICK_TOLERANCE,
        _ => false,
    }
}

#[test]
fn quick_run_supports_every_claim() {
    let mut run = common::quick_experiment("poll");
    for attempt in 2..=ATTEMPTS {
        let target_met = near_target(&run.json);
        if target_met
            && !pooled_gains(&run.json, "toggle", "4k").is_empty()
            && !pooled_savings(&run.json, "4k").is_empty()
            && !pooled_savings(&run.json, "128k").is_empty()
        {
            break;
        }
        // Too loaded to measure polling (the pollers never held their
        // CPUs) or to meet the target: run again rather than pass having
        // checked nothing; the last run's checks say what failed.
        eprintln!(
            "poll: device within {:.0}% of the target {target_met}, or no round in which the pollers held \
             their CPUs; quick run {attempt} of {ATTEMPTS}",
            QUICK_TOLERANCE * 100.0
        );
        run = common::quick_experiment("poll");
    }
    assert!(run.svg.starts_with("<svg") && run.svg.contains("<polyline"));
    let (table, v) = (&run.table, &run.json);
    let checks: [Check; 8] = [
        (
            "reports_every_cell_headline_design_first_with_spreads",
            reports_every_cell_headline_design_first_with_spreads,
        ),
        ("source_gains_are_quoted_as_printed", source_gains_are_quoted_as_printed),
        ("calibration_targets_the_source_per_io_time", calibration_targets_the_source_per_io_time),
        ("toggle_polling_gains_iops_at_4k", toggle_polling_gains_iops_at_4k),
        ("a_polled_4k_io_completes_sooner", a_polled_4k_io_completes_sooner),
        ("polling_saves_time_per_io_at_4k_not_at_128k", polling_saves_time_per_io_at_4k_not_at_128k),
        ("sixteen_k_costs_the_device_more_than_4k", sixteen_k_costs_the_device_more_than_4k),
        (
            "polling_moves_cpu_from_the_device_threads_to_the_job_threads",
            polling_moves_cpu_from_the_device_threads_to_the_job_threads,
        ),
    ];
    let failed: Vec<String> = checks
        .iter()
        .filter_map(|(name, check)| {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(table, v)));
            r.err().map(|e| {
                let msg =
                    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
                format!("{name}: {}", msg.unwrap_or_default())
            })
        })
        .collect();
    assert!(failed.is_empty(), "{} check(s) failed:\n{}\n\n{table}", failed.len(), failed.join("\n"));
}

fn median(v: &Value) -> f64 {
    v["median"].as_f64().unwrap_or_else(|| panic!("no median in {v}"))
}

fn runs(v: &Value) -> Vec<f64> {
    v["runs"].as_array().unwrap_or_else(|| panic!("no runs in {v}")).iter().map(|r| r.as_f64().unwrap()).collect()
}

fn median_of(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The result cell of design, rw, bs and hipri.
fn cell<'a>(v: &'a Value, design: &str, rw: &str, bs: &str, hipri: bool) -> &'a Value {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["design"] == design && r["rw"] == rw && r["bs"] == bs && r["hipri"] == hipri)
        .unwrap_or_else(|| panic!("no cell {design} {rw} {bs} hipri={hipri}"))
}

/// A round is one in which the polling job threads held their CPUs if
/// each ran for at least this share of the wall time.
const HELD_CPU_SHARE: f64 = 0.7;

/// Per round, the share of the wall time each polling job thread ran:
/// its CPU per I/O times IOPS, per job.
fn held_shares(v: &Value, poll: &Value) -> Vec<f64> {
    let jobs = v["jobs"].as_f64().unwrap();
    let cpu = runs(&poll["job_threads_cpu_us_per_io"]);
    cpu.iter().zip(runs(&poll["iops"])).map(|(cpu_us, iops)| cpu_us * iops / jobs / 1e6).collect()
}

/// The gain (%) of design at bs in every round, randread and randwrite
/// pooled, in which the polling job threads held their CPUs: their CPU
/// per I/O times IOPS, per job, is the share of the time each ran.
fn pooled_gains(v: &Value, design: &str, bs: &str) -> Vec<f64> {
    let mut out = Vec::new();
    for rw in ["randread", "randwrite"] {
        let g = v["gains"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["design"] == design && g["rw"] == rw && g["bs"] == bs)
            .unwrap_or_else(|| panic!("no gain for {design} {rw} {bs}"));
        let shares = held_shares(v, cell(v, design, rw, bs, true));
        let held = runs(&g["gain_pct"]).into_iter().zip(&shares).filter(|(_, &s)| s >= HELD_CPU_SHARE);
        out.extend(held.map(|(gain, _)| gain));
        if !shares.iter().any(|&s| s >= HELD_CPU_SHARE) {
            eprintln!("{design} {rw} {bs}: no round in which the pollers held their CPUs (shares {shares:?})");
        }
    }
    out
}

/// Median over randread and randwrite of a figure's medians.
fn both_rw(v: &Value, design: &str, bs: &str, hipri: bool, key: &str) -> f64 {
    median_of(["randread", "randwrite"].iter().map(|rw| median(&cell(v, design, rw, bs, hipri)[key])).collect())
}

fn reports_every_cell_headline_design_first_with_spreads(table: &str, v: &Value) {
    assert_eq!(v["experiment"], "poll");
    let rounds = v["rounds"].as_u64().unwrap() as usize;
    assert_eq!(rounds, 3, "the default");
    assert_eq!(v["headline_design"], "toggle");
    assert_eq!(v["source_table"].as_array().unwrap().len(), 16, "rw x bs of the patch's table");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2 * 4 * 2 * 2, "rw x bs x design x hipri");
    assert_eq!(results[0]["design"], "toggle", "the patch's design leads");
    for r in results {
        for key in ["iops", "lat_mean_us", "lat_p99_us", "job_threads_cpu_us_per_io", "device_threads_cpu_us_per_io"] {
            let (min, max) = (r[key]["min"].as_f64().unwrap(), r[key]["max"].as_f64().unwrap());
            assert!(min <= median(&r[key]) && median(&r[key]) <= max, "{key}: {r}");
            assert_eq!(runs(&r[key]).len(), rounds, "{key}: {r}");
        }
        assert!(median(&r["iops"]) > 0.0, "{r}");
        assert!(r["command"].as_str().unwrap().starts_with("mqblk bench --device null:"), "{r}");
    }
    let gains = v["gains"].as_array().unwrap();
    assert_eq!(gains.len(), 2 * 4 * 2, "rw x bs x design");
    assert!(gains.iter().all(|g| runs(&g["gain_pct"]).len() == rounds), "a spread for every gain");
    // The table: the headline design's rows come first, no CPU column is
    // CPUs over IOPS, and no guess about other processes is printed.
    let first_row = table.lines().find(|l| l.contains("| randread  | 4k")).expect("a 4k randread row");
    assert!(first_row.starts_with("toggle"), "{first_row}");
    assert!(table.contains("job CPU us/IO") && table.contains("device CPU us/IO"), "{table}");
    assert!(!table.contains("competed") && !table.contains("CPUs busy"), "{table}");
    let mixed = v["mixed"].as_array().unwrap();
    assert_eq!(mixed.len(), 2 * 2, "design x (hipri job, plain job)");
}

fn source_gains_are_quoted_as_printed(table: &str, v: &Value) {
    let printed = |rw: &str, bs: &str| {
        v["source_table"].as_array().unwrap().iter().find(|s| s["rw"] == rw && s["bs"] == bs).unwrap()["gain_printed"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // Recomputed from the IOPS these would read +13%, +17%, +13%, +6%.
    assert_eq!(printed("randread", "16k"), "+12%");
    assert_eq!(printed("read", "4k"), "+16%");
    assert_eq!(printed("write", "4k"), "+12%");
    assert_eq!(printed("write", "16k"), "+5%");
    assert_eq!(printed("randwrite", "4k"), "+18%");
    assert!(table.contains("118,939 / 134,269 (+12%)"), "{table}");
    let g = v["gains"].as_array().unwrap().iter().find(|g| g["rw"] == "randread" && g["bs"] == "16k").unwrap();
    assert_eq!(g["source_gain_printed"], "+12%");
}

fn calibration_targets_the_source_per_io_time(_: &str, v: &Value) {
    let cal = &v["calibration"];
    let target = cal["target_ns_per_io"].as_f64().unwrap();
    assert!((target - 4.0 / 149_426.0 * 1e9).abs() < 1.0, "4 jobs / 149,426 IOPS: {cal}");
    assert!(cal["source_figure"].as_str().unwrap().contains("149,426"), "{cal}");
    assert_eq!(cal["device_keys"]["transfer_mbps"], 2207, "17,655 x 128 KiB/s: {cal}");
    // The timeline: the source's 4 jobs' share per job, times our jobs.
    let jobs = v["jobs"].as_u64().expect("the jobs in the JSON");
    let timeline = cal["device_keys"]["mbps"].as_u64().unwrap();
    assert_eq!(timeline, 2207 * jobs / 4, "{cal}");
    let by_bs = &cal["device_keys"]["completion_nsec_by_bs"];
    let (c4, c16) = (by_bs["4k"].as_f64().unwrap(), by_bs["16k"].as_f64().unwrap());
    assert!(c16 > c4, "16k costs the device more than 4k: {cal}");
    // The calibrated device's 4k time with interrupts, as the grid measured
    // it: the per-I/O time (jobs / IOPS) the table sets beside the
    // source's. `target_met` says whether it is within the experiment's
    // tolerance; the directions need it within `QUICK_TOLERANCE`.
    let measured = cal["measured_ns_per_io_4k_randread_hipri0"].as_f64().unwrap();
    let tolerance = cal["target_tolerance"].as_f64().unwrap();
    assert!(tolerance > 0.0 && tolerance <= 0.15, "a tolerance that means something: {cal}");
    let within = (measured / target - 1.0).abs() <= tolerance;
    assert_eq!(cal["target_met"], within, "target_met is the per-I/O time against the target: {cal}");
    assert!(
        near_target(v),
        "the device was off the target by more than {:.0}% in {ATTEMPTS} quick runs: {measured:.0} ns per I/O \
         against {target:.0} ns",
        QUICK_TOLERANCE * 100.0
    );
    // Every cell's device carries the calibrated keys for its block size.
    let command = cell(v, "toggle", "randread", "16k", false)["command"].as_str().unwrap();
    assert!(command.contains(&format!("completion_nsec={c16},mbps={timeline}")), "{command}");
}

fn toggle_polling_gains_iops_at_4k(_: &str, v: &Value) {
    let gains = pooled_gains(v, "toggle", "4k");
    assert!(!gains.is_empty(), "toggle 4k: no round in which the pollers held their CPUs, in {ATTEMPTS} quick runs");
    assert!(median_of(gains.clone()) > 0.0, "toggle 4k gains (rounds in which the pollers held their CPUs): {gains:?}");
}

fn a_polled_4k_io_completes_sooner(_: &str, v: &Value) {
    for design in ["toggle", "poll_queues"] {
        let (irq, poll) = (both_rw(v, design, "4k", false, "lat_p50_us"), both_rw(v, design, "4k", true, "lat_p50_us"));
        assert!(poll < irq * 0.97, "{design}: median 4k latency polled {poll} us, interrupt {irq} us");
    }
}

/// The time saved per I/O at the median, as a share of the interrupt
/// path's median I/O, randread and randwrite pooled, in the rounds in
/// which the polling job threads held their CPUs (as `pooled_gains`).
fn pooled_savings(v: &Value, bs: &str) -> Vec<f64> {
    let mut out = Vec::new();
    for rw in ["randread", "randwrite"] {
        let (irq, poll) = (cell(v, "toggle", rw, bs, false), cell(v, "toggle", rw, bs, true));
        let held = held_shares(v, poll).into_iter().map(|s| s >= HELD_CPU_SHARE);
        let rounds = runs(&irq["lat_p50_us"]).into_iter().zip(runs(&poll["lat_p50_us"])).zip(held);
        out.extend(rounds.filter(|(_, held)| *held).map(|((i, p), _)| (i - p) / i));
    }
    out
}

/// The share of an I/O's time polling saves at the median: more than 5% at
/// 4k (the source's 3.3-4.4 us of 27-29, ours 15-20%), little where the device's
/// transfer sets the pace (128k: the source's 0.2-1.3 us of 226-246).
/// Shares, not microseconds: the interrupt path's wakeup costs a 128k I/O
/// about what it costs a 4k one, and on 2 shared CPUs its tail moves the
/// 128k saving by a few us either way (full run -0.3 to 0.1 us, quick
/// runs -1.3 to 2.6), a few percent of a 128k I/O's time.
fn polling_saves_time_per_io_at_4k_not_at_128k(table: &str, v: &Value) {
    assert!(table.contains("per-I/O time polling saves"), "the saving is printed beside the source's");
    let (s4, s128) = (pooled_savings(v, "4k"), pooled_savings(v, "128k"));
    assert!(
        !s4.is_empty() && !s128.is_empty(),
        "toggle: no round in which the pollers held their CPUs at 4k and at 128k, in {ATTEMPTS} quick runs"
    );
    let (s4, s128) = (median_of(s4), median_of(s128));
    assert!(s4 > 0.05, "toggle 4k: polling saves {:.1}% of the median I/O", s4 * 100.0);
    assert!(
        s128 < s4 / 2.0,
        "toggle 128k: polling saves {:.1}% of the median I/O against 4k's {:.1}%",
        s128 * 100.0,
        s4 * 100.0
    );
}

fn sixteen_k_costs_the_device_more_than_4k(_: &str, v: &Value) {
    // Polled: the median I/O's latency is the device's time.
    let (l4, l16) = (both_rw(v, "toggle", "4k", true, "lat_p50_us"), both_rw(v, "toggle", "16k", true, "lat_p50_us"));
    assert!(l16 > l4 * 1.05, "median polled latency 16k {l16} us, 4k {l4} us");
}

fn polling_moves_cpu_from_the_device_threads_to_the_job_threads(_: &str, v: &Value) {
    for design in ["toggle", "poll_queues"] {
        for bs in ["4k", "16k", "64k", "128k"] {
            let jobs = |hipri| both_rw(v, design, bs, hipri, "job_threads_cpu_us_per_io");
            let device = |hipri| both_rw(v, design, bs, hipri, "device_threads_cpu_us_per_io");
            // More, not a multiple: a poller descheduled on a loaded machine
            // is not charged for the time it would have spun.
            assert!(jobs(true) > jobs(false), "{design} {bs}: job threads {} vs {} us/IO", jobs(true), jobs(false));
            assert!(
                device(true) < device(false) * 0.5,
                "{design} {bs}: device {} vs {} us/IO",
                device(true),
                device(false)
            );
        }
    }
}
