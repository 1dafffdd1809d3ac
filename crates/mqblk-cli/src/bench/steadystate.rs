//! fio's steady-state detection (`ss`, `ss_dur`, `ss_ramp`,
//! `ss_interval`): a job (with `group_reporting`, its whole group) stops
//! once its IOPS or bandwidth, sampled every `ss_interval` over a rolling
//! window of `ss_dur`, is steady: every sample within the limit of the
//! window's mean (`iops`, `bw`), or the least-squares slope of the
//! window below the limit (`iops_slope`, `bw_slope`); a limit with `%`
//! is a percentage of the window's mean.
//!
//! The rules and the report are fio's (steadystate.c, stat.c's
//! "steadystate" object); the supervisor (mod.rs) samples the jobs'
//! published counters, so the job loop does nothing for it. Sampling
//! starts one interval after `ss_ramp`, as in fio.

use std::time::{Duration, Instant};

use super::options::{err, OptionError};
use super::values::{parse_int, parse_time_ns};

/// What a job's steady state is judged on.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SteadyOptions {
    /// IOPS (else bandwidth, bytes/s).
    pub iops: bool,
    /// The window's slope (else its largest deviation from the mean).
    pub slope: bool,
    pub limit: f64,
    /// `limit` is a percentage of the window's mean.
    pub pct: bool,
    /// `ss_dur` (0: no detection), `ss_ramp`, `ss_interval` (1 s).
    pub dur_ns: u64,
    pub ramp_ns: u64,
    pub interval_ns: u64,
}

/// The option names (options.rs' `job_options` adds them).
pub const STEADY_OPTIONS: &[&str] = &[
    "ss",
    "steadystate",
    "ss_dur",
    "steadystate_duration",
    "ss_ramp",
    "steadystate_ramp_time",
    "ss_interval",
    "steadystate_check_interval",
];

/// fio's steady-state times: a bare number is seconds.
fn parse_time_s(key: &str, v: &str) -> Result<u64, OptionError> {
    if v.trim().bytes().all(|b| b.is_ascii_digit()) {
        return Ok(parse_int(key, v.trim(), 0, u64::MAX / 1_000_000_000)? * 1_000_000_000);
    }
    parse_time_ns(key, v)
}

impl SteadyOptions {
    /// Whether the job detects steady state.
    pub fn any(&self) -> bool {
        self.dur_ns > 0
    }

