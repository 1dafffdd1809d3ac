//! fio's own job files through `mqblk bench`: every file of fio's
//! examples/ (scripts/fio-examples.sh fetches Debian's fio source) that
//! targets a block engine runs unchanged on a memory-backed null device,
//! shortened only by `--runtime=1 --size=16m` after the file (options
//! after a job file override its jobs'), or is refused with the reason
//! that tests/data/fio-examples.txt gives (BENCHMARKS.md quotes it).
//! Beside that: what some files promise, checked from bench's JSON and
//! logs (groups in order, rates held, fio's own tool reading the logs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The engines mqblk stands in for; a file whose every `ioengine` is one
/// of these (or that names none: fio's default, psync) is a block-engine
/// file.
const BLOCK_ENGINES: &[&str] = &["libaio", "io_uring", "posixaio", "sync", "psync", "pvsync", "pvsync2", "null"];

const DEVICE: &str = "null:gb=1,memory_backed=1";

/// The device of a file with `zonemode=zbd`: zoned, in fio's examples'
/// 256 MiB zones, 528 of them, so that their offsets (524 zones in) fit.
/// Such a file runs on two zones (`--size=2z`): fio refuses a write
/// region of less than one zone, as `--size=16m` would be.
const ZONED_DEVICE: &str = "null:gb=132,zoned=1,zone_size=256,memory_backed=1";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// fio's examples/ directory (fetched and cached by the script).
fn examples() -> PathBuf {
    let out = Command::new(repo().join("scripts/fio-examples.sh")).output().expect("run scripts/fio-examples.sh");
    assert!(out.status.success(), "scripts/fio-examples.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).expect("a path").trim())
}

/// The file's `ioengine` values (comments skipped).
fn engines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with(';') && !l.starts_with('#'))
        .filter_map(|l| l.split_once('=').filter(|(k, _)| k.trim() == "ioengine").map(|(_, v)| v.trim().to_string()))
        .collect()
}

/// Every block-engine job file of `dir`, by name.
fn block_engine_files(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .expect("read examples/")
        .map(|e| e.expect("a directory entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".fio"))
        .filter(|n| {
            let text = std::fs::read_to_string(dir.join(n)).expect("read a job file");
            engines(&text).iter().all(|e| BLOCK_ENGINES.contains(&e.as_str()))
        })
        .collect();
    files.sort();
    files
}

/// What the ledger says of a file: None to run, Some(text) to be refused
/// with a message containing text.
fn ledger() -> BTreeMap<String, Option<String>> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fio-examples.txt"))
        .expect("read tests/data/fio-examples.txt");
    let mut ledger = BTreeMap::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let mut words = line.splitn(3, char::is_whitespace);
        let (file, verdict) = (words.next().unwrap(), words.next().unwrap_or(""));
        let rest = words.next().map(|r| r.trim().to_string());
        let entry = match verdict {
            "run" => None,
            "refused" => Some(rest.unwrap_or_else(|| panic!("{file}: refused needs the reason's text"))),
            _ => panic!("ledger line '{line}': the verdict is run or refused"),
        };
        assert!(ledger.insert(file.to_string(), entry).is_none(), "{file} twice in the ledger");
    }
    ledger
}

/// A scratch directory as the run's working directory (logs land there).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mqblk-fio-examples-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// `mqblk bench --device DEVICE FILE --runtime=1 --size=16m EXTRA... --output-format=json`
/// in `cwd` (a `zonemode=zbd` file: `ZONED_DEVICE` and `--size=2z`).
fn bench(file: &Path, extra: &[&str], cwd: &Path) -> Output {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let zbd = text.lines().any(|l| l.split_whitespace().collect::<String>() == "zonemode=zbd");
    let (device, size): (&str, &[&str]) = if zbd { (ZONED_DEVICE, &["--size=2z"]) } else { (DEVICE, &[]) };
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .current_dir(cwd)
        .args(["bench", "--device", device])
        .arg(file)
        .args(["--runtime=1", "--size=16m"])
        .args(size)
        .args(extra)
        .arg("--output-format=json")
        .output()
        .expect("run mqblk bench")
}

fn json(out: &Output, what: &str) -> Value {
    assert!(out.status.success(), "{what}: exit {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: JSON: {e}"))
}

