//! Scalable bitmap allocation (`Sbitmap`) and a queue of sleepers on it
//! (`SbitmapQueue`), after Linux's lib/sbitmap.c.
//!
//! The bitmap is split into words of `1 << shift` bits, each on its own cache
//! line so that allocators on different threads rarely touch the same line.
//! Freeing a bit does not touch `word`: it sets the bit in the word's
//! `cleared` mask (deferred clear), and an allocator that finds the word full
//! moves `cleared` into `word` under the word's `swap_lock`. Each caller keeps
//! its own allocation hint (`AllocHint`, the kernel's per-CPU hint) so that
//! threads start their searches in different places.
//!
//! `SbitmapQueue` adds waiting: 8 wait queues, a count of active waiters
//! (`ws_active`), and a pluggable [`WakePolicy`] deciding how freed bits turn
//! into wakeups. A bare `SbitmapQueue` uses [`BatchWake`], the kernel 6.2+
//! scheme; devices default to [`HandoffWake`] ([`DEFAULT_WAKE_POLICY`]).
//!
//! This module is generic: it knows nothing of requests or tags.
//!
//! # The lost-wakeup argument
//! A waiter registers (`ws_active += 1`, SeqCst RMW) and only then retries the
//! allocation (SeqCst loads of `word` and `cleared`). A freer sets its bit in
//! `cleared` (SeqCst RMW) and only then reads `ws_active` (SeqCst). In the
//! single total order of SeqCst operations one of the two comes first: either
//! the waiter's retry sees the freed bit, or the freer sees the waiter and
//! hands the free to the wakeup policy. loom's model is weaker than C++'s for
//! SeqCst accesses, so under `cfg(loom)` explicit SeqCst fences stand in at the
//! two places marked `dekker_fence` (on x86 the RMWs are full barriers, as in
//! the kernel's `smp_mb__after_atomic`).

use std::fmt;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicUsize, Ordering};

mod kernel_wake;
mod queue;
mod waiter;
mod wake;

mod registry;

mod word;

pub use kernel_wake::{Batch2017Wake, Batch2020Wake, StashWake};
pub use queue::{SbitmapQueue, SbqSnapshot};
pub(crate) use registry::registered as registered_wake_policy;
pub use registry::{register_wake_policy, wake_policy_names, WakePolicyFactory};
pub use waiter::SbqWaiter;
pub use wake::{wake_policy, BatchWake, HandoffWake, WakePolicy, DEFAULT_WAKE_POLICY, WAKE_POLICIES};
pub(crate) use word::low_mask;
use word::SbitmapWord;
pub use word::{default_shift, AllocHint};

/// Bits per word at most (the machine word).
pub const BITS_PER_WORD: u32 = usize::BITS;
/// Number of wait queues per `SbitmapQueue`, as in the kernel.
pub const SBQ_WAIT_QUEUES: usize = 8;
/// Upper bound of `wake_batch`.
pub const SBQ_WAKE_BATCH: u32 = 8;

/// The scalable bitmap: allocates and frees bits without a lock, each word
/// on its own cache line.
///
/// ```
/// use mqblk::sbitmap::{default_shift, AllocHint, Sbitmap};
///
/// let sb = Sbitmap::new(64, None, false);
/// assert_eq!((sb.depth(), sb.shift(), sb.map_nr()), (64, default_shift(64), 4));
/// assert!(!sb.round_robin());
///
/// let mut hint = AllocHint::new(0); // one per thread: where its search starts
/// let a = sb.get(&mut hint).unwrap();
/// let b = sb.get(&mut hint).unwrap();
/// assert_ne!(a, b);
/// assert!(sb.test_bit(a) && sb.test_bit(b));
/// assert_eq!(sb.weight(), 2);
///
/// // A caller limited to a shallow depth gets only a share of each word.
/// let c = sb.get_shallow(&mut hint, 16).unwrap();
/// assert!(sb.bit_allowed(c, 16));
///
/// // Up to 4 bits of one word with one compare-and-swap: (first, mask).
/// let (first, mask) = sb.get_batch(4, &mut hint).unwrap();
/// assert!(mask != 0 && first + mask.trailing_zeros() < 64);
///
/// sb.clear(a, Some(&mut hint)); // freed (deferred: allocatable again soon)
/// assert!(!sb.test_bit(a));
/// assert_eq!(sb.weight(), 2 + mask.count_ones());
/// ```
pub struct Sbitmap {
    depth: u32,
    shift: u32,
    round_robin: bool,
    words: Box<[CachePadded<SbitmapWord>]>,
}

