//! fio's per-job logs in fio's format: `write_lat_log` (PREFIX_lat,
//! PREFIX_clat and PREFIX_slat), `write_bw_log` (PREFIX_bw) and
//! `write_iops_log` (PREFIX_iops), each `PREFIX_TYPE.N.log` for job number
//! N (from 1, as fio's thread numbers) or `PREFIX_TYPE.log` with
//! `per_job_logs=0`.
//!
//! A line is `msec, value, ddir, bs, [offset, ]prio` (fio's
//! `flush_samples`): the time in ms since the job started measuring, the
//! value (latency in ns, bandwidth in KiB/s, I/Os), the direction (0 read,
//! 1 write, 2 trim), the block size, the offset with `log_offset=1`, and the
//! priority: with `log_prio=1` the ioprio value as 0x%04x, else 1 for an
//! RT-class I/O and 0 otherwise. Without `log_avg_msec`, every I/O is a
//! line (bandwidth then is the I/O's bytes over its completion latency,
//! as fio's `add_bw_sample`, and IOPS 1); with it, one line per direction
//! per window: latencies averaged, bandwidth and IOPS over the window,
//! with bs 0 (fio's `__add_stat_to_log`).
//!
//! Relies on the job's clock for its times; the lines are formatted into
//! a buffer per log and written when it fills and at the job's end, so
//! the only per-I/O work is formatting (the job loop's `SHAPED` copy).

use std::fmt::Write as _;
use std::io::Write as _;

use super::options::{err, OptionError};
use super::stats::Dir;
use super::values::{parse_flag, parse_int};

/// The log options of one job, with fio's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct LogOptions {
    /// Each log's prefix ("": the job's name, as a bare option gives).
    pub lat: Option<String>,
    pub bw: Option<String>,
    pub iops: Option<String>,
    pub avg_msec: u64,
    pub per_job: bool,
    pub offset: bool,
    pub prio: bool,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self { lat: None, bw: None, iops: None, avg_msec: 0, per_job: true, offset: false, prio: false }
    }
}

/// The log options' names (options.rs' `job_options` adds them).
pub const LOG_OPTIONS: &[&str] =
    &["write_lat_log", "write_bw_log", "write_iops_log", "log_avg_msec", "per_job_logs", "log_offset", "log_prio"];

impl LogOptions {
    pub fn any(&self) -> bool {
        self.lat.is_some() || self.bw.is_some() || self.iops.is_some()
    }

    /// Sets one log option; false if `key` is none of them.
    pub(super) fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let prefix = || value.unwrap_or("").to_string();
        match key {
            "write_lat_log" => self.lat = Some(prefix()),
            "write_bw_log" => self.bw = Some(prefix()),
            "write_iops_log" => self.iops = Some(prefix()),
            "log_avg_msec" => {
                let v = value.ok_or_else(|| OptionError("log_avg_msec: needs a value".into()))?;
                self.avg_msec = parse_int(key, v, 0, u64::from(u32::MAX))?;
            }
            "per_job_logs" => self.per_job = parse_flag(key, value)?,
            "log_offset" => self.offset = parse_flag(key, value)?,
            "log_prio" => self.prio = parse_flag(key, value)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    pub(super) fn validate(&self, job: &str, gtod_reduce: bool) -> Result<(), OptionError> {
        if gtod_reduce && self.lat.is_some() {
            return err(format!("job '{job}': write_lat_log needs latencies, which gtod_reduce turns off"));
        }
        Ok(())
    }
}

/// Which log a line goes to.
#[derive(Clone, Copy)]
enum Kind {
    Lat,
    Clat,
    Slat,
    Bw,
    Iops,
}

const KINDS: [(Kind, &str); 5] =
    [(Kind::Lat, "lat"), (Kind::Clat, "clat"), (Kind::Slat, "slat"), (Kind::Bw, "bw"), (Kind::Iops, "iops")];

/// One open log: its path and the lines not yet written.
struct Sink {
    path: String,
    buf: String,
    file: Option<std::fs::File>,
}

/// A sink writes when its buffer passes this.
const FLUSH_BYTES: usize = 64 << 10;

impl Sink {
    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let file = match self.file.as_mut() {
            Some(f) => f,
            None => {
                let f = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
                self.file.insert(f)
            }
        };
        // One write of whole lines: with per_job_logs=0 the clones of a
        // job append to one file, and O_APPEND keeps each write whole.
        file.write_all(self.buf.as_bytes())?;
        self.buf.clear();
        Ok(())
    }
}

/// A window's sums for one direction (`log_avg_msec`).
#[derive(Default, Clone, Copy)]
struct Window {
    ios: u64,
    bytes: u64,
    lat_ns: u64,
    clat_ns: u64,
    slat_ns: u64,
}

