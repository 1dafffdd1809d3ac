//! The typed choice of an I/O scheduler: [`Sched`] with each built-in
//! elevator's tunables (kernel names and defaults), or an elevator
//! registered by name. The string form (`"bfq,limit_depths=0"`, or
//! `sched=bfq,limit_depths=0` in a device spec) parses into it; errors
//! name the key.

use std::fmt;
use std::str::FromStr;

use super::{Bfq, Elevator, ElevatorArgs, Kyber, MqDeadline};
use crate::config::{ConfigError, SpecParams, SpecWriter, TUNABLE_KEYS};
use crate::error::Error;

/// The I/O scheduler of a device (`sched=`), with its tunables. Its
/// string form is what queue/scheduler takes: the name, then the tunables
/// that differ from their defaults.
///
/// ```
/// use mqblk::sched::{BfqTunables, DeadlineTunables, KyberTunables};
/// use mqblk::Sched;
///
/// let deadline = Sched::MqDeadline(DeadlineTunables::default().read_expire(100).fifo_batch(8));
/// assert_eq!(deadline.to_string(), "mq-deadline,read_expire=100,fifo_batch=8");
/// assert_eq!("mq-deadline,fifo_batch=8,read_expire=100".parse::<Sched>()?, deadline);
/// assert_eq!(deadline.name(), "mq-deadline");
///
/// let kyber = Sched::Kyber(KyberTunables::default().read_lat_nsec(1_000_000));
/// assert_eq!(kyber.to_string(), "kyber,read_lat_nsec=1000000");
/// let bfq = Sched::Bfq(BfqTunables::default().low_latency(false));
/// assert_eq!(bfq.to_string(), "bfq,low_latency=0");
/// assert_eq!(Sched::default(), Sched::None);
///
/// // Tunables set in code are checked as a spec's would be.
/// let bad = Sched::MqDeadline(DeadlineTunables::default().fifo_batch(0));
/// assert!(bad.validate().unwrap_err().to_string().contains("fifo_batch"));
/// assert!("bfq,read_expire=5".parse::<Sched>().is_err(), "mq-deadline's, not bfq's");
/// // An elevator registered by name (see `Elevator`) is `Sched::custom`.
/// assert_eq!(Sched::custom("sstf").name(), "sstf");
/// # Ok::<(), mqblk::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Sched {
    /// No elevator: requests go to the driver in submission order.
    #[default]
    None,
    /// mq-deadline: a sorted and a FIFO queue per direction, reads
    /// favoured, expiry times against starvation.
    MqDeadline(DeadlineTunables),
    /// kyber: read and write latency targets, enforced by per-domain depth
    /// limits.
    Kyber(KyberTunables),
    /// bfq: budgets per client, proportional share, low latency for
    /// interactive I/O.
    Bfq(BfqTunables),
    /// An elevator added with [`register_elevator`](crate::sched::register_elevator), with the
    /// tunables its factory reads (`"sstf,key=value"`).
    Custom {
        /// The name it was registered by.
        name: String,
        /// Its tunables as given (key, value).
        tunables: Vec<(String, String)>,
    },
}

/// The scheduler tags per queue of the probe device a registered
/// elevator is built for when its spec is parsed (`Sched::check_values`):
/// the default depth of a device of 32 driver tags or more.
const PROBE_NR_REQUESTS: u32 = 64;

/// A tunable: its kernel name, default and accepted range.
struct Key {
    name: &'static str,
    default: u64,
    min: u64,
    max: u64,
}

const fn key(name: &'static str, default: u64, min: u64, max: u64) -> Key {
    Key { name, default, min, max }
}