impl fmt::Debug for Sbitmap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sbitmap")
            .field("depth", &self.depth)
            .field("shift", &self.shift)
            .field("map_nr", &self.words.len())
            .field("busy", &self.weight())
            .finish()
    }
}

impl Sbitmap {
    /// A bitmap of `depth` bits with words of `1 << shift` bits
    /// (`None`: [`default_shift`]).
    pub fn new(depth: u32, shift: Option<u32>, round_robin: bool) -> Self {
        assert!(depth > 0, "sbitmap depth must be positive");
        let shift = shift.unwrap_or_else(|| default_shift(depth));
        assert!(shift <= BITS_PER_WORD.trailing_zeros(), "sbitmap shift {shift} too large");
        let bits_per_word = 1u32 << shift;
        let map_nr = depth.div_ceil(bits_per_word) as usize;
        let words = (0..map_nr)
            .map(|i| {
                let bits = (depth - ((i as u32) << shift)).min(bits_per_word);
                CachePadded::new(SbitmapWord { depth_mask: low_mask(bits), ..SbitmapWord::default() })
            })
            .collect();
        Self { depth, shift, round_robin, words }
    }

    /// Bits in the map.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Words hold `1 << shift` bits.
    pub fn shift(&self) -> u32 {
        self.shift
    }

    /// Words in the map.
    pub fn map_nr(&self) -> usize {
        self.words.len()
    }

    /// Whether bits are handed out in strict round-robin order.
    pub fn round_robin(&self) -> bool {
        self.round_robin
    }

    /// Number of usable bits in word `index` (the last word may be short).
    fn word_depth(&self, index: usize) -> u32 {
        let start = (index as u32) << self.shift;
        (self.depth - start).min(1 << self.shift)
    }

    /// May a caller limited to `shallow_depth` hold `bit`? The same rule
    /// the search applies: the limit is spread over the words in proportion
    /// to their size, with cumulative rounding so the per-word limits add
    /// up to exactly `shallow_depth` (the 6.17 semantics), each word's
    /// share being its low bits.
    pub fn bit_allowed(&self, bit: u32, shallow_depth: u32) -> bool {
        if shallow_depth >= self.depth {
            return true;
        }
        let index = (bit >> self.shift) as usize;
        (bit & low_mask(self.shift) as u32) < self.word_limit(index, shallow_depth)
    }

    fn word_limit(&self, index: usize, shallow_depth: u32) -> u32 {
        let word_depth = self.word_depth(index);
        if shallow_depth >= self.depth {
            return word_depth;
        }
        let start = u64::from((index as u32) << self.shift);
        let end = start + u64::from(word_depth);
        let shallow = u64::from(shallow_depth);
        let depth = u64::from(self.depth);
        ((end * shallow) / depth - (start * shallow) / depth) as u32
    }

    /// Takes a free bit in `word` within `[hint, limit)`, then (if `wrap`)
    /// within `[0, hint)`.
    fn get_in_word(word: &AtomicUsize, limit: u32, hint: u32, wrap: bool) -> Option<u32> {
        let limit_mask = low_mask(limit);
        let upper = limit_mask & !low_mask(hint.min(limit));
        let lower = if wrap { limit_mask & low_mask(hint.min(limit)) } else { 0 };
        for range in [upper, lower] {
            if range == 0 {
                continue;
            }
            // SeqCst: the waiter's retry must be ordered after its ws_active
            // increment (see the module header). A plain load on x86.
            let mut val = word.load(Ordering::SeqCst);
            loop {
                // Look before test-and-set: a full word is never dirtied.
                let free = !val & range;
                if free == 0 {
                    break;
                }
                let nr = free.trailing_zeros();
                let bit = 1usize << nr;
                // Acquire pairs with the Release in `deferred_clear`, which
                // carries the freer's writes (the previous owner is done).
                let old = word.fetch_or(bit, Ordering::AcqRel);
                if old & bit == 0 {
                    return Some(nr);
                }
                val = old | bit;
            }
        }
        None
    }

    /// Moves freed bits of `w` into its word. Returns true if the caller
    /// should retry the word: bits were moved, or free bits exist in the
    /// searched range (a concurrent swapper finished between our looks).
    fn deferred_clear(w: &SbitmapWord, limit: u32, hint: u32, wrap: bool) -> bool {
        let _guard = w.swap_lock.lock();
        if w.cleared.load(Ordering::SeqCst) == 0 {
            if limit == 0 {
                return false;
            }
            let mut mask = low_mask(limit);
            if !wrap {
                mask &= !low_mask(hint.min(limit));
            }
            return w.word.load(Ordering::SeqCst) & mask != mask;
        }
        // Acquire: we see the freers' writes (pairs with their Release RMW).
        let mask = w.cleared.swap(0, Ordering::AcqRel);
        // Release: the next allocator of these bits sees those writes too.
        w.word.fetch_and(!mask, Ordering::AcqRel);
        true
    }

