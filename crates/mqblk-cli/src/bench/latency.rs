//! fio's latency target (`latency_target`, `latency_window`,
//! `latency_percentile`, `latency_run`) and limit (`max_latency`): the
//! job searches for the deepest queue at which its I/Os still meet the
//! target, or fails with ETIMEDOUT when an I/O takes longer than the limit.
//!
//! The search is fio's (io_u.c `lat_target_check` and its helpers): it
//! starts at depth 1 and, at the end of each window in which enough I/Os
//! met the target, doubles the depth (bisects once a depth has failed);
//! a window that falls short, or (at the 100th percentile) a single I/O
//! over the target, halves back towards the last good depth, the I/O in
//! flight waited for first. When a step leaves the depth where it was,
//! the job measures one more window at that depth from fresh statistics
//! and ends (unless `latency_run`, which keeps adjusting). A miss at depth
//! 1 and the 100th percentile is fatal, as in fio. Relies on the job
//! loop's clock (a `gtod_reduce` job has no latencies: refused).

use super::options::{err, OptionError};
use super::values::{parse_flag, parse_int, parse_time_ns, per_direction_values};

/// The options, with fio's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyOptions {
    /// `latency_target` (0: none) and `latency_window`.
    pub target_ns: u64,
    pub window_ns: u64,
    /// `latency_percentile` (100).
    pub percentile: f64,
    pub run: bool,
    /// `max_latency=R[,W]` (0: none).
    pub max_ns: [u64; 2],
}

impl Default for LatencyOptions {
    fn default() -> Self {
        Self { target_ns: 0, window_ns: 0, percentile: 100.0, run: false, max_ns: [0, 0] }
    }
}

/// The option names (options.rs' `job_options` adds them).
pub const LATENCY_OPTIONS: &[&str] =
    &["latency_target", "latency_window", "latency_percentile", "latency_run", "max_latency"];

/// fio's latency times: a bare number is microseconds.
fn parse_time_us(key: &str, v: &str) -> Result<u64, OptionError> {
    if v.trim().bytes().all(|b| b.is_ascii_digit()) {
        return Ok(parse_int(key, v.trim(), 0, u64::MAX / 1_000)? * 1_000);
    }
    parse_time_ns(key, v)
}

impl LatencyOptions {
    /// Whether the job watches its latencies at all.
    pub fn any(&self) -> bool {
        self.target_ns > 0 || self.max_ns != [0, 0]
    }

    /// Sets one option; false if `key` is none of them.
    pub(super) fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")));
        match key {
            "latency_target" => self.target_ns = parse_time_us(key, v()?)?,
            "latency_window" => self.window_ns = parse_time_us(key, v()?)?,
            "latency_percentile" => {
                let v = v()?;
                self.percentile =
                    v.parse::<f64>().ok().filter(|p| *p > 0.0 && *p <= 100.0).ok_or_else(|| {
                        OptionError(format!("{key}: bad value '{v}' (a percentage above 0, up to 100)"))
                    })?
            }
            "latency_run" => self.run = parse_flag(key, value)?,
            "max_latency" => {
                // A trims' limit is not kept: trim jobs run no latency target.
                let [r, w, _] = per_direction_values(key, v()?, 0, |s| parse_time_us(key, s))?;
                self.max_ns = [r, w];
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// A target needs a window and latencies measured.
    pub(super) fn validate(&self, job: &str, gtod_reduce: bool) -> Result<(), OptionError> {
        if self.any() && gtod_reduce {
            return err(format!(
                "job '{job}': latency_target and max_latency need latencies, which gtod_reduce turns off"
            ));
        }
        if self.target_ns > 0 && self.window_ns == 0 {
            return err(format!("job '{job}': latency_target needs a latency_window"));
        }
        Ok(())
    }
}

/// What a completion's latency means for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// Wait for the I/O in flight (the depth came down).
    Quiesce,
    /// Fail the job with ETIMEDOUT.
    Fatal,
}

/// The depth search at run time (fio's `latency_qd` and its bounds).
#[derive(Debug, Clone)]
pub struct LatencyTarget {
    opts: LatencyOptions,
    iodepth: usize,
    /// The depth the job may use now.
    pub qd: usize,
    qd_low: usize,
    qd_high: usize,
    stable_count: u32,
    /// I/Os completed; the window: when it started, the I/Os then,
    /// misses since.
    ios: u64,
    window_start_ns: u64,
    window_ios: u64,
    failed: u64,
    /// The final window at the found depth is running; then done.
    end_run: bool,
    pub done: bool,
}

impl LatencyTarget {
    pub fn new(opts: &LatencyOptions, iodepth: usize) -> Option<Self> {
        if !opts.any() {
            return None;
        }
        let searching = opts.target_ns > 0;
        Some(Self {
            opts: *opts,
            iodepth,
            qd: if searching { 1 } else { iodepth },
            qd_low: 1,
            qd_high: iodepth,
            stable_count: 0,
            ios: 0,
            window_start_ns: 0,
            window_ios: 0,
            failed: 0,
            end_run: false,
            done: false,
        })
    }

    /// A completed I/O (`is_write`) of total latency `lat_ns`.
    pub fn completed(&mut self, is_write: bool, lat_ns: u64, now_ns: u64) -> Verdict {
        self.ios += 1;
        let max = self.opts.max_ns[usize::from(is_write)];
        if max > 0 && lat_ns > max {
            return Verdict::Fatal;
        }
        if self.opts.target_ns == 0 || lat_ns <= self.opts.target_ns {
            return Verdict::Ok;
        }
        if self.opts.percentile < 100.0 {
            self.failed += 1;
            return Verdict::Ok;
        }
        if self.qd == 1 {
            return Verdict::Fatal;
        }
        self.ramp_down(now_ns);
        Verdict::Quiesce
    }

