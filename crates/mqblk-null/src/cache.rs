//! The null device's volatile write cache (null_blk's `cache_size`, MiB)
//! and the power cut it makes meaningful.
//!
//! With a cache, a write is acknowledged once its pages sit in the cache;
//! the memory store behind it (mem/) is the medium, the durable state.
//! FLUSH writes every cached page back; a FUA write goes to the medium
//! directly (and into a cached copy of its pages, so reads stay coherent);
//! discard and write zeroes reach the medium at once (stronger than a disk
//! need be, never weaker). A full cache is written back whole before the
//! next page is taken (null_blk writes back part of it), so it holds at
//! most `cache_size` of unflushed data.
//!
//! A power cut drops every cached page: what no FLUSH or FUA made durable
//! is lost, and the device goes on at once with exactly the durable state.
//! With `powercut_tear=1` each cached page first reaches the medium
//! block by block at random, as a multi-block write interrupted by a
//! power loss may leave some blocks new and some old. The unit is the
//! logical block (`bs`): the kernel takes a device's logical block as
//! the least it writes atomically, so a tear never splits one. (At
//! bs=512 that may split ext4's 1,024-byte superblock, which ext4 then
//! refuses to mount until fsck restores it from a backup: what a
//! 512-byte disk may really do.)
//!
//! A cut that holds the power off (`power_off`, until `power_on`) also
//! drops every write, write zeroes, discard and flush that comes after it,
//! acknowledged as done (dm-flakey's drop_writes): a file system still
//! mounted on the device cannot write anything after the cut, however it
//! is unmounted, and comes back with the durable state, as from a real
//! power loss. Reads are served meanwhile.
//!
//! Every request holds the cache's lock while it moves its data, so a power
//! cut falls between requests, never inside one. Pages are recycled
//! through a free list and the map is sized once: after warm-up no request
//! allocates.
//!
//! With `cache_mode=writethrough` every write goes to the medium as well
//! (a FUA write, always): the cache then loses nothing at a power cut and
//! the device advertises none.
//!
//! The medium may fail (a file-backed one, store.rs): a write-back that
//! fails keeps every page in the cache and fails the request that asked
//! for it, so nothing acknowledged is dropped.
//!
//! Relies on: store.rs (`Store`: read, write, zero at byte positions,
//! sync) for the medium; parking_lot for the lock.

use std::collections::HashMap;
use std::io;

use parking_lot::Mutex;

use super::store::Store;

const PAGE: usize = 4096;
type Page = Box<[u8; PAGE]>;

pub(crate) struct WriteCache {
    inner: Mutex<Inner>,
    capacity_pages: usize,
    /// With `powercut_tear`, the unit a power cut tears a page into: the
    /// logical block size.
    tear_block: Option<usize>,
    writethrough: bool,
}

struct Inner {
    /// Cached pages by page number: whole pages, the medium's bytes with
    /// the unflushed writes applied.
    pages: HashMap<u64, Page>,
    free: Vec<Page>,
    rng: u64,
    /// Pages dropped by power cuts, and their blocks that reached the
    /// medium anyway (`powercut_tear`).
    lost_pages: u64,
    torn_blocks: u64,
    /// Powered off: writes, zeroes and flushes are dropped.
    off: bool,
    /// Requests dropped while off.
    dropped: u64,
}

impl WriteCache {
    /// A cache of `cache_bytes`; `tear_block` is the logical block size a
    /// power cut tears pages into, or None to drop them whole.
    pub(crate) fn new(cache_bytes: u64, tear_block: Option<usize>, writethrough: bool) -> Self {
        assert!(tear_block.map_or(true, |b| b.is_power_of_two() && (512..=PAGE).contains(&b)));
        let capacity_pages = (cache_bytes / PAGE as u64).max(1) as usize;
        Self {
            inner: Mutex::new(Inner {
                pages: HashMap::with_capacity(capacity_pages),
                free: Vec::with_capacity(capacity_pages),
                rng: 0x706f_7765_7263_7574,
                lost_pages: 0,
                torn_blocks: 0,
                off: false,
                dropped: 0,
            }),
            capacity_pages,
            tear_block,
            writethrough,
        }
    }

