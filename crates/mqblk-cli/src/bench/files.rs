//! fio's file options on a block device: the flushes (`fsync`,
//! `fdatasync`, `end_fsync`, `fsync_on_close`, `sync`)
//! and the file-layout options (`fallocate`, `create_on_open`,
//! `create_fsync`, `create_only`, `pre_read`, `unlink`,
//! `unlink_each_loop`, `invalidate`, `allow_mounted_write`, `lockfile`,
//! `file_service_type`, `nrfiles`, `openfiles`).
//!
//! What they mean here (fio's HOWTO "I/O type" and "Target file/device"):
//! an fsync of a block device is a cache flush, so `fsync=N` and
//! `fdatasync=N` flush after every N writes and `end_fsync` and
//! `fsync_on_close` once when the job's writes are done; `sync=1` (or
//! `dsync`) writes with FUA, as the kernel does for an O_SYNC or O_DSYNC
//! direct write to a device with a volatile cache. A flush waits for the
//! job's I/O in flight first, as fio's fsync does. The layout options shape files on a file
//! system: with `--device`, one device stands for every file and nothing
//! is laid out, so they are accepted and change nothing; `nrfiles` above
//! one asks for files the one device cannot tell apart and is refused.

use super::options::{err, OptionError};
use super::values::{parse_flag, parse_int};

/// A job's flush options, with fio's defaults (none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncOptions {
    /// `fsync` / `fdatasync`: a flush after every this many writes (0: none).
    pub flush_every: u64,
    /// `end_fsync` / `fsync_on_close`: one flush when the writes are done.
    pub flush_at_end: bool,
    /// `sync=1|sync|dsync`: every write with FUA.
    pub fua: bool,
}

/// The option names (options.rs' `job_options` adds them).
pub const FILE_OPTIONS: &[&str] = &[
    "fsync",
    "fdatasync",
    "end_fsync",
    "fsync_on_close",
    "sync",
    "fallocate",
    "create_on_open",
    "create_fsync",
    "create_only",
    "pre_read",
    "unlink",
    "unlink_each_loop",
    "invalidate",
    "allow_mounted_write",
    "lockfile",
    "file_service_type",
    "nrfiles",
    "openfiles",
];

impl SyncOptions {
    /// Whether the job flushes or writes FUA at all (the `SHAPED` loop).
    pub fn any(&self) -> bool {
        self.flush_every > 0 || self.flush_at_end || self.fua
    }

    /// Sets one option; false if `key` is none of them.
    pub(super) fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")));
        match key {
            "fsync" | "fdatasync" => self.flush_every = parse_int(key, v()?, 0, u64::MAX)?,
            "end_fsync" | "fsync_on_close" => self.flush_at_end = parse_flag(key, value)?,
            "sync" => {
                self.fua = match v()? {
                    "0" | "none" => false,
                    "1" | "sync" | "dsync" => true,
                    o => return err(format!("sync: bad value '{o}' (accepted: none, 0, sync, 1, dsync)")),
                }
            }
            _ => return set_layout(key, value),
        }
        Ok(true)
    }
}

/// The layout options: checked as fio checks them, no effect with one
/// device (see the module header).
fn set_layout(key: &str, value: Option<&str>) -> Result<bool, OptionError> {
    let v = || value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")));
    match key {
        "fallocate" => {
            let accepted = ["none", "native", "posix", "keep", "truncate", "0", "1"];
            let got = v()?;
            if !accepted.contains(&got) {
                return err(format!("fallocate: bad value '{got}' (accepted: {})", accepted.join(", ")));
            }
        }
        "file_service_type" => {
            let got = v()?;
            let kind = got.split(':').next().unwrap_or(got);
            if !["random", "roundrobin", "sequential", "zipf", "pareto", "normal", "gauss"].contains(&kind) {
                return err(format!(
                    "file_service_type: bad value '{got}' (accepted: random, roundrobin, sequential, zipf, pareto, normal)"
                ));
            }
        }
        "nrfiles" => {
            if parse_int(key, v()?, 1, u64::from(u32::MAX))? > 1 {
                return err(
                    "nrfiles: not supported above 1: bench runs one device, which cannot tell a job's files apart \
                     (give each file's region with offset and size instead)",
                );
            }
        }
        "openfiles" => _ = parse_int(key, v()?, 1, u64::from(u32::MAX))?,
        "lockfile" => {
            let got = v()?;
            let kind = got.split(':').next().unwrap_or(got);
            if !["none", "exclusive", "readwrite"].contains(&kind) {
                return err(format!("lockfile: bad value '{got}' (accepted: none, exclusive, readwrite)"));
            }
        }
        "create_on_open"
        | "create_fsync"
        | "create_only"
        | "pre_read"
        | "unlink"
        | "unlink_each_loop"
        | "invalidate"
        | "allow_mounted_write" => _ = parse_flag(key, value)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// A job's flush schedule at run time.
#[derive(Debug, Clone)]
pub struct Syncer {
    opts: SyncOptions,
    writes: u64,
    /// Flushes issued (for the report and the tests).
    pub flushes: u64,
}

impl Syncer {
    pub fn new(opts: &SyncOptions) -> Option<Self> {
        opts.any().then_some(Self { opts: *opts, writes: 0, flushes: 0 })
    }

    /// Counts the next write; true if it is to carry FUA (`sync`).
    pub fn next_write(&mut self) -> bool {
        self.writes += 1;
        self.opts.fua
    }

    /// Whether a flush is due after the write just issued (`fsync=N`).
    pub fn flush_due(&self) -> bool {
        self.opts.flush_every > 0 && self.writes % self.opts.flush_every == 0
    }

    pub fn flush_at_end(&self) -> bool {
        self.opts.flush_at_end && self.writes > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(set: &[(&str, &str)]) -> SyncOptions {
        crate::bench::options::group_from(set, SyncOptions::set)
    }

    #[test]
    fn a_flush_every_n_writes() {
        let mut s = Syncer::new(&opts(&[("fsync", "4"), ("sync", "1")])).unwrap();
        let mut flushes = Vec::new();
        for _ in 0..12 {
            assert!(s.next_write(), "sync=1: every write FUA");
            flushes.push(s.flush_due());
        }
        assert_eq!(flushes.iter().filter(|f| **f).count(), 3);
        assert!(flushes[3] && flushes[7] && flushes[11]);
        assert!(Syncer::new(&SyncOptions::default()).is_none());
    }

    #[test]
    fn layout_options_are_checked_and_nrfiles_above_one_refused() {
        let mut o = SyncOptions::default();
        assert!(o.set("fallocate", Some("none")).unwrap());
        assert!(o.set("fallocate", Some("always")).unwrap_err().0.contains("accepted"));
        assert!(o.set("create_on_open", Some("1")).unwrap());
        assert!(o.set("nrfiles", Some("1")).unwrap());
        assert!(o.set("nrfiles", Some("4")).unwrap_err().0.contains("one device"));
        assert!(o.set("sync", Some("dsync")).unwrap() && o.fua);
        assert!(!o.set("iodepth", Some("1")).unwrap());
    }
}
