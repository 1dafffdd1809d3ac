//! Parser tests on hand-built descriptor chains in a GuestMemoryMmap
//! (virtio-queue's mock split queue).

use super::*;
use virtio_bindings::virtio_ring::VRING_DESC_F_WRITE;
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::GuestMemoryMmap;

const MEM_BYTES: usize = 0x40_0000;
const HDR: u64 = 0x10_0000;
const DATA: u64 = 0x20_0000;
const STATUS: u64 = 0x30_0000;

fn mem() -> GuestMemoryMmap<()> {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_BYTES)]).unwrap()
}

fn disk(read_only: bool) -> DiskLimits {
    DiskLimits {
        capacity_bytes: 1 << 20,
        logical_block_size: 512,
        physical_block_size: 4096,
        seg_max: 8,
        size_max: 64 << 10,
        max_discard_sectors: 1024,
        max_write_zeroes_sectors: 1024,
        write_cache: true,
        read_only,
        num_queues: 1,
    }
}

fn header(mem: &GuestMemoryMmap<()>, req_type: u32, sector: u64) {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&req_type.to_le_bytes());
    h[8..16].copy_from_slice(&sector.to_le_bytes());
    mem.write_slice(&h, GuestAddress(HDR)).unwrap();
}

fn rd(addr: u64, len: u32) -> RawDescriptor {
    RawDescriptor::from(SplitDescriptor::new(addr, len, 0, 0))
}

fn wr(addr: u64, len: u32) -> RawDescriptor {
    RawDescriptor::from(SplitDescriptor::new(addr, len, VRING_DESC_F_WRITE as u16, 0))
}

/// Parses the chain `descs` as the device `disk`.
fn run(
    mem: &GuestMemoryMmap<()>,
    descs: &[RawDescriptor],
    disk: &DiskLimits,
) -> (Result<Request, Refused>, Vec<Segment>) {
    let queue = MockSplitQueue::new(mem, 16);
    let chain = queue.build_desc_chain(descs).unwrap();
    let mut data = Vec::new();
    let parsed = parse(chain, mem, disk, &mut data);
    (parsed, data)
}

fn seg(addr: u64, len: u32) -> Segment {
    Segment { addr: GuestAddress(addr), len }
}

#[test]
fn read_in_three_descriptors() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 8);
    let (req, data) = run(&m, &[rd(HDR, 16), wr(DATA, 4096), wr(STATUS, 1)], &disk(false));
    assert_eq!(req.unwrap(), Request { kind: Kind::Read { offset: 4096, len: 4096 }, status: GuestAddress(STATUS) });
    assert_eq!(data, [seg(DATA, 4096)]);
}

#[test]
fn write_with_header_and_data_in_one_descriptor() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_OUT, 2);
    let (req, data) = run(&m, &[rd(HDR, 16 + 1024), rd(DATA, 512), wr(STATUS, 1)], &disk(false));
    assert_eq!(req.unwrap().kind, Kind::Write { offset: 1024, len: 1536 });
    assert_eq!(data, [seg(HDR + 16, 1024), seg(DATA, 512)]);
}

#[test]
fn read_with_status_in_the_data_descriptor() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    let (req, data) = run(&m, &[rd(HDR, 16), wr(DATA, 1025)], &disk(false));
    let req = req.unwrap();
    assert_eq!(req.kind, Kind::Read { offset: 0, len: 1024 });
    assert_eq!(req.status, GuestAddress(DATA + 1024));
    assert_eq!(data, [seg(DATA, 1024)]);
}

