//! What the experiment and guest tests share: running `mqblk experiment
//! NAME --quick` into a fresh folder and reading what it wrote, and
//! running a script in the Linux 6.12 guest (tests/guest/run.sh), and
//! `mqblk serve` for the NBD tests (nbd.rs).

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

/// Runs tests/guest/run.sh SCRIPT from the workspace root with `envs`,
/// asserts it succeeded and printed `passed`, and returns its stdout.
pub fn guest_script(script: &str, envs: &[(&str, &str)], passed: &str) -> String {
    run_checked("tests/guest/run.sh", &[script], envs, passed)
}

/// Runs `program ARGS` from the workspace root with `envs`, asserts it
/// succeeded and printed `passed`, and returns its stdout.
///
/// Its stdout and stderr go to target/guest-logs/SCRIPT.out and .err as it
/// writes them (SCRIPT: the last argument's file stem), so a run that
/// nextest kills still leaves what it printed (scripts/test-all.sh shows
/// them for each guest test that did not pass).
fn run_checked(program: &str, args: &[&str], envs: &[(&str, &str)], passed: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let logs = root.join("target/guest-logs");
    std::fs::create_dir_all(&logs).unwrap_or_else(|e| panic!("mkdir {}: {e}", logs.display()));
    let script = args.last().copied().unwrap_or(program);
    let stem = script.rsplit('/').next().unwrap_or(script).trim_end_matches(".sh");
    let log = |ext: &str| logs.join(format!("{stem}.{ext}"));
    let create = |path: PathBuf| std::fs::File::create(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let status = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
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
    let timeout_s = build_release();
    guest_script(script, &[("MQBLK_GUEST_TIMEOUT", &timeout_s)], passed)
}

/// As `guest_script_release`, for a script that boots the guest itself
/// (tests/guest/vhost.sh: its server runs on the host, then run.sh).
pub fn host_script_release(script: &str, passed: &str) -> String {
    let timeout_s = build_release();
    run_checked(script, &[], &[("MQBLK_GUEST_TIMEOUT", &timeout_s)], passed)
}
