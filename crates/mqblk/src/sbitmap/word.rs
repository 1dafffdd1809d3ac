//! The bitmap's pieces below `Sbitmap`: one word with its deferred-clear
//! mask (on its own cache line in the map), the caller's allocation hint,
//! and the default word size.
//!
//! Relies on: the loom-swappable atomics and lock (sync.rs).

use super::BITS_PER_WORD;
use crate::sync::{AtomicUsize, Mutex};

/// Mask of the low `n` bits (`n` may be a full word).
#[inline(always)]
pub(crate) fn low_mask(n: u32) -> usize {
    debug_assert!(n <= BITS_PER_WORD);
    if n >= BITS_PER_WORD {
        usize::MAX
    } else {
        (1usize << n) - 1
    }
}

/// One word of the bitmap with its deferred-clear mask, alone on a cache line.
#[derive(Debug, Default)]
pub(super) struct SbitmapWord {
    /// Allocated bits (set = busy).
    pub(super) word: AtomicUsize,
    /// Bits freed but not yet cleared from `word`.
    pub(super) cleared: AtomicUsize,
    /// Serialises moving `cleared` into `word` (the 2024 io-hang fix: without
    /// it an allocator can see `cleared == 0` while another one holds the
    /// swapped mask and has not yet cleared it from `word`, and give up).
    pub(super) swap_lock: Mutex<()>,
    /// The word's usable bits (the last word may be short).
    pub(super) depth_mask: usize,
}

/// A caller's allocation hint: where its next search starts. One per thread
/// or per client, like the kernel's per-CPU hint (example: [`Sbitmap`](super::Sbitmap)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocHint(pub u32);

impl AllocHint {
    /// A hint starting at `seed` (taken modulo the depth on first use), so
    /// that different callers start in different words.
    pub fn new(seed: u32) -> Self {
        Self(seed)
    }
}

/// The kernel's default word shift: a full word, lowered until the map spans
/// at least 4 words, so that allocators spread out even for small depths.
///
/// ```
/// use mqblk::sbitmap::default_shift;
///
/// assert_eq!(default_shift(64), 4, "4 words of 16 bits");
/// assert_eq!(default_shift(4096), 6, "64 words of 64 bits");
/// ```
pub fn default_shift(depth: u32) -> u32 {
    let mut shift = BITS_PER_WORD.trailing_zeros();
    if depth >= 4 {
        while (4u32 << shift) > depth {
            shift -= 1;
        }
    }
    shift
}
