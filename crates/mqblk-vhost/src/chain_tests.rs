//! The chain reader against virtio-queue's own `DescriptorChain`: the
//! same descriptors, in the same order, ending at the same place, for
//! chains built to test each rule and for seeded random descriptor tables
//! (a differential test).

use super::*;
use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::RawDescriptor;
use virtio_queue::{Queue, QueueOwnedT, QueueT};

const MEM_BYTES: u64 = 0x1_0000;
/// The ring's descriptor table, then the avail and used rings.
const DESC_TABLE: u64 = 0;
const AVAIL: u64 = 0xe000;
const USED: u64 = 0xf000;
const NEXT: u16 = VRING_DESC_F_NEXT as u16;
const WRITE: u16 = VRING_DESC_F_WRITE as u16;
const INDIRECT: u16 = VRING_DESC_F_INDIRECT as u16;

type Seen = Vec<(u64, u32, u16, u16)>;

fn seen(d: Descriptor) -> (u64, u32, u16, u16) {
    (d.addr().0, d.len(), d.flags(), d.next())
}

fn put(mem: &Mem, at: u64, descs: &[(u64, u32, u16, u16)]) {
    for (i, &(addr, len, flags, next)) in descs.iter().enumerate() {
        let d = RawDescriptor::from(Descriptor::new(addr, len, flags, next));
        mem.write_obj(d, GuestAddress(at + 16 * i as u64)).unwrap();
    }
}

/// The chain at `head` of a ring of `size` as virtio-queue reads it.
fn theirs(mem: &Mem, size: u16, head: u16) -> Seen {
    let mut q = Queue::new(size).unwrap();
    q.set_size(size);
    q.set_desc_table_address(Some(DESC_TABLE as u32), Some(0));
    q.set_avail_ring_address(Some(AVAIL as u32), Some(0));
    q.set_used_ring_address(Some(USED as u32), Some(0));
    q.set_ready(true);
    mem.write_obj(head, GuestAddress(AVAIL + 4)).unwrap();
    mem.write_obj(1u16, GuestAddress(AVAIL + 2)).unwrap();
    let chain = q.iter(mem).unwrap().next().expect("a chain");
    assert_eq!(chain.head_index(), head);
    chain.map(seen).collect()
}

/// The same chain as `ChainReader` reads it, copying up to `max` + 1.
fn ours(mem: &Mem, size: u16, head: u16, max: usize) -> Seen {
    let mut reader = ChainReader::new(max);
    reader.chain(mem, GuestAddress(DESC_TABLE), size, head).map(seen).collect()
}

fn mem() -> Mem {
    Mem::from_ranges(&[(GuestAddress(0), MEM_BYTES as usize)]).unwrap()
}

/// Reads the chain both ways, with copies of several sizes; returns it.
fn same(mem: &Mem, size: u16, head: u16) -> Seen {
    let want = theirs(mem, size, head);
    for max in [0, 1, 3, 64] {
        assert_eq!(ours(mem, size, head, max), want, "copy of {} descriptors", max + 1);
    }
    want
}

#[test]
fn a_chain_in_the_ring_table() {
    let m = mem();
    put(&m, DESC_TABLE, &[(0x1000, 16, NEXT, 2), (0, 0, 0, 0), (0x2000, 512, NEXT | WRITE, 3), (0x3000, 1, WRITE, 0)]);
    assert_eq!(same(&m, 8, 0).len(), 3);
}

#[test]
fn an_indirect_table_after_chained_descriptors() {
    let m = mem();
    put(&m, DESC_TABLE, &[(0x1000, 16, NEXT, 1), (0x4000, 3 * 16, INDIRECT, 0)]);
    put(&m, 0x4000, &[(0x2000, 512, NEXT | WRITE, 2), (0x3000, 1, WRITE, 0), (0x2200, 512, NEXT | WRITE, 1)]);
    assert_eq!(same(&m, 8, 0).iter().map(|d| d.0).collect::<Vec<_>>(), [0x1000, 0x2000, 0x2200, 0x3000]);
}

