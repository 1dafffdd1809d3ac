//! The queue's typed configuration: [`QueueConfig`], the block-layer keys
//! of a device spec (wake policy, plugging, scheduler and its tunables,
//! scheduler tags, hybrid polling, request timeout), parsed once from a
//! spec, checked as a whole, and printed back as one.
//!
//! Relies on: config.rs (the spec grammar), sched/ (the scheduler choice,
//! `Sched`), sbitmap/ (wake policies), registry.rs (policies registered by
//! name), plug.rs (`PlugNesting`).

use crate::config::{check_range, ConfigError, SpecParams, SpecWriter, BLOCK_KEYS};
use crate::sbitmap::WakePolicy;
use crate::sched::Sched;

/// `nr_requests`: scheduler tags per hardware queue.
const NR_REQUESTS_RANGE: (u64, u64) = (4, 65536);
/// `hybrid_poll_delay`, in us.
const HYBRID_POLL_DELAY_RANGE: (u64, u64) = (0, 1_000_000);
/// `io_timeout`, in ms.
const IO_TIMEOUT_RANGE: (u64, u64) = (1, 3_600_000);

/// The block layer's configuration of a device (the block-layer keys of a
/// spec): `QueueConfig::default()` is every key's default, changed by a
/// setter per field.
///
/// ```
/// use mqblk::config::{SpecParams, SpecWriter};
/// use mqblk::{PlugNesting, QueueConfig, Sched, Wake};
///
/// let opts = QueueConfig::default()
///     .wake(Wake::Stash)
///     .plug_nesting(PlugNesting::FlushEach)
///     .plug_sync(true)
///     .sched(Sched::Kyber(Default::default()))
///     .nr_requests(Some(32))
///     .hybrid_poll_delay_us(5)
///     .io_timeout_ms(Some(1000));
/// opts.validate()?;
/// let mut w = SpecWriter::new("null");
/// opts.write_spec(&mut w);
/// let spec = w.finish();
/// let expected = concat!(
///     "null:wake=stash,plug_nesting=flush_each,sched=kyber,",
///     "nr_requests=32,hybrid_poll_delay=5,io_timeout=1000",
/// );
/// assert_eq!(spec, expected);
///
/// // And back: the block layer's keys, the rest left to the driver.
/// let (parsed, rest) = QueueConfig::from_params(&SpecParams::parse(&format!("{spec},gb=4"))?)?;
/// assert_eq!(parsed, opts);
/// assert_eq!(rest.pairs().len(), 1);
/// assert!(QueueConfig::default().nr_requests(Some(2)).validate().is_err(), "nr_requests is 4..=65536");
/// # Ok::<(), mqblk::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// Tag wakeup policy (`wake=`).
    pub wake: Wake,
    /// Which plug levels flush (`plug_nesting=outermost|flush_each`).
    pub plug_nesting: PlugNesting,
    /// Are sync bios plugged (`plug_sync=1`, the default, as Linux since
    /// 4.1)? With 0 they bypass an active plug and are issued at once, as
    /// blk-mq's single-queue path did before "blk-mq: fix plugging in
    /// blk_sq_make_request" (plug.rs).
    pub plug_sync: bool,
    /// The I/O scheduler and its tunables (`sched=mq-deadline`, with
    /// tunables by their kernel names, e.g. `read_expire=250`).
    pub sched: Sched,
    /// Scheduler tags per hardware queue (None: 2 x min(queue_depth, 128)).
    pub nr_requests: Option<u32>,
    /// Hybrid polling (`hybrid_poll_delay=` in us, like a positive value of
    /// the kernel's io_poll_delay): a client waiting for polled I/O sleeps
    /// this long before it starts spinning. 0: spin at once (classic).
    pub hybrid_poll_delay_us: u32,
    /// How long a request may be with the driver before its timeout
    /// handler runs (`io_timeout=` in ms, the queue's sysfs io_timeout);
    /// None: the driver's `rq_timeout` (30 s for most).
    pub io_timeout_ms: Option<u64>,
    /// Trace the block layer's events in blktrace's format into this
    /// directory (`blktrace=DIR`): files NAME.blktrace.N, NAME the
    /// driver's name, for `blkparse -D DIR -i NAME` (trace/).
    pub blktrace: Option<std::path::PathBuf>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            wake: Wake::default(),
            plug_nesting: PlugNesting::default(),
            plug_sync: true,
            sched: Sched::default(),
            nr_requests: None,
            hybrid_poll_delay_us: 0,
            io_timeout_ms: None,
            blktrace: None,
        }
    }
}

