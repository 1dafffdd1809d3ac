//! async-starvation's device: a SATA SSD calibrated to the source's
//! PLEXTOR PX-256M5S from published figures. The null device's channel
//! model serves a request on the channel free soonest for a per-request
//! time plus its transfer at a per-channel bandwidth, so
//!
//! - channels: the drive's NAND channels (its controller's);
//! - per-channel bandwidth: the sequential rate / channels (a large
//!   transfer is almost all bandwidth);
//! - per-request time: channels / the 4K random rate at QD32 (every
//!   channel busy) less a 4K transfer.
//!
//! What was found, in the corpora this project can search:
//!
//! - 4K random IOPS at QD32, Plextor's rating and a measurement: "Plextor
//!   M5 Pro 256 GB Review: 19 nm NAND And Marvell's Latest", Tom's
//!   Hardware, page 7 (Iometer, vendor-rated "up to" against observed QD32
//!   IOPS; the M5S row: read 73,000 rated, 73,888 observed; write 70,000
//!   rated, 69,346 observed),
//!   <http://www.tomshardware.com/reviews/m5-pro-px-256m5p-19nm-nand,3267-7.html>.
//! - The controller: smartmontools' drive database lists the M5S (PX-128M5S,
//!   PX-256M5S) on the Marvell 88SS9174; the 88SS9174 has 8 NAND channels,
//!   all 8 used at 256 GB ("Plextor PX-256M2S SSD - Preview", myce.com,
//!   page 2, <https://www.myce.com/reviews/plextor-px-256m2s-ssd-preview-41288/2/>).
//! - No sequential read or write rate of the M5S, nor a latency figure:
//!   the bandwidth is then the SATA 6 Gb/s link's ceiling, 600 MB/s (6
//!   Gbit/s with 8b/10b coding), an assumption that the drive's large
//!   transfers fill the link (a SATA SSD of 2012 reaches 80-95% of it).
//!
//! The per-request time is fitted to the write rating (the flood the
//! experiment makes is writes); the model's read rate is then the same,
//! 4% under the read rating. `calibration` prints each figure against what
//! the model predicts.

use serde_json::{json, Value};

/// The controller's NAND channels (Marvell 88SS9174).
const CHANNELS: u32 = 8;
/// The SATA 6 Gb/s link's payload rate: 6 Gbit/s, 10 bits per byte
/// (8b/10b).
const SATA_LINK_BYTES_PER_SEC: f64 = 600e6;
/// Plextor's "up to" 4K random IOPS at QD32, and Tom's Hardware's
/// measurement of them (Iometer, QD32).
const RATED_4K_WRITE_IOPS: f64 = 70_000.0;
const RATED_4K_READ_IOPS: f64 = 73_000.0;
const OBSERVED_4K_WRITE_IOPS: f64 = 69_346.0;
const OBSERVED_4K_READ_IOPS: f64 = 73_888.0;
const TOMS_M5_PRO: &str = "Tom's Hardware, Plextor M5 Pro 256 GB Review, p. 7 (vendor-rated vs observed 4 KiB QD32 \
                           IOPS): http://www.tomshardware.com/reviews/m5-pro-px-256m5p-19nm-nand,3267-7.html";

/// The device's per-request time and per-channel bandwidth (MiB/s), as
/// `derived` computes them from the figures, rounded (a unit test holds
/// them to it); the sensitivity rows scale them.
pub(super) const DEVICE_NSEC: f64 = 59_000.0;
pub(super) const DEVICE_MBPS: f64 = 71.0;
/// The calibrated device, 32 driver tags (NCQ; so nr_requests = 64
/// scheduler tags).
pub(super) const DEVICE: &str = "null:gb=64,irqmode=2,channels=8,completion_nsec=59000,mbps=71,hw_queue_depth=32";
pub(super) const DEVICE_MODEL: &str = "a SATA SSD calibrated to the source's PLEXTOR PX-256M5S: 8 channels (its \
     Marvell 88SS9174's) x (59 us + 71 MiB/s) per request: 70,000 4K random writes/s at QD32 (its rating), 558 MB/s \
     of 64k writes (the SATA link: 600 MB/s; no sequential rating found), a 4k read at QD1 in 114 us; 32 driver \
     tags (NCQ), 64 scheduler tags";
