//! The used ring in avail order, served end to end: answers wait for
//! earlier chains, the window of a ring, and rings restarted after a
//! server died (in_order.rs through queue.rs).

use super::*;

#[test]
fn answers_reach_the_used_ring_in_avail_order() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x80_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let (dev, driver) = recording(128, true);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(64), 4, disk(&dev, false), "x").unwrap();
    let vring = vring(&mem, &q);
    // Two reads the device holds (heads 0 and 3), then a request of an
    // unknown type (head 6), answered UNSUPP at once.
    let mut descs = Vec::new();
    for i in 0..2u16 {
        let at = BUF + u64::from(i) * 0x10_0000;
        // Sectors 0 and 16: apart, so the two reads do not merge.
        descs.extend(read_chain(&mem, i * 3, at, u64::from(i) * 16, &[(at + 0x1000, 4096)], at + 0x3000));
    }
    descs.extend(chain(&mem, 6, BUF + 0x20_0000, 77, 0, 512));
    q.add_desc_chains(&descs, 0).unwrap();
    let mem = shared(&mem);

    vq.run(&vring, &mem).unwrap();
    assert_eq!((driver.held.lock().unwrap().len(), q.used().idx().load()), (2, 0), "the refusal waits for the reads");
    assert_eq!(status_at(&mem, BUF + 0x20_0000 + 0x1000 + 512), VIRTIO_BLK_S_UNSUPP as u8, "its status is written");

    driver.held.lock().unwrap().remove(1).complete(Status::Ok);
    vq.run(&vring, &mem).unwrap();
    assert_eq!(q.used().idx().load(), 0, "the second read waits for the first");
    assert_eq!(status_at(&mem, BUF + 0x10_0000 + 0x3000), VIRTIO_BLK_S_OK as u8);

    driver.held.lock().unwrap().remove(0).complete(Status::Ok);
    vq.run(&vring, &mem).unwrap();
    assert_eq!(q.used().idx().load(), 3);
    assert_eq!([used(&q, 0), used(&q, 1), used(&q, 2)], [(0, 4097), (3, 4097), (6, 1)], "in avail order");
}

#[test]
fn a_chain_offered_over_and_over_is_held_a_ring_at_a_time() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    // Rings laid out here: the mock's avail ring overlaps its used ring
    // past its first entries.
    let (desc_table, avail, used_ring) = (GuestAddress(0), GuestAddress(0x1000), GuestAddress(0x2000));
    let (dev, driver) = recording(128, true);
    // More slots than the ring has entries: the in-order window, not the
    // slots, bounds what waits for the used ring.
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(64), 2 * QUEUE_SIZE, disk(&dev, false), "x").unwrap();
    let vring = vring_at(&mem, desc_table, avail, used_ring);
    // One read chain at head 0, named by every avail entry (a guest that
    // reuses a chain it was not given back).
    for (i, d) in read_chain(&mem, 0, BUF, 0, &[(BUF + 0x1000, 512)], BUF + 0x2000).iter().enumerate() {
        mem.write_obj(*d, GuestAddress(desc_table.0 + 16 * i as u64)).unwrap();
    }
    let set_avail_idx = |idx: u16| mem.write_obj(idx, GuestAddress(avail.0 + 2)).unwrap();
    set_avail_idx(QUEUE_SIZE);
    let used_idx = || mem.read_obj::<u16>(GuestAddress(used_ring.0 + 2)).unwrap();
    let mem = shared(&mem);
    vq.run(&vring, &mem).unwrap();
    assert_eq!(driver.held.lock().unwrap().len(), usize::from(QUEUE_SIZE));

    // Four more: more than a ring from the used index, so not popped yet.
    set_avail_idx(QUEUE_SIZE + 4);
    vq.run(&vring, &mem).unwrap();
    assert_eq!(driver.held.lock().unwrap().len(), usize::from(QUEUE_SIZE));
    assert_eq!(vq.stats().requests, u64::from(QUEUE_SIZE));

    // The ring answered: the four are popped.
    for rq in driver.held.lock().unwrap().drain(..) {
        rq.complete(Status::Ok);
    }
    vq.run(&vring, &mem).unwrap();
    assert_eq!(used_idx(), QUEUE_SIZE);
    assert_eq!((driver.held.lock().unwrap().len(), vq.stats().requests), (4, u64::from(QUEUE_SIZE) + 4));
    for rq in driver.held.lock().unwrap().drain(..) {
        rq.complete(Status::Ok);
    }
    vq.finish_in_flight(&mem).unwrap();
    assert_eq!(used_idx(), QUEUE_SIZE + 4);
}

