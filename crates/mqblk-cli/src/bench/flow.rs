//! fio's token-based flow control (`flow`, `flow_id`, `flow_sleep`): jobs
//! that share a `flow_id` keep their I/O counts in the ratio of their
//! `flow` weights. Each flow has a shared counter of I/Os and the sum of
//! its members' weights; before each I/O a member compares its share of
//! the counter with its share of the weight, and when it is ahead it
//! stalls (waits for its I/O in flight, then sleeps `flow_sleep`) instead
//! of issuing.
//!
//! The rule is fio's (flow.c `flow_threshold_exceeded`). Flows are
//! process-wide, as fio's are run-wide: a job joins its flow when it sets
//! up and leaves it when it ends, and a flow whose last member left is
//! forgotten. Relies on atomics only on the per-I/O path; the registry's
//! lock is taken at join and leave.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// fio's `FLOW_MAX_WEIGHT`.
pub const FLOW_MAX_WEIGHT: u64 = 1000;

/// One flow: I/Os counted by all its members, and their total weight.
#[derive(Debug)]
struct Flow {
    id: u64,
    counter: AtomicU64,
    total_weight: AtomicU64,
    members: AtomicU64,
}

/// The flows of the process, by id.
static FLOWS: Mutex<Vec<Arc<Flow>>> = Mutex::new(Vec::new());

/// A job's membership of its flow: left on drop.
#[derive(Debug)]
pub struct FlowMember {
    flow: Arc<Flow>,
    weight: u64,
    /// This job's own I/O count (fio's `td->flow_counter`).
    own: u64,
}

impl FlowMember {
    /// Joins flow `id` with `weight` (1..=FLOW_MAX_WEIGHT).
    pub fn join(id: u64, weight: u64) -> Self {
        assert!((1..=FLOW_MAX_WEIGHT).contains(&weight), "flow weight {weight} out of range");
        let mut flows = FLOWS.lock().unwrap_or_else(|e| e.into_inner());
        let flow = match flows.iter().find(|f| f.id == id) {
            Some(f) => Arc::clone(f),
            None => {
                let f = Arc::new(Flow {
                    id,
                    counter: AtomicU64::new(0),
                    total_weight: AtomicU64::new(0),
                    members: AtomicU64::new(0),
                });
                flows.push(Arc::clone(&f));
                f
            }
        };
        flow.total_weight.fetch_add(weight, Ordering::Relaxed);
        flow.members.fetch_add(1, Ordering::Relaxed);
        Self { flow, weight, own: 0 }
    }

    /// fio's `flow_threshold_exceeded`: true if this job is ahead of its
    /// share and must stall; else the I/O about to be issued is counted.
    pub fn ahead(&mut self) -> bool {
        let counter = self.flow.counter.load(Ordering::Relaxed);
        let total = self.flow.total_weight.load(Ordering::Relaxed);
        // own / counter > weight / total, in integers (the counter is 0
        // only before anyone's first I/O: then nobody is ahead).
        if counter > 0 && u128::from(self.own) * u128::from(total) > u128::from(self.weight) * u128::from(counter) {
            return true;
        }
        self.flow.counter.fetch_add(1, Ordering::Relaxed);
        self.own += 1;
        false
    }
}

impl Drop for FlowMember {
    fn drop(&mut self) {
        let mut flows = FLOWS.lock().unwrap_or_else(|e| e.into_inner());
        self.flow.total_weight.fetch_sub(self.weight, Ordering::Relaxed);
        if self.flow.members.fetch_sub(1, Ordering::Relaxed) == 1 {
            flows.retain(|f| !Arc::ptr_eq(f, &self.flow));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two members of weights 3 and 1 that each try to issue whenever
    /// they may end in a 3:1 ratio of I/Os.
    #[test]
    fn members_issue_in_the_ratio_of_their_weights() {
        let mut a = FlowMember::join(9001, 3);
        let mut b = FlowMember::join(9001, 1);
        let (mut ios_a, mut ios_b) = (0u64, 0u64);
        for _ in 0..4000 {
            if !a.ahead() {
                ios_a += 1;
            }
            if !b.ahead() {
                ios_b += 1;
            }
        }
        assert_eq!(ios_a + ios_b, a.flow.counter.load(Ordering::Relaxed));
        let ratio = ios_a as f64 / ios_b as f64;
        assert!((2.9..=3.1).contains(&ratio), "{ios_a}:{ios_b}");
    }

    /// A flow is forgotten when its last member leaves, so a new run
    /// starts from a zero counter.
    #[test]
    fn the_last_member_leaving_forgets_the_flow() {
        {
            let mut a = FlowMember::join(9002, 1);
            assert!(!a.ahead());
        }
        let b = FlowMember::join(9002, 2);
        assert_eq!(b.flow.counter.load(Ordering::Relaxed), 0);
        assert_eq!(b.flow.total_weight.load(Ordering::Relaxed), 2);
    }
}