    /// Sets one steady-state option; false if `key` is none of them.
    pub(super) fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")));
        match key {
            "ss" | "steadystate" => self.set_criterion(key, v()?)?,
            "ss_dur" | "steadystate_duration" => self.dur_ns = parse_time_s(key, v()?)?,
            "ss_ramp" | "steadystate_ramp_time" => self.ramp_ns = parse_time_s(key, v()?)?,
            "ss_interval" | "steadystate_check_interval" => {
                self.interval_ns = parse_time_s(key, v()?)?;
                if self.interval_ns < 1_000_000 {
                    return err(format!("{key}: at least 1ms"));
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `iops:10%`, `bw_slope:0.1%`, `iops:2`.
    fn set_criterion(&mut self, key: &str, v: &str) -> Result<(), OptionError> {
        let bad = || {
            OptionError(format!(
                "{key}: bad value '{v}' (accepted: iops, iops_slope, bw, bw_slope, then :LIMIT or :LIMIT%)"
            ))
        };
        let (what, limit) = v.split_once(':').ok_or_else(bad)?;
        (self.iops, self.slope) = match what {
            "iops" => (true, false),
            "iops_slope" => (true, true),
            "bw" => (false, false),
            "bw_slope" => (false, true),
            _ => return Err(bad()),
        };
        let (number, pct) = limit.strip_suffix('%').map_or((limit, false), |n| (n, true));
        self.limit = number.parse::<f64>().ok().filter(|l| l.is_finite() && *l >= 0.0).ok_or_else(bad)?;
        self.pct = pct;
        Ok(())
    }

    /// Checks that the window holds at least two samples.
    pub(super) fn validate(&self, job: &str) -> Result<(), OptionError> {
        if self.dur_ns > 0 && self.dur_ns / self.interval() < 2 {
            return err(format!("job '{job}': ss_dur must span at least two ss_interval samples"));
        }
        Ok(())
    }

    pub fn interval(&self) -> u64 {
        if self.interval_ns == 0 {
            1_000_000_000
        } else {
            self.interval_ns
        }
    }

    /// fio's name of the criterion, e.g. `iops_slope:0.100000%`.
    pub fn name(&self) -> String {
        let what = if self.iops { "iops" } else { "bw" };
        let slope = if self.slope { "_slope" } else { "" };
        format!("{what}{slope}:{:.6}{}", self.limit, if self.pct { "%" } else { "" })
    }
}

/// A rolling window of samples and the verdict on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Steady {
    pub opts: SteadyOptions,
    /// The window's samples, oldest first: (IOPS, bytes/s).
    pub samples: std::collections::VecDeque<(u64, u64)>,
    pub attained: bool,
    pub criterion: f64,
    pub max_deviation: f64,
    pub slope: f64,
}

impl Steady {
    pub fn new(opts: SteadyOptions) -> Self {
        let len = (opts.dur_ns / opts.interval()) as usize;
        Self {
            opts,
            samples: std::collections::VecDeque::with_capacity(len),
            attained: false,
            criterion: 0.0,
            max_deviation: 0.0,
            slope: 0.0,
        }
    }

    fn intervals(&self) -> usize {
        (self.opts.dur_ns / self.opts.interval()) as usize
    }

    /// Adds one interval's sample; true once the window is steady.
    pub fn sample(&mut self, iops: u64, bw_bytes: u64) -> bool {
        if self.samples.len() == self.intervals() {
            self.samples.pop_front();
        }
        self.samples.push_back((iops, bw_bytes));
        if self.samples.len() < self.intervals() {
            return false;
        }
        let ys: Vec<f64> = self.samples.iter().map(|&(i, b)| if self.opts.iops { i } else { b } as f64).collect();
        let n = ys.len() as f64;
        let mean = ys.iter().sum::<f64>() / n;
        self.max_deviation = ys.iter().map(|y| (y - mean).abs()).fold(0.0, f64::max);
        // Least squares over x = 0..n-1 (fio takes the samples as evenly
        // spaced, which they are to within the supervisor's tick).
        let mean_x = (n - 1.0) / 2.0;
        let sxx: f64 = (0..ys.len()).map(|x| (x as f64 - mean_x).powi(2)).sum();
        let sxy: f64 = ys.iter().enumerate().map(|(x, y)| (x as f64 - mean_x) * (y - mean)).sum();
        self.slope = sxy / sxx;
        let measure = if self.opts.slope { self.slope } else { self.max_deviation };
        self.criterion = if self.opts.pct && mean > 0.0 { 100.0 * measure / mean } else { measure };
        self.attained = self.criterion.abs() < self.opts.limit;
        self.attained
    }

    /// fio's JSON "steadystate" object.
    pub fn to_json(&self) -> serde_json::Value {
        let n = self.samples.len().max(1) as u64;
        let (iops, bw): (Vec<u64>, Vec<u64>) = self.samples.iter().copied().unzip();
        serde_json::json!({
            "ss": self.opts.name(),
            "duration": self.opts.dur_ns / 1_000_000_000,
            "attained": u8::from(self.attained),
            "criterion": format!("{:.6}{}", self.criterion, if self.opts.pct { "%" } else { "" }),
            "max_deviation": self.max_deviation,
            "slope": self.slope,
            "data": {
                "bw_mean": bw.iter().sum::<u64>() / n,
                "iops_mean": iops.iter().sum::<u64>() / n,
                "iops": iops,
                "bw": bw,
            },
        })
    }

    /// fio's human "steadystate" line.
    pub fn to_human(&self) -> String {
        let n = self.samples.len().max(1) as u64;
        let iops_mean = self.samples.iter().map(|s| s.0).sum::<u64>() / n;
        let bw_mean = self.samples.iter().map(|s| s.1).sum::<u64>() / n;
        format!(
            "  steadystate  : attained={}, bw={}KiB/s, iops={}, {}={:.3}{}\n",
            if self.attained { "yes" } else { "no" },
            bw_mean / 1024,
            iops_mean,
            if self.opts.slope { "slope" } else { "mean dev" },
            self.criterion,
            if self.opts.pct { "%" } else { "" },
        )
    }
}

/// The supervisor's steady-state watch over one phase: a detector per
/// job clone with `ss_dur`, or one per reporting group with
/// `group_reporting` (its clones' counters summed, as fio's
/// `steadystate_check`).
#[derive(Debug, Default)]
pub struct SteadyWatch {
    units: Vec<Unit>,
}

#[derive(Debug)]
struct Unit {
    /// The job clones (indices into the phase's clones) it judges.
    members: Vec<usize>,
    steady: Steady,
    /// When sampling starts (its previous sample), and the members'
    /// I/Os and bytes then; None until the members' clock starts.
    last: Option<(Instant, u64, u64)>,
}

impl SteadyWatch {
    /// A detector per clone, or per group of `group_reporting` clones;
    /// `jobs` is each clone's (options, group id, group_reporting).
    pub fn new(jobs: &[(&SteadyOptions, u32, bool)]) -> Self {
        let mut units: Vec<Unit> = Vec::new();
        for (i, &(opts, groupid, grouped)) in jobs.iter().enumerate() {
            if !opts.any() {
                continue;
            }
            let same_group = |u: &&mut Unit| grouped && u.members.iter().any(|&m| jobs[m].2 && jobs[m].1 == groupid);
            match units.iter_mut().find(same_group) {
                Some(unit) => unit.members.push(i),
                None => units.push(Unit { members: vec![i], steady: Steady::new(*opts), last: None }),
            }
        }
        Self { units }
    }

    /// One supervisor tick: `started(i)` says whether clone `i`'s clock
    /// started, `counters(i)` gives its I/Os and bytes. Returns the
    /// clones that reached steady state now (to be stopped).
    pub fn tick(
        &mut self,
        now: Instant,
        started: impl Fn(usize) -> bool,
        counters: impl Fn(usize) -> (u64, u64),
    ) -> Vec<usize> {
        let mut stop = Vec::new();
        for unit in self.units.iter_mut().filter(|u| !u.steady.attained) {
            let sums = unit.members.iter().map(|&m| counters(m)).fold((0, 0), |a, c| (a.0 + c.0, a.1 + c.1));
            let interval = Duration::from_nanos(unit.steady.opts.interval());
            let Some((at, ios, bytes)) = unit.last else {
                if unit.members.iter().any(|&m| started(m)) {
                    // fio: the first sample is one interval after the ramp.
                    unit.last = Some((now + Duration::from_nanos(unit.steady.opts.ramp_ns), sums.0, sums.1));
                }
                continue;
            };
            if now < at {
                unit.last = Some((at, sums.0, sums.1)); // still ramping
                continue;
            }
            let elapsed = now.duration_since(at);
            if elapsed < interval {
                continue;
            }
            let per_s = |d: u64| (d as f64 / elapsed.as_secs_f64()) as u64;
            unit.last = Some((now, sums.0, sums.1));
            if unit.steady.sample(per_s(sums.0 - ios), per_s(sums.1 - bytes)) {
                stop.extend_from_slice(&unit.members);
            }
        }
        stop
    }

    /// Each clone's detector at the end (a group's, for each member).
    pub fn results(self, clones: usize) -> Vec<Option<Steady>> {
        let mut out = vec![None; clones];
        for unit in self.units {
            for &m in &unit.members {
                out[m] = Some(unit.steady.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(set: &[(&str, &str)]) -> SteadyOptions {
        crate::bench::options::group_from(set, SteadyOptions::set)
    }

    #[test]
    fn options_parse_as_fio_writes_them() {
        let o = opts(&[("ss", "iops:10%"), ("ss_dur", "30s"), ("ss_ramp", "10")]);
        assert!(o.iops && !o.slope && o.pct && o.limit == 10.0);
        assert_eq!((o.dur_ns, o.ramp_ns), (30_000_000_000, 10_000_000_000), "bare times are seconds");
        let o = opts(&[("steadystate", "bw_slope:2")]);
        assert!(!o.iops && o.slope && !o.pct && o.limit == 2.0);
        assert!(SteadyOptions::default().set("ss", Some("lat:1%")).unwrap_err().0.contains("iops_slope"));
        assert!(SteadyOptions::default().set("ss", Some("iops")).is_err());
        let short = opts(&[("ss", "iops:1"), ("ss_dur", "1s")]);
        assert!(short.validate("j").unwrap_err().0.contains("two"));
    }

    /// Samples within 10% of their mean are steady only once the window
    /// is full; a ramp in the window is not.
    #[test]
    fn deviation_within_the_limit_is_steady_once_the_window_is_full() {
        let mut s = Steady::new(opts(&[("ss", "iops:10%"), ("ss_dur", "3")]));
        assert!(!s.sample(100, 0));
        assert!(!s.sample(105, 0));
        assert!(s.sample(95, 0), "criterion {}", s.criterion);
        let mut ramp = Steady::new(opts(&[("ss", "iops:10%"), ("ss_dur", "3")]));
        for iops in [100, 200, 300] {
            assert!(!ramp.sample(iops, 0));
        }
        assert!((ramp.max_deviation - 100.0).abs() < 1e-9);
    }

    /// The slope is the least-squares one: 50 per interval for a linear
    /// ramp, so a limit of 1% of the mean is not met, and 0 for a flat line.
    #[test]
    fn slope_is_the_least_squares_slope() {
        let mut s = Steady::new(opts(&[("ss", "bw_slope:1%"), ("ss_dur", "4")]));
        for bw in [1000, 1050, 1100, 1150] {
            s.sample(0, bw);
        }
        assert!((s.slope - 50.0).abs() < 1e-9 && !s.attained);
        let mut flat = Steady::new(opts(&[("ss", "bw_slope:1%"), ("ss_dur", "4")]));
        for _ in 0..4 {
            flat.sample(0, 1000);
        }
        assert!(flat.attained && flat.slope == 0.0);
        assert_eq!(flat.to_json()["data"]["bw_mean"], 1000);
    }
}
