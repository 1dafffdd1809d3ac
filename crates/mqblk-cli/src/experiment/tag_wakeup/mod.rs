//! `mqblk experiment tag-wakeup`: Hou Tao's "blk-mq: provide more tags for
//! woken-up process when tag allocation is busy" (RFC, 2020-06-03) and its
//! replies. Many jobs sleep for few tags; each wakeup policy is measured
//! side by side, every cell over `--rounds` rounds with the policies
//! alternating: `batch2020`, the source kernel's (5.6) wakeup, the
//! headline baseline; `stash`, the RFC as posted on top of it; `batch`,
//! today's kernel (6.2+ counters); `handoff`, mqblk's own. Two tables,
//! shaped like the source's:
//!
//! 1. fio randread 1 MB with max_sectors_kb=256 (every read is 4 requests)
//!    on an HDD-, SSD- and NVMe-like null device, by the source's jobs (1 /
//!    24 / 48 / 72; the NVMe 1 / 18 / 36 / 54 / 72):
//!    IOPS and context switches per second (the commit message's tables).
//!    The source ran iodepth=1024 per job; here each job gets one more
//!    read than it could hold with every tag of its queue (tags / 4
//!    requests per read, + 1): past that, a deeper iodepth changes nothing
//!    (the job sleeps for a tag either way), and 1024 1 MB buffers per job
//!    do not fit this machine's memory at 72 jobs (14 GB resident, tried).
//! 2. fio randread 4 KB (the reply to Ming Lei: nr_requests 256, "total
//!    iodepth=256, so when jobs=2, iodepth=256/2=128") with total iodepth
//!    256 / 512 / 1024 by jobs up to 128, on a device with 256-way
//!    parallelism that the CPUs, not the device model, limit: IOPS.
//!
//! Beside them every table prints tag waits per I/O and the mean time a
//! tag wait slept, so a row without contention is visible as such, and
//! table 2 what Little's law says of the source's 5x. Then the nvme's cut
//! (batch2020's switches per I/O over the stash's) against its channels'
//! jitter (jitter.rs). The charts are drawn from the JSON (plot.rs).

mod jitter;
pub mod plot;

use serde_json::{json, Value};

use super::plot::Panel;
use super::{Cell, ExperimentError, Options, Spread};

/// A device the jobs run on (the wake policy is appended per cell).
struct Profile {
    name: &'static str,
    device: &'static str,
    /// Hardware queues, and tags per hardware queue (`hw_queue_depth`).
    queues: usize,
    tags: usize,
    /// Table 1: iodepth per job: one more than a job can hold with every
    /// tag of its queue (tags / 4 requests per 1 MB read), so that even a
    /// single job sleeps for tags, as the source's iodepth=1024 did.
    iodepth_1m: usize,
    /// Table 1's jobs: the source's for this device.
    jobs_1m: &'static [usize],
    what: &'static str,
}

const HDD: Profile = Profile {
    name: "hdd",
    device: "null:gb=4000,irqmode=2,rotational=1,seek_nsec=8000000,completion_nsec=1000000,mbps=200,max_sectors=512,\
             hw_queue_depth=64",
    queues: 1,
    tags: 64,
    iodepth_1m: 17,
    jobs_1m: &[1, 24, 48, 72],
    what: "rotational: one request at a time, 1 ms + seek by distance (8 ms full stroke) + 200 MiB/s; 64 tags (a SATA \
           disk's nr_requests: 2 x queue depth 32)",
};

const SSD_1M: Profile = Profile {
    name: "ssd",
    device: "null:gb=2000,irqmode=2,completion_nsec=100000,channels=8,mbps=128,jitter_pct=25,max_sectors=512,\
             hw_queue_depth=256",
    queues: 1,
    tags: 256,
    iodepth_1m: 65,
    jobs_1m: &[1, 24, 48, 72],
    what: "8 channels x (100 us + 128 MiB/s), each request within 25% of that, 1 GiB/s in all (the source's SSD: \
           1,077 MB/s); 256 tags",
};

