//! `mqblk experiment plug-merge` (seed 001): 4k sequential reads submitted
//! in batches, each batch under an outer plug and each bio under an inner
//! plug (as io_submit and the direct-I/O path do), on a serial device where
//! every request pays a fixed cost. With `plug_nesting=outermost` a batch's
//! bios merge into one request; with `flush_each` (the behaviour the seed's
//! patch removed) every inner plug flushes its single bio and nothing
//! merges. Reports bandwidth, merges and requests like the source, and,
//! when it can (loop_anchor.rs), the kernel's own merge count for the same
//! fio job on a loop device.

use serde_json::{json, Value};

use super::svg::{Panel, Series};
use super::{Cell, ExperimentError, Options};

/// One request at a time: 20 us fixed cost + transfer at 1000 MiB/s, so a
/// 4 KiB request costs 23.9 us and sixteen of them merged 82.5 us.
const DEVICE: &str = "null:gb=16,irqmode=2,channels=1,completion_nsec=20000,mbps=1000,hw_queue_depth=128";
const DEVICE_MODEL: &str = "serial: one request at a time, 20 us per request + transfer at 1000 MiB/s; 128 tags";
const NESTINGS: &[&str] = &["flush_each", "outermost"];
const BS_BYTES: u64 = 4096;
/// null_blk's default max_sectors (255) aligned down to 4 KiB bios: at
/// most 31 bios per request.
const MAX_BIOS_PER_REQUEST: u64 = 255 / 8;

fn batches(quick: bool) -> &'static [u64] {
    if quick {
        &[16]
    } else {
        &[1, 4, 16, 32]
    }
}

/// Of a batch of `batch` adjacent bios, how many can merge at best.
fn mergeable_per_batch(batch: u64) -> u64 {
    batch - batch.div_ceil(MAX_BIOS_PER_REQUEST)
}

pub fn run(opts: &Options) -> Result<(Value, Vec<Panel>, String), ExperimentError> {
    let runtime = if opts.quick { "1" } else { "10" };
    let cells = run_cells(batches(opts.quick), runtime)?;
    let results = results_json(&cells);
    let anchor = if opts.quick {
        Err("skipped in --quick mode".to_string())
    } else {
        eprintln!("plug-merge: the same fio job on a kernel loop device (anchor)");
        super::loop_anchor::run(16, 5)
    };
    let mut table = table(&cells);
    match &anchor {
        Ok(a) => table.push_str(&format!(
            "\nanchor, the kernel itself (fio libaio direct=1 on a loop device over tmpfs, batch 16): \
             {} bios, {} requests, {} merges, {} KiB/s\n",
            a["bios"], a["requests"], a["merges"], a["bw_kib_per_sec"]
        )),
        Err(why) => table.push_str(&format!("\nkernel loop-device anchor not run: {why}\n")),
    }
    let doc = json!({
        "experiment": "plug-merge",
        "source": "seed 001: blk-plug: don't flush nested plug lists (2015): 283,638 KB/s with 0 merges \
                   before, 873,224 KB/s with 2,046K merges after",
        "quick": opts.quick,
        "runtime_s": runtime,
        "device": DEVICE,
        "device_model": DEVICE_MODEL,
        "job": "rw=read bs=4k iodepth=128 iodepth_batch=B iodepth_batch_complete=B; each batch under a plug, \
                each bio under an inner plug (plug_per_io=1)",
        "results": results,
        "kernel_loop_anchor": anchor.unwrap_or_else(|why| json!({ "not_run": why })),
    });
    Ok((doc, panels(&cells), table))
}

