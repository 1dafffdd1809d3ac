//! `mqblk bench --read_iolog` against fio 3.33 replaying the same traces:
//! both must issue the same I/Os (direction, offset, length, order). What
//! mqblk issued comes from its own `write_iolog`; what fio issued from its
//! per-I/O latency log (fio does not write an iolog while it replays one:
//! "read iolog overrides write_iolog"). Also: the trace's timing is
//! honoured (a lower bound only), and bad traces fail naming the line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// One I/O: (direction, offset, length).
type Io = (String, u64, u64);

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/replay").join(name)
}

/// A fresh folder for one test's files.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mqblk-replay-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn mqblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk")).args(args).output().expect("run mqblk")
}

fn fio(args: &[&str], dir: &Path) -> Output {
    let out =
        Command::new("fio").args(args).current_dir(dir).output().expect("fio 3.33 (scripts/test-all.sh installs it)");
    assert!(
        out.status.success(),
        "fio {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The I/O lines of a version 2 or 3 iolog, in order.
fn iolog_ios(path: &Path) -> Vec<Io> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let skip = match header {
        "fio version 2 iolog" => 0,
        "fio version 3 iolog" => 1,
        _ => panic!("{}: not an iolog: {header}", path.display()),
    };
    lines
        .map(|l| l.split_whitespace().skip(skip).collect::<Vec<_>>())
        .filter(|f| f.len() == 4)
        .map(|f| (f[1].to_string(), f[2].parse().unwrap(), f[3].parse().unwrap()))
        .collect()
}

/// The timestamps (us) of a version 3 iolog's I/O lines.
fn iolog_times_us(path: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 5)
        .map(|f| f[0].parse().unwrap())
        .collect()
}