/// Declares a tunables struct whose fields are read from spec keys of the
/// same name, each in its range, with a builder-style setter per field.
macro_rules! tunables {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident: $ty:ty = $key:expr,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct $name {
            $($(#[$fdoc])* pub $field: $ty,)*
        }

        impl $name {
            const KEYS: &'static [Key] = &[$($key,)*];

            $($(#[$fdoc])* pub fn $field(mut self, value: $ty) -> Self {
                self.$field = value;
                self
            })*

            fn from_params(p: &SpecParams) -> Result<Self, ConfigError> {
                let mut keys = Self::KEYS.iter();
                Ok(Self { $($field: {
                    let k = keys.next().expect("a key per field");
                    <$ty as Tunable>::from_u64(p.u64_in(k.name, k.default, k.min, k.max)?)
                },)* })
            }

            fn pairs(&self) -> Vec<(String, String)> {
                let mut keys = Self::KEYS.iter();
                vec![$((keys.next().expect("a key per field").name.to_string(), Tunable::to_u64(self.$field).to_string()),)*]
            }
        }

        impl Default for $name {
            fn default() -> Self {
                let mut keys = Self::KEYS.iter();
                Self { $($field: <$ty as Tunable>::from_u64(keys.next().expect("a key per field").default),)* }
            }
        }
    };
}

/// A tunable's value type (bools are 0 or 1, as in sysfs).
trait Tunable {
    fn from_u64(v: u64) -> Self;
    fn to_u64(self) -> u64;
}

impl Tunable for u64 {
    fn from_u64(v: u64) -> Self {
        v
    }
    fn to_u64(self) -> u64 {
        self
    }
}

impl Tunable for u32 {
    fn from_u64(v: u64) -> Self {
        u32::try_from(v).expect("ranges of u32 tunables fit")
    }
    fn to_u64(self) -> u64 {
        self.into()
    }
}

impl Tunable for bool {
    fn from_u64(v: u64) -> Self {
        v != 0
    }
    fn to_u64(self) -> u64 {
        self.into()
    }
}

tunables! {
    /// mq-deadline's tunables (block/mq-deadline.c names; times in ms), a
    /// setter each (example: [`Sched`]).
    DeadlineTunables {
        read_expire: u64 = key("read_expire", 500, 0, 3_600_000),
        write_expire: u64 = key("write_expire", 5000, 0, 3_600_000),
        writes_starved: u32 = key("writes_starved", 2, 0, 1 << 20),
        fifo_batch: u32 = key("fifo_batch", 16, 1, 1 << 20),
        front_merges: bool = key("front_merges", 1, 0, 1),
        /// Scheduler tags async I/O and writes may hold; 0: 3/4 of
        /// nr_requests, following depth changes (the kernel's default).
        async_depth: u32 = key("async_depth", 0, 0, 65536),
    }
}

tunables! {
    /// kyber's tunables: latency targets in ns, a setter each (example:
    /// [`Sched`]).
    KyberTunables {
        read_lat_nsec: u64 = key("read_lat_nsec", 2_000_000, 1, u64::MAX),
        write_lat_nsec: u64 = key("write_lat_nsec", 10_000_000, 1, u64::MAX),
    }
}

tunables! {
    /// bfq's tunables (times in ms; `limit_depths` is mqblk's switch for
    /// the depth limits of "bfq: limit tags for writes and async I/O"), a
    /// setter each (example: [`Sched`]).
    BfqTunables {
        low_latency: bool = key("low_latency", 1, 0, 1),
        limit_depths: bool = key("limit_depths", 1, 0, 1),
        max_budget: u64 = key("max_budget", 16384, 1, 1 << 30),
        wr_max_time: u64 = key("wr_max_time", 6000, 1, 3_600_000),
        wr_min_idle_time: u64 = key("wr_min_idle_time", 2000, 0, 3_600_000),
        slice_idle: u64 = key("slice_idle", 8, 0, 1000),
    }
}

impl Sched {
    /// An elevator registered with
    /// [`register_elevator`](crate::sched::register_elevator), with no
    /// tunables given.
    pub fn custom(name: impl Into<String>) -> Self {
        Sched::Custom { name: name.into(), tunables: Vec::new() }
    }

    /// The name `sched=` chooses it by.
    pub fn name(&self) -> &str {
        match self {
            Sched::None => "none",
            Sched::MqDeadline(_) => "mq-deadline",
            Sched::Kyber(_) => "kyber",
            Sched::Bfq(_) => "bfq",
            Sched::Custom { name, .. } => name,
        }
    }

    /// Whether `key` is a tunable of some scheduler, built in or
    /// registered (so that a device spec gives it to the scheduler, not to
    /// the driver).
    pub(crate) fn is_tunable_key(key: &str) -> bool {
        TUNABLE_KEYS.contains(&key) || super::registry::is_elevator_tunable(key)
    }

    /// The tunables scheduler `name` takes, or the error naming `sched`'s
    /// accepted values if there is no such scheduler.
    fn tunables_of(name: &str, driver: &str) -> Result<Vec<String>, ConfigError> {
        let names = |keys: &[Key]| keys.iter().map(|k| k.name.to_string()).collect();
        Ok(match name {
            "none" => Vec::new(),
            "mq-deadline" => names(DeadlineTunables::KEYS),
            "kyber" => names(KyberTunables::KEYS),
            "bfq" => names(BfqTunables::KEYS),
            other => match super::registry::elevator(other) {
                Some(entry) => entry.tunables.clone(),
                None => {
                    return Err(ConfigError::BadValue {
                        driver: driver.to_string(),
                        key: "sched".into(),
                        value: other.into(),
                        expected: super::registry::elevator_names().join(", "),
                    })
                }
            },
        })
    }

    /// The scheduler `name` with the tunables among `p`'s pairs (the
    /// pairs that are not tunables are left alone). A tunable of another
    /// scheduler is an error naming it and the ones this one takes.
    pub(crate) fn from_params(name: &str, p: &SpecParams) -> Result<Self, ConfigError> {
        let given: Vec<(String, String)> = p.pairs().iter().filter(|(k, _)| Self::is_tunable_key(k)).cloned().collect();
        let own = Self::tunables_of(name, &p.driver)?;
        if let Some((k, _)) = given.iter().find(|(k, _)| !own.contains(k)) {
            return Err(p.conflict(format!(
                "'{k}' is not a tunable of sched={name} (its tunables: {})",
                if own.is_empty() { "none".to_string() } else { own.join(", ") }
            )));
        }
        let tunables = SpecParams::from_pairs(&p.driver, given);
        Ok(match name {
            "none" => Sched::None,
            "mq-deadline" => Sched::MqDeadline(DeadlineTunables::from_params(&tunables)?),
            "kyber" => Sched::Kyber(KyberTunables::from_params(&tunables)?),
            "bfq" => Sched::Bfq(BfqTunables::from_params(&tunables)?),
            other => {
                let sched = Sched::Custom { name: other.to_string(), tunables: tunables.pairs().to_vec() };
                sched.check_values()?;
                sched
            }
        })
    }

    /// Checks a registered elevator's tunable values when its spec is
    /// parsed, as a built-in's are: its factory reads them with the
    /// ranges it declares (`SpecParams::u64_in` and the like), so it
    /// builds the elevator once for a probe device of one hardware queue
    /// and [`PROBE_NR_REQUESTS`] scheduler tags and drops it. A
    /// configuration error (a value out of its declared range) is the
    /// parse's error; any other (one that may depend on the real device's
    /// queues or depth) is left to `Device::open`, which builds it again.
    fn check_values(&self) -> Result<(), ConfigError> {
        let Sched::Custom { name, tunables } = self else { return Ok(()) };
        let Some(entry) = super::registry::elevator(name) else { return Ok(()) };
        let tunables = SpecParams::from_pairs(name, tunables.clone());
        let args = ElevatorArgs { nr_hw_queues: 1, nr_requests: PROBE_NR_REQUESTS, tunables };
        match (entry.factory)(&args) {
            Err(Error::Config(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// Every tunable as a key=value pair (custom: those given).
    fn pairs(&self) -> Vec<(String, String)> {
        match self {
            Sched::None => Vec::new(),
            Sched::MqDeadline(t) => t.pairs(),
            Sched::Kyber(t) => t.pairs(),
            Sched::Bfq(t) => t.pairs(),
            Sched::Custom { tunables, .. } => tunables.clone(),
        }
    }

    /// The tunables that differ from the scheduler's defaults (custom:
    /// those given).
    fn changed_pairs(&self) -> Vec<(String, String)> {
        let defaults = match self {
            Sched::MqDeadline(_) => Sched::MqDeadline(Default::default()).pairs(),
            Sched::Kyber(_) => Sched::Kyber(Default::default()).pairs(),
            Sched::Bfq(_) => Sched::Bfq(Default::default()).pairs(),
            _ => Vec::new(),
        };
        self.pairs().into_iter().filter(|p| !defaults.contains(p)).collect()
    }

    /// Checks the tunables: names (a registered scheduler's own) and
    /// ranges (a value set in code may be out of one).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let params = SpecParams::from_pairs("sched", self.pairs());
        Sched::from_params(self.name(), &params).map(|_| ())
    }

    /// Writes `sched=NAME` and the tunables that differ from their
    /// defaults, each as a key of the device spec; nothing for `none`.
    pub(crate) fn write_spec(&self, w: &mut SpecWriter) {
        if *self == Sched::None {
            return;
        }
        w.pair("sched", self.name());
        for (key, value) in self.changed_pairs() {
            w.pair(&key, value);
        }
    }

    /// Builds the elevator (None for `none`) for a device of
    /// `nr_hw_queues` queues with `nr_requests` scheduler tags each.
    pub(crate) fn build(&self, nr_hw_queues: usize, nr_requests: u32) -> Result<Option<Box<dyn Elevator>>, Error> {
        self.validate()?;
        Ok(match self {
            Sched::None => None,
            Sched::MqDeadline(t) => Some(Box::new(MqDeadline::new(nr_hw_queues, nr_requests, t)?)),
            Sched::Kyber(t) => Some(Box::new(Kyber::new(nr_hw_queues, nr_requests, t))),
            Sched::Bfq(t) => Some(Box::new(Bfq::new(nr_hw_queues, nr_requests, t))),
            Sched::Custom { name, tunables } => {
                let entry = super::registry::elevator(name).ok_or_else(|| ConfigError::BadValue {
                    driver: "sched".into(),
                    key: "sched".into(),
                    value: name.clone(),
                    expected: super::registry::elevator_names().join(", "),
                })?;
                let tunables = SpecParams::from_pairs(name, tunables.clone());
                Some((entry.factory)(&ElevatorArgs { nr_hw_queues, nr_requests, tunables })?)
            }
        })
    }
}

/// `"name"` or `"name,key=value,..."`, as written to queue/scheduler.
/// Every key must be a tunable of that scheduler, built in or registered.
impl FromStr for Sched {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let (name, tunables) = s.split_once(',').unwrap_or((s, ""));
        let (name, params) = (name.trim(), SpecParams::parse(&format!("sched:{tunables}"))?);
        let own = Sched::tunables_of(name, "sched")?;
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        // A tunable of another scheduler is named as such by from_params;
        // a key no scheduler takes is unknown.
        let (_, unknown) = params.partition(Sched::is_tunable_key);
        unknown.check_keys_exact(&own)?;
        Sched::from_params(name, &params)
    }
}

/// The string form: the name, then the tunables that differ from the
/// defaults (`mq-deadline,fifo_batch=4`).
impl fmt::Display for Sched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        for pair in self.changed_pairs() {
            write!(f, ",{}={}", pair.0, pair.1)?;
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn string_form_round_trips() {
        for s in ["none", "mq-deadline", "mq-deadline,fifo_batch=4", "bfq,limit_depths=0", "kyber,read_lat_nsec=5"] {
            let sched: Sched = s.parse().unwrap();
            assert_eq!(sched.to_string(), s);
        }
        let sched: Sched = "mq-deadline,fifo_batch=4".parse().unwrap();
        assert_eq!(sched, Sched::MqDeadline(DeadlineTunables::default().fifo_batch(4)));
    }

    #[test]
    fn errors_name_the_key() {
        let e = "cfq".parse::<Sched>().unwrap_err().to_string();
        assert!(e.contains("'cfq'") && e.contains("mq-deadline"), "{e}");
        let e = "bfq,timeout_sync=125".parse::<Sched>().unwrap_err().to_string();
        assert!(e.contains("timeout_sync"), "{e}");
        let e = "bfq,read_expire=5".parse::<Sched>().unwrap_err().to_string();
        assert!(e.contains("read_expire") && e.contains("sched=bfq"), "{e}");
        let e = Sched::MqDeadline(DeadlineTunables::default().fifo_batch(0)).validate().unwrap_err().to_string();
        assert!(e.contains("fifo_batch"), "{e}");
    }
}
