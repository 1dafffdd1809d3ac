//! Plug-ins from outside the crate: a driver, an elevator and a wakeup
//! policy registered by name, then chosen by spec strings.

#![cfg(not(loom))]

mod common;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use common::ram::open;
use mqblk::driver::{Driver, QueueRqResult};
use mqblk::driver::{Hctx, Rq, RqList};
use mqblk::sbitmap::{SbitmapQueue, WakePolicy};
use mqblk::sched::Elevator;
use mqblk::{DeviceConfig, QueueLimits, Sched, Status, TagSetConfig, Wake};

struct Nop;

impl Driver for Nop {
    fn name(&self) -> &str {
        "nop"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, 4)
    }
    fn limits(&self) -> QueueLimits {
        QueueLimits::new(1 << 30, 512)
    }
    fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
        rq.complete(Status::Ok);
        QueueRqResult::Queued
    }
}

/// First in, first out; counts what it dispatched.
struct Fifo {
    queues: Vec<Mutex<VecDeque<Rq>>>,
    dispatched: Arc<AtomicU64>,
}

impl Elevator for Fifo {
    fn insert_requests(&self, hctx: usize, rqs: &mut RqList) {
        let mut q = self.queues[hctx].lock().unwrap();
        while let Some(rq) = rqs.pop_front() {
            q.push_back(rq);
        }
    }
    fn dispatch_request(&self, hctx: usize) -> Option<Rq> {
        let rq = self.queues[hctx].lock().unwrap().pop_front();
        self.dispatched.fetch_add(u64::from(rq.is_some()), Ordering::Relaxed);
        rq
    }
    fn has_work(&self, hctx: usize) -> bool {
        !self.queues[hctx].lock().unwrap().is_empty()
    }
}

/// Wakes one waiter per freed bit; counts the calls.
#[derive(Debug)]
struct OneByOne(Arc<AtomicU64>);

impl WakePolicy for OneByOne {
    fn name(&self) -> &'static str {
        "test-one"
    }
    fn bits_freed(&self, sbq: &SbitmapQueue, nr: u32) {
        self.0.fetch_add(1, Ordering::Relaxed);
        sbq.wake_up_nr(nr);
    }
}

#[test]
fn a_registered_driver_opens_by_spec_and_checks_its_keys() {
    mqblk::driver::register_driver("test-nop", |p| {
        p.check_keys(&["answer"])?;
        assert_eq!(p.u64_in("answer", 0, 0, 100)?, 42);
        Ok(Box::new(Nop))
    });
    let dev = open("test-nop:answer=42,sched=none").unwrap();
    dev.client().write_at(&[1u8; 512], 0).unwrap();
    let e = open("test-nop:answr=42").unwrap_err().to_string();
    assert!(e.contains("'answr'") && e.contains("answer"), "{e}");
    let e = open("nope:").unwrap_err().to_string();
    assert!(e.contains("ram") && e.contains("test-nop"), "{e}");
}

#[test]
fn a_registered_elevator_and_wake_policy_run_when_named() {
    let dispatched = Arc::new(AtomicU64::new(0));
    let counter = dispatched.clone();
    mqblk::sched::register_elevator("test-fifo", &[], move |args| {
        let queues = (0..args.nr_hw_queues).map(|_| Mutex::new(VecDeque::new())).collect();
        Ok(Box::new(Fifo { queues, dispatched: counter.clone() }))
    });
    let frees = Arc::new(AtomicU64::new(0));
    let counter = frees.clone();
    mqblk::sbitmap::register_wake_policy("test-one", move || Box::new(OneByOne(counter.clone())));

    let dev = open("ram:gb=1,irqmode=1,hw_queue_depth=2,nr_requests=4,sched=test-fifo,wake=test-one").unwrap();
    assert_eq!(dev.scheduler(), "test-fifo");
    // The writers start together: spawned one by one on a busy machine,
    // each could otherwise be done before the next began, and none wait.
    let start = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (dev, start) = (dev.clone(), start.clone());
            std::thread::spawn(move || {
                let mut c = dev.client();
                start.wait();
                for i in 0..100u64 {
                    c.write_at(&[7u8; 512], i * 512).unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(dispatched.load(Ordering::Relaxed), 800, "every write went through the elevator");
    assert!(frees.load(Ordering::Relaxed) > 0, "the wakeup policy ran (8 writers, 4 scheduler tags)");

    dev.set_scheduler("mq-deadline".parse().unwrap()).unwrap();
    dev.set_scheduler(Sched::custom("test-fifo")).unwrap();
    assert_eq!(dev.scheduler(), "test-fifo");
    assert_eq!("test-one".parse::<Wake>().unwrap(), Wake::custom("test-one"));
    let e = "test-two".parse::<Wake>().unwrap_err().to_string();
    assert!(e.contains("handoff") && e.contains("test-one"), "{e}");
}

#[test]
fn a_registered_elevator_reads_its_own_tunables() {
    // The quantum of the elevator built last (each parse builds one to
    // check the values, each open the device's).
    static BUILT_QUANTUM: AtomicU64 = AtomicU64::new(0);
    mqblk::sched::register_elevator("test-tuned", &["quantum"], |args| {
        let quantum = args.tunables.u64_in("quantum", 1, 1, 64)?;
        BUILT_QUANTUM.store(quantum, Ordering::Relaxed);
        let queues = (0..args.nr_hw_queues).map(|_| Mutex::new(VecDeque::new())).collect();
        Ok(Box::new(Fifo { queues, dispatched: Arc::new(AtomicU64::new(0)) }))
    });
    let dev = open("ram:gb=1,irqmode=0").unwrap();
    dev.set_scheduler("test-tuned,quantum=8".parse().unwrap()).unwrap();
    assert_eq!(BUILT_QUANTUM.load(Ordering::Relaxed), 8, "the factory read the tunable given");
    // A value outside the factory's range is refused where the spec is
    // parsed, as a built-in's is, naming the key and the range.
    let e = "test-tuned,quantum=99".parse::<Sched>().unwrap_err().to_string();
    assert!(e.contains("'99'") && e.contains("'quantum'") && e.contains("1..=64"), "{e}");
    let e = "ram:gb=1,sched=test-tuned,quantum=0".parse::<DeviceConfig>().unwrap_err().to_string();
    assert!(e.contains("'0'") && e.contains("'quantum'") && e.contains("1..=64"), "{e}");
    // Set in code, it is refused when the scheduler is built.
    let set_in_code = Sched::Custom { name: "test-tuned".into(), tunables: vec![("quantum".into(), "99".into())] };
    let e = dev.set_scheduler(set_in_code).unwrap_err().to_string();
    assert!(e.contains("quantum"), "{e}");
    let e = "test-tuned,quantm=8".parse::<Sched>().unwrap_err().to_string();
    assert!(e.contains("'quantm'") && e.contains("quantum"), "an unknown tunable names the accepted: {e}");
    let dev = open("ram:gb=1,sched=test-tuned,quantum=8").unwrap();
    assert_eq!(dev.scheduler(), "test-tuned", "a device spec takes a registered scheduler's tunables");
    let e = open("ram:gb=1,sched=bfq,quantum=8").unwrap_err().to_string();
    assert!(e.contains("'quantum' is not a tunable of sched=bfq"), "{e}");
    let e = open("ram:gb=1,quantm=8,sched=test-tuned").unwrap_err().to_string();
    assert!(e.contains("'quantm'") && e.contains("did you mean 'quantum'?"), "a registered tunable is offered: {e}");
}
