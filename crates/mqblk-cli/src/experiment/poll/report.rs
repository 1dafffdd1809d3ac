//! What the poll experiment prints and writes: the headline, the tables
//! (the patch's design first), the JSON document and the charts.

use serde_json::{json, Value};

use super::calibrate::{bs_bytes, TARGET_TOLERANCE};
use super::source::{printed, source, SOURCE, SOURCE_JOBS};
use super::{gain, pick, Cell, Design, Measured, DESIGNS, TOGGLE};
use crate::experiment::plot::{thousands, Panel, Series};
use crate::experiment::{Options, Spread};

/// The calibrated per-I/O time (jobs / IOPS) and median latency at 4k
/// randread with interrupts, as measured on the headline design (ns).
fn measured_4k(m: &Measured) -> Option<(f64, f64)> {
    pick(&m.cells, TOGGLE, "randread", "4k", false)
        .map(|c| (c.spread(|r| r.ns_per_io_per_job).median, c.spread(|r| r.lat_p50_us).median * 1e3))
}

/// The rows of the grid: one per design, rw and block size, the
/// headline design first.
fn rows(m: &Measured) -> Vec<(&Cell, &Cell)> {
    let mut out = Vec::new();
    for design in DESIGNS {
        for rw in m.rws {
            for bs in m.bss {
                if let (Some(a), Some(b)) =
                    (pick(&m.cells, design, rw, bs, false), pick(&m.cells, design, rw, bs, true))
                {
                    out.push((a, b));
                }
            }
        }
    }
    out
}

/// The headline's figures for the patch's design (randread): the gain by
/// block size, and CPU per I/O at 4k of the job threads and the device's
/// threads, hipri=0 against hipri=1.
fn headline(m: &Measured) -> String {
    let gains: Vec<String> = m
        .bss
        .iter()
        .filter_map(|bs| {
            let g = gain(&m.cells, TOGGLE, "randread", bs)?;
            let src =
                source("randread", bs).map_or(String::new(), |s| format!(" (source {})", printed(s.gain_printed_pct)));
            Some(format!("{bs} {:+.1}%{src}", g.median))
        })
        .collect();
    let mut out = format!("headline, toggle (the patch's design), randread: polling's IOPS gain {}", gains.join(", "));
    if let (Some(irq), Some(poll)) =
        (pick(&m.cells, TOGGLE, "randread", "4k", false), pick(&m.cells, TOGGLE, "randread", "4k", true))
    {
        let med = |c: &Cell, f: fn(&super::Run) -> f64| c.spread(f).median;
        out.push_str(&format!(
            ";\n  the median 4k I/O completes in {:.1} us polled against {:.1} us with the interrupt",
            med(poll, |r| r.lat_p50_us),
            med(irq, |r| r.lat_p50_us),
        ));
        out.push_str(&format!(
            ";\n  at 4k the job threads spend {:.1} us of CPU per I/O polling against {:.1} us waiting for the \
             interrupt, and the device's completion threads {:.1} against {:.1} us",
            med(poll, |r| r.job_cpu_us_per_io),
            med(irq, |r| r.job_cpu_us_per_io),
            med(poll, |r| r.device_cpu_us_per_io),
            med(irq, |r| r.device_cpu_us_per_io),
        ));
    }
    for bs in ["4k", "128k"] {
        if let Some(irq) = pick(&m.cells, TOGGLE, "randread", bs, false) {
            let med = |f: fn(&super::Run) -> f64| irq.spread(f).median;
            out.push_str(&format!(
                ";\n  {bs} with the interrupt: the completion threads' timer slept in {:.0}% of its waits and spun \
                 {:.1} us a wait, and ended {:.1} us past the due time on average, {:.0} us at worst",
                med(|r| r.timer.slept_share) * 100.0,
                med(|r| r.timer.spin_us_per_wait),
                med(|r| r.timer.late_us_mean),
                med(|r| r.timer.late_us_max),
            ));
        }
    }
    out + "\n"
}

