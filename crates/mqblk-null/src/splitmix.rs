//! A shared pseudo-random sequence for the device's random choices (fault
//! injection's probability, the channels' service-time jitter): splitmix64
//! (Steele, Lea and Flood, "Fast splittable pseudorandom number
//! generators", 2014) over an atomic counter, so any thread draws without a
//! lock or an allocation and a seed gives the same sequence.
//!
//! Relies on: mqblk_sync's atomics (loom under cfg(loom)).

use mqblk_sync::{AtomicU64, Ordering};

const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

pub(crate) struct SplitMix(AtomicU64);

impl SplitMix {
    pub(crate) fn new(seed: u64) -> Self {
        Self(AtomicU64::new(seed))
    }

    /// The next value of the sequence.
    pub(crate) fn next(&self) -> u64 {
        let mut z = self.0.fetch_add(GAMMA, Ordering::Relaxed).wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
