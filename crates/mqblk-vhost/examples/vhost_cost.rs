//! The server's own work per request, without QEMU: a guest of QD chains
//! (1 MiB reads or writes in indirect tables of scattered pages, as a
//! Linux guest's fio sends them) laid out in host memory, served by one
//! `VirtQueue` over a device completing inline; each round publishes the
//! chains, runs the queue once and checks every chain was answered.
//!
//!   cargo build --release -p mqblk-vhost --example vhost_cost
//!   valgrind --tool=callgrind target/release/examples/vhost_cost ROUNDS [SEGS] [write] [SPEC]
//!
//! ROUNDS rounds of 4 requests of SEGS data segments each (default 128;
//! 1 MiB / SEGS bytes each, a multiple of 4 KiB); SPEC defaults to
//! `null:gb=1,irqmode=0` (a file: `file:path=F,reap=client,submit_queues=1`
//! for a queue that reaps its ring, as scripts/compare-vhost.sh serves). The instructions of two runs' difference over
//! their requests' difference are the cost of one request (set-up cancels).
//!
//! SPDX-License-Identifier: MIT OR Apache-2.0

use std::sync::Arc;

use mqblk::Device;
use mqblk_vhost::queue::{Mem, VirtQueue, Vring};
use mqblk_vhost::DiskLimits;
use vhost_user_backend::VringT;
use virtio_bindings::virtio_blk::{VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT};
use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor, RawDescriptor};
use vm_memory::{Bytes, GuestAddress, GuestMemoryAtomic};

const RING: u16 = 128;
const QD: u16 = 4;
const REQUEST_BYTES: u64 = 1 << 20;
const DESC_TABLE: u64 = 0;
const AVAIL: u64 = 0x800;
const USED: u64 = 0x1000;
/// Headers and status bytes, 256 bytes a slot.
const HEADERS: u64 = 0x2000;
/// An indirect table of 0x2000 bytes a slot (258 descriptors fit).
const TABLES: u64 = 0x1_0000;
/// The data pages: QD MiB, handed out scattered.
const POOL: u64 = 0x10_0000;

/// Pages of the pool in a scattered order (a fixed LCG permutation of
/// 4 KiB pages), cut into `segs` runs of equal length per request.
fn segments(slot: u16, segs: u64) -> Vec<(u64, u32)> {
    let pages = REQUEST_BYTES / 4096;
    let per_seg = pages / segs;
    (0..segs)
        .map(|i| {
            // Runs of per_seg pages, placed by an odd-multiplier permutation.
            let run = (i * 37 + 11) % segs;
            let page = u64::from(slot) * pages + run * per_seg;
            (POOL + page * 4096, (per_seg * 4096) as u32)
        })
        .collect()
}

/// Writes slot `slot`'s chain: its head descriptor names an indirect
/// table of header, data and status.
fn lay_out(mem: &Mem, slot: u16, segs: u64, write: bool) {
    let header = HEADERS + u64::from(slot) * 0x100;
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&(if write { VIRTIO_BLK_T_OUT } else { VIRTIO_BLK_T_IN }).to_le_bytes());
    h[8..16].copy_from_slice(&(u64::from(slot) * (REQUEST_BYTES >> 9)).to_le_bytes());
    mem.write_slice(&h, GuestAddress(header)).unwrap();
    let (next, w) = (VRING_DESC_F_NEXT as u16, VRING_DESC_F_WRITE as u16);
    let data_flags = if write { next } else { next | w };
    let mut table = vec![Descriptor::new(header, 16, next, 1)];
    for (i, (addr, len)) in segments(slot, segs).into_iter().enumerate() {
        table.push(Descriptor::new(addr, len, data_flags, i as u16 + 2));
    }
    table.push(Descriptor::new(header + 0x80, 1, w, 0));
    let at = TABLES + u64::from(slot) * 0x2000;
    for (i, d) in table.iter().enumerate() {
        mem.write_obj(RawDescriptor::from(*d), GuestAddress(at + 16 * i as u64)).unwrap();
    }
    let head = Descriptor::new(at, 16 * table.len() as u32, VRING_DESC_F_INDIRECT as u16, 0);
    mem.write_obj(RawDescriptor::from(head), GuestAddress(DESC_TABLE + 16 * u64::from(slot))).unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let segs: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(128);
    let write = args.get(3).is_some_and(|a| a == "write");
    let spec = args.get(4).map_or("null:gb=1,irqmode=0", String::as_str);
    assert!(segs > 0 && (REQUEST_BYTES / 4096) % segs == 0, "SEGS divides 256 pages");
    mqblk_null::register();
    mqblk_file::register();
    let dev = Device::open(spec).expect("device");
    let disk = DiskLimits::new(dev.limits(), 1, 1024, false);
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x100_0000)]).unwrap();
    for slot in 0..QD {
        lay_out(&mem, slot, segs, write);
    }
    let vring = Vring::new(GuestMemoryAtomic::new(mem.clone()), RING).unwrap();
    vring.set_queue_size(RING);
    vring.set_queue_info(DESC_TABLE, AVAIL, USED).unwrap();
    vring.set_queue_ready(true);
    vring.set_enabled(true);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(usize::from(QD)), QD, disk, "cost").unwrap();
    let shared = Arc::new(mem.clone());
    let mut avail: u16 = 0;
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        for slot in 0..QD {
            mem.write_obj(slot, GuestAddress(AVAIL + 4 + 2 * u64::from(avail % RING))).unwrap();
            avail = avail.wrapping_add(1);
        }
        mem.write_obj(avail, GuestAddress(AVAIL + 2)).unwrap();
        // As the queue's worker: run, and wait on the completion fd while
        // chains are unanswered (a device completing inline needs one run).
        loop {
            vq.run(&vring, &shared).unwrap();
            let used: u16 = mem.read_obj(GuestAddress(USED + 2)).unwrap();
            if used == avail {
                break;
            }
            let mut pfd = libc::pollfd { fd: vq.completion_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd, and its count.
            assert_eq!(unsafe { libc::poll(&mut pfd, 1, 10_000) }, 1, "a completion within 10 s");
            vq.drain_eventfd();
        }
    }
    let requests = rounds * u64::from(QD);
    let stats = vq.stats();
    assert_eq!((stats.errors, stats.lent, stats.lent_segments), (0, requests, requests * segs));
    println!(
        "{requests} requests of {segs} segments ({}): {:.2} us each",
        if write { "write" } else { "read" },
        start.elapsed().as_secs_f64() * 1e6 / requests as f64
    );
}
