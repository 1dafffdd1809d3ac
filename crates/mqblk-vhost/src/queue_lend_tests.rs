//! A request's data segments lent as one bio, served end to end: the
//! guest's own memory in one vectored bio, split by the device's limits
//! and answered once, the slot's vector kept, and the copy path where
//! segments cannot be lent (slot.rs through queue.rs).

use super::*;

/// The host addresses of guest `segments`, as a driver sees them.
fn host(mem: &Mem, segments: &[(u64, u32)]) -> Vec<(usize, usize)> {
    segments
        .iter()
        .map(|&(addr, len)| (mem.get_host_address(GuestAddress(addr)).unwrap() as usize, len as usize))
        .collect()
}

/// What `Recording` leaves in a read segment at guest `addr` of `len`
/// bytes that starts at disk byte `pos`.
fn assert_filled(mem: &Mem, addr: u64, len: usize, pos: u64) {
    let mut got = vec![0u8; len];
    mem.read_slice(&mut got, GuestAddress(addr)).unwrap();
    let want: Vec<u8> = (0..len as u64).map(|i| (pos + i) as u8).collect();
    assert_eq!(got, want, "the segment at {addr:#x} holds its disk bytes from {pos}");
}

#[test]
fn read_segments_are_lent_as_one_bio_without_a_copy() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let (dev, driver) = recording(128, false);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk(&dev, false), "x").unwrap();
    let vring = vring(&mem, &q);
    // Three scattered pages of the guest, read from disk byte 4096.
    let segments = [(BUF + 0x3000, 4096), (BUF + 0x1000, 4096), (BUF + 0x8000, 4096)];
    q.add_desc_chains(&read_chain(&mem, 0, BUF, 8, &segments, BUF + 0x9000), 0).unwrap();

    vq.run(&vring, &shared(&mem)).unwrap();

    let seen = driver.seen.lock().unwrap().clone();
    assert_eq!(seen, [host(&mem, &segments)], "one request whose segments are the guest's own pages");
    let stats = dev.stats();
    assert_eq!((stats.bios.read, stats.requests.read, stats.merges.read), (1, 1, 0), "one bio, one request");
    assert_eq!((vq.stats().lent, vq.stats().lent_segments, vq.stats().bounced), (1, 3, 0));
    for (n, &(addr, len)) in segments.iter().enumerate() {
        assert_filled(&mem, addr, len as usize, 4096 + n as u64 * 4096);
    }
    assert_eq!((q.used().idx().load(), used(&q, 0)), (1, (0, 3 * 4096 + 1)));
    assert_eq!(status_at(&mem, BUF + 0x9000), VIRTIO_BLK_S_OK as u8);
}

#[test]
fn a_vectored_write_reads_back_through_other_segments() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let dev = device();
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk(&dev, false), "x").unwrap();
    let vring = vring(&mem, &q);
    let payload: Vec<u8> = (0..3 * 4096u32).map(|i| (i * 13 % 253) as u8).collect();
    let written = [(BUF + 0x5000, 4096), (BUF + 0x1000, 8192)];
    mem.write_slice(&payload[..4096], GuestAddress(BUF + 0x5000)).unwrap();
    mem.write_slice(&payload[4096..], GuestAddress(BUF + 0x1000)).unwrap();
    let read = [(BUF + 0x2_0000, 8192), (BUF + 0x1_0000, 2048), (BUF + 0x1_8000, 2048)];
    let mut descs = data_chain(&mem, 0, BUF, VIRTIO_BLK_T_OUT, 24, &written, BUF + 0x9000);
    descs.extend(read_chain(&mem, 4, BUF + 0xa000, 24, &read, BUF + 0xb000));
    q.add_desc_chains(&descs, 0).unwrap();

    vq.run(&vring, &shared(&mem)).unwrap();

    assert_eq!(q.used().idx().load(), 2);
    assert_eq!([used(&q, 0), used(&q, 1)], [(0, 1), (4, 3 * 4096 + 1)]);
    let mut back = Vec::new();
    for &(addr, len) in &read {
        let mut part = vec![0u8; len as usize];
        mem.read_slice(&mut part, GuestAddress(addr)).unwrap();
        back.extend(part);
    }
    assert_eq!(back, payload, "the read's three segments hold what the write's two stored");
    assert_eq!((vq.stats().lent, vq.stats().lent_segments, vq.stats().bounced), (2, 5, 0));
    assert_eq!(dev.stats().bios.read + dev.stats().bios.write, 2, "a bio per request");
}