/// What one completion tells the logs.
pub(super) struct Sample {
    pub(super) dir: Dir,
    pub(super) bs: u64,
    pub(super) offset: u64,
    pub(super) ioprio: mqblk::IoPrio,
    pub(super) slat_ns: u64,
    pub(super) clat_ns: u64,
}

/// A job's logs at run time.
pub(super) struct Logs {
    sinks: [Option<Sink>; 5],
    /// The first write error, reported when the job finishes.
    error: Option<String>,
    avg_ns: u64,
    offset: bool,
    prio: bool,
    window_start_ns: u64,
    window_end_ns: u64,
    window: [Window; 3],
}

impl Logs {
    /// Opens the logs of job `job` (`number`: fio's 1-based job number),
    /// truncating files of an earlier run; None if it writes none.
    pub(super) fn new(o: &LogOptions, job: &str, number: usize) -> Result<Option<Self>, String> {
        if !o.any() {
            return Ok(None);
        }
        let prefix = |k: Kind| {
            let p = match k {
                Kind::Lat | Kind::Clat | Kind::Slat => o.lat.as_deref(),
                Kind::Bw => o.bw.as_deref(),
                Kind::Iops => o.iops.as_deref(),
            };
            p.map(|p| if p.is_empty() { job } else { p })
        };
        let mut sinks: [Option<Sink>; 5] = Default::default();
        for (i, (kind, name)) in KINDS.iter().enumerate() {
            let Some(prefix) = prefix(*kind) else { continue };
            let path = if o.per_job { format!("{prefix}_{name}.{number}.log") } else { format!("{prefix}_{name}.log") };
            // A clone of a shared log must not truncate what another wrote:
            // the first clone (number 1 of its job) starts it afresh.
            if o.per_job || number == 1 {
                std::fs::File::create(&path).map_err(|e| format!("{path}: {e}"))?;
            }
            sinks[i] = Some(Sink { path, buf: String::with_capacity(FLUSH_BYTES + 256), file: None });
        }
        Ok(Some(Self {
            sinks,
            error: None,
            avg_ns: o.avg_msec * 1_000_000,
            offset: o.offset,
            prio: o.prio,
            window_start_ns: 0,
            window_end_ns: o.avg_msec * 1_000_000,
            window: [Window::default(); 3],
        }))
    }

    /// Logs one completion at `now_ns` (job time); a write error is kept
    /// for `finish`.
    pub(super) fn complete(&mut self, now_ns: u64, s: &Sample) {
        if let Err(e) = self.try_complete(now_ns, s) {
            self.error.get_or_insert(e);
        }
    }

    fn try_complete(&mut self, now_ns: u64, s: &Sample) -> Result<(), String> {
        if self.avg_ns > 0 {
            while now_ns >= self.window_end_ns {
                self.close_window()?;
            }
            let w = &mut self.window[s.dir as usize];
            w.ios += 1;
            w.bytes += s.bs;
            w.lat_ns += s.slat_ns + s.clat_ns;
            w.clat_ns += s.clat_ns;
            w.slat_ns += s.slat_ns;
            return Ok(());
        }
        let ms = now_ns / 1_000_000;
        let bw = (s.bs * 1_000_000).checked_div(s.clat_ns).unwrap_or(0);
        for (i, (kind, _)) in KINDS.iter().enumerate() {
            let value = match kind {
                Kind::Lat => s.slat_ns + s.clat_ns,
                Kind::Clat => s.clat_ns,
                Kind::Slat => s.slat_ns,
                Kind::Bw => bw,
                Kind::Iops => 1,
            };
            self.line(i, ms, value, s.dir, s.bs, Some(s))?;
        }
        Ok(())
    }

    /// Writes each direction's averages of the window ending now and
    /// starts the next.
    fn close_window(&mut self) -> Result<(), String> {
        let ms = self.window_end_ns / 1_000_000;
        // The last window ends with the job, maybe early.
        let secs = (self.window_end_ns - self.window_start_ns).max(1) as f64 / 1e9;
        for dir in [Dir::Read, Dir::Write, Dir::Trim] {
            let w = std::mem::take(&mut self.window[dir as usize]);
            if w.ios == 0 {
                continue;
            }
            let avg = |sum: u64| (sum as f64 / w.ios as f64 + 0.5) as u64;
            for (i, (kind, _)) in KINDS.iter().enumerate() {
                let value = match kind {
                    Kind::Lat => avg(w.lat_ns),
                    Kind::Clat => avg(w.clat_ns),
                    Kind::Slat => avg(w.slat_ns),
                    Kind::Bw => (w.bytes as f64 / 1024.0 / secs) as u64,
                    Kind::Iops => (w.ios as f64 / secs) as u64,
                };
                self.line(i, ms, value, dir, 0, None)?;
            }
        }
        self.window_start_ns = self.window_end_ns;
        self.window_end_ns += self.avg_ns;
        Ok(())
    }

