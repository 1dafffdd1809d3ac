//! The elevators `sched=` can name besides the built-in ones (the
//! kernel's `elv_register`): each with the tunables it takes, so that a
//! spec or `--sched` gives them to it and refuses any other key.
//!
//! Relies on: registry.rs (the container).

use std::sync::Arc;

use super::{Elevator, ElevatorArgs, SCHEDULERS};
use crate::error::Error;
use crate::registry::Registry;

/// Builds an elevator for a device (see [`ElevatorArgs`]).
pub type ElevatorFactory = dyn Fn(&ElevatorArgs) -> Result<Box<dyn Elevator>, Error> + Send + Sync;

/// A registered elevator: the tunables it takes and its factory.
pub(crate) struct ElevatorEntry {
    pub(crate) tunables: Vec<String>,
    pub(crate) factory: Box<ElevatorFactory>,
}

static ELEVATORS: Registry<ElevatorEntry> = Registry::new("elevator");

/// Makes `sched=name` (in a spec, `Sched::from_str`, `Device::set_scheduler`)
/// choose an elevator built by `factory`, which takes the `tunables`
/// named here (`sched=name,tunable=value` in a spec, `--sched=name,
/// tunable=value` in bench, in `ElevatorArgs::tunables`); any other key
/// given with it is refused, as for the built-in schedulers (example:
/// [`Elevator`]).
///
/// Values are checked when the spec is parsed, as a built-in's are: the
/// parse builds the elevator once, for a probe device of one hardware
/// queue and 64 scheduler tags, and drops it, so a value outside the range
/// the factory reads it with (`SpecParams::u64_in` and the like) is the
/// parse's error, naming the key. So the factory should only build (no
/// side effects beyond the elevator it returns). An error of another kind
/// (one that depends on the real device's queues or depth) comes from
/// `Device::open`, which builds the elevator again for the device.
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
    ELEVATORS.register(SCHEDULERS, name, Arc::new(entry));
}

pub(crate) fn elevator(name: &str) -> Option<Arc<ElevatorEntry>> {
    ELEVATORS.get(name)
}

/// Whether `key` is a tunable of some registered elevator.
pub(crate) fn is_elevator_tunable(key: &str) -> bool {
    ELEVATORS.any(|e| e.tunables.iter().any(|t| t == key))
}

/// Every registered elevator's tunables, in registration order, each
/// once (for the accepted keys an unknown key's error lists).
pub(crate) fn elevator_tunables() -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for entry in ELEVATORS.values() {
        for key in &entry.tunables {
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
    }
    keys
}

/// Every name `sched=` accepts: the built-in [`SCHEDULERS`], then those
/// registered (example: [`Elevator`]).
pub fn elevator_names() -> Vec<String> {
    ELEVATORS.names(SCHEDULERS)
}