/// Where `restarted_ring` puts the used ring.
const RESTARTED_USED: u64 = 0x2000;

/// The used index of the ring `restarted_ring` laid out.
fn restarted_used_idx(mem: &Mem) -> u16 {
    mem.read_obj::<u16>(GuestAddress(RESTARTED_USED + 2)).unwrap()
}

/// Rings laid out at fixed addresses, as a guest whose used index is
/// `used_idx` left them: read chains at heads 0 and 3 in avail positions
/// `used_idx` and `used_idx + 1`, the avail index past both; the vring's
/// next avail position is `base` (SET_VRING_BASE); a queue of 4 slots
/// over a memory-backed null device to serve them.
fn restarted_ring(used_idx: u16, base: u16) -> (Mem, Vring, VirtQueue) {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let (desc_table, avail, used) = (GuestAddress(0), GuestAddress(0x1000), GuestAddress(RESTARTED_USED));
    for (n, first) in [(0u16, 0u16), (1, 3)] {
        let at = BUF + u64::from(n) * 0x1_0000;
        let descs = read_chain(&mem, first, at, u64::from(n) * 16, &[(at + 0x1000, 4096)], at + 0x3000);
        for (i, d) in descs.iter().enumerate() {
            mem.write_obj(*d, GuestAddress(desc_table.0 + 16 * u64::from(first + i as u16))).unwrap();
        }
        let pos = used_idx.wrapping_add(n);
        mem.write_obj(first, GuestAddress(avail.0 + 4 + 2 * u64::from(pos % QUEUE_SIZE))).unwrap();
    }
    mem.write_obj(used_idx.wrapping_add(2), GuestAddress(avail.0 + 2)).unwrap();
    mem.write_obj(used_idx, GuestAddress(used.0 + 2)).unwrap();
    let vring = vring_at(&mem, desc_table, avail, used);
    vring.set_queue_next_avail(base);
    let dev = device();
    let vq = VirtQueue::new(0, dev.client_with_capacity(8), 4, disk(&dev, false), "x").unwrap();
    (mem, vring, vq)
}

#[test]
fn a_server_started_after_another_died_answers_from_the_guests_used_index() {
    // QEMU restarts the rings at the used index (the requests in flight
    // at the death are the chains from there on). The vring here starts
    // with its next used position at 0, as vhost-user-backend leaves it
    // before SET_VRING_ADDR: the queue takes the guest's.
    let (mem, vring, mut vq) = restarted_ring(40_000, 40_000);
    vq.run(&vring, &shared(&mem)).unwrap();
    assert_eq!(restarted_used_idx(&mem), 40_002, "both answered after the guest's own answers");
    let entry = |pos: u16| {
        let at = RESTARTED_USED + 4 + 8 * u64::from(pos % QUEUE_SIZE);
        (mem.read_obj::<u32>(GuestAddress(at)).unwrap(), mem.read_obj::<u32>(GuestAddress(at + 4)).unwrap())
    };
    assert_eq!([entry(40_000), entry(40_001)], [(0, 4097), (3, 4097)]);
    assert_eq!(vq.stats().requests, 2);
}

#[test]
fn chains_popped_before_a_restart_without_an_answer_are_popped_again() {
    // The base is past the used index: the two chains were popped by the
    // server before and never answered.
    let (mem, vring, mut vq) = restarted_ring(7, 9);
    vq.run(&vring, &shared(&mem)).unwrap();
    assert_eq!((restarted_used_idx(&mem), vq.stats().requests), (9, 2));
}

#[test]
fn a_base_more_than_a_ring_past_the_used_index_is_an_error() {
    let (mem, vring, mut vq) = restarted_ring(7, 7 + QUEUE_SIZE + 1);
    let e = vq.run(&vring, &shared(&mem)).unwrap_err();
    assert!(e.to_string().contains("more than a ring (16) past the used index 7"), "{e}");
    assert_eq!((restarted_used_idx(&mem), vq.stats().requests), (7, 0));
}
