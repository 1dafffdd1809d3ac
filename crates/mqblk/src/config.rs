//! The spec grammar: `driver:key=value,key=value`, e.g.
//! `null:irqmode=2,completion_nsec=20000,memory_backed=1`, parsed once
//! into typed configs (a driver's, the queue's `QueueConfig`, the
//! scheduler's `Sched`) and printed back from them ([`SpecWriter`]).
//!
//! Every key is checked: an unknown key or a bad value is an error that
//! names the key and what is accepted ([`ConfigError`]). Drivers declare
//! their keys and read typed values through [`SpecParams`].
//!
//! Relies on: nothing but std (the scheduler tunables' names come in as
//! arguments).

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
            #[doc = concat!("Sets `", stringify!($field), "` (see the field for its spec key and unit).")]
            pub fn $field(mut self, value: $ty) -> Self {
                self.$field = value;
                self
            }
        )*
    };
}

/// Keys of the block layer itself, accepted in any driver's spec
/// ([`QueueConfig`](crate::QueueConfig) holds their values).
///
/// ```
/// assert!(mqblk::config::BLOCK_KEYS.contains(&"sched"));
/// assert!(mqblk::config::TUNABLE_KEYS.contains(&"read_expire"));
/// ```
pub const BLOCK_KEYS: &[&str] =
    &["wake", "plug_nesting", "plug_sync", "sched", "nr_requests", "hybrid_poll_delay", "io_timeout", "blktrace"];

/// Tunable keys of the built-in schedulers (accepted in any device spec,
/// for the scheduler it names).
pub const TUNABLE_KEYS: &[&str] = &[
    // mq-deadline
    "read_expire",
    "write_expire",
    "writes_starved",
    "fifo_batch",
    "front_merges",
    "async_depth",
    // kyber
    "read_lat_nsec",
    "write_lat_nsec",
    // bfq
    "low_latency",
    "limit_depths",
    "max_budget",
    "wr_max_time",
    "wr_min_idle_time",
    "slice_idle",
];

/// What is wrong with a spec or a typed config: each error names the
/// driver (or `queue`, `sched`), the key and what is accepted.
///
/// ```
/// use mqblk::config::{check_range, ConfigError, SpecParams};
///
/// let e = SpecParams::parse("null:gb=1,gb=2").unwrap_err();
/// assert_eq!(e, ConfigError::Duplicate { driver: "null".into(), key: "gb".into() });
/// assert_eq!(e.to_string(), "null: key 'gb' given more than once");
///
/// // The same wording for checks of typed values.
/// let e = check_range("null", "irqmode", 7, (0, 2)).unwrap_err();
/// assert_eq!(e, ConfigError::out_of_range("null", "irqmode", 7, 0, 2));
/// assert_eq!(e.to_string(), "null: bad value '7' for 'irqmode' (accepted: an integer in 0..=2)");
/// let e = ConfigError::conflict("null", "discard=1 needs memory_backed=1");
/// assert_eq!(e.to_string(), "null: discard=1 needs memory_backed=1");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A spec names a driver nobody registered.
    #[error("unknown device driver '{driver}'{} (accepted: {accepted})", did_you_mean(driver, accepted))]
    UnknownDriver { driver: String, accepted: String },
    /// A key neither the driver nor the block layer takes.
    #[error("{driver}: unknown key '{key}'{} (accepted keys: {accepted})", did_you_mean(key, accepted))]
    UnknownKey { driver: String, key: String, accepted: String },
    /// A value out of its key's range or form.
    #[error("{driver}: bad value '{value}' for '{key}' (accepted: {expected})")]
    BadValue { driver: String, key: String, value: String, expected: String },
    /// An item without `=`.
    #[error("{driver}: '{item}' is not of the form key=value")]
    Malformed { driver: String, item: String },
    /// A key given twice.
    #[error("{driver}: key '{key}' given more than once")]
    Duplicate { driver: String, key: String },
    /// Values that do not go together.
    #[error("{driver}: {message}")]
    Conflict { driver: String, message: String },
}

impl ConfigError {
    /// The error of a value outside `min..=max`, worded as a spec's parse
    /// words it, for checks of typed configs.
    pub fn out_of_range(driver: &str, key: &str, value: u64, min: u64, max: u64) -> Self {
        ConfigError::BadValue {
            driver: driver.to_string(),
            key: key.to_string(),
            value: value.to_string(),
            expected: format!("an integer in {min}..={max}"),
        }
    }

    /// A conflict between keys, named by `driver`.
    pub fn conflict(driver: &str, message: impl Into<String>) -> Self {
        ConfigError::Conflict { driver: driver.to_string(), message: message.into() }
    }
}

