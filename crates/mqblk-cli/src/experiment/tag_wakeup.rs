//! `mqblk experiment tag-wakeup` (seed 000): many jobs sleeping for few
//! tags, on an HDD-, SSD- and NVMe-like null device, under each wakeup
//! policy. Reports IOPS, context switches per second and per I/O, like the
//! source's tables.

use serde_json::{json, Value};

use super::svg::{Panel, Series};
use super::{Cell, ExperimentError, Options};

struct Profile {
    name: &'static str,
    device: &'static str,
    bs: &'static str,
    /// Outstanding I/Os over all jobs (each job gets its share).
    total_iodepth: usize,
    what: &'static str,
}

const PROFILES: &[Profile] = &[
    Profile {
        name: "hdd",
        device: "null:gb=4000,irqmode=2,rotational=1,seek_nsec=8000000,completion_nsec=1000000,mbps=200,max_sectors=512,hw_queue_depth=256",
        bs: "1m",
        total_iodepth: 256,
        what: "rotational: 1 ms per request + seek by distance (8 ms full stroke) + 200 MiB/s, max_sectors_kb=256 \
               (a 1 MiB read is 4 requests); 256 tags",
    },
    Profile {
        name: "ssd",
        device: "null:gb=2000,irqmode=2,completion_nsec=100000,channels=8,hw_queue_depth=256",
        bs: "4k",
        total_iodepth: 1024,
        what: "8 channels x 100 us per request; 256 tags",
    },
    Profile {
        name: "nvme",
        device: "null:gb=2000,irqmode=2,completion_nsec=20000,channels=32,submit_queues=4,hw_queue_depth=256",
        bs: "4k",
        total_iodepth: 1024,
        what: "4 hardware queues x 256 tags, 32 channels x 20 us per request",
    },
];

const POLICIES: &[&str] = &["batch", "stash", "handoff"];

fn jobs_list(quick: bool) -> &'static [usize] {
    if quick {
        &[1, 48]
    } else {
        &[1, 24, 48, 72]
    }
}

pub fn run(opts: &Options) -> Result<(Value, Vec<Panel>, String), ExperimentError> {
    let runtime = if opts.quick { "1" } else { "5" };
    let mut cells: Vec<(String, Cell)> = Vec::new();
    for profile in PROFILES {
        for &jobs in jobs_list(opts.quick) {
            let iodepth = (profile.total_iodepth / jobs).max(1);
            for policy in POLICIES {
                let args = vec![
                    "--device".to_string(),
                    format!("{},wake={policy}", profile.device),
                    "--group_reporting".into(),
                    "--name=tagwake".into(),
                    "--rw=randread".into(),
                    format!("--bs={}", profile.bs),
                    format!("--numjobs={jobs}"),
                    format!("--iodepth={iodepth}"),
                    format!("--runtime={runtime}"),
                    "--time_based".into(),
                    "--gtod_reduce=1".into(),
                ];
                eprintln!("tag-wakeup: {} jobs={jobs} wake={policy}", profile.name);
                let cell = super::run_cell(&args)?;
                cells.push((profile.name.to_string(), cell));
            }
        }
    }
    let table = tables(&cells, opts.quick);
    let results: Vec<Value> = cells
        .iter()
        .map(|(profile, c)| {
            json!({
                "profile": profile,
                "jobs": c.jobs,
                "policy": c.policy,
                "iodepth_per_job": c.iodepth,
                "iops": c.iops,
                "ctx_voluntary_per_sec": c.ctx_voluntary_per_sec,
                "ctx_per_sec": c.ctx_per_sec,
                "ctx_voluntary_per_io": c.ctx_voluntary_per_io,
                "tag_waits": c.tag_waits,
                "command": c.command,
            })
        })
        .collect();
    let doc = json!({
        "experiment": "tag-wakeup",
        "source": "seed 000: blk-mq: more tags for a woken-up process when tag allocation is busy (2020 RFC)",
        "quick": opts.quick,
        "runtime_s": runtime,
        "profiles": PROFILES.iter().map(|p| json!({
            "name": p.name, "device": p.device, "bs": p.bs, "total_iodepth": p.total_iodepth, "model": p.what,
        })).collect::<Vec<_>>(),
        "results": results,
        "notes": "hdd: 1 MiB reads split into 4 requests of 256 KiB (max_sectors=512, the source's max_sectors_kb=256); \
                  when another job's request lands between the pieces the disk seeks",
    });
    Ok((doc, panels(&cells), table))
}

fn pick<'a>(cells: &'a [(String, Cell)], profile: &str, jobs: usize, policy: &str) -> Option<&'a Cell> {
    cells.iter().find(|(p, c)| p == profile && c.jobs == jobs && c.policy == policy).map(|(_, c)| c)
}

fn tables(cells: &[(String, Cell)], quick: bool) -> String {
    let mut out = String::new();
    type Metric = (&'static str, fn(&Cell) -> String);
    let metrics: [Metric; 3] = [
        ("IOPS", |c| format!("{:.0}", c.iops)),
        ("voluntary context switches per second", |c| format!("{:.0}", c.ctx_voluntary_per_sec)),
        ("voluntary context switches per I/O", |c| format!("{:.3}", c.ctx_voluntary_per_io)),
    ];
    for profile in PROFILES {
        out.push_str(&format!(
            "\n== {} ({}, bs={}, total iodepth {}) ==\n",
            profile.name, profile.what, profile.bs, profile.total_iodepth
        ));
        for (title, f) in &metrics {
            out.push_str(&format!("\n{title}\njobs | {}\n", POLICIES.join(" | ")));
            for &jobs in jobs_list(quick) {
                let row: Vec<String> =
                    POLICIES.iter().map(|p| pick(cells, profile.name, jobs, p).map_or("-".into(), f)).collect();
                out.push_str(&format!("{jobs:<4} | {}\n", row.join(" | ")));
            }
        }
    }
    out
}

fn panels(cells: &[(String, Cell)]) -> Vec<Panel> {
    let mut panels = Vec::new();
    type Metric = (&'static str, fn(&Cell) -> f64);
    let metrics: [Metric; 2] = [("IOPS", |c| c.iops), ("vol. ctx switches per I/O", |c| c.ctx_voluntary_per_io)];
    for (label, f) in metrics {
        for profile in PROFILES {
            let series = POLICIES
                .iter()
                .map(|p| Series {
                    label: p.to_string(),
                    points: cells
                        .iter()
                        .filter(|(pr, c)| pr == profile.name && c.policy == *p)
                        .map(|(_, c)| (c.jobs as f64, f(c)))
                        .collect(),
                })
                .collect();
            panels.push(Panel {
                title: format!("{}: {label}", profile.name),
                x_label: "jobs".into(),
                y_label: label.into(),
                series,
            });
        }
    }
    panels
}