    /// Reads `out` at byte `pos`: cached pages from the cache, the rest
    /// from the medium.
    pub(crate) fn read(&self, mem: &Store, pos: u64, out: &mut [u8]) -> io::Result<()> {
        let inner = self.inner.lock();
        let mut res = Ok(());
        for_pages(pos, out.len(), |page, offset, at, n| match inner.pages.get(&page) {
            Some(p) => out[at..at + n].copy_from_slice(&p[offset..offset + n]),
            None if res.is_ok() => res = mem.read(pos + at as u64, &mut out[at..at + n]),
            None => {}
        });
        res
    }

    /// A write: into the cache (acknowledged from there), or with `fua`
    /// (or write-through) to the medium, made durable, as well.
    pub(crate) fn write(&self, mem: &Store, pos: u64, data: &[u8], fua: bool) -> io::Result<()> {
        let mut inner = self.inner.lock();
        if inner.drop_while_off() {
            return Ok(());
        }
        if fua || self.writethrough {
            mem.write(pos, data)?;
            mem.sync()?;
            for_pages(pos, data.len(), |page, offset, at, n| {
                if let Some(p) = inner.pages.get_mut(&page) {
                    p[offset..offset + n].copy_from_slice(&data[at..at + n]);
                }
            });
            return Ok(());
        }
        let mut res = Ok(());
        for_pages(pos, data.len(), |page, offset, at, n| {
            if res.is_err() {
                return;
            }
            if !inner.pages.contains_key(&page) && inner.pages.len() >= self.capacity_pages {
                res = inner.write_back(mem);
                if res.is_err() {
                    return;
                }
            }
            match inner.page(mem, page) {
                Ok(p) => p[offset..offset + n].copy_from_slice(&data[at..at + n]),
                Err(e) => res = Err(e),
            }
        });
        res
    }

    /// Discard or write zeroes: the medium is zeroed at once (its pages
    /// or blocks kept with `nounmap`), and so are cached copies.
    pub(crate) fn zero(&self, mem: &Store, pos: u64, len: u64, nounmap: bool) -> io::Result<()> {
        let mut inner = self.inner.lock();
        if inner.drop_while_off() {
            return Ok(());
        }
        if nounmap {
            mem.zero_in_place(pos, len)?;
        } else {
            mem.zero(pos, len)?;
        }
        for_pages(pos, len as usize, |page, offset, _, n| {
            if let Some(p) = inner.pages.get_mut(&page) {
                p[offset..offset + n].fill(0);
            }
        });
        Ok(())
    }

    /// FLUSH: every cached page to the medium, made durable there.
    pub(crate) fn flush(&self, mem: &Store) -> io::Result<()> {
        let mut inner = self.inner.lock();
        if inner.drop_while_off() {
            return Ok(());
        }
        inner.write_back(mem)?;
        mem.sync()
    }

    /// Power cut: drops the cache (tearing its pages into the medium
    /// first with `powercut_tear`). Returns the pages lost.
    pub(crate) fn power_cut(&self, mem: &Store, hold_off: bool) -> u64 {
        let mut inner = self.inner.lock();
        inner.off |= hold_off;
        let nr = inner.pages.len() as u64;
        let Inner { pages, free, rng, lost_pages, torn_blocks, .. } = &mut *inner;
        for (page, p) in pages.drain() {
            if let Some(block) = self.tear_block {
                for at in (0..PAGE).step_by(block) {
                    *rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    if *rng >> 63 == 1 {
                        // A block the medium refuses is simply not torn.
                        let ok = mem.write(page * PAGE as u64 + at as u64, &p[at..at + block]).is_ok();
                        *torn_blocks += u64::from(ok);
                    }
                }
            }
            free.push(p);
        }
        *lost_pages += nr;
        nr
    }

