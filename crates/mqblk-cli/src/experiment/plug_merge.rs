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
//! The device is the source's disk in miniature: a serial device (one
//! request at a time, a fixed cost per request plus transfer time) whose
//! two constants are solved from the source's own two figures (see
//! `calibration`), so that the closed form gives the source's 283,638 KB/s
//! unmerged and 873,224 KB/s merged. Each table prints that closed form
//! beside the measurement. A second device with no per-request cost shows
//! that merging cannot pay there. The kernel's own merge count for the
//! same fio job on a loop device (loop_anchor.rs) is printed when it can
//! run.
//!
//! Every cell runs `--rounds` times, all cells alternating within a round.

use serde_json::{json, Value};

use super::plot::{Panel, Series};
use super::{alternate, Cell, ExperimentError, Options, Spread};

/// The source's figures, as it printed them (Jeff Moyer's rig, fio
/// `--rw=read --bs=4k --iodepth=128 --iodepth_batch=16
/// --iodepth_batch_complete=16 --runtime=10s --direct=1 --ioengine=libaio`).
/// fio of 2015 printed KB for 1024 bytes (kb_base=1024), our KiB.
pub(crate) const SOURCE_PRINTED: &str = "Unpatched kernel: Read B/W: 283,638 KB/s, Read Merges: 0; \
                                         Patched kernel: Read B/W: 873,224 KB/s, Read Merges: 2,046K";
const SOURCE_BW_UNPATCHED_KIB: f64 = 283_638.0;
const SOURCE_BW_PATCHED_KIB: f64 = 873_224.0;
const SOURCE_MERGES_PATCHED: f64 = 2_046_000.0;
const SOURCE_RUNTIME_S: f64 = 10.0;

/// The calibrated device's two constants, solved from the source's figures.
///
/// Unpatched, nothing merged: each 4 KiB bio was one request, so one
/// request took 4096 B / (283,638 x 1024 B/s) = 14.10 us (fixed cost plus
/// the transfer of 4 KiB). Patched: 873,224 KiB/s over the 10 s run is
/// 2,183,060 bios of 4 KiB; 2,046K of them merged, leaving 137,060
/// requests of 15.93 bios each, one every 10 s / 137,060 = 72.96 us. Two
/// equations, per_request + 4096 B / rate = 14.10 us and per_request +
/// 15.93 x 4096 B / rate = 72.96 us, give a transfer of 3.94 us per 4 KiB
/// (rate 990.7 MiB/s) and a fixed cost of 10.16 us per request.
pub(crate) struct Calibration {
    pub(crate) unmerged_request_ns: f64,
    pub(crate) bios_per_merged_request: f64,
    pub(crate) merged_request_ns: f64,
    pub(crate) per_request_ns: f64,
    pub(crate) bytes_per_sec: f64,
}

pub(crate) fn calibration() -> Calibration {
    let unmerged_request_ns = BS_BYTES as f64 / (SOURCE_BW_UNPATCHED_KIB * 1024.0) * 1e9;
    let bios = SOURCE_BW_PATCHED_KIB * 1024.0 * SOURCE_RUNTIME_S / BS_BYTES as f64;
    let requests = bios - SOURCE_MERGES_PATCHED;
    let bios_per_merged_request = bios / requests;
    let merged_request_ns = SOURCE_RUNTIME_S * 1e9 / requests;
    let transfer_ns_per_bio = (merged_request_ns - unmerged_request_ns) / (bios_per_merged_request - 1.0);
    Calibration {
        unmerged_request_ns,
        bios_per_merged_request,
        merged_request_ns,
        per_request_ns: unmerged_request_ns - transfer_ns_per_bio,
        bytes_per_sec: BS_BYTES as f64 / transfer_ns_per_bio * 1e9,
    }
}

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

/// The calibrated device's constants: `calibration()` rounded to the
/// spec's units (whole ns, whole MiB/s).
const CALIBRATED_PER_REQUEST_NS: u64 = 10_160;
const CALIBRATED_MIB_PER_SEC: u64 = 991;