/// The constants this device replaced (no derivation was recorded), for
/// the calibration's comparison.
const FORMER: (u32, f64, f64) = (4, 100_000.0, 65.0);

/// The device at `scale` x its service time: per-request time x scale,
/// bandwidth / scale.
pub(super) fn scaled_device(scale: f64) -> String {
    let (nsec, mbps) = ((DEVICE_NSEC * scale).round(), (DEVICE_MBPS / scale).round());
    format!("null:gb=64,irqmode=2,channels={CHANNELS},completion_nsec={nsec},mbps={mbps},hw_queue_depth=32")
}

/// Per-request time (ns, unrounded) and per-channel bandwidth (MiB/s)
/// from the figures: bandwidth = link / channels, rounded down (the link
/// is a ceiling); per-request time = channels / rated 4K writes per second
/// - a 4K transfer at that bandwidth.
fn derived() -> (f64, f64) {
    let mbps = (SATA_LINK_BYTES_PER_SEC / f64::from(CHANNELS) / f64::from(1u32 << 20)).floor();
    let nsec = f64::from(CHANNELS) / RATED_4K_WRITE_IOPS * 1e9 - transfer_ns(4096.0, mbps);
    (nsec, mbps)
}

fn transfer_ns(bytes: f64, mbps: f64) -> f64 {
    bytes / (mbps * f64::from(1u32 << 20)) * 1e9
}

/// The model's rate of `bytes` requests with every channel busy, in
/// requests per second.
fn model_rate(channels: u32, nsec: f64, mbps: f64, bytes: f64) -> f64 {
    f64::from(channels) / ((nsec + transfer_ns(bytes, mbps)) / 1e9)
}

/// A figure against the model: what, published (or none), where from,
/// the model's prediction, the former constants' prediction, unit.
type Check = (&'static str, Option<f64>, &'static str, f64, f64, &'static str);

fn checks() -> Vec<Check> {
    let (channels, nsec, mbps) = (CHANNELS, DEVICE_NSEC, DEVICE_MBPS);
    let (former_channels, former_nsec, former_mbps) = FORMER;
    let ours = |bytes: f64| model_rate(channels, nsec, mbps, bytes);
    let former = |bytes: f64| model_rate(former_channels, former_nsec, former_mbps, bytes);
    let mb_s = |rate: f64, bytes: f64| rate * bytes / 1e6;
    let seq = 65_536.0;
    vec![
        (
            "4K random write IOPS, QD32, rated",
            Some(RATED_4K_WRITE_IOPS),
            TOMS_M5_PRO,
            ours(4096.0),
            former(4096.0),
            "IOPS",
        ),
        (
            "4K random write IOPS, QD32, measured",
            Some(OBSERVED_4K_WRITE_IOPS),
            TOMS_M5_PRO,
            ours(4096.0),
            former(4096.0),
            "IOPS",
        ),
        (
            "4K random read IOPS, QD32, rated",
            Some(RATED_4K_READ_IOPS),
            TOMS_M5_PRO,
            ours(4096.0),
            former(4096.0),
            "IOPS",
        ),
        (
            "4K random read IOPS, QD32, measured",
            Some(OBSERVED_4K_READ_IOPS),
            TOMS_M5_PRO,
            ours(4096.0),
            former(4096.0),
            "IOPS",
        ),
        (
            "sequential 64k writes, against the SATA link",
            Some(SATA_LINK_BYTES_PER_SEC / 1e6),
            "no M5S sequential rating found; SATA 6 Gb/s with 8b/10b: 600 MB/s, a ceiling",
            mb_s(ours(seq), seq),
            mb_s(former(seq), seq),
            "MB/s",
        ),
        (
            "4k read at QD1",
            None,
            "no latency figure found",
            (nsec + transfer_ns(4096.0, mbps)) / 1e3,
            (former_nsec + transfer_ns(4096.0, former_mbps)) / 1e3,
            "us",
        ),
    ]
}

fn residual_pct(model: f64, published: Option<f64>) -> Option<f64> {
    published.map(|p| (model / p - 1.0) * 100.0)
}

/// The calibration as text: each figure, its source, the model's
/// prediction and its residual, and the former constants' prediction.
pub(super) fn calibration() -> String {
    let (former_channels, former_nsec, former_mbps) = FORMER;
    let (derived_nsec, _) = derived();
    let mut out = format!(
        "\ndevice calibration: {CHANNELS} channels x ({:.0} us + {DEVICE_MBPS:.0} MiB/s), from the figures below \
         (per-channel bandwidth = 600 MB/s / {CHANNELS}, rounded down; per-request time = {CHANNELS} / 70,000 4K \
         writes/s - a 4K transfer = {:.1} us, rounded); the former constants, {former_channels} x ({:.0} us + \
         {former_mbps:.0} MiB/s), had no derivation\n\
         {:<68} | {:>10} | {:>10} | {:>8} | {:>10} | {:>8} | source\n",
        DEVICE_NSEC / 1e3,
        derived_nsec / 1e3,
        former_nsec / 1e3,
        "figure",
        "published",
        "model",
        "residual",
        "former",
        "residual",
    );
    let pct = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:+.1}%"));
    for (what, published, source, model, former, unit) in checks() {
        out.push_str(&format!(
            "{:<68} | {:>10} | {:>10} | {:>8} | {:>10} | {:>8} | {source}\n",
            format!("{what} ({unit})"),
            published.map_or("-".to_string(), |p| format!("{p:.0}")),
            format!("{model:.0}"),
            pct(residual_pct(model, published)),
            format!("{former:.0}"),
            pct(residual_pct(former, published)),
        ));
    }
    out
}

