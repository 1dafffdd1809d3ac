//! A virtqueue served end to end without QEMU: chains built in a
//! GuestMemoryMmap with virtio-queue's mock split queue, a vring over it
//! as vhost-user-backend would set it up, and a memory-backed null device.

use super::*;
use mqblk::Device;
use virtio_bindings::virtio_blk::{VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT};
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;

const QUEUE_SIZE: u16 = 16;
const BUF: u64 = 0x10_0000;

fn device() -> Device {
    mqblk_null::register();
    Device::open("null:gb=1,memory_backed=1,irqmode=0").unwrap()
}

fn disk(dev: &Device, read_only: bool) -> DiskLimits {
    DiskLimits::new(dev.limits(), 1, QUEUE_SIZE, read_only)
}

/// The vring as vhost-user-backend sets it up from the frontend's messages.
fn vring(mem: &Mem, q: &MockSplitQueue<Mem>) -> Vring {
    let vring = Vring::new(GuestMemoryAtomic::new(mem.clone()), QUEUE_SIZE).unwrap();
    vring.set_queue_size(QUEUE_SIZE);
    vring.set_queue_info(q.desc_table_addr().0, q.avail_addr().0, q.used_addr().0).unwrap();
    vring.set_queue_ready(true);
    vring.set_enabled(true);
    vring
}

/// Writes a header at `at`; returns the chain header, data, status
/// starting at descriptor `first`.
fn chain(mem: &Mem, first: u16, at: u64, req_type: u32, sector: u64, data_len: u32) -> [RawDescriptor; 3] {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&req_type.to_le_bytes());
    h[8..16].copy_from_slice(&sector.to_le_bytes());
    mem.write_slice(&h, GuestAddress(at)).unwrap();
    let next = VRING_DESC_F_NEXT as u16;
    let write = VRING_DESC_F_WRITE as u16;
    let data_flags = if req_type == VIRTIO_BLK_T_OUT { next } else { next | write };
    [
        RawDescriptor::from(SplitDescriptor::new(at, 16, next, first + 1)),
        RawDescriptor::from(SplitDescriptor::new(at + 0x1000, data_len, data_flags, first + 2)),
        RawDescriptor::from(SplitDescriptor::new(at + 0x1000 + u64::from(data_len), 1, write, 0)),
    ]
}

fn used(q: &MockSplitQueue<Mem>, i: usize) -> (u32, u32) {
    let e = q.used().ring().ref_at(i).unwrap().load();
    (e.id(), e.len())
}

fn status_at(mem: &Mem, addr: u64) -> u8 {
    mem.read_obj(GuestAddress(addr)).unwrap()
}

#[test]
fn write_then_read_round_trips_through_the_device() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let dev = device();
    let disk = disk(&dev, false);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk, "serial-1").unwrap();
    let vring = vring(&mem, &q);

    let payload: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    mem.write_slice(&payload, GuestAddress(BUF + 0x1000)).unwrap();
    let read_at = BUF + 0x10_0000;
    let mut descs = chain(&mem, 0, BUF, VIRTIO_BLK_T_OUT, 64, 8192).to_vec();
    descs.extend(chain(&mem, 3, read_at, VIRTIO_BLK_T_IN, 64, 8192));
    descs.extend(chain(&mem, 6, BUF + 0x20_0000, VIRTIO_BLK_T_GET_ID, 0, 20));
    q.add_desc_chains(&descs, 0).unwrap();

    vq.run(&vring, &mem).unwrap();

    assert_eq!(q.used().idx().load(), 3, "every chain answered");
    let mut answers: Vec<(u32, u32)> = (0..3).map(|i| used(&q, i)).collect();
    answers.sort();
    assert_eq!(answers, [(0, 1), (3, 8193), (6, 21)], "(head, bytes written) per chain");
    assert_eq!(status_at(&mem, BUF + 0x1000 + 8192), VIRTIO_BLK_S_OK as u8);
    assert_eq!(status_at(&mem, read_at + 0x1000 + 8192), VIRTIO_BLK_S_OK as u8);
    let mut back = vec![0u8; 8192];
    mem.read_slice(&mut back, GuestAddress(read_at + 0x1000)).unwrap();
    assert_eq!(back, payload, "the read returns what the write stored");
    let mut id = [0u8; 20];
    mem.read_slice(&mut id, GuestAddress(BUF + 0x20_0000 + 0x1000)).unwrap();
    assert_eq!(&id[..8], b"serial-1");
    assert_eq!(vq.in_flight(), 0);
    assert_eq!(vq.stats().errors, 0);
}

#[test]
fn refused_requests_are_answered_with_their_status() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let dev = device();
    let disk = disk(&dev, true);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk, "ro").unwrap();
    let vring = vring(&mem, &q);
    // A write to the read-only disk, and an unknown request type.
    let mut descs = chain(&mem, 0, BUF, VIRTIO_BLK_T_OUT, 0, 512).to_vec();
    descs.extend(chain(&mem, 3, BUF + 0x10_0000, 77, 0, 512));
    q.add_desc_chains(&descs, 0).unwrap();

    vq.run(&vring, &mem).unwrap();

    assert_eq!(q.used().idx().load(), 2);
    assert_eq!(status_at(&mem, BUF + 0x1000 + 512), VIRTIO_BLK_S_IOERR as u8);
    assert_eq!(status_at(&mem, BUF + 0x10_0000 + 0x1000 + 512), VIRTIO_BLK_S_UNSUPP as u8);
    assert_eq!(vq.stats().errors, 2);
}

#[test]
fn more_chains_than_slots_are_all_served() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x80_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let dev = device();
    let disk = disk(&dev, false);
    // Two slots for five requests: the rest wait in the avail ring until
    // completions free slots, within the same run.
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(2), 2, disk, "x").unwrap();
    let vring = vring(&mem, &q);
    let mut descs = Vec::new();
    for i in 0..5u16 {
        descs.extend(chain(&mem, i * 3, BUF + u64::from(i) * 0x10_0000, VIRTIO_BLK_T_IN, u64::from(i) * 8, 4096));
    }
    q.add_desc_chains(&descs, 0).unwrap();

    vq.run(&vring, &mem).unwrap();

    assert_eq!(q.used().idx().load(), 5);
    assert_eq!(vq.stats().requests, 5);
    for i in 0..5u64 {
        assert_eq!(status_at(&mem, BUF + i * 0x10_0000 + 0x1000 + 4096), VIRTIO_BLK_S_OK as u8);
    }
}

#[test]
fn stopping_the_ring_waits_for_requests_in_flight() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    mqblk_null::register();
    // Completions 2 ms after submission, on the device's timer thread.
    let dev = Device::open("null:gb=1,memory_backed=1,irqmode=2,completion_nsec=2000000").unwrap();
    let disk = disk(&dev, false);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk, "x").unwrap();
    let vring = vring(&mem, &q);
    let mut descs = Vec::new();
    for i in 0..3u16 {
        descs.extend(chain(&mem, i * 3, BUF + u64::from(i) * 0x10_0000, VIRTIO_BLK_T_OUT, u64::from(i) * 8, 4096));
    }
    q.add_desc_chains(&descs, 0).unwrap();

    vq.run(&vring, &mem).unwrap();
    vq.finish_in_flight(&mem).unwrap();

    assert_eq!(vq.in_flight(), 0);
    assert_eq!(q.used().idx().load(), 3, "every request in the used ring before the ring stops");
    for i in 0..3u64 {
        assert_eq!(status_at(&mem, BUF + i * 0x10_0000 + 0x1000 + 4096), VIRTIO_BLK_S_OK as u8);
    }
}