/// How freed tags wake sleeping submitters (`wake=`; ARCHITECTURE.md,
/// "Tag wakeup policies").
///
/// ```
/// use mqblk::Wake;
///
/// assert_eq!(Wake::default(), Wake::Handoff);
/// assert_eq!("batch".parse::<Wake>()?, Wake::Batch);
/// assert_eq!(Wake::Stash.to_string(), "stash");
/// assert!("fastest".parse::<Wake>().is_err(), "not registered");
/// // A policy registered with `register_wake_policy` (see `WakePolicy`).
/// assert_eq!(Wake::custom("mine").name(), "mine");
/// # Ok::<(), mqblk::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Wake {
    /// The kernel 6.2+ batched wakeup.
    Batch,
    /// Hou Tao's stash-wake-use.
    Stash,
    /// mqblk's own: freed tags are granted to waiters in order (the default).
    #[default]
    Handoff,
    /// A policy added with [`register_wake_policy`](crate::sbitmap::register_wake_policy), by name.
    Custom(String),
}

impl Wake {
    /// A policy registered with [`register_wake_policy`](crate::sbitmap::register_wake_policy).
    pub fn custom(name: impl Into<String>) -> Self {
        Wake::Custom(name.into())
    }

    /// The name `wake=` chooses it by.
    pub fn name(&self) -> &str {
        match self {
            Wake::Batch => "batch",
            Wake::Stash => "stash",
            Wake::Handoff => "handoff",
            Wake::Custom(name) => name,
        }
    }

    /// A new instance of the policy (one per tag set).
    pub(crate) fn policy(&self) -> Result<Box<dyn WakePolicy>, ConfigError> {
        Ok(match self {
            Wake::Batch => Box::<crate::sbitmap::BatchWake>::default(),
            Wake::Stash => Box::<crate::sbitmap::StashWake>::default(),
            Wake::Handoff => Box::<crate::sbitmap::HandoffWake>::default(),
            Wake::Custom(name) => match crate::sbitmap::registered_wake_policy(name) {
                Some(factory) => factory(),
                None => return Err(Wake::unknown("wake", name)),
            },
        })
    }

    fn unknown(driver: &str, name: &str) -> ConfigError {
        ConfigError::BadValue {
            driver: driver.to_string(),
            key: "wake".into(),
            value: name.to_string(),
            expected: crate::sbitmap::wake_policy_names().join(", "),
        }
    }

    fn from_name(driver: &str, name: &str) -> Result<Self, ConfigError> {
        Ok(match name {
            "batch" => Wake::Batch,
            "stash" => Wake::Stash,
            "handoff" => Wake::Handoff,
            other if crate::sbitmap::registered_wake_policy(other).is_some() => Wake::Custom(other.to_string()),
            other => return Err(Wake::unknown(driver, other)),
        })
    }
}

impl std::str::FromStr for Wake {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        Wake::from_name("wake", s.trim())
    }
}

