//! fio's per-I/O shaping: rate limits (`rate`, `rate_iops`, `rate_min`,
//! `rate_iops_min`, `rate_process`, `io_submit_mode`) and think time
//! (`thinktime`, `thinktime_spin`, `thinktime_blocks`). A job with any of
//! them, or with fio's logs (log.rs) or `write_iolog`, runs the job
//! loop's `SHAPED` copy (job.rs); a job without runs a copy that never
//! tests for them.
//!
//! The rules are fio's (backend.c `usec_for_io`, io_u.c `rate_ddir`,
//! backend.c `handle_thinktime`): each direction's next I/O is due when
//! the bytes it has issued would take that long at its rate (or, with
//! `rate_process=poisson`, after exponential gaps of mean one I/O's
//! time); a direction ahead of its rate gives way to the other if that
//! one is due, else the job sleeps until the nearer is due, having
//! waited for its I/O in flight first (fio's `io_u_quiesce`) unless
//! `io_submit_mode=offload`. Think time: after every `thinktime_blocks`
//! I/Os issued, the job waits for its I/O in flight, spins
//! `thinktime_spin`, then sleeps the rest of `thinktime`. Flow control
//! (`flow`, flow.rs): a job ahead of its flow's share stalls likewise,
//! its I/O in flight waited for, then `flow_sleep` slept.
//!
//! Relies on the job's clock (mqblk::clock) for `now`, in ns since the
//! job's start; sleeping is `std::thread::sleep` (a real sleep).

use super::flow::FLOW_MAX_WEIGHT;
use super::options::{err, OptionError};
use super::values::{parse_int, parse_size, parse_time_ns, per_direction_values};

/// The shaping options of one job, with fio's defaults.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShapeOptions {
    /// `rate=R[,W[,T]]`: bytes per second per direction (0: no limit;
    /// the trims' value is kept for a trim direction, which jobs lack).
    pub rate_bytes: [u64; 3],
    /// `rate_iops=R[,W[,T]]`: I/Os per second per direction (0: no limit).
    pub rate_iops: [u64; 3],
    /// `rate_min=R[,W]` (`ratemin`) and `rate_iops_min=R[,W]`: the job
    /// fails when a `ratecycle` (1 s) falls below them.
    pub rate_min_bytes: [u64; 3],
    pub rate_iops_min: [u64; 3],
    /// `rate_process=poisson` (default `linear`).
    pub poisson: bool,
    /// `io_submit_mode=offload`: a job ahead of its rate does not wait for
    /// its I/O in flight before it sleeps (fio's offload mode submits from
    /// a pool; here the job's thread still submits).
    pub offload: bool,
    /// `thinktime` (µs by default), `thinktime_spin`, `thinktime_blocks`.
    pub thinktime_ns: u64,
    pub thinktime_spin_ns: u64,
    pub thinktime_blocks: u64,
    /// `flow` (a weight, 0: no flow control), `flow_id`, `flow_sleep`
    /// (µs by default): flow.rs.
    pub flow_weight: u64,
    pub flow_id: u64,
    pub flow_sleep_ns: u64,
}

/// The shaping options' names (options.rs' `job_options` adds them).
pub const SHAPE_OPTIONS: &[&str] = &[
    "rate",
    "rate_iops",
    "rate_min",
    "ratemin",
    "rate_iops_min",
    "rate_process",
    "io_submit_mode",
    "thinktime",
    "thinktime_spin",
    "thinktime_blocks",
    "flow",
    "flow_id",
    "flow_sleep",
];

/// fio's `thinktime` family: a time whose bare number is microseconds.
fn parse_time_us(key: &str, v: &str) -> Result<u64, OptionError> {
    if v.trim().bytes().all(|b| b.is_ascii_digit()) {
        let us = parse_int(key, v.trim(), 0, u64::MAX / 1_000)?;
        return Ok(us * 1_000);
    }
    parse_time_ns(key, v)
}

impl ShapeOptions {
    /// Whether the job shapes its I/O at all.
    pub fn any(&self) -> bool {
        self.paced()
            || self.thinktime_ns > 0
            || self.rate_min_bytes != [0, 0, 0]
            || self.rate_iops_min != [0, 0, 0]
            || self.flow_weight > 0
    }

    fn paced(&self) -> bool {
        self.rate_bytes != [0, 0, 0] || self.rate_iops != [0, 0, 0]
    }

