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
/// `Clone`; nothing to write.
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

/// Opens a driver from its spec's pairs: what [`register_driver`](crate::driver::register_driver)
/// takes.
pub type OpenFn = dyn Fn(&SpecParams) -> Result<Box<dyn Driver>, Error> + Send + Sync;

/// The config of a driver registered with a plain opening function: its
/// spec's pairs as given, checked when the driver opens.
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