#[test]
fn indirect_table_is_followed() {
    use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT};
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 1);
    // An indirect table of header, data and status at TABLE.
    const TABLE: u64 = 0x38_0000;
    let next = VRING_DESC_F_NEXT as u16;
    let table = [
        SplitDescriptor::new(HDR, 16, next, 1),
        SplitDescriptor::new(DATA, 512, next | VRING_DESC_F_WRITE as u16, 2),
        SplitDescriptor::new(STATUS, 1, VRING_DESC_F_WRITE as u16, 0),
    ];
    for (i, d) in table.iter().enumerate() {
        m.write_obj(RawDescriptor::from(*d), GuestAddress(TABLE + 16 * i as u64)).unwrap();
    }
    let head = RawDescriptor::from(SplitDescriptor::new(TABLE, 48, VRING_DESC_F_INDIRECT as u16, 0));
    let (req, data) = run(&m, &[head], &disk(false));
    assert_eq!(req.unwrap(), Request { kind: Kind::Read { offset: 512, len: 512 }, status: GuestAddress(STATUS) });
    assert_eq!(data, [seg(DATA, 512)]);
}

#[test]
fn flush_get_id_discard_and_write_zeroes() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_FLUSH, 0);
    let (req, data) = run(&m, &[rd(HDR, 16), wr(STATUS, 1)], &disk(false));
    assert_eq!(req.unwrap().kind, Kind::Flush);
    assert!(data.is_empty());

    header(&m, VIRTIO_BLK_T_GET_ID, 0);
    let (req, data) = run(&m, &[rd(HDR, 16), wr(DATA, 20), wr(STATUS, 1)], &disk(false));
    assert_eq!(req.unwrap().kind, Kind::GetId);
    assert_eq!(data, [seg(DATA, 20)]);

    let zeroes = VIRTIO_BLK_T_WRITE_ZEROES;
    for (t, flags) in [(VIRTIO_BLK_T_DISCARD, 0), (zeroes, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP), (zeroes, 0)] {
        header(&m, t, 0);
        let mut r = [0u8; 16];
        r[0..8].copy_from_slice(&16u64.to_le_bytes());
        r[8..12].copy_from_slice(&8u32.to_le_bytes());
        r[12..16].copy_from_slice(&flags.to_le_bytes());
        m.write_slice(&r, GuestAddress(DATA)).unwrap();
        let (req, _) = run(&m, &[rd(HDR, 16), rd(DATA, 16), wr(STATUS, 1)], &disk(false));
        let want = if t == VIRTIO_BLK_T_DISCARD {
            Kind::Discard { offset: 8192, len: 4096 }
        } else {
            // Without UNMAP the range must stay allocated.
            Kind::WriteZeroes { offset: 8192, len: 4096, unmap: flags != 0 }
        };
        assert_eq!(req.unwrap().kind, want);
    }
}

fn refused(m: &GuestMemoryMmap<()>, descs: &[RawDescriptor], d: &DiskLimits) -> Refused {
    run(m, descs, d).0.unwrap_err()
}

#[test]
fn unknown_type_is_unsupp() {
    let m = mem();
    header(&m, 99, 0);
    let r = refused(&m, &[rd(HDR, 16), wr(STATUS, 1)], &disk(false));
    assert_eq!(r.error, ParseError::UnknownType(99));
    assert_eq!(r.error.status(), VIRTIO_BLK_S_UNSUPP as u8);
    assert_eq!(r.status, Some(GuestAddress(STATUS)));
}

#[test]
fn descriptor_outside_memory_is_ioerr() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    let far = MEM_BYTES as u64 - 100;
    let r = refused(&m, &[rd(HDR, 16), wr(far, 4096), wr(STATUS, 1)], &disk(false));
    assert_eq!(r.error, ParseError::OutsideMemory { addr: far, len: 4096 });
    assert_eq!(r.error.status(), VIRTIO_BLK_S_IOERR as u8);
    assert_eq!(r.status, None, "no status is written through a chain that failed its memory check");
}

#[test]
fn short_header_is_ioerr() {
    let m = mem();
    let r = refused(&m, &[rd(HDR, 8), wr(STATUS, 1)], &disk(false));
    assert_eq!(r.error, ParseError::ShortHeader(8));
    assert_eq!(r.error.status(), VIRTIO_BLK_S_IOERR as u8);
}

