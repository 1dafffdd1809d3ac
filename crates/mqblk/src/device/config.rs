//! [`DeviceConfig`]: a device's typed configuration, the driver's config
//! beside the queue's. A spec string parses into it once
//! (`DeviceConfig::parse`), front ends adjust it by type (serve's inline
//! completion, bench's scheduler, the C library's rings), and it prints
//! back as the spec that opens the same device.
//!
//! Relies on: config.rs (the grammar), queue/config.rs (`QueueConfig`),
//! driver/ (`DriverConfig`), registry.rs (drivers by name), sched/
//! (the registered elevators' tunables, listed in unknown-key errors).

use std::fmt;
use std::str::FromStr;

use super::Device;
use crate::config::{ConfigError, SpecParams, SpecWriter};
use crate::driver::DriverConfig;
use crate::error::Error;
use crate::queue::PlugNesting;
use crate::queue::{QueueConfig, Wake};
use crate::sched::Sched;

/// A device's configuration: which driver with which settings, and the
/// block layer's. Its `Display` is the device's spec.
///
/// ```
/// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
/// # ram::register();
/// use mqblk::driver::SpecConfig;
/// use mqblk::{DeviceConfig, PlugNesting, Sched, Wake};
///
/// let mut cfg: DeviceConfig = "ram:size=64,irqmode=0,sched=kyber".parse()?;
/// assert_eq!(cfg.queue().sched.name(), "kyber");
/// // A driver registered with a plain opening function keeps its keys as given.
/// let ram = cfg.driver::<SpecConfig>().unwrap();
/// assert_eq!(ram.params().raw("size"), Some("64"));
/// assert_eq!(cfg.driver_config().driver_name(), "ram");
///
/// // Adjust by type, then print the spec that opens the same device.
/// cfg.queue_mut().io_timeout_ms = Some(5000);
/// let cfg = cfg
///     .sched(Sched::None)
///     .wake(Wake::Batch)
///     .plug_nesting(PlugNesting::Outermost)
///     .plug_sync(false)
///     .nr_requests(64)
///     .hybrid_poll_delay_us(0);
/// assert_eq!(cfg.to_string(), "ram:size=64,irqmode=0,wake=batch,plug_sync=0,nr_requests=64,io_timeout=5000");
/// cfg.validate()?;
/// let dev = cfg.build()?;
/// assert_eq!(dev.scheduler(), "none");
///
/// // Or all block-layer options at once.
/// let cfg = DeviceConfig::parse("ram:size=64")?.options(cfg.queue().clone());
/// assert_eq!(cfg.queue().nr_requests, Some(64));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct DeviceConfig {
    driver: Box<dyn DriverConfig>,
    queue: QueueConfig,
}

impl Device {
    /// A device configuration over `driver`'s config, with the block
    /// layer's defaults: set options, then `build`. mqblk-null's and
    /// mqblk-file's configs (`NullConfig`, `FileConfig`) are such configs;
    /// here one of a small driver's own.
    ///
    /// ```
    /// use mqblk::config::{ConfigError, SpecWriter};
    /// use mqblk::driver::{Driver, DriverConfig, Hctx, QueueRqResult, Rq};
    /// use mqblk::{Device, QueueLimits, Sched, Status, TagSetConfig};
    ///
    /// #[derive(Debug, Clone)]
    /// struct NopConfig {
    ///     size_mb: u64,
    /// }
    ///
    /// impl DriverConfig for NopConfig {
    ///     fn driver_name(&self) -> &str { "nop" }
    ///     fn validate(&self) -> Result<(), ConfigError> {
    ///         mqblk::config::check_range("nop", "size_mb", self.size_mb, (1, 1024))
    ///     }
    ///     fn write_spec(&self, w: &mut SpecWriter) { w.pair("size_mb", self.size_mb) }
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
    /// let mut cfg = Device::builder(NopConfig { size_mb: 8 }).sched(Sched::MqDeadline(Default::default()));
    /// assert_eq!(cfg.to_string(), "nop:size_mb=8,sched=mq-deadline");
    /// // A front end finds the driver's config by type and adjusts it.
    /// cfg.driver_mut::<NopConfig>().unwrap().size_mb = 16;
    /// assert_eq!(cfg.driver::<NopConfig>().map(|c| c.size_mb), Some(16));
    /// let dev = cfg.build()?;
    /// assert_eq!(dev.limits().capacity_bytes, 16 << 20);
    /// // A bad value is refused at build, named as its spec key.
    /// assert!(Device::builder(NopConfig { size_mb: 0 }).build().unwrap_err().to_string().contains("size_mb"));
    /// # Ok::<(), mqblk::Error>(())
    /// ```
    pub fn builder(driver: impl DriverConfig) -> DeviceConfig {
        DeviceConfig::new(driver)
    }
}

