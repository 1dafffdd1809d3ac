//! loom models of the completion handoff: the MPSC ring plus the sleep
//! gate, as used by client completion rings and driver completion threads.
//! A lost wakeup shows up as a loom deadlock.

use crate::completion::{ClientShared, Completion};
use crate::status::Status;
use crate::sync::Arc;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Reaps `n` completions, sleeping when the ring is empty.
fn reap(shared: &ClientShared, n: usize) -> Vec<u64> {
    let mut got = Vec::new();
    while got.len() < n {
        // SAFETY: this thread is the only consumer.
        match unsafe { shared.take() } {
            Some(c) => got.push(c.user_data),
            None => {
                shared.sleep_until_delivery(None);
            }
        }
    }
    got
}

#[test]
fn loom_completion_is_never_lost_to_a_sleeping_client() {
    model(|| {
        let shared = Arc::new(ClientShared::new(2));
        let producer = {
            let shared = shared.clone();
            loom::thread::spawn(move || shared.deliver(Completion::new(7, Status::Ok, None, 0)))
        };
        assert_eq!(reap(&shared, 1), vec![7]);
        producer.join().unwrap();
    });
}

#[test]
fn loom_two_completers_each_delivered_once() {
    model(|| {
        let shared = Arc::new(ClientShared::new(2));
        let producers: Vec<_> = (0..2u64)
            .map(|i| {
                let shared = shared.clone();
                loom::thread::spawn(move || shared.deliver(Completion::new(i, Status::Ok, None, 0)))
            })
            .collect();
        let mut got = reap(&shared, 2);
        got.sort_unstable();
        assert_eq!(got, vec![0, 1]);
        for p in producers {
            p.join().unwrap();
        }
        // SAFETY: single consumer.
        assert!(unsafe { shared.take() }.is_none(), "nothing delivered twice");
    });
}
