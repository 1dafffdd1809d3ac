//! One virtqueue of the vhost-user-blk server fed a guest whose memory,
//! descriptor table and rings are arbitrary bytes: every chain is parsed
//! and served through an inline memory-backed null device, a read or
//! write as one bio of the guest's own segments (or a copy). It must not
//! panic, hang, or touch memory outside the guest's regions (which are
//! heap allocations here, so AddressSanitizer sees any access past them).
//!
//! Input: byte 0 is flags (bit 0: a second region, bit 1: read-only disk,
//! bit 2: VIRTIO_RING_F_EVENT_IDX, bit 3: ring addresses from the input;
//! bits 4-5 the device: 0 null's default segment limits, 1 requests of at
//! most 2 physical segments of 4 KiB and 8 KiB, 2 a 4 KiB virt boundary,
//! so the block layer splits the guest's segments its own ways; bit 6:
//! any queue size, not only powers of two);
//! byte 1 the queue size (1 << (byte % 6), or with bit 6 1 + byte % 32: a
//! size that is not a power of two stops the queue); bytes 2..26 the descriptor
//! table, avail ring and used ring addresses (u64 little-endian, read only
//! with bit 3; else 0x0, 0x200, 0x300); the rest fills region 0 (guest
//! address 0) and then region 1 (REGION1_BASE, after a hole).
#![no_main]

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mqblk::Device;
use mqblk_vhost::queue::{Mem, VirtQueue, Vring};
use mqblk_vhost::DiskLimits;
use vhost_user_backend::VringT;
use vm_memory::{GuestAddress, GuestMemoryAtomic, GuestRegionMmap, MmapRegion};

const REGION_BYTES: usize = 0x4000;
const REGION1_BASE: u64 = 0x8000;
const MAX_QUEUE_SIZE: u16 = 32;
const DEPTH: u16 = 4;
const PREAMBLE_BYTES: usize = 26;

/// The device of flags bits 4-5 (see the header).
fn device(flags: u8) -> &'static Device {
    const SPECS: [&str; 3] = [
        "null:size=16,memory_backed=1,irqmode=0",
        "null:size=16,memory_backed=1,irqmode=0,max_segments=2,max_segment_size=4096,max_sectors=16",
        "null:size=16,memory_backed=1,irqmode=0,virt_boundary_mask=4095",
    ];
    static DEVICES: [OnceLock<Device>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let i = usize::from(flags >> 4 & 3) % SPECS.len();
    DEVICES[i].get_or_init(|| {
        mqblk_null::register();
        Device::open(SPECS[i]).expect("null device")
    })
}

/// A page-aligned heap allocation standing in for a guest region.
struct HeapRegion {
    ptr: *mut u8,
    layout: Layout,
}

impl HeapRegion {
    fn new(contents: &[u8]) -> Self {
        let layout = Layout::from_size_align(REGION_BYTES, 4096).expect("layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocation failed");
        let n = contents.len().min(REGION_BYTES);
        // SAFETY: ptr holds REGION_BYTES bytes and n <= REGION_BYTES.
        unsafe { std::ptr::copy_nonoverlapping(contents.as_ptr(), ptr, n) };
        Self { ptr, layout }
    }

    fn guest_region(&self, base: u64) -> GuestRegionMmap<()> {
        // SAFETY: ptr and REGION_BYTES define a live, page-aligned
        // allocation that outlives the guest memory built over it (the
        // HeapRegion is dropped after the memory, at the end of the run).
        let mapping = unsafe {
            MmapRegion::build_raw(
                self.ptr,
                REGION_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_ANONYMOUS | libc::MAP_PRIVATE,
            )
        }
        .expect("raw region");
        GuestRegionMmap::new(mapping, GuestAddress(base)).expect("region")
    }
}

impl Drop for HeapRegion {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fuzz_target!(|data: &[u8]| {
    if data.len() < PREAMBLE_BYTES {
        return;
    }
    let (flags, size_byte) = (data[0], data[1]);
    let queue_size = if flags & 0x40 != 0 { u16::from(size_byte % 32) + 1 } else { 1u16 << (size_byte % 6) };
    let (desc, avail, used) =
        if flags & 8 != 0 { (u64_at(data, 2), u64_at(data, 10), u64_at(data, 18)) } else { (0, 0x200, 0x300) };
    let contents = &data[PREAMBLE_BYTES..];
    let region0 = HeapRegion::new(contents);
    let region1 = HeapRegion::new(contents.get(REGION_BYTES..).unwrap_or(&[]));
    let mut regions = vec![region0.guest_region(0)];
    if flags & 1 != 0 {
        regions.push(region1.guest_region(REGION1_BASE));
    }
    let mem = Mem::from_regions(regions).expect("guest memory");

    let dev = device(flags);
    let disk = DiskLimits::new(dev.limits(), 1, queue_size, flags & 2 != 0);
    let vring = Vring::new(GuestMemoryAtomic::new(mem.clone()), MAX_QUEUE_SIZE).expect("vring");
    vring.set_queue_size(queue_size);
    if vring.set_queue_info(desc, avail, used).is_err() {
        return;
    }
    vring.set_queue_event_idx(flags & 4 != 0);
    vring.set_queue_ready(true);
    vring.set_enabled(true);
    let mut vq = VirtQueue::new(0, dev.client_with_capacity(usize::from(DEPTH)), DEPTH, disk, "fuzz").expect("queue");

    // A broken ring is an error (the queue stops), never a panic or a hang.
    let _ = vq.run(&vring, &std::sync::Arc::new(mem.clone()));
    let _ = vq.finish_in_flight(&mem);
    vq.abandon_in_flight();
    assert_eq!(vq.in_flight(), 0);
    let stats = vq.stats();
    assert!(stats.requests <= u64::from(queue_size), "at most one ring's worth of chains per run");
    assert!(stats.lent + stats.bounced <= stats.requests, "a read or write is lent or copied, once");
    assert!(stats.lent_segments <= stats.lent * u64::from(disk.seg_max), "no bio past the guest's seg_max");
    drop(vq);
    drop(vring);
    drop(mem);
    drop((region0, region1));
});
