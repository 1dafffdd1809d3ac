//! The NVMe profile's cut against its channels' jitter: the RFC's stash
//! cuts the job threads' context switches per I/O against 5.6's batch
//! wakeup (`batch2020`) only when the device's completions drift apart.
//! With every channel alike, 32 channels finish together and a burst of 32
//! frees serves every sleeper 5.6 woke, so its wakeups waste little and
//! the stash has little to cut; with each request's time within
//! `jitter_pct` of its channel's, frees trickle in and 5.6 wakes sleepers
//! that find no tag. Both policies side by side at each jitter (0, 10, 25,
//! 50%), the headline's jobs, every cell over the rounds; the cut is each
//! round's ratio, so a drift of the machine between rounds falls on both
//! terms alike. At the profile's own jitter (25%) the cells are table 1's
//! (the same commands): 72 jobs' 1 MB buffers make each cell several
//! seconds of set-up, so the sweep runs only the other three.

use serde_json::{json, Value};

use super::{Row, NVME, SRC_NVME};
use crate::experiment::{Cell, ExperimentError, Options, Spread};

/// The jitter swept (null's `jitter_pct`: each request's service time
/// drawn within this percentage of its channel's).
pub(super) const JITTER_PCT: &[u32] = &[0, 10, 25, 50];

/// The pair whose cut the sweep measures: the source kernel's wakeup, then
/// the RFC.
const PAIR: [&str; 2] = ["batch2020", "stash"];

/// Why the real device has jitter, with where it is said.
pub(super) const WHY: &str = "A real NVMe SSD's channels do not complete in lockstep: each NAND plane serves one \
    command at a time and random reads land on planes at random, so some wait behind others (KIOXIA, \"Maximizing \
    SSD Performance\", https://kumoscale.kioxia.com/en/performance/ssd-performance), and a read's own execution \
    involves \"operations that may require varying execution times\" (US patent 10,732,849, background); \
    jitter_pct stands for both, per request.";

/// The sweep, measured: per jitter, the pair's rounds.
pub(super) struct Sweep {
    pub(super) row: Row,
    /// Per `JITTER_PCT` entry, per `PAIR` entry, the rounds.
    by_jitter: Vec<[Vec<Cell>; 2]>,
}

/// The nvme profile's device with its channels' jitter at `pct`.
fn device(pct: u32) -> String {
    let keys: Vec<String> = NVME
        .device
        .split(',')
        .map(|kv| if kv.starts_with("jitter_pct=") { format!("jitter_pct={pct}") } else { kv.to_string() })
        .collect();
    assert!(NVME.device.contains("jitter_pct="), "the nvme profile names its jitter");
    keys.join(",")
}

/// The jitter of the nvme profile itself: its table 1 cells at the
/// sweep's jobs are the sweep's at this jitter (the same commands), so
/// they are not run again.
const PROFILE_JITTER_PCT: u32 = 25;

/// The sweep's jobs: the headline's (72; 48 in a quick run, as its table 1).
pub(super) fn jobs(quick: bool) -> usize {
    if quick {
        48
    } else {
        72
    }
}

/// Runs the sweep on `row` (table 1's nvme row at `jobs`), the pair and
/// every jitter but the profile's own alternating within each round;
/// `profile_cells` are that row's batch2020 and stash rounds, the sweep's
/// cells at the profile's own jitter.
pub(super) fn run(opts: &Options, row: Row, profile_cells: [Vec<Cell>; 2]) -> Result<Sweep, ExperimentError> {
    // By name: a reference to a const need not have one address.
    assert!(row.profile.name == NVME.name && row.table == 1, "the sweep runs table 1's nvme row");
    let swept: Vec<u32> = JITTER_PCT.iter().copied().filter(|&p| p != PROFILE_JITTER_PCT).collect();
    let variants = swept.len() * PAIR.len();
    let mut runs = super::super::alternate(variants, opts.rounds, |v, round| {
        let (pct, policy) = (swept[v / PAIR.len()], PAIR[v % PAIR.len()]);
        eprintln!("tag-wakeup: nvme jitter {pct}% jobs={} wake={policy} (round {})", row.jobs, round + 1);
        super::super::run_cell(&row.args_on(&device(pct), policy))
    })?
    .into_iter();
    let mut profile_cells = Some(profile_cells);
    let by_jitter = JITTER_PCT
        .iter()
        .map(|&pct| match (pct == PROFILE_JITTER_PCT).then(|| profile_cells.take()).flatten() {
            Some(cells) => cells,
            None => [runs.next().unwrap_or_default(), runs.next().unwrap_or_default()],
        })
        .collect();
    Ok(Sweep { row, by_jitter })
}

