//! The verifier's map: which write each block should hold.

use super::super::options::JobOptions;
use super::state::VerifyState;
use super::*;

fn verifier(args: &[(&str, &str)]) -> Verifier {
    let mut opts = JobOptions::defaults("t");
    for (k, v) in [("rw", "randwrite"), ("verify", "crc32c"), ("iodepth", "4")].iter().chain(args) {
        opts.set(k, Some(v)).unwrap();
    }
    let r = resolve(&opts).unwrap().expect("verifies");
    Verifier::new(&opts, r, ((1 << 20, 64 << 10), 4), 0, "null").unwrap()
}

/// Fills the write of `offset` in `slot`; its sequence number.
fn write(v: &mut Verifier, slot: usize, offset: u64) -> u64 {
    let mut buf = vec![0u8; 4096];
    v.fill(&mut buf, offset, slot);
    v.slot_seq[slot]
}

#[test]
fn the_newest_write_wins_whatever_order_writes_complete_in() {
    let mut v = verifier(&[]);
    let (older, newer) = (write(&mut v, 0, 1 << 20), write(&mut v, 1, 1 << 20));
    v.written(1, 1 << 20, true);
    v.written(0, 1 << 20, true);
    assert_eq!((older, newer), (1, 2));
    assert_eq!(v.blocks[0], 2, "the newer write's sequence number stays");
}

#[test]
fn a_failed_write_leaves_its_block_unknown_and_is_kept_for_the_state_file() {
    let mut v = verifier(&[]);
    write(&mut v, 0, (1 << 20) + 4096);
    v.written(0, (1 << 20) + 4096, true);
    write(&mut v, 1, (1 << 20) + 4096);
    v.written(1, (1 << 20) + 4096, false);
    assert_eq!(v.blocks[1], 0, "neither write can be expected there");
    assert_eq!(v.incomplete, [2]);
}

#[test]
fn a_backlog_check_is_due_every_n_blocks_written() {
    let mut v = verifier(&[("verify_backlog", "3")]);
    let due: Vec<bool> = (0..6u64)
        .map(|i| {
            write(&mut v, 0, (1 << 20) + i * 4096);
            v.written(0, (1 << 20) + i * 4096, true)
        })
        .collect();
    assert_eq!(due, [false, false, true, true, true, true], "due from the third on, until checked");
    assert_eq!(v.backlog.as_ref().unwrap().ring.len(), 6);
}

#[test]
fn a_dry_run_replays_the_writes_a_loaded_state_says_completed() {
    let opts = {
        let mut o = JobOptions::defaults("t");
        o.set("rw", Some("write")).unwrap();
        o
    };
    let mut pattern = Pattern::new(&opts, (1 << 30, 512), 0, 1 << 20, 64 << 10).unwrap();
    let mut v = verifier(&[]);
    v.loaded = Some(VerifyState { name: "t".into(), index: 0, issued: 5, incomplete: vec![2] });
    v.replay_writes(&mut pattern, (4096, 4096), (u64::MAX, u64::MAX));
    assert_eq!(&v.blocks[..7], &[1, 0, 3, 4, 5, 0, 0], "write 2 did not complete, the run stopped after 5");
}
