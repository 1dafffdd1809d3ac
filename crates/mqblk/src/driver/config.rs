//! A driver's typed configuration ([`DriverConfig`]): what the driver's
//! part of a spec (`null:gb=1,irqmode=0`) parses into, once. The device's
//! config (`DeviceConfig`) holds one beside the queue's; front ends find
//! the driver's by type and adjust it (`cfg.driver_mut::<NullConfig>()`),
//! and a device's spec is printed back from it.
//!
//! A driver without a typed config of its own registers a plain opening
//! function instead (`register_driver`); [`SpecConfig`] then keeps its
//! keys as given.
//!
//! Relies on: config.rs (the spec grammar), the `Driver` trait.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::Driver;
use crate::config::{ConfigError, SpecParams, SpecWriter};
use crate::error::Error;

/// A driver's typed configuration, one type per driver (`NullConfig`,
/// `FileConfig`), `Clone` (cloning and finding it by type come with that:
/// [`DriverConfigObject`]). Implement it for a driver registered with
/// [`register_driver_config`](super::register_driver_config).
///
/// ```
/// use mqblk::config::{check_range, ConfigError, SpecParams, SpecWriter};
/// use mqblk::driver::{register_driver_config, Driver, DriverConfig, Hctx, QueueRqResult, Rq};
/// use mqblk::{Device, DeviceConfig, QueueLimits, Status, TagSetConfig};
///
/// /// A `nop:` spec, typed: `size_mb`, the size in MiB (default 64).
/// #[derive(Debug, Clone, PartialEq)]
/// struct NopConfig {
///     size_mb: u64,
/// }
///
/// const SIZE_MB: (u64, u64) = (1, 1 << 20);
///
/// impl NopConfig {
///     /// A spec's keys (the block layer's are taken out before).
///     fn parse(p: &SpecParams) -> Result<Box<dyn DriverConfig>, ConfigError> {
///         p.check_keys(&["size_mb"])?;
///         Ok(Box::new(NopConfig { size_mb: p.u64_in("size_mb", 64, SIZE_MB.0, SIZE_MB.1)? }))
///     }
/// }
///
/// impl DriverConfig for NopConfig {
///     fn driver_name(&self) -> &str {
///         "nop"
///     }
///     fn validate(&self) -> Result<(), ConfigError> {
///         check_range("nop", "size_mb", self.size_mb, SIZE_MB)
///     }
///     fn write_spec(&self, w: &mut SpecWriter) {
///         w.pair_if_not("size_mb", self.size_mb, 64);
///     }
///     fn open(&self) -> Result<Box<dyn Driver>, mqblk::Error> {
///         Ok(Box::new(Nop(self.size_mb << 20)))
///     }
/// }
///
/// struct Nop(u64);
///
/// impl Driver for Nop {
///     fn name(&self) -> &str { "nop" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 16) }
///     fn limits(&self) -> QueueLimits { QueueLimits::new(self.0, 512) }
///     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
///         rq.complete(Status::Ok);
///         QueueRqResult::Queued
///     }
/// }
///
/// register_driver_config("nop", NopConfig::parse);
/// let cfg = DeviceConfig::parse("nop:size_mb=8,sched=bfq")?;
/// assert_eq!(cfg.driver::<NopConfig>(), Some(&NopConfig { size_mb: 8 }));
/// assert_eq!(cfg.to_string(), "nop:size_mb=8,sched=bfq", "printed back from the typed configs");
/// let dev = cfg.build()?;
/// assert_eq!(dev.limits().capacity_bytes, 8 << 20);
///
/// // Cloning and finding by type come with `Clone` (DriverConfigObject).
/// let boxed: Box<dyn DriverConfig> = Box::new(NopConfig { size_mb: 1 });
/// let copy = boxed.clone();
/// assert_eq!(copy.as_any().downcast_ref::<NopConfig>(), Some(&NopConfig { size_mb: 1 }));
/// assert!(Device::open("nop:size_mb=0").is_err(), "out of range, named");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait DriverConfig: DriverConfigObject + fmt::Debug + Send + Sync + 'static {
    /// The driver's name, as a spec starts with it.
    fn driver_name(&self) -> &str;

    /// Checks the values together, as the spec's parse would: errors name
    /// the spec key and what is wrong.
    fn validate(&self) -> Result<(), ConfigError>;

    /// Writes the keys whose values differ from the driver's defaults.
    fn write_spec(&self, w: &mut SpecWriter);

    /// Opens the driver (after `validate`).
    fn open(&self) -> Result<Box<dyn Driver>, Error>;
}

/// What a boxed `DriverConfig` needs besides the config itself: a copy,
/// and finding it by type. Implemented for every `DriverConfig` that is
/// `Clone`; nothing to write (example: [`DriverConfig`]).
pub trait DriverConfigObject {
    /// A copy, boxed.
    fn clone_box(&self) -> Box<dyn DriverConfig>;

    /// For finding a config by type (`DeviceConfig::driver::<T>`).
    fn as_any(&self) -> &dyn Any;

    /// For adjusting a config by type (`DeviceConfig::driver_mut::<T>`).
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: DriverConfig + Clone> DriverConfigObject for T {
    fn clone_box(&self) -> Box<dyn DriverConfig> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Clone for Box<dyn DriverConfig> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// Opens a driver from its spec's pairs: what
/// [`register_driver`](super::register_driver) takes.
pub type OpenFn = dyn Fn(&SpecParams) -> Result<Box<dyn Driver>, Error> + Send + Sync;

/// The config of a driver registered with a plain opening function: its
/// spec's pairs as given, checked when the driver opens.
///
/// ```
/// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
/// # ram::register(); // ram registers with register_driver
/// use mqblk::driver::{DriverConfig, SpecConfig};
/// use mqblk::DeviceConfig;
///
/// let cfg = DeviceConfig::parse("ram:size=64,irqmode=0,sched=kyber")?;
/// let ram = cfg.driver::<SpecConfig>().expect("a plain opening function's config");
/// assert_eq!(ram.driver_name(), "ram");
/// assert_eq!(ram.params().pairs().len(), 2, "the driver's keys, not the block layer's");
/// assert_eq!(ram.params().raw("irqmode"), Some("0"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct SpecConfig {
    params: SpecParams,
    open: Arc<OpenFn>,
}

impl SpecConfig {
    pub(crate) fn new(params: SpecParams, open: Arc<OpenFn>) -> Self {
        Self { params, open }
    }

    /// The pairs as given.
    pub fn params(&self) -> &SpecParams {
        &self.params
    }
}

impl fmt::Debug for SpecConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpecConfig").field("params", &self.params).finish()
    }
}

impl DriverConfig for SpecConfig {
    fn driver_name(&self) -> &str {
        &self.params.driver
    }

    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }

    fn write_spec(&self, w: &mut SpecWriter) {
        for (key, value) in self.params.pairs() {
            w.pair(key, value);
        }
    }

    fn open(&self) -> Result<Box<dyn Driver>, Error> {
        (self.open)(&self.params)
    }
}
