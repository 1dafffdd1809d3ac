//! Device specs: `driver:key=value,key=value`, e.g.
//! `null:irqmode=2,completion_nsec=20000,memory_backed=1`.
//!
//! Every key is checked: an unknown key or a bad value is an error that
//! names the key and what is accepted. Drivers declare their keys and read
//! typed values through [`SpecParams`]. Which driver a spec names is
//! looked up in driver/mod.rs and the registry (registry.rs).

use crate::sbitmap::WakePolicy;
use crate::sched::Sched;

/// Builder-style setters for a typed config, one per field:
/// `fn field(mut self, value) -> Self`, documented as setting the spec key
/// of the same name. For drivers' configs (`NullConfig`, `FileConfig`).
///
/// ```
/// #[derive(Default)]
/// pub struct RamConfig {
///     pub size_mb: u64,
///     pub read_only: bool,
/// }
///
/// impl RamConfig {
///     mqblk::setters! { size_mb: u64, read_only: bool }
/// }
///
/// let cfg = RamConfig::default().size_mb(64).read_only(true);
/// assert_eq!((cfg.size_mb, cfg.read_only), (64, true));
/// ```
#[macro_export]
macro_rules! setters {
    ($($field:ident: $ty:ty),* $(,)?) => {
        $(
            #[doc = concat!("Sets `", stringify!($field), "` (the spec key of that name).")]
            pub fn $field(mut self, value: $ty) -> Self {
                self.$field = value;
                self
            }
        )*
    };
}

/// Keys of the block layer itself, accepted in any driver's spec.
pub const BLOCK_KEYS: &[&str] =
    &["wake", "plug_nesting", "plug_sync", "sched", "nr_requests", "hybrid_poll_delay", "io_timeout"];

/// Block-layer options of a device (the block-layer keys of a spec).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueOptions {
    /// Tag wakeup policy (`wake=`).
    pub wake: Wake,
    /// Which plug levels flush (`plug_nesting=outermost|flush_each`).
    pub plug_nesting: crate::plug::PlugNesting,
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
}

impl Default for QueueOptions {
    fn default() -> Self {
        Self {
            wake: Wake::default(),
            plug_nesting: crate::plug::PlugNesting::default(),
            plug_sync: true,
            sched: Sched::default(),
            nr_requests: None,
            hybrid_poll_delay_us: 0,
            io_timeout_ms: None,
        }
    }
}

/// How freed tags wake sleeping submitters (`wake=`; ARCHITECTURE.md,
/// "Tag wakeup policies").
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
    /// A policy added with [`crate::register_wake_policy`], by name.
    Custom(String),
}

impl Wake {
    /// A policy registered with [`crate::register_wake_policy`].
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
            Wake::Custom(name) => match crate::registry::wake_policy(name) {
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
            expected: crate::registry::wake_policy_names().join(", "),
        }
    }

    fn from_name(driver: &str, name: &str) -> Result<Self, ConfigError> {
        Ok(match name {
            "batch" => Wake::Batch,
            "stash" => Wake::Stash,
            "handoff" => Wake::Handoff,
            other if crate::registry::wake_policy(other).is_some() => Wake::Custom(other.to_string()),
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

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("unknown device driver '{driver}'{} (accepted: {accepted})", did_you_mean(driver, accepted))]
    UnknownDriver { driver: String, accepted: String },
    #[error("{driver}: unknown key '{key}'{} (accepted keys: {accepted})", did_you_mean(key, accepted))]
    UnknownKey { driver: String, key: String, accepted: String },
    #[error("{driver}: bad value '{value}' for '{key}' (accepted: {expected})")]
    BadValue { driver: String, key: String, value: String, expected: String },
    #[error("{driver}: '{item}' is not of the form key=value")]
    Malformed { driver: String, item: String },
    #[error("{driver}: key '{key}' given more than once")]
    Duplicate { driver: String, key: String },
    #[error("{driver}: {message}")]
    Conflict { driver: String, message: String },
}

/// " (did you mean 'X'?)" for the accepted name (", "-separated) closest
/// to `word` by edit distance, if one is close enough to be a typo.
fn did_you_mean(word: &str, accepted: &str) -> String {
    let limit = (word.len() / 3).max(2);
    accepted
        .split(", ")
        .map(|name| (edit_distance(word, name), name))
        .filter(|&(d, _)| d <= limit)
        .min()
        .map_or(String::new(), |(_, name)| format!(" (did you mean '{name}'?)"))
}

/// Levenshtein distance (insertions, deletions, substitutions), by rows.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// A parsed spec: the driver name and its key=value pairs, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecParams {
    pub driver: String,
    pairs: Vec<(String, String)>,
}

