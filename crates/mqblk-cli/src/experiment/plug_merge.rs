//! `mqblk experiment plug-merge`: the zero merges of "blk-plug: don't flush
//! nested plug lists" (Jeff Moyer, 2015). 4k sequential reads submitted in
//! batches, each batch under an outer plug and each bio under an inner plug
//! (as io_submit and the direct-I/O path do).
//!
//! The cause, as Shaohua Li answered that patch: the kernel always flushed
//! only the outermost plug, but blk-mq's single-queue path
//! (`blk_sq_make_request`) did not plug sync bios at all (`use_plug =
//! !is_flush_fua && !is_sync`), so O_DIRECT reads were issued one by one and
//! nothing merged; "blk-mq: fix plugging in blk_sq_make_request" (patch 1/2
//! of the same series) plugged them. The variants:
//! - `sync-bypass` (`plug_sync=0`): the 2015 kernel, the baseline;
//! - `outermost` (`plug_sync=1`, the default): sync bios plugged, only the
//!   outermost plug flushes: the fix;
//! - `flush_each` (`plug_nesting=flush_each`): every nesting level flushes.
//!   Hypothetical: the patch's premise, which no kernel did.
//!
//! Bandwidth follows the device model, so each table prints the model's
//! closed form beside the measurement: on the serial device (a fixed cost
//! per request plus transfer time) merging pays; on the one with no
//! per-request cost it cannot. The kernel's own merge count for the same
//! fio job on a loop device (loop_anchor.rs) is printed when it can run.
//!
//! Every cell runs `--rounds` times, all cells alternating within a round.

use serde_json::{json, Value};

use super::plot::{Origin, Panel, Series, XAxis};
use super::{alternate, Cell, ExperimentError, Options, Spread};

/// A device the jobs run on, with the parameters of its closed form.
struct Device {
    name: &'static str,
    spec: &'static str,
    model: &'static str,
    /// Fixed cost of every request (ns), serial.
    per_request_ns: f64,
    /// Transfer rate, serial (bytes per second).
    bytes_per_sec: f64,
}

const DEVICES: &[Device] = &[
    Device {
        name: "serial",
        spec: "null:gb=16,irqmode=2,channels=1,completion_nsec=20000,mbps=1000,hw_queue_depth=128",
        model: "one request at a time: 20 us per request + transfer at 1000 MiB/s (a 4 KiB request 23.9 us, \
                16 merged 82.5 us); 128 tags",
        per_request_ns: 20_000.0,
        bytes_per_sec: 1000.0 * 1048576.0,
    },
    Device {
        name: "no-per-request-cost",
        spec: "null:gb=16,irqmode=2,channels=1,completion_nsec=0,mbps=200,hw_queue_depth=128",
        model: "one request at a time, transfer only at 200 MiB/s (no fixed cost per request); 128 tags",
        per_request_ns: 0.0,
        bytes_per_sec: 200.0 * 1048576.0,
    },
];

/// A compared variant: its name, its spec keys, and whether it is
/// hypothetical.
struct Variant {
    name: &'static str,
    keys: &'static str,
    what: &'static str,
    hypothetical: bool,
}

const VARIANTS: &[Variant] = &[
    Variant {
        name: "sync-bypass",
        keys: "plug_sync=0",
        what: "2015 kernel: sync (O_DIRECT) bios bypass the plug (blk_sq_make_request's use_plug)",
        hypothetical: false,
    },
    Variant {
        name: "outermost",
        keys: "plug_sync=1",
        what: "the fix: sync bios plugged, only the outermost plug flushes (Linux since 4.1)",
        hypothetical: false,
    },
    Variant {
        name: "flush_each",
        keys: "plug_sync=1,plug_nesting=flush_each",
        what: "hypothetical: every nesting level flushes (no kernel did this)",
        hypothetical: true,
    },
];

const BS_BYTES: u64 = 4096;
/// null_blk's default max_sectors (255) aligned down to 4 KiB bios: at
/// most 31 bios per request.
const MAX_BIOS_PER_REQUEST: u64 = 255 / 8;

/// One measured cell: which device, batch and variant.
struct Plan {
    device: usize,
    batch: u64,
    variant: usize,
}

fn plans(quick: bool) -> Vec<Plan> {
    let mut plans = Vec::new();
    let serial_batches: &[u64] = if quick { &[16] } else { &[1, 4, 16, 32] };
    for &batch in serial_batches {
        for variant in 0..VARIANTS.len() {
            plans.push(Plan { device: 0, batch, variant });
        }
    }
    // The device where merging cannot pay: the baseline and the fix.
    for variant in 0..2 {
        plans.push(Plan { device: 1, batch: 16, variant });
    }
    plans
}

fn args(p: &Plan, runtime: &str) -> Vec<String> {
    vec![
        "--device".to_string(),
        format!("{},{}", DEVICES[p.device].spec, VARIANTS[p.variant].keys),
        "--name=plugmerge".into(),
        "--rw=read".into(),
        format!("--bs={BS_BYTES}"),
        "--iodepth=128".into(),
        format!("--iodepth_batch={}", p.batch),
        format!("--iodepth_batch_complete={}", p.batch),
        format!("--runtime={runtime}"),
        "--time_based".into(),
    ]
}

