//! null_blk's fault injection: the `timeout` and `requeue` parameters, each
//! a kernel `fault_attr` (lib/fault-inject.c) deciding per request whether
//! this one fails.
//!
//! A spec gives one as `interval:probability:space:times` (the module
//! parameter's `interval,probability,space,times` with `:` for `,`, which
//! separates a spec's keys). Per request, as `should_fail(attr, 1)`:
//! nothing fails while `times` is 0 or `probability` is 0; while `space`
//! is above 1 a request spends one of it and passes (so `space` N lets the
//! first N - 1 pass, as the kernel's `space > size` test does); then only every
//! `interval`-th request is a candidate, and a candidate fails with
//! `probability` percent; each failure spends one of `times` (-1: no
//! limit).
//!
//! What a failure does is the driver's (lib.rs): a `timeout` request is
//! lost (never handled, never completed) until the block layer's timeout
//! handler ends it with ETIMEDOUT, as null_blk's fake timeouts; a `requeue`
//! request is handed back busy and dispatched again. `Faults` holds a
//! device's attrs and the requests `timeout` lost.
//!
//! Relies on: atomics only for the decision (lock-free; the random draw is
//! a seeded generator, so a run is reproducible); a lock per hardware
//! queue for the lost requests.

use mqblk::driver::{Hctx, Rq};
use mqblk::Op;
use mqblk_sync::{AtomicI64, AtomicU64, Mutex, Ordering};

use crate::config::NullConfig;
use crate::splitmix::SplitMix;

/// A fault_attr as a spec gives it (`interval:probability:space:times`).
///
/// ```
/// use mqblk::{Device, Error, Status};
/// use mqblk_null::{FaultSpec, IrqMode, NullConfig};
///
/// // The second read fails, once: space 2 lets one pass first, times 1
/// // allows one failure.
/// let once = FaultSpec { interval: 1, probability: 100, space: 2, times: 1 };
/// let mut error = [None; 4]; // read, write, flush, discard
/// error[0] = Some(once);
/// let cfg = NullConfig::new().gb(1).irqmode(IrqMode::None).error(error);
/// assert!(Device::builder(cfg.clone()).to_string().ends_with("error_read=1:100:2:1"));
/// let dev = Device::builder(cfg).build()?;
/// let mut client = dev.client();
/// let mut buf = [0; 512];
/// client.read_at(&mut buf, 0)?;
/// assert!(matches!(client.read_at(&mut buf, 0), Err(Error::Status(Status::IoErr))));
/// client.read_at(&mut buf, 0)?;
/// # Ok::<(), mqblk::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultSpec {
    /// Only every `interval`-th candidate may fail (0 and 1: each).
    pub interval: u64,
    /// Percent (0-100) of candidates that fail.
    pub probability: u32,
    /// A budget of requests that pass first: `space` N lets N - 1 pass
    /// (the kernel's `space > size` with size 1).
    pub space: u64,
    /// Failures left (-1: no limit).
    pub times: i64,
}

impl FaultSpec {
    /// Parses `interval:probability:space:times`.
    pub(crate) fn parse(value: &str) -> Result<Self, String> {
        let fields: Vec<&str> = value.split(':').map(str::trim).collect();
        let [interval, probability, space, times] = fields[..] else {
            return Err(format!(
                "'{value}' is not interval:probability:space:times (4 fields, the kernel's fault_attr)"
            ));
        };
        let num = |name: &str, v: &str| v.parse::<u64>().map_err(|_| format!("{name} '{v}' is not a count"));
        let probability = num("probability", probability)?;
        if probability > 100 {
            return Err(format!("probability {probability} is over 100 (percent)"));
        }
        let times = match times {
            "-1" => -1,
            t => num("times", t)?.min(i64::MAX as u64) as i64,
        };
        Ok(Self {
            interval: num("interval", interval)?,
            probability: probability as u32,
            space: num("space", space)?,
            times,
        })
    }

    /// The spec form back (`interval:probability:space:times`).
    pub(crate) fn to_spec(self) -> String {
        format!("{}:{}:{}:{}", self.interval, self.probability, self.space, self.times)
    }
}

/// A fault_attr in use: its budget, count and failures left change as
/// requests pass.
pub(crate) struct FaultAttr {
    interval: u64,
    probability: u32,
    space: AtomicI64,
    times: AtomicI64,
    count: AtomicU64,
    rng: SplitMix,
    /// Failures injected so far.
    failed: AtomicU64,
}

impl FaultAttr {
    pub(crate) fn new(spec: FaultSpec, seed: u64) -> Self {
        Self {
            interval: spec.interval,
            probability: spec.probability,
            space: AtomicI64::new(spec.space.min(i64::MAX as u64) as i64),
            times: AtomicI64::new(spec.times),
            count: AtomicU64::new(0),
            rng: SplitMix::new(seed),
            failed: AtomicU64::new(0),
        }
    }

