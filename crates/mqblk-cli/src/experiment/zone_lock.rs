//! `mqblk experiment zone-lock`: "null_blk: improve zone locking" (Damien
//! Le Moal, 2020). A zoned null device without memory backing and without
//! open/active limits, two hardware queues (one per CPU of this machine)
//! under both schedulers; one device lock for every command
//! (`zone_lock=global`, the old null_blk) against a lock per zone
//! (`per-zone`). Without memory backing both are spin locks, as the
//! kernel's (null_blk took `spin_lock_irq` on its zone lock; the patch made
//! it one spin lock per zone).
//!
//! The rows, each creating the source's cause for that row:
//! - `read`: 4k random reads, libaio at iodepth 8 per job, over the whole
//!   device, completions inline (irqmode=0) so that the device lock, not a
//!   completion thread, decides the rate: the source's contended lock.
//! - `write`: 4k random writes as fio's zonemode=zbd makes them (at the
//!   write pointer of a zone of the job's own), psync, each write
//!   completing 206 us after submission (irqmode=2,
//!   completion_nsec=206000): the source's time per write per job (96 jobs
//!   / 465 KIOPS). The source's writes spent nearly all of it outside
//!   null_blk's lock, which could hold each for at most 0.73 us (it served
//!   1,361K reads/s): the system call, the wait for the completion, and
//!   fio's zonemode=zbd bookkeeping, which in fio of 2020 took a
//!   device-wide process-shared mutex on every write (`zbd_info->mutex` in
//!   zbd_open_zone and zbd_queue_io) and held the zone's mutex across the
//!   pwrite. Here too the zone lock is then a sliver of each write.
//! - `write-inline`: the same writes completed inline (irqmode=0): a
//!   function call spent largely under the zone lock, so it gains like a
//!   read. mqblk's own row, which the source did not measure; with `write`
//!   it isolates why writes gained here before and did not there (only the
//!   time outside the lock differs; us/IO/job and the lock found held per
//!   1000 I/Os show it).
//!
//! mq-deadline runs `read` and `write`. The kernel's mq-deadline has one
//! lock per device; mqblk's has one per hardware queue, so with two queues
//! its own lock is a smaller bottleneck than the kernel's. A third row,
//! `read` under mq-deadline on one hardware queue (full runs only), puts
//! both jobs behind one deadline lock, as the kernel's are: the row that
//! isolates that difference.
//!
//! A user-space spin lock's holder can be preempted, which the kernel's
//! (preemption and interrupts off) cannot: rows with more jobs than CPUs
//! (`std::thread::available_parallelism`) measure that, and are labelled
//! oversubscribed (and marked in the plot). Every cell runs `--rounds`
//! times, the two locks alternating within a round; tables print median
//! (min-max).

use serde_json::{json, Value};

use super::plot::{Panel, Series};
use super::{alternate, ExperimentError, Options, Spread};

const LOCKS: [&str; 2] = ["global", "per-zone"];
const SCHEDS: [&str; 2] = ["none", "mq-deadline"];
/// Hardware queues, for both schedulers: one per CPU of this machine.
const QUEUES: usize = 2;

/// A row of the tables: a scheduler on a hardware-queue count, a workload.
#[derive(Clone, Copy, PartialEq)]
struct RowKey {
    sched: &'static str,
    queues: usize,
    workload: usize,
}

impl RowKey {
    /// The scheduler as the tables name it: the queue count where it is
    /// not the experiment's.
    fn sched_label(&self) -> String {
        match self.queues {
            QUEUES => self.sched.to_string(),
            1 => format!("{}, 1 hw queue", self.sched),
            n => format!("{}, {n} hw queues", self.sched),
        }
    }

    fn w(&self) -> &'static Workload {
        &WORKLOADS[self.workload]
    }
}

/// One row of the experiment: a job on a device configuration.
struct Workload {
    name: &'static str,
    what: &'static str,
    /// null's irqmode: 0 completes inline, 2 on the timer thread
    /// `completion_nsec` after submission.
    irqmode: u8,
    completion_nsec: u64,
    random_reads: bool,
    /// Run under mq-deadline too (else under none only).
    with_mq_deadline: bool,
    /// The source's KIOPS at 96 jobs under none, (global, per-zone), as
    /// printed; None where it printed none.
    source_kiops: Option<(f64, f64)>,
}