#[test]
fn the_slots_vector_comes_back_for_the_next_request() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let (dev, driver) = recording(128, false);
    // One slot: the second request reuses the first one's vector.
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(1), 1, disk(&dev, false), "x").unwrap();
    let vring = vring(&mem, &q);
    let first = [(BUF + 0x1000, 4096), (BUF + 0x3000, 4096)];
    let second = [(BUF + 0x2_1000, 4096), (BUF + 0x2_3000, 4096), (BUF + 0x2_5000, 4096)];
    let mut descs = read_chain(&mem, 0, BUF, 0, &first, BUF + 0x9000);
    descs.extend(read_chain(&mem, 4, BUF + 0x2_0000, 64, &second, BUF + 0x2_9000));
    q.add_desc_chains(&descs, 0).unwrap();

    vq.run(&vring, &shared(&mem)).unwrap();

    assert_eq!(driver.seen.lock().unwrap().clone(), [host(&mem, &first), host(&mem, &second)]);
    assert_eq!((vq.stats().lent, vq.stats().bounced), (2, 0), "both lent");
    assert_eq!(q.used().idx().load(), 2);
}

#[test]
fn segments_not_of_whole_blocks_take_the_copy_path() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let (dev, driver) = recording(128, false);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk(&dev, false), "x").unwrap();
    let vring = vring(&mem, &q);
    // 1000 + 3096 bytes: a whole number of blocks, but neither segment is.
    let segments = [(BUF + 0x1000, 1000), (BUF + 0x3000, 3096)];
    q.add_desc_chains(&read_chain(&mem, 0, BUF, 0, &segments, BUF + 0x9000), 0).unwrap();

    vq.run(&vring, &shared(&mem)).unwrap();

    let seen = driver.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].len(), 1, "one bounce buffer");
    assert!(!host(&mem, &segments).contains(&seen[0][0]), "not the guest's memory");
    assert_filled(&mem, BUF + 0x1000, 1000, 0);
    assert_filled(&mem, BUF + 0x3000, 3096, 1000);
    assert_eq!((q.used().idx().load(), used(&q, 0)), (1, (0, 4097)));
    assert_eq!((vq.stats().lent, vq.stats().bounced), (0, 1));
}

#[test]
fn more_segments_than_seg_max_take_the_copy_path() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let (dev, driver) = recording(128, false);
    let mut disk = disk(&dev, false);
    disk.seg_max = 2;
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk, "x").unwrap();
    let vring = vring(&mem, &q);
    // Three data segments within seg_max + 2 descriptors: the status byte
    // rides at the end of the third (virtio's framing is free), so a bio
    // of the slot's two segments cannot hold them.
    let mut descs = read_chain(&mem, 0, BUF, 8, &[(BUF + 0x1000, 4096), (BUF + 0x3000, 4096)], BUF + 0x9000);
    descs[3] = RawDescriptor::from(SplitDescriptor::new(BUF + 0x5000, 4097, VRING_DESC_F_WRITE as u16, 0));
    q.add_desc_chains(&descs, 0).unwrap();

    vq.run(&vring, &shared(&mem)).unwrap();

    assert_eq!(driver.seen.lock().unwrap()[0].len(), 1, "one bounce buffer");
    for (n, addr) in [BUF + 0x1000, BUF + 0x3000, BUF + 0x5000].into_iter().enumerate() {
        assert_filled(&mem, addr, 4096, 4096 + n as u64 * 4096);
    }
    assert_eq!(status_at(&mem, BUF + 0x5000 + 4096), VIRTIO_BLK_S_OK as u8);
    assert_eq!((q.used().idx().load(), used(&q, 0)), (1, (0, 3 * 4096 + 1)));
    assert_eq!((vq.stats().lent, vq.stats().bounced), (0, 1));
}