    /// Whether this request fails (`should_fail(attr, 1)`).
    pub(crate) fn should_fail(&self) -> bool {
        if self.probability == 0 || self.times.load(Ordering::Relaxed) == 0 {
            return false;
        }
        // The budget: spent one request at a time while above one.
        if self.space.load(Ordering::Relaxed) > 1 {
            if self.space.fetch_sub(1, Ordering::Relaxed) > 1 {
                return false;
            }
            self.space.fetch_add(1, Ordering::Relaxed); // lost a race to 1
        }
        if self.interval > 1 && (self.count.fetch_add(1, Ordering::Relaxed) + 1) % self.interval != 0 {
            return false;
        }
        if self.probability < 100 && self.probability as u64 <= self.rng.next() % 100 {
            return false;
        }
        // Spend one of `times`, unless unlimited or already spent by a
        // racing failure.
        let spent = self.times.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| match t {
            0 => None,
            -1 => Some(-1),
            t => Some(t - 1),
        });
        if spent.is_err() {
            return false;
        }
        self.failed.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Failures injected so far.
    pub(crate) fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

/// Fault injection in use, and the requests `timeout` lost: per hardware
/// queue, by driver tag, until the timeout handler (or shutdown) ends them.
pub(crate) struct Faults {
    pub(crate) timeout: Option<FaultAttr>,
    pub(crate) requeue: Option<FaultAttr>,
    /// Transient EIO by op: read, write, flush, discard and write zeroes.
    pub(crate) error: [Option<FaultAttr>; 4],
    pub(crate) lost: Box<[Mutex<LostRqs>]>,
}

/// One hardware queue's lost requests, by driver tag.
type LostRqs = Box<[Option<Rq>]>;

impl Faults {
    pub(crate) fn new(cfg: &NullConfig) -> Option<Self> {
        if cfg.timeout.is_none() && cfg.requeue.is_none() && cfg.error.iter().all(Option::is_none) {
            return None;
        }
        let nr_queues = cfg.submit_queues + cfg.poll_queues;
        let depth = cfg.hw_queue_depth as usize;
        Some(Self {
            timeout: cfg.timeout.map(|f| FaultAttr::new(f, 0x7469_6d65)),
            requeue: cfg.requeue.map(|f| FaultAttr::new(f, 0x7265_7175)),
            error: std::array::from_fn(|i| cfg.error[i].map(|f| FaultAttr::new(f, 0x6572_7230 + i as u64))),
            lost: (0..nr_queues).map(|_| Mutex::new((0..depth).map(|_| None).collect())).collect(),
        })
    }

    /// The transient-error fault for `op`, if one is set.
    pub(crate) fn error_for(&self, op: Op) -> Option<&FaultAttr> {
        let i = match op {
            Op::Read => 0,
            Op::Write => 1,
            Op::Flush => 2,
            Op::Discard | Op::WriteZeroes => 3,
            _ => return None,
        };
        self.error[i].as_ref()
    }

    /// Keeps `rq` without handling it: null_blk's fake timeout.
    pub(crate) fn lose(&self, hctx: &Hctx, rq: Rq) {
        let tag = rq.tag() as usize;
        let old = self.lost[hctx.index()].lock()[tag].replace(rq);
        assert!(old.is_none(), "driver tag {tag} of hctx {} lost twice", hctx.index());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(spec: &str) -> FaultAttr {
        FaultAttr::new(FaultSpec::parse(spec).unwrap(), 1)
    }

    fn pattern(a: &FaultAttr, n: usize) -> String {
        (0..n).map(|_| if a.should_fail() { 'x' } else { '.' }).collect()
    }

    #[test]
    fn interval_space_and_times_as_the_kernel_counts_them() {
        assert_eq!(pattern(&attr("1:100:0:-1"), 5), "xxxxx");
        assert_eq!(pattern(&attr("3:100:0:-1"), 9), "..x..x..x");
        assert_eq!(pattern(&attr("1:100:0:2"), 5), "xx...");
        // space 3: requests pass while the budget is above one request.
        assert_eq!(pattern(&attr("1:100:3:-1"), 5), "..xxx");
        assert_eq!(pattern(&attr("2:100:3:1"), 8), "...x....");
        assert_eq!(pattern(&attr("1:0:0:-1"), 5), ".....");
        let a = attr("1:100:0:0");
        assert_eq!(pattern(&a, 3), "...");
        assert_eq!(a.failed(), 0);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "safe arithmetic over 10,000 draws: Miri checks unsafe code and concurrency, and interprets this one for minutes"
    )]
    fn probability_fails_about_that_share_reproducibly() {
        // The bounds stand 11 standard deviations of the binomial from
        // its mean.
        const N: usize = 10_000;
        let a = attr("1:25:0:-1");
        let p = pattern(&a, N);
        let failed = p.matches('x').count();
        assert_eq!(failed as u64, a.failed());
        assert!((N / 5..N * 3 / 10).contains(&failed), "{failed} of {N} at 25%");
        assert_eq!(p, pattern(&attr("1:25:0:-1"), N), "the same seed, the same draws");
    }

    #[test]
    fn bad_specs_name_the_field() {
        for (value, says) in [
            ("1:100:0", "4 fields"),
            ("1:100:0:-1:5", "4 fields"),
            ("x:100:0:-1", "interval 'x'"),
            ("1:101:0:-1", "over 100"),
            ("1:50:-3:-1", "space '-3'"),
            ("1:50:0:-2", "times '-2'"),
        ] {
            let e = FaultSpec::parse(value).unwrap_err();
            assert!(e.contains(says), "{value}: {e}");
        }
        let s = FaultSpec::parse("2:50:10:-1").unwrap();
        assert_eq!(FaultSpec::parse(&s.to_spec()).unwrap(), s);
    }
}