#[test]
fn no_writable_byte_means_no_status() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_FLUSH, 0);
    let r = refused(&m, &[rd(HDR, 16)], &disk(false));
    assert_eq!((r.error, r.status), (ParseError::NoStatus, None));
}

#[test]
fn write_to_read_only_disk_is_ioerr() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_OUT, 0);
    let r = refused(&m, &[rd(HDR, 16), rd(DATA, 512), wr(STATUS, 1)], &disk(true));
    assert_eq!(r.error, ParseError::ReadOnly);
    assert_eq!(r.error.status(), VIRTIO_BLK_S_IOERR as u8);
    // Reads still pass.
    header(&m, VIRTIO_BLK_T_IN, 0);
    assert!(run(&m, &[rd(HDR, 16), wr(DATA, 512), wr(STATUS, 1)], &disk(true)).0.is_ok());
}

#[test]
fn past_end_misaligned_and_oversized_are_ioerr() {
    let m = mem();
    let d = disk(false);
    header(&m, VIRTIO_BLK_T_IN, (1 << 20) / 512);
    let r = refused(&m, &[rd(HDR, 16), wr(DATA, 512), wr(STATUS, 1)], &d);
    assert_eq!(r.error, ParseError::PastEnd { offset: 1 << 20, len: 512 });
    header(&m, VIRTIO_BLK_T_IN, u64::MAX / 4);
    assert!(matches!(refused(&m, &[rd(HDR, 16), wr(DATA, 512), wr(STATUS, 1)], &d).error, ParseError::PastEnd { .. }));
    let mut d4k = d;
    d4k.logical_block_size = 4096;
    header(&m, VIRTIO_BLK_T_IN, 1);
    let r = refused(&m, &[rd(HDR, 16), wr(DATA, 4096), wr(STATUS, 1)], &d4k);
    assert_eq!(r.error, ParseError::Misaligned { offset: 512, len: 4096, block: 4096 });
    header(&m, VIRTIO_BLK_T_IN, 0);
    let r = refused(&m, &[rd(HDR, 16), wr(DATA, 700), wr(STATUS, 1)], &d);
    assert!(matches!(r.error, ParseError::Misaligned { .. }));
    let r = refused(&m, &[rd(HDR, 16), wr(STATUS, 1)], &d);
    assert_eq!(r.error, ParseError::BadLength(0));
    let mut small = d;
    small.size_max = 512;
    small.seg_max = 1;
    let r = refused(&m, &[rd(HDR, 16), wr(DATA, 1024), wr(STATUS, 1)], &small);
    assert_eq!(r.error, ParseError::BadLength(1024));
    assert_eq!(r.error.status(), VIRTIO_BLK_S_IOERR as u8);
}

#[test]
fn too_many_descriptors_and_bad_ordering() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    let mut descs = vec![rd(HDR, 16)];
    descs.extend((0..10).map(|i| wr(DATA + i * 512, 512)));
    descs.push(wr(STATUS, 1));
    assert_eq!(refused(&m, &descs, &disk(false)).error, ParseError::TooManyDescriptors(10));
    header(&m, VIRTIO_BLK_T_OUT, 0);
    let r = refused(&m, &[rd(HDR, 16), wr(STATUS, 1), rd(DATA, 512)], &disk(false));
    assert_eq!(r.error, ParseError::ReadableAfterWritable);
}