#[test]
fn a_segment_across_two_memory_regions_takes_the_copy_path() {
    // Two regions back to back, mapped apart: one host pointer cannot
    // cover a segment that runs from one into the other.
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x20_0000), (GuestAddress(0x20_0000), 0x20_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let (dev, driver) = recording(128, false);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk(&dev, false), "x").unwrap();
    let vring = vring(&mem, &q);
    // The second segment crosses; then a request that can be lent.
    let crossing = [(BUF + 0x1000, 4096), (0x20_0000 - 2048, 4096)];
    let plain = [(BUF + 0x2_1000, 4096), (BUF + 0x2_3000, 4096)];
    let mut descs = read_chain(&mem, 0, BUF, 0, &crossing, BUF + 0x9000);
    descs.extend(read_chain(&mem, 4, BUF + 0x2_0000, 64, &plain, BUF + 0x2_9000));
    q.add_desc_chains(&descs, 0).unwrap();

    vq.run(&vring, &shared(&mem)).unwrap();

    let seen = driver.seen.lock().unwrap().clone();
    assert_eq!((seen.len(), seen[0].len()), (2, 1), "the crossing request bounced");
    assert_eq!(seen[1], host(&mem, &plain), "the next one lent, its slot's vector intact");
    assert_filled(&mem, BUF + 0x1000, 4096, 0);
    assert_filled(&mem, 0x20_0000 - 2048, 4096, 4096);
    assert_eq!((q.used().idx().load(), used(&q, 0), used(&q, 1)), (2, (0, 8193), (4, 8193)));
    assert_eq!((vq.stats().lent, vq.stats().bounced), (1, 1));
}

/// A read of four 4 KiB segments, its status byte at BUF + 0x9000 set to
/// 0xff, offered to a device that takes 2 segments a request and holds
/// every request until the test completes it (`Recording::held`); `check`
/// drives the queue.
fn four_segment_read_held(check: impl FnOnce(&MockSplitQueue<Mem>, &mut VirtQueue, &Vring, &Arc<Mem>, &Recording)) {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    // The device takes 2 segments a request; the guest is offered 4.
    let (dev, driver) = recording(2, true);
    let mut disk = disk(&dev, false);
    disk.seg_max = 4;
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk, "x").unwrap();
    let vring = vring(&mem, &q);
    let segments = [(BUF + 0x1000, 4096), (BUF + 0x2000, 4096), (BUF + 0x5000, 4096), (BUF + 0x7000, 4096)];
    mem.write_obj(0xffu8, GuestAddress(BUF + 0x9000)).unwrap();
    q.add_desc_chains(&read_chain(&mem, 0, BUF, 0, &segments, BUF + 0x9000), 0).unwrap();
    let mem = shared(&mem);
    check(&q, &mut vq, &vring, &mem, &driver);
}

#[test]
fn a_read_split_over_two_requests_completes_once_after_both() {
    four_segment_read_held(|q, vq, vring, mem, driver| {
        vq.run(vring, mem).unwrap();
        // The first two pages are contiguous: one physical segment, so the
        // first request takes three of the bio's four segments.
        let seen = driver.seen.lock().unwrap().clone();
        assert_eq!(seen.iter().map(Vec::len).collect::<Vec<_>>(), [3, 1], "one bio split in two requests");
        assert_eq!(vq.in_flight(), 1, "one bio");

        driver.held.lock().unwrap().remove(0).complete(Status::Ok);
        vq.run(vring, mem).unwrap();
        assert_eq!(q.used().idx().load(), 0, "not answered while a piece is in flight");
        assert_eq!(status_at(mem, BUF + 0x9000), 0xff);

        driver.held.lock().unwrap().remove(0).complete(Status::Ok);
        vq.run(vring, mem).unwrap();
        assert_eq!((q.used().idx().load(), used(q, 0)), (1, (0, 4 * 4096 + 1)), "answered once");
        assert_eq!(status_at(mem, BUF + 0x9000), VIRTIO_BLK_S_OK as u8);
        assert_eq!(vq.in_flight(), 0);
    });
}

