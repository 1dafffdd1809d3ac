//! The policy examples (examples/sstf.rs, examples/reads_first.rs,
//! examples/wake_one.rs) run a short bench with their policy chosen by
//! name, and their policy ran: each prints its own counter after the run;
//! a registered scheduler's bad input is refused before any I/O, named as
//! typed. The driver example
//! (examples/ramdisk.rs) keeps what bench writes and serves it over NBD
//! (nbdcopy, nbdinfo and qemu-io, which scripts/test-all.sh installs),
//! with its direct reads and block status used.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The example's binary, built beside the `mqblk` binary (cargo test and
/// nextest build examples; if not, build it now).
fn example(name: &str) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_mqblk"));
    let path = bin.parent().expect("target dir").join("examples").join(name);
    if !path.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "mqblk-cli", "--example", name])
            .status()
            .expect("run cargo");
        assert!(status.success(), "cargo build --example {name}");
    }
    path
}

/// Runs `example bench ARGS --output-format=json`: the JSON and stderr.
fn bench(name: &str, args: &[&str]) -> (Value, String) {
    let out = Command::new(example(name))
        .arg("bench")
        .args(args)
        .arg("--output-format=json")
        .output()
        .expect("run the example");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{name} bench {args:?} failed: {stderr}");
    (serde_json::from_slice(&out.stdout).expect("valid JSON on stdout"), stderr)
}

/// The number in the example's closing line `PREFIX N ...`.
fn counter(stderr: &str, prefix: &str) -> u64 {
    let line = stderr.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no '{prefix}': {stderr}"));
    line.split_whitespace().next().and_then(|n| n.parse().ok()).expect("a count")
}

#[test]
fn sstf_example_schedules_every_request() {
    let (v, stderr) = bench(
        "sstf",
        &[
            "--device",
            "null:gb=1,irqmode=1,sched=sstf",
            "--name=r",
            "--rw=randread",
            "--iodepth=16",
            "--number_ios=3000",
        ],
    );
    assert_eq!(v["jobs"][0]["read"]["total_ios"], 3000);
    assert_eq!(v["mqblk"]["dispatched"], 3000);
    assert_eq!(counter(&stderr, "sstf: dispatched "), 3000, "every request went through sstf");
}

#[test]
fn reads_first_example_schedules_every_read_and_write() {
    let (v, stderr) = bench(
        "reads_first",
        &[
            "--device",
            "null:gb=1,irqmode=1,hw_queue_depth=4,nr_requests=64",
            "--sched=reads-first,read_batch=8",
            "--name=r",
            "--rw=randread",
            "--iodepth=16",
            "--number_ios=2000",
            "--name=w",
            "--rw=randwrite",
            "--iodepth=16",
            "--number_ios=500",
        ],
    );
    assert_eq!(
        (v["jobs"][0]["read"]["total_ios"].as_u64(), v["jobs"][1]["write"]["total_ios"].as_u64()),
        (Some(2000), Some(500))
    );
    assert_eq!(
        stderr.lines().find(|l| l.starts_with("reads-first: ")),
        Some("reads-first: dispatched 2000 reads, 500 writes"),
        "every request went through the registered scheduler: {stderr}"
    );
}

/// Runs `example ARGS`: its exit code, stdout and stderr.
fn run_example(name: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(example(name)).args(args).output().expect("run the example");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn a_registered_schedulers_bad_input_is_named_as_typed_before_any_io() {
    let cases: &[(&[&str], &str)] = &[
        // A value out of the factory's range, refused at parse as a
        // built-in's is, under the program's own name and as typed.
        (
            &["--sched=reads-first,read_batch=0"],
            "reads_first bench: --sched=reads-first,read_batch=0: reads-first: bad value '0' for 'read_batch' \
             (accepted: an integer in 1..=1024)",
        ),
        (
            &["--device", "null:gb=1,sched=reads-first,read_batch=-1"],
            "reads_first bench: --device null:gb=1,sched=reads-first,read_batch=-1: reads-first: bad value '-1' \
             for 'read_batch'",
        ),
        // A typo of its tunable in a device spec gets a "did you mean".
        (
            &["--device", "null:gb=1,sched=reads-first,read_btch=4"],
            "unknown key 'read_btch' (did you mean 'read_batch'?)",
        ),
        (&["--sched=reads-first,read_btch=4"], "unknown key 'read_btch' (did you mean 'read_batch'?)"),
        // Two choices of the scheduler: refused, not one winning silently.
        (
            &["--device", "null:gb=1,sched=mq-deadline", "--sched=reads-first"],
            "reads_first bench: --device null:gb=1,sched=mq-deadline and --sched=reads-first both choose the scheduler",
        ),
    ];
    for (args, wanted) in cases {
        let (code, _, stderr) = run_example("reads_first", &[&["bench"], *args, &["--number_ios=10"]].concat());
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(wanted), "{args:?}: wanted '{wanted}' in: {stderr}");
        assert!(stderr.contains("reads-first: dispatched 0 reads, 0 writes"), "{args:?}: no I/O ran: {stderr}");
    }
}