/// The source's NVMe had 1,023 tags per queue (its 4k reply: "nr_tags=1023")
/// and 4 read queues; 256 per queue keeps 72 jobs' 1 MB buffers in this
/// machine's memory with one job still able to fill its queue. Its channels'
/// jitter keeps their completions apart: alike, 32 channels finish together
/// and a burst of 32 frees serves every woken sleeper, so 5.6's wakeup
/// wastes little and the stash has little to cut (the jitter sweep,
/// jitter.rs, measures the cut at 0, 10, 25 and 50%).
const NVME: Profile = Profile {
    name: "nvme",
    device: "null:gb=2000,irqmode=2,completion_nsec=20000,channels=32,mbps=100,jitter_pct=25,max_sectors=512,\
             submit_queues=4,hw_queue_depth=256",
    queues: 4,
    tags: 256,
    iodepth_1m: 65,
    jobs_1m: &[1, 18, 36, 54, 72],
    what:
        "4 hardware queues x 256 tags, 32 channels x (20 us + 100 MiB/s), each request within 25% of that, 3.1 GiB/s \
           in all (the source's NVMe: 3,018 MB/s, 4 queues x 1,023 tags)",
};

const SSD_4K: Profile = Profile {
    name: "ssd",
    device: "null:gb=2000,irqmode=2,completion_nsec=100000,channels=256,hw_queue_depth=256",
    queues: 1,
    tags: 256,
    iodepth_1m: 0,
    jobs_1m: &[],
    what: "256 channels x 100 us per request: 2.56M IOPS with every tag busy, far above what 2 CPUs submit, so \
           the submitters and their wakeups are the limit; 256 tags (the source's nr_requests=256)",
};

/// The source kernel's wakeup first (the baseline), the RFC, today's
/// kernel, mqblk's own.
const POLICIES: &[&str] = &["batch2020", "stash", "batch", "handoff"];
/// Column titles of the policies.
const POLICY_TITLES: &[&str] = &["batch2020 (5.6)", "stash (RFC)", "batch (6.2+)", "handoff (mqblk)"];

/// The source's figures for table 1 (5.6.15, 5.6.15-patched), by jobs.
struct Source1 {
    jobs: &'static [usize],
    iops: &'static [(u32, u32)],
    cs: &'static [(u32, u32)],
    device: &'static str,
}

const SRC_HDD: Source1 = Source1 {
    jobs: &[1, 24, 48, 72],
    iops: &[(120, 119), (105, 121), (102, 121), (100, 119)],
    cs: &[(1162, 1188), (1715, 1105), (1967, 1105), (1908, 1106)],
    device: "4TB HDD",
};
const SRC_SSD: Source1 = Source1 {
    jobs: &[1, 24, 48, 72],
    iops: &[(1075, 1076), (1075, 1076), (1076, 1076), (1076, 1077)],
    cs: &[(5123, 5264), (15238, 3859), (19015, 3617), (19050, 3662)],
    device: "1.8TB SSD",
};
const SRC_NVME: Source1 = Source1 {
    jobs: &[1, 18, 36, 54, 72],
    iops: &[(3018, 3018), (3015, 3016), (3001, 3005), (2993, 2997), (2984, 2990)],
    cs: &[(6292, 6469), (19428, 4253), (21290, 3928), (23060, 3957), (24221, 4054)],
    device: "1.5TB NVMe, 4 read queues, 72 CPUs (jobs 1/18/36/54/72)",
};

/// The source's table 2 (4k randread on the SSD), kIOPS 5.6 and patched,
/// for the jobs we run: (total iodepth, jobs, 5.6, patched).
const SRC_4K: &[(usize, usize, u32, u32)] = &[
    (256, 1, 193, 192),
    (256, 8, 197, 197),
    (256, 32, 198, 198),
    (256, 128, 193, 192),
    (512, 1, 193, 194),
    (512, 8, 197, 219),
    (512, 32, 198, 395),
    (512, 128, 199, 591),
    (1024, 1, 195, 192),
    (1024, 8, 198, 197),
    (1024, 32, 197, 243),
    (1024, 128, 197, 986),
];

/// What a table's rows run: table id, profile, bs, total iodepth, jobs.
#[derive(Clone, Copy)]
struct Row {
    table: u8,
    profile: &'static Profile,
    bs: &'static str,
    total_iodepth: usize,
    jobs: usize,
    /// Requests per I/O (a 1 MB read at max_sectors_kb=256 is 4).
    pieces: usize,
    runtime: &'static str,
}

