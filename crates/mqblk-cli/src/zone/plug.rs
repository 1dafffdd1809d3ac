//! The order in which one write's pieces reach a zoned driver when the
//! kernel has zone write plugs (Linux 6.12 and 7.x, "block: Introduce zone
//! write plugging") and runs on one CPU with the writing task never
//! preempted by a kernel worker, as in the kernel oracle's guests (one
//! vCPU, `zone script --blkdev` SCHED_FIFO: blkdev.rs).
//!
//! The block layer cuts a write into pieces of at most max_sectors that
//! never cross a zone boundary, front first (bio_split_to_limits), and the
//! writing task submits them in that order under its plug. The first piece
//! of each sequential zone finds the zone's write plug idle and becomes a
//! request (blk_zone_plug_bio); the zone's further pieces wait in its
//! plug. The task's plug goes out when it finishes submitting, and each
//! first piece completes at once (one CPU: blk_mq_complete_request
//! completes in place), queueing its zone's work (blk_zone_wplug_bio_work)
//! on the zone write plugs' workqueue. Those works run once the task
//! sleeps on the write, each issuing one piece, whose completion queues
//! the work again behind the other zones': one piece of each zone in turn.
//! So a later zone's first piece meets zone_max_open or zone_max_active
//! while the earlier zone is still open (it fails, or implicitly closes
//! another open zone), and the zones then fill side by side. Measured on
//! Debian's 6.12 and 7.3 (docs/results/zoned-oracle-7.txt); 6.1 has no
//! zone write plugs and issues every piece in order from the task, as
//! mqblk's block layer does.
//!
//! Conventional zones have no write plug: their pieces go out with the
//! task's. The write's status is bio_chain's: the last piece (the parent
//! bio of the chain) fails with its own error; otherwise the first error
//! of the pieces in completion order stands.

use std::collections::VecDeque;

/// One piece of a write: its first sector and length, in sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub sector: u64,
    pub nr: u64,
}

/// The pieces of a write of `nr` sectors at `sector`, front first: each at
/// most `max_sectors` (already aligned to the logical block) and inside
/// one zone of `zone_sectors`.
pub fn pieces(sector: u64, nr: u64, zone_sectors: u64, max_sectors: u64) -> Vec<Piece> {
    assert!(zone_sectors > 0 && max_sectors > 0, "zone size and max_sectors must be positive");
    let mut out = Vec::new();
    let (mut at, end) = (sector, sector + nr);
    while at < end {
        let zone_end = (at / zone_sectors + 1) * zone_sectors;
        let len = (end - at).min(max_sectors).min(zone_end - at);
        out.push(Piece { sector: at, nr: len });
        at += len;
    }
    debug_assert_eq!(out.iter().map(|p| p.nr).sum::<u64>(), nr);
    out
}

/// The order (indices into `pieces`) in which the driver sees them with
/// zone write plugs on one CPU: conventional zones' pieces (below
/// `nr_conv` zones) and each sequential zone's first piece, as submitted;
/// then the zones' other pieces, one zone's next piece at a time in turn
/// (round robin, in zone order). Each first piece's completion queues its
/// zone's work; each work issues one piece, whose completion (inline: one
/// CPU, one context per queue, blk_mq_complete_request_remote) queues the
/// work again, behind the other zones' works.
pub fn plugged_order(pieces: &[Piece], zone_sectors: u64, nr_conv: u64) -> Vec<usize> {
    let zone = |i: usize| pieces[i].sector / zone_sectors;
    let mut order = Vec::with_capacity(pieces.len());
    // Each sequential zone's plugged pieces, in zone order.
    let mut plugs: VecDeque<VecDeque<usize>> = VecDeque::new();
    for i in 0..pieces.len() {
        let first_of_zone = i == 0 || zone(i - 1) != zone(i);
        if zone(i) < nr_conv || first_of_zone {
            order.push(i);
        } else if zone(i - 1) == zone(i) && plugs.back().is_some_and(|p| p.back() == Some(&(i - 1))) {
            plugs.back_mut().expect("checked").push_back(i);
        } else {
            plugs.push_back(VecDeque::from([i]));
        }
    }
    while let Some(mut plug) = plugs.pop_front() {
        order.push(plug.pop_front().expect("no empty plug is queued"));
        if !plug.is_empty() {
            plugs.push_back(plug);
        }
    }
    debug_assert_eq!(order.len(), pieces.len());
    order
}

