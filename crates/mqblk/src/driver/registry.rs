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
/// block layer's), and the device opens the driver from it.
pub fn register_driver_config(
    name: &str,
    parse: impl Fn(&SpecParams) -> Result<Box<dyn DriverConfig>, ConfigError> + Send + Sync + 'static,
) {
    DRIVERS.register(&[], name, Arc::new(parse));
}

/// Makes `name:key=value,...` specs open a driver `open` builds from its
/// keys (a driver with no typed config: its keys travel as given, in a
/// [`SpecConfig`], and are checked when it opens).
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

/// Every driver name a spec may start with.
pub fn driver_names() -> Vec<String> {
    DRIVERS.names(&[])
}