/// The device model's bandwidth (bytes/s) for batches of `batch` adjacent
/// 4 KiB bios, merged into requests of at most 31 bios or not at all, with
/// the device always busy (iodepth 128 keeps it so).
fn model_bw(d: &Device, batch: u64, merged: bool) -> f64 {
    let requests = if merged { batch.div_ceil(MAX_BIOS_PER_REQUEST) } else { batch };
    let bytes = (batch * BS_BYTES) as f64;
    let secs = requests as f64 * d.per_request_ns / 1e9 + bytes / d.bytes_per_sec;
    bytes / secs
}

/// Does the variant merge in the model? Only the fix does.
fn merges_in_model(variant: usize) -> bool {
    VARIANTS[variant].name == "outermost"
}

struct Measured {
    plan: Plan,
    rounds: Vec<Cell>,
}

impl Measured {
    fn spread(&self, f: impl Fn(&Cell) -> f64) -> Spread {
        Spread::over(&self.rounds, f)
    }
    fn bw_kib(&self) -> Spread {
        self.spread(|c| c.bw_bytes_per_sec / 1024.0)
    }
    fn model_kib(&self) -> f64 {
        model_bw(&DEVICES[self.plan.device], self.plan.batch, merges_in_model(self.plan.variant)) / 1024.0
    }
}

pub fn run(opts: &Options) -> Result<(Value, Vec<Panel>, String), ExperimentError> {
    let runtime = if opts.quick { "500ms" } else { "2" };
    let plans = plans(opts.quick);
    let rounds = alternate(plans.len(), opts.rounds, |i, round| {
        let p = &plans[i];
        eprintln!(
            "plug-merge: round {}/{}: {} batch={} {}",
            round + 1,
            opts.rounds,
            DEVICES[p.device].name,
            p.batch,
            VARIANTS[p.variant].name
        );
        super::run_cell(&args(p, runtime))
    })?;
    let cells: Vec<Measured> = plans.into_iter().zip(rounds).map(|(plan, rounds)| Measured { plan, rounds }).collect();
    let anchor = if opts.quick {
        Err("skipped in --quick mode".to_string())
    } else {
        eprintln!("plug-merge: the same fio job on a kernel loop device (anchor)");
        super::loop_anchor::run(16, 5)
    };
    let mut table = table(&cells, opts.rounds);
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
        "source": "blk-plug: don't flush nested plug lists (Jeff Moyer, 2015) and Shaohua Li's reply: the kernel \
                   always flushed only the outermost plug; sync bios were not plugged in blk_sq_make_request \
                   (fixed by 'blk-mq: fix plugging in blk_sq_make_request'). Source figures: 283,638 KB/s with \
                   0 merges before, 873,224 KB/s with 2,046K merges after (3.08x)",
        "quick": opts.quick,
        "runtime_s": runtime,
        "devices": DEVICES.iter().map(|d| json!({
            "name": d.name, "spec": d.spec, "model": d.model,
            "per_request_ns": d.per_request_ns, "bytes_per_sec": d.bytes_per_sec,
        })).collect::<Vec<_>>(),
        "variants": VARIANTS.iter().map(|v| json!({
            "name": v.name, "spec_keys": v.keys, "what": v.what, "hypothetical": v.hypothetical,
        })).collect::<Vec<_>>(),
        "job": "rw=read bs=4k iodepth=128 iodepth_batch=B iodepth_batch_complete=B; each batch under a plug, \
                each bio under an inner plug (plug_per_io=1, the default)",
        "model": "closed form: the device always busy; a batch of B bios costs (requests x per_request_ns) + \
                  B x 4 KiB / rate, with requests = ceil(B / 31) when merged, else B",
        "results": cells.iter().map(cell_json).collect::<Vec<_>>(),
        "ratios": ratios(&cells).iter().map(|r| r.json()).collect::<Vec<_>>(),
        "kernel_loop_anchor": anchor.unwrap_or_else(|why| json!({ "not_run": why })),
    });
    Ok((doc, panels(&cells), table))
}

fn cell_json(m: &Measured) -> Value {
    let (d, v) = (&DEVICES[m.plan.device], &VARIANTS[m.plan.variant]);
    json!({
        "device": d.name,
        "iodepth_batch": m.plan.batch,
        "variant": v.name,
        "hypothetical": v.hypothetical,
        "bw_kib_per_sec": m.bw_kib().json(),
        "model_bw_kib_per_sec": m.model_kib(),
        "requests": m.spread(|c| c.stats.requests.read as f64).json(),
        "merges": m.spread(|c| c.stats.merges.read as f64).json(),
        "bios": m.spread(|c| c.stats.bios.read as f64).json(),
        "plug_flushes": m.spread(|c| c.stats.plug_flushes as f64).json(),
        "command": m.rounds[0].command,
    })
}

/// Outermost over sync-bypass bandwidth at one device and batch: per
/// round (the two ran side by side) and in the model.
struct Ratio {
    device: usize,
    batch: u64,
    measured: Spread,
    model: f64,
}

