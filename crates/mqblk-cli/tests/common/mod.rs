//! What the experiment and guest tests share: running `mqblk experiment
//! NAME --quick` into a fresh folder and reading what it wrote, and
//! running a script in the Linux 6.12 or 7.x guest (tests/guest/run.sh),
//! and `mqblk serve` for the NBD tests (nbd.rs).

#![allow(dead_code)] // each test binary uses its own part

pub mod nbd;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// What `mqblk experiment NAME --quick` printed and wrote.
pub struct QuickRun {
    /// The tables on stdout.
    pub table: String,
    /// NAME.json.
    pub json: Value,
    /// NAME.svg.
    pub svg: String,
    /// The size of NAME.png.
    pub png_bytes: u64,
}

/// Runs `mqblk experiment NAME --quick` (asserting success) into a folder
/// of its own, reads its files and removes the folder.
pub fn quick_experiment(name: &str) -> QuickRun {
    let dir = std::env::temp_dir().join(format!("mqblk-exp-{name}-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["experiment", name, "--quick", "--out", dir.to_str().unwrap()])
        .output()
        .expect("run mqblk");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let file = |ext: &str| dir.join(format!("{name}.{ext}"));
    let json = std::fs::read_to_string(file("json")).unwrap_or_else(|e| panic!("{name}.json: {e}"));
    let run = QuickRun {
        table: String::from_utf8_lossy(&out.stdout).into_owned(),
        json: serde_json::from_str(&json).expect("valid JSON"),
        svg: std::fs::read_to_string(file("svg")).unwrap_or_else(|e| panic!("{name}.svg: {e}")),
        png_bytes: std::fs::metadata(file("png")).map_or(0, |m| m.len()),
    };
    let _ = std::fs::remove_dir_all(&dir);
    run
}

/// The guest kernel series tests/guest/run.sh boots unless told otherwise.
pub const DEFAULT_SERIES: &str = "6.12";

/// Runs tests/guest/run.sh SCRIPT from the workspace root with `envs` in
/// the Linux 6.12 guest, asserts it succeeded and printed `passed`, and
/// returns its stdout.
pub fn guest_script(script: &str, envs: &[(&str, &str)], passed: &str) -> String {
    guest_script_on(DEFAULT_SERIES, script, envs, passed)
}

/// As `guest_script`, in the guest of kernel series `series`
/// (MQBLK_GUEST_SERIES: "6.12" or "7").
pub fn guest_script_on(series: &str, script: &str, envs: &[(&str, &str)], passed: &str) -> String {
    run_checked("tests/guest/run.sh", &[script], envs, passed, series)
}

/// The name of a guest run's logs in target/guest-logs/: SCRIPT's file
/// stem, with the series after it unless it is the default one
/// (tests/guest/smoke.sh on 7: smoke_7). It is the NAME of the test
/// guest_NAME_script_passes, by which scripts/test-all.sh finds the logs
/// of a test that did not pass.
fn log_stem(script: &str, series: &str) -> String {
    let stem = script.rsplit('/').next().unwrap_or(script).trim_end_matches(".sh");
    if series == DEFAULT_SERIES {
        stem.to_string()
    } else {
        format!("{stem}_{}", series.replace('.', "_"))
    }
}

/// Runs `program ARGS` from the workspace root with `envs` and
/// MQBLK_GUEST_SERIES=`series`, asserts it succeeded and printed `passed`,
/// and returns its stdout.
///
/// Its stdout and stderr go to target/guest-logs/NAME.out and .err as it
/// writes them (NAME: `log_stem` of the last argument), so a run that
/// nextest kills still leaves what it printed (scripts/test-all.sh shows
/// them for each guest test that did not pass).
fn run_checked(program: &str, args: &[&str], envs: &[(&str, &str)], passed: &str, series: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let logs = root.join("target/guest-logs");
    std::fs::create_dir_all(&logs).unwrap_or_else(|e| panic!("mkdir {}: {e}", logs.display()));
    let stem = log_stem(args.last().copied().unwrap_or(program), series);
    let log = |ext: &str| logs.join(format!("{stem}.{ext}"));
    let create = |path: PathBuf| std::fs::File::create(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let status = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .env("MQBLK_GUEST_SERIES", series)
        .current_dir(&root)
        .stdout(create(log("out")))
        .stderr(create(log("err")))
        .status()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    let read = |ext: &str| std::fs::read_to_string(log(ext)).unwrap_or_default();
    let (stdout, stderr) = (read("out"), read("err"));
    assert!(status.success(), "{program} {args:?}: {status}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains(passed), "stdout:\n{stdout}\nstderr:\n{stderr}");
    stdout
}

/// Builds the release binary the guest runs (`cargo build --release -p
/// mqblk-cli`); returns the guest's time limit: 25 minutes unless
/// MQBLK_GUEST_TIMEOUT says otherwise (TCG on a loaded machine is slow).
/// It stays below nextest's 30 (.config/nextest.toml) with the build
/// before it, so a hung guest reports where it hung (tests/guest/run.sh)
/// instead of being killed with the test.
fn build_release() -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = Command::new(cargo)
        .args(["build", "--release", "-p", "mqblk-cli"])
        .current_dir(&root)
        .status()
        .expect("spawn cargo build --release -p mqblk-cli");
    assert!(build.success(), "cargo build --release -p mqblk-cli: {build}");
    std::env::var("MQBLK_GUEST_TIMEOUT").unwrap_or_else(|_| "1500".into())
}

/// Builds the release binary the guest runs, then runs tests/guest/run.sh
/// SCRIPT as `guest_script` does, with the guest's time limit at 25
/// minutes unless MQBLK_GUEST_TIMEOUT says otherwise.
pub fn guest_script_release(script: &str, passed: &str) -> String {
    guest_script_release_on(DEFAULT_SERIES, script, passed)
}

/// As `guest_script_release`, in the guest of kernel series `series`
/// (MQBLK_GUEST_SERIES: "6.12" or "7").
pub fn guest_script_release_on(series: &str, script: &str, passed: &str) -> String {
    let timeout_s = build_release();
    guest_script_on(series, script, &[("MQBLK_GUEST_TIMEOUT", &timeout_s)], passed)
}

/// As `guest_script_release`, for a script that boots the guest itself
/// (tests/guest/vhost.sh: its server runs on the host, then run.sh).
pub fn host_script_release(script: &str, passed: &str) -> String {
    let timeout_s = build_release();
    run_checked(script, &[], &[("MQBLK_GUEST_TIMEOUT", &timeout_s)], passed, DEFAULT_SERIES)
}
