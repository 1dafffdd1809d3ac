//! The null device's memory backing: sparse 4 KiB pages created on first
//! write, so never-written blocks read as zeros and an untouched 250 GB
//! device costs nothing (null_blk's radix tree of pages, in spirit).
//!
//! Pages are spread over shards by page number (consecutive pages land in
//! different shards), each shard a reader-writer lock over a map. The lock
//! makes concurrent I/O to one page well defined, as the kernel's per-device
//! lock does for null_blk.

use std::collections::HashMap;

use parking_lot::RwLock;

pub(crate) const PAGE_SIZE: u64 = 4096;
const NR_SHARDS: u64 = 64;

type Page = Box<[u8; PAGE_SIZE as usize]>;

pub(crate) struct MemStore {
    shards: Box<[RwLock<HashMap<u64, Page>>]>,
}

/// Splits `[pos, pos + len)` into (page, offset in page, length) pieces.
fn pieces(pos: u64, len: u64) -> impl Iterator<Item = (u64, usize, usize)> {
    let end = pos + len;
    let mut at = pos;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let page = at / PAGE_SIZE;
        let offset = at % PAGE_SIZE;
        let n = (PAGE_SIZE - offset).min(end - at);
        at += n;
        Some((page, offset as usize, n as usize))
    })
}

impl MemStore {
    pub(crate) fn new() -> Self {
        Self { shards: (0..NR_SHARDS).map(|_| RwLock::new(HashMap::new())).collect() }
    }

    fn shard(&self, page: u64) -> &RwLock<HashMap<u64, Page>> {
        &self.shards[(page % NR_SHARDS) as usize]
    }

    /// Copies `[pos, pos + out.len())` into `out`; unwritten bytes are zero.
    pub(crate) fn read(&self, pos: u64, out: &mut [u8]) {
        let mut done = 0;
        for (page, offset, n) in pieces(pos, out.len() as u64) {
            let shard = self.shard(page).read();
            let dst = &mut out[done..done + n];
            match shard.get(&page) {
                Some(p) => dst.copy_from_slice(&p[offset..offset + n]),
                None => dst.fill(0),
            }
            done += n;
        }
    }

    /// Stores `data` at `pos`, creating pages as needed.
    pub(crate) fn write(&self, pos: u64, data: &[u8]) {
        let mut done = 0;
        for (page, offset, n) in pieces(pos, data.len() as u64) {
            let mut shard = self.shard(page).write();
            let p = shard.entry(page).or_insert_with(|| Box::new([0u8; PAGE_SIZE as usize]));
            p[offset..offset + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
    }

    /// Makes `[pos, pos + len)` read as zeros: whole pages are freed,
    /// partial ones zeroed (discard and write-zeroes alike).
    pub(crate) fn zero(&self, pos: u64, len: u64) {
        for (page, offset, n) in pieces(pos, len) {
            let mut shard = self.shard(page).write();
            if n as u64 == PAGE_SIZE {
                shard.remove(&page);
            } else if let Some(p) = shard.get_mut(&page) {
                p[offset..offset + n].fill(0);
            }
        }
    }

    /// Whether the page holding byte `pos` was ever written (and not
    /// discarded since): absent pages read as zeros.
    pub(crate) fn is_present(&self, pos: u64) -> bool {
        let page = pos / PAGE_SIZE;
        self.shard(page).read().contains_key(&page)
    }

    /// Pages currently allocated.
    pub(crate) fn nr_pages(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritten_reads_zero_and_written_reads_back() {
        let m = MemStore::new();
        let mut out = vec![1u8; 10000];
        m.read(1000, &mut out);
        assert!(out.iter().all(|&b| b == 0));
        let data: Vec<u8> = (0..10000u32).map(|i| (i % 251) as u8).collect();
        m.write(1000, &data);
        m.read(1000, &mut out);
        assert_eq!(out, data);
        assert_eq!(m.nr_pages(), 3);
    }

    #[test]
    fn zero_frees_whole_pages_and_clears_partial() {
        let m = MemStore::new();
        m.write(0, &vec![0xaa; 3 * PAGE_SIZE as usize]);
        m.zero(512, 2 * PAGE_SIZE);
        assert_eq!(m.nr_pages(), 2, "the fully covered middle page is freed");
        let mut out = vec![0u8; 3 * PAGE_SIZE as usize];
        m.read(0, &mut out);
        assert!(out[..512].iter().all(|&b| b == 0xaa));
        assert!(out[512..512 + 2 * PAGE_SIZE as usize].iter().all(|&b| b == 0));
        assert!(out[512 + 2 * PAGE_SIZE as usize..].iter().all(|&b| b == 0xaa));
    }
}
