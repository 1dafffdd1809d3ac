//! Property and stress tests of the sbitmap: a bit is never handed out
//! twice, shallow limits hold, batched gets are exclusive, and under many
//! threads every bit comes back.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use mqblk::sbitmap::SbitmapQueue;
use mqblk::sbitmap::{AllocHint, Sbitmap, SbqWaiter};
use proptest::prelude::*;

mod common;
use common::proptest_config;

#[derive(Debug, Clone)]
enum Step {
    Get { hint: u32, shallow: u32 },
    Batch { nr: u32, hint: u32 },
    Clear { pick: usize },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (any::<u32>(), 1u32..=200).prop_map(|(hint, shallow)| Step::Get { hint, shallow }),
        (1u32..=16, any::<u32>()).prop_map(|(nr, hint)| Step::Batch { nr, hint }),
        any::<usize>().prop_map(|pick| Step::Clear { pick }),
    ]
}

proptest! {
    #![proptest_config(proptest_config(200))]
    #[test]
    fn never_twice_and_shallow_respected(
        depth in 1u32..200,
        shift in prop::option::of(0u32..=6),
        round_robin in any::<bool>(),
        steps in prop::collection::vec(step(), 1..if cfg!(miri) { 30 } else { 300 }),
    ) {
        let sb = Sbitmap::new(depth, shift, round_robin);
        let mut held: Vec<u32> = Vec::new();
        let mut owned = vec![false; depth as usize];
        for s in steps {
            match s {
                Step::Get { hint, shallow } => {
                    let mut h = AllocHint::new(hint);
                    if let Some(bit) = sb.get_shallow(&mut h, shallow) {
                        prop_assert!(bit < depth);
                        prop_assert!(!owned[bit as usize], "bit {} handed out twice", bit);
                        owned[bit as usize] = true;
                        held.push(bit);
                    }
                }
                Step::Batch { nr, hint } => {
                    let mut h = AllocHint::new(hint);
                    if let Some((base, mask)) = sb.get_batch(nr, &mut h) {
                        prop_assert!(mask != 0 && mask.count_ones() <= nr);
                        for i in 0..usize::BITS {
                            if mask & (1 << i) != 0 {
                                let bit = base + i;
                                prop_assert!(bit < depth);
                                prop_assert!(!owned[bit as usize], "batch bit {} handed out twice", bit);
                                owned[bit as usize] = true;
                                held.push(bit);
                            }
                        }
                    }
                }
                Step::Clear { pick } => {
                    if !held.is_empty() {
                        let bit = held.swap_remove(pick % held.len());
                        owned[bit as usize] = false;
                        sb.clear(bit, None);
                    }
                }
            }
            prop_assert_eq!(sb.weight() as usize, held.len());
        }
    }

    #[test]
    fn shallow_depth_caps_the_whole_bitmap(depth in 1u32..300, shallow in 1u32..300, hint in any::<u32>()) {
        let sb = Sbitmap::new(depth, None, false);
        let mut h = AllocHint::new(hint);
        let mut n = 0;
        while sb.get_shallow(&mut h, shallow).is_some() {
            n += 1;
            prop_assert!(n <= depth);
        }
        prop_assert_eq!(n, shallow.min(depth));
    }
}

#[test]
fn many_threads_exclusive_ownership_and_all_bits_back() {
    const DEPTH: u32 = 32;
    const ROUNDS: u32 = if cfg!(miri) { 300 } else { 50_000 };
    let sb = Sbitmap::new(DEPTH, None, false);
    let owner: Vec<AtomicBool> = (0..DEPTH).map(|_| AtomicBool::new(false)).collect();
    let gets = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let (sb, owner, gets) = (&sb, &owner, &gets);
            s.spawn(move || {
                let mut hint = AllocHint::new(t * 7);
                let mut mine = Vec::new();
                for i in 0..ROUNDS {
                    if let Some(bit) = sb.get(&mut hint) {
                        assert!(!owner[bit as usize].swap(true, Ordering::AcqRel), "bit {bit} owned twice");
                        mine.push(bit);
                        gets.fetch_add(1, Ordering::Relaxed);
                    }
                    if mine.len() > 6 || (i % 3 == 0 && !mine.is_empty()) {
                        let bit = mine.swap_remove(0);
                        owner[bit as usize].store(false, Ordering::Release);
                        sb.clear(bit, Some(&mut hint));
                    }
                }
                for bit in mine {
                    owner[bit as usize].store(false, Ordering::Release);
                    sb.clear(bit, None);
                }
            });
        }
    });
    assert!(gets.load(Ordering::Relaxed) > u64::from(ROUNDS) / 5);
    assert_eq!(sb.weight(), 0, "every bit came back");
    let mut hint = AllocHint::new(0);
    let all: Vec<u32> = std::iter::from_fn(|| sb.get(&mut hint)).collect();
    assert_eq!(all.len(), DEPTH as usize);
}

#[test]
fn waiters_under_contention_all_finish_and_wait_is_bounded() {
    // 8 threads, 4 bits: each thread takes and frees a bit 2,000 times (30
    // under Miri), sleeping when none is free. Every thread finishes (no lost wakeup, no
    // starvation to the point of hanging) and the wait queues end empty.
    let sbq = SbitmapQueue::new(4, false);
    std::thread::scope(|s| {
        for t in 0..8u32 {
            let sbq = &sbq;
            s.spawn(move || {
                let waiter = SbqWaiter::new();
                let mut hint = AllocHint::new(t);
                for _ in 0..if cfg!(miri) { 30 } else { 2_000 } {
                    let (bit, _) = sbq.get_or_wait(&mut hint, 4, &waiter, t as usize, || {});
                    std::hint::spin_loop();
                    sbq.clear(bit, Some(&mut hint));
                }
            });
        }
    });
    let snap = sbq.snapshot();
    assert_eq!(snap.busy, 0);
    assert_eq!(snap.ws_active, 0);
    assert_eq!(snap.ws_waiting, [0; 8]);
}