impl SpecParams {
    pub fn parse(spec: &str) -> Result<Self, ConfigError> {
        let spec = spec.trim();
        let (driver, rest) = spec.split_once(':').unwrap_or((spec, ""));
        let driver = driver.trim().to_string();
        let mut pairs: Vec<(String, String)> = Vec::new();
        for item in rest.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                return Err(ConfigError::Malformed { driver, item: item.to_string() });
            };
            let key = key.trim().to_string();
            if pairs.iter().any(|(k, _)| *k == key) {
                return Err(ConfigError::Duplicate { driver, key });
            }
            pairs.push((key, value.trim().to_string()));
        }
        Ok(Self { driver, pairs })
    }

    /// Fails on the first key that is neither in `accepted` (the driver's)
    /// nor a block-layer key.
    pub fn check_keys(&self, accepted: &[&str]) -> Result<(), ConfigError> {
        let known =
            |k: &str| accepted.contains(&k) || BLOCK_KEYS.contains(&k) || crate::sched::TUNABLE_KEYS.contains(&k);
        match self.pairs.iter().find(|(k, _)| !known(k)) {
            None => Ok(()),
            Some((key, _)) => Err(ConfigError::UnknownKey {
                driver: self.driver.clone(),
                key: key.clone(),
                accepted: accepted
                    .iter()
                    .chain(BLOCK_KEYS)
                    .chain(crate::sched::TUNABLE_KEYS)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// The block-layer options of this spec.
    pub fn queue_options(&self) -> Result<QueueOptions, ConfigError> {
        let wake = match self.raw("wake") {
            Some(name) => Wake::from_name(&self.driver, name)?,
            None => Wake::default(),
        };
        let nesting = self.choice("plug_nesting", "outermost", crate::plug::PlugNesting::NAMES)?;
        let plug_nesting = crate::plug::PlugNesting::from_name(nesting).expect("a listed name");
        let plug_sync = self.bool("plug_sync", true)?;
        let sched = Sched::from_params(self.raw("sched").unwrap_or("none"), self)?;
        let nr_requests = match self.is_set("nr_requests") {
            true => Some(self.u64_in("nr_requests", 0, 4, 65536)? as u32),
            false => None,
        };
        let hybrid_poll_delay_us = self.u64_in("hybrid_poll_delay", 0, 0, 1_000_000)? as u32;
        let io_timeout_ms = match self.is_set("io_timeout") {
            true => Some(self.u64_in("io_timeout", 0, 1, 3_600_000)?),
            false => None,
        };
        Ok(QueueOptions { wake, plug_nesting, plug_sync, sched, nr_requests, hybrid_poll_delay_us, io_timeout_ms })
    }

    /// The key=value pairs, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// Params from key=value pairs (for options given programmatically).
    pub fn from_pairs(driver: &str, pairs: Vec<(String, String)>) -> Self {
        Self { driver: driver.to_string(), pairs }
    }

    pub fn raw(&self, key: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    pub fn is_set(&self, key: &str) -> bool {
        self.raw(key).is_some()
    }

    fn bad(&self, key: &str, value: &str, expected: impl Into<String>) -> ConfigError {
        ConfigError::BadValue {
            driver: self.driver.clone(),
            key: key.to_string(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }

    /// An integer in `min..=max` (decimal, or hex with 0x).
    pub fn u64_in(&self, key: &str, default: u64, min: u64, max: u64) -> Result<u64, ConfigError> {
        let Some(value) = self.raw(key) else { return Ok(default) };
        let parsed = match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => value.parse::<u64>().ok(),
        };
        match parsed {
            Some(v) if (min..=max).contains(&v) => Ok(v),
            _ => Err(self.bad(key, value, format!("an integer in {min}..={max}"))),
        }
    }

    /// 0 or 1 (also true/false, on/off).
    pub fn bool(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        let Some(value) = self.raw(key) else { return Ok(default) };
        match value {
            "1" | "true" | "on" | "yes" => Ok(true),
            "0" | "false" | "off" | "no" => Ok(false),
            _ => Err(self.bad(key, value, "0 or 1")),
        }
    }

    /// One of `choices`.
    pub fn choice<'a>(&self, key: &str, default: &'a str, choices: &[&'a str]) -> Result<&'a str, ConfigError> {
        let Some(value) = self.raw(key) else { return Ok(default) };
        choices.iter().find(|c| **c == value).copied().ok_or_else(|| self.bad(key, value, choices.join(", ")))
    }

    pub fn conflict(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Conflict { driver: self.driver.clone(), message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs_in_order() {
        let p = SpecParams::parse("null:irqmode=2, completion_nsec=20000").unwrap();
        assert_eq!(p.driver, "null");
        assert_eq!(p.raw("irqmode"), Some("2"));
        assert_eq!(p.u64_in("completion_nsec", 0, 0, u64::MAX).unwrap(), 20000);
        assert_eq!(SpecParams::parse("null").unwrap().raw("x"), None);
    }

    #[test]
    fn edit_distance_counts_single_character_edits() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(did_you_mean("irqmod", "gb, irqmode"), " (did you mean 'irqmode'?)");
        assert_eq!(did_you_mean("zzzzzzzz", "gb, irqmode"), "", "nothing close: no guess");
    }

    #[test]
    fn errors_name_the_key() {
        let p = SpecParams::parse("null:irqmod=2").unwrap();
        let e = p.check_keys(&["irqmode", "gb"]).unwrap_err().to_string();
        assert!(e.contains("irqmod") && e.contains("irqmode, gb"), "{e}");
        let p = SpecParams::parse("null:irqmode=7").unwrap();
        let e = p.u64_in("irqmode", 1, 0, 2).unwrap_err().to_string();
        assert!(e.contains("irqmode") && e.contains("0..=2"), "{e}");
        assert!(matches!(SpecParams::parse("null:gb"), Err(ConfigError::Malformed { .. })));
        assert!(matches!(SpecParams::parse("null:gb=1,gb=2"), Err(ConfigError::Duplicate { .. })));
    }
}