    fn line(&mut self, i: usize, ms: u64, value: u64, dir: Dir, bs: u64, s: Option<&Sample>) -> Result<(), String> {
        let Some(sink) = self.sinks[i].as_mut() else { return Ok(()) };
        let _ = write!(sink.buf, "{ms}, {value}, {}, {bs}, ", dir as u8);
        if self.offset {
            let _ = write!(sink.buf, "{}, ", s.map_or(0, |s| s.offset));
        }
        let ioprio = s.map_or(mqblk::IoPrio::default(), |s| s.ioprio);
        if self.prio {
            let _ = writeln!(sink.buf, "0x{:04x}", ioprio_value(ioprio));
        } else {
            let _ = writeln!(sink.buf, "{}", u8::from(ioprio.class == mqblk::IoPrioClass::Rt));
        }
        if sink.buf.len() >= FLUSH_BYTES {
            sink.flush().map_err(|e| format!("{}: {e}", sink.path))?;
        }
        Ok(())
    }

    /// Writes the last window and every buffered line.
    pub(super) fn finish(mut self, now_ns: u64) -> Result<(), String> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if self.avg_ns > 0 && self.window.iter().any(|w| w.ios > 0) {
            self.window_end_ns = self.window_end_ns.min(now_ns.max(self.window_start_ns + 1));
            self.close_window()?;
        }
        for sink in self.sinks.iter_mut().flatten() {
            sink.flush().map_err(|e| format!("{}: {e}", sink.path))?;
        }
        Ok(())
    }
}

/// The kernel's ioprio value: class in bits 13-15, level below.
fn ioprio_value(p: mqblk::IoPrio) -> u16 {
    (u16::from(p.class as u8) << 13) | u16::from(p.level)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for one test's logs.
    fn scratch(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("mqblk-log-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn sample(is_write: bool, offset: u64) -> Sample {
        Sample {
            dir: Dir::of_write(is_write),
            bs: 4096,
            offset,
            ioprio: mqblk::IoPrio::default(),
            slat_ns: 1_000,
            clat_ns: 40_000,
        }
    }

    #[test]
    fn per_io_lines_are_fios() {
        let prefix = scratch("per-io").join("j").display().to_string();
        let mut o = LogOptions::default();
        o.set("write_lat_log", Some(&prefix)).unwrap();
        o.set("write_bw_log", None).unwrap();
        o.set("log_offset", None).unwrap();
        let mut logs = Logs::new(&o, &prefix, 3).unwrap().unwrap();
        logs.complete(2_500_000, &sample(false, 8192));
        logs.complete(3_000_000, &sample(true, 0));
        logs.finish(4_000_000).unwrap();
        let read = |t: &str| std::fs::read_to_string(format!("{prefix}_{t}.3.log")).unwrap();
        assert_eq!(read("clat"), "2, 40000, 0, 4096, 8192, 0\n3, 40000, 1, 4096, 0, 0\n");
        assert_eq!(read("lat"), "2, 41000, 0, 4096, 8192, 0\n3, 41000, 1, 4096, 0, 0\n");
        assert_eq!(read("slat").lines().next(), Some("2, 1000, 0, 4096, 8192, 0"));
        // 4096 bytes over 40 µs: 102,400 bytes per ms (fio's unit).
        assert_eq!(read("bw").lines().next(), Some("2, 102400, 0, 4096, 8192, 0"));
        assert!(!std::path::Path::new(&format!("{prefix}_iops.3.log")).exists());
    }

    #[test]
    fn averaged_windows_log_one_line_per_direction() {
        let prefix = scratch("avg").join("a").display().to_string();
        let mut o = LogOptions::default();
        for k in ["write_iops_log", "write_lat_log"] {
            o.set(k, Some(&prefix)).unwrap();
        }
        o.set("log_avg_msec", Some("100")).unwrap();
        o.set("per_job_logs", Some("0")).unwrap();
        o.set("log_prio", None).unwrap();
        let mut logs = Logs::new(&o, "job", 1).unwrap().unwrap();
        for i in 0..10 {
            logs.complete(i * 10_000_000, &sample(false, 0)); // 10 reads in window 1
        }
        logs.complete(150_000_000, &sample(true, 0)); // a write in window 2
        logs.finish(180_000_000).unwrap();
        let iops = std::fs::read_to_string(format!("{prefix}_iops.log")).unwrap();
        assert_eq!(iops, "100, 100, 0, 0, 0x4004\n180, 12, 1, 0, 0x4004\n", "10 I/Os in 100 ms; 1 in the last 80");
        let lat = std::fs::read_to_string(format!("{prefix}_lat.log")).unwrap();
        assert_eq!(lat.lines().next(), Some("100, 41000, 0, 0, 0x4004"));
    }
}