/// One bench run per batch size and plug nesting policy, as (batch, cell).
fn run_cells(batches: &[u64], runtime: &str) -> Result<Vec<(u64, Cell)>, ExperimentError> {
    let mut cells: Vec<(u64, Cell)> = Vec::new();
    for &batch in batches {
        for nesting in NESTINGS {
            let args = vec![
                "--device".to_string(),
                DEVICE.to_string(),
                format!("--plug_nesting={nesting}"),
                "--name=plugmerge".into(),
                "--rw=read".into(),
                format!("--bs={BS_BYTES}"),
                "--iodepth=128".into(),
                format!("--iodepth_batch={batch}"),
                format!("--iodepth_batch_complete={batch}"),
                format!("--runtime={runtime}"),
                "--time_based".into(),
            ];
            eprintln!("plug-merge: iodepth_batch={batch} plug_nesting={nesting}");
            let mut cell = super::run_cell(&args)?;
            cell.policy = nesting.to_string();
            cells.push((batch, cell));
        }
    }
    Ok(cells)
}

/// Each run's JSON: its counters and the share of bios that merged.
fn results_json(cells: &[(u64, Cell)]) -> Vec<Value> {
    cells
        .iter()
        .map(|(batch, c)| {
            let s = &c.stats;
            json!({
                "iodepth_batch": batch,
                "plug_nesting": c.policy,
                "bw_kib_per_sec": c.bw_bytes_per_sec / 1024.0,
                "iops": c.iops,
                "bios": s.bios.read,
                "requests": s.requests.read,
                "merges": s.merges.read,
                "front_merges": s.front_merges,
                "merged_share_of_bios": share(s.merges.read, s.bios.read),
                "merged_share_of_mergeable": share(s.merges.read * batch, s.bios.read * mergeable_per_batch(*batch)),
                "plug_flushes": s.plug_flushes,
                "command": c.command,
            })
        })
        .collect()
}

fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

fn table(cells: &[(u64, Cell)]) -> String {
    let mut out = format!(
        "\n== plug-merge ({DEVICE_MODEL}; 4k sequential reads, iodepth 128) ==\n\n\
         batch | plug_nesting | bandwidth KiB/s | requests | merges | bios | merged of mergeable\n"
    );
    for (batch, c) in cells {
        let s = &c.stats;
        let mergeable = share(s.merges.read * batch, s.bios.read * mergeable_per_batch(*batch));
        out.push_str(&format!(
            "{batch:<5} | {:<12} | {:>15.0} | {:>8} | {:>6} | {:>4} | {}\n",
            c.policy,
            c.bw_bytes_per_sec / 1024.0,
            s.requests.read,
            s.merges.read,
            s.bios.read,
            mergeable.map_or("-".to_string(), |m| format!("{:.1}%", m * 100.0)),
        ));
    }
    let pick = |nesting: &str| cells.iter().find(|(b, c)| *b == 16 && c.policy == nesting).map(|(_, c)| c);
    if let (Some(old), Some(new)) = (pick("flush_each"), pick("outermost")) {
        out.push_str(&format!(
            "\nbatch 16: outermost / flush_each bandwidth = {:.2}x (source: 873,224 / 283,638 KB/s = 3.08x)\n",
            new.bw_bytes_per_sec / old.bw_bytes_per_sec.max(1.0)
        ));
    }
    out
}

fn panels(cells: &[(u64, Cell)]) -> Vec<Panel> {
    type Metric = (&'static str, fn(&Cell) -> f64);
    let metrics: [Metric; 2] = [
        ("bandwidth MiB/s", |c| c.bw_bytes_per_sec / (1 << 20) as f64),
        ("merges per bio", |c| c.stats.merges.read as f64 / c.stats.bios.read.max(1) as f64),
    ];
    metrics
        .iter()
        .map(|(label, f)| Panel {
            title: format!("plug-merge: {label}"),
            x_label: "iodepth_batch".into(),
            y_label: label.to_string(),
            series: NESTINGS
                .iter()
                .map(|n| Series {
                    label: n.to_string(),
                    points: cells.iter().filter(|(_, c)| c.policy == *n).map(|(b, c)| (*b as f64, f(c))).collect(),
                })
                .collect(),
        })
        .collect()
}