pub(super) fn tables(opts: &Options, m: &Measured) -> String {
    let mut out = format!(
        "\n== poll: sync I/O at QD1 (pvsync2), {} (median (min-max) over {} round(s)) ==\n",
        m.place.describe(),
        opts.rounds
    );
    out.push_str(&calibration_lines(m));
    for design in DESIGNS {
        out.push_str(&format!("{:<11}: {} (4k)\n", design.name, m.place.device(&m.cal, design, "4k", m.place.jobs)));
    }
    out.push('\n');
    out.push_str(&headline(m));
    out.push_str(&iops_table(m));
    out.push_str(&saving_lines(m));
    out.push_str(&latency_cpu_table(m));
    out.push_str(
        "\nsource (virtio_blk notification toggling, 4 jobs on 4 vCPUs, the disk emulated by the host): 4k +12% to +18%, \
         16k +5% to +18%, 64k and 128k 0%; its CPU use was not reported\n",
    );
    if m.place.shared {
        out.push_str(
            "(the device's completion threads share the jobs' cores: with hipri=0 each sleeps to within its \
             timer's learned lead of a due time and spins the rest, and spins at most 5 us after going idle; \
             its CPU per I/O is the device column)\n",
        );
    }
    out + &mixed_table(&m.mixed)
}

/// The calibration: what it targets, the device it set, what it measured.
fn calibration_lines(m: &Measured) -> String {
    let cal = &m.cal;
    format!(
        "calibration: target {:.2} us per I/O per job at 4k randread with interrupts = {SOURCE_JOBS} jobs / \
         149,426 IOPS (the source's numjobs={SOURCE_JOBS} at QD1);\n  bandwidth {} MiB/s = 17,655 IOPS x 128 KiB \
         (the source's 128k randread, bandwidth-bound), a device-wide timeline of {} MiB/s (its share per job x {} \
         jobs); service time {:.1} us + transfer (4k {:.1} us, 16k {:.1}, \
         64k {:.1}, 128k {:.1});\n  measured here at 4k randread hipri=0 (toggle): {} us per I/O per job, median latency {} us; \
         target met (per-I/O time within {:.0}%): {}\n",
        cal.target_ns_per_io / 1e3,
        cal.mbps,
        cal.timeline_mbps(),
        cal.jobs,
        cal.service_nsec as f64 / 1e3,
        cal.transfer_ns(4096) as f64 / 1e3,
        cal.transfer_ns(16384) as f64 / 1e3,
        cal.transfer_ns(65536) as f64 / 1e3,
        cal.transfer_ns(131072) as f64 / 1e3,
        pick(&m.cells, TOGGLE, "randread", "4k", false)
            .map_or("-".into(), |c| c.spread(|r| r.ns_per_io_per_job / 1e3).show(1)),
        pick(&m.cells, TOGGLE, "randread", "4k", false).map_or("-".into(), |c| c.spread(|r| r.lat_p50_us).show(1)),
        TARGET_TOLERANCE * 100.0,
        measured_4k(m).map_or("-", |(ns_per_io, _)| if cal.meets_target(ns_per_io) { "yes" } else { "no" }),
    )
}

/// IOPS without and with hipri beside the source's, and the gain.
fn iops_table(m: &Measured) -> String {
    let mut out = String::new();
    out.push_str(
        "\ndesign      | rw        | bs   | source IOPS 0 / 1 (gain as printed) | kIOPS hipri=0      | kIOPS hipri=1      \
         | gain %\n",
    );
    for (a, b) in rows(m) {
        let src = source(a.rw, a.bs)
            .map(|s| {
                format!(
                    "{:>7} / {:<7} ({})",
                    thousands(s.iops_hipri0),
                    thousands(s.iops_hipri1),
                    printed(s.gain_printed_pct)
                )
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "{:<11} | {:<9} | {:<4} | {:<35} | {:<18} | {:<18} | {}\n",
            a.design.name,
            a.rw,
            a.bs,
            src,
            a.spread(|r| r.iops / 1e3).show(1),
            b.spread(|r| r.iops / 1e3).show(1),
            gain(&m.cells, a.design, a.rw, a.bs).map_or(String::new(), |g| g.show(1)),
        ));
    }
    out
}

