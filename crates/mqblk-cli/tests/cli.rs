//! `mqblk bench` end to end: run the binary, parse its JSON, check the
//! numbers add up; bad input exits 2 with a message naming the problem.

use std::process::{Command, Output};

use serde_json::Value;

fn mqblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk")).args(args).output().expect("run mqblk")
}

fn bench_json(args: &[&str]) -> Value {
    let mut all = vec!["bench", "--output-format=json"];
    all.extend_from_slice(args);
    let out = mqblk(&all);
    assert!(out.status.success(), "mqblk {all:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON on stdout")
}

#[test]
fn number_ios_runs_exactly_that_many() {
    let v = bench_json(&[
        "--device",
        "null:gb=1,irqmode=0",
        "--name=n",
        "--rw=randread",
        "--iodepth=16",
        "--number_ios=5000",
    ]);
    let job = &v["jobs"][0];
    assert_eq!(job["jobname"], "n");
    assert_eq!(job["read"]["total_ios"], 5000);
    assert_eq!(job["read"]["io_bytes"], 5000 * 4096);
    assert_eq!(job["write"]["total_ios"], 0);
    assert_eq!(v["mqblk"]["dispatched"], 5000);
    assert_eq!(v["mqblk"]["completed"], 5000);
    let clat = &job["read"]["clat_ns"];
    assert_eq!(clat["N"], 5000);
    assert!(clat["percentile"]["99.000000"].as_u64().unwrap() >= clat["min"].as_u64().unwrap());
    assert!(job["read"]["iops"].as_f64().unwrap() > 0.0);
}

