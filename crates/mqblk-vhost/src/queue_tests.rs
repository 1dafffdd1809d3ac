//! A virtqueue served end to end without QEMU: chains built in a
//! GuestMemoryMmap with virtio-queue's mock split queue, a vring over it
//! as vhost-user-backend would set it up, and a memory-backed null device.

use super::*;
use mqblk::Device;
use virtio_bindings::virtio_blk::{VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT};
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{GuestMemoryAtomic, GuestMemoryBackend};

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
    vring_at(mem, q.desc_table_addr(), q.avail_addr(), q.used_addr())
}

/// As `vring`, over rings at the given guest addresses.
fn vring_at(mem: &Mem, desc_table: GuestAddress, avail: GuestAddress, used: GuestAddress) -> Vring {
    let vring = Vring::new(GuestMemoryAtomic::new(mem.clone()), QUEUE_SIZE).unwrap();
    vring.set_queue_size(QUEUE_SIZE);
    vring.set_queue_info(desc_table.0, avail.0, used.0).unwrap();
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

/// The memory as the backend hands it to `run` (same regions).
fn shared(mem: &Mem) -> Arc<Mem> {
    Arc::new(mem.clone())
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

    vq.run(&vring, &shared(&mem)).unwrap();

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

    vq.run(&vring, &shared(&mem)).unwrap();

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

    vq.run(&vring, &shared(&mem)).unwrap();

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

    vq.run(&vring, &shared(&mem)).unwrap();
    vq.finish_in_flight(&mem).unwrap();

    assert_eq!(vq.in_flight(), 0);
    assert_eq!(q.used().idx().load(), 3, "every request in the used ring before the ring stops");
    for i in 0..3u64 {
        assert_eq!(status_at(&mem, BUF + i * 0x10_0000 + 0x1000 + 4096), VIRTIO_BLK_S_OK as u8);
    }
}

#[test]
fn avail_index_more_than_a_ring_ahead_is_an_error_not_a_spin() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let dev = device();
    let disk = disk(&dev, false);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk, "x").unwrap();
    let vring = vring(&mem, &q);
    q.add_desc_chains(&chain(&mem, 0, BUF, VIRTIO_BLK_T_IN, 0, 512), 0).unwrap();
    q.avail().idx().store(QUEUE_SIZE + 1);

    let err = vq.run(&vring, &shared(&mem)).expect_err("the ring is unusable");
    assert!(err.to_string().contains("more than a ring (16) ahead"), "{err}");
    assert_eq!(q.used().idx().load(), 0);
    assert_eq!(vq.stats().requests, 0);
}

/// An avail ring at guest address 0: virtio-queue takes it for a ring not
/// yet set up and pops nothing, while the index it reads there says chains
/// wait. The fuzzer found this spinning the worker forever.
#[test]
fn avail_ring_that_cannot_be_popped_is_an_error_not_a_spin() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let dev = device();
    let disk = disk(&dev, false);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk, "x").unwrap();
    let vring = vring_at(&mem, GuestAddress(0x1000), GuestAddress(0), GuestAddress(0x2000));
    mem.write_obj(3u16, GuestAddress(2)).unwrap();

    let err = vq.run(&vring, &shared(&mem)).expect_err("the ring is unusable");
    assert!(err.to_string().contains("no chain could be read"), "{err}");
    assert_eq!(vq.stats().requests, 0);
}

#[test]
fn head_index_past_the_table_is_an_error() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let dev = device();
    let disk = disk(&dev, false);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk, "x").unwrap();
    let vring = vring(&mem, &q);
    // A valid read first, then a head that names entry 200 of 16.
    q.add_desc_chains(&chain(&mem, 0, BUF, VIRTIO_BLK_T_IN, 0, 512), 0).unwrap();
    q.avail().ring().ref_at(1).unwrap().store(200);
    q.avail().idx().store(2);

    assert!(vq.run(&vring, &shared(&mem)).is_err(), "the bad head cannot be put in the used ring");
    vq.finish_in_flight(&mem).unwrap();
    assert_eq!(vq.in_flight(), 0, "the read before it was still submitted");
    assert_eq!(q.used().idx().load(), 1);
    assert_eq!(status_at(&mem, BUF + 0x1000 + 512), VIRTIO_BLK_S_OK as u8);
}

#[test]
fn looping_chain_is_given_back_and_the_next_one_served() {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let dev = device();
    let disk = disk(&dev, false);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk, "x").unwrap();
    let vring = vring(&mem, &q);
    // Chain 0: its status descriptor names its data descriptor again.
    let mut looped = chain(&mem, 0, BUF, VIRTIO_BLK_T_IN, 0, 512);
    looped[2] = RawDescriptor::from(SplitDescriptor::new(
        BUF + 0x1000 + 512,
        1,
        (VRING_DESC_F_NEXT | VRING_DESC_F_WRITE) as u16,
        1,
    ));
    q.add_desc_chains(&looped, 0).unwrap();
    q.add_desc_chains(&chain(&mem, 3, BUF + 0x10_0000, VIRTIO_BLK_T_IN, 0, 512), 3).unwrap();

    vq.run(&vring, &shared(&mem)).unwrap();

    assert_eq!(q.used().idx().load(), 2);
    let mut answers: Vec<(u32, u32)> = (0..2).map(|i| used(&q, i)).collect();
    answers.sort();
    assert_eq!(answers, [(0, 0), (3, 513)], "the loop given back with nothing written");
    assert_eq!(status_at(&mem, BUF + 0x10_0000 + 0x1000 + 512), VIRTIO_BLK_S_OK as u8);
    assert_eq!((vq.stats().errors, vq.stats().dropped), (1, 1));
}

