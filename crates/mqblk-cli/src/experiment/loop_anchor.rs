//! The plug-merge experiment's optional second anchor: the same fio job run
//! by the kernel itself on a loop device over a tmpfs file, so the kernel's
//! merge count can be printed beside mqblk's. Runs only as root with fio
//! and losetup installed, and never in `--quick` mode; otherwise the
//! experiment says why it was skipped. It measures the kernel, not mqblk.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

/// A loop device attached to a sparse backing file; detached and removed on
/// drop, whatever happened in between.
struct LoopDevice {
    device: String,
    backing: PathBuf,
}

impl LoopDevice {
    fn attach(size_bytes: u64) -> Result<Self, String> {
        let dir =
            if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let backing = dir.join(format!("mqblk-loop-anchor-{}.img", std::process::id()));
        let file = std::fs::File::create(&backing).map_err(|e| format!("{}: {e}", backing.display()))?;
        file.set_len(size_bytes).map_err(|e| format!("{}: {e}", backing.display()))?;
        let out = Command::new("losetup").args(["-f", "--show"]).arg(&backing).output();
        match out {
            Ok(o) if o.status.success() => {
                let device = String::from_utf8_lossy(&o.stdout).trim().to_string();
                Ok(Self { device, backing })
            }
            Ok(o) => {
                let _ = std::fs::remove_file(&backing);
                Err(format!("losetup: {}", String::from_utf8_lossy(&o.stderr).trim()))
            }
            Err(e) => {
                let _ = std::fs::remove_file(&backing);
                Err(format!("losetup: {e}"))
            }
        }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
        let _ = std::fs::remove_file(&self.backing);
    }
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().map(|o| o.status.success()).unwrap_or(false)
}

/// Runs the batch-`batch` job with fio on a loop device; Err says why not.
pub fn run(batch: u64, runtime_s: u32) -> Result<Value, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root (loop devices need root)".into());
    }
    if !have("fio") || !have("losetup") {
        return Err("fio or losetup not installed (apt-get install fio)".into());
    }
    let dev = LoopDevice::attach(1 << 30)?;
    let args = vec![
        "--name=anchor".to_string(),
        format!("--filename={}", dev.device),
        "--direct=1".into(),
        "--ioengine=libaio".into(),
        "--rw=read".into(),
        "--bs=4k".into(),
        "--iodepth=128".into(),
        format!("--iodepth_batch={batch}"),
        format!("--iodepth_batch_complete={batch}"),
        format!("--runtime={runtime_s}"),
        "--time_based".into(),
        "--output-format=json".into(),
    ];
    let out = Command::new("fio").args(&args).output().map_err(|e| format!("fio: {e}"))?;
    if !out.status.success() {
        return Err(format!("fio failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("fio JSON: {e}"))?;
    let disk = &v["disk_util"][0];
    let read = &v["jobs"][0]["read"];
    // fio's total_ios and its disk_util counters cover different windows
    // (disk_util counted about 0.1 s of I/O fewer: 2-6% of a 2-5 s run), so
    // bios per request comes from the device's counters alone: each bio is
    // a request or a merge into one.
    let (requests, merges) = (disk["read_ios"].as_u64(), disk["read_merges"].as_u64());
    let device_bios = requests.zip(merges).map(|(r, m)| r + m);
    let bios_per_request = device_bios.zip(requests).filter(|&(_, r)| r > 0).map(|(b, r)| b as f64 / r as f64);
    Ok(json!({
        "what": "the Linux kernel's own block layer (loop device over a tmpfs file), not mqblk",
        "command": format!("fio {}", args.join(" ")),
        "bios": read["total_ios"],
        "requests": disk["read_ios"],
        "merges": disk["read_merges"],
        "device_bios": device_bios,
        "bios_per_request": bios_per_request,
        "bw_kib_per_sec": read["bw"],
    }))
}