/// Issues `pieces` (a write cut by `pieces`) through `issue` in
/// `plugged_order` and returns the write's status. A failed piece of a
/// sequential zone aborts the zone's pieces still plugged
/// (disk_zone_wplug_abort from blk_zone_write_plug_bio_endio): they never
/// reach the driver and end with EIO, and, since bio_endio runs the zone
/// write plug's end before the chain's, before the failed piece's own
/// error reaches the parent.
pub fn issue_plugged(
    pieces: &[Piece],
    zone_sectors: u64,
    nr_conv: u64,
    mut issue: impl FnMut(Piece) -> Result<(), i32>,
) -> Result<(), i32> {
    let zone = |i: usize| pieces[i].sector / zone_sectors;
    let mut done = vec![false; pieces.len()];
    let mut results = Vec::with_capacity(pieces.len());
    for i in plugged_order(pieces, zone_sectors, nr_conv) {
        if done[i] {
            continue; // aborted
        }
        done[i] = true;
        let result = issue(pieces[i]);
        if result.is_err() && zone(i) >= nr_conv {
            for j in (i + 1..pieces.len()).take_while(|&j| zone(j) == zone(i)) {
                if !done[j] {
                    done[j] = true;
                    results.push((j, Err(libc::EIO)));
                }
            }
        }
        results.push((i, result));
    }
    chained_status(&results, pieces.len() - 1)
}

