//! Named plug-ins: the drivers, I/O schedulers (elevators) and tag wakeup
//! policies a spec string can name (`file:...`, `sched=sstf`, `wake=mine`).
//!
//! The built-in ones are listed by their own modules; code outside the
//! crate adds its own with [`register_driver`], [`register_elevator`] and
//! [`register_wake_policy`] (the kernel's `elv_register`), before opening
//! a device whose spec names them. A name is looked up when a spec is
//! parsed (so an unknown name fails with the accepted list) and again
//! when the device is built.
//!
//! Registering a built-in name panics (a programmer error); registering a
//! name again replaces the earlier factory.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::{ConfigError, SpecParams};
use crate::driver::{Driver, DriverConfig, OpenFn, SpecConfig};
use crate::error::Error;
use crate::sbitmap::WakePolicy;
use crate::sched::{Elevator, ElevatorArgs};

/// Parses a driver's part of a spec (its key=value pairs after `name:`,
/// without the block layer's) into the driver's typed config. Check the
/// keys with [`SpecParams::check_keys`] so that an unknown one is named.
pub type DriverFactory = dyn Fn(&SpecParams) -> Result<Box<dyn DriverConfig>, ConfigError> + Send + Sync;
/// Builds an elevator for a device (see [`ElevatorArgs`]).
pub type ElevatorFactory = dyn Fn(&ElevatorArgs) -> Result<Box<dyn Elevator>, Error> + Send + Sync;

/// A registered elevator: the tunables it takes and its factory.
pub(crate) struct ElevatorEntry {
    pub(crate) tunables: Vec<String>,
    pub(crate) factory: Box<ElevatorFactory>,
}
/// Builds a wakeup policy: one instance per tag set (hardware queue).
pub type WakePolicyFactory = dyn Fn() -> Box<dyn WakePolicy> + Send + Sync;

/// Most plug-ins of one kind (a bound on the registry).
const MAX_ENTRIES: usize = 256;

struct Registry<F: ?Sized> {
    kind: &'static str,
    entries: Mutex<Vec<(String, Arc<F>)>>,
}

impl<F: ?Sized> Registry<F> {
    const fn new(kind: &'static str) -> Self {
        Self { kind, entries: Mutex::new(Vec::new()) }
    }

    fn register(&self, builtin: &[&str], name: &str, factory: Arc<F>) {
        assert!(
            !name.is_empty() && !name.contains([',', '=', ':']),
            "{} name '{name}' must be a plain word",
            self.kind
        );
        assert!(!builtin.contains(&name), "{} '{name}' is built in and cannot be registered again", self.kind);
        let mut entries = self.entries.lock();
        entries.retain(|(n, _)| n != name);
        assert!(entries.len() < MAX_ENTRIES, "more than {MAX_ENTRIES} {}s registered", self.kind);
        entries.push((name.to_string(), factory));
    }

    fn get(&self, name: &str) -> Option<Arc<F>> {
        self.entries.lock().iter().find(|(n, _)| n == name).map(|(_, f)| f.clone())
    }

    /// The built-in names, then the registered ones.
    fn names(&self, builtin: &[&str]) -> Vec<String> {
        builtin.iter().map(|s| s.to_string()).chain(self.entries.lock().iter().map(|(n, _)| n.clone())).collect()
    }
}

static DRIVERS: Registry<DriverFactory> = Registry::new("driver");
static ELEVATORS: Registry<ElevatorEntry> = Registry::new("elevator");
static WAKE_POLICIES: Registry<WakePolicyFactory> = Registry::new("wake policy");

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

/// Makes `sched=name` (in a spec, `Sched::from_str`, `Device::set_scheduler`)
/// choose an elevator built by `factory`, which takes the `tunables`
/// named here (`sched=name,tunable=value` in a spec, `--sched=name,
/// tunable=value` in bench, in `ElevatorArgs::tunables`); any other key
/// given with it is refused, as for the built-in schedulers.
pub fn register_elevator(
    name: &str,
    tunables: &[&str],
    factory: impl Fn(&ElevatorArgs) -> Result<Box<dyn Elevator>, Error> + Send + Sync + 'static,
) {
    for key in tunables {
        assert!(
            !crate::config::BLOCK_KEYS.contains(key) && !key.is_empty() && !key.contains([',', '=', ':']),
            "elevator '{name}': tunable '{key}' must be a plain word and not a block-layer key"
        );
    }
    let entry =
        ElevatorEntry { tunables: tunables.iter().map(|k| k.to_string()).collect(), factory: Box::new(factory) };
    ELEVATORS.register(crate::sched::SCHEDULERS, name, Arc::new(entry));
}

/// Makes `wake=name` (in a spec, `Wake::from_str`) choose a wakeup policy
/// built by `factory`.
pub fn register_wake_policy(name: &str, factory: impl Fn() -> Box<dyn WakePolicy> + Send + Sync + 'static) {
    WAKE_POLICIES.register(crate::sbitmap::WAKE_POLICIES, name, Arc::new(factory));
}

pub(crate) fn driver(name: &str) -> Option<Arc<DriverFactory>> {
    DRIVERS.get(name)
}

pub(crate) fn elevator(name: &str) -> Option<Arc<ElevatorEntry>> {
    ELEVATORS.get(name)
}

/// Whether `key` is a tunable of some registered elevator.
pub(crate) fn is_elevator_tunable(key: &str) -> bool {
    ELEVATORS.entries.lock().iter().any(|(_, e)| e.tunables.iter().any(|t| t == key))
}

pub(crate) fn wake_policy(name: &str) -> Option<Arc<WakePolicyFactory>> {
    WAKE_POLICIES.get(name)
}

/// Every driver name a spec may start with.
pub fn driver_names() -> Vec<String> {
    DRIVERS.names(&[])
}

/// Every name `sched=` accepts.
pub fn elevator_names() -> Vec<String> {
    ELEVATORS.names(crate::sched::SCHEDULERS)
}

/// Every name `wake=` accepts.
pub fn wake_policy_names() -> Vec<String> {
    WAKE_POLICIES.names(crate::sbitmap::WAKE_POLICIES)
}

#[cfg(all(test, not(loom)))]
mod tests {
    #[test]
    #[should_panic(expected = "built in")]
    fn a_built_in_name_cannot_be_taken() {
        super::register_wake_policy("handoff", || Box::<crate::sbitmap::BatchWake>::default());
    }

    #[test]
    #[should_panic(expected = "plain word")]
    fn a_name_is_a_plain_word() {
        super::register_driver("a,b", |_| Err(crate::error::Error::Setup("unused".into())));
    }
}
