//! Where `mqblk bench` puts each I/O and how big it is, read back from its
//! `write_iolog`: zipf and pareto hot sets against fio's own `fio-genzipf`
//! (Debian's fio package), zoned distributions per zone, `bssplit` and
//! `blockalign`, `zonemode=strided` windows, and `zonemode=zbd` writes
//! at write pointers within the open-zone limit and reads below them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// One I/O: (direction, offset, length).
type Io = (String, u64, u64);

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mqblk-offsets-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn mqblk(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk")).args(args).output().expect("run mqblk")
}

/// `mqblk bench --device DEVICE --name=j ARGS --write_iolog=LOG`: the I/Os
/// it issued, in order.
fn issued(test: &str, device: &str, args: &[&str]) -> Vec<Io> {
    let dir = scratch(test);
    let log = dir.join("issued.log");
    let mut all: Vec<String> = ["bench", "--device", device, "--name=j"].iter().map(|s| s.to_string()).collect();
    all.extend(args.iter().map(|s| s.to_string()));
    all.push(format!("--write_iolog={}", log.display()));
    let out = mqblk(&all);
    assert!(out.status.success(), "mqblk {all:?}: {}", String::from_utf8_lossy(&out.stderr));
    let ios = iolog_ios(&log);
    let _ = std::fs::remove_dir_all(&dir);
    ios
}

/// The I/O lines of a version 3 iolog.
fn iolog_ios(path: &Path) -> Vec<Io> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 5)
        .map(|f| (f[2].to_string(), f[3].parse().unwrap(), f[4].parse().unwrap()))
        .collect()
}

/// The share of all hits that land on the `hot` most-hit blocks.
fn hot_share(mut counts: Vec<u64>, hot: usize) -> f64 {
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let total: u64 = counts.iter().sum();
    counts.iter().take(hot).sum::<u64>() as f64 / total as f64
}

