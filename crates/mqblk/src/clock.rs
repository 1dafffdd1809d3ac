//! A monotonic nanosecond clock (CLOCK_MONOTONIC through the vDSO, about
//! 20-25 ns a read here), shared by drivers and benchmarks.

/// Nanoseconds since an arbitrary fixed point (boot), monotonic.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Waits until `now_ns() >= due_ns`: sleeps while far away (the kernel's
/// timers oversleep by tens of microseconds here), then spins for the last
/// `spin_ns`, so wakeups land within a few microseconds.
pub fn wait_until(due_ns: u64, spin_ns: u64) {
    loop {
        let now = now_ns();
        if now >= due_ns {
            return;
        }
        let remaining = due_ns - now;
        if remaining > spin_ns {
            std::thread::sleep(std::time::Duration::from_nanos(remaining - spin_ns));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Makes this thread's timer sleeps precise (PR_SET_TIMERSLACK to 1 ns;
/// the default 50 us slack would dominate a 10 us completion time).
pub fn set_precise_timer_slack() {
    // SAFETY: prctl with PR_SET_TIMERSLACK only changes this thread's slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_waits() {
        let a = now_ns();
        wait_until(a + 200_000, 50_000);
        let b = now_ns();
        assert!(b >= a + 200_000);
    }
}