impl std::fmt::Display for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl QueueConfig {
    /// The block-layer keys among `p`'s pairs and the chosen scheduler's
    /// tunables, parsed; the other pairs (the driver's, or unknown ones)
    /// come back in order. A tunable of another scheduler is an error
    /// naming it.
    pub fn from_params(p: &SpecParams) -> Result<(Self, SpecParams), ConfigError> {
        let (ours, rest) = p.partition(|k| BLOCK_KEYS.contains(&k) || Sched::is_tunable_key(k));
        let wake = match ours.raw("wake") {
            Some(name) => Wake::from_name(&ours.driver, name)?,
            None => Wake::default(),
        };
        let nesting = ours.choice("plug_nesting", "outermost", PlugNesting::NAMES)?;
        let optional = |key: &str, (min, max): (u64, u64)| -> Result<Option<u64>, ConfigError> {
            ours.is_set(key).then(|| ours.u64_in(key, 0, min, max)).transpose()
        };
        let cfg = QueueConfig {
            wake,
            plug_nesting: PlugNesting::from_name(nesting).expect("a listed name"),
            plug_sync: ours.bool("plug_sync", true)?,
            sched: Sched::from_params(ours.raw("sched").unwrap_or("none"), &ours)?,
            nr_requests: optional("nr_requests", NR_REQUESTS_RANGE)?.map(|n| n as u32),
            hybrid_poll_delay_us: ours.u64_in(
                "hybrid_poll_delay",
                0,
                HYBRID_POLL_DELAY_RANGE.0,
                HYBRID_POLL_DELAY_RANGE.1,
            )? as u32,
            io_timeout_ms: optional("io_timeout", IO_TIMEOUT_RANGE)?,
            blktrace: ours.raw("blktrace").map(std::path::PathBuf::from),
        };
        Ok((cfg, rest))
    }

    /// Checks the values a program set (a spec's parse has checked them
    /// already): errors name the spec key, as a spec's would.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(n) = self.nr_requests {
            check_range("queue", "nr_requests", n.into(), NR_REQUESTS_RANGE)?;
        }
        check_range("queue", "hybrid_poll_delay", self.hybrid_poll_delay_us.into(), HYBRID_POLL_DELAY_RANGE)?;
        if let Some(ms) = self.io_timeout_ms {
            check_range("queue", "io_timeout", ms, IO_TIMEOUT_RANGE)?;
        }
        self.sched.validate()
    }

    /// Writes the keys that differ from their defaults.
    pub fn write_spec(&self, w: &mut SpecWriter) {
        let d = QueueConfig::default();
        if self.wake != d.wake {
            w.pair("wake", &self.wake);
        }
        if self.plug_nesting != d.plug_nesting {
            w.pair("plug_nesting", self.plug_nesting.name());
        }
        w.flag_if_not("plug_sync", self.plug_sync, d.plug_sync);
        self.sched.write_spec(w);
        if let Some(n) = self.nr_requests {
            w.pair("nr_requests", n);
        }
        w.pair_if_not("hybrid_poll_delay", self.hybrid_poll_delay_us, d.hybrid_poll_delay_us);
        if let Some(ms) = self.io_timeout_ms {
            w.pair("io_timeout", ms);
        }
        if let Some(dir) = &self.blktrace {
            w.pair("blktrace", dir.display());
        }
    }

    crate::setters! {
        wake: Wake,
        plug_nesting: PlugNesting,
        plug_sync: bool,
        sched: Sched,
        nr_requests: Option<u32>,
        hybrid_poll_delay_us: u32,
        io_timeout_ms: Option<u64>,
        blktrace: Option<std::path::PathBuf>,
    }
}

/// Which plug levels flush (`plug_nesting=` in a device spec).
///
/// ```
/// use mqblk::PlugNesting;
///
/// assert_eq!(PlugNesting::from_name("flush_each"), Some(PlugNesting::FlushEach));
/// assert_eq!(PlugNesting::default().name(), "outermost");
/// assert_eq!(PlugNesting::NAMES, ["outermost", "flush_each"]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PlugNesting {
    /// Only the outermost plug flushes (Linux since 2015; the default).
    #[default]
    Outermost,
    /// Every level flushes its own requests when it ends. Hypothetical:
    /// no kernel did this (the 2015 patch's premise, refuted in its
    /// review); kept to show what nested flushing would cost.
    FlushEach,
}

impl PlugNesting {
    /// The names `plug_nesting=` takes.
    pub const NAMES: &'static [&'static str] = &["outermost", "flush_each"];

    /// The nesting `plug_nesting=name` chooses.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "outermost" => Some(Self::Outermost),
            "flush_each" => Some(Self::FlushEach),
            _ => None,
        }
    }

    /// The name `plug_nesting=` chooses it by.
    pub fn name(self) -> &'static str {
        match self {
            Self::Outermost => "outermost",
            Self::FlushEach => "flush_each",
        }
    }
}