/// The time polling saves per I/O, ours at the median latency against
/// the source's per-I/O time (its 4 jobs / IOPS): the saving, unlike the
/// IOPS gain, does not carry the interrupt path's tail.
fn saving_lines(m: &Measured) -> String {
    let mut out =
        String::from("\nper-I/O time polling saves, toggle: ours at the median latency | the source's (jobs / IOPS)\n");
    for &rw in m.rws {
        for &bs in m.bss {
            let (Some(irq), Some(poll)) = (pick(&m.cells, TOGGLE, rw, bs, false), pick(&m.cells, TOGGLE, rw, bs, true))
            else {
                continue;
            };
            let ours = irq.spread(|r| r.lat_p50_us).median - poll.spread(|r| r.lat_p50_us).median;
            let theirs = source(rw, bs).map_or("-".into(), |s| {
                let jobs = f64::from(SOURCE_JOBS);
                format!("{:.1} us", (jobs / s.iops_hipri0 - jobs / s.iops_hipri1) * 1e6)
            });
            out.push_str(&format!("  {rw:<9} {bs:<4}: {ours:.1} us | {theirs}\n"));
        }
    }
    out
}

/// Mean and p99 latency, and CPU per I/O of the jobs and of the device.
fn latency_cpu_table(m: &Measured) -> String {
    let mut out = String::new();
    out.push_str(
        "\nlatency and CPU per I/O, hipri=0 / hipri=1: CPU is per-thread CPU time over the window in which every \
         job ran, per I/O;\njob threads = the submitting (and, with hipri, polling) jobs; device = the null \
         device's completion threads (the emulated disk)\n\
         design      | rw        | bs   | mean lat us 0      | mean lat us 1      | p99 us 0      | p99 us 1      \
         | job CPU us/IO 0    | job CPU us/IO 1    | device CPU us/IO 0 | device CPU us/IO 1\n",
    );
    for (a, b) in rows(m) {
        out.push_str(&format!(
            "{:<11} | {:<9} | {:<4} | {:<18} | {:<18} | {:<13} | {:<13} | {:<18} | {:<18} | {:<18} | {}\n",
            a.design.name,
            a.rw,
            a.bs,
            a.spread(|r| r.lat_mean_us).show(1),
            b.spread(|r| r.lat_mean_us).show(1),
            a.spread(|r| r.lat_p99_us).show(0),
            b.spread(|r| r.lat_p99_us).show(0),
            a.spread(|r| r.job_cpu_us_per_io).show(1),
            b.spread(|r| r.job_cpu_us_per_io).show(1),
            a.spread(|r| r.device_cpu_us_per_io).show(1),
            b.spread(|r| r.device_cpu_us_per_io).show(1),
        ));
    }
    out
}

fn mixed_table(cells: &[Cell]) -> String {
    let mut out = String::from(
        "\n== mixed: one hipri job and one plain job, 4k randread at iodepth 1, one hardware queue ==\n\n\
         design      | job   | kIOPS              | mean lat us        | p99 us          | job CPU us/IO\n",
    );
    for c in cells {
        out.push_str(&format!(
            "{:<11} | {:<5} | {:<18} | {:<18} | {:<15} | {}\n",
            c.design.name,
            if c.hipri { "hipri" } else { "plain" },
            c.spread(|r| r.iops / 1e3).show(1),
            c.spread(|r| r.lat_mean_us).show(1),
            c.spread(|r| r.lat_p99_us).show(0),
            c.spread(|r| r.job_cpu_us_per_io).show(1),
        ));
    }
    out.push_str(
        "(toggle: both share the queue, and the plain job's completions are reaped by the poller while \
         notifications are off; poll_queues: the hipri job has a poll queue of its own)\n",
    );
    out
}

