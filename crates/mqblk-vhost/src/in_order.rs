//! The used ring in avail order: an answer is held until every chain
//! popped before it is answered, so the used index always counts a prefix
//! of the avail ring.
//!
//! Why: a server that dies (SIGKILL, a crash) cannot tell QEMU where its
//! rings stand. QEMU's vhost-user-blk then restarts the next server at
//! `last_avail_idx = used_idx`, read from the guest's used ring
//! (virtio_queue_restore_last_avail_idx, after "ring restore failed").
//! That is exact only if the chains before the used index are the ones
//! answered: the new server then re-runs exactly the requests that were in
//! flight. Answered out of order, the chains after the used index that
//! were answered would be answered a second time (their heads perhaps
//! reused by the guest meanwhile), and those before it that were not would
//! never be. With the answers in order, the server needs none of
//! vhost-user's in-flight tracking (VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD)
//! for QEMU's reconnect to lose nothing.
//!
//! The window is one ring: a chain is popped only while fewer than a
//! ring's worth are popped and not yet in the used ring (`has_room`).
//! Entries are placed by their distance from the next used position, so
//! any ring size works and the u16 indices may wrap.
//!
//! Also here, the checks of a ring's indices and size that stop a queue
//! (`start_ring`, `unreadable_avail`, `check_size`).
//!
//! Relies on: virtio-queue's `Queue` (its positions, and the guest's used
//! index when a ring starts); `add_used` is the caller's.

use std::io;
use std::sync::atomic::Ordering;

use virtio_queue::{Queue, QueueT};
use vm_memory::GuestMemory;

/// Answers held until their turn in the used ring.
#[derive(Debug, Default)]
pub struct InOrderUsed {
    /// (descriptor head, used length) by distance from `next_used`,
    /// `start` being that position's entry.
    held: Vec<Option<(u16, u32)>>,
    start: usize,
    /// The used ring's next position (virtio-queue's `next_used`).
    next_used: u16,
    /// How many entries of `held` are Some.
    count: usize,
}

impl InOrderUsed {
    /// Follows the ring as it is now, a ring of `size` chains whose next
    /// used position is `next_used`; called before popping. Both change
    /// only while the ring is stopped, when nothing is held; answers held
    /// across such a change cannot be put in the new ring and are dropped
    /// (a frontend that re-based or resized a ring without stopping it).
    pub fn sync(&mut self, size: u16, next_used: u16) {
        if self.held.len() == usize::from(size) && self.next_used == next_used {
            return;
        }
        if self.count > 0 {
            log::warn!(
                "ring changed under {} held answers (size {} to {size}, next used {} to {next_used}): dropped",
                self.count,
                self.held.len(),
                self.next_used
            );
        }
        if self.held.len() != usize::from(size) {
            self.held = vec![None; usize::from(size)];
        }
        self.clear();
        self.next_used = next_used;
    }

    /// Whether the chain at avail position `next_avail` may be popped:
    /// fewer than a ring of chains popped and not yet in the used ring.
    pub fn has_room(&self, next_avail: u16) -> bool {
        usize::from(next_avail.wrapping_sub(self.next_used)) < self.held.len()
    }

    /// Holds the answer to the chain popped at avail position `pos`.
    pub fn hold(&mut self, pos: u16, head: u16, used_len: u32) {
        let distance = usize::from(pos.wrapping_sub(self.next_used));
        assert!(distance < self.held.len(), "chain at {pos} popped outside the window from {}", self.next_used);
        let at = (self.start + distance) % self.held.len();
        let entry = &mut self.held[at];
        assert!(entry.is_none(), "two answers for avail position {pos}");
        *entry = Some((head, used_len));
        self.count += 1;
    }