    fn find_bit_in_word(&self, index: usize, limit: u32, hint: u32, wrap: bool) -> Option<u32> {
        let w = &self.words[index];
        loop {
            if let Some(nr) = Self::get_in_word(&w.word, limit, hint, wrap) {
                return Some(nr);
            }
            if !Self::deferred_clear(w, limit, hint, wrap) {
                return None;
            }
        }
    }

    fn hint_start(&self, hint: &AllocHint) -> u32 {
        if hint.0 >= self.depth {
            hint.0 % self.depth
        } else {
            hint.0
        }
    }

    fn hint_after_get(&self, hint: &mut AllocHint, bit: u32) {
        let next = bit + 1;
        hint.0 = if next >= self.depth { 0 } else { next };
    }

    /// Allocates one bit, or `None` if every bit (within `shallow_depth`) is
    /// busy. Updates `hint`: past the bit on success, 0 on failure.
    #[inline]
    pub fn get_shallow(&self, hint: &mut AllocHint, shallow_depth: u32) -> Option<u32> {
        if !self.round_robin && shallow_depth >= self.depth {
            if let Some(bit) = self.get_fast(hint) {
                return Some(bit);
            }
        }
        self.search(hint, shallow_depth)
    }

    /// The general search over all words from the hint.
    fn search(&self, hint: &mut AllocHint, shallow_depth: u32) -> Option<u32> {
        let start = self.hint_start(hint);
        let mut index = (start >> self.shift) as usize;
        // Without round robin the hint picks the word and the word is searched
        // from bit 0 (no point looping twice inside it); with round robin the
        // search starts at the hinted bit and the start word is visited again
        // at the end for its low bits.
        let mut bit_hint = if self.round_robin { start & low_mask(self.shift) as u32 } else { 0 };
        let visits = self.words.len() + usize::from(self.round_robin);
        for _ in 0..visits {
            let limit = self.word_limit(index, shallow_depth);
            if let Some(nr) = self.find_bit_in_word(index, limit, bit_hint, !self.round_robin) {
                let bit = ((index as u32) << self.shift) + nr;
                debug_assert!(bit < self.depth);
                self.hint_after_get(hint, bit);
                return Some(bit);
            }
            bit_hint = 0;
            index = (index + 1) % self.words.len();
        }
        hint.0 = 0;
        None
    }

    /// Allocates one bit anywhere in the bitmap.
    #[inline]
    pub fn get(&self, hint: &mut AllocHint) -> Option<u32> {
        self.get_shallow(hint, self.depth)
    }

    /// The uncontended case in one look: the first free bit of the hinted
    /// word. Anything else (word full, lost race, round robin, shallow
    /// limits) goes to the general search, which behaves the same.
    #[inline(always)]
    fn get_fast(&self, hint: &mut AllocHint) -> Option<u32> {
        let index = (hint.0 >> self.shift) as usize;
        let w = self.words.get(index)?;
        // SeqCst: see get_in_word (the waiter's retry ordering).
        let free = !w.word.load(Ordering::SeqCst) & w.depth_mask;
        if free == 0 {
            return None;
        }
        let nr = free.trailing_zeros();
        let bit_mask = 1usize << nr;
        if w.word.fetch_or(bit_mask, Ordering::AcqRel) & bit_mask != 0 {
            return None;
        }
        let bit = ((index as u32) << self.shift) + nr;
        self.hint_after_get(hint, bit);
        Some(bit)
    }

    /// Allocates up to `nr` contiguous bits from one word with a single
    /// compare-and-swap. Returns the first bit number and a mask of the bits
    /// obtained relative to it (bit i of the mask = bit `base + i`); the mask
    /// may have holes where another allocator got there first.
    pub fn get_batch(&self, nr: u32, hint: &mut AllocHint) -> Option<(u32, usize)> {
        assert!(nr > 0 && nr <= BITS_PER_WORD, "batch of {nr} bits");
        if self.round_robin {
            return None; // as in the kernel: batching would break the order
        }
        let start = self.hint_start(hint);
        let mut index = (start >> self.shift) as usize;
        for _ in 0..self.words.len() {
            if let Some((first, mask)) = self.get_batch_in_word(index, nr) {
                let base = ((index as u32) << self.shift) + first;
                let last = base + (BITS_PER_WORD - 1 - mask.leading_zeros());
                self.hint_after_get(hint, last);
                return Some((base, mask));
            }
            index = (index + 1) % self.words.len();
        }
        hint.0 = 0;
        None
    }