    /// Sets one shaping option; false if `key` is none of them.
    pub(super) fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")));
        let count = |k: &str, s: &str| parse_int(k, s, 0, u64::MAX);
        match key {
            "rate" => self.rate_bytes = per_direction_values(key, v()?, 0, |s| parse_size(key, s))?,
            "rate_iops" => self.rate_iops = per_direction_values(key, v()?, 0, |s| count(key, s))?,
            "rate_min" | "ratemin" => self.rate_min_bytes = per_direction_values(key, v()?, 0, |s| parse_size(key, s))?,
            "rate_iops_min" => self.rate_iops_min = per_direction_values(key, v()?, 0, |s| count(key, s))?,
            "rate_process" => {
                self.poisson = match v()? {
                    "linear" => false,
                    "poisson" => true,
                    o => return err(format!("rate_process: bad value '{o}' (accepted: linear, poisson)")),
                }
            }
            "io_submit_mode" => {
                self.offload = match v()? {
                    "inline" => false,
                    "offload" => true,
                    o => return err(format!("io_submit_mode: bad value '{o}' (accepted: inline, offload)")),
                }
            }
            "thinktime" => self.thinktime_ns = parse_time_us(key, v()?)?,
            "thinktime_spin" => self.thinktime_spin_ns = parse_time_us(key, v()?)?,
            "thinktime_blocks" => self.thinktime_blocks = parse_int(key, v()?, 1, u64::MAX)?,
            "flow" => self.flow_weight = parse_int(key, v()?, 0, FLOW_MAX_WEIGHT)?,
            "flow_id" => self.flow_id = parse_int(key, v()?, 0, u64::from(u32::MAX))?,
            "flow_sleep" => self.flow_sleep_ns = parse_time_us(key, v()?)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checks what fio checks: a poisson process needs a rate.
    pub(super) fn validate(&self, job: &str) -> Result<(), OptionError> {
        if self.poisson && !self.paced() {
            return err(format!("job '{job}': rate_process=poisson needs rate or rate_iops"));
        }
        if self.thinktime_spin_ns > self.thinktime_ns && self.thinktime_ns > 0 {
            return err(format!("job '{job}': thinktime_spin is longer than thinktime"));
        }
        Ok(())
    }
}

/// What the job must do before its next I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stall {
    /// Issue now, in this direction (is_write).
    Go(bool),
    /// Wait until `until_ns` (job time) and then issue in this direction;
    /// `quiesce`: wait for the I/O in flight first.
    Until { until_ns: u64, is_write: bool, quiesce: bool },
}

/// A job's rate limits at run time.
pub(super) struct Pacer {
    /// Bytes per second per direction (rate_iops times the block size).
    bps: [u64; 2],
    bs: [u64; 2],
    /// When each direction's next I/O is due (ns of job time).
    next_ns: [u64; 2],
    issued_bytes: [u64; 2],
    poisson: Option<u64>,
    quiesce: bool,
    mixed: bool,
    /// `rate_min`: (cycle start ns, bytes and I/Os at its start).
    min_bytes: [u64; 2],
    min_iops: [u64; 2],
    cycle: (u64, [u64; 2], [u64; 2]),
}

/// fio's `ratecycle` default: rate_min is checked over 1 s windows.
const RATE_CYCLE_NS: u64 = 1_000_000_000;

impl Pacer {
    /// The pacer of `o` for block sizes `bs` (read, write), `mixed` when
    /// the job reads and writes; None if the job has no rate.
    pub(super) fn new(o: &ShapeOptions, bs: [u64; 2], mixed: bool, seed: u64) -> Option<Self> {
        if !o.paced() && o.rate_min_bytes == [0, 0, 0] && o.rate_iops_min == [0, 0, 0] {
            return None;
        }
        let bps = [0, 1].map(|d| if o.rate_iops[d] > 0 { o.rate_iops[d] * bs[d] } else { o.rate_bytes[d] });
        Some(Self {
            bps,
            bs,
            next_ns: [0, 0],
            issued_bytes: [0, 0],
            poisson: o.poisson.then_some(seed | 1),
            quiesce: !o.offload,
            mixed,
            min_bytes: [o.rate_min_bytes[0], o.rate_min_bytes[1]],
            min_iops: [o.rate_iops_min[0], o.rate_iops_min[1]],
            cycle: (0, [0, 0], [0, 0]),
        })
    }

