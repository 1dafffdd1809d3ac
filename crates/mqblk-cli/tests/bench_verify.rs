//! fio's verify family through `mqblk bench`: every method passes its
//! own writes, a device that lost or changed data is caught (exit status
//! 1, err=84, fio's message naming offset and check), `verify_backlog`
//! checks while the job writes, and `verify_state_save` then
//! `verify_only` checks across runs exactly the writes that completed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const MEMORY: &str = "null:gb=1,memory_backed=1";

/// `mqblk bench ARGS --output-format=json` in `cwd`.
fn bench(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .current_dir(cwd)
        .arg("bench")
        .args(args)
        .arg("--output-format=json")
        .output()
        .expect("run mqblk bench")
}

fn job(out: &Output) -> Value {
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    v["jobs"][0].clone()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// (blocks checked, of those during the run, failed).
fn counts(job: &Value) -> (u64, u64, u64) {
    let v = &job["mqblk"]["verify"];
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("verify.{k}: {job}"));
    (n("blocks"), n("during_run"), n("failed"))
}

/// A scratch directory, the runs' working directory (state and dump
/// files land there).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mqblk-bench-verify-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn every_method_checks_what_it_wrote() {
    let dir = scratch("methods");
    let methods = [
        "md5",
        "crc64",
        "crc32c",
        "crc32c-intel",
        "crc32",
        "crc16",
        "crc7",
        "xxhash",
        "sha512",
        "sha256",
        "sha1",
        "sha3-224",
        "sha3-256",
        "sha3-384",
        "sha3-512",
        "meta",
        "null",
    ];
    for m in methods {
        let verify = format!("--verify={m}");
        let out = bench(
            &dir,
            &["--device", MEMORY, "--name=w", "--rw=randwrite", "--bs=4k", "--size=1m", "--iodepth=8", &verify],
        );
        assert!(out.status.success(), "{m}: {}", stderr(&out));
        let j = job(&out);
        assert_eq!((j["error"].as_i64(), counts(&j)), (Some(0), (256, 0, 0)), "{m}: every block written checked");
    }
    for pattern in
        [["--verify=pattern", "--verify_pattern=0xdeadbeef%o"], ["--verify=pattern_hdr", "--verify_pattern=\"ab\"12"]]
    {
        let mut args = vec!["--device", MEMORY, "--name=w", "--rw=write", "--bs=4k", "--size=1m"];
        args.extend(pattern);
        let out = bench(&dir, &args);
        assert!(out.status.success(), "{pattern:?}: {}", stderr(&out));
        assert_eq!(counts(&job(&out)), (256, 0, 0), "{pattern:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_device_that_keeps_nothing_fails_every_block_and_the_run() {
    // A null device without memory reads zeros: no header anywhere.
    let dir = scratch("nothing");
    let out = bench(&dir, &["--device", "null:gb=1", "--name=w", "--rw=write", "--bs=4k", "--size=1m", "--verify=md5"]);
    assert_eq!(out.status.code(), Some(1), "a verify failure fails the run: {}", stderr(&out));
    let j = job(&out);
    assert_eq!(j["error"], 84, "EILSEQ, as fio");
    assert_eq!(counts(&j), (256, 0, 256), "without verify_fatal every block is checked and counted");
    let err = stderr(&out);
    assert!(
        err.contains(
            "w: verify: bad magic header 0000000000000000, wanted mqblkvfy at file null offset 0, length 4096"
        ),
        "{err}"
    );
    assert!(err.contains("w: verify: 256 of 256 blocks failed"), "{err}");
    // verify_fatal: the first failure stops the checks.
    let out = bench(
        &dir,
        &[
            "--device",
            "null:gb=1",
            "--name=w",
            "--rw=write",
            "--bs=4k",
            "--size=1m",
            "--verify=md5",
            "--verify_fatal=1",
            "--iodepth=8",
        ],
    );
    assert_eq!((out.status.code(), counts(&job(&out)).2), (Some(1), 1), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn verify_backlog_checks_while_the_job_writes() {
    let dir = scratch("backlog");
    let base =
        ["--device", MEMORY, "--name=w", "--rw=randwrite", "--bs=4k", "--size=1m", "--iodepth=8", "--verify=crc32c"];
    let at_end = bench(&dir, &base);
    assert_eq!(counts(&job(&at_end)), (256, 0, 0), "without a backlog, all at the end");
    let mut args = base.to_vec();
    args.push("--verify_backlog=16");
    let (blocks, during_run, failed) = counts(&job(&bench(&dir, &args)));
    assert_eq!((blocks, failed), (256, 0), "each block written checked once");
    assert!(
        during_run >= 256 - 16 - 8,
        "all but the last batch and the writes in flight checked during the run: {during_run}"
    );
    // On a device that keeps nothing, a fatal backlog check stops the
    // writes long before the job's 256.
    args[1] = "null:gb=1";
    args.push("--verify_fatal=1");
    let out = bench(&dir, &args);
    let j = job(&out);
    assert_eq!((out.status.code(), j["error"].as_i64()), (Some(1), Some(84)));
    let writes = j["write"]["total_ios"].as_u64().unwrap();
    assert!(writes < 16 + 8 + 8, "the first backlog check failed and stopped the job: {writes} writes");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn norandommap_blocks_written_twice_hold_their_last_write() {
    let dir = scratch("norandommap");
    // At iodepth 1 the write sequence is checked: a block written twice
    // must hold the second write.
    let out = bench(
        &dir,
        &[
            "--device",
            MEMORY,
            "--name=w",
            "--rw=randwrite",
            "--bs=4k",
            "--size=1m",
            "--norandommap=1",
            "--verify=sha1",
            "--verify_write_sequence=1",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let (blocks, _, failed) = counts(&job(&out));
    assert_eq!(failed, 0);
    assert!(blocks < 256 && blocks > 128, "256 writes drawn at random hit fewer blocks, each checked once: {blocks}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_state_saved_while_writing_lets_verify_only_check_just_those_writes() {
    let dir = scratch("state");
    let file = dir.join("dev.img");
    let filename = format!("--filename={}", file.display());
    let job_args =
        [filename.as_str(), "--size=1m", "--name=w", "--rw=randwrite", "--bs=4k", "--iodepth=4", "--verify=crc32c"];
    // The first run stops after 100 of its 256 writes, as if it crashed.
    let mut first = job_args.to_vec();
    first.extend(["--number_ios=100", "--do_verify=0"]);
    let out = bench(&dir, &first);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(counts(&job(&out)), (0, 0, 0), "do_verify=0 writes headers and checks nothing");
    let state = std::fs::read_to_string(dir.join("local-w-0-verify.state")).expect("fio's state file name");
    assert!(state.contains("issued 100\n"), "{state}");
    // verify_only with the state: the 100 completed writes, all good.
    let mut only = job_args.to_vec();
    only.extend(["--verify_only=1", "--verify_state_load=1"]);
    let out = bench(&dir, &only);
    assert!(out.status.success(), "{}", stderr(&out));
    let j = job(&out);
    assert_eq!((counts(&j), j["write"]["total_ios"].as_u64()), ((100, 0, 0), Some(0)), "checked, nothing written");
    // Without it, the whole job's blocks: the 156 never written fail.
    only.pop();
    let out = bench(&dir, &only);
    assert_eq!((out.status.code(), counts(&job(&out))), (Some(1), (256, 0, 156)));
    // A changed byte in a written block is caught, dumped as fio dumps.
    let mut data = std::fs::read(&file).unwrap();
    let block = (0..256).find(|b| &data[b * 4096..b * 4096 + 8] == b"mqblkvfy").expect("a written block");
    data[block * 4096 + 2000] ^= 0xff;
    std::fs::write(&file, &data).unwrap();
    let mut dump = job_args.to_vec();
    dump.extend(["--verify_only=1", "--verify_state_load=1", "--verify_dump=1"]);
    let out = bench(&dir, &dump);
    assert_eq!((out.status.code(), counts(&job(&out))), (Some(1), (100, 0, 1)));
    let offset = block * 4096;
    let err = stderr(&out);
    let want = format!("w: crc32c: verify failed at file dev.img offset {offset}, length 4096");
    assert!(err.contains(&want) && err.contains("Expected CRC: ") && err.contains("Received CRC: "), "{err}");
    let expected = std::fs::read(dir.join(format!("dev.img.{offset}.expected"))).unwrap();
    let received = std::fs::read(dir.join(format!("dev.img.{offset}.received"))).unwrap();
    let differ: Vec<usize> = (0..4096).filter(|&i| expected[i] != received[i]).collect();
    assert_eq!(differ, [2000], "the dumps differ in the changed byte only");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_read_job_checks_what_an_earlier_job_wrote() {
    // fio's examples/surface-scan.fio: meta headers every 512 bytes and a
    // pattern, written then read back by a job of its own.
    let dir = scratch("read");
    let file = dir.join("dev.img");
    let filename = format!("--filename={}", file.display());
    let common = [
        filename.as_str(),
        "--size=1m",
        "--bs=64k",
        "--verify=meta",
        "--verify_pattern=0xaa555aa5",
        "--verify_interval=512",
    ];
    let mut write = common.to_vec();
    write.extend(["--name=w", "--rw=write", "--do_verify=0"]);
    assert!(bench(&dir, &write).status.success());
    let mut read = common.to_vec();
    read.extend(["--name=r", "--rw=read"]);
    let out = bench(&dir, &read);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(counts(&job(&out)), (16, 0, 0), "each 64k read checked");
    // Another pattern is caught, in the first interval's data.
    read[4] = "--verify_pattern=0xaa555aa6";
    let out = bench(&dir, &read);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("r: got pattern 'a5', wanted 'a6'. Bad bits 2")
            && err.contains("r: pattern: verify failed at file dev.img offset 0, length 512"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