/// The JSON document: the source's figures, the calibration, every cell
/// with the median, spread and runs of each figure and its command.
pub(super) fn document(opts: &Options, m: &Measured) -> Value {
    let cell_json = |c: &Cell| {
        json!({
            "rw": c.rw, "bs": c.bs, "design": c.design.name, "hipri": c.hipri,
            "iops": c.spread(|r| r.iops).json(),
            "iops_spread_pct": c.spread(|r| r.iops).spread_pct(),
            "ns_per_io_per_job": c.spread(|r| r.ns_per_io_per_job).json(),
            "lat_mean_us": c.spread(|r| r.lat_mean_us).json(),
            "lat_p50_us": c.spread(|r| r.lat_p50_us).json(),
            "lat_p99_us": c.spread(|r| r.lat_p99_us).json(),
            "job_threads_cpu_us_per_io": c.spread(|r| r.job_cpu_us_per_io).json(),
            "device_threads_cpu_us_per_io": c.spread(|r| r.device_cpu_us_per_io).json(),
            "timer": {
                "timed_waits": c.spread(|r| r.timer.timed as f64).json(),
                "late_us_mean": c.spread(|r| r.timer.late_us_mean).json(),
                "late_us_max": c.spread(|r| r.timer.late_us_max).json(),
                "slept_share": c.spread(|r| r.timer.slept_share).json(),
                "spin_us_per_wait": c.spread(|r| r.timer.spin_us_per_wait).json(),
            },
            "command": c.command,
        })
    };
    let gains: Vec<Value> = rows(m)
        .into_iter()
        .filter_map(|(a, _)| {
            let g = gain(&m.cells, a.design, a.rw, a.bs)?;
            let src = source(a.rw, a.bs);
            Some(json!({
                "rw": a.rw, "bs": a.bs, "design": a.design.name, "gain_pct": g.json(),
                "source_gain_printed": src.map(|s| printed(s.gain_printed_pct)),
                "source_gain_pct": src.map(|s| s.gain_printed_pct),
            }))
        })
        .collect();
    json!({
        "experiment": "poll",
        "source": "virtio_blk: implement blk_mq_ops->poll() (Stefan Hajnoczi, 2021): fio pvsync2, numjobs=4, QD1, \
                   4 vCPUs, virtio-blk on an Optane SSD; 4k randread 149,426 vs 170,763 IOPS (+14%), randwrite \
                   +18%, 64k and 128k 0%",
        "source_table": SOURCE.iter().map(|s| json!({
            "rw": s.rw, "bs": s.bs, "iops_hipri0": s.iops_hipri0, "iops_hipri1": s.iops_hipri1,
            "gain_printed": printed(s.gain_printed_pct),
        })).collect::<Vec<_>>(),
        "quick": opts.quick,
        "calibration": m.cal.json(measured_4k(m)),
        "designs": DESIGNS.iter().map(|d| json!({
            "name": d.name,
            "keys": d.keys,
            "device_4k": m.place.device(&m.cal, *d, "4k", m.place.jobs),
        })).collect::<Vec<_>>(),
        "headline_design": TOGGLE.name,
        "headline": headline(m).trim_end(),
        "cpu": "per-thread CPU time (/proc/self/task/TID/schedstat, bench/thread_cpu.rs) over the window in which \
                every job ran, per I/O completed in that window: job_threads_cpu_us_per_io sums the job threads \
                (submitting, and with hipri=1 polling); device_threads_cpu_us_per_io sums the device's own \
                threads (the null completion threads, which emulate the disk: each sleeps to within its timer's learned lead of a \
                due time and spins the rest, see the cells' timer figures). \
                In the mixed runs the job figure is each job's own (getrusage RUSAGE_THREAD).",
        "placement": {
            "jobs": m.place.jobs,
            "cores": m.place.cores,
            "cores_shared": m.place.shared,
            "job_options": m.place.pin_args,
            "irq_cpus": m.place.irq_cpus,
            "description": m.place.describe(),
        },
        "jobs": m.place.jobs,
        "results": rows(m).into_iter().flat_map(|(a, b)| [cell_json(a), cell_json(b)]).collect::<Vec<_>>(),
        "gains": gains,
        "mixed": m.mixed.iter().map(cell_json).collect::<Vec<_>>(),
    })
}