#[test]
fn every_block_engine_example_runs_or_is_refused_as_the_ledger_says() {
    let dir = examples();
    let files = block_engine_files(&dir);
    let ledger = ledger();
    let listed: Vec<&String> = ledger.keys().collect();
    assert_eq!(files.iter().collect::<Vec<_>>(), listed, "the ledger lists exactly fio's block-engine files");
    let mut ran = 0;
    for (file, refused) in &ledger {
        let cwd = scratch(file.trim_end_matches(".fio"));
        let out = bench(&dir.join(file), &[], &cwd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        match refused {
            None => {
                let v = json(&out, file);
                let jobs = v["jobs"].as_array().expect("jobs");
                assert!(!jobs.is_empty(), "{file}: no job reported");
                for job in jobs {
                    assert_eq!(job["error"], 0, "{file}: job {} failed", job["jobname"]);
                }
                ran += 1;
            }
            Some(reason) => {
                assert_eq!(out.status.code(), Some(2), "{file}: refused as bad input, got {:?}: {stderr}", out.status);
                assert!(stderr.contains(reason.as_str()), "{file}: refused for '{reason}', said: {stderr}");
            }
        }
        let _ = std::fs::remove_dir_all(&cwd);
    }
    eprintln!("{ran} of {} block-engine job files ran; {} refused", ledger.len(), ledger.len() - ran);
}

/// The jobs of `v` by name: (start ms, runtime ms, groupid).
fn timeline(v: &Value) -> Vec<(String, u64, u64, u64)> {
    let jobs = v["jobs"].as_array().expect("jobs");
    jobs.iter()
        .map(|j| {
            let n = |k: &str| j[k].as_u64().unwrap_or_else(|| panic!("{k} of {}", j["jobname"]));
            (j["jobname"].as_str().unwrap().to_string(), n("job_start"), n("job_runtime"), n("groupid"))
        })
        .collect()
}

/// Each entry is the next group (0, 1, ...) and starts after the one
/// before it ended.
fn assert_one_group_after_another(t: &[(String, u64, u64, u64)]) {
    for (i, pair) in t.windows(2).enumerate() {
        assert_eq!((pair[0].3, pair[1].3), (i as u64, i as u64 + 1), "a group each: {t:?}");
        assert!(pair[1].1 >= pair[0].1 + pair[0].2, "{} started before {} ended: {t:?}", pair[1].0, pair[0].0);
    }
}

#[test]
fn wait_for_starts_each_group_after_the_one_it_waits_for() {
    // examples/waitfor.fio: writers; readers (new_group, wait_for=writers);
    // writers2 (wait_for=readers); readers2 (wait_for=writers2), 4 clones
    // each, group_reporting folding each group into one entry.
    let dir = examples();
    let v = json(&bench(&dir.join("waitfor.fio"), &[], &scratch("waitfor")), "waitfor.fio");
    let t = timeline(&v);
    let names: Vec<&str> = t.iter().map(|j| j.0.as_str()).collect();
    assert_eq!(names, ["writers", "readers", "writers2", "readers2"], "one entry per group: {t:?}");
    assert_one_group_after_another(&t);
}

#[test]
fn stonewalled_jobs_run_one_after_another() {
    // examples/ssd-test.fio: four jobs, each behind a stonewall.
    let dir = examples();
    let v = json(&bench(&dir.join("ssd-test.fio"), &[], &scratch("ssd-test")), "ssd-test.fio");
    let t = timeline(&v);
    assert_eq!(t.len(), 4, "{t:?}");
    assert_one_group_after_another(&t);
}

#[test]
fn fixed_and_poisson_rates_are_held() {
    // examples/fixed-rate-submission.fio (rate_iops=1000) and
    // poisson-rate-submission.fio (rate_iops=50 as a poisson process),
    // for 2 s: one I/O due each ms from the start (the count is the
    // runtime in ms, plus the one at 0), and a Poisson count of mean 50 a
    // second (within about three standard deviations). Never more than
    // that; fewer by up to 50 ms of I/Os more, as the job's runtime also
    // counts the supervisor's stop (a 20 ms tick, later on a busy
    // machine) and the wait for its last I/O.
    let dir = examples();
    for (file, per_s, slack) in
        [("fixed-rate-submission.fio", 1000.0, 3.0), ("poisson-rate-submission.fio", 50.0, 32.0)]
    {
        let v = json(&bench(&dir.join(file), &["--runtime=2"], &scratch(file)), file);
        let job = &v["jobs"][0];
        let ios = job["read"]["total_ios"].as_u64().unwrap() as f64;
        let secs = job["job_runtime"].as_u64().unwrap() as f64 / 1e3;
        let want = per_s * secs + 1.0;
        let (most, least) = (want + slack, want - slack - per_s * 0.05);
        assert!((least..=most).contains(&ios), "{file}: {ios} I/Os in {secs} s, {want} due at rate_iops={per_s}");
    }
}

#[test]
fn fios_own_tool_reads_the_bandwidth_log() {
    // examples/ssd-steadystate.fio writes a bandwidth log (write_bw_log);
    // fio2gnuplot (Debian's fio package; scripts/test-all.sh installs it)
    // reads it and makes its gnuplot data.
    let dir = examples();
    let cwd = scratch("steadystate-logs");
    json(&bench(&dir.join("ssd-steadystate.fio"), &[], &cwd), "ssd-steadystate.fio");
    let logs: Vec<String> = std::fs::read_dir(&cwd)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log") && n.contains("_bw."))
        .collect();
    assert!(!logs.is_empty(), "no bandwidth log in {}", cwd.display());
    for log in &logs {
        let text = std::fs::read_to_string(cwd.join(log)).unwrap();
        for line in text.lines() {
            let fields: Vec<&str> = line.split(", ").collect();
            assert!(fields.len() == 5 && fields.iter().all(|f| f.parse::<u64>().is_ok()), "{log}: '{line}'");
        }
    }
    let out = Command::new("fio2gnuplot").current_dir(&cwd).args(["-b", "-d", "."]).output().expect("run fio2gnuplot");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "fio2gnuplot: {said}{}", String::from_utf8_lossy(&out.stderr));
    // fio2gnuplot reads each log into a temporary data file that names it,
    // and sums them all in result.global.
    for i in 0..logs.len() {
        let data = std::fs::read_to_string(cwd.join(format!("gnuplot_temp_file.{i}"))).unwrap_or_default();
        assert!(data.lines().count() > 1, "fio2gnuplot read nothing of log {i}: {said}");
        assert!(logs.iter().any(|l| data.starts_with(&format!("#Temporary file based on file {l}"))), "{data:.80}");
    }
    let global = std::fs::read_to_string(cwd.join("result.global")).expect("fio2gnuplot's result.global");
    let values: u64 = global
        .lines()
        .find_map(|l| l.strip_prefix("values_count="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no values_count in result.global: {global}"));
    assert!(values > 0, "fio2gnuplot counted no values: {global}");
    let _ = std::fs::remove_dir_all(&cwd);
}

#[test]
fn flow_weights_set_the_ratio_of_ios() {
    // examples/flow.fio: job1 (randread, flow=8) and job2 (write, flow=1)
    // share flow 0: 8 of job1's I/Os for each of job2's (fio's flow
    // control counts every I/O; flow_sleep=1000 µs when ahead).
    let dir = examples();
    let v = json(&bench(&dir.join("flow.fio"), &[], &scratch("flow")), "flow.fio");
    let ios = |name: &str| {
        let job = v["jobs"].as_array().unwrap().iter().find(|j| j["jobname"] == name).expect("job");
        job["read"]["total_ios"].as_u64().unwrap() + job["write"]["total_ios"].as_u64().unwrap()
    };
    let (job1, job2) = (ios("job1"), ios("job2"));
    assert!(job2 > 0, "job2 issued nothing");
    // The ratio holds to within one I/O of each job's count at any time.
    let ratio = job1 as f64 / job2 as f64;
    assert!((ratio - 8.0).abs() <= 8.0 / job2 as f64 + 0.05, "job1 {job1} : job2 {job2} = {ratio}");
}

#[test]
fn exit_what_stops_its_group_the_phase_or_the_run() {
    // Three phases of a fast job (rate-limited, time_based 30 s) beside
    // an exitall job that ends early: exit_what=group stops only its own
    // group (the fast job in another group runs its 2 s), stonewall
    // stops the phase, all ends the run (the last phase never starts).
    let cwd = scratch("exit-what");
    let file = cwd.join("exit.fio");
    let fast = "rw=randread\nrate_iops=200\ntime_based\nruntime=2\n";
    let text = format!(
        "[g]\nnumber_ios=10\nexitall\nexit_what=group\n[g-other]\nnew_group\n{fast}\
         [s]\nstonewall\nnumber_ios=10\nexitall\nexit_what=stonewall\n[s-other]\nnew_group\n{fast}\
         [a]\nstonewall\nnumber_ios=10\nexitall\nexit_what=all\n[a-other]\n{fast}[never]\nstonewall\n"
    );
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .current_dir(&cwd)
        .args(["bench", "--device", DEVICE, "exit.fio", "--output-format=json"])
        .output()
        .unwrap();
    let v = json(&out, "exit.fio");
    let runtime = |name: &str| {
        v["jobs"].as_array().unwrap().iter().find(|j| j["jobname"] == name).map(|j| j["job_runtime"].as_u64().unwrap())
    };
    assert!(runtime("g-other").unwrap() >= 1900, "exit_what=group stopped another group: {:?}", runtime("g-other"));
    assert!(runtime("s-other").unwrap() < 1900, "exit_what=stonewall left the phase running");
    assert!(runtime("a-other").unwrap() < 1900, "exit_what=all left the phase running");
    assert_eq!(runtime("never"), None, "exit_what=all: a later phase ran");
}

#[test]
fn a_steady_job_stops_and_reports_its_window() {
    // examples/steadystate.fio's criteria (iops:10%, bw_slope:1%) over
    // a short window: a null device's IOPS settle within seconds, so the
    // 30 s jobs stop early with attained=1 and fio's "steadystate" object.
    let dir = examples();
    let extra = ["--runtime=30", "--ss_dur=3", "--ss_ramp=1", "--ss=iops:50%"];
    let v = json(&bench(&dir.join("steadystate.fio"), &extra, &scratch("steadystate")), "steadystate.fio");
    for job in v["jobs"].as_array().unwrap() {
        let ss = &job["steadystate"];
        assert_eq!(ss["attained"], 1, "{}: {ss}", job["jobname"]);
        assert_eq!(ss["data"]["iops"].as_array().unwrap().len(), 3, "three 1 s samples in a 3 s window");
        assert!(job["job_runtime"].as_u64().unwrap() < 29_000, "{} ran its whole runtime", job["jobname"]);
    }
}

#[test]
fn cmdprio_percentage_gives_its_share_of_ios_the_command_priority() {
    // examples/cmdprio-percentage.fio: prioclass=3 (idle) for the job,
    // cmdprio_percentage=20 with cmdprio_class=1 (RT); log_prio=1 logs
    // each I/O's priority (class << 13 | level) in its latency log.
    let dir = examples();
    let cwd = scratch("cmdprio");
    json(&bench(&dir.join("cmdprio-percentage.fio"), &["--size=64m"], &cwd), "cmdprio-percentage.fio");
    let log = std::fs::read_to_string(cwd.join("prio-run.log_clat.1.log")).expect("the clat log");
    let prios: Vec<&str> = log.lines().map(|l| l.rsplit(", ").next().unwrap()).collect();
    assert_eq!(prios.len(), 512, "64 MiB of 128 KiB reads");
    let rt = prios.iter().filter(|p| **p == "0x2000").count();
    let idle = prios.iter().filter(|p| **p == "0x6004").count();
    assert_eq!(rt + idle, prios.len(), "every I/O RT level 0 or the job's idle level 4");
    assert!((72..=133).contains(&rt), "{rt} of 512 I/Os RT, 20% asked");
}

#[test]
fn fio_generate_plots_draws_bench_logs() {
    // fio_generate_plots (Debian's fio package, with gnuplot: the test
    // command installs gnuplot-nox) plots every *_bw, *_iops, *_lat,
    // *_clat and *_slat log in its directory into TITLE-KIND.svg: 2 s of
    // 100 ms averages give each plot a line of about 20 points.
    let cwd = scratch("generate-plots");
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .current_dir(&cwd)
        .args(["bench", "--device", DEVICE, "--name=j", "--rw=randread", "--runtime=2", "--time_based"])
        .args(["--write_bw_log=j", "--write_iops_log=j", "--write_lat_log=j", "--log_avg_msec=100"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plots = Command::new("fio_generate_plots").current_dir(&cwd).arg("mqblk").output().expect("fio_generate_plots");
    assert!(plots.status.success(), "{}", String::from_utf8_lossy(&plots.stdout));
    for kind in ["bw", "iops", "lat", "clat", "slat"] {
        let svg = std::fs::read_to_string(cwd.join(format!("mqblk-{kind}.svg")))
            .unwrap_or_else(|e| panic!("mqblk-{kind}.svg: {e}: {}", String::from_utf8_lossy(&plots.stdout)));
        // The first plot's line: gnuplot's path after its legend sample.
        let plot = svg.split("gnuplot_plot_1\"").nth(1).unwrap_or_else(|| panic!("{kind}: no plot in the SVG"));
        let path = plot.split("d='").nth(1).and_then(|p| p.split('\'').next()).expect("a path");
        let points = path.matches(" L").count();
        assert!(points >= 10, "{kind}: a line of {points} points from 2 s of 100 ms samples");
    }
    let _ = std::fs::remove_dir_all(&cwd);
}