impl Ratio {
    fn json(&self) -> Value {
        json!({
            "device": DEVICES[self.device].name,
            "iodepth_batch": self.batch,
            "outermost_over_sync_bypass": self.measured.json(),
            "model": self.model,
        })
    }
}

fn ratios(cells: &[Measured]) -> Vec<Ratio> {
    let find = |d: usize, b: u64, v: &str| {
        cells.iter().find(|m| m.plan.device == d && m.plan.batch == b && VARIANTS[m.plan.variant].name == v)
    };
    let mut out = Vec::new();
    for m in cells.iter().filter(|m| VARIANTS[m.plan.variant].name == "outermost") {
        let (d, b) = (m.plan.device, m.plan.batch);
        let Some(base) = find(d, b, "sync-bypass") else { continue };
        let per_round: Vec<f64> = m
            .rounds
            .iter()
            .zip(&base.rounds)
            .map(|(new, old)| new.bw_bytes_per_sec / old.bw_bytes_per_sec.max(1.0))
            .collect();
        let model = model_bw(&DEVICES[d], b, true) / model_bw(&DEVICES[d], b, false);
        out.push(Ratio { device: d, batch: b, measured: Spread::of(&per_round), model });
    }
    out
}

fn table(cells: &[Measured], rounds: u32) -> String {
    let mut out = format!(
        "\n== plug-merge: 4k sequential reads, iodepth 128, batches under a plug, each bio under an inner plug; \
         median (min-max) of {rounds} rounds ==\n"
    );
    for (di, d) in DEVICES.iter().enumerate() {
        out.push_str(&format!("\n{} device: {}\n\n", d.name, d.model));
        out.push_str(&format!(
            "{:<5} | {:<11} | {:<27} | {:>13} | {:<25} | {:<25}\n",
            "batch", "variant", "bandwidth KiB/s", "model KiB/s", "merges", "requests issued"
        ));
        for m in cells.iter().filter(|m| m.plan.device == di) {
            out.push_str(&format!(
                "{:<5} | {:<11} | {:<27} | {:>13.0} | {:<25} | {:<25}\n",
                m.plan.batch,
                VARIANTS[m.plan.variant].name,
                m.bw_kib().show(0),
                m.model_kib(),
                m.spread(|c| c.stats.merges.read as f64).show(0),
                m.spread(|c| c.stats.requests.read as f64).show(0),
            ));
        }
    }
    out.push_str("\nvariants:\n");
    for v in VARIANTS {
        out.push_str(&format!("  {:<11} ({}): {}\n", v.name, v.keys, v.what));
    }
    out.push_str(
        "\nbandwidth ratio outermost / sync-bypass, measured per round (median (min-max)) beside the device \
         model's closed form; the ratio follows the device model, not the block layer:\n",
    );
    for r in ratios(cells) {
        out.push_str(&format!(
            "  {:<19} batch {:>2}: measured {}x, model {:.2}x\n",
            DEVICES[r.device].name,
            r.batch,
            r.measured.show(2),
            r.model
        ));
    }
    out.push_str(
        "\nsource (fio libaio direct=1 4k read, iodepth 128, batch 16, virtio-blk on blk-mq's single-queue \
         path): unpatched 283,638 KB/s with 0 merges; patched 873,224 KB/s with 2,046K merges (3.08x)\n",
    );
    out
}

fn panels(cells: &[Measured]) -> Vec<Panel> {
    type Metric = (&'static str, fn(&Measured) -> f64);
    let metrics: [Metric; 2] = [
        ("bandwidth MiB/s", |m| m.bw_kib().median / 1024.0),
        ("merges per bio", |m| {
            let merges = m.spread(|c| c.stats.merges.read as f64).median;
            merges / m.spread(|c| c.stats.bios.read as f64).median.max(1.0)
        }),
    ];
    metrics
        .iter()
        .map(|(label, f)| Panel {
            title: format!("plug-merge (serial device): {label}"),
            x_label: "iodepth_batch".into(),
            y_label: label.to_string(),
            x: XAxis::Numeric { oversubscribed_from: None },
            series: (0..VARIANTS.len())
                .map(|v| Series {
                    spread: Vec::new(),
                    origin: Origin::Measured,
                    label: VARIANTS[v].name.to_string(),
                    points: cells
                        .iter()
                        .filter(|m| m.plan.device == 0 && m.plan.variant == v)
                        .map(|m| (m.plan.batch as f64, f(m)))
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closed_form_of_the_serial_device() {
        let serial = &DEVICES[0];
        let one = model_bw(serial, 16, false);
        assert!((one - 4096.0 / 23.90625e-6).abs() < 1.0, "{one}");
        let ratio = model_bw(serial, 16, true) / one;
        assert!((ratio - 4.636).abs() < 0.01, "{ratio}");
        assert_eq!(model_bw(serial, 1, true), model_bw(serial, 1, false), "a batch of one cannot merge");
        let free = &DEVICES[1];
        assert_eq!(model_bw(free, 16, true), model_bw(free, 16, false), "no per-request cost: merging cannot pay");
    }
}
