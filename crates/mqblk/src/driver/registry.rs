//! The drivers a spec can name (`null:...`, `file:...`, `mine:...`): none
//! is built into the block layer; each registers here, ours included
//! (mqblk-null's and mqblk-file's `register`), as an outside driver does.
//!
//! Relies on: registry.rs (the container), config.rs (the spec grammar).

use std::sync::Arc;

use super::{Driver, DriverConfig, OpenFn, SpecConfig};
use crate::config::{ConfigError, SpecParams};
use crate::error::Error;
use crate::registry::Registry;

/// Parses a driver's part of a spec (its key=value pairs after `name:`,
/// without the block layer's) into the driver's typed config. Check the
/// keys with [`SpecParams::check_keys`] so that an unknown one is named.
pub type DriverFactory = dyn Fn(&SpecParams) -> Result<Box<dyn DriverConfig>, ConfigError> + Send + Sync;

static DRIVERS: Registry<DriverFactory> = Registry::new("driver");

/// Makes `name:key=value,...` specs open a driver with a typed config:
/// `parse` reads the driver's keys into it (`DeviceConfig::parse` keeps the
/// block layer's), and the device opens the driver from it (example:
/// [`DriverConfig`]).
pub fn register_driver_config(
    name: &str,
    parse: impl Fn(&SpecParams) -> Result<Box<dyn DriverConfig>, ConfigError> + Send + Sync + 'static,
) {
    DRIVERS.register(&[], name, Arc::new(parse));
}

/// Makes `name:key=value,...` specs open a driver `open` builds from its
/// keys (a driver with no typed config: its keys travel as given, in a
/// [`SpecConfig`], and are checked when it opens).
///
/// ```
/// use mqblk::config::SpecParams;
/// use mqblk::driver::{driver_names, register_driver, Driver, Hctx, QueueRqResult, Rq};
/// use mqblk::{Device, QueueLimits, Status, TagSetConfig};
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
/// /// `nop:size_mb=N`: its keys, checked when a device opens.
/// fn open(p: &SpecParams) -> Result<Box<dyn Driver>, mqblk::Error> {
///     p.check_keys(&["size_mb"])?;
///     Ok(Box::new(Nop(p.u64_in("size_mb", 64, 1, 1 << 20)? << 20)))
/// }
///
/// register_driver("nop", open);
/// assert!(driver_names().iter().any(|name| name == "nop"));
/// let dev = Device::open("nop:size_mb=8,sched=mq-deadline")?;
/// assert_eq!((dev.limits().capacity_bytes, dev.scheduler()), (8 << 20, "mq-deadline".into()));
/// assert!(Device::open("nop:size_gb=8").unwrap_err().to_string().contains("size_gb"));
/// # Ok::<(), mqblk::Error>(())
/// ```
pub fn register_driver(
    name: &str,
    open: impl Fn(&SpecParams) -> Result<Box<dyn Driver>, Error> + Send + Sync + 'static,
) {
    let open: Arc<OpenFn> = Arc::new(open);
    register_driver_config(name, move |p| Ok(Box::new(SpecConfig::new(p.clone(), open.clone()))));
}

/// The parser of driver `name`, if one is registered.
pub(crate) fn driver(name: &str) -> Option<Arc<DriverFactory>> {
    DRIVERS.get(name)
}

/// Every driver name a spec may start with (example: [`register_driver`]).
pub fn driver_names() -> Vec<String> {
    DRIVERS.names(&[])
}