#[test]
fn range_errors() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_DISCARD, 0);
    let mut r = [0u8; 16];
    r[8..12].copy_from_slice(&8u32.to_le_bytes());
    r[12..16].copy_from_slice(&1u32.to_le_bytes());
    m.write_slice(&r, GuestAddress(DATA)).unwrap();
    let e = refused(&m, &[rd(HDR, 16), rd(DATA, 16), wr(STATUS, 1)], &disk(false)).error;
    assert_eq!((e, e.status()), (ParseError::RangeFlags(1), VIRTIO_BLK_S_UNSUPP as u8));
    let e = refused(&m, &[rd(HDR, 16), rd(DATA, 32), wr(STATUS, 1)], &disk(false)).error;
    assert_eq!(e, ParseError::Ranges(2));
    let mut no_discard = disk(false);
    no_discard.max_discard_sectors = 0;
    r[12..16].copy_from_slice(&0u32.to_le_bytes());
    m.write_slice(&r, GuestAddress(DATA)).unwrap();
    let e = refused(&m, &[rd(HDR, 16), rd(DATA, 16), wr(STATUS, 1)], &no_discard).error;
    assert_eq!(e.status(), VIRTIO_BLK_S_UNSUPP as u8);
    let e = refused(&m, &[rd(HDR, 16), rd(DATA, 16), wr(STATUS, 1)], &disk(true)).error;
    assert_eq!(e, ParseError::ReadOnly);
}

#[test]
fn segment_copies_span_descriptors() {
    let m = mem();
    let segs = [seg(DATA, 3), seg(DATA + 100, 5)];
    assert_eq!(write_segments(&m, &segs, b"abcdefgh").unwrap(), 8);
    let mut out = [0u8; 6];
    read_segments(&m, &segs, 2, &mut out).unwrap();
    assert_eq!(&out, b"cdefgh");
    let mut long = [0u8; 9];
    assert!(read_segments(&m, &segs, 0, &mut long).is_err());
}

/// A descriptor with its NEXT flag and index as given.
fn raw(addr: u64, len: u32, flags: u32, next: u16) -> RawDescriptor {
    RawDescriptor::from(SplitDescriptor::new(addr, len, flags as u16, next))
}

/// Parses the first chain of `descs`, stored in a 16-entry table as they
/// are (NEXT flags and indices untouched).
fn run_raw(mem: &GuestMemoryMmap<()>, descs: &[RawDescriptor], disk: &DiskLimits) -> Result<Request, Refused> {
    let queue = MockSplitQueue::new(mem, 16);
    let chain = queue.build_multiple_desc_chains(descs).unwrap();
    parse(chain, mem, disk, &mut Vec::new())
}

/// A disk whose descriptor limit (seg_max + 2) is the 16-entry table.
fn disk_as_long_as_the_table() -> DiskLimits {
    DiskLimits { seg_max: 14, ..disk(false) }
}

use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT};
const NEXT: u32 = VRING_DESC_F_NEXT;
const WRITE: u32 = VRING_DESC_F_WRITE;

#[test]
fn chain_that_loops_is_refused() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    // Header, then two writable descriptors naming each other.
    let looped = [raw(HDR, 16, NEXT, 1), raw(DATA, 512, NEXT | WRITE, 2), raw(STATUS, 1, NEXT | WRITE, 1)];
    let r = run_raw(&m, &looped, &disk_as_long_as_the_table()).unwrap_err();
    assert_eq!((r.error, r.status), (ParseError::Truncated, None));
    assert_eq!(r.error.status(), VIRTIO_BLK_S_IOERR as u8);
    // With a descriptor limit under the table's size, the limit stops it first.
    let r = run_raw(&m, &looped, &disk(false)).unwrap_err();
    assert_eq!(r.error, ParseError::TooManyDescriptors(10));
}

#[test]
fn chain_that_outgrows_the_queue_is_refused() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    // All 16 entries in a line, the last naming a 17th.
    let mut line = vec![raw(HDR, 16, NEXT, 1)];
    line.extend((1..16u16).map(|i| raw(DATA + u64::from(i) * 512, 512, NEXT | WRITE, (i + 1) % 16)));
    let r = run_raw(&m, &line, &disk_as_long_as_the_table()).unwrap_err();
    assert_eq!(r.error, ParseError::Truncated);
    // A next index past the table's end.
    let past = [raw(HDR, 16, NEXT, 1), raw(STATUS, 1, NEXT | WRITE, 16)];
    let r = run_raw(&m, &past, &disk(false)).unwrap_err();
    assert_eq!(r.error, ParseError::Truncated);
}