    /// Puts the answers whose turn has come in the used ring, in order,
    /// through `add_used`; returns how many it took, or its first error.
    /// An answer `add_used` refuses (a head past the descriptor table: the
    /// guest broke its ring) is dropped, not held: held, it would keep
    /// every later answer out of the used ring.
    pub fn publish<E>(&mut self, mut add_used: impl FnMut(u16, u32) -> Result<(), E>) -> Result<usize, E> {
        let (mut published, mut failed) = (0, None);
        while let Some(&Some((head, used_len))) = self.held.get(self.start) {
            match add_used(head, used_len) {
                Ok(()) => published += 1,
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
            self.held[self.start] = None;
            self.start = (self.start + 1) % self.held.len();
            self.next_used = self.next_used.wrapping_add(1);
            self.count -= 1;
        }
        failed.map_or(Ok(published), Err)
    }

    /// Answers held, waiting for an earlier one.
    pub fn held(&self) -> usize {
        self.count
    }

    /// Drops every held answer (the connection is gone).
    pub fn clear(&mut self) {
        self.held.iter_mut().for_each(|e| *e = None);
        self.start = 0;
        self.count = 0;
    }
}

/// Readies a ring that (re)started, before its first pop: the in-order
/// window begins at the guest's used index, which vhost-user-backend made the next used position at
/// SET_VRING_ADDR (as libvhost-user does); set again here, so the
/// window does not depend on that. The next avail position
/// (SET_VRING_BASE) may not be past it: the chains between were popped
/// by an earlier server and never answered, and the window would wait
/// for their answers forever, so they are popped again. (QEMU restarts
/// the rings of a server that died at the used index itself:
/// virtio_queue_restore_last_avail_idx.) More than a ring past it is a
/// broken frontend: an error, which ends the queue's worker.
pub fn start_ring<M: GuestMemory>(index: u16, queue: &mut Queue, mem: &M) -> io::Result<()> {
    let used_idx = queue.used_idx(mem, Ordering::Acquire).map_err(io::Error::other)?.0;
    let next_avail = queue.next_avail();
    let ahead = next_avail.wrapping_sub(used_idx);
    if ahead > queue.size() {
        return Err(io::Error::other(format!(
            "queue {index}: starts at avail {next_avail}, more than a ring ({}) past the used index {used_idx}",
            queue.size()
        )));
    }
    if ahead > 0 {
        // Popped by an earlier server and never answered: run again.
        log::warn!("queue {index}: {ahead} chains before avail {next_avail} have no answer: popped again");
        queue.set_next_avail(used_idx);
    }
    queue.set_next_used(used_idx);
    Ok(())
}

/// The error for an avail index that moved while no chain could be popped:
/// it is more than a ring ahead of ours (a driver never has more chains
/// than the ring), or the avail ring's entries are outside guest memory.
pub fn unreadable_avail<M: GuestMemory>(index: u16, queue: &Queue, mem: &M) -> io::Error {
    let next = queue.next_avail();
    match queue.avail_idx(mem, Ordering::Acquire) {
        Ok(avail) if (avail - std::num::Wrapping(next)).0 > queue.size() => io::Error::other(format!(
            "queue {index}: avail index {} is more than a ring ({}) ahead of {next}",
            avail.0,
            queue.size()
        )),
        _ => io::Error::other(format!("queue {index}: avail index moved past {next} but no chain could be read")),
    }
}

/// Checks the ring's size against the one the frontend asked (vring.rs
/// `asked_size`): virtio-queue keeps its old size when the asked one is
/// not a power of two, and the guest's rings are not that size.
pub fn check_size(index: u16, asked: Option<u16>, queue: &Queue) -> io::Result<()> {
    match asked {
        Some(asked) if asked != queue.size() => Err(io::Error::other(format!(
            "queue {index}: the frontend set a ring of {asked} entries, not a power of two (virtio 1.2, 2.7)"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Publishes into a Vec, as a used ring would take them.
    fn publish_all(order: &mut InOrderUsed, used: &mut Vec<(u16, u32)>) -> usize {
        order
            .publish(|head, len| {
                used.push((head, len));
                Ok::<_, ()>(())
            })
            .unwrap()
    }

    #[test]
    fn an_answer_waits_for_every_earlier_chain() {
        let mut order = InOrderUsed::default();
        order.sync(4, 10);
        let mut used = Vec::new();
        // Chains at avail positions 10, 11, 12 (heads 7, 3, 9); the used
        // ring's next position is 10. 12 and 11 complete first.
        order.hold(12, 9, 100);
        order.hold(11, 3, 200);
        assert_eq!(publish_all(&mut order, &mut used), 0);
        assert_eq!(order.held(), 2);
        order.hold(10, 7, 300);
        assert_eq!(publish_all(&mut order, &mut used), 3);
        assert_eq!(used, [(7, 300), (3, 200), (9, 100)], "in avail order");
        assert_eq!(order.held(), 0);
    }

    #[test]
    fn positions_wrap_past_u16() {
        let mut order = InOrderUsed::default();
        let mut next_used = 65_530u16;
        order.sync(8, next_used);
        let mut used = Vec::new();
        for round in 0..5u16 {
            // Six chains, answered last first.
            order.sync(8, next_used);
            for k in (0..6u16).rev() {
                order.hold(next_used.wrapping_add(k), round * 10 + k, u32::from(k));
            }
            next_used = next_used.wrapping_add(publish_all(&mut order, &mut used) as u16);
        }
        let want: Vec<(u16, u32)> =
            (0..5u16).flat_map(|r| (0..6u16).map(move |k| (r * 10 + k, u32::from(k)))).collect();
        assert_eq!(used, want);
        assert_eq!(next_used, 65_530u16.wrapping_add(30));
    }

    #[test]
    fn room_is_one_ring_from_the_used_position() {
        let mut order = InOrderUsed::default();
        assert!(!order.has_room(0), "no ring yet");
        order.sync(4, 65_535);
        assert!(order.has_room(65_535));
        assert!(order.has_room(2), "3 popped, not answered");
        assert!(!order.has_room(3), "4 popped: a ring");
    }

    #[test]
    #[should_panic(expected = "two answers for avail position 5")]
    fn a_position_answered_twice_is_a_bug() {
        let mut order = InOrderUsed::default();
        order.sync(4, 4);
        order.hold(5, 1, 1);
        order.hold(5, 2, 1);
    }

    #[test]
    fn an_answer_the_ring_refuses_is_dropped_and_the_rest_published() {
        let mut order = InOrderUsed::default();
        order.sync(4, 0);
        order.hold(0, 1, 10);
        order.hold(1, 200, 20);
        order.hold(2, 3, 30);
        let mut used = Vec::new();
        let r = order.publish(|head, len| {
            if head == 200 {
                return Err("head 200 past the table");
            }
            used.push((head, len));
            Ok(())
        });
        assert_eq!(r, Err("head 200 past the table"));
        assert_eq!(used, [(1, 10), (3, 30)]);
        assert_eq!(order.held(), 0);
        order.hold(3, 4, 40);
        assert_eq!(publish_all(&mut order, &mut used), 1, "the window moved past the dropped one");
    }

    #[test]
    fn a_size_the_ring_did_not_take_stops_it() {
        let mut queue = Queue::new(16).unwrap();
        assert!(check_size(0, None, &queue).is_ok(), "no size asked yet");
        queue.set_size(12);
        assert_eq!(queue.size(), 16, "virtio-queue keeps its size");
        let e = check_size(3, Some(12), &queue).unwrap_err();
        assert!(e.to_string().contains("queue 3: the frontend set a ring of 12 entries, not a power of two"), "{e}");
        queue.set_size(8);
        assert!(check_size(3, Some(8), &queue).is_ok());
    }

    #[test]
    fn a_ring_changed_under_held_answers_drops_them() {
        let mut order = InOrderUsed::default();
        order.sync(4, 0);
        order.hold(1, 1, 1);
        order.sync(4, 0);
        assert_eq!(order.held(), 1, "the same ring keeps them");
        order.sync(8, 0);
        assert_eq!(order.held(), 0, "resized");
        order.hold(1, 1, 1);
        order.sync(8, 3);
        assert_eq!(order.held(), 0, "re-based");
        assert!(order.has_room(10) && !order.has_room(11));
    }
}