    fn get_batch_in_word(&self, index: usize, nr: u32) -> Option<(u32, usize)> {
        let w = &self.words[index];
        let word_depth = self.word_depth(index);
        let depth_mask = low_mask(word_depth);
        let mut val = w.word.load(Ordering::SeqCst);
        if val & depth_mask == depth_mask {
            if !Self::deferred_clear(w, word_depth, 0, true) {
                return None;
            }
            val = w.word.load(Ordering::SeqCst);
        }
        let first = (!val & depth_mask).trailing_zeros();
        if first >= word_depth {
            return None;
        }
        let run = nr.min(word_depth - first);
        let want = low_mask(run) << first;
        loop {
            if val & want == want {
                return None; // all taken meanwhile
            }
            match w.word.compare_exchange_weak(val, val | want, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some((first, (want & !val) >> first)),
                Err(actual) => val = actual,
            }
        }
    }

    /// Frees `bit` (deferred: it becomes allocatable once an allocator finds
    /// its word full). Sets `hint` to the freed bit unless round robin.
    #[inline(always)]
    pub fn clear(&self, bit: u32, hint: Option<&mut AllocHint>) {
        assert!(bit < self.depth, "clear of bit {bit} beyond depth {}", self.depth);
        debug_assert!(self.test_bit(bit), "bit {bit} freed while not allocated");
        let index = (bit >> self.shift) as usize;
        // shift <= log2(BITS_PER_WORD) (`new`): the shifts stay in range.
        let mask = 1usize << (bit & ((1 << self.shift) - 1));
        // SeqCst RMW: first half of the freer's side of the lost-wakeup
        // argument (the second is the ws_active load in SbitmapQueue::clear).
        // Release also publishes the previous owner's writes.
        let old = self.words[index].cleared.fetch_or(mask, Ordering::SeqCst);
        debug_assert_eq!(old & mask, 0, "bit {bit} freed twice");
        if let Some(hint) = hint {
            if !self.round_robin {
                hint.0 = bit;
            }
        }
    }

    /// Is `bit` allocated (set in its word and not yet freed)?
    pub fn test_bit(&self, bit: u32) -> bool {
        let index = (bit >> self.shift) as usize;
        let mask = 1usize << (bit & low_mask(self.shift) as u32);
        let w = &self.words[index];
        w.word.load(Ordering::SeqCst) & !w.cleared.load(Ordering::SeqCst) & mask != 0
    }

