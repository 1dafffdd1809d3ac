//! The null device's `show` lines beyond its configuration (lib.rs
//! writes that, then these): the medium and its errors, bad blocks, the
//! write cache, fault injection counts and the completion threads, as
//! the kernel's null_blk shows them in configfs and debugfs.
//!
//! Relies on: lib.rs (`NullDriver`'s fields); store.rs, badblocks.rs,
//! cache.rs, fault.rs, toggle.rs and irq.rs for their counters.

use std::fmt::Write as _;

use mqblk_sync::Ordering;

use crate::NullDriver;

/// `show`'s lines, by part (called by `Driver::show`, lib.rs).
impl NullDriver {
    /// The medium (and its errors), the bad blocks and the write cache.
    pub(crate) fn show_medium(&self, out: &mut String) {
        if let Some(mem) = &self.mem {
            let _ = writeln!(out, "{}", mem.describe());
            let errors = self.medium_errors.load(Ordering::Relaxed);
            if errors > 0 {
                let _ = writeln!(out, "null/medium_errors={errors} last: {}", self.last_medium_error.lock().as_str());
            }
        }
        if !self.badblocks.is_empty() {
            let _ = writeln!(out, "null/badblocks={}", self.badblocks.list());
        }
        if let Some(c) = &self.cache {
            let (cached, lost, torn, off) = c.counts();
            let _ = writeln!(
                out,
                "null/cache_pages={cached}\nnull/powercut_lost_pages={lost}\nnull/powercut_torn_blocks={torn}\nnull/power={}",
                if off { "off" } else { "on" }
            );
        }
    }

    /// How many requests each fault injection failed.
    pub(crate) fn show_faults(&self, out: &mut String) {
        if let Some(f) = &self.faults {
            let [read, write, flush, discard] = &f.error;
            for (name, attr) in [
                ("timeout", &f.timeout),
                ("requeue", &f.requeue),
                ("error_read", read),
                ("error_write", write),
                ("error_flush", flush),
                ("error_discard", discard),
            ] {
                if let Some(a) = attr {
                    let _ = writeln!(out, "null/fault_{name}_injected={}", a.failed());
                }
            }
        }
    }

    /// The completion threads: each toggling queue's notification state and
    /// counts, each irq thread's completions and lateness.
    pub(crate) fn show_queues(&self, out: &mut String) {
        for (i, q) in self.toggle.iter().enumerate() {
            let s = q.stats();
            let (hipri, lopri, on) = q.snapshot();
            let timed = s.timed.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "null/toggle{i}/notify={} hipri={hipri} lopri={lopri} notify_off={} notify_on={} irq_reaped={} poll_reaped={} \
                 timed={timed} late_ns_mean={} late_ns_max={} timer_sleeps={} timer_spin_ns={} timer_lead_ns={}",
                on as u8,
                s.notify_off.load(Ordering::Relaxed),
                s.notify_on.load(Ordering::Relaxed),
                s.irq_reaped.load(Ordering::Relaxed),
                s.poll_reaped.load(Ordering::Relaxed),
                s.late_ns_sum.load(Ordering::Relaxed).checked_div(timed).unwrap_or(0),
                s.late_ns_max.load(Ordering::Relaxed),
                s.timer_sleeps.load(Ordering::Relaxed),
                s.timer_spin_ns.load(Ordering::Relaxed),
                s.timer_lead_ns.load(Ordering::Relaxed),
            );
        }
        for (i, q) in self.irq.iter().enumerate() {
            let (timed, late_mean, late_max) = q.lateness();
            let (sleeps, spin_ns, lead_ns) = q.timer();
            let _ = writeln!(
                out,
                "null/irq{i}/completed={} pending={} timed={timed} late_ns_mean={late_mean} late_ns_max={late_max} \
                 timer_sleeps={sleeps} timer_spin_ns={spin_ns} timer_lead_ns={lead_ns}",
                q.completed(),
                q.pending()
            );
        }
    }
}
