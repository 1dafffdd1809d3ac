//! Named plug-ins: a registry maps the names a spec can give (`file:...`,
//! `sched=sstf`, `wake=mine`) to the factories that make them. Each kind
//! keeps its own registry beside its trait, as the kernel keeps
//! `elv_register` in elevator.c: drivers in driver/registry.rs, elevators
//! in sched/registry.rs, wake policies in sbitmap/registry.rs.
//!
//! Registering a built-in name panics (a programmer error); registering a
//! name again replaces the earlier factory.
//!
//! Relies on: parking_lot (registration is rare; lookups happen when a spec
//! is parsed and a device built, never per I/O).

use std::sync::Arc;

use parking_lot::Mutex;

/// Most plug-ins of one kind (a bound on the registry).
const MAX_ENTRIES: usize = 256;

/// The plug-ins of one kind, by name, in registration order.
pub(crate) struct Registry<F: ?Sized> {
    kind: &'static str,
    entries: Mutex<Vec<(String, Arc<F>)>>,
}

impl<F: ?Sized> Registry<F> {
    pub(crate) const fn new(kind: &'static str) -> Self {
        Self { kind, entries: Mutex::new(Vec::new()) }
    }

    /// Adds (or replaces) `name`, which must be a plain word and not one of
    /// the `builtin` names.
    pub(crate) fn register(&self, builtin: &[&str], name: &str, factory: Arc<F>) {
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

    pub(crate) fn get(&self, name: &str) -> Option<Arc<F>> {
        self.entries.lock().iter().find(|(n, _)| n == name).map(|(_, f)| f.clone())
    }

    /// Whether any registered entry satisfies `f`.
    pub(crate) fn any(&self, f: impl Fn(&F) -> bool) -> bool {
        self.entries.lock().iter().any(|(_, e)| f(e))
    }

    /// Every registered entry, in registration order.
    pub(crate) fn values(&self) -> Vec<Arc<F>> {
        self.entries.lock().iter().map(|(_, e)| e.clone()).collect()
    }

    /// The built-in names, then the registered ones.
    pub(crate) fn names(&self, builtin: &[&str]) -> Vec<String> {
        builtin.iter().map(|s| s.to_string()).chain(self.entries.lock().iter().map(|(n, _)| n.clone())).collect()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "built in")]
    fn a_built_in_name_cannot_be_taken() {
        let r: Registry<u32> = Registry::new("thing");
        r.register(&["handoff"], "handoff", Arc::new(1));
    }

    #[test]
    #[should_panic(expected = "plain word")]
    fn a_name_is_a_plain_word() {
        let r: Registry<u32> = Registry::new("thing");
        r.register(&[], "a,b", Arc::new(1));
    }

    #[test]
    fn registering_again_replaces_and_names_keep_their_order() {
        let r: Registry<u32> = Registry::new("thing");
        r.register(&["base"], "a", Arc::new(1));
        r.register(&["base"], "b", Arc::new(2));
        r.register(&["base"], "a", Arc::new(3));
        assert_eq!(r.names(&["base"]), ["base", "b", "a"]);
        assert_eq!(r.get("a").as_deref(), Some(&3));
        assert!(r.any(|v| *v == 2) && !r.any(|v| *v == 1));
    }
}
