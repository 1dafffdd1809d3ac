//! `mqblk bench`'s report formats against fio's own tools: the terse
//! line's field layout against a real `fio --ioengine=null` run of each
//! terse version, json+ through Debian's `fio_jsonplus_clat2csv`, format
//! lists and `--output=FILE`; and trims (`rw=randtrim`, `trimwrite`)
//! reported in fio's third direction. fio and its tools come with Debian's
//! fio package (scripts/test-all.sh installs it).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

const DEVICE: &str = "null:gb=1,memory_backed=1,discard=1,irqmode=0";

fn mqblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk")).args(args).output().expect("run mqblk")
}

fn bench_ok(args: &[&str]) -> String {
    let mut all = vec!["bench", "--device", DEVICE];
    all.extend_from_slice(args);
    let out = mqblk(&all);
    assert!(out.status.success(), "mqblk {all:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 report")
}

/// A fresh folder of this test's.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mqblk-bench-output-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn tool(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (Debian's fio package has it: scripts/test-all.sh installs it)"));
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Fields of a terse line.
fn fields(line: &str) -> Vec<String> {
    line.trim_end().split(';').map(str::to_string).collect()
}

#[test]
fn terse_lines_have_fios_fields_for_every_version() {
    for version in ["2", "3", "4", "5"] {
        let fio = tool(
            "fio",
            &[
                "--name=t",
                "--ioengine=null",
                "--size=4m",
                "--rw=randread",
                "--output-format=terse",
                &format!("--terse-version={version}"),
            ],
        );
        let ours = bench_ok(&[
            "--name=t",
            "--rw=randread",
            "--size=4m",
            "--output-format=terse",
            &format!("--terse-version={version}"),
        ]);
        let (theirs, ours) = (fields(fio.lines().last().unwrap()), fields(&ours));
        assert_eq!(ours.len(), theirs.len(), "terse v{version}: fio's {theirs:?}\nours {ours:?}");
        assert_eq!(ours[0], version);
        // Same kind of value in every field: a percentage, a P%=V, a
        // number (the version strings and names aside).
        let kind = |f: &str| (f.ends_with('%'), f.contains("%="), f.parse::<f64>().is_ok());
        let names = if version == "2" { 2 } else { 3 };
        for (i, (a, b)) in theirs.iter().zip(&ours).enumerate().skip(names) {
            assert_eq!(kind(a), kind(b), "v{version} field {}: fio '{a}', ours '{b}'", i + 1);
        }
    }
}

#[test]
fn terse_read_fields_agree_with_the_json_report() {
    // Terse first, then JSON, as fio prints a format list.
    let out = bench_ok(&["--name=t", "--rw=randread", "--size=8m", "--output-format=json,terse"]);
    let (line, json) = out.split_once('\n').unwrap();
    let v: Value = serde_json::from_str(json).expect("the JSON after the terse line");
    let read = &v["jobs"][0]["read"];
    let f = fields(line);
    // v3: read KiB (field 6), bandwidth KiB/s (7), IOPS (8), runtime (9).
    assert_eq!(f[5], "8192");
    assert_eq!(read["io_kbytes"], 8192);
    let runtime_ms: u64 = f[8].parse().unwrap();
    assert_eq!(runtime_ms, read["runtime"].as_u64().unwrap());
    // Rates over the runtime (0 for a run under 1 ms, as fio).
    let per_sec = |n: u64| (n * 1000).checked_div(runtime_ms).unwrap_or(0).to_string();
    assert_eq!((&f[7], &f[6]), (&per_sec(2048), &per_sec(8192)), "IOPS and KiB/s");
    // Write: nothing (fields 47-50).
    assert_eq!(&f[46..50], ["0", "0", "0", "0"]);
}

