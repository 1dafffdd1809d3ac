//! null `irq_cpus`: the completion threads run on the CPUs the spec names
//! (as an interrupt's smp_affinity places its handler), and a CPU the
//! process may not use fails the device's creation with a clear error.

use std::sync::Mutex;

mod common;
use common::open;

/// The tests look at this process's threads by name: under `cargo test`
/// (one process) the other test's completion thread would be seen too, so
/// they run one at a time. nextest runs each in a process of its own.
static THREADS_BY_NAME: Mutex<()> = Mutex::new(());

/// The allowed-CPU list (/proc's Cpus_allowed_list) of this process's
/// threads named `name`; waits (up to 10 s) for one to exist, since a new
/// thread names itself once it runs.
fn cpus_of_threads_named(name: &str) -> Vec<String> {
    for _ in 0..1000 {
        let found = cpus_now(name);
        if !found.is_empty() {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Vec::new()
}

fn cpus_now(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        if let Some(line) = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")) {
            out.push(line.trim().to_string());
        }
    }
    out
}

#[test]
fn completion_threads_run_on_the_listed_cpus() {
    let _one = THREADS_BY_NAME.lock().unwrap_or_else(|e| e.into_inner());
    // CPU 0 is online on every Linux machine this runs on.
    let dev = open("null:gb=1,irqmode=2,submit_queues=2,poll_queues=0,irq_cpus=0").unwrap();
    assert_eq!(cpus_of_threads_named("null-irq0"), vec!["0".to_string()]);
    assert_eq!(cpus_of_threads_named("null-irq1"), vec!["0".to_string()], "round-robin over a list of one");
    drop(dev);
    let dev = open("null:gb=1,irqmode=1,poll_mode=toggle,irq_cpus=0").unwrap();
    assert_eq!(cpus_of_threads_named("null-toggle0"), vec!["0".to_string()]);
    drop(dev);
}

#[test]
fn an_unavailable_cpu_fails_with_the_queue_and_cpu_named() {
    let _one = THREADS_BY_NAME.lock().unwrap_or_else(|e| e.into_inner());
    let e = open("null:gb=1,irqmode=1,irq_cpus=1023").unwrap_err().to_string();
    assert!(e.contains("completion thread of queue 0 on CPU 1023 (irq_cpus)"), "{e}");
}