/// The write's status from its pieces' results in completion order
/// (`(piece index, result)`), where piece `last` is the chain's parent.
pub fn chained_status(results: &[(usize, Result<(), i32>)], last: usize) -> Result<(), i32> {
    if let Some((_, Err(e))) = results.iter().find(|(i, _)| *i == last) {
        return Err(*e);
    }
    results.iter().find_map(|(_, r)| r.err()).map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_stop_at_max_sectors_and_zone_ends_front_first() {
        // 100 sectors before zone 1's start, 600 after: 100 | 255 255 90.
        let p = pieces(924, 700, 1024, 255);
        let want = [(924, 100), (1024, 255), (1279, 255), (1534, 90)];
        assert_eq!(p, want.map(|(sector, nr)| Piece { sector, nr }));
        assert!(pieces(0, 0, 1024, 255).is_empty());
    }

    #[test]
    fn every_zones_first_piece_goes_before_any_plugged_one() {
        // Zone 0: 3 pieces, zone 1: 3 pieces, zone 2: 1 piece.
        let p = pieces(1024 - 600, 600 + 1024 + 10, 1024, 255);
        let zones: Vec<u64> = p.iter().map(|p| p.sector / 1024).collect();
        assert_eq!(zones, [0, 0, 0, 1, 1, 1, 1, 1, 2]);
        // First pieces, then zone 0's and zone 1's in turn.
        assert_eq!(plugged_order(&p, 1024, 0), [0, 3, 8, 1, 4, 2, 5, 6, 7]);
        // A conventional zone 0 has no plug: its pieces go out in order.
        assert_eq!(plugged_order(&p, 1024, 1), [0, 1, 2, 3, 8, 4, 5, 6, 7]);
        // One zone: the order it was cut in.
        let one = pieces(0, 1000, 1024, 255);
        assert_eq!(plugged_order(&one, 1024, 0), [0, 1, 2, 3]);
    }

    #[test]
    fn a_failed_piece_aborts_its_zones_plugged_ones_before_its_error_counts() {
        // Zone 0: pieces 0-2, zone 1: pieces 3-7, zone 2: piece 8.
        let p = pieces(1024 - 600, 600 + 1024 + 10, 1024, 255);
        let mut issued = Vec::new();
        // Zone 0's first piece fails (no open zone left): its other two
        // never reach the driver, and their EIO reaches the chain first.
        let status = issue_plugged(&p, 1024, 0, |piece| {
            issued.push(piece.sector);
            if piece.sector == 424 {
                Err(libc::ETOOMANYREFS)
            } else {
                Ok(())
            }
        });
        assert_eq!(status, Err(libc::EIO));
        let want: Vec<u64> = [0, 3, 8, 4, 5, 6, 7].iter().map(|&i| p[i].sector).collect();
        assert_eq!(issued, want);
        // With no plugged piece behind it, the failed piece's own error.
        let two = pieces(1024 - 100, 200, 1024, 255);
        assert_eq!(
            issue_plugged(&two, 1024, 0, |piece| if piece.sector == 924 { Err(libc::EOVERFLOW) } else { Ok(()) }),
            Err(libc::EOVERFLOW)
        );
        // The parent's own error wins.
        assert_eq!(
            issue_plugged(&two, 1024, 0, |piece| if piece.sector == 1024 {
                Err(libc::EOVERFLOW)
            } else {
                Err(libc::EIO)
            }),
            Err(libc::EOVERFLOW)
        );
    }

    /// The zones after the last op of `script` on a null device of
    /// `spec` (conditions and write pointers of the zones not EMPTY at 0).
    fn zones_after(spec: &str, script: &str) -> Vec<(usize, String, u64)> {
        let mut t = crate::zone::DeviceTarget::open(spec).unwrap();
        let out = crate::zone::script::run_script(&mut t, script).unwrap();
        let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        let zones = last["zones"].as_array().unwrap().iter().enumerate();
        let conds = zones.map(|(i, z)| (i, z[0].as_str().unwrap().to_string(), z[1].as_u64().unwrap()));
        conds.filter(|(_, c, wp)| c != "EMPTY" || *wp != 0).collect()
    }

    #[test]
    fn a_write_into_a_zone_at_the_open_limit_closes_another_under_6_12_not_6_1() {
        // Zones of 8192 sectors, two may be open: zones 0 and 1 are. The
        // write fills zone 1 and puts 300 sectors into zone 2.
        let spec = "null:size=64,zoned=1,zone_size=4,zone_max_open=2,memory_backed=1";
        let script = "write 0 0 8\nwrite 1 0 8\nwrite 1 8 8484\n";
        let z = |i, c: &str, wp| (i, c.to_string(), wp);
        // 6.12 (and 7): zone 2's first piece comes while zone 1 is still
        // open, so null_blk closes zone 0 (round robin from the first).
        let plugged = [z(0, "CLOSED", 8), z(1, "FULL", 8192), z(2, "IMP_OPEN", 300)];
        assert_eq!(zones_after(spec, script), plugged);
        assert_eq!(zones_after(&format!("{spec},zoned_compat=7"), script), plugged);
        // 6.1: zone 1 fills first and frees its open slot.
        let in_order = [z(0, "IMP_OPEN", 8), z(1, "FULL", 8192), z(2, "IMP_OPEN", 300)];
        assert_eq!(zones_after(&format!("{spec},zoned_compat=6.1"), script), in_order);
    }

    #[test]
    fn the_parents_error_wins_else_the_first_to_complete() {
        let (eio, eov, many) = (libc::EIO, libc::EOVERFLOW, libc::ETOOMANYREFS);
        assert_eq!(chained_status(&[(0, Ok(())), (2, Ok(())), (1, Ok(()))], 2), Ok(()));
        assert_eq!(chained_status(&[(0, Ok(())), (2, Err(eov)), (1, Err(eio))], 2), Err(eov));
        assert_eq!(chained_status(&[(0, Err(many)), (2, Ok(())), (1, Err(eio))], 2), Err(many));
        assert_eq!(chained_status(&[(0, Err(many)), (1, Ok(())), (2, Err(eio))], 2), Err(eio));
    }
}