impl Sweep {
    /// The cut at jitter index `j`: batch2020's voluntary switches per I/O
    /// over the stash's, round by round.
    fn cut(&self, j: usize) -> Spread {
        let [batch, stash] = &self.by_jitter[j];
        let ratios: Vec<f64> =
            batch.iter().zip(stash).map(|(b, s)| b.ctx_voluntary_per_io / s.ctx_voluntary_per_io.max(1e-9)).collect();
        Spread::of(&ratios)
    }

    fn spread(&self, j: usize, p: usize, f: fn(&Cell) -> f64) -> Spread {
        Spread::over(&self.by_jitter[j][p], f)
    }

    pub(super) fn json(&self) -> Value {
        let rows: Vec<Value> = JITTER_PCT
            .iter()
            .enumerate()
            .map(|(j, pct)| {
                let policies: serde_json::Map<String, Value> = PAIR
                    .iter()
                    .enumerate()
                    .map(|(p, policy)| {
                        let cells = &self.by_jitter[j][p];
                        (
                            policy.to_string(),
                            json!({
                                "ctx_voluntary_per_io": self.spread(j, p, |c| c.ctx_voluntary_per_io).json(),
                                "tag_waits_per_io": self.spread(j, p, waits_per_io).json(),
                                "iops": self.spread(j, p, |c| c.iops).json(),
                                "commands": cells.iter().map(|c| c.command.clone()).collect::<Vec<_>>(),
                            }),
                        )
                    })
                    .collect();
                let cut = self.cut(j);
                let mut cut_json = cut.json();
                cut_json["spread_pct"] = cut.spread_pct().into();
                json!({
                    "jitter_pct": pct,
                    "device": device(*pct),
                    "table_1_cells": *pct == PROFILE_JITTER_PCT,
                    "policies": policies,
                    "cut": cut_json,
                })
            })
            .collect();
        json!({
            "profile": NVME.name,
            "jobs": self.row.jobs,
            "iodepth_per_job": self.row.iodepth(),
            "runtime": self.row.runtime,
            "cut": "batch2020's voluntary context switches per I/O over the stash's, each round's ratio",
            "why_jitter": WHY,
            "source_cut_72_jobs": source_cut(),
            "rows": rows,
        })
    }

    pub(super) fn table(&self) -> String {
        let mut out = format!(
            "\n== nvme: the cut against the channels' jitter (1 MB randread, {} jobs, iodepth {} per job) ==\n\
             {WHY}\n\
             ours: --device {},wake=P (jitter_pct=J) --rw=randread --bs=1m --numjobs={} --iodepth={} --runtime={} \
             --time_based --gtod_reduce=1; cut: batch2020's voluntary switches per I/O over the stash's, each \
             round's ratio, median (min-max); at {PROFILE_JITTER_PCT}% (the profile's own) these are table 1's cells\n\
             jitter % | batch2020 switches per I/O | stash switches per I/O | cut | tag waits per I/O batch2020 | \
             stash\n",
            self.row.jobs,
            self.row.iodepth(),
            NVME.device,
            self.row.jobs,
            self.row.iodepth(),
            self.row.runtime
        );
        for (j, pct) in JITTER_PCT.iter().enumerate() {
            let per_io = |p| self.spread(j, p, |c| c.ctx_voluntary_per_io).show(3);
            let waits = |p| self.spread(j, p, waits_per_io).show(3);
            let cut = self.cut(j);
            out.push_str(&format!(
                "{pct:<8} | {} | {} | {}x | {} | {}\n",
                per_io(0),
                per_io(1),
                cut.show(2),
                waits(0),
                waits(1)
            ));
        }
        out.push_str(&format!(
            "source (1.5TB NVMe, its jitter unknown), 72 jobs: 24,221 vs 4,054 switches/s at 2,984 vs 2,990 IOPS: a \
             cut of {:.1}x per I/O\n",
            source_cut()
        ));
        out
    }
}

fn waits_per_io(c: &Cell) -> f64 {
    c.stats.tag_waits as f64 / c.stats.bios.read.max(1) as f64
}

/// The source's cut on its NVMe at 72 jobs, per I/O: (switches/s over
/// IOPS) under 5.6.15 over the same under the patch.
pub(super) fn source_cut() -> f64 {
    let last = SRC_NVME.jobs.len() - 1;
    let (cs, iops) = (SRC_NVME.cs[last], SRC_NVME.iops[last]);
    (f64::from(cs.0) / f64::from(iops.0)) / (f64::from(cs.1) / f64::from(iops.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_swept_device_differs_only_in_its_jitter() {
        assert!(device(0).contains(",jitter_pct=0,"), "{}", device(0));
        assert_eq!(device(25), NVME.device, "the profile's own jitter is 25%");
        assert_eq!(device(50).replace("jitter_pct=50", "jitter_pct=25"), NVME.device);
    }

    #[test]
    fn the_source_cut_is_per_io() {
        // 24,221 / 2,984 over 4,054 / 2,990: 6.0x.
        assert!((source_cut() - 5.99).abs() < 0.01, "{}", source_cut());
    }
}
