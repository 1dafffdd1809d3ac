//! The completion threads' timer (irqmode=2): sleep until just before a
//! completion is due, then spin only for what is left, the shape of the
//! kernel's null_blk timer mode (an hrtimer armed at submission: the CPU
//! is free until the timer interrupt fires).
//!
//! A user-space sleep wakes late: here (a KVM guest, lapic-deadline
//! clockevents, timer slack 1 ns) a clock_nanosleep of any length ends
//! about 20 us past its time, and at times hundreds. The kernel's own
//! hrtimers in this guest fire as late, but the device emulated is the
//! source's (a host-emulated disk whose interrupt is not a guest timer),
//! so the thread wakes `lead` early and spins the rest. The lead is learned
//! from the wake-ups themselves, as TCP learns its retransmission timeout
//! from round-trip samples (RFC 6298, Jacobson's estimator): a smoothed
//! overshoot plus a multiple of its smoothed deviation, bounded. A fixed
//! spin long enough for the worst overshoot (60 us) would keep a CPU busy
//! for most of each I/O on the very CPUs the jobs run on, and that stolen
//! CPU inflates what polling gains. A wait shorter than the lead still
//! only spins (the poll experiment's 4k device, about 24 us against a
//! lead of about 20 us): the price of an emulated interrupt that is on
//! time on a machine whose timers are not; `timer_sleeps` and
//! `timer_spin_ns` in the null device's stats show how much of it there
//! was.
//!
//! Relies on: mqblk's clock (now_ns); nothing shared: each completion
//! thread owns its `TimerLead`.

use std::time::Duration;

use mqblk::clock::now_ns;

/// Bounds of the lead (ns). The least: a sleep is not worth it for less
/// (the syscall and the context switch cost a few us). The most: past it
/// the sleep was not late, the thread was not scheduled (a loaded
/// machine), which a longer spin would only make worse. Under Miri, whose
/// clock advances with every interpreted step and whose sleeps end on
/// time, 1 us: a spin there costs minutes of interpretation.
const LEAD_MIN_NS: u64 = if cfg!(miri) { 1_000 } else { 2_000 };
const LEAD_MAX_NS: u64 = if cfg!(miri) { 1_000 } else { 60_000 };

/// Deviations of the overshoot added to its mean: a wake-up later than
/// `due` costs the I/O latency, an earlier one only spin; RFC 6298's 4
/// makes the spin as long as the sleep's tail, 2 keeps most wake-ups
/// early at half the spin.
const DEVIATIONS: u64 = 2;

/// Running estimates of how late this thread's sleeps end.
#[derive(Debug, Clone)]
pub(crate) struct TimerLead {
    /// Smoothed overshoot (ns): gain 1/8, as RFC 6298's SRTT.
    mean_ns: u64,
    /// Smoothed mean deviation (ns): gain 1/4, as RFC 6298's RTTVAR.
    deviation_ns: u64,
    /// Sleeps taken, and time spun after them or instead of them (ns).
    pub(crate) sleeps: u64,
    pub(crate) spin_ns: u64,
}

impl Default for TimerLead {
    fn default() -> Self {
        // Nothing assumed: the first sleeps wake late and teach the lead.
        Self { mean_ns: LEAD_MIN_NS, deviation_ns: 0, sleeps: 0, spin_ns: 0 }
    }
}

impl TimerLead {
    /// How long before a due time to wake.
    pub(crate) fn lead_ns(&self) -> u64 {
        (self.mean_ns + DEVIATIONS * self.deviation_ns).clamp(LEAD_MIN_NS, LEAD_MAX_NS)
    }

    /// Learns from one sleep that ended `overshoot_ns` past its time
    /// (bounded, so a thread descheduled for milliseconds does not make
    /// every later wait a long spin).
    pub(crate) fn learn(&mut self, overshoot_ns: u64) {
        let sample = overshoot_ns.min(LEAD_MAX_NS);
        let deviation = sample.abs_diff(self.mean_ns);
        // deviation += (|sample - mean| - deviation) / 4; mean += (sample - mean) / 8.
        self.deviation_ns = self.deviation_ns - self.deviation_ns / 4 + deviation / 4;
        self.mean_ns = self.mean_ns - self.mean_ns / 8 + sample / 8;
    }

    /// A wait too short to sleep teaches nothing, so the estimates decay
    /// toward the least lead (1/64 and 1/16 a wait): a lead raised past
    /// the completion time by a few bad wake-ups would otherwise never
    /// sleep again to learn that they were rare.
    fn forget(&mut self) {
        self.mean_ns -= self.mean_ns / 64;
        self.deviation_ns -= self.deviation_ns / 16;
    }

    /// Waits until `now_ns() >= due_ns`: sleeps until `lead_ns` before it
    /// if that is in the future, then spins. Returns the time it saw at or
    /// past `due_ns`.
    pub(crate) fn wait_until(&mut self, due_ns: u64) -> u64 {
        let mut now = now_ns();
        let wake_ns = due_ns.saturating_sub(self.lead_ns());
        if wake_ns > now {
            std::thread::sleep(Duration::from_nanos(wake_ns - now));
            now = now_ns();
            self.sleeps += 1;
            self.learn(now.saturating_sub(wake_ns));
        } else if due_ns > now {
            self.forget();
        }
        let spin_from = now;
        while now < due_ns {
            std::hint::spin_loop();
            now = now_ns();
        }
        self.spin_ns += now - spin_from;
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lead_follows_the_overshoot_within_its_bounds() {
        let mut t = TimerLead::default();
        for _ in 0..64 {
            t.learn(10_000);
        }
        let lead = t.lead_ns();
        assert!(lead.abs_diff(10_000) <= 500 || cfg!(miri), "steady 10 us overshoot: lead {lead}");
        for _ in 0..64 {
            t.learn(0);
        }
        assert_eq!(t.lead_ns(), LEAD_MIN_NS, "punctual sleeps: the least lead");
        for _ in 0..64 {
            t.learn(u64::MAX);
        }
        assert_eq!(t.lead_ns(), LEAD_MAX_NS, "a descheduled thread's samples are bounded");
    }

    #[test]
    fn a_jittery_overshoot_leads_by_more_than_its_mean() {
        let mut t = TimerLead::default();
        for i in 0..64 {
            t.learn(if i % 2 == 0 { 5_000 } else { 15_000 });
        }
        assert!(t.lead_ns() > 12_000 || cfg!(miri), "mean 10 us, deviation 5 us: lead {}", t.lead_ns());
    }

    #[test]
    fn a_lead_too_long_to_sleep_decays_until_it_sleeps_again() {
        let mut t = TimerLead::default();
        for _ in 0..64 {
            t.learn(u64::MAX);
        }
        let high = t.lead_ns();
        for _ in 0..64 {
            t.forget();
        }
        assert!(t.lead_ns() < high / 2 || cfg!(miri), "{} from {high}", t.lead_ns());
    }

    #[test]
    fn waits_until_the_due_time() {
        let mut t = TimerLead::default();
        let due = now_ns() + 200_000;
        let woke = t.wait_until(due);
        assert!(woke >= due);
        assert_eq!(t.sleeps, 1, "200 us away: slept first");
        let woke = t.wait_until(woke);
        assert!(woke >= due, "a past due time returns at once");
    }
}