#[test]
fn bench_help_lists_every_scheduler_under_the_programs_name() {
    let (code, stdout, _) = run_example("reads_first", &["bench", "--help"]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("reads_first bench [--device SPEC]"), "usage under the program's name: {stdout}");
    let line = stdout.lines().skip_while(|l| !l.contains("--sched=")).nth(1).unwrap_or_default();
    assert!(line.contains("NAME: none, mq-deadline, kyber, bfq, reads-first"), "{line}");
}

#[test]
fn wake_one_example_wakes_submitters_waiting_for_tags() {
    let (v, stderr) = bench(
        "wake_one",
        &[
            "--device",
            "null:gb=1,irqmode=1,hw_queue_depth=4,wake=one",
            "--name=r",
            "--rw=randread",
            "--iodepth=4",
            "--numjobs=8",
            "--number_ios=1000",
        ],
    );
    let ios: u64 = v["jobs"].as_array().unwrap().iter().map(|j| j["read"]["total_ios"].as_u64().unwrap()).sum();
    assert_eq!(ios, 8000);
    assert!(v["mqblk"]["tag_waits"].as_u64().unwrap() > 0, "8 jobs of depth 4 on 4 tags wait for tags");
    assert!(counter(&stderr, "wake=one: woke ") > 0, "the policy woke the waiters");
}

#[test]
fn an_unregistered_policy_name_is_refused_with_the_accepted_list() {
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["bench", "--device", "null:gb=1,sched=sstf", "--number_ios=10"])
        .output()
        .expect("run mqblk");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("'sstf'") && stderr.contains("mq-deadline"), "{stderr}");
}

#[test]
fn ramdisk_example_keeps_what_bench_writes() {
    let (v, stderr) = bench(
        "ramdisk",
        &[
            "--device",
            "ram:size_mb=64",
            "--name=w",
            "--rw=write",
            "--bs=4k",
            "--size=8m",
            "--iodepth=16",
            "--verify=crc32c",
        ],
    );
    let job = &v["jobs"][0];
    assert_eq!(job["error"], 0, "{job}");
    assert_eq!(job["write"]["total_ios"], 2048);
    assert_eq!(v["mqblk"]["bios"], serde_json::json!([2048, 2048]), "every written block read back and verified");
    assert_eq!(v["mqblk"]["driver"], "ram");
    assert_eq!(v["mqblk"]["device"], "ram", "size_mb=64 is the default: the spec printed back omits it");
    assert_eq!(ramdisk_counts(&stderr), (0, 0), "bench reads and writes by requests only");
}