    /// fio's `lat_target_check`: at the end of a window, up or down.
    /// Returns true when the final window starts (the job resets its
    /// statistics, having waited for its I/O in flight).
    pub fn check(&mut self, now_ns: u64) -> (Verdict, bool) {
        if self.opts.target_ns == 0 || now_ns.saturating_sub(self.window_start_ns) < self.opts.window_ns {
            return (Verdict::Ok, false);
        }
        let window_ios = self.ios - self.window_ios;
        let met = if window_ios == 0 { 100.0 } else { 100.0 * (window_ios - self.failed) as f64 / window_ios as f64 };
        if met >= self.opts.percentile {
            let final_window = self.ramp_up(now_ns);
            (if final_window { Verdict::Quiesce } else { Verdict::Ok }, final_window)
        } else if self.qd == 1 {
            self.new_window(now_ns);
            (Verdict::Ok, false)
        } else {
            self.ramp_down(now_ns);
            (Verdict::Quiesce, false)
        }
    }

    fn new_window(&mut self, now_ns: u64) {
        (self.window_start_ns, self.window_ios, self.failed) = (now_ns, self.ios, 0);
    }

    fn ramp_down(&mut self, now_ns: u64) {
        self.qd_high = self.qd;
        if self.qd == self.qd_low {
            self.qd_low = self.qd_low.saturating_sub(1).max(1);
        }
        self.qd = ((self.qd + self.qd_low) / 2).max(1);
        self.stable_count = 0;
        self.new_window(now_ns);
    }

    /// Up a step; true when the final window starts.
    fn ramp_up(&mut self, now_ns: u64) -> bool {
        let before = self.qd;
        self.qd_low = self.qd;
        if self.qd + 1 == self.qd_high {
            // Stuck one below the last failing depth: after three
            // successes there, try one higher (fio's heuristic).
            self.stable_count += 1;
            if self.stable_count >= 3 {
                self.qd_high += 1;
                self.stable_count = 0;
            }
        }
        self.qd = if self.qd_high != self.iodepth { (self.qd + self.qd_high) / 2 } else { self.qd * 2 };
        self.qd = self.qd.min(self.iodepth);
        let mut final_window = false;
        if !self.opts.run && self.qd == before {
            if self.end_run {
                self.done = true;
            } else {
                self.end_run = true;
                final_window = true;
            }
        }
        self.new_window(now_ns);
        final_window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(depth: usize) -> LatencyTarget {
        let mut o = LatencyOptions::default();
        o.set("latency_target", Some("500")).unwrap();
        o.set("latency_window", Some("1000")).unwrap();
        LatencyTarget::new(&o, depth).unwrap()
    }

    #[test]
    fn options_parse_as_fio_writes_them() {
        let mut o = LatencyOptions::default();
        o.set("latency_target", Some("500000")).unwrap();
        o.set("latency_window", Some("5s")).unwrap();
        o.set("latency_percentile", Some("99.9")).unwrap();
        assert_eq!((o.target_ns, o.window_ns, o.percentile), (500_000_000, 5_000_000_000, 99.9));
        assert!(o.set("latency_percentile", Some("101")).is_err());
        o.set("max_latency", Some("10ms,20ms")).unwrap();
        assert_eq!(o.max_ns, [10_000_000, 20_000_000]);
        assert!(o.validate("j", true).unwrap_err().0.contains("gtod_reduce"));
        let mut no_window = LatencyOptions::default();
        no_window.set("latency_target", Some("1")).unwrap();
        assert!(no_window.validate("j", false).unwrap_err().0.contains("latency_window"));
    }

    /// A device whose latency exceeds the target above depth 5: the
    /// search doubles 1, 2, 4, 8, falls back between 4 and 8, settles on
    /// 5 (trying 6 after three good windows below it) and then runs one
    /// final window there.
    #[test]
    fn the_search_settles_on_the_deepest_depth_that_meets_the_target() {
        let mut t = target(64);
        let mut now = 0u64;
        let mut depths = vec![t.qd];
        for _ in 0..100 {
            if t.done {
                break;
            }
            // One window of I/Os at the current depth.
            let lat = if t.qd > 5 { 900_000 } else { 100_000 };
            let mut quiesced = false;
            for _ in 0..10 {
                if t.completed(false, lat, now) == Verdict::Quiesce {
                    quiesced = true;
                    break;
                }
            }
            now += 1_000_000;
            if !quiesced {
                t.check(now);
            }
            depths.push(t.qd);
        }
        assert!(t.done, "the search ended: {depths:?}");
        assert_eq!(t.qd, 5, "{depths:?}");
        assert_eq!(&depths[..5], &[1, 2, 4, 8, 6], "{depths:?}");
    }

    #[test]
    fn a_miss_at_depth_one_or_past_max_latency_is_fatal() {
        let mut t = target(8);
        assert_eq!(t.completed(true, 600_000, 0), Verdict::Fatal);
        let mut o = LatencyOptions::default();
        o.set("max_latency", Some("1ms")).unwrap();
        let mut t = LatencyTarget::new(&o, 8).unwrap();
        assert_eq!(t.qd, 8, "a limit alone does not search");
        assert_eq!(t.completed(false, 999_999, 0), Verdict::Ok);
        assert_eq!(t.completed(false, 1_000_001, 0), Verdict::Fatal);
    }
}
