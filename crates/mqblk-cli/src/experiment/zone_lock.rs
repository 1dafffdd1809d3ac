//! `mqblk experiment zone-lock` (seed 004): a zoned null device without
//! memory backing and without open/active limits; 4k random reads at
//! iodepth 8 per job over the whole device, and 4k random writes (sync,
//! one at a time, fio's zonemode=zbd) with each job in its own zones;
//! one device lock for everything (`zone_lock=global`, the old null_blk)
//! against a lock per zone (`per-zone`), over 1 to 16 jobs. KIOPS table
//! like the source's.

use serde_json::{json, Value};

use super::svg::{Panel, Series};
use super::{ExperimentError, Options};

/// 16 GiB in 256 zones of 64 MiB; completions inline (irqmode=0) so that
/// the zone locks, not a completion thread, decide the rate.
fn device(lock: &str) -> String {
    format!("null:gb=16,zoned=1,zone_size=64,irqmode=0,submit_queues=2,hw_queue_depth=256,zone_lock={lock}")
}

const LOCKS: [&str; 2] = ["global", "per-zone"];

struct Cell {
    workload: &'static str,
    lock: &'static str,
    jobs: usize,
    kiops: f64,
    command: String,
}

fn job_args(workload: &str, jobs: usize, runtime: &str) -> Vec<String> {
    let mut a: Vec<String> = ["--name=zl", "--bs=4k", "--time_based", "--group_reporting"].map(String::from).to_vec();
    a.push(format!("--numjobs={jobs}"));
    a.push(format!("--runtime={runtime}"));
    if workload == "randread" {
        a.extend(["--rw=randread", "--ioengine=libaio", "--iodepth=8"].map(String::from));
    } else {
        // Each job writes its own 1 GiB (16 zones) at the write pointers.
        a.extend(
            ["--rw=randwrite", "--ioengine=psync", "--zonemode=zbd", "--offset_increment=1g", "--size=1g"]
                .map(String::from),
        );
    }
    a
}

/// One bench run per workload, job count and lock.
fn measure(job_counts: &[usize], runtime: &str) -> Result<Vec<Cell>, ExperimentError> {
    let mut cells = Vec::new();
    for workload in ["randread", "randwrite"] {
        for &jobs in job_counts {
            for lock in LOCKS {
                let mut args = vec!["--device".to_string(), device(lock)];
                args.extend(job_args(workload, jobs, runtime));
                eprintln!("zone-lock: {workload} jobs={jobs} zone_lock={lock}");
                let (out, command) = super::run_args(&args)?;
                let e = out.entries.first().ok_or_else(|| ExperimentError::Failed("no job ran".into()))?;
                if e.run.error != 0 {
                    return Err(ExperimentError::Failed(format!("{command}: I/O error {}", e.run.error)));
                }
                let d = if workload == "randread" { &e.run.read } else { &e.run.write };
                cells.push(Cell { workload, lock, jobs, kiops: e.iops(d) / 1e3, command });
            }
        }
    }
    Ok(cells)
}

pub fn run(opts: &Options) -> Result<(Value, Vec<Panel>, String), ExperimentError> {
    let (job_counts, runtime): (&[usize], &str) =
        if opts.quick { (&[1, 2], "500ms") } else { (&[1, 2, 4, 8, 16], "3") };
    let cells = measure(job_counts, runtime)?;
    let table = table(&cells, job_counts);
    let doc = json!({
        "experiment": "zone-lock",
        "source": "seed 004: null_blk: improve zone locking (2020): 96 jobs, read (libaio qd8) 1,361 vs 3,340 KIOPS, \
                   write (psync) 465 vs 468 KIOPS",
        "quick": opts.quick,
        "devices": LOCKS.iter().map(|l| device(l)).collect::<Vec<_>>(),
        "results": cells.iter().map(|c| json!({
            "workload": c.workload, "zone_lock": c.lock, "jobs": c.jobs, "kiops": c.kiops, "command": c.command,
        })).collect::<Vec<_>>(),
    });
    let panels = ["randread", "randwrite"]
        .iter()
        .map(|w| Panel {
            title: format!("zone-lock: 4k {w}"),
            x_label: "jobs".into(),
            y_label: "KIOPS".into(),
            series: LOCKS
                .iter()
                .map(|l| Series {
                    label: (*l).to_string(),
                    points: job_counts
                        .iter()
                        .filter_map(|&j| pick(&cells, w, l, j).map(|c| (j as f64, c.kiops)))
                        .collect(),
                })
                .collect(),
        })
        .collect();
    Ok((doc, panels, table))
}

/// The KIOPS table: per job count, each workload under each lock and
/// their ratio, then the source's figures.
fn table(cells: &[Cell], job_counts: &[usize]) -> String {
    let mut table = format!(
        "\n== zone-lock ({}; reads: libaio iodepth 8; writes: psync, zonemode=zbd, 1 GiB each) ==\n\n\
         jobs | read KIOPS global | read per-zone | ratio | write KIOPS global | write per-zone | ratio\n",
        device("…")
    );
    for &jobs in job_counts {
        let (Some(rg), Some(rp), Some(wg), Some(wp)) = (
            pick(cells, "randread", "global", jobs),
            pick(cells, "randread", "per-zone", jobs),
            pick(cells, "randwrite", "global", jobs),
            pick(cells, "randwrite", "per-zone", jobs),
        ) else {
            continue;
        };
        table.push_str(&format!(
            "{jobs:>4} | {:>17.0} | {:>13.0} | {:>4.2}x | {:>18.0} | {:>14.0} | {:>4.2}x\n",
            rg.kiops,
            rp.kiops,
            rp.kiops / rg.kiops.max(1e-9),
            wg.kiops,
            wp.kiops,
            wp.kiops / wg.kiops.max(1e-9)
        ));
    }
    table.push_str("\nsource (96 jobs): read 1,361 -> 3,340 KIOPS (2.45x); write 465 -> 468 KIOPS (unchanged)\n");
    table
}

/// The run of `workload` at `lock` with `jobs` jobs.
fn pick<'a>(cells: &'a [Cell], w: &str, l: &str, j: usize) -> Option<&'a Cell> {
    cells.iter().find(|c| c.workload == w && c.lock == l && c.jobs == j)
}