/// A driver's unknown-key error with the registered elevators' tunables
/// added to the keys it lists as accepted (`SpecParams::check_keys` lists
/// the driver's own, the block layer's and the built-in schedulers'), so
/// that a typo of one gets its "did you mean" too.
fn with_elevator_tunables(e: ConfigError) -> ConfigError {
    let ConfigError::UnknownKey { driver, key, mut accepted } = e else { return e };
    for tunable in crate::sched::registry::elevator_tunables() {
        if !accepted.split(", ").any(|k| k == tunable) {
            accepted.push_str(", ");
            accepted.push_str(&tunable);
        }
    }
    ConfigError::UnknownKey { driver, key, accepted }
}

impl DeviceConfig {
    /// `driver`'s config with the block layer's defaults (as
    /// [`Device::builder`], whose example shows it).
    pub fn new(driver: impl DriverConfig) -> Self {
        Self { driver: Box::new(driver), queue: QueueConfig::default() }
    }

    /// Parses a spec: the driver (registered by name) reads its keys, the
    /// block layer its own and the chosen scheduler's tunables. Errors name
    /// the key and what is accepted (example: [`DeviceConfig`]).
    pub fn parse(spec: &str) -> Result<Self, ConfigError> {
        let params = SpecParams::parse(spec)?;
        let Some(parse_driver) = crate::driver::registered(&params.driver) else {
            let accepted = crate::driver::driver_names().join(", ");
            return Err(ConfigError::UnknownDriver { driver: params.driver, accepted });
        };
        let (queue, driver_params) = QueueConfig::from_params(&params)?;
        let driver = parse_driver(&driver_params).map_err(with_elevator_tunables)?;
        assert_eq!(driver.driver_name(), params.driver, "a driver's parser returned another driver's config");
        Ok(Self { driver, queue })
    }

    /// The driver's config.
    pub fn driver_config(&self) -> &dyn DriverConfig {
        &*self.driver
    }

    /// The driver's config, if it is a `T`.
    pub fn driver<T: DriverConfig>(&self) -> Option<&T> {
        self.driver.as_any().downcast_ref()
    }

    /// The driver's config to adjust, if it is a `T`.
    pub fn driver_mut<T: DriverConfig>(&mut self) -> Option<&mut T> {
        self.driver.as_any_mut().downcast_mut()
    }

    /// The block layer's config.
    pub fn queue(&self) -> &QueueConfig {
        &self.queue
    }

    /// The block layer's config to adjust.
    pub fn queue_mut(&mut self) -> &mut QueueConfig {
        &mut self.queue
    }

    /// All block-layer options at once.
    pub fn options(mut self, queue: QueueConfig) -> Self {
        self.queue = queue;
        self
    }

    /// The I/O scheduler (`sched=`; default none).
    pub fn sched(mut self, sched: Sched) -> Self {
        self.queue.sched = sched;
        self
    }

    /// The tag wakeup policy (`wake=`; default handoff).
    pub fn wake(mut self, wake: Wake) -> Self {
        self.queue.wake = wake;
        self
    }

    /// Which plug levels flush (`plug_nesting=`).
    pub fn plug_nesting(mut self, plug_nesting: PlugNesting) -> Self {
        self.queue.plug_nesting = plug_nesting;
        self
    }

    /// Are sync bios plugged (`plug_sync=`; default true)? False: they
    /// bypass an active plug, as blk-mq's single-queue path before 4.1.
    pub fn plug_sync(mut self, plug_sync: bool) -> Self {
        self.queue.plug_sync = plug_sync;
        self
    }

    /// Scheduler tags per hardware queue (`nr_requests=`).
    pub fn nr_requests(mut self, nr_requests: u32) -> Self {
        self.queue.nr_requests = Some(nr_requests);
        self
    }

    /// Hybrid polling sleep before spinning, in us (`hybrid_poll_delay=`).
    pub fn hybrid_poll_delay_us(mut self, delay_us: u32) -> Self {
        self.queue.hybrid_poll_delay_us = delay_us;
        self
    }

    /// Checks the driver's and the queue's values, as a spec's parse would.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.driver.validate()?;
        self.queue.validate()
    }

    /// Opens the driver and makes the device. Fails on a bad value (named
    /// as its spec key) or on a driver that cannot start.
    pub fn build(&self) -> Result<Device, Error> {
        self.validate()?;
        // A driver without a typed config checks its keys as it opens.
        let driver = self.driver.open().map_err(|e| match e {
            Error::Config(e) => Error::Config(with_elevator_tunables(e)),
            other => other,
        })?;
        Device::with_driver_options(driver, self.queue.clone())
    }
}

impl FromStr for DeviceConfig {
    type Err = ConfigError;

    fn from_str(spec: &str) -> Result<Self, ConfigError> {
        Self::parse(spec)
    }
}

/// The spec: `driver:` and every key that differs from its default.
impl fmt::Display for DeviceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut w = SpecWriter::new(self.driver.driver_name());
        self.driver.write_spec(&mut w);
        self.queue.write_spec(&mut w);
        f.write_str(&w.finish())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_driver_names_the_registered_ones() {
        crate::driver::register_driver("test-listed", |_| Err(Error::Setup("unused".into())));
        let e = DeviceConfig::parse("test-liste:gb=1").unwrap_err().to_string();
        assert!(e.contains("'test-liste'") && e.contains("test-listed"), "{e}");
        assert!(e.contains("did you mean 'test-listed'"), "{e}");
    }
}
