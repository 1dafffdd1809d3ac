//! Where a results file came from: the commit and the command that produced
//! it, when it ran, and on what (CPUs, kernel, the build, the load before
//! and after). Facts only: nothing here judges whether the machine was
//! quiet enough.

use std::time::SystemTime;

/// What is known when an experiment starts.
pub struct Start {
    at: SystemTime,
    load: String,
}

impl Start {
    pub fn now() -> Start {
        Start { at: SystemTime::now(), load: loadavg() }
    }

    /// The provenance object of a results file, closed now.
    pub fn finish(&self) -> serde_json::Value {
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
        serde_json::json!({
            "commit": commit(),
            "command": command_line(),
            "start_utc": utc(self.at),
            "end_utc": utc(SystemTime::now()),
            "cpus": cpus,
            "cpu_model": cpu_model(),
            "kernel": kernel.trim(),
            "build": format!("mqblk {} ({profile})", env!("CARGO_PKG_VERSION")),
            "loadavg_before": self.load,
            "loadavg_after": loadavg(),
        })
    }
}

/// The top-level command as typed (program name shortened to `mqblk`).
fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("mqblk {}", args.join(" "))
}

/// The checkout's commit, "+dirty" when tracked files (docs/results
/// aside) differ from it, or
/// "unknown" when the binary runs away from its source tree.
fn commit() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(["-C", dir])
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "HEAD"]) {
        Some(head) => {
            // The results folder is the experiments' output: the files a
            // run has already written do not make the code dirty.
            let dirty =
                git(&["status", "--porcelain", "--untracked-files=no", "--", ":(top)", ":(top,exclude)docs/results"])
                    .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{head}+dirty")
            } else {
                head
            }
        }
        None => "unknown".into(),
    }
}

/// /proc/loadavg's 1, 5 and 15-minute figures.
fn loadavg() -> String {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_string()))
        .unwrap_or_default()
}

/// `t` as ISO 8601 UTC, to the second.
pub fn utc(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's civil_from_days).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn utc_dates() {
        let at = |s: u64| utc(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_795_731_600 + 3_723), "2026-11-26T23:22:03Z");
    }

    #[test]
    fn provenance_names_its_facts() {
        let p = Start::now().finish();
        for key in ["commit", "command", "start_utc", "end_utc", "cpus", "kernel", "loadavg_before", "loadavg_after"] {
            assert!(p.get(key).is_some(), "no {key} in {p}");
        }
        assert!(p["cpus"].as_u64().unwrap() >= 1);
        assert_eq!(p["loadavg_after"].as_str().unwrap().split(' ').count(), 3);
    }
}