static WORKLOADS: [Workload; 3] = [
    Workload {
        name: "read",
        what: "4k randread, libaio iodepth 8, inline completions (irqmode=0): the lock decides the rate",
        irqmode: 0,
        completion_nsec: 0,
        random_reads: true,
        with_mq_deadline: true,
        source_kiops: Some((1361.0, 3340.0)),
    },
    Workload {
        name: "write",
        what: "4k randwrite at the write pointers (zonemode=zbd), psync, each write completing 206 us after \
               submission (irqmode=2), the source's time per write per job: the zone lock a sliver of it",
        irqmode: 2,
        completion_nsec: SOURCE_WRITE_NS_PER_JOB,
        random_reads: false,
        with_mq_deadline: true,
        source_kiops: Some((465.0, 468.0)),
    },
    Workload {
        name: "write-inline",
        what: "the same writes completed inline (irqmode=0): a function call largely under the zone lock \
               (mqblk's own row, not in the source)",
        irqmode: 0,
        completion_nsec: 0,
        random_reads: false,
        with_mq_deadline: false,
        source_kiops: None,
    },
];

/// The source's figures, as it printed them.
const SOURCE_PRINTED: &str = "before patch: write (psync x 96 jobs) = 465 KIOPS, read (libaio@qd=8 x 96 jobs) = \
                              1361 KIOPS; after patch: write (psync x 96 jobs) = 468 KIOPS, read (libaio@qd=8 x 96 \
                              jobs) = 3340 KIOPS; \"Performance when using the mq-deadline scheduler is not changed \
                              by this patch as mq-deadline becomes the bottleneck for a multi-queue device.\"";
const SOURCE_JOBS: f64 = 96.0;
/// The source's time per write per job: 96 jobs / 465 KIOPS = 206 us.
const SOURCE_WRITE_NS_PER_JOB: u64 = 206_000;
/// The job count compared with the source: this machine's CPU count
/// (the largest not oversubscribed here), measured in --quick runs too.
const COMPARE_JOBS: usize = 2;

/// 16 GiB in 256 zones of 64 MiB, `queues` hardware queues. No memory
/// backing: the zone locks spin.
fn device(lock: &str, sched: &str, queues: usize, w: &Workload) -> String {
    let completion = match w.completion_nsec {
        0 => String::new(),
        ns => format!(",completion_nsec={ns}"),
    };
    format!(
        "null:gb=16,zoned=1,zone_size=64,irqmode={}{completion},submit_queues={queues},hw_queue_depth=256,\
         zone_lock={lock},sched={sched}",
        w.irqmode
    )
}