/// What `mqblk bench` issued replaying `trace` (its write_iolog).
fn mqblk_replay(trace: &Path, dir: &Path, extra: &[&str]) -> Vec<Io> {
    let log = dir.join("issued.mqblk");
    // write_iolog appends, as fio's does.
    let _ = std::fs::remove_file(&log);
    let (t, l) = (format!("--read_iolog={}", trace.display()), format!("--write_iolog={}", log.display()));
    let mut args = vec!["bench", "--device", "null:gb=1", "--name=r", &t, &l, "--replay_no_stall=1"];
    args.extend_from_slice(extra);
    let out = mqblk(&args);
    assert!(out.status.success(), "mqblk {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    iolog_ios(&log)
}

/// What fio issued replaying `trace` with its null engine: its latency
/// log with offsets (one line per I/O, in completion order, which at
/// iodepth 1 is issue order).
fn fio_replay(trace: &Path, dir: &Path) -> Vec<Io> {
    fio_replay_with(trace, dir, &[])
}

/// `fio_replay` with more of fio's options.
fn fio_replay_with(trace: &Path, dir: &Path, extra: &[&str]) -> Vec<Io> {
    let t = format!("--read_iolog={}", trace.display());
    let mut args = vec![
        "--name=r",
        "--ioengine=null",
        "--thread",
        &t,
        "--replay_no_stall=1",
        "--replay_redirect=target",
        "--write_lat_log=fio",
        "--log_offset=1",
    ];
    args.extend_from_slice(extra);
    fio(&args, dir);
    let log = dir.join("fio_clat.1.log");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let dirs = ["read", "write", "trim"];
    text.lines()
        .map(|l| l.split(',').map(str::trim).collect::<Vec<_>>())
        .map(|f| (dirs[f[2].parse::<usize>().unwrap()].to_string(), f[4].parse().unwrap(), f[3].parse().unwrap()))
        .collect()
}

/// Reads and writes only: fio's latency log has no syncs, and fio 3.33
/// skips a text log's trims ("bad ddir: 2"; later fio replays them, as
/// mqblk does).
fn rw_ios(ios: &[Io]) -> Vec<Io> {
    ios.iter().filter(|io| io.0 == "read" || io.0 == "write").cloned().collect()
}

#[test]
fn version_2_log_replays_as_fio_replays_it() {
    let dir = scratch("v2");
    let trace = data("v2.log");
    let ours = mqblk_replay(&trace, &dir, &[]);
    assert_eq!(ours, iolog_ios(&trace), "every I/O of the trace, syncs included, in order");
    assert_eq!(rw_ios(&ours), fio_replay(&trace, &dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn version_3_log_replays_as_fio_replays_it() {
    let dir = scratch("v3");
    let trace = data("v3.log");
    let ours = mqblk_replay(&trace, &dir, &[]);
    assert_eq!(ours, iolog_ios(&trace));
    assert_eq!(ours, fio_replay(&trace, &dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn trims_and_syncs_replay_as_fio_replays_them() {
    let dir = scratch("trim");
    let trace = data("trim.log");
    let ours = mqblk_replay(&trace, &dir, &["--device", "null:gb=1,memory_backed=1,discard=1"]);
    assert_eq!(ours, iolog_ios(&trace));
    assert_eq!(rw_ios(&ours), fio_replay(&trace, &dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn log_fio_recorded_replays_as_fio_replays_it() {
    let dir = scratch("recorded");
    fio(
        &[
            "--name=w",
            "--ioengine=null",
            "--thread",
            "--filename=target",
            "--size=256m",
            "--rw=randrw",
            "--rwmixread=60",
            "--bsrange=4k-64k",
            "--number_ios=300",
            "--randseed=7",
            "--write_iolog=trace.log",
        ],
        &dir,
    );
    let trace = dir.join("trace.log");
    let recorded = iolog_ios(&trace);
    assert_eq!(recorded.len(), 300, "fio recorded its job");
    assert!(recorded.iter().any(|io| io.0 == "read") && recorded.iter().any(|io| io.0 == "write"));
    let ours = mqblk_replay(&trace, &dir, &["--iodepth=8"]);
    assert_eq!(ours, recorded);
    assert_eq!(ours, fio_replay(&trace, &dir));
    // Chunked reading issues the same.
    assert_eq!(mqblk_replay(&trace, &dir, &["--read_iolog_chunked=1"]), recorded);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fio_replays_the_log_mqblk_writes() {
    let dir = scratch("ours");
    let log = dir.join("ours.log");
    let l = format!("--write_iolog={}", log.display());
    let args = [
        "bench",
        "--device",
        "null:gb=1",
        "--name=g",
        "--rw=randrw",
        "--bs=4k,16k",
        "--iodepth=4",
        "--number_ios=200",
        &l,
    ];
    let out = mqblk(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ours = iolog_ios(&log);
    assert_eq!(ours.len(), 200);
    assert!(ours.iter().any(|io| io.0 == "read") && ours.iter().any(|io| io.0 == "write"));
    assert_eq!(fio_replay(&log, &dir), ours, "fio 3.33 reads mqblk's version 3 log");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn options_scale_and_align_offsets_as_fio() {
    let dir = scratch("scale");
    let trace = dir.join("t.log");
    let lines = ["fio version 2 iolog", "f add", "f open", "f read 24576 4096", "f write 1052672 4096", "f close"];
    std::fs::write(&trace, lines.join("\n") + "\n").unwrap();
    let ours = mqblk_replay(&trace, &dir, &["--replay_scale=4", "--replay_align=4096"]);
    // 24576 / 4 = 6144, aligned down to 4096; 1052672 / 4 = 263168 -> 262144.
    assert_eq!(ours, [("read".to_string(), 4096, 4096), ("write".to_string(), 262144, 4096)]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn timestamps_are_honoured_without_replay_no_stall() {
    let dir = scratch("timing");
    let trace = dir.join("t.log");
    let gap_us = 10_000;
    let mut text = String::from("fio version 3 iolog\n0 f add\n0 f open\n");
    for i in 1..=20u64 {
        text.push_str(&format!("{} f read {} 4096\n", i * gap_us, i * 4096));
    }
    std::fs::write(&trace, text).unwrap();
    let log = dir.join("issued.mqblk");
    let (t, l) = (format!("--read_iolog={}", trace.display()), format!("--write_iolog={}", log.display()));
    let out = mqblk(&["bench", "--device", "null:gb=1", "--name=r", &t, &l]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let times = iolog_times_us(&log);
    assert_eq!(times.len(), 20);
    // The first read has no delay (it follows a timestamp of 0, fio's
    // rule); the 19 after it come gap_us apart. Lower bound only: this
    // machine is shared, sleeps only ever run late.
    let span_us = times[19] - times[0];
    assert!(span_us >= 19 * gap_us * 9 / 10, "19 gaps of {gap_us} us took {span_us} us: {times:?}");
    // With replay_no_stall the same trace takes a fraction of that.
    let fast = mqblk_replay(&trace, &dir, &[]);
    assert_eq!(fast.len(), 20);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs mqblk on a trace of `content` and returns its error (it must
/// fail as bad input, exit code 2, before reporting anything).
fn replay_error(test: &str, content: &[u8]) -> String {
    let dir = scratch(test);
    let trace = dir.join("bad.log");
    std::fs::write(&trace, content).unwrap();
    let t = format!("--read_iolog={}", trace.display());
    let out = mqblk(&["bench", "--device", "null:gb=1", "--name=r", &t, "--replay_no_stall=1"]);
    assert_eq!(out.status.code(), Some(2), "a bad trace is bad input, found before any I/O: {out:?}");
    assert!(out.stdout.is_empty(), "no report of a partial run: {}", String::from_utf8_lossy(&out.stdout));
    std::fs::remove_dir_all(&dir).unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_lines_are_named() {
    let v2 = |body: &str| format!("fio version 2 iolog\nf add\nf open\nf read 0 4096\n{body}\n").into_bytes();
    let cases = [
        ("unknown", v2("f frobnicate 0 4096"), "bad.log:5: unknown action 'frobnicate'"),
        ("malformed", v2("f read 4096"), "bad.log:5: 'read' needs an offset and a length"),
        ("not_number", v2("f write 4k 4096"), "bad.log:5: bad offset '4k'"),
        ("not_open", v2("g add\ng read 0 4096"), "bad.log:6: read on 'g', not open"),
        ("not_added", v2("g read 0 4096"), "bad.log:5: read on 'g', never added"),
        (
            "past_end",
            v2("f read 1073741824 4096"),
            "bad.log:5: offset 1073741824 length 4096 ends past the device's end",
        ),
        ("misaligned", v2("f write 100 4096"), "bad.log:5: offset 100 length 4096 not aligned"),
        (
            "v3_wait",
            b"fio version 3 iolog\n0 f add\n0 f open\n5 f wait 10 0\n".to_vec(),
            "bad.log:4: 'wait' is not allowed",
        ),
        ("header", b"fio version 1 iolog\n".to_vec(), "bad.log:1: not a fio iolog"),
    ];
    for (test, content, want) in cases {
        let e = replay_error(test, &content);
        assert!(e.contains(want), "{test}: want '{want}' in: {e}");
    }
}

/// One little-endian blktrace record: a queue event unless `action` says.
fn blktrace_record(time_ns: u64, sector: u64, bytes: u32, action: u32) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(&0x6561_7407u32.to_le_bytes());
    r.extend_from_slice(&0u32.to_le_bytes());
    r.extend_from_slice(&time_ns.to_le_bytes());
    r.extend_from_slice(&sector.to_le_bytes());
    r.extend_from_slice(&bytes.to_le_bytes());
    r.extend_from_slice(&action.to_le_bytes());
    r.extend_from_slice(&[0; 16]);
    r
}

/// blktrace's Q (queued) action of a read and of a write, and C of a read.
const Q_READ: u32 = 1 | 1 << 16 | 1 << 20;
const Q_WRITE: u32 = 1 | 1 << 17 | 1 << 20;
const C_READ: u32 = 8 | 1 << 16 | 1 << 23;

#[test]
fn blktrace_queue_events_replay_as_fio_replays_them() {
    let dir = scratch("blktrace");
    let mut t = blktrace_record(1_000, 8, 4096, Q_READ);
    t.extend(blktrace_record(2_000, 8, 4096, C_READ));
    t.extend(blktrace_record(3_000, 2048, 65536, Q_WRITE));
    t.extend(blktrace_record(4_000, 64, 512, Q_READ));
    let trace = dir.join("trace.bin");
    std::fs::write(&trace, &t).unwrap();
    let want: Vec<Io> =
        vec![("read".into(), 4096, 4096), ("write".into(), 1 << 20, 65536), ("read".into(), 32768, 512)];
    assert_eq!(mqblk_replay(&trace, &dir, &[]), want);
    assert_eq!(fio_replay(&trace, &dir), want);
    t.extend(&blktrace_record(5_000, 64, 512, Q_READ)[..20]);
    let e = replay_error("blktrace_cut", &t);
    assert!(e.contains("record 5: truncated"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A blktrace of Linux 6.12 under ext4 (tests/data/traces, xz), unpacked
/// into `dir`.
fn guest_trace(name: &str, dir: &Path) -> PathBuf {
    let packed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/traces").join(format!("{name}.bin.xz"));
    let out = Command::new("xz").arg("-dc").arg(&packed).output().expect("xz (scripts/test-all.sh installs xz-utils)");
    assert!(out.status.success(), "xz -dc {}: {}", packed.display(), String::from_utf8_lossy(&out.stderr));
    let trace = dir.join(format!("{name}.bin"));
    std::fs::write(&trace, out.stdout).unwrap();
    trace
}

/// A real kernel's trace through each scheduler: mqblk issues what fio
/// issues (every read and write, in the trace's order), at the depth it
/// probes from the trace, so the schedulers have requests to reorder. fio
/// runs at iodepth 1, where its completion-ordered log is its issue order.
fn guest_trace_replays_as_fio_replays_it(name: &str, reads: usize, writes: usize) {
    let dir = scratch(name);
    let trace = guest_trace(name, &dir);
    let theirs = fio_replay_with(&trace, &dir, &["--iodepth=1"]);
    let count = |ios: &[Io], d: &str| ios.iter().filter(|io| io.0 == d).count();
    assert_eq!((count(&theirs, "read"), count(&theirs, "write")), (reads, writes), "fio's replay of {name}");
    for sched in ["none", "mq-deadline", "kyber", "bfq"] {
        let ours = mqblk_replay(&trace, &dir, &[&format!("--sched={sched}")]);
        assert_eq!(rw_ios(&ours), theirs, "{name} under {sched}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ext4_untar_trace_replays_as_fio_replays_it_under_each_scheduler() {
    // Counts from tests/data/traces/README.txt (fio 3.33's replay).
    guest_trace_replays_as_fio_replays_it("ext4-untar", 1_455, 1_700);
}

#[test]
fn ext4_fsync_trace_replays_as_fio_replays_it_under_each_scheduler() {
    guest_trace_replays_as_fio_replays_it("ext4-fsync", 9, 4_050);
}