    /// fio's `rate_ddir`: the direction to issue in, or how long to wait.
    pub(super) fn stall(&self, is_write: bool, now_ns: u64) -> Stall {
        let d = usize::from(is_write);
        if self.next_ns[d] <= now_ns {
            return Stall::Go(is_write);
        }
        let mut pick = is_write;
        if self.mixed {
            let o = d ^ 1;
            if self.next_ns[o] <= now_ns {
                return Stall::Go(!is_write);
            }
            if self.next_ns[o] < self.next_ns[d] {
                pick = !is_write;
            }
        }
        Stall::Until { until_ns: self.next_ns[usize::from(pick)], is_write: pick, quiesce: self.quiesce }
    }

    /// Counts an issued I/O and sets when its direction's next is due
    /// (fio's `usec_for_io`).
    pub(super) fn issued(&mut self, is_write: bool, bytes: u64) {
        let d = usize::from(is_write);
        self.issued_bytes[d] += bytes;
        let bps = self.bps[d];
        if bps == 0 {
            return;
        }
        self.next_ns[d] = match self.poisson.as_mut() {
            Some(rng) => {
                // Exponential gaps of mean one block's time at the rate.
                let mean_ns = self.bs[d] as f64 * 1e9 / bps as f64;
                *rng ^= *rng << 13;
                *rng ^= *rng >> 7;
                *rng ^= *rng << 17;
                let u = ((*rng >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                self.next_ns[d] + (mean_ns * -u.ln()) as u64
            }
            None => {
                let b = self.issued_bytes[d];
                (b / bps) * 1_000_000_000 + (b % bps) * 1_000_000_000 / bps
            }
        };
    }

    /// fio's `check_min_rate`: at each `ratecycle`, the bytes and I/Os
    /// done since the last one against `rate_min` and `rate_iops_min`.
    pub(super) fn check_min_rate(&mut self, now_ns: u64, bytes: [u64; 2], ios: [u64; 2]) -> Result<(), String> {
        let (start, b0, i0) = self.cycle;
        if now_ns < start + RATE_CYCLE_NS {
            return Ok(());
        }
        let secs = (now_ns - start) as f64 / 1e9;
        // fio checks only the directions the job has done I/O in.
        for d in (0..2).filter(|&d| bytes[d] > 0) {
            let rate = (bytes[d] - b0[d]) as f64 / secs;
            if self.min_bytes[d] > 0 && rate < self.min_bytes[d] as f64 {
                return Err(format!("min rate {} not met, got {:.0} bytes/s", self.min_bytes[d], rate));
            }
            let iops = (ios[d] - i0[d]) as f64 / secs;
            if self.min_iops[d] > 0 && iops < self.min_iops[d] as f64 {
                return Err(format!("min iops rate {} not met, got {iops:.0}", self.min_iops[d]));
            }
        }
        self.cycle = (now_ns, bytes, ios);
        Ok(())
    }
}

/// A job's think time at run time (fio's `handle_thinktime`).
pub(super) struct Think {
    pub(super) spin_ns: u64,
    pub(super) sleep_ns: u64,
    blocks: u64,
    issued_since: u64,
}

impl Think {
    pub(super) fn new(o: &ShapeOptions) -> Option<Self> {
        (o.thinktime_ns > 0).then(|| Self {
            spin_ns: o.thinktime_spin_ns,
            sleep_ns: o.thinktime_ns - o.thinktime_spin_ns,
            blocks: o.thinktime_blocks.max(1),
            issued_since: 0,
        })
    }

    /// Counts an issued I/O; true when the job is due to think.
    pub(super) fn issued(&mut self) -> bool {
        self.issued_since += 1;
        self.issued_since >= self.blocks
    }

    /// The thinking is done: count afresh.
    pub(super) fn thought(&mut self) {
        self.issued_since = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(set: &[(&str, &str)]) -> ShapeOptions {
        crate::bench::options::group_from(set, ShapeOptions::set)
    }

    #[test]
    fn options_parse_as_fio_writes_them() {
        let o = opts(&[("rate", "1m,500k"), ("rate_iops", ",200"), ("thinktime", "250"), ("thinktime_spin", "1ms")]);
        // fio's rule (values.rs): the last value given covers the trims.
        assert_eq!(o.rate_bytes, [1 << 20, 500 << 10, 500 << 10]);
        assert_eq!(o.rate_iops, [0, 200, 200]);
        assert_eq!(opts(&[("rate", "300")]).rate_bytes, [300; 3], "one value: every direction, as fio");
        assert_eq!(opts(&[("rate_iops", "1,2,3")]).rate_iops, [1, 2, 3]);
        assert!(ShapeOptions::default().set("rate", Some("1,2,3,4")).is_err());
        assert_eq!((o.thinktime_ns, o.thinktime_spin_ns), (250_000, 1_000_000), "bare thinktime is µs");
        assert!(o.validate("j").unwrap_err().0.contains("thinktime_spin"));
        let e = opts(&[("rate_process", "poisson")]).validate("j").unwrap_err().0;
        assert!(e.contains("needs rate"), "{e}");
        assert!(ShapeOptions::default().set("rate_process", Some("bursty")).unwrap_err().0.contains("poisson"));
        assert!(!ShapeOptions::default().set("iodepth", Some("1")).unwrap());
        let o = opts(&[("flow", "8"), ("flow_sleep", "1000")]);
        assert!(o.any(), "a flow weight shapes the job");
        assert_eq!((o.flow_weight, o.flow_sleep_ns), (8, 1_000_000), "bare flow_sleep is µs");
        assert!(ShapeOptions::default().set("flow", Some("1001")).is_err());
    }

    #[test]
    fn a_linear_rate_spaces_ios_by_their_time_at_the_rate() {
        // 1,000 I/Os per second of 4 KiB: one due every ms.
        let o = opts(&[("rate_iops", "1000")]);
        let mut p = Pacer::new(&o, [4096, 4096], false, 1).unwrap();
        assert_eq!(p.stall(false, 0), Stall::Go(false));
        p.issued(false, 4096);
        assert_eq!(p.stall(false, 999_999), Stall::Until { until_ns: 1_000_000, is_write: false, quiesce: true });
        assert_eq!(p.stall(false, 1_000_000), Stall::Go(false));
        for _ in 0..9 {
            p.issued(false, 4096);
        }
        assert_eq!(p.next_ns[0], 10_000_000);
    }

    #[test]
    fn a_direction_ahead_gives_way_to_one_that_is_due() {
        let o = opts(&[("rate_iops", "1000,10"), ("io_submit_mode", "offload")]);
        let mut p = Pacer::new(&o, [4096, 4096], true, 1).unwrap();
        p.issued(true, 4096); // the next write is due at 100 ms
        assert_eq!(p.stall(true, 1_000), Stall::Go(false), "the read is due: switch");
        p.issued(false, 4096); // the next read at 1 ms
        assert_eq!(p.stall(true, 2_000), Stall::Until { until_ns: 1_000_000, is_write: false, quiesce: false });
    }

    #[test]
    fn poisson_gaps_average_one_ios_time() {
        let o = opts(&[("rate_iops", "1000"), ("rate_process", "poisson")]);
        let mut p = Pacer::new(&o, [4096, 4096], false, 42).unwrap();
        let mut gaps = Vec::new();
        for _ in 0..20_000 {
            let before = p.next_ns[0];
            p.issued(false, 4096);
            gaps.push(p.next_ns[0] - before);
        }
        let mean = gaps.iter().sum::<u64>() as f64 / gaps.len() as f64;
        assert!((mean - 1e6).abs() < 0.03e6, "mean gap {mean} ns");
        let short = gaps.iter().filter(|&&g| g < 1_000_000).count() as f64 / gaps.len() as f64;
        // Exponential: P(gap < mean) = 1 - 1/e.
        assert!((short - 0.632).abs() < 0.02, "{short}");
    }

    #[test]
    fn rate_min_fails_a_cycle_below_it() {
        let o = opts(&[("rate_min", "1m")]);
        let mut p = Pacer::new(&o, [4096, 4096], false, 1).unwrap();
        assert!(p.check_min_rate(500_000_000, [0, 0], [0, 0]).is_ok(), "a cycle is 1 s");
        assert!(p.check_min_rate(1_000_000_000, [2 << 20, 0], [512, 0]).is_ok());
        let e = p.check_min_rate(2_000_000_000, [(2 << 20) + 4096, 0], [513, 0]).unwrap_err();
        assert!(e.contains("min rate 1048576 not met"), "{e}");
    }

    #[test]
    fn think_time_comes_every_n_blocks() {
        let mut t = Think::new(&opts(&[("thinktime", "1ms"), ("thinktime_blocks", "3")])).unwrap();
        assert_eq!([t.issued(), t.issued(), t.issued()], [false, false, true]);
        t.thought();
        assert!(!t.issued());
        assert!(Think::new(&ShapeOptions::default()).is_none());
    }
}