#[test]
fn ramdisk_example_serves_its_data_holes_and_direct_reads_over_nbd() {
    const SIZE: usize = 64 << 20;
    // A 1 MiB pattern, at an offset that is not a multiple of the chunk.
    const OFFSET: usize = (5 << 20) + 4096;
    let mut server = RamServer::start("serve", &["--device", "ram:size_mb=64"]);
    let uri = server.uri();
    let pattern = server.dir.join("pattern");
    let mut data = vec![0u8; 1 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for c in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    std::fs::write(&pattern, &data).unwrap();
    let write = format!("write -s {} {OFFSET} {}", pattern.display(), data.len());
    tool("qemu-io", &["-f", "raw", "-c", &write, &uri]);

    let back = server.dir.join("back.img");
    tool("nbdcopy", &[&uri, back.to_str().unwrap()]);
    let mut want = vec![0u8; SIZE];
    want[OFFSET..OFFSET + data.len()].copy_from_slice(&data);
    assert!(std::fs::read(&back).unwrap() == want, "the whole device read back, byte for byte");

    // base:allocation: the chunks around the pattern are holes.
    let map = nbd_map(&uri);
    let [(0, before, 3), (start, len, 0), (after_start, after, 3)] = map[..] else { panic!("{map:?}") };
    assert!(start <= OFFSET as u64 && start + len >= (OFFSET + data.len()) as u64, "{map:?}");
    assert!(len < 2 << 20 && before == start && after_start + after == SIZE as u64, "{map:?}");
    // A discard leaves the chunks it touched all zeros: holes again.
    tool("qemu-io", &["-f", "raw", "-c", &format!("discard {OFFSET} {}", data.len()), &uri]);
    assert_eq!(nbd_map(&uri), [(0, SIZE as u64, 3)], "a discarded range is a hole");

    let (direct_reads, block_status_queries) = ramdisk_counts(&server.stop());
    assert!(direct_reads > 0, "nbdcopy's large reads went by direct access");
    assert!(block_status_queries > 0, "nbdinfo --map asked the driver");
}

#[test]
fn ramdisk_example_names_a_bad_key() {
    for (spec, named) in [("ram:size_mb=64,sizemb=1", "unknown key 'sizemb'"), ("ram:size_mb=0", "'size_mb'")] {
        let out = Command::new(example("ramdisk"))
            .args(["bench", "--device", spec, "--name=r", "--number_ios=1"])
            .output()
            .expect("run the example");
        assert_eq!(out.status.code(), Some(2), "{spec}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(named), "{spec}: {stderr}");
    }
}

/// The two numbers of the ramdisk example's closing line, `ramdisk:
/// direct reads N, block status queries M`.
fn ramdisk_counts(stderr: &str) -> (u64, u64) {
    let line = stderr.lines().find_map(|l| l.strip_prefix("ramdisk: ")).unwrap_or_else(|| panic!("{stderr}"));
    let mut numbers = line.split([' ', ',']).filter_map(|w| w.parse().ok());
    (numbers.next().expect("direct reads"), numbers.next().expect("block status queries"))
}

/// The ramdisk example's `serve ARGS --unix SOCK`, in a folder of its own;
/// killed and its folder removed if the test ends without `stop`.
struct RamServer {
    child: Option<Child>,
    dir: PathBuf,
}

impl RamServer {
    /// Starts the server and waits until its socket takes connections.
    fn start(name: &str, args: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("mqblk-examples-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("sock");
        let child = Command::new(example("ramdisk"))
            .arg("serve")
            .args(args)
            .arg("--unix")
            .arg(&sock)
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the example");
        let server = RamServer { child: Some(child), dir };
        let t = Instant::now();
        while UnixStream::connect(&sock).is_err() {
            assert!(t.elapsed() < Duration::from_secs(20), "the server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.dir.join("sock").display())
    }

    /// Stops the server with SIGTERM: it exits cleanly; returns its stderr.
    fn stop(&mut self) -> String {
        let child = self.child.take().expect("running");
        // SAFETY: signalling our own child process, not yet waited for.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "clean exit on SIGTERM: {stderr}");
        stderr
    }
}

impl Drop for RamServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs an NBD client tool, asserting success: its stdout.
fn tool(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e} (scripts/test-all.sh installs it)"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `nbdinfo --map`: (offset, length, type) per extent; type 3 is a hole
/// that reads as zeros, 0 is data.
fn nbd_map(uri: &str) -> Vec<(u64, u64, u32)> {
    let map = tool("nbdinfo", &["--map", uri]);
    let field = |l: &str, i: usize| l.split_whitespace().nth(i).and_then(|f| f.parse().ok());
    map.lines().map(|l| (field(l, 0).unwrap(), field(l, 1).unwrap(), field(l, 2).unwrap() as u32)).collect()
}