/// One chart per rw: each design's IOPS ratio hipri=1 / hipri=0 over block
/// size (median, min-max over the rounds), with the source's; then CPU per
/// I/O at 4k randread by thread kind. A ratio, not a gain in percent: the
/// chart's axis starts at 0 and a loss must stay on it.
pub(super) fn panels(m: &Measured) -> Vec<Panel> {
    let kib = |bs: &str| bs_bytes(bs) as f64 / 1024.0;
    let mut panels: Vec<Panel> = m
        .rws
        .iter()
        .map(|rw| {
            let mut panel = Panel::numeric(
                format!("poll: {rw}, IOPS hipri=1 / hipri=0"),
                "block size (KiB)",
                "IOPS ratio (1: no gain)",
            );
            for design in DESIGNS {
                let gains: Vec<(f64, Spread)> =
                    m.bss.iter().filter_map(|bs| Some((kib(bs), gain(&m.cells, design, rw, bs)?))).collect();
                let ratio = |pct: f64| 1.0 + pct / 100.0;
                panel = panel.with(
                    Series::measured(label(design), gains.iter().map(|(x, g)| (*x, ratio(g.median))).collect())
                        .with_spread(gains.iter().map(|(_, g)| (ratio(g.min), ratio(g.max))).collect()),
                );
            }
            let src: Vec<(f64, f64)> = m
                .bss
                .iter()
                .filter_map(|bs| source(rw, bs).map(|s| (kib(bs), 1.0 + f64::from(s.gain_printed_pct) / 100.0)))
                .collect();
            panel.with(Series::source("source (as printed)", src))
        })
        .collect();
    panels.push(cpu_panel(m));
    panels
}

fn label(design: Design) -> String {
    if design == TOGGLE {
        "toggle (the patch)".into()
    } else {
        "poll queues".into()
    }
}

/// A bar of the CPU chart: its name, the hipri of its cell, its figure.
type CpuCase = (&'static str, bool, fn(&super::Run) -> f64);

/// CPU per I/O at 4k randread: job threads and device threads, hipri=0
/// and hipri=1, one bar per design.
fn cpu_panel(m: &Measured) -> Panel {
    let cases: [CpuCase; 4] = [
        ("job threads, hipri=0", false, |r| r.job_cpu_us_per_io),
        ("job threads, hipri=1", true, |r| r.job_cpu_us_per_io),
        ("device threads, hipri=0", false, |r| r.device_cpu_us_per_io),
        ("device threads, hipri=1", true, |r| r.device_cpu_us_per_io),
    ];
    let mut panel = Panel::categories(
        "poll: CPU per I/O, 4k randread",
        "CPU us per I/O",
        cases.iter().map(|c| c.0.to_string()).collect(),
    );
    for design in DESIGNS {
        let spreads: Vec<(f64, Spread)> = cases
            .iter()
            .enumerate()
            .filter_map(|(i, &(_, hipri, f))| {
                Some((i as f64, pick(&m.cells, design, "randread", "4k", hipri)?.spread(f)))
            })
            .collect();
        panel = panel.with(
            Series::measured(label(design), spreads.iter().map(|(x, s)| (*x, s.median)).collect())
                .with_spread(spreads.iter().map(|(_, s)| (s.min, s.max)).collect()),
        );
    }
    panel
}