    /// Powers a device held off by `power_cut` on again. Returns the
    /// requests dropped while it was off; false if it was on.
    pub(crate) fn power_on(&self) -> Option<u64> {
        let mut inner = self.inner.lock();
        if !inner.off {
            return None;
        }
        inner.off = false;
        Some(std::mem::take(&mut inner.dropped))
    }

    /// (cached pages, pages lost to power cuts, blocks torn into the
    /// medium by them, powered off).
    pub(crate) fn counts(&self) -> (usize, u64, u64, bool) {
        let inner = self.inner.lock();
        (inner.pages.len(), inner.lost_pages, inner.torn_blocks, inner.off)
    }
}

impl Inner {
    /// While off, a request that would change the medium is dropped.
    fn drop_while_off(&mut self) -> bool {
        self.dropped += u64::from(self.off);
        self.off
    }

    /// The cached copy of `page`, made from the medium's bytes if absent.
    fn page(&mut self, mem: &Store, page: u64) -> io::Result<&mut Page> {
        use std::collections::hash_map::Entry;
        match self.pages.entry(page) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(e) => {
                let mut p = self.free.pop().unwrap_or_else(|| Box::new([0; PAGE]));
                if let Err(err) = mem.read(page * PAGE as u64, &mut p[..]) {
                    self.free.push(p);
                    return Err(err);
                }
                Ok(e.insert(p))
            }
        }
    }

    /// Every cached page to the medium; on an error every page stays
    /// cached (those written already are written again next time).
    fn write_back(&mut self, mem: &Store) -> io::Result<()> {
        for (&page, p) in &self.pages {
            mem.write(page * PAGE as u64, &p[..])?;
        }
        self.free.extend(self.pages.drain().map(|(_, p)| p));
        Ok(())
    }
}