fn job_args(w: &Workload, jobs: usize, runtime: &str) -> Vec<String> {
    let mut a: Vec<String> = ["--name=zl", "--bs=4k", "--time_based", "--group_reporting"].map(String::from).to_vec();
    a.push(format!("--numjobs={jobs}"));
    a.push(format!("--runtime={runtime}"));
    if w.random_reads {
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

/// One compared pair: a scheduler, a workload and a job count, measured
/// under each lock over the rounds.
struct Group {
    key: RowKey,
    jobs: usize,
    /// KIOPS per lock (LOCKS order), one value per round.
    kiops: [Spread; 2],
    /// Lock acquisitions that found the lock held, per 1000 I/Os.
    contended_per_kio: [Spread; 2],
    commands: [String; 2],
}

impl Group {
    /// per-zone / global, per round (the two ran side by side).
    fn ratio(&self) -> Spread {
        let per_round: Vec<f64> =
            self.kiops[1].runs.iter().zip(&self.kiops[0].runs).map(|(p, g)| p / g.max(1e-9)).collect();
        Spread::of(&per_round)
    }

    /// Microseconds per I/O per job under the global lock (median).
    fn us_per_io_per_job(&self) -> f64 {
        self.jobs as f64 / self.kiops[0].median.max(1e-9) * 1e3
    }

    fn w(&self) -> &'static Workload {
        self.key.w()
    }
}

/// A ratio in words: "unchanged" within 5%, else the gain or loss in
/// percent.
fn describe(r: f64) -> String {
    if (r - 1.0).abs() < 0.05 {
        format!("{r:.2}x, unchanged (within 5%)")
    } else if r > 1.0 {
        format!("{r:.2}x, per-zone {:.0}% faster", (r - 1.0) * 100.0)
    } else {
        format!("{r:.2}x, per-zone {:.0}% slower", (1.0 - r) * 100.0)
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn job_counts(quick: bool, sched: &str) -> &'static [usize] {
    match (quick, sched) {
        (true, _) => &[COMPARE_JOBS],
        (false, "none") => &[1, 2, 4, 8],
        (false, _) => &[1, 2, 4],
    }
}

/// The rows measured, in table order: every workload under none, those
/// marked under mq-deadline, and (full runs) reads under mq-deadline on one
/// hardware queue.
fn rows(quick: bool) -> Vec<RowKey> {
    let mut rows: Vec<RowKey> = SCHEDS
        .iter()
        .flat_map(|&sched| (0..WORKLOADS.len()).map(move |workload| RowKey { sched, queues: QUEUES, workload }))
        .filter(|k| k.sched == "none" || k.w().with_mq_deadline)
        .collect();
    if !quick {
        rows.push(RowKey { sched: "mq-deadline", queues: 1, workload: 0 });
    }
    rows
}

fn measure_pair(key: RowKey, jobs: usize, opts: &Options, runtime: &str) -> Result<Group, ExperimentError> {
    let (sched, w) = (key.sched_label(), key.w());
    let args = |lock: &str| {
        let mut a = vec!["--device".to_string(), device(lock, key.sched, key.queues, w)];
        a.extend(job_args(w, jobs, runtime));
        a
    };
    let runs = alternate(LOCKS.len(), opts.rounds, |v, round| {
        eprintln!(
            "zone-lock: sched={sched} {} jobs={jobs} zone_lock={} round {}/{}",
            w.name,
            LOCKS[v],
            round + 1,
            opts.rounds
        );
        let (out, command) = super::run_args(&args(LOCKS[v]))?;
        let e = out.entries.first().ok_or_else(|| ExperimentError::Failed("no job ran".into()))?;
        if e.run.error != 0 {
            return Err(ExperimentError::Failed(format!("{command}: I/O error {}", e.run.error)));
        }
        let d = if w.random_reads { &e.run.read } else { &e.run.write };
        Ok((e.iops(d) / 1e3, contended(&out.stats)? * 1000.0 / e.total_ios().max(1) as f64))
    })?;
    let spread = |v: usize, f: fn(&(f64, f64)) -> f64| Spread::over(&runs[v], f);
    let command = |lock: &str| format!("mqblk bench {}", args(lock).join(" "));
    Ok(Group {
        key,
        jobs,
        kiops: [spread(0, |r| r.0), spread(1, |r| r.0)],
        contended_per_kio: [spread(0, |r| r.1), spread(1, |r| r.1)],
        commands: [command(LOCKS[0]), command(LOCKS[1])],
    })
}

/// The zone locks' contended acquisitions, from the device's dump line
/// `null/zone_lock=SCOPE KIND contended=N`.
fn contended(stats: &str) -> Result<f64, ExperimentError> {
    stats
        .lines()
        .find_map(|l| l.strip_prefix("null/zone_lock="))
        .and_then(|l| l.split_once("contended="))
        .and_then(|(_, n)| n.trim().parse::<f64>().ok())
        .ok_or_else(|| ExperimentError::Failed("no null/zone_lock contended= line in the device's dump".into()))
}

pub fn run(opts: &Options) -> Result<(Value, Vec<Panel>, String), ExperimentError> {
    // --quick: 1 s cells at the CPU count only; in a debug build on a
    // loaded machine half-second cells swung by more than the effects.
    let runtime = if opts.quick { "1" } else { "2" };
    let mut groups = Vec::new();
    for key in rows(opts.quick) {
        for &jobs in job_counts(opts.quick, key.sched) {
            groups.push(measure_pair(key, jobs, opts, runtime)?);
        }
    }
    let table = table(&groups, opts);
    let doc = document(&groups, opts, runtime);
    Ok((doc, panels(&groups, opts.quick), table))
}

fn document(groups: &[Group], opts: &Options, runtime: &str) -> Value {
    let cpus = cpus();
    let mut results = Vec::new();
    for g in groups {
        for (i, lock) in LOCKS.iter().enumerate() {
            results.push(json!({
                "sched": g.key.sched,
                "workload": g.w().name,
                "irqmode": g.w().irqmode,
                "completion_nsec": g.w().completion_nsec,
                "zone_lock": lock,
                "lock_kind": "spin",
                "hw_queues": g.key.queues,
                "jobs": g.jobs,
                "oversubscribed": g.jobs > cpus,
                "kiops": g.kiops[i].json(),
                "kiops_spread_pct": g.kiops[i].spread_pct(),
                "lock_contended_per_kio": g.contended_per_kio[i].json(),
                "command": g.commands[i],
            }));
        }
    }
    json!({
        "experiment": "zone-lock",
        "source": "null_blk: improve zone locking (Damien Le Moal, 2020): 2 x 24 cores, none scheduler, fio \
                   zonemode=zbd, 96 jobs",
        "source_figures_as_printed": SOURCE_PRINTED,
        "source_ratios": {
            "read": 3340.0 / 1361.0,
            "write": 468.0 / 465.0,
            "why_writes_did_not_gain": "96 jobs / 465 KIOPS = 206 us per write per job, against at most 0.73 us \
                per acquisition of null_blk's global lock (it served 1,361K reads/s): the writes' time was the \
                system call, the wait for the completion and fio's zonemode=zbd bookkeeping (fio of 2020 took \
                a device-wide process-shared mutex, zbd_info->mutex, on every write and held the zone's mutex \
                across the pwrite), not null_blk's lock",
        },
        "quick": opts.quick,
        "runtime_s": runtime,
        "cpus": cpus,
        "hw_queues": QUEUES,
        "workloads": WORKLOADS.iter().map(|w| json!({
            "name": w.name, "what": w.what, "irqmode": w.irqmode, "completion_nsec": w.completion_nsec,
        })).collect::<Vec<_>>(),
        "notes": "zone locks spin (no memory backing), as the kernel's; jobs above the CPU count are \
                  oversubscribed: a preempted spin lock holder stalls its waiters, which cannot happen in the \
                  kernel; both schedulers run two hardware queues; mqblk's mq-deadline has a lock per hardware \
                  queue, the kernel's one per device: the row under mq-deadline on one hardware queue puts both \
                  jobs behind one deadline lock, as the kernel's",
        "results": results,
        "ratios": groups.iter().map(|g| json!({
            "sched": g.key.sched, "hw_queues": g.key.queues, "workload": g.w().name, "jobs": g.jobs,
            "oversubscribed": g.jobs > cpus,
            "per_zone_over_global": g.ratio().json(),
            "us_per_io_per_job_global": g.us_per_io_per_job(),
        })).collect::<Vec<_>>(),
    })
}

/// IOPS by job count per workload under none (the two locks, with their
/// spread), the per-zone / global ratio by job count for every row, and
/// the ratio at the CPU count beside the source's at 96 jobs.
fn panels(groups: &[Group], quick: bool) -> Vec<Panel> {
    let over = cpus() as f64 + 1.0;
    let of = |k: RowKey| of_row(groups, k);
    let mut panels: Vec<Panel> = (0..WORKLOADS.len())
        .map(|w| {
            let gs = of(RowKey { sched: "none", queues: QUEUES, workload: w });
            LOCKS.iter().enumerate().fold(
                Panel::numeric(format!("zone-lock: {}, sched none", WORKLOADS[w].name), "jobs", "IOPS")
                    .oversubscribed_from(over),
                |p, (i, lock)| {
                    p.with(
                        Series::measured(*lock, gs.iter().map(|g| (g.jobs as f64, g.kiops[i].median * 1e3)).collect())
                            .with_spread(gs.iter().map(|g| (g.kiops[i].min * 1e3, g.kiops[i].max * 1e3)).collect()),
                    )
                },
            )
        })
        .collect();
    let ratios = rows(quick).into_iter().fold(
        Panel::numeric("zone-lock: per-zone / global", "jobs", "ratio").oversubscribed_from(over),
        |p, k| {
            let gs = of(k);
            let rs: Vec<Spread> = gs.iter().map(|g| g.ratio()).collect();
            p.with(
                Series::measured(
                    format!("{}, {}", k.w().name, k.sched_label()),
                    gs.iter().zip(&rs).map(|(g, r)| (g.jobs as f64, r.median)).collect(),
                )
                .with_spread(rs.iter().map(|r| (r.min, r.max)).collect()),
            )
        },
    );
    panels.push(ratios);
    panels.push(beside_source(groups, quick));
    panels
}

/// The groups of one row, by job count.
fn of_row(groups: &[Group], key: RowKey) -> Vec<&Group> {
    groups.iter().filter(|g| g.key == key).collect()
}

/// Bars: per-zone / global at the CPU count, each row, beside the source's
/// ratio at 96 jobs where it printed figures.
fn beside_source(groups: &[Group], quick: bool) -> Panel {
    let at: Vec<(String, Option<&Group>)> = rows(quick)
        .into_iter()
        .map(|k| {
            let g = groups.iter().find(|g| g.key == k && g.jobs == COMPARE_JOBS);
            (format!("{}, {}", k.w().name, k.sched_label()), g)
        })
        .collect();
    let names = at.iter().map(|(n, _)| n.clone()).collect();
    let measured: Vec<(usize, Spread)> =
        at.iter().enumerate().filter_map(|(i, (_, g))| g.map(|g| (i, g.ratio()))).collect();
    let source: Vec<(f64, f64)> = rows(quick)
        .into_iter()
        .enumerate()
        .filter(|(_, k)| k.sched == "none")
        .filter_map(|(i, k)| k.w().source_kiops.map(|(g, p)| (i as f64, p / g)))
        .collect();
    Panel::categories(
        format!("zone-lock: per-zone / global, ours at {COMPARE_JOBS} jobs, the source's at {SOURCE_JOBS} jobs"),
        "ratio",
        names,
    )
    .with(
        Series::measured("mqblk, median (min-max)", measured.iter().map(|(i, r)| (*i as f64, r.median)).collect())
            .with_spread(measured.iter().map(|(_, r)| (r.min, r.max)).collect()),
    )
    .with(Series::source("source: 3340 / 1361 and 468 / 465 KIOPS", source))
}

/// The KIOPS tables: per scheduler and workload, each job count under each
/// lock, their per-round ratio, the time per I/O per job and how often the
/// lock was found held; then the source's figures and the comparison.
fn table(groups: &[Group], opts: &Options) -> String {
    let cpus = cpus();
    let mut t = format!(
        "\n== zone-lock (null zoned, 256 x 64 MiB zones, no memory backing: spin locks; {QUEUES} hardware queues \
         under both schedulers; {cpus} CPUs); KIOPS, median (min-max) of {} rounds ==\n",
        opts.rounds
    );
    for key in rows(opts.quick) {
        let wl = key.w();
        t.push_str(&format!("\nsched {}, {}: {}\n", key.sched_label(), wl.name, wl.what));
        t.push_str(&format!(
            "{:<4} | {:<21} | {:<21} | {:<18} | {:>10} | {:<28}\n",
            "jobs", "global KIOPS", "per-zone KIOPS", "per-zone / global", "us/IO/job", "lock found held /1000 I/Os"
        ));
        for g in of_row(groups, key) {
            t.push_str(&format!(
                "{:>4} | {:<21} | {:<21} | {:<18} | {:>10.2} | {:<28}{}\n",
                g.jobs,
                show_kiops(&g.kiops[0]),
                show_kiops(&g.kiops[1]),
                format!("{}x", g.ratio().show(2)),
                g.us_per_io_per_job(),
                format!("{} | {}", g.contended_per_kio[0].show(1), g.contended_per_kio[1].show(1)),
                if g.jobs > cpus { " oversubscribed" } else { "" },
            ));
        }
    }
    t.push_str(&format!(
        "\nus/IO/job: jobs / IOPS under the global lock. lock found held: global | per-zone.\n\
         oversubscribed: more jobs than the {cpus} CPUs; a preempted spin lock holder stalls its waiters, which \
         the kernel's spin locks (preemption off) cannot suffer: not comparable to the source.\n\
         ratio: per-zone / global, per round (the two locks ran side by side).\n"
    ));
    t.push_str(&summary(groups, cpus, opts.quick));
    t.push_str(
        "\nsource, as printed (2 x 24 cores, none scheduler, fio zonemode=zbd):\n\
         \tbefore patch:\n\t\twrite (psync x 96 jobs) = 465 KIOPS\n\t\tread (libaio@qd=8 x 96 jobs) = 1361 KIOPS\n\
         \tafter patch:\n\t\twrite (psync x 96 jobs) = 468 KIOPS\n\t\tread (libaio@qd=8 x 96 jobs) = 3340 KIOPS\n\
         \t\"Performance when using the mq-deadline scheduler is not changed by this patch as mq-deadline \
         becomes the bottleneck for a multi-queue device.\" (no figures)\n\
         source ratios: read 2.45x, write 1.01x (unchanged)\n\
         why the source's writes did not gain: 96 jobs / 465 KIOPS = 206 us per write per job, and null_blk's \
         global lock served 1,361K reads/s (at most 0.73 us an acquisition): under 0.4% of a write's time, a \
         third of the lock's capacity. The rest was the system call, the wait for the completion and fio's \
         zonemode=zbd bookkeeping (fio of 2020 took a device-wide process-shared mutex on every write and held \
         the zone's mutex across the pwrite). The write row here gives each write the source's 206 us (timer \
         completions), so the zone lock is a sliver of it as there; write-inline, completed inline, spends its \
         time largely under the lock and gains like a read.\n",
    );
    t
}

/// KIOPS with a decimal below 100 (the 206 us writes run at a few).
fn show_kiops(k: &Spread) -> String {
    k.show(if k.median < 100.0 { 1 } else { 0 })
}

/// Each row's ratio at the CPU count, in words.
fn summary(groups: &[Group], cpus: usize, quick: bool) -> String {
    let mut s = format!("\nper-zone / global at {COMPARE_JOBS} jobs ({cpus} CPUs; median of the per-round ratios):\n");
    for key in rows(quick) {
        let Some(g) = of_row(groups, key).into_iter().find(|g| g.jobs == COMPARE_JOBS) else {
            continue;
        };
        s.push_str(&format!(
            "  {:<25} {:<13} {} (range {})\n",
            key.sched_label(),
            key.w().name,
            describe(g.ratio().median),
            g.ratio().show(2)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_in_words() {
        assert_eq!(describe(1.006), "1.01x, unchanged (within 5%)");
        assert_eq!(describe(1.11), "1.11x, per-zone 11% faster");
        assert_eq!(describe(0.8), "0.80x, per-zone 20% slower");
    }

    #[test]
    fn both_schedulers_run_the_same_queue_count() {
        for key in rows(true) {
            assert_eq!(key.queues, QUEUES, "{}", key.sched_label());
            assert!(device("global", key.sched, key.queues, key.w()).contains(&format!("submit_queues={QUEUES},")));
        }
        assert_eq!(rows(true).len(), 5, "none: read, write, write-inline; mq-deadline: read, write");
        let extra: Vec<String> = rows(false).iter().filter(|k| k.queues != QUEUES).map(|k| k.sched_label()).collect();
        assert_eq!(extra, ["mq-deadline, 1 hw queue"], "full runs add the one-deadline-lock row");
    }
}