    /// Number of allocated bits (a snapshot; racy while in use).
    pub fn weight(&self) -> u32 {
        (0..self.words.len())
            .map(|i| {
                let w = &self.words[i];
                let busy = w.word.load(Ordering::Relaxed) & !w.cleared.load(Ordering::Relaxed);
                (busy & low_mask(self.word_depth(i))).count_ones()
            })
            .sum()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bit_allowed_matches_what_a_shallow_search_can_take() {
        for (depth, shallow) in [(64, 32), (64, 12), (64, 48), (100, 37), (8, 3), (64, 64)] {
            let sb = Sbitmap::new(depth, None, false);
            let mut hint = AllocHint::new(0);
            let mut taken = Vec::new();
            while let Some(bit) = sb.get_shallow(&mut hint, shallow) {
                taken.push(bit);
            }
            taken.sort_unstable();
            let allowed: Vec<u32> = (0..depth).filter(|&b| sb.bit_allowed(b, shallow)).collect();
            assert_eq!(taken, allowed, "depth {depth} shallow {shallow}");
        }
    }

    #[test]
    fn default_shift_spans_four_words() {
        assert_eq!(default_shift(64), 4);
        assert_eq!(default_shift(128), 5);
        assert_eq!(default_shift(256), 6);
        assert_eq!(default_shift(1024), 6);
        assert_eq!(default_shift(2), 6);
    }

    #[test]
    fn get_all_then_full() {
        let sb = Sbitmap::new(100, None, false);
        let mut hint = AllocHint::new(37);
        let mut seen = [false; 100];
        for _ in 0..100 {
            let bit = sb.get(&mut hint).expect("free bit");
            assert!(!seen[bit as usize], "bit {bit} handed out twice");
            seen[bit as usize] = true;
        }
        assert_eq!(sb.get(&mut hint), None);
        assert_eq!(hint.0, 0, "hint resets on failure");
        assert_eq!(sb.weight(), 100);
    }

    #[test]
    fn deferred_clear_makes_bit_reusable() {
        let sb = Sbitmap::new(8, Some(3), false);
        let mut hint = AllocHint::new(0);
        for _ in 0..8 {
            sb.get(&mut hint).unwrap();
        }
        sb.clear(5, Some(&mut hint));
        assert_eq!(hint.0, 5, "freeing sets the hint to the freed bit");
        assert_eq!(sb.weight(), 7);
        assert!(!sb.test_bit(5));
        // Word is full until the deferred clear runs inside get.
        assert_eq!(sb.get(&mut hint), Some(5));
        assert_eq!(sb.get(&mut hint), None);
    }

    #[test]
    fn hint_advances_past_allocated_bit() {
        let sb = Sbitmap::new(64, Some(6), false);
        let mut hint = AllocHint::new(0);
        assert_eq!(sb.get(&mut hint), Some(0));
        assert_eq!(hint.0, 1);
    }

    #[test]
    fn round_robin_hands_out_in_order() {
        let sb = Sbitmap::new(16, Some(2), true);
        let mut hint = AllocHint::new(0);
        let got: Vec<u32> = (0..16).map(|_| sb.get(&mut hint).unwrap()).collect();
        assert_eq!(got, (0..16).collect::<Vec<_>>());
        sb.clear(3, Some(&mut hint));
        assert_eq!(hint.0, 0, "round robin ignores the freed bit for the hint");
        assert_eq!(sb.get(&mut hint), Some(3));
    }

    #[test]
    fn shallow_depth_limits_whole_bitmap() {
        let sb = Sbitmap::new(64, Some(4), false);
        for shallow in [1, 3, 16, 17, 48, 63] {
            let mut hint = AllocHint::new(5);
            let mut got = Vec::new();
            while let Some(bit) = sb.get_shallow(&mut hint, shallow) {
                got.push(bit);
            }
            assert_eq!(got.len() as u32, shallow, "shallow {shallow}");
            for bit in got {
                sb.clear(bit, None);
            }
            // Force the deferred clears through so the next round starts empty.
            let mut h = AllocHint::new(0);
            let all: Vec<u32> = (0..64).map(|_| sb.get(&mut h).unwrap()).collect();
            for bit in all {
                sb.clear(bit, None);
            }
        }
    }

    #[test]
    fn batch_get_takes_contiguous_bits_from_one_word() {
        let sb = Sbitmap::new(256, Some(6), false);
        let mut hint = AllocHint::new(0);
        let (base, mask) = sb.get_batch(8, &mut hint).unwrap();
        assert_eq!((base, mask), (0, 0xff));
        assert_eq!(hint.0, 8);
        let (base, mask) = sb.get_batch(8, &mut hint).unwrap();
        assert_eq!((base, mask), (8, 0xff));
        assert_eq!(sb.weight(), 16);
    }

    #[test]
    fn batch_get_truncates_at_word_end() {
        let sb = Sbitmap::new(8, Some(3), false);
        let mut hint = AllocHint::new(0);
        for _ in 0..6 {
            sb.get(&mut hint).unwrap();
        }
        let mut hint = AllocHint::new(0);
        assert_eq!(sb.get_batch(4, &mut hint), Some((6, 0b11)));
        assert_eq!(sb.get_batch(4, &mut hint), None);
    }

    #[test]
    fn wake_batch_formula() {
        use super::queue::calc_wake_batch;
        assert_eq!(calc_wake_batch(64, 64), 8);
        assert_eq!(calc_wake_batch(256, 256), 8);
        assert_eq!(calc_wake_batch(32, 32), 4);
        assert_eq!(calc_wake_batch(256, 16), 2);
        assert_eq!(calc_wake_batch(4, 4), 1);
    }

    #[test]
    fn waiter_sleeps_and_is_woken_by_free() {
        let sbq = std::sync::Arc::new(SbitmapQueue::new(4, false));
        let mut hint = AllocHint::new(0);
        let bits: Vec<u32> = (0..4).map(|_| sbq.get(&mut hint).unwrap()).collect();
        let sbq2 = sbq.clone();
        let t = std::thread::spawn(move || {
            let waiter = SbqWaiter::new();
            let mut hint = AllocHint::new(0);
            sbq2.get_or_wait(&mut hint, 4, &waiter, 0, || {})
        });
        while sbq.ws_active() == 0 {
            std::thread::yield_now();
        }
        sbq.clear(bits[2], None);
        let (bit, _slept) = t.join().unwrap();
        assert_eq!(bit, bits[2]);
        assert_eq!(sbq.ws_active(), 0);
        assert_eq!(sbq.snapshot().ws_waiting, [0; SBQ_WAIT_QUEUES]);
    }
}