/// A guest publishing chains while the queue runs: a chain published
/// between pop's last look at the avail ring and the re-enabling of
/// notifications is served on the next pass, never taken for a broken
/// ring (it once stopped the queue's worker: "avail index out of range"
/// in a guest's fio run at QD32). Every chain is answered exactly once.
#[test]
fn chains_published_while_notifications_are_reenabled_are_served() {
    use std::sync::atomic::{fence, Ordering};
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x80_0000)]).unwrap();
    // Rings laid out here: the mock's avail ring overlaps its used ring
    // past its first entries, so it cannot wrap.
    let (desc_table, avail, used) = (GuestAddress(0), GuestAddress(0x1000), GuestAddress(0x2000));
    let dev = device();
    let disk = disk(&dev, false);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(8), 8, disk, "x").unwrap();
    let vring = vring_at(&mem, desc_table, avail, used);
    // Chains of 3 descriptors in a table of 16: 5 in flight at most, each
    // slot's descriptors reused once the chain was answered.
    const IN_FLIGHT: u16 = 5;
    const CHAINS: u16 = 20_000;
    let used_idx = |mem: &Mem| mem.read_obj::<u16>(GuestAddress(used.0 + 2)).unwrap();
    let failed = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let (guest, failed) = (mem.clone(), &failed);
        s.spawn(move || {
            for n in 0..CHAINS {
                while n.wrapping_sub(used_idx(&guest)) >= IN_FLIGHT {
                    if failed.load(Ordering::Relaxed) {
                        return;
                    }
                    std::hint::spin_loop();
                }
                let slot = n % IN_FLIGHT;
                let descs =
                    chain(&guest, slot * 3, BUF + u64::from(slot) * 0x10_0000, VIRTIO_BLK_T_IN, u64::from(n), 512);
                for (i, d) in descs.iter().enumerate() {
                    guest.write_obj(*d, GuestAddress(desc_table.0 + 16 * u64::from(slot * 3 + i as u16))).unwrap();
                }
                let entry = GuestAddress(avail.0 + 4 + 2 * u64::from(n % QUEUE_SIZE));
                guest.write_obj(slot * 3, entry).unwrap();
                fence(Ordering::Release);
                guest.write_obj(n.wrapping_add(1), GuestAddress(avail.0 + 2)).unwrap();
            }
        });
        while used_idx(&mem) != CHAINS {
            if let Err(e) = vq.run(&vring, &shared(&mem)) {
                failed.store(true, Ordering::Relaxed);
                panic!("after {} chains answered: {e}", used_idx(&mem));
            }
        }
    });
    assert_eq!(vq.stats().requests, u64::from(CHAINS));
    assert_eq!((vq.stats().errors, vq.in_flight()), (0, 0));
}

/// Runs the queue as its worker would until `used` chains are answered:
/// a run, then a wait on the completion fd (bounded: a completion that
/// never signals fails the test) before the next.
fn serve_until(vq: &mut VirtQueue, vring: &Vring, mem: &Arc<Mem>, q: &MockSplitQueue<Mem>, used: u16) {
    loop {
        vq.run(vring, mem).unwrap();
        if q.used().idx().load() >= used {
            return;
        }
        let mut pfd = libc::pollfd { fd: vq.completion_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, and its count.
        let ready = unsafe { libc::poll(&mut pfd, 1, 10_000) };
        assert_eq!(ready, 1, "a completion signals the queue's fd");
        vq.drain_eventfd();
    }
}

/// A file device whose clients reap their own ring (reap=client): the
/// queue's completion fd is the one registered with its ring, so what the
/// kernel completes, inside the submission or later, reaches the queue
/// with no completion thread.
#[test]
fn a_device_whose_clients_reap_their_ring_is_served() {
    mqblk_file::register();
    let path = std::env::temp_dir().join(format!("mqblk-vhost-reap-{}.img", std::process::id()));
    let spec = format!("file:path={},create=1,size=1m,reap=client,submit_queues=1", path.display());
    let dev = Device::open(&spec).unwrap();
    assert!(dev.tag_set().submitter_reaps);
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let q = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(4), 4, disk(&dev, false), "x").unwrap();
    let vring = vring(&mem, &q);
    let payload: Vec<u8> = (0..3 * 4096u32).map(|i| (i * 7 % 249) as u8).collect();
    mem.write_slice(&payload, GuestAddress(BUF + 0x1000)).unwrap();
    let written = [(BUF + 0x2000, 4096), (BUF + 0x1000, 4096), (BUF + 0x3000, 4096)];
    q.add_desc_chains(&data_chain(&mem, 0, BUF, VIRTIO_BLK_T_OUT, 16, &written, BUF + 0x9000), 0).unwrap();
    let mem = shared(&mem);

    serve_until(&mut vq, &vring, &mem, &q, 1);
    let read = [(BUF + 0x2_0000, 8192), (BUF + 0x2_4000, 4096)];
    q.add_desc_chains(&read_chain(&mem, 5, BUF + 0x1_0000, 16, &read, BUF + 0x1_9000), 5).unwrap();
    serve_until(&mut vq, &vring, &mem, &q, 2);

    let mut back = vec![0u8; 3 * 4096];
    mem.read_slice(&mut back, GuestAddress(BUF + 0x2_0000)).unwrap();
    let mut want = payload[4096..8192].to_vec();
    want.extend_from_slice(&payload[..4096]);
    want.extend_from_slice(&payload[8192..]);
    assert_eq!(back[..8192], want[..8192], "the first two written segments, in the read's first");
    mem.read_slice(&mut back[8192..], GuestAddress(BUF + 0x2_4000)).unwrap();
    assert_eq!(back, want);
    assert_eq!([used(&q, 0), used(&q, 1)], [(0, 1), (5, 3 * 4096 + 1)]);
    assert_eq!((vq.stats().lent, vq.stats().bounced, vq.in_flight()), (2, 0, 0));
    drop((vq, dev));
    std::fs::remove_file(&path).unwrap();
}

