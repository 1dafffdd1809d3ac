//! The wake policies `wake=` can name besides the built-in ones.
//!
//! Relies on: registry.rs (the container).

use std::sync::Arc;

use super::{wake_policy, WakePolicy, WAKE_POLICIES};
use crate::registry::Registry;

/// Builds a wakeup policy: one instance per tag set (hardware queue).
pub type WakePolicyFactory = dyn Fn() -> Box<dyn WakePolicy> + Send + Sync;

static REGISTERED: Registry<WakePolicyFactory> = Registry::new("wake policy");

/// Makes `wake=name` (in a spec, `Wake::from_str`) choose a wakeup policy
/// built by `factory` (example: [`WakePolicy`]).
pub fn register_wake_policy(name: &str, factory: impl Fn() -> Box<dyn WakePolicy> + Send + Sync + 'static) {
    REGISTERED.register(WAKE_POLICIES, name, Arc::new(factory));
}

/// The factory `wake=name` uses when `Wake` has no variant for it: a
/// registered policy, or a built-in one named only here (the kernels'
/// `batch2017` and `batch2020`).
pub(crate) fn registered(name: &str) -> Option<Arc<WakePolicyFactory>> {
    if let Some(factory) = REGISTERED.get(name) {
        return Some(factory);
    }
    let name: &'static str = WAKE_POLICIES.iter().copied().find(|&n| n == name)?;
    let factory: Arc<WakePolicyFactory> = Arc::new(move || wake_policy(name).expect("a built-in wake policy"));
    Some(factory)
}

/// Every name `wake=` accepts: the built-in ones, then those registered
/// (example: [`WakePolicy`]).
pub fn wake_policy_names() -> Vec<String> {
    REGISTERED.names(WAKE_POLICIES)
}