#[test]
fn total_latency_percentiles_only_with_lat_percentiles_as_in_fio() {
    let run = |extra: &str| {
        let mut args = vec!["--device", "null:gb=1,irqmode=0", "--name=l", "--rw=randread", "--number_ios=2000"];
        args.extend(extra.split_whitespace());
        bench_json(&args)["jobs"][0]["read"].clone()
    };
    let plain = run("");
    assert!(plain["clat_ns"]["percentile"]["50.000000"].as_u64().is_some(), "clat percentiles by default");
    assert!(
        plain["lat_ns"].get("percentile").is_none(),
        "no total-latency percentiles by default: {}",
        plain["lat_ns"]
    );
    assert_eq!(plain["lat_ns"]["N"], 2000, "the total latency's summary is kept");
    let with = run("--lat_percentiles=1");
    let lat = &with["lat_ns"];
    let p99 = lat["percentile"]["99.000000"].as_u64().expect("lat percentiles with lat_percentiles=1");
    assert!(p99 >= lat["min"].as_u64().unwrap() && p99 <= lat["max"].as_u64().unwrap() * 2, "{lat}");
    let bad = mqblk(&["bench", "--device", "null:gb=1", "--name=x", "--lat_percentiles=maybe", "--number_ios=1"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("lat_percentiles"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn io_size_loops_over_a_smaller_region_and_number_ios_still_stops_it() {
    // 1 MiB region of 4k blocks (256), io_size 4 MiB: fio loops over the
    // region until 1024 I/Os are done; number_ios ends it earlier.
    let base = ["--device", "null:gb=1,irqmode=0", "--name=l", "--rw=randread", "--size=1m", "--iodepth=8"];
    let mut args = base.to_vec();
    args.push("--io_size=4m");
    assert_eq!(bench_json(&args)["jobs"][0]["read"]["total_ios"], 1024);
    args.push("--number_ios=700");
    assert_eq!(bench_json(&args)["jobs"][0]["read"]["total_ios"], 700);
    let mut args = base.to_vec();
    args.push("--io_limit=8k");
    assert_eq!(bench_json(&args)["jobs"][0]["read"]["total_ios"], 2);
    assert_eq!(bench_json(&base)["jobs"][0]["read"]["total_ios"], 256);
    let out = mqblk(&["bench", "--device", "null:gb=1", "--name=z", "--io_size=0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("io_size: must be positive"));
}

#[test]
fn size_limits_a_sequential_job() {
    let v = bench_json(&[
        "--device",
        "null:gb=1,irqmode=1",
        "--name=s",
        "--rw=write",
        "--bs=64k",
        "--size=4m",
        "--iodepth=4",
    ]);
    assert_eq!(v["jobs"][0]["write"]["total_ios"], 64);
    assert_eq!(v["jobs"][0]["write"]["io_kbytes"], 4096);
}

#[test]
fn mixed_jobs_with_numjobs_and_group_reporting() {
    let v = bench_json(&[
        "--device",
        "null:gb=1,irqmode=0,submit_queues=2",
        "--group_reporting",
        "--name=mix",
        "--rw=randrw",
        "--rwmixread=70",
        "--numjobs=3",
        "--number_ios=3000",
        "--iodepth=8",
    ]);
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "group_reporting merges the clones");
    assert_eq!(jobs[0]["jobs"], 3);
    let reads = jobs[0]["read"]["total_ios"].as_u64().unwrap();
    let writes = jobs[0]["write"]["total_ios"].as_u64().unwrap();
    assert_eq!(reads + writes, 9000);
    assert!((5400..=7200).contains(&reads), "about 70% reads: {reads}");
    assert_eq!(v["mqblk"]["completed"], 9000);
}

#[test]
fn jobs_start_together_so_group_bandwidth_stays_within_the_device() {
    // 24 jobs each allocating 17 MiB of buffers on a device that moves at
    // most 4 channels x 100 MiB/s. Had each job started its clock as soon
    // as it had set up (not after all had, as fio does), the early ones
    // would run alone and the group would report more than the device can
    // move (seen: 2x at 72 jobs).
    let v = bench_json(&[
        "--device",
        "null:gb=64,irqmode=2,completion_nsec=20000,channels=4,mbps=100,max_sectors=512",
        "--group_reporting",
        "--name=t",
        "--rw=randread",
        "--bs=1m",
        "--numjobs=24",
        "--iodepth=17",
        "--runtime=500ms",
        "--time_based",
        "--gtod_reduce=1",
    ]);
    let bw_mib = v["jobs"][0]["read"]["bw_bytes"].as_f64().unwrap() / f64::from(1 << 20);
    assert!(bw_mib > 0.0 && bw_mib <= 4.0 * 100.0 * 1.05, "group bandwidth {bw_mib:.0} MiB/s");
}

#[test]
fn time_based_run_with_gtod_reduce_and_ctx_counters() {
    let v = bench_json(&[
        "--device",
        "null:gb=1,irqmode=2,completion_nsec=50000",
        "--name=t",
        "--rw=randread",
        "--iodepth=4",
        "--runtime=300ms",
        "--time_based",
        "--gtod_reduce=1",
    ]);
    let job = &v["jobs"][0];
    let runtime = job["job_runtime"].as_u64().unwrap();
    assert!((250..5000).contains(&runtime), "runtime {runtime} ms");
    assert!(job["read"]["total_ios"].as_u64().unwrap() > 0);
    assert!(job["read"]["clat_ns"].get("percentile").is_none(), "gtod_reduce measures no latency");
    // The job waits for timer completions: it must really sleep.
    assert!(job["mqblk"]["ctx_voluntary"].as_u64().unwrap() > 0);
    assert!(job["mqblk"]["completion_sleeps"].as_u64().unwrap() > 0);
    assert!(v["mqblk"]["ctx_voluntary_per_sec"].as_f64().unwrap() > 0.0);
}

#[test]
fn job_file_is_read() {
    let dir = std::env::temp_dir().join(format!("mqblk-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("two.fio");
    std::fs::write(
        &path,
        "[global]\nbs=8k\niodepth=2\nnumber_ios=100\ndevice=null:gb=1,irqmode=0\n[r]\nrw=read\n[w]\nrw=randwrite\n",
    )
    .unwrap();
    let v = bench_json(&[path.to_str().unwrap()]);
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0]["jobname"], "r");
    assert_eq!(jobs[0]["read"]["io_bytes"], 100 * 8192);
    assert_eq!(jobs[1]["write"]["total_ios"], 100);
    assert_eq!(v["global options"]["bs"], "8k");
}

#[test]
fn human_report_and_stats_dump() {
    let out = mqblk(&["bench", "--device", "null:gb=1,irqmode=0", "--name=h", "--number_ios=1000", "--stats"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("h: (groupid=0, jobs=1)"), "{text}");
    assert!(text.contains("read: IOPS="), "{text}");
    assert!(text.contains("clat percentiles (nsec):"), "{text}");
    assert!(text.contains("dispatched=1000, completed=1000"), "{text}");
    assert!(text.contains("hctx0/tags/bitmap_tags/depth=64"), "{text}");
    assert!(text.contains("hctx0/tags/bitmap_tags/wake_batch=8"), "{text}");
    assert!(text.contains("hctx0/completed=1000"), "{text}");
}

#[test]
fn bad_options_exit_2_naming_the_option() {
    for (args, needle) in [
        (vec!["bench", "--iodpeth=4"], "'iodpeth'"),
        (vec!["bench", "--rw=sideways"], "rw:"),
        (vec!["bench", "--bs=4q"], "bs:"),
        (vec!["bench", "--name=x", "--time_based"], "runtime"),
        (vec!["bench", "--output-format=xml"], "--output-format"),
        (vec!["bench", "--device", "null:irqmode=9"], "irqmode"),
        (vec!["bench", "--device", "null:colour=blue"], "'colour'"),
        (vec!["bench", "--device", "nvme:x=1"], "'nvme'"),
        (vec!["bench", "/nonexistent/job.fio"], "/nonexistent/job.fio"),
        (vec!["frobnicate"], "'frobnicate'"),
        (vec!["bench", "--name=x", "--cpus_allowed=3-1"], "cpus_allowed: bad CPU list '3-1'"),
        (vec!["bench", "--name=x", "--cpus_allowed=1023", "--number_ios=1"], "CPU 1023 is not available"),
        (vec!["bench", "--name=x", "--cpus_allowed_policy=spread"], "cpus_allowed_policy=spread"),
    ] {
        let out = mqblk(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: '{err}' should name {needle}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn cpus_allowed_split_runs_each_clone_on_its_cpu() {
    let j = bench_json(&[
        "--name=p",
        "--cpus_allowed=0",
        "--cpus_allowed_policy=split",
        "--numjobs=2",
        "--number_ios=1000",
    ]);
    let jobs = j["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    for job in jobs {
        assert_eq!(job["read"]["total_ios"], 1000, "{job}");
        assert_eq!(job["job options"]["cpus_allowed"], "0", "{job}");
    }
}

#[test]
fn offset_beyond_device_is_a_clear_error() {
    // Bad input, found before any job starts (fio: "offset extends end").
    let out = mqblk(&["bench", "--device", "null:gb=1", "--name=o", "--offset=2g", "--number_ios=1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("offset"), "{err}");
}

#[test]
fn ramp_time_is_not_measured() {
    // 3 s of ramp, then 200 ms measured: the measured runtime is the
    // 200 ms, far below the 3.2 s the job lives (a loaded machine may
    // stretch the measured part, but not by the ramp's 3 s).
    let v = bench_json(&[
        "--device",
        "null:gb=1,irqmode=0",
        "--name=r",
        "--rw=randread",
        "--ramp_time=3",
        "--runtime=200ms",
        "--time_based",
    ]);
    let runtime = v["jobs"][0]["job_runtime"].as_u64().unwrap();
    assert!((200..3000).contains(&runtime), "measured {runtime} ms");
    assert!(v["mqblk"]["completed"].as_u64().unwrap() > v["jobs"][0]["read"]["total_ios"].as_u64().unwrap());
}

#[test]
fn wake_policy_is_chosen_per_device() {
    let out = mqblk(&[
        "bench",
        "--device",
        "null:gb=1,irqmode=1,hw_queue_depth=4,wake=stash",
        "--name=w",
        "--iodepth=8",
        "--numjobs=4",
        "--number_ios=2000",
        "--stats",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("hctx0/tags/bitmap_tags/wake_policy=stash"), "{text}");
    assert!(text.contains("hctx0/tags/bitmap_tags/stashed_bits="), "{text}");
    let out = mqblk(&["bench", "--device", "null:wake=fast"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains("'wake'") && err.contains("batch, stash"), "{err}");
}

#[test]
fn unknown_experiment_is_bad_input() {
    let out = mqblk(&["experiment", "warp-drive"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'warp-drive'"));
}

#[test]
fn bench_reports_merges_like_fio_disk_stats() {
    let out = mqblk(&[
        "bench",
        "--device",
        "null:gb=1,irqmode=0",
        "--name=seq",
        "--rw=read",
        "--iodepth=16",
        "--iodepth_batch=16",
        "--iodepth_batch_complete=16",
        "--number_ios=1600",
        "--output-format=json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = &v["mqblk"];
    assert_eq!(m["bios"][0], 1600);
    assert_eq!(m["requests"][0], 100, "each batch of 16 adjacent reads became one request");
    assert_eq!(m["merges"][0], 1500);
    let out = mqblk(&["bench", "--device", "null:gb=1,irqmode=0", "--name=seq", "--rw=read", "--number_ios=64"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Disk stats (read/write):") && text.contains("merge=0/0"), "{text}");
}

#[test]
fn bench_schedulers_and_job_classes() {
    let out = mqblk(&[
        "bench",
        "--device",
        "null:gb=1,irqmode=0",
        "--sched=bfq",
        "--name=w",
        "--rw=write",
        "--mqblk_async=1",
        "--prio=2",
        "--prioclass=2",
        "--number_ios=256",
        "--iodepth=8",
        "--stats",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("scheduler=bfq"), "{text}");
    assert!(text.contains("/async weight=60"), "an async queue of weight (8-2)*10: {text}");
    let out = mqblk(&["bench", "--device", "null:gb=1", "--sched=cfq", "--number_ios=1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cfq"));
    let out = mqblk(&["bench", "--name=a", "--prioclass=4", "--number_ios=1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("prioclass"));
}

#[test]
fn zone_script_prints_one_json_line_per_op() {
    let dir = std::env::temp_dir().join(format!("mqblk-zone-script-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("s.txt");
    std::fs::write(
        &script,
        "report\n# a comment\nwrite 1 0 8\nwrite 1 100 8  # off the wp\nread 1 0 16\nopen 2\nfinish 99\nreset all\n",
    )
    .unwrap();
    let spec = "null:gb=1,zoned=1,zone_size=256,memory_backed=1";
    let out = mqblk(&["zone", "script", "--device", spec, script.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 7, "comments make no line");
    let status: Vec<&str> = lines.iter().map(|l| l["status"].as_str().unwrap()).collect();
    assert_eq!(status, ["ok", "ok", "EIO", "ok", "ok", "EINVAL", "ok"]);
    assert_eq!(lines[1]["zones"][1], serde_json::json!(["IMP_OPEN", 8]));
    // 8 written sectors then 8 sectors of null_blk's 0xff fill.
    let mut data: Vec<u8> = (0..4096u64).map(|i| ((131u64) ^ (i * 7) ^ (i >> 9)) as u8).collect();
    data.extend([0xffu8; 4096]);
    assert_eq!(lines[3]["crc32"], format!("{:08x}", crc32(&data)));
    assert!(lines[0].get("crc32").is_none(), "only reads carry a checksum");
    assert_eq!(lines[6]["zones"].as_array().unwrap().len(), 4);
    let bad = mqblk(&["zone", "script", "--device", "null:gb=1", script.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a zoned device"));
    std::fs::write(&script, "write 1 x 8\n").unwrap();
    let bad = mqblk(&["zone", "script", "--device", spec, script.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("line 1: 'x' is not a number"));
}

/// A zero-length write or read is what the kernel makes of a zero-length
/// pwrite/pread on the block device: success, nothing changes, and a read
/// reports the CRC-32 of no bytes.
#[test]
fn zone_script_zero_length_ops_succeed_and_change_nothing() {
    let dir = std::env::temp_dir().join(format!("mqblk-zone-zero-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("s.txt");
    std::fs::write(&script, "write 1 0 8\nwrite 1 8 0\nwrite 2 5 0\nread 1 0 0\nread 3 100 0\n").unwrap();
    let spec = "null:gb=1,zoned=1,zone_size=256,memory_backed=1";
    let out = mqblk(&["zone", "script", "--device", spec, script.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let status: Vec<&str> = lines.iter().map(|l| l["status"].as_str().unwrap()).collect();
    assert_eq!(status, ["ok"; 5]);
    for l in &lines[1..] {
        assert_eq!(l["zones"], lines[0]["zones"], "a zero-length op changes no zone: {l}");
    }
    assert_eq!(lines[1]["zones"][2], serde_json::json!(["EMPTY", 0]), "not even an implicit open");
    assert_eq!(lines[3]["crc32"], "00000000");
    assert_eq!(lines[4]["crc32"], "00000000");
}

/// CRC-32 (IEEE), bit by bit: an independent check of the crc32 field.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn zone_report_and_management_commands() {
    let out = mqblk(&["zone", "finish", "1", "--device", "null:gb=1,zoned=1,zone_size=256,zone_nr_conv=1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().nth(1).unwrap().contains("conv  NOT_WP"), "{text}");
    assert!(text.lines().nth(2).unwrap().ends_with("seq   FULL"), "{text}");
    let out = mqblk(&["zone", "reset", "0", "--device", "null:gb=1,zoned=1,zone_size=256,zone_nr_conv=1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("EIO"), "a conventional zone cannot be reset");
    let out = mqblk(&["zone", "bogus", "--device", "null:gb=1,zoned=1"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn zone_gen_scripts_are_reproducible() {
    let a = mqblk(&["zone", "gen", "--seed", "5", "--ops", "50", "--zones", "8", "--zone-sectors", "524288"]);
    let b = mqblk(&["zone", "gen", "--seed", "5", "--ops", "50", "--zones", "8", "--zone-sectors", "524288"]);
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
    assert_eq!(String::from_utf8(a.stdout).unwrap().lines().filter(|l| !l.starts_with('#')).count(), 50);
}

#[test]
fn zonemode_zbd_writes_at_write_pointers_and_needs_a_zoned_device() {
    let v = bench_json(&[
        "--device",
        "null:gb=1,zoned=1,zone_size=4,irqmode=0",
        "--name=z",
        "--rw=write",
        "--bs=64k",
        "--zonemode=zbd",
        "--number_ios=200",
        "--output-format=json",
    ]);
    let job = &v["jobs"][0];
    assert_eq!(job["error"], 0, "{job}");
    assert_eq!(job["write"]["total_ios"], 200, "sequential writes at the wps, across 4 MiB zones, no error");
    let out = mqblk(&["bench", "--device", "null:gb=1", "--name=z", "--rw=write", "--zonemode=zbd", "--number_ios=1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("zonemode=zbd on a device that is not zoned"));
}

#[test]
fn filename_maps_to_the_file_driver_and_verify_checks_the_data() {
    let path = format!("/dev/shm/mqblk-cli-verify-{}", std::process::id());
    let _ = std::fs::remove_file(&path);
    let v = bench_json(&[
        &format!("--filename={path}"),
        "--size=8m",
        "--direct=1",
        "--name=w",
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=8",
        "--verify=crc32c",
    ]);
    assert_eq!(v["jobs"][0]["error"], 0, "{}", v["jobs"][0]);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8 << 20, "laid out at size=, as fio does");
    // The written blocks carry the verify header: they are really in the file.
    let data = std::fs::read(&path).unwrap();
    assert!(data.chunks(4096).filter(|b| &b[..8] == b"mqblkvfy").count() > 1000);
    // A device that stores nothing fails verification, naming the offset.
    let out =
        mqblk(&["bench", "--device", "null:gb=1", "--name=w", "--rw=write", "--bs=4k", "--size=1m", "--verify=crc32c"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("w: verify: bad magic header 0000000000000000, wanted mqblkvfy at file null offset 0"),
        "{stderr}"
    );
    // fixedbufs=1: the job's buffers are registered slots, the driver issues
    // fixed-buffer I/O (counted in its stats), and verify still holds.
    let out = mqblk(&[
        "bench",
        &format!("--filename={path}"),
        "--direct=1",
        "--fixedbufs=1",
        "--name=f",
        "--rw=randwrite",
        "--bs=4k",
        "--size=2m",
        "--iodepth=8",
        "--verify=crc32c",
        "--stats",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fixed_ios: u64 =
        text.split("fixed_ios=").nth(1).expect("file driver stats").split_whitespace().next().unwrap().parse().unwrap();
    assert!(fixed_ios > 512, "the 512 writes and the verify reads went out as fixed I/O: {fixed_ios}");
    let out = mqblk(&["bench", "--device", "null:gb=1", "--fixedbufs=1", "--name=r", "--number_ios=1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fixedbufs=1: the null driver has no registered buffers"));
    let out = mqblk(&["bench", "--filename=/nonexistent-mqblk", "--name=r", "--rw=read"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("give size="));
    let _ = std::fs::remove_file(&path);
}

/// `mqblk ARGS`: exit 0, and stdout names each of `want`.
fn assert_help(args: &[&str], want: &[&str]) {
    let out = mqblk(args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    for w in want {
        assert!(text.contains(w), "{args:?}: '{w}' missing in\n{text}");
    }
}

#[test]
fn every_command_answers_help() {
    assert_help(&["--help"], &["bench", "serve", "zone", "experiment", "--version"]);
    assert_help(&["help"], &["bench", "serve", "zone", "experiment"]);
    let bench = ["--device", "--output-format", "--stats", "--sched", "--plug_nesting", "--name", "iodepth", "verify"];
    assert_help(&["bench", "--help"], &bench);
    assert_help(&["bench", "-h"], &bench);
    assert_help(&["bench", "--name=x", "--help"], &bench);
    assert_help(&["help", "bench"], &bench);
    assert_help(
        &["serve", "--help"],
        &["--device", "--export", "--listen", "--unix", "--read-only", "--max-connections"],
    );
    assert_help(&["zone", "--help"], &["report", "reset", "open", "close", "finish", "script", "gen"]);
    for sub in ["report", "reset", "open", "close", "finish"] {
        assert_help(&["zone", sub, "--help"], &["--device"]);
    }
    assert_help(&["zone", "reset", "--help"], &["all"]);
    assert_help(&["zone", "script", "--help"], &["--device", "--blkdev", "FILE"]);
    assert_help(
        &["zone", "gen", "--help"],
        &["--seed", "--ops", "--zones", "--nr-conv", "--zone-sectors", "--capacity-sectors", "--block-sectors"],
    );
    assert_help(&["experiment", "--help"], &["--quick", "--out", "tag-wakeup", "zone-lock"]);
}

#[test]
fn version_prints_the_crate_version() {
    let out = mqblk(&["--version"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("mqblk {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn mistyped_names_suggest_the_closest_known_one() {
    for (args, needle) in [
        (vec!["bench", "--name=x", "--iodepht=4"], "unknown option 'iodepht' (did you mean 'iodepth'?)"),
        (vec!["bench", "--numjob=2"], "(did you mean 'numjobs'?)"),
        (vec!["bnech"], "'bench'"),
        (vec!["zone", "reprot", "--device", "null:zoned=1"], "'report'"),
        (vec!["experiment", "tag-wakup"], "'tag-wakeup'"),
        (vec!["serve", "--devcie", "null:gb=1"], "'--device'"),
    ] {
        let out = mqblk(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: '{err}' should name {needle}");
    }
}

#[test]
fn serve_pairs_each_export_with_the_device_before_it() {
    let out = mqblk(&["serve", "--device", "null:gb=1", "--export", "a", "--device", "null:gb=1", "--export", "a"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("two exports are named 'a'"));
}