#[test]
fn json_plus_bins_go_through_fios_csv_tool() {
    let dir = scratch("jsonplus");
    let report = dir.join("out.json");
    let stdout = bench_ok(&[
        "--name=mix",
        "--rw=randrw",
        "--number_ios=3000",
        "--iodepth=4",
        "--lat_percentiles=1",
        "--output-format=json+",
        &format!("--output={}", report.display()),
    ]);
    assert!(stdout.is_empty(), "--output takes the report: {stdout}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let stub = dir.join("lat.csv");
    let (src, dst) = (report.to_str().unwrap(), stub.to_str().unwrap());
    tool("fio_jsonplus_clat2csv", &[src, dst]);
    assert!(tool("fio_jsonplus_clat2csv", &[src, dst, "--validate"]).contains("validated"));
    let csv = std::fs::read_to_string(dir.join("lat_job0.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').map(str::trim).collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').map(str::trim).collect()).collect();
    assert!(rows.len() > 1);
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for (dir_name, lat) in [("read", "clat_ns"), ("write", "clat_ns"), ("read", "lat_ns"), ("write", "lat_ns")] {
        let (count, pct) = (col(&format!("{dir_name}_{lat}_count")), col(&format!("{dir_name}_{lat}_percentile")));
        let mut sum = 0u64;
        let mut last_pct = 0.0;
        let mut last_ns = 0u64;
        for r in rows.iter().filter(|r| !r[count].is_empty()) {
            let ns: u64 = r[0].parse().unwrap();
            let p: f64 = r[pct].parse().unwrap();
            assert!(ns > last_ns && p > last_pct, "{dir_name} {lat}: rows in order, percentiles rising");
            (last_ns, last_pct) = (ns, p);
            sum += r[count].parse::<u64>().unwrap();
        }
        let ios = v["jobs"][0][dir_name]["total_ios"].as_u64().unwrap();
        assert!(ios > 0);
        assert_eq!(sum, ios, "{dir_name} {lat}: the bins count every I/O");
        assert!((last_pct - 1.0).abs() < 1e-12);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_format_list_prints_json_then_the_normal_report() {
    let out = bench_ok(&["--name=t", "--rw=read", "--size=1m", "--output-format=normal,json"]);
    let json_end = out.find("\n}\n").expect("the JSON document first") + 3;
    let v: Value = serde_json::from_str(&out[..json_end]).unwrap();
    assert_eq!(v["jobs"][0]["read"]["io_kbytes"], 1024);
    assert!(out[json_end..].contains("Run status group 0"), "{}", &out[json_end..]);
    let bad = mqblk(&["bench", "--output-format=json,xml"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--output-format: bad value 'xml'"));
}

#[test]
fn trims_are_fios_third_direction_in_every_report() {
    let out = bench_ok(&["--name=t", "--rw=randtrim", "--bs=4k,4k,64k", "--size=8m", "--output-format=json,terse"]);
    let (line, json) = out.split_once('\n').unwrap();
    let v: Value = serde_json::from_str(json).unwrap();
    let trim = &v["jobs"][0]["trim"];
    assert_eq!((trim["total_ios"].as_u64(), trim["io_kbytes"].as_u64()), (Some(128), Some(8192)));
    assert_eq!(trim["clat_ns"]["N"], 128);
    assert_eq!(v["jobs"][0]["read"]["total_ios"], 0);
    assert_eq!(v["jobs"][0]["write"]["total_ios"], 0);
    // Terse v3 has no trim fields: reads and writes are empty.
    assert_eq!(fields(line)[5], "0");
    let v4 = fields(&bench_ok(&["--name=t", "--rw=randtrim", "--size=8m", "--minimal", "--terse-version=4"]));
    // v4: trim status after read's and write's 41 fields each.
    assert_eq!(v4[5 + 2 * 41], "8192", "trim KiB");
    let normal = bench_ok(&["--name=t", "--rw=trimwrite", "--size=8m"]);
    assert!(normal.contains("  trim: IOPS="), "{normal}");
    assert!(normal.contains("  write: IOPS="), "{normal}");
    assert!(normal.contains("   TRIM: bw="), "{normal}");
}

#[test]
fn a_trim_on_a_device_without_discard_is_refused() {
    let out = mqblk(&["bench", "--device", "null:gb=1", "--name=t", "--rw=randtrim", "--size=1m"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("job 't': rw=randtrim needs a device that supports discard"), "{err}");
}