/// The calibration as JSON.
pub(super) fn calibration_json() -> Value {
    let (former_channels, former_nsec, former_mbps) = FORMER;
    json!({
        "channels": CHANNELS,
        "completion_nsec": DEVICE_NSEC,
        "completion_nsec_derived": derived().0,
        "mbps_per_channel": DEVICE_MBPS,
        "derivation": "per-channel bandwidth = SATA 6 Gb/s link (600 MB/s) / channels; per-request time = \
                       channels / rated 4K random writes per second at QD32 - a 4K transfer; rounded",
        "controller": "Marvell 88SS9174, 8 NAND channels: smartmontools drivedb.h (Plextor M3/M5/M6 entry); \
                       https://www.myce.com/reviews/plextor-px-256m2s-ssd-preview-41288/2/",
        "former": { "channels": former_channels, "completion_nsec": former_nsec, "mbps_per_channel": former_mbps },
        "checks": checks().iter().map(|(what, published, source, model, former, unit)| json!({
            "figure": what,
            "unit": unit,
            "published": published,
            "source": source,
            "model": model,
            "residual_pct": residual_pct(*model, *published),
            "former_model": former,
            "former_residual_pct": residual_pct(*former, *published),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unscaled_device_is_the_calibrated_one() {
        // DEVICE_NSEC and DEVICE_MBPS restate DEVICE's keys: they must agree.
        assert_eq!(scaled_device(1.0), DEVICE);
        assert!(scaled_device(2.0).contains("completion_nsec=118000,mbps=36,"), "{}", scaled_device(2.0));
    }

    #[test]
    fn the_constants_are_the_derived_ones_rounded() {
        let (nsec, mbps) = derived();
        assert_eq!((nsec / 1e3).round() * 1e3, DEVICE_NSEC, "{nsec} ns");
        assert_eq!(mbps, DEVICE_MBPS);
    }

    #[test]
    fn the_model_meets_the_write_rating_and_stays_under_the_link() {
        let write = model_rate(CHANNELS, DEVICE_NSEC, DEVICE_MBPS, 4096.0);
        assert!((write / RATED_4K_WRITE_IOPS - 1.0).abs() < 0.01, "{write} IOPS");
        let seq = model_rate(CHANNELS, DEVICE_NSEC, DEVICE_MBPS, 131_072.0) * 131_072.0;
        assert!(seq < SATA_LINK_BYTES_PER_SEC, "{seq} B/s");
    }
}