/// Checks a typed value against the range its spec key accepts (example:
/// [`ConfigError`]).
pub fn check_range(driver: &str, key: &str, value: u64, (min, max): (u64, u64)) -> Result<(), ConfigError> {
    match (min..=max).contains(&value) {
        true => Ok(()),
        false => Err(ConfigError::out_of_range(driver, key, value, min, max)),
    }
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

/// A parsed spec: the driver name and its key=value pairs, in order. A
/// driver reads its keys through it, typed, each in its range; errors name
/// the key.
///
/// ```
/// use mqblk::config::SpecParams;
///
/// let p = SpecParams::parse("mine: size_mb=64, mode=fast, verify=1, sched=bfq")?;
/// assert_eq!(p.driver, "mine");
/// p.check_keys(&["size_mb", "mode", "verify"])?; // and the block layer's (sched)
/// assert_eq!(p.u64_in("size_mb", 16, 1, 1024)?, 64);
/// assert_eq!(p.u64_in("queues", 1, 1, 8)?, 1, "absent: the default");
/// assert_eq!(p.choice("mode", "safe", &["safe", "fast"])?, "fast");
/// assert!(p.bool("verify", false)?);
/// assert_eq!((p.raw("mode"), p.is_set("queues")), (Some("fast"), false));
///
/// // Errors name the key and what it accepts.
/// let e = p.u64_in("size_mb", 16, 1, 32).unwrap_err();
/// assert!(e.to_string().contains("'size_mb'") && e.to_string().contains("1..=32"));
/// assert!(p.check_keys(&["size_mb"]).is_err(), "mode and verify are unknown");
/// assert!(p.check_keys_exact(&["size_mb", "mode", "verify"]).is_err(), "sched too, here");
/// let e = p.conflict("mode=fast needs verify=0");
/// assert_eq!(e.to_string(), "mine: mode=fast needs verify=0");
///
/// // Pairs, in order; split off some; or built in code.
/// assert_eq!(p.pairs()[0], ("size_mb".to_string(), "64".to_string()));
/// let (block, own) = p.partition(|key| mqblk::config::BLOCK_KEYS.contains(&key));
/// assert_eq!((block.pairs().len(), own.pairs().len()), (1, 3));
/// let q = SpecParams::from_pairs("mine", vec![("size_mb".into(), "8".into())]);
/// assert_eq!(q.u64_in("size_mb", 16, 1, 1024)?, 8);
/// # Ok::<(), mqblk::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecParams {
    /// The name before `:`.
    pub driver: String,
    pairs: Vec<(String, String)>,
}

impl SpecParams {
    /// Parses `driver:key=value,...` (spaces around items are dropped); a
    /// malformed item or a key given twice is an error.
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
        let known = |k: &str| accepted.contains(&k) || BLOCK_KEYS.contains(&k) || TUNABLE_KEYS.contains(&k);
        match self.pairs.iter().find(|(k, _)| !known(k)) {
            None => Ok(()),
            Some((key, _)) => Err(ConfigError::UnknownKey {
                driver: self.driver.clone(),
                key: key.clone(),
                accepted: accepted.iter().chain(BLOCK_KEYS).chain(TUNABLE_KEYS).copied().collect::<Vec<_>>().join(", "),
            }),
        }
    }

    /// Fails on the first key that is not in `accepted`, listing only
    /// those (for key sets apart from a device spec: a scheduler's
    /// tunables).
    pub fn check_keys_exact(&self, accepted: &[&str]) -> Result<(), ConfigError> {
        match self.pairs.iter().find(|(k, _)| !accepted.contains(&k.as_str())) {
            None => Ok(()),
            Some((key, _)) => Err(ConfigError::UnknownKey {
                driver: self.driver.clone(),
                key: key.clone(),
                accepted: if accepted.is_empty() { "none".into() } else { accepted.join(", ") },
            }),
        }
    }

    /// The key=value pairs, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// Splits the pairs in two, in order: those `take` selects, and the
    /// rest (both under this spec's driver name).
    pub fn partition(&self, take: impl Fn(&str) -> bool) -> (SpecParams, SpecParams) {
        let (taken, rest) = self.pairs.iter().cloned().partition(|(k, _)| take(k));
        (Self::from_pairs(&self.driver, taken), Self::from_pairs(&self.driver, rest))
    }

    /// Params from key=value pairs (for options given programmatically).
    pub fn from_pairs(driver: &str, pairs: Vec<(String, String)>) -> Self {
        Self { driver: driver.to_string(), pairs }
    }

    /// The value of `key` as given.
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Whether `key` is given.
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

    /// A conflict error under this spec's driver name.
    pub fn conflict(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Conflict { driver: self.driver.clone(), message: message.into() }
    }
}

/// A spec printed from typed configs: `driver:key=value,...`, each key
/// once, in the order written. Configs write the keys whose values differ
/// from their defaults, so a printed spec opens the same device and reads
/// as short as it can.
///
/// ```
/// use mqblk::config::SpecWriter;
///
/// let mut w = SpecWriter::new("null");
/// w.pair("gb", 4);
/// w.pair_if_not("irqmode", 1, 1); // the default: not written
/// w.pair_if_not("hw_queue_depth", 128, 64);
/// w.flag_if_not("memory_backed", true, false);
/// assert_eq!(w.finish(), "null:gb=4,hw_queue_depth=128,memory_backed=1");
/// ```
#[derive(Debug, Clone)]
pub struct SpecWriter {
    spec: String,
    keys: usize,
}

impl SpecWriter {
    /// A spec of driver `driver`, with no keys yet.
    pub fn new(driver: &str) -> Self {
        Self { spec: driver.to_string(), keys: 0 }
    }

    /// Writes `key=value`.
    pub fn pair(&mut self, key: &str, value: impl std::fmt::Display) {
        debug_assert!(!key.is_empty() && !key.contains([',', '=', ':']), "spec key '{key}'");
        let sep = if self.keys == 0 { ':' } else { ',' };
        self.keys += 1;
        use std::fmt::Write as _;
        let _ = write!(self.spec, "{sep}{key}={value}");
        debug_assert!(!self.spec.ends_with(',') && !self.spec.ends_with('='), "a spec value may not be empty");
    }

    /// Writes `key=value` unless `value` is `default`.
    pub fn pair_if_not<T: PartialEq + std::fmt::Display>(&mut self, key: &str, value: T, default: T) {
        if value != default {
            self.pair(key, value);
        }
    }

    /// Writes `key=1` or `key=0` unless `value` is `default`.
    pub fn flag_if_not(&mut self, key: &str, value: bool, default: bool) {
        self.pair_if_not(key, u8::from(value), u8::from(default));
    }

    /// The spec.
    pub fn finish(self) -> String {
        self.spec
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
