//! Per-thread CPU time of this process's threads, read from
//! /proc/self/task: what splits the process's CPU into the job threads'
//! (submitting, and with hipri polling) and the device's own threads (a
//! null device's completion threads, a file device's rings), which
//! getrusage cannot (RUSAGE_THREAD sees the caller only, RUSAGE_SELF all
//! threads together).
//!
//! Each thread's time is its scheduler runtime in ns (the first field of
//! /proc/self/task/TID/schedstat, what CLOCK_THREAD_CPUCLOCK_ID reads),
//! or, where the kernel has no schedstat, utime + stime from
//! /proc/self/task/TID/stat in clock ticks.

use std::collections::HashMap;

/// The calling thread's id (gettid).
pub fn current_tid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// Every live thread's CPU time so far (ns), by thread id. A thread that
/// exits while the folder is read is left out.
pub fn snapshot() -> HashMap<i32, u64> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return HashMap::new() };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|tid| Some((tid, thread_cpu_ns(tid)?)))
        .collect()
}

/// One thread's CPU time so far (ns).
pub fn thread_cpu_ns(tid: i32) -> Option<u64> {
    if let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")) {
        if let Some(ns) = s.split_whitespace().next().and_then(|f| f.parse().ok()) {
            return Some(ns);
        }
    }
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // The name (field 2) may hold spaces: count fields after its ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15, so 11 and 12 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(ticks * 1_000_000_000 / hz)
}

/// CPU time (ns) each thread spent between two snapshots, for the threads
/// present in both.
pub fn since(before: &HashMap<i32, u64>, after: &HashMap<i32, u64>) -> HashMap<i32, u64> {
    after.iter().filter_map(|(tid, &ns)| Some((*tid, ns.saturating_sub(*before.get(tid)?)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spinning_thread_is_charged_its_own_time() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let spinner = std::thread::spawn(move || {
            tx.send(current_tid()).unwrap();
            while stop_rx.try_recv().is_err() {
                std::hint::spin_loop();
            }
        });
        let tid = rx.recv().unwrap();
        let before = snapshot();
        assert!(before.contains_key(&tid) && before.contains_key(&current_tid()), "{before:?}");
        let me_before = thread_cpu_ns(current_tid()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let after = snapshot();
        stop_tx.send(()).unwrap();
        spinner.join().unwrap();
        let spent = since(&before, &after);
        let me = thread_cpu_ns(current_tid()).unwrap() - me_before;
        // The spinner ran (some of) 200 ms; the sleeper hardly at all. A
        // ratio, not a time: the machine may be shared.
        assert!(spent[&tid] > 10 * me.max(1) && spent[&tid] > 5_000_000, "spinner {} ns, sleeper {me} ns", spent[&tid]);
    }
}