/// Calls `f(page, offset in page, offset in the buffer, length)` for each
/// page piece of `[pos, pos + len)`.
fn for_pages(pos: u64, len: usize, mut f: impl FnMut(u64, usize, usize, usize)) {
    let mut at = 0;
    while at < len {
        let abs = pos + at as u64;
        let offset = (abs % PAGE as u64) as usize;
        let n = (PAGE - offset).min(len - at);
        f(abs / PAGE as u64, offset, at, n);
        at += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::MemStore;

    fn read(c: &WriteCache, m: &Store, pos: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0xee; len];
        c.read(m, pos, &mut out).unwrap();
        out
    }

    fn medium(m: &Store, pos: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0xee; len];
        m.read(pos, &mut out).unwrap();
        out
    }

    #[test]
    fn writes_are_cached_until_flush_and_lost_at_a_power_cut() {
        let m = Store::Memory(MemStore::new(1 << 24));
        let c = WriteCache::new(1 << 20, None, false);
        c.write(&m, 1000, &[1; 5000], false).unwrap();
        assert_eq!(read(&c, &m, 1000, 5000), vec![1; 5000]);
        assert_eq!(medium(&m, 1000, 5000), vec![0; 5000], "nothing durable yet");
        c.flush(&m).unwrap();
        assert_eq!(medium(&m, 1000, 5000), vec![1; 5000]);
        c.write(&m, 1000, &[2; 100], false).unwrap();
        assert_eq!(c.power_cut(&m, false), 1);
        assert_eq!(read(&c, &m, 1000, 5000), vec![1; 5000], "the flushed state came back");
        assert_eq!(c.counts(), (0, 1, 0, false));
    }

    #[test]
    fn fua_is_durable_and_coherent_with_cached_neighbours() {
        let m = Store::Memory(MemStore::new(1 << 24));
        let c = WriteCache::new(1 << 20, None, false);
        c.write(&m, 0, &[1; 4096], false).unwrap();
        c.write(&m, 512, &[2; 512], true).unwrap();
        let mut want = vec![1u8; 4096];
        want[512..1024].fill(2);
        assert_eq!(read(&c, &m, 0, 4096), want);
        c.power_cut(&m, false);
        let mut durable = vec![0u8; 4096];
        durable[512..1024].fill(2);
        assert_eq!(read(&c, &m, 0, 4096), durable, "only the FUA sector survived");
    }

    #[test]
    fn a_full_cache_is_written_back_before_it_takes_another_page() {
        let m = Store::Memory(MemStore::new(1 << 24));
        let c = WriteCache::new(2 * 4096, None, false);
        c.write(&m, 0, &[1; 8192], false).unwrap();
        assert_eq!(c.counts().0, 2);
        c.write(&m, 8192, &[2; 10], false).unwrap();
        assert_eq!(c.counts().0, 1, "written back whole, then the new page");
        assert_eq!(medium(&m, 0, 8192), vec![1; 8192]);
        c.power_cut(&m, false);
        assert_eq!(read(&c, &m, 8192, 10), vec![0; 10]);
    }

    #[test]
    fn zeroes_reach_the_medium_and_the_cached_copy() {
        let m = Store::Memory(MemStore::new(1 << 24));
        let c = WriteCache::new(1 << 20, None, false);
        m.write(0, &[9; 8192]).unwrap();
        c.write(&m, 0, &[1; 100], false).unwrap();
        c.zero(&m, 0, 8192, false).unwrap();
        assert_eq!(read(&c, &m, 0, 8192), vec![0; 8192]);
        c.power_cut(&m, false);
        assert_eq!(read(&c, &m, 0, 8192), vec![0; 8192]);
    }

    #[test]
    fn held_off_it_drops_every_change_until_power_on() {
        let m = Store::Memory(MemStore::new(1 << 24));
        let c = WriteCache::new(1 << 20, None, false);
        c.write(&m, 0, &[1; 4096], false).unwrap();
        c.flush(&m).unwrap();
        c.write(&m, 0, &[2; 4096], false).unwrap();
        assert_eq!(c.power_cut(&m, true), 1);
        c.write(&m, 0, &[3; 4096], false).unwrap();
        c.write(&m, 4096, &[3; 4096], true).unwrap();
        c.zero(&m, 0, 4096, false).unwrap();
        c.flush(&m).unwrap();
        assert_eq!(read(&c, &m, 0, 8192)[..4096], [1; 4096], "the durable state, untouched");
        assert_eq!(read(&c, &m, 4096, 4096), vec![0; 4096]);
        assert!(c.counts().3);
        assert_eq!(c.power_on(), Some(4), "four requests dropped");
        assert_eq!(c.power_on(), None, "already on");
        c.write(&m, 0, &[4; 4096], true).unwrap();
        assert_eq!(medium(&m, 0, 4096), vec![4; 4096]);
    }

    /// Tears BYTES of cached writes at `block`; asserts every block came
    /// out whole, old or new, and both kinds occur.
    fn torn_cut_at(block: usize) {
        // 16 pages, 4 under Miri (each page's copy and check is interpreted).
        const BYTES: usize = if cfg!(miri) { 16384 } else { 65536 };
        let m = Store::Memory(MemStore::new(1 << 24));
        let c = WriteCache::new(1 << 20, Some(block), false);
        m.write(0, &[1; BYTES]).unwrap();
        c.write(&m, 0, &[2; BYTES], false).unwrap();
        c.power_cut(&m, false);
        let after = medium(&m, 0, BYTES);
        let mut new = 0;
        for b in after.chunks(block) {
            // One slice comparison, not a byte loop (Miri runs this test).
            assert!(b == vec![b[0]; block].as_slice(), "a {block}-byte block is never torn inside");
            assert!(b[0] == 1 || b[0] == 2);
            new += usize::from(b[0] == 2);
        }
        let (cached, lost, torn, _) = c.counts();
        assert_eq!((cached, lost), (0, BYTES as u64 / 4096));
        assert_eq!(torn, new as u64);
        let blocks = BYTES / block;
        assert!(new > 0 && new < blocks, "some blocks new, some old: {new} of {blocks}");
    }

    #[test]
    fn a_torn_power_cut_leaves_each_512_byte_block_old_or_new() {
        torn_cut_at(512);
    }

    #[test]
    fn a_torn_power_cut_never_splits_a_4k_logical_block() {
        torn_cut_at(4096);
    }
}
