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

use crate::config::SpecParams;
use crate::driver::Driver;
use crate::error::Error;
use crate::sbitmap::WakePolicy;
use crate::sched::{Elevator, ElevatorArgs};

/// Builds a driver from its spec's key=value pairs (after `name:`). Check
/// the keys with [`SpecParams::check_keys`] so that an unknown one is named.
pub type DriverFactory = dyn Fn(&SpecParams) -> Result<Box<dyn Driver>, Error> + Send + Sync;
/// Builds an elevator for a device (see [`ElevatorArgs`]).
pub type ElevatorFactory = dyn Fn(&ElevatorArgs) -> Result<Box<dyn Elevator>, Error> + Send + Sync;
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
static ELEVATORS: Registry<ElevatorFactory> = Registry::new("elevator");
static WAKE_POLICIES: Registry<WakePolicyFactory> = Registry::new("wake policy");

/// Makes `name:key=value,...` specs open a driver built by `factory`.
pub fn register_driver(
    name: &str,
    factory: impl Fn(&SpecParams) -> Result<Box<dyn Driver>, Error> + Send + Sync + 'static,
) {
    DRIVERS.register(&[], name, Arc::new(factory));
}

/// Makes `sched=name` (in a spec, `Sched::from_str`, `Device::set_scheduler`)
/// choose an elevator built by `factory`.
pub fn register_elevator(
    name: &str,
    factory: impl Fn(&ElevatorArgs) -> Result<Box<dyn Elevator>, Error> + Send + Sync + 'static,
) {
    ELEVATORS.register(crate::sched::SCHEDULERS, name, Arc::new(factory));
}

/// Makes `wake=name` (in a spec, `Wake::from_str`) choose a wakeup policy
/// built by `factory`.
pub fn register_wake_policy(name: &str, factory: impl Fn() -> Box<dyn WakePolicy> + Send + Sync + 'static) {
    WAKE_POLICIES.register(crate::sbitmap::WAKE_POLICIES, name, Arc::new(factory));
}

pub(crate) fn driver(name: &str) -> Option<Arc<DriverFactory>> {
    DRIVERS.get(name)
}

pub(crate) fn elevator(name: &str) -> Option<Arc<ElevatorFactory>> {
    ELEVATORS.get(name)
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