#[test]
fn a_long_indirect_table_past_the_copy() {
    let m = mem();
    put(&m, DESC_TABLE, &[(0x4000, 40 * 16, INDIRECT, 0)]);
    let table: Vec<_> =
        (0..40u16).map(|i| (0x8000 + u64::from(i) * 512, 512, if i < 39 { NEXT } else { 0 }, i + 1)).collect();
    put(&m, 0x4000, &table);
    assert_eq!(same(&m, 4, 0).len(), 40);
}

#[test]
fn chains_that_end_early() {
    let m = mem();
    // A loop in the ring's table: ends after a table's worth.
    put(&m, DESC_TABLE, &[(0x1000, 16, NEXT, 1), (0x2000, 16, NEXT, 0)]);
    assert_eq!(same(&m, 4, 0).len(), 4);
    // A next past the table.
    put(&m, DESC_TABLE, &[(0x1000, 16, NEXT, 9)]);
    assert_eq!(same(&m, 4, 0).len(), 1);
    // A loop inside an indirect table.
    put(&m, DESC_TABLE, &[(0x4000, 2 * 16, INDIRECT, 0)]);
    put(&m, 0x4000, &[(0x1000, 16, NEXT, 1), (0x2000, 16, NEXT, 0)]);
    assert_eq!(same(&m, 4, 0).len(), 2);
    // Nested tables, a table of no entries, of a partial entry, outside
    // memory, half in it (its first entry, zeros, ends the chain).
    let tables =
        [(16, 0x4000, 1), (0, 0x4000, 1), (24, 0x4000, 1), (32, MEM_BYTES + 0x1000, 1), (32, MEM_BYTES - 16, 2)];
    for (len, at, descs) in tables {
        put(&m, 0x4000, &[(0x5000, 16, INDIRECT, 0)]);
        put(&m, DESC_TABLE, &[(0x1000, 16, NEXT, 1), (at, len, INDIRECT, 0)]);
        assert_eq!(same(&m, 4, 0).len(), descs, "table of {len} bytes at {at:#x}");
    }
    // More than 4 GiB of buffers.
    put(&m, DESC_TABLE, &[(0x1000, u32::MAX, NEXT, 1), (0x2000, 2, 0, 0)]);
    assert_eq!(same(&m, 4, 0).len(), 1);
}

#[test]
fn a_table_across_two_regions_is_read_a_descriptor_at_a_time() {
    let half = MEM_BYTES / 2;
    let m = Mem::from_ranges(&[(GuestAddress(0), half as usize), (GuestAddress(half), half as usize)]).unwrap();
    let at = half - 32;
    put(&m, DESC_TABLE, &[(at, 4 * 16, INDIRECT, 0)]);
    put(&m, at, &[(0x1000, 16, NEXT, 1), (0x2000, 16, NEXT, 2), (0x3000, 16, NEXT, 3), (0x4000, 1, WRITE, 0)]);
    assert_eq!(same(&m, 4, 0).len(), 4);
}

/// A seeded generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_tables_read_as_virtio_queue_reads_them() {
    let m = mem();
    for seed in 0..600 {
        let mut rng = Rng(seed);
        // Memory below the rings is all descriptors, mostly plausible:
        // tables anywhere (sometimes past memory), lengths of a few
        // entries, flags and next indices of every kind.
        let mut table = Vec::with_capacity(AVAIL as usize);
        for _ in 0..AVAIL / 16 {
            let flags = [NEXT, NEXT, NEXT | WRITE, WRITE, 0, INDIRECT, INDIRECT | NEXT][rng.below(7) as usize];
            let addr = if rng.below(20) == 0 { rng.next() } else { rng.below(AVAIL + 64) & !15 };
            let len = match rng.below(4) {
                0 => rng.next() as u32,
                1 => 16 * rng.below(12) as u32,
                _ => 16 * (1 + rng.below(300)) as u32,
            };
            table.extend(addr.to_le_bytes());
            table.extend(len.to_le_bytes());
            table.extend(flags.to_le_bytes());
            table.extend((rng.below(40) as u16).to_le_bytes());
        }
        m.write_slice(&table, GuestAddress(0)).unwrap();
        let size = [1u16, 2, 16, 32, 256][rng.below(5) as usize];
        let head = rng.below(u64::from(size)) as u16;
        same(&m, size, head);
    }
}
