//! A monotonic nanosecond clock (CLOCK_MONOTONIC through the vDSO, about
//! 20-25 ns a read here), shared by drivers and benchmarks.

/// Nanoseconds since an arbitrary fixed point (boot), monotonic.
///
/// ```
/// use mqblk::clock::{coarse_now_ns, now_ns};
///
/// let (a, b) = (now_ns(), now_ns());
/// assert!(b >= a);
/// // The coarse clock is the same clock at the kernel tick's resolution.
/// assert!(coarse_now_ns() <= now_ns());
/// ```
#[inline]
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// A cheap monotonic clock with the kernel tick's resolution (a few ms,
/// CLOCK_MONOTONIC_COARSE): for deadlines of hundreds of ms, like jiffies
/// (example: [`now_ns`]).
#[inline]
pub fn coarse_now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC_COARSE)
}

#[inline(always)]
fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; both clocks exist on Linux.
    unsafe {
        libc::clock_gettime(id, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Waits until `now_ns() >= due_ns`: sleeps while far away (the kernel's
/// timers oversleep by tens of microseconds here), then spins for the last
/// `spin_ns`, so wakeups land within a few microseconds.
/// Returns the time it saw at or past `due_ns`.
///
/// ```
/// use mqblk::clock::{now_ns, set_precise_timer_slack, wait_until};
///
/// set_precise_timer_slack(); // this thread's sleeps end on time
/// let due = now_ns() + 50_000; // 50 us from now
/// let woke = wait_until(due, 20_000); // spinning for the last 20 us
/// assert!(woke >= due);
/// ```
pub fn wait_until(due_ns: u64, spin_ns: u64) -> u64 {
    loop {
        let now = now_ns();
        if now >= due_ns {
            return now;
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
/// A no-op under Miri, which cannot emulate `prctl` (its sleeps have no
/// slack to tune; example: [`wait_until`]).
pub fn set_precise_timer_slack() {
    #[cfg(not(miri))]
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

/// Where a [`Clock`] reads time from (fio's `clocksource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockSource {
    /// CLOCK_MONOTONIC through the vDSO (fio's clock_gettime/gettimeofday).
    ClockGettime,
    /// The CPU's time-stamp counter, calibrated against CLOCK_MONOTONIC
    /// (fio's `cpu`): about 10 ns a read here instead of 25.
    Cpu,
}

/// A monotonic nanosecond clock over a chosen source. Cheap to copy.
///
/// ```
/// use mqblk::clock::{now_ns, tsc_reliable, Clock, ClockSource};
///
/// let clock = Clock::new(ClockSource::ClockGettime).unwrap();
/// assert_eq!(clock.source(), ClockSource::ClockGettime);
/// let t = clock.now_ns();
/// assert!(now_ns() >= t, "the CLOCK_MONOTONIC scale");
///
/// // fio's default: the TSC where it stands for wall time (this
/// // calibrates for about 20 ms), else clock_gettime.
/// let best = Clock::best();
/// assert_eq!(best.source() == ClockSource::Cpu, tsc_reliable());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    source: ClockSource,
    tsc_base: u64,
    ns_base: u64,
    /// Nanoseconds per TSC tick, as a 32.32 fixed-point number.
    ns_per_tick_q32: u64,
}

impl Clock {
    /// A clock over `source`. `Cpu` calibrates for about 20 ms and fails if
    /// the TSC is not reliable (not constant and non-stop) or not x86_64.
    pub fn new(source: ClockSource) -> Result<Self, String> {
        let mut clock = Self { source, tsc_base: 0, ns_base: 0, ns_per_tick_q32: 0 };
        if source == ClockSource::Cpu {
            if !tsc_reliable() {
                return Err(
                    "clocksource=cpu needs a constant, non-stop TSC (x86_64 constant_tsc and nonstop_tsc)".into()
                );
            }
            let (t0, c0) = paired_reading();
            std::thread::sleep(std::time::Duration::from_millis(20));
            let (t1, c1) = paired_reading();
            let ticks = c1.saturating_sub(c0).max(1);
            clock.ns_per_tick_q32 = (((t1 - t0) as u128) << 32).div_ceil(ticks as u128) as u64;
            clock.tsc_base = c1;
            clock.ns_base = t1;
        }
        Ok(clock)
    }

    /// The default of fio: the TSC when it is reliable, else clock_gettime.
    pub fn best() -> Self {
        Self::new(ClockSource::Cpu).unwrap_or(Self {
            source: ClockSource::ClockGettime,
            tsc_base: 0,
            ns_base: 0,
            ns_per_tick_q32: 0,
        })
    }

    /// Where it reads time from.
    pub fn source(&self) -> ClockSource {
        self.source
    }

    /// Nanoseconds on the CLOCK_MONOTONIC scale.
    #[inline(always)]
    pub fn now_ns(&self) -> u64 {
        match self.source {
            ClockSource::ClockGettime => now_ns(),
            ClockSource::Cpu => {
                // Saturating: a thread on another CPU may read a TSC a
                // little behind the calibrating one's base; wrapping would
                // put it centuries ahead (a bench job then saw its runtime
                // over at once and ran no I/O).
                let ticks = rdtsc().saturating_sub(self.tsc_base);
                self.ns_base + ((u128::from(ticks) * u128::from(self.ns_per_tick_q32)) >> 32) as u64
            }
        }
    }
}

/// A TSC reading and the CLOCK_MONOTONIC time it was taken at: the middle
/// of the tightest of a few `now_ns()` brackets around it, so a preemption
/// between the two reads cannot skew a calibration by milliseconds.
fn paired_reading() -> (u64, u64) {
    const ATTEMPTS: u32 = 16;
    const TIGHT_NS: u64 = 2_000;
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..ATTEMPTS {
        let before = now_ns();
        let ticks = rdtsc();
        let after = now_ns();
        let width = after - before;
        if width < best.0 {
            best = (width, before + width / 2, ticks);
        }
        if width <= TIGHT_NS {
            break;
        }
    }
    (best.1, best.2)
}

#[inline(always)]
fn rdtsc() -> u64 {
    // Miri cannot emulate RDTSC: it counts the monotonic clock's
    // nanoseconds instead (tsc_reliable() is false under Miri, so only a
    // directly built Cpu clock gets here).
    #[cfg(miri)]
    {
        now_ns()
    }
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        // SAFETY: RDTSC has no preconditions on x86_64; it only reads the
        // time-stamp counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(all(not(target_arch = "x86_64"), not(miri)))]
    {
        0
    }
}

/// Is the TSC constant-rate and non-stop (so it can stand for wall time;
/// example: [`Clock`])?
/// Never under Miri: it emulates neither RDTSC nor /proc, so
/// `Clock::best()` falls back to clock_gettime there.
pub fn tsc_reliable() -> bool {
    if !cfg!(target_arch = "x86_64") || cfg!(miri) {
        return false;
    }
    let Ok(cpuinfo) = std::fs::read_to_string("/proc/cpuinfo") else { return false };
    let Some(flags) = cpuinfo.lines().find(|l| l.starts_with("flags")) else { return false };
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    has("constant_tsc") && has("nonstop_tsc")
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    #[test]
    fn tsc_clock_tracks_clock_gettime() {
        let Ok(clock) = Clock::new(ClockSource::Cpu) else {
            assert!(!tsc_reliable(), "a reliable TSC must give a cpu clock");
            return;
        };
        // Each TSC-clock reading is bracketed by CLOCK_MONOTONIC readings,
        // the tightest of a few, so a preemption between the reads cannot
        // pass for clock error.
        let bracketed = || {
            (0..16)
                .map(|_| (now_ns(), clock.now_ns(), now_ns()))
                .min_by_key(|(before, _, after)| after - before)
                .unwrap()
        };
        let a = bracketed();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let b = bracketed();
        let tsc_ns = (b.1 - a.1) as f64;
        let mono_ns = ((b.0 + b.2) / 2 - (a.0 + a.2) / 2) as f64;
        assert!((tsc_ns / mono_ns - 1.0).abs() < 0.02, "tsc {tsc_ns} vs monotonic {mono_ns}");
    }
}