/// fio-genzipf's hits per block (its CSV: rank, count), for a 1 GiB data
/// set of `block` bytes: as many draws as blocks, as the tool makes.
fn genzipf_counts(kind: &str, input: &str, block: u64) -> Vec<u64> {
    let out = Command::new("fio-genzipf")
        .args(["-t", kind, "-i", input, "-g", "1", "-b", &block.to_string(), "-c"])
        .output()
        .expect("run fio-genzipf (Debian's fio package)");
    assert!(out.status.success(), "fio-genzipf: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(", ").nth(1).expect("rank, count").trim().parse().unwrap())
        .collect()
}

#[test]
fn zipf_and_pareto_hot_sets_match_fio_genzipf() {
    // 1 GiB in 64 KiB blocks: 16384 blocks and as many draws, as
    // fio-genzipf makes them. The statistic: the share of the draws
    // landing on the 5% most-hit blocks. Both sides draw the same shape
    // (Gray et al.'s zipf, fio's pareto, the same hash of ranks onto
    // blocks) from different generators, so they differ by sampling noise
    // only: a share p of N = 16384 draws has a standard deviation of at
    // most 0.5 / sqrt(N) = 0.0039, the difference of two at most 0.0055;
    // 0.03 is over five of those. The neighbouring inputs differ by more
    // than twice that, so the test tells them apart.
    const BLOCK: u64 = 65536;
    const BLOCKS: usize = 16384;
    let hot = BLOCKS / 20;
    let mut shares = Vec::new();
    for (kind, input) in [("zipf", "1.2"), ("zipf", "0.8"), ("pareto", "0.3")] {
        let fio = hot_share(genzipf_counts(kind, input, BLOCK), hot);
        let dist = format!("--random_distribution={kind}:{input}");
        let ios = issued(
            &format!("{kind}{input}"),
            "null:gb=1",
            &["--rw=randread", "--bs=64k", &dist, "--number_ios=16384", "--iodepth=16"],
        );
        assert_eq!(ios.len(), BLOCKS);
        let mut per_block: BTreeMap<u64, u64> = BTreeMap::new();
        for (_, offset, len) in &ios {
            assert_eq!((offset % BLOCK, *len), (0, BLOCK), "block-aligned 64k reads");
            *per_block.entry(*offset).or_default() += 1;
        }
        let ours = hot_share(per_block.into_values().collect(), hot);
        eprintln!("{kind}:{input}: top 5% of blocks take {ours:.3} of hits, fio-genzipf {fio:.3}");
        assert!(
            (ours - fio).abs() < 0.03,
            "{kind}:{input}: top 5% of blocks take {ours:.3} of hits, fio-genzipf {fio:.3}"
        );
        shares.push(fio);
    }
    assert!(shares[0] - shares[1] > 0.06, "zipf 1.2 vs 0.8 must differ beyond the tolerance: {shares:?}");
}

/// The share of `ios` in each zone, the zones ending at `ends` bytes.
fn per_zone(ios: &[Io], ends: &[u64]) -> Vec<f64> {
    let mut counts = vec![0u64; ends.len()];
    for (_, offset, _) in ios {
        let zone = ends.iter().position(|&end| *offset < end).expect("offset inside the region");
        counts[zone] += 1;
    }
    counts.iter().map(|&c| c as f64 / ios.len() as f64).collect()
}

#[test]
fn zoned_distributions_put_each_share_of_accesses_in_its_zone() {
    // examples/rand-zones.fio's zones: 50% of accesses to the first 5%,
    // 30% to the next 15%, 20% to the remaining 80% (its size left blank:
    // fio gives it the rest). 20000 draws: a share's standard deviation
    // is at most 0.0035; 0.02 is over five.
    let ios = issued(
        "zoned",
        "null:gb=1",
        &[
            "--rw=randread",
            "--bs=4k",
            "--size=64m",
            "--norandommap",
            "--random_distribution=zoned:50/5:30/15:20/",
            "--number_ios=20000",
        ],
    );
    let mib = 1u64 << 20;
    let got = per_zone(&ios, &[64 * mib / 20, 64 * mib / 5, 64 * mib]);
    for (share, want) in got.iter().zip([0.5, 0.3, 0.2]) {
        assert!((share - want).abs() < 0.02, "zone shares {got:?}, want 50/30/20");
    }
    // zoned_abs, with its own sizes for writes: reads 70% to the first
    // 8 MiB, writes 100% to the first 16 MiB.
    let ios = issued(
        "zoned-abs",
        "null:gb=1",
        &[
            "--rw=randrw",
            "--bs=4k",
            "--size=64m",
            "--random_distribution=zoned_abs:70/8m:30/56m,100/16m",
            "--number_ios=20000",
        ],
    );
    let (reads, writes): (Vec<Io>, Vec<Io>) = ios.into_iter().partition(|io| io.0 == "read");
    let got = per_zone(&reads, &[8 * mib, 64 * mib]);
    assert!((got[0] - 0.7).abs() < 0.02, "reads: {got:?}, want 70/30");
    assert!(writes.iter().all(|w| w.1 + w.2 <= 16 << 20), "every write inside the first 16 MiB");
}

#[test]
fn bssplit_sizes_come_in_their_shares_at_blockalign_offsets() {
    // examples/jesd219.fio's idea: sizes by percentage, random offsets
    // aligned to 4k rather than to each size.
    let ios = issued(
        "bssplit",
        "null:gb=1,memory_backed=1",
        &[
            "--rw=randwrite",
            "--bssplit=4k/60:16k/30:64k/",
            "--blockalign=4k",
            "--size=64m",
            "--number_ios=10000",
            "--iodepth=8",
        ],
    );
    let mut sizes: BTreeMap<u64, u64> = BTreeMap::new();
    for (_, offset, len) in &ios {
        assert_eq!(offset % 4096, 0, "aligned to blockalign");
        assert!(offset + len <= 64 << 20, "inside the region");
        *sizes.entry(*len).or_default() += 1;
    }
    // 10000 draws: a share's standard deviation at most 0.005; 0.03 is six.
    for (bs, pct) in [(4096u64, 60u64), (16384, 30), (65536, 10)] {
        let share = sizes.get(&bs).copied().unwrap_or(0) as f64 / ios.len() as f64;
        assert!((share - pct as f64 / 100.0).abs() < 0.03, "{bs}: {share} of I/Os, want {pct}%: {sizes:?}");
    }
    let unaligned_64k = ios.iter().filter(|(_, o, l)| *l == 65536 && o % 65536 != 0).count();
    assert!(unaligned_64k > 0, "64k writes at 4k boundaries, not only at 64k ones");
}

#[test]
fn strided_zones_do_zonesize_bytes_then_skip() {
    // zonesize=8k of I/O in each 16k zone (zonerange), then skip 16k: the
    // windows start every 32k; sequential 4k reads, two per window.
    let ios = issued(
        "strided",
        "null:gb=1",
        &[
            "--rw=read",
            "--bs=4k",
            "--zonemode=strided",
            "--zonesize=8k",
            "--zonerange=16k",
            "--zoneskip=16k",
            "--number_ios=8",
        ],
    );
    let offsets: Vec<u64> = ios.iter().map(|io| io.1 >> 10).collect();
    assert_eq!(offsets, [0, 4, 32, 36, 64, 68, 96, 100], "KiB");
}

#[test]
fn zbd_writes_go_to_write_pointers_of_at_most_max_open_zones_and_reads_stay_below() {
    // 16 MiB zones; 200 random 64k writes (12.5 MiB: no zone fills) with
    // max_open_zones=4, then (stonewall) random reads of the same zones.
    let dir = scratch("zbd");
    let (wlog, rlog) = (dir.join("w.log"), dir.join("r.log"));
    let args: Vec<String> = [
        "bench",
        "--device",
        "null:gb=1,zoned=1,zone_size=16,memory_backed=1",
        "--zonemode=zbd",
        "--bs=64k",
        "--name=w",
        "--rw=randwrite",
        "--max_open_zones=4",
        "--number_ios=200",
        &format!("--write_iolog={}", wlog.display()),
        "--name=r",
        "--stonewall",
        "--rw=randread",
        "--number_ios=300",
        &format!("--write_iolog={}", rlog.display()),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = mqblk(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let zone = 16u64 << 20;
    let mut written: BTreeMap<u64, u64> = BTreeMap::new();
    for (_, offset, len) in iolog_ios(&wlog) {
        let wp = written.entry(offset / zone).or_default();
        assert_eq!(offset % zone, *wp, "zone {}: a write at its write pointer", offset / zone);
        *wp += len;
    }
    assert!((1..=4).contains(&written.len()), "writes to {} zones with max_open_zones=4", written.len());
    let reads = iolog_ios(&rlog);
    assert_eq!(reads.len(), 300);
    let zones_read: BTreeSet<u64> = reads.iter().map(|r| r.1 / zone).collect();
    for (_, offset, len) in &reads {
        let wp = written.get(&(offset / zone)).copied().unwrap_or(0);
        assert!(offset % zone + len <= wp, "a read of {len} at {offset} past its zone's write pointer {wp}");
    }
    assert_eq!(zones_read, written.keys().copied().collect(), "reads find every written zone");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn zbd_refuses_a_zonesize_other_than_the_devices() {
    let args: Vec<String> =
        ["bench", "--device", "null:gb=1,zoned=1,zone_size=16", "--zonemode=zbd", "--zonesize=8m", "--rw=write"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let out = mqblk(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("zonesize 8388608 does not match the device's zone size 16777216"), "{stderr}");
}

#[test]
fn sizes_and_offsets_in_percent_are_shares_of_the_device() {
    // A 1 GiB device: offset=50% starts at 512 MiB, size=25% covers
    // 256 MiB of 1 MiB reads.
    let ios = issued("percent", "null:gb=1", &["--rw=read", "--bs=1m", "--offset=50%", "--size=25%"]);
    assert_eq!(ios.len(), 256);
    assert_eq!(ios.first().map(|io| io.1), Some(512 << 20));
    assert_eq!(ios.last().map(|io| io.1 + io.2), Some(768 << 20));
    let out = mqblk(&["bench", "--device", "null:gb=1", "--name=j", "--size=101%"].map(String::from));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("size: bad percentage '101%'"));
}

#[test]
fn zbd_trims_are_zone_resets_of_whole_zones() {
    // Four 16 MiB zones written full, then (stonewall) trimmed one zone a
    // trim, then read: fio's zbd reads stop below the write pointers, so
    // zones the trims reset give nothing to read.
    let dir = scratch("zbd-trim");
    let tlog = dir.join("t.log");
    let base = ["bench", "--device", "null:gb=1,zoned=1,zone_size=16,memory_backed=1", "--zonemode=zbd", "--size=4z"];
    let jobs = [
        "--name=w",
        "--rw=write",
        "--bs=1m",
        "--name=t",
        "--stonewall",
        "--rw=trim",
        "--bs=16m",
        &format!("--write_iolog={}", tlog.display()),
        "--name=r",
        "--stonewall",
        "--rw=read",
        "--bs=1m",
        "--output-format=json",
    ];
    let args: Vec<String> = base.iter().chain(&jobs).map(|s| s.to_string()).collect();
    let out = mqblk(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let zone = 16u64 << 20;
    let trims: Vec<(u64, u64)> = iolog_ios(&tlog).into_iter().map(|(_, offset, len)| (offset, len)).collect();
    assert_eq!(trims, (0..4).map(|z| (z * zone, zone)).collect::<Vec<_>>(), "a reset of each whole zone");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let jobs = report["jobs"].as_array().unwrap();
    assert_eq!(jobs[0]["write"]["io_bytes"], 4 * zone);
    assert_eq!(jobs[1]["trim"]["total_ios"], 4);
    assert_eq!(jobs[2]["read"]["total_ios"], 0, "every zone was reset: nothing below a write pointer");

    // fio's zbd_verify_bs: a trim is a whole zone.
    let bad: Vec<String> = base.iter().chain(&["--rw=trim", "--bs=8m"]).map(|s| s.to_string()).collect();
    let out = mqblk(&bad);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("the trim block size 8388608 is not the zone size 16777216"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