impl Row {
    fn iodepth(&self) -> usize {
        if self.table == 1 {
            return self.profile.iodepth_1m;
        }
        (self.total_iodepth / self.jobs).max(1)
    }

    /// Requests the jobs of the busiest queue keep outstanding exceed that
    /// queue's tags: some job must sleep for a tag.
    fn contention(&self) -> bool {
        let jobs_per_queue = self.jobs.div_ceil(self.profile.queues);
        jobs_per_queue * self.iodepth() * self.pieces > self.profile.tags
    }

    fn args(&self, policy: &str) -> Vec<String> {
        self.args_on(self.profile.device, policy)
    }

    /// The row's arguments on `device` (the profile's, or a variant of it).
    fn args_on(&self, device: &str, policy: &str) -> Vec<String> {
        vec![
            "--device".to_string(),
            format!("{device},wake={policy}"),
            "--group_reporting".into(),
            "--name=tagwake".into(),
            "--rw=randread".into(),
            format!("--bs={}", self.bs),
            format!("--numjobs={}", self.jobs),
            format!("--iodepth={}", self.iodepth()),
            format!("--runtime={}", self.runtime),
            "--time_based".into(),
            "--gtod_reduce=1".into(),
        ]
    }
}

/// The rows of both tables (`--quick`: the 1 MB ssd and nvme rows at 1 and
/// 48 jobs and the 4k rows at total iodepth 1024, 1 and 128 jobs; no hdd,
/// whose 74 IOPS need seconds per cell).
fn rows(quick: bool) -> Vec<Row> {
    let mut rows = Vec::new();
    let profiles: &[&'static Profile] = if quick { &[&SSD_1M, &NVME] } else { &[&HDD, &SSD_1M, &NVME] };
    for &profile in profiles {
        let jobs_1m = if quick { &[1, 48] } else { profile.jobs_1m };
        let runtime = match (quick, profile.name) {
            (true, _) => "250ms",
            (false, "hdd") => "2", // 74 IOPS: 150 reads per cell
            (false, _) => "1",
        };
        for &jobs in jobs_1m {
            let total_iodepth = profile.iodepth_1m * jobs;
            rows.push(Row { table: 1, profile, bs: "1m", total_iodepth, jobs, pieces: 4, runtime });
        }
    }
    let (depths, jobs_4k): (&[usize], &[usize]) =
        if quick { (&[1024], &[1, 128]) } else { (&[256, 512, 1024], &[1, 8, 32, 128]) };
    for &total_iodepth in depths {
        for &jobs in jobs_4k {
            let runtime = if quick { "250ms" } else { "1" };
            rows.push(Row { table: 2, profile: &SSD_4K, bs: "4k", total_iodepth, jobs, pieces: 1, runtime });
        }
    }
    rows
}

/// One row measured: per policy, its rounds.
struct Measured {
    row: Row,
    by_policy: Vec<Vec<Cell>>,
}

/// The figures of a cell, from one round's run: JSON key, title, decimals,
/// printed in the tables (the others are in the JSON only), value.
type Metric = (&'static str, &'static str, usize, bool, fn(&Cell) -> f64);
const METRICS: &[Metric] = &[
    ("iops", "IOPS", 0, true, |c| c.iops),
    ("ctx_voluntary_per_sec", "context switches per second (voluntary, job threads)", 0, true, |c| {
        c.ctx_voluntary_per_sec
    }),
    ("ctx_voluntary_per_io", "voluntary context switches per I/O", 3, true, |c| c.ctx_voluntary_per_io),
    ("ctx_per_sec", "context switches per second (voluntary + involuntary, job threads)", 0, false, |c| c.ctx_per_sec),
    (
        "ctx_system_per_sec",
        "context switches per second (the whole system: /proc/stat ctxt over the run)",
        0,
        true,
        |c| c.ctx_system_per_sec,
    ),
    ("ctx_system_per_io", "context switches per I/O (the whole system)", 3, false, |c| c.ctx_system_per_io),
    ("tag_waits", "tag waits (allocations that slept)", 0, false, |c| c.tag_waits as f64),
    ("tag_waits_per_io", "tag waits per I/O", 3, true, |c| c.stats.tag_waits as f64 / c.stats.bios.read.max(1) as f64),
    ("tag_wait_us_mean", "mean tag-wait time per wait (us)", 0, true, |c| {
        c.stats.tag_wait_ns as f64 / 1e3 / c.stats.tag_waits.max(1) as f64
    }),
];

pub fn run(opts: &Options) -> Result<(Value, Vec<Panel>, String), ExperimentError> {
    let mut measured = Vec::new();
    for row in rows(opts.quick) {
        let by_policy = super::alternate(POLICIES.len(), opts.rounds, |v, round| {
            eprintln!(
                "tag-wakeup: table {} {} bs={} total iodepth {} jobs={} wake={} (round {})",
                row.table,
                row.profile.name,
                row.bs,
                row.total_iodepth,
                row.jobs,
                POLICIES[v],
                round + 1
            );
            let cell = super::run_cell(&row.args(POLICIES[v]))?;
            if (cell.jobs, cell.iodepth) != (row.jobs, row.iodepth()) {
                return Err(ExperimentError::Failed(format!(
                    "{}: ran {} jobs x iodepth {}, meant {} x {}",
                    cell.command,
                    cell.jobs,
                    cell.iodepth,
                    row.jobs,
                    row.iodepth()
                )));
            }
            Ok(cell)
        })?;
        measured.push(Measured { row, by_policy });
    }
    let jobs = jitter::jobs(opts.quick);
    let nvme = measured
        .iter()
        .find(|m| m.row.table == 1 && m.row.profile.name == NVME.name && m.row.jobs == jobs)
        .ok_or_else(|| ExperimentError::Failed(format!("no nvme row at {jobs} jobs for the jitter sweep")))?;
    assert_eq!(POLICIES[..2], ["batch2020", "stash"], "POLICIES begins with the sweep's pair");
    let pair = [nvme.by_policy[0].clone(), nvme.by_policy[1].clone()];
    let sweep = jitter::run(opts, nvme.row, pair)?;
    let mut table = tables(&measured, opts);
    table.push_str(&sweep.table());
    let profiles: Vec<Value> = [&HDD, &SSD_1M, &NVME, &SSD_4K]
        .iter()
        .map(|p| {
            json!({
                "name": p.name, "device": p.device, "hw_queues": p.queues, "tags_per_queue": p.tags, "model": p.what,
            })
        })
        .collect();
    let doc = json!({
        "experiment": "tag-wakeup",
        "source": "Hou Tao, [RFC] blk-mq: provide more tags for woken-up process when tag allocation is busy \
                   (2020-06-03), and his reply with the 4k randread tables",
        "quick": opts.quick,
        "policies": POLICIES,
        "profiles": profiles,
        "results": measured.iter().flat_map(cell_json).collect::<Vec<_>>(),
        "jitter": sweep.json(),
        "notes": "table 1: 1 MB reads split into 4 requests of 256 KiB (max_sectors=512, the source's \
                  max_sectors_kb=256); table 2: 4k reads. Context switches are the job threads' voluntary ones \
                  (getrusage per thread) and, in ctx_system_*, the whole system's (/proc/stat ctxt over the run, \
                  every task, other processes' included); a tag wait is one allocation that slept (it may \
                  sleep more than once).",
    });
    let panels = plot::panels(&doc);
    Ok((doc, panels, table))
}

fn cell_json(m: &Measured) -> Vec<Value> {
    POLICIES
        .iter()
        .zip(&m.by_policy)
        .map(|(policy, rounds)| {
            let metrics: serde_json::Map<String, Value> = METRICS
                .iter()
                .map(|(key, _, _, _, f)| {
                    let s = Spread::over(rounds, f);
                    let mut v = s.json();
                    v["spread_pct"] = s.spread_pct().into();
                    (key.to_string(), v)
                })
                .collect();
            json!({
                "table": m.row.table,
                "profile": m.row.profile.name,
                "bs": m.row.bs,
                "total_iodepth": m.row.total_iodepth,
                "jobs": m.row.jobs,
                "iodepth_per_job": m.row.iodepth(),
                "policy": policy,
                "contention": m.row.contention(),
                "rounds": rounds.len(),
                "metrics": metrics,
                "commands": rounds.iter().map(|c| c.command.clone()).collect::<Vec<_>>(),
                "command": rounds[0].command,
            })
        })
        .collect()
}

/// The cells of one policy in `m`, summarised for one metric.
fn spread(m: &Measured, policy: usize, f: fn(&Cell) -> f64) -> Spread {
    Spread::over(&m.by_policy[policy], f)
}

fn tables(measured: &[Measured], opts: &Options) -> String {
    let mut out = format!(
        "\ntag-wakeup: every cell is the median (min-max) of {} round(s), the policies alternating within a \
         round; context switches are counted twice: the job threads' voluntary ones (getrusage), and the whole \
         system's (/proc/stat ctxt over the run: every task, as vmstat counts them)\n",
        opts.rounds
    );
    for (profile, source) in [(&HDD, &SRC_HDD), (&SSD_1M, &SRC_SSD), (&NVME, &SRC_NVME)] {
        let rows: Vec<&Measured> =
            measured.iter().filter(|m| m.row.table == 1 && m.row.profile.name == profile.name).collect();
        if let Some(first) = rows.first() {
            out.push_str(&table1(profile, source, &rows, first.row));
        }
    }
    let rows: Vec<&Measured> = measured.iter().filter(|m| m.row.table == 2).collect();
    if let Some(first) = rows.first() {
        out.push_str(&table2(&rows, first.row));
    }
    out
}

fn header(title: &str, extra: &[&str]) -> String {
    let mut cols: Vec<&str> = POLICY_TITLES.to_vec();
    cols.extend_from_slice(extra);
    format!("\n{title}\njobs | {}\n", cols.join(" | "))
}

fn policy_cells(m: &Measured, f: fn(&Cell) -> f64, decimals: usize) -> Vec<String> {
    (0..POLICIES.len()).map(|p| spread(m, p, f).show(decimals)).collect()
}

fn table1(profile: &Profile, source: &Source1, rows: &[&Measured], first: Row) -> String {
    let mut out = format!(
        "\n== table 1, {}: fio randread bs=1M, max_sectors_kb=256 (4 requests per read), iodepth {} per job ==\n\
         model: {}\n\
         ours: --device {},wake=P --rw=randread --bs=1m --numjobs=J --iodepth={} --runtime={} --time_based \
         --gtod_reduce=1\n\
         source ({}, fio randread 1MB libaio iodepth=1024): 5.6.15 vs 5.6.15-patched (stash); the 4.18-sq column \
         is left out (mqblk has no single-queue path)\n",
        profile.name,
        first.iodepth(),
        profile.what,
        profile.device,
        first.iodepth(),
        first.runtime,
        source.device
    );
    let src = |jobs: usize, col: &[(u32, u32)]| -> Vec<String> {
        match source.jobs.iter().position(|&j| j == jobs) {
            Some(i) => vec![col[i].0.to_string(), col[i].1.to_string()],
            None => vec!["-".into(), "-".into()],
        }
    };
    for (key, title, decimals, _, f) in METRICS.iter().filter(|m| m.3) {
        let source_col = match *key {
            "iops" => Some(source.iops),
            // The source's figure beside both of ours: the job threads'
            // own switches and the whole system's.
            "ctx_voluntary_per_sec" | "ctx_system_per_sec" => Some(source.cs),
            _ => None,
        };
        let extra: &[&str] = if source_col.is_some() { &["source 5.6.15", "source patched"] } else { &[] };
        out.push_str(&header(title, extra));
        for m in rows {
            let mut cells = policy_cells(m, *f, *decimals);
            if let Some(col) = source_col {
                cells.extend(src(m.row.jobs, col));
            }
            out.push_str(&format!("{:<4} | {}\n", m.row.jobs, cells.join(" | ")));
        }
    }
    if source.jobs != SRC_SSD.jobs {
        let line = |col: &[(u32, u32)], i: usize| {
            col.iter().map(|c| [c.0, c.1][i].to_string()).collect::<Vec<_>>().join(" / ")
        };
        let jobs = source.jobs.iter().map(|j| j.to_string()).collect::<Vec<_>>().join(" / ");
        out.push_str(&format!(
            "source by jobs {}: IOPS 5.6.15 {}, patched {}; context switches/s 5.6.15 {}, patched {}\n",
            jobs,
            line(source.iops, 0),
            line(source.iops, 1),
            line(source.cs, 0),
            line(source.cs, 1)
        ));
    }
    out
}

fn table2(rows: &[&Measured], first: Row) -> String {
    let mut out = format!(
        "\n== table 2, ssd: fio randread bs=4k, total iodepth 256 / 512 / 1024 (iodepth per job = total / jobs) ==\n\
         model: {}\n\
         ours: --device {},wake=P --rw=randread --bs=4k --numjobs=J --iodepth=D/J --runtime={} --time_based \
         --gtod_reduce=1\n\
         source (1.8TB SSD, nr_tags=1024, nr_requests=256, fio randread 4KB): kIOPS 5.6 vs 5.6 patched (stash); \
         128 jobs at total iodepth 1024: 197k vs 986k. Little's law: IOPS <= tags in flight / latency; the source's \
         256 jobs x iodepth 1 (256 in flight, no tag wait) gave 198k, so its device answered in about 1.3 ms at 256 \
         in flight, and 986k with at most 256 tags in flight needs 0.26 ms: the device, not the wakeup, would have \
         had to get 5x faster. Ours: the device allows 2.56M IOPS; total iodepth 256 (never more wanted than tags) is the \
         control without tag waits.\n",
        SSD_4K.what, SSD_4K.device, first.runtime
    );
    let mut depths: Vec<usize> = rows.iter().map(|m| m.row.total_iodepth).collect();
    depths.dedup();
    for depth in depths {
        let of_depth: Vec<&&Measured> = rows.iter().filter(|m| m.row.total_iodepth == depth).collect();
        for (key, title, decimals, _, f) in METRICS.iter().filter(|m| m.3) {
            let with_source = *key == "iops";
            let extra: &[&str] = if with_source { &["source 5.6", "source patched"] } else { &[] };
            out.push_str(&header(&format!("total iodepth {depth}: {title}"), extra));
            for m in &of_depth {
                let mut cells = policy_cells(m, *f, *decimals);
                if with_source {
                    match SRC_4K.iter().find(|s| s.0 == depth && s.1 == m.row.jobs) {
                        Some(s) => cells.extend([format!("{}k", s.2), format!("{}k", s.3)]),
                        None => cells.extend(["-".to_string(), "-".to_string()]),
                    }
                }
                out.push_str(&format!("{:<4} | {}\n", m.row.jobs, cells.join(" | ")));
            }
        }
    }
    out.push_str(&control_2(rows));
    out
}

/// What limits table 2 at the most jobs, measured: the same jobs with no
/// more I/O wanted than tags (total iodepth 256: no tag wait) against the
/// deepest total, per policy, and one job's IOPS. When the jobs alone
/// (threads over 2 CPUs) bring IOPS down as far without a tag wait, no
/// wakeup policy can win 5x there.
fn control_2(rows: &[&Measured]) -> String {
    let Some(most) = rows.iter().map(|m| m.row.jobs).max() else { return String::new() };
    let Some(deepest) = rows.iter().map(|m| m.row.total_iodepth).max() else { return String::new() };
    let find = |depth: usize, jobs: usize| rows.iter().find(|m| m.row.total_iodepth == depth && m.row.jobs == jobs);
    let (Some(control), Some(deep)) = (find(256, most), find(deepest, most)) else { return String::new() };
    let one = find(deepest, 1);
    let cells: Vec<String> = (0..POLICIES.len())
        .map(|p| {
            let iops = |m: &Measured| spread(m, p, |c| c.iops).median;
            let waits = spread(control, p, |c| c.stats.tag_waits as f64 / c.stats.bios.read.max(1) as f64).median;
            format!(
                "{}: {:.0} with no more wanted than tags ({waits:.3} tag waits per I/O), {:.0} at total {deepest}{}",
                POLICY_TITLES[p],
                iops(control),
                iops(deep),
                one.map_or(String::new(), |o| format!(", one job {:.0}", iops(o)))
            )
        })
        .collect();
    format!(
        "
control, {most} jobs (IOPS): {}
",
        cells.join("; ")
    )
}