#[test]
fn header_of_the_wrong_size_is_ioerr() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    // No readable byte at all.
    let r = refused(&m, &[wr(DATA, 512), wr(STATUS, 1)], &disk(false));
    assert_eq!((r.error, r.status), (ParseError::ShortHeader(0), Some(GuestAddress(STATUS))));
    // A 24-byte header descriptor: 8 readable bytes a read cannot take.
    let r = refused(&m, &[rd(HDR, 24), wr(DATA, 512), wr(STATUS, 1)], &disk(false));
    assert_eq!(r.error, ParseError::WrongDirection);
    assert_eq!(r.error.status(), VIRTIO_BLK_S_IOERR as u8);
    // A header split over descriptors of 5 and 11 bytes is a header.
    assert!(run(&m, &[rd(HDR, 5), rd(HDR + 5, 11), wr(DATA, 512), wr(STATUS, 1)], &disk(false)).0.is_ok());
}

#[test]
fn io_straddling_the_end_is_ioerr() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_OUT, (1 << 20) / 512 - 1);
    let r = refused(&m, &[rd(HDR, 16), rd(DATA, 1024), wr(STATUS, 1)], &disk(false));
    assert_eq!(r.error, ParseError::PastEnd { offset: (1 << 20) - 512, len: 1024 });
    assert_eq!(r.status, Some(GuestAddress(STATUS)));
    // The same for the sector of a discard range.
    header(&m, VIRTIO_BLK_T_DISCARD, 0);
    let mut range = [0u8; 16];
    range[0..8].copy_from_slice(&((1u64 << 20) / 512).to_le_bytes());
    range[8..12].copy_from_slice(&8u32.to_le_bytes());
    m.write_slice(&range, GuestAddress(DATA)).unwrap();
    let r = refused(&m, &[rd(HDR, 16), rd(DATA, 16), wr(STATUS, 1)], &disk(false));
    assert_eq!(r.error, ParseError::PastEnd { offset: 1 << 20, len: 4096 });
}

#[test]
fn indirect_table_outside_memory_is_refused() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    let indirect = VRING_DESC_F_INDIRECT;
    let far = MEM_BYTES as u64 + 0x1000;
    // The head names a table outside memory: the chain is empty.
    let r = run_raw(&m, &[raw(far, 48, indirect, 0)], &disk(false)).unwrap_err();
    assert_eq!((r.error, r.status), (ParseError::NoStatus, None));
    // A table straddling the end of memory.
    let r = run_raw(&m, &[raw(MEM_BYTES as u64 - 16, 48, indirect, 0)], &disk(false)).unwrap_err();
    assert_eq!(r.status, None);
    // Reached from a header descriptor: the chain stops at a NEXT flag.
    let r = run_raw(&m, &[raw(HDR, 16, NEXT, 1), raw(far, 48, indirect, 0)], &disk(false)).unwrap_err();
    assert_eq!(r.error, ParseError::Truncated);
    // A table length that is not a whole number of descriptors.
    let r = run_raw(&m, &[raw(HDR, 16, NEXT, 1), raw(DATA, 20, indirect, 0)], &disk(false)).unwrap_err();
    assert_eq!(r.error, ParseError::Truncated);
    // A table in memory whose data descriptor is not.
    const TABLE: u64 = 0x38_0000;
    let table = [raw(HDR, 16, NEXT, 1), raw(far, 512, NEXT | WRITE, 2), raw(STATUS, 1, WRITE, 0)];
    for (i, d) in table.iter().enumerate() {
        m.write_obj(*d, GuestAddress(TABLE + 16 * i as u64)).unwrap();
    }
    let r = run_raw(&m, &[raw(TABLE, 48, indirect, 0)], &disk(false)).unwrap_err();
    assert_eq!(r.error, ParseError::OutsideMemory { addr: far, len: 512 });
    assert_eq!(r.error.status(), VIRTIO_BLK_S_IOERR as u8);
}