#[test]
fn a_failed_piece_fails_the_whole_request() {
    four_segment_read_held(|q, vq, vring, mem, driver| {
        vq.run(vring, mem).unwrap();
        driver.held.lock().unwrap().remove(0).complete(Status::IoErr);
        driver.held.lock().unwrap().remove(0).complete(Status::Ok);
        vq.run(vring, mem).unwrap();

        assert_eq!((q.used().idx().load(), used(q, 0)), (1, (0, 1)), "no data bytes, the status");
        assert_eq!(status_at(mem, BUF + 0x9000), VIRTIO_BLK_S_IOERR as u8);
        assert_eq!(vq.stats().errors, 1);
    });
}

#[test]
fn abandoned_requests_give_their_vectors_back() {
    four_segment_read_held(|q, vq, vring, mem, driver| {
        vq.run(vring, mem).unwrap();
        // The guest is gone: the queue waits for the device's two pieces,
        // which another thread completes, and answers nothing.
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..2 {
                    let rq = loop {
                        if let Some(rq) = driver.held.lock().unwrap().pop() {
                            break rq;
                        }
                        std::thread::yield_now();
                    };
                    rq.complete(Status::Ok);
                }
            });
            vq.abandon_in_flight();
        });
        assert_eq!((vq.in_flight(), q.used().idx().load()), (0, 0));

        // A new connection serves the same chain again (the used index is
        // where it was): lent once more, its slot's vector back.
        vq.run(vring, mem).unwrap();
        assert_eq!((vq.stats().lent, vq.stats().bounced), (2, 0));
        for rq in driver.held.lock().unwrap().drain(..) {
            rq.complete(Status::Ok);
        }
        vq.finish_in_flight(mem).unwrap();
        assert_eq!((q.used().idx().load(), used(q, 0)), (1, (0, 4 * 4096 + 1)));
    });
}

/// The guest's call eventfd on `vring`, and a way to read how many times
/// the queue signalled it.
fn call_fd(vring: &Vring) -> impl Fn() -> u64 {
    use std::os::fd::FromRawFd;
    // SAFETY: eventfd(2) with valid flags; its result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK) };
    assert!(fd >= 0, "eventfd");
    // SAFETY: `fd` is a new eventfd this File alone owns.
    let call = unsafe { std::fs::File::from_raw_fd(fd) };
    let reader = call.try_clone().unwrap();
    vring.set_call(Some(call));
    move || {
        use std::io::Read;
        let mut count = [0u8; 8];
        (&reader).read_exact(&mut count).map_or(0, |()| u64::from_ne_bytes(count))
    }
}

#[test]
fn a_large_request_is_answered_and_signalled_before_the_next_is_popped() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x80_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let (dev, _driver) = recording(128, false);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(8), 8, disk(&dev, false), "x").unwrap();
    let vring = vring(&mem, &q);
    let signals = call_fd(&vring);
    // Two reads of 256 KiB, then two of 4 KiB.
    let mut descs = Vec::new();
    for (n, bytes) in [128u32 << 10, 128 << 10, 2048, 2048].into_iter().enumerate() {
        let at = BUF + n as u64 * 0x10_0000;
        let segs = [(at + 0x1000, bytes), (at + 0x1000 + u64::from(bytes), bytes)];
        descs.extend(read_chain(&mem, 4 * n as u16, at, n as u64 * 1024, &segs, at + 0x8_0000));
    }
    q.add_desc_chains(&descs, 0).unwrap();

    vq.run(&vring, &shared(&mem)).unwrap();

    assert_eq!(q.used().idx().load(), 4);
    assert_eq!(signals(), 3, "a signal for each large read, one for the small ones together");
}