/// Per request seen by `Recording`: its segments' (host address, length).
type Seen = std::sync::Arc<std::sync::Mutex<Vec<Vec<(usize, usize)>>>>;

/// A device that fills each read segment with its disk offset's low byte
/// and records, per request, the segments' host addresses; it completes a
/// request at once, or holds it until the test completes it (`hold`).
struct Recording {
    max_segments: u32,
    hold: bool,
    seen: Seen,
    held: std::sync::Arc<std::sync::Mutex<Vec<mqblk::driver::Rq>>>,
}

impl mqblk::driver::Driver for Recording {
    fn name(&self) -> &str {
        "recording"
    }
    fn tag_set(&self) -> mqblk::TagSetConfig {
        mqblk::TagSetConfig::new(1, 64)
    }
    fn limits(&self) -> mqblk::QueueLimits {
        let mut limits = mqblk::QueueLimits::new(1 << 30, 512);
        limits.max_segments = self.max_segments;
        limits
    }
    fn queue_rq(
        &self,
        _hctx: &mqblk::driver::Hctx,
        mut rq: mqblk::driver::Rq,
        _last: bool,
    ) -> mqblk::driver::QueueRqResult {
        let mut segments = Vec::new();
        rq.for_each_segment_mut(|pos, seg| {
            segments.push((seg.as_ptr() as usize, seg.len()));
            seg.iter_mut().enumerate().for_each(|(i, b)| *b = (pos + i as u64) as u8);
        });
        self.seen.lock().unwrap().push(segments);
        if self.hold {
            self.held.lock().unwrap().push(rq);
        } else {
            rq.complete(Status::Ok);
        }
        mqblk::driver::QueueRqResult::Queued
    }
}

fn recording(max_segments: u32, hold: bool) -> (Device, Recording) {
    let driver = Recording { max_segments, hold, seen: Default::default(), held: Default::default() };
    let handle = Recording { max_segments, hold, seen: driver.seen.clone(), held: driver.held.clone() };
    (Device::with_driver(Box::new(driver)).unwrap(), handle)
}

/// A read chain: header at `at`, the data in `segments` (guest address,
/// bytes), the status byte at `status`; descriptors from `first`.
fn read_chain(mem: &Mem, first: u16, at: u64, sector: u64, segments: &[(u64, u32)], status: u64) -> Vec<RawDescriptor> {
    data_chain(mem, first, at, VIRTIO_BLK_T_IN, sector, segments, status)
}

/// As `read_chain`, of request type `req_type` (a write's data
/// descriptors are device-readable).
fn data_chain(
    mem: &Mem,
    first: u16,
    at: u64,
    req_type: u32,
    sector: u64,
    segments: &[(u64, u32)],
    status: u64,
) -> Vec<RawDescriptor> {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&req_type.to_le_bytes());
    h[8..16].copy_from_slice(&sector.to_le_bytes());
    mem.write_slice(&h, GuestAddress(at)).unwrap();
    let (next, write) = (VRING_DESC_F_NEXT as u16, VRING_DESC_F_WRITE as u16);
    let data_flags = if req_type == VIRTIO_BLK_T_OUT { next } else { next | write };
    let mut descs = vec![RawDescriptor::from(SplitDescriptor::new(at, 16, next, first + 1))];
    for (i, &(addr, len)) in segments.iter().enumerate() {
        descs.push(RawDescriptor::from(SplitDescriptor::new(addr, len, data_flags, first + 2 + i as u16)));
    }
    descs.push(RawDescriptor::from(SplitDescriptor::new(status, 1, write, 0)));
    descs
}

#[path = "queue_lend_tests.rs"]
mod lend;

#[path = "queue_order_tests.rs"]
mod in_order;
