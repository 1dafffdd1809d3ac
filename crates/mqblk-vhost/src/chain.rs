//! Reading a request's descriptor chain (virtio 1.2, 2.7.5 and 2.7.5.3):
//! the descriptors of the chain at a head index, an indirect table
//! followed, as request.rs's parser takes them.
//!
//! The walk keeps virtio-queue's rules (its `DescriptorChain` iterator),
//! so a chain reads the same whichever reads it: no more descriptors than
//! the table they are in holds (a loop ends there), a `next` past the
//! table ends the chain, as does a second indirect table (one nested, or
//! one after another), a table whose length is not whole descriptors or
//! more than 65535 of them, a chain of more than 4 GiB of buffers
//! (2.7.5.2), or a descriptor outside guest memory. request.rs refuses a
//! chain that ended early (its last descriptor still names a next).
//!
//! What differs is how descriptors are read. virtio-queue reads each with
//! a guest memory access of its own (a region search and a 16-byte copy,
//! about 150 instructions); a Linux guest puts every request of more than
//! one descriptor in an indirect table, so here an indirect table is
//! copied with one access, as many descriptors as a request may have, into
//! a buffer the queue keeps, and walked there. A descriptor past that
//! copy, or in a table the copy cannot read (one that runs past a memory
//! region), is read on its own as before.
//!
//! Relies on: vm-memory (`get_slice`, `read_obj`); virtio-queue's split
//! `Descriptor`.

use virtio_queue::desc::split::Descriptor;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

use crate::queue::Mem;

/// Bytes of one split descriptor.
const DESC_BYTES: usize = 16;

/// A queue's copy of the indirect table of the chain it reads.
pub struct ChainReader {
    /// Room for the descriptors a request may have (and one more, so that
    /// the parser sees a chain that has too many).
    copy: Vec<u8>,
}

impl ChainReader {
    /// A reader for chains of up to `max_descs` descriptors read from a
    /// copy (longer ones are read on, a descriptor at a time).
    pub fn new(max_descs: usize) -> Self {
        Self { copy: vec![0; (max_descs + 1) * DESC_BYTES] }
    }

    /// The chain whose head is entry `head` of the descriptor table at
    /// `desc_table`, of `queue_size` entries.
    pub fn chain<'a>(&'a mut self, mem: &'a Mem, desc_table: GuestAddress, queue_size: u16, head: u16) -> Chain<'a> {
        Chain {
            mem,
            table: desc_table,
            table_len: queue_size,
            next: head,
            ttl: queue_size,
            bytes: 0,
            indirect: false,
            copy: &mut self.copy,
            copied: 0,
        }
    }
}

/// The descriptors of one chain, in order (an `Iterator`).
pub struct Chain<'a> {
    mem: &'a Mem,
    /// The table being walked: the ring's, then perhaps an indirect one.
    table: GuestAddress,
    /// Its entries.
    table_len: u16,
    /// The entry to read next.
    next: u16,
    /// Descriptors the chain may still yield from this table.
    ttl: u16,
    /// Buffer bytes yielded so far.
    bytes: u32,
    indirect: bool,
    copy: &'a mut Vec<u8>,
    /// Descriptors of the indirect table in `copy` (0: none copied).
    copied: usize,
}

impl Chain<'_> {
    /// Entry `index` of the table walked.
    #[inline(always)]
    fn read(&self, index: u16) -> Option<Descriptor> {
        let i = usize::from(index);
        if i < self.copied {
            // struct virtq_desc, little-endian: addr, len, flags, next.
            let b: &[u8; DESC_BYTES] = self.copy[i * DESC_BYTES..][..DESC_BYTES].try_into().expect("16 bytes");
            let (addr, len) =
                (u64::from_le_bytes(b[0..8].try_into().expect("8")), u32::from_le_bytes([b[8], b[9], b[10], b[11]]));
            return Some(Descriptor::new(
                addr,
                len,
                u16::from_le_bytes([b[12], b[13]]),
                u16::from_le_bytes([b[14], b[15]]),
            ));
        }
        let at = self.table.0.checked_add(u64::from(index) * DESC_BYTES as u64)?;
        self.mem.read_obj::<Descriptor>(GuestAddress(at)).ok()
    }

    /// Walks the indirect table `desc` names from now on; None if the
    /// chain ends instead (see the module header).
    fn enter_table(&mut self, desc: &Descriptor) -> Option<()> {
        let len = desc.len() as usize;
        if self.indirect || len % DESC_BYTES != 0 || len / DESC_BYTES > usize::from(u16::MAX) {
            return None;
        }
        let entries = (len / DESC_BYTES) as u16;
        (self.table, self.table_len, self.next, self.ttl, self.indirect) = (desc.addr(), entries, 0, entries, true);
        let n = usize::from(entries).min(self.copy.len() / DESC_BYTES);
        // The guest may change its table meanwhile: what is copied is one
        // snapshot of it, every byte pattern a descriptor.
        self.copied = match self.mem.get_slice(desc.addr(), n * DESC_BYTES) {
            Ok(slice) => slice.copy_to(&mut self.copy[..n * DESC_BYTES]) / DESC_BYTES,
            Err(_) => 0,
        };
        Some(())
    }
}

impl Iterator for Chain<'_> {
    type Item = Descriptor;

    #[inline]
    fn next(&mut self) -> Option<Descriptor> {
        if self.ttl == 0 || self.next >= self.table_len {
            return None;
        }
        let mut desc = self.read(self.next)?;
        if desc.refers_to_indirect_table() {
            self.enter_table(&desc)?;
            if self.table_len == 0 {
                return None;
            }
            desc = self.read(0)?;
            if desc.refers_to_indirect_table() {
                return None;
            }
        }
        self.bytes = self.bytes.checked_add(desc.len())?;
        if desc.has_next() {
            self.next = desc.next();
            self.ttl -= 1;
        } else {
            self.ttl = 0;
        }
        Some(desc)
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
