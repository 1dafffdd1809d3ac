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

/// Every name `sched=` accepts: the built-in [`SCHEDULERS`], then those
/// registered (example: [`Elevator`]).
pub fn elevator_names() -> Vec<String> {
    ELEVATORS.names(SCHEDULERS)
}