const DEVICES: &[Device] = &[
    Device {
        name: "calibrated",
        spec: "null:gb=16,irqmode=2,channels=1,completion_nsec=10160,mbps=991,hw_queue_depth=128",
        model: "the source's disk: one request at a time, 10.16 us per request + transfer at 991 MiB/s (a 4 KiB \
                request 14.10 us, 16 merged 73.2 us), solved from 283,638 KB/s unmerged and 873,224 KB/s with \
                2,046K merges; 128 tags",
        per_request_ns: CALIBRATED_PER_REQUEST_NS as f64,
        bytes_per_sec: (CALIBRATED_MIB_PER_SEC * 1048576) as f64,
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
    let calibrated_batches: &[u64] = if quick { &[16] } else { &[1, 4, 16, 32] };
    for &batch in calibrated_batches {
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
             {} bios (fio), {} requests and {} merges (the device's counters: {:.2} bios per request), {} KiB/s\n",
            a["bios"],
            a["requests"],
            a["merges"],
            a["bios_per_request"].as_f64().unwrap_or(f64::NAN),
            a["bw_kib_per_sec"]
        )),
        Err(why) => table.push_str(&format!("\nkernel loop-device anchor not run: {why}\n")),
    }
    let cal = calibration();
    let doc = json!({
        "experiment": "plug-merge",
        "source": "blk-plug: don't flush nested plug lists (Jeff Moyer, 2015) and Shaohua Li's reply: the kernel \
                   always flushed only the outermost plug; sync bios were not plugged in blk_sq_make_request \
                   (fixed by 'blk-mq: fix plugging in blk_sq_make_request')",
        "source_figures_as_printed": SOURCE_PRINTED,
        "source_units": "fio of 2015: KB = 1024 bytes (kb_base=1024), our KiB",
        "calibration": {
            "device": DEVICES[0].name,
            "targets": "the source's two figures: 283,638 KB/s with 0 merges (one 4 KiB request) and 873,224 KB/s \
                        with 2,046K merges over the 10 s run (requests of 15.93 bios)",
            "unmerged_request_ns": cal.unmerged_request_ns,
            "bios_per_merged_request": cal.bios_per_merged_request,
            "merged_request_ns": cal.merged_request_ns,
            "solved_per_request_ns": cal.per_request_ns,
            "solved_bytes_per_sec": cal.bytes_per_sec,
            "spec_per_request_ns": CALIBRATED_PER_REQUEST_NS,
            "spec_mbps_mib": CALIBRATED_MIB_PER_SEC,
            "model_unmerged_kib_per_sec": model_bw(&DEVICES[0], 16, false) / 1024.0,
            "model_merged_batch16_kib_per_sec": model_bw(&DEVICES[0], 16, true) / 1024.0,
        },
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
        "source_ratio": SOURCE_BW_PATCHED_KIB / SOURCE_BW_UNPATCHED_KIB,
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
            "{:<5} | {:<26} | {:<27} | {:>13} | {:<25} | {:<25}\n",
            "batch", "variant", "bandwidth KiB/s", "model KiB/s", "merges", "requests issued"
        ));
        for m in cells.iter().filter(|m| m.plan.device == di) {
            out.push_str(&format!(
                "{:<5} | {:<26} | {:<27} | {:>13.0} | {:<25} | {:<25}\n",
                m.plan.batch,
                variant_label(m.plan.variant),
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
         model's closed form:\n",
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
    let cal = calibration();
    out.push_str(&format!(
        "\ncalibration (the calibrated device, from the source's two figures): unmerged, one 4 KiB request took \
         4096 B / 283,638 KiB/s = {:.2} us; merged, 873,224 KiB/s x 10 s / 4 KiB = 2,183,060 bios, less 2,046K \
         merges = 137,060 requests of {:.2} bios, one every {:.2} us; solved: {:.2} us per request + transfer at \
         {:.1} MiB/s (spec: completion_nsec={CALIBRATED_PER_REQUEST_NS}, mbps={CALIBRATED_MIB_PER_SEC})\n",
        cal.unmerged_request_ns / 1e3,
        cal.bios_per_merged_request,
        cal.merged_request_ns / 1e3,
        cal.per_request_ns / 1e3,
        cal.bytes_per_sec / 1048576.0,
    ));
    out.push_str(&format!(
        "\nsource, as printed (fio libaio direct=1 4k read, iodepth 128, batch 16, --runtime=10s, virtio-blk on \
         blk-mq's single-queue path; fio's KB = 1024 bytes):\n  Unpatched kernel: Read B/W: 283,638 KB/s, Read \
         Merges: 0\n  Patched kernel:   Read B/W: 873,224 KB/s, Read Merges: 2,046K\n  (ratio {:.2}x)\n",
        SOURCE_BW_PATCHED_KIB / SOURCE_BW_UNPATCHED_KIB
    ));
    out
}

/// A variant's name as tables and plots show it (the hypothetical one
/// says so).
fn variant_label(v: usize) -> String {
    let variant = &VARIANTS[v];
    if variant.hypothetical {
        format!("{} (hypothetical)", variant.name)
    } else {
        variant.name.to_string()
    }
}

/// Named bars for the variants at batch 16 on the calibrated device
/// (bandwidth, merged bios per bio), the source's figures beside them; and
/// the bandwidth ratio by batch.
fn panels(cells: &[Measured]) -> Vec<Panel> {
    let names: Vec<String> = (0..VARIANTS.len()).map(variant_label).collect();
    let at16: Vec<&Measured> = (0..VARIANTS.len())
        .filter_map(|v| cells.iter().find(|m| m.plan.device == 0 && m.plan.batch == 16 && m.plan.variant == v))
        .collect();
    let bars = |f: &dyn Fn(&Cell) -> f64| -> Series {
        let spreads: Vec<Spread> = at16.iter().map(|m| m.spread(f)).collect();
        Series::measured(
            "mqblk, median (min-max)",
            spreads.iter().enumerate().map(|(i, s)| (i as f64, s.median)).collect(),
        )
        .with_spread(spreads.iter().map(|s| (s.min, s.max)).collect())
    };
    let source_bios = SOURCE_BW_PATCHED_KIB * 1024.0 * SOURCE_RUNTIME_S / BS_BYTES as f64;
    let bandwidth = Panel::categories(
        "plug-merge: bandwidth, batch 16, device calibrated to the source's",
        "KiB/s (the source's KB/s: 1024 bytes)",
        names.clone(),
    )
    .with(bars(&|c| c.bw_bytes_per_sec / 1024.0))
    .with(Series::source(
        "source: 283,638 and 873,224 KB/s",
        vec![(0.0, SOURCE_BW_UNPATCHED_KIB), (1.0, SOURCE_BW_PATCHED_KIB)],
    ));
    let merged = Panel::categories("plug-merge: merged bios per bio, batch 16", "merges / bios", names)
        .with(bars(&|c| c.stats.merges.read as f64 / c.stats.bios.read.max(1) as f64))
        .with(Series::source(
            "source: 0 and 2,046K merges of 2,183K bios",
            vec![(0.0, 0.0), (1.0, SOURCE_MERGES_PATCHED / source_bios)],
        ));
    let rs: Vec<Ratio> = ratios(cells).into_iter().filter(|r| r.device == 0).collect();
    let ratio = Panel::numeric("plug-merge: outermost / sync-bypass bandwidth", "iodepth_batch", "ratio")
        .with(
            Series::measured(
                "mqblk, calibrated device",
                rs.iter().map(|r| (r.batch as f64, r.measured.median)).collect(),
            )
            .with_spread(rs.iter().map(|r| (r.measured.min, r.measured.max)).collect()),
        )
        .with(Series::source(
            "source, batch 16: 873,224 / 283,638",
            vec![(16.0, SOURCE_BW_PATCHED_KIB / SOURCE_BW_UNPATCHED_KIB)],
        ));
    vec![bandwidth, merged, ratio]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calibration_solves_the_source_figures() {
        let cal = calibration();
        assert!((cal.unmerged_request_ns - 14_102.5).abs() < 1.0, "{}", cal.unmerged_request_ns);
        assert!((cal.bios_per_merged_request - 15.93).abs() < 0.01, "{}", cal.bios_per_merged_request);
        assert_eq!(cal.per_request_ns.round() as u64, CALIBRATED_PER_REQUEST_NS);
        assert_eq!((cal.bytes_per_sec / 1048576.0).round() as u64, CALIBRATED_MIB_PER_SEC);
        let spec = DEVICES[0].spec;
        assert!(spec.contains(&format!("completion_nsec={CALIBRATED_PER_REQUEST_NS},mbps={CALIBRATED_MIB_PER_SEC}")));
    }

    #[test]
    fn the_closed_form_of_the_calibrated_device_gives_the_source_figures() {
        let d = &DEVICES[0];
        let unmerged = model_bw(d, 16, false) / 1024.0;
        assert!((unmerged / SOURCE_BW_UNPATCHED_KIB - 1.0).abs() < 0.001, "{unmerged}");
        let merged = model_bw(d, 16, true) / 1024.0;
        assert!((merged / SOURCE_BW_PATCHED_KIB - 1.0).abs() < 0.002, "{merged}");
        assert_eq!(model_bw(d, 1, true), model_bw(d, 1, false), "a batch of one cannot merge");
        let free = &DEVICES[1];
        assert_eq!(model_bw(free, 16, true), model_bw(free, 16, false), "no per-request cost: merging cannot pay");
    }
}
