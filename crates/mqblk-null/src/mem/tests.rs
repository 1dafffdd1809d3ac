//! The store's unit tests: semantics, memory accounting, page reuse, and
//! multi-threaded stress with exact accounting (small under Miri).

use std::sync::Arc;
use std::thread;

use super::*;

const PAGE: usize = PAGE_SIZE as usize;

fn store_pages(pages: u64) -> MemStore {
    MemStore::new(pages * PAGE_SIZE)
}

/// True if every byte of `buf` is `byte`: one slice comparison (a memcmp),
/// not a loop over the bytes, which Miri interprets byte by byte (seconds
/// a page).
pub(super) fn filled(buf: &[u8], byte: u8) -> bool {
    buf == vec![byte; buf.len()].as_slice()
}

#[test]
fn unwritten_reads_zero_and_written_reads_back() {
    let m = store_pages(16);
    let mut out = vec![1u8; 10000];
    m.read(1000, &mut out);
    assert!(filled(&out, 0));
    // 0, 1, .., 250, 0, 1, ..: one period made, the rest copied.
    let mut data = (0..251u8).collect::<Vec<u8>>().repeat(40);
    data.truncate(10000);
    m.write(1000, &data);
    m.read(1000, &mut out);
    assert_eq!(out, data);
    assert_eq!(m.nr_pages(), 3);
    assert!(m.is_present(0) && m.is_present(3 * PAGE_SIZE - 1) && !m.is_present(3 * PAGE_SIZE));
}

#[test]
fn zero_frees_whole_pages_and_clears_partial() {
    let m = store_pages(16);
    m.write(0, &[0xaa; 3 * PAGE]);
    m.zero(512, 2 * PAGE_SIZE);
    assert_eq!(m.nr_pages(), 2, "the fully covered middle page is freed");
    let mut out = vec![0u8; 3 * PAGE];
    m.read(0, &mut out);
    assert!(filled(&out[..512], 0xaa));
    assert!(filled(&out[512..512 + 2 * PAGE], 0));
    assert!(filled(&out[512 + 2 * PAGE..], 0xaa));
    m.zero(8 * PAGE_SIZE + 100, 100);
    assert!(!m.is_present(8 * PAGE_SIZE), "zeroing part of an absent page makes no page");
}

/// The device of the test below: 250 GB, or 100 MB under Miri (whose
/// smaller leaves would make a 250 GB top array 3.8 million entries).
const SPARSE_BYTES: u64 = if cfg!(miri) { 100_000_000 } else { 250_000_000_000 };

#[test]
fn a_never_written_250_gb_device_costs_only_the_top_array() {
    let m = MemStore::new(SPARSE_BYTES);
    assert_eq!((m.table.nr_leaves(), m.nr_pages()), (0, 0));
    assert!(m.table.table_bytes() < 256 << 10, "{} bytes", m.table.table_bytes());
    let mut out = vec![1u8; 2 * PAGE];
    m.read(SPARSE_BYTES / 5 * 2, &mut out);
    assert!(filled(&out, 0));
    m.write(SPARSE_BYTES / 5 * 2, &[1; 512]);
    assert_eq!((m.table.nr_leaves(), m.nr_pages()), (1, 1));
}

#[test]
fn past_the_end_reads_zero() {
    let m = MemStore::new(3 * PAGE_SIZE + 1);
    m.write(3 * PAGE_SIZE, &[5]);
    let mut out = [9u8; 2];
    m.read(4 * PAGE_SIZE - 1, &mut out);
    assert_eq!(out, [0, 0]);
    assert!(m.is_present(3 * PAGE_SIZE) && !m.is_present(4 * PAGE_SIZE));
}

#[test]
#[should_panic(expected = "past the end")]
fn a_write_past_the_end_is_a_bug() {
    MemStore::new(PAGE_SIZE).write(PAGE_SIZE, &[1]);
}

/// Full- and partial-page overwrites of 8 pages, `rounds` of each.
fn overwrite(m: &MemStore, rounds: usize) {
    for round in 0..rounds {
        let page = (round % 8) as u64 * PAGE_SIZE;
        m.write(page, &[round as u8; PAGE]);
        m.write(page + 100, &[1; 10]);
    }
}

/// Calls `flush` (moving retirements on) until `done`: retired pages come
/// back after a grace period, which other threads (other tests) may delay
/// but not forever. Bounded by a count, not a clock.
pub(super) fn flush_until(mut done: impl FnMut() -> bool, mut flush: impl FnMut()) -> bool {
    for _ in 0..1_000_000 {
        if done() {
            return true;
        }
        flush();
        thread::yield_now();
    }
    done()
}

/// Pins and flushes until every retired page is back in the arena: the
/// pages its owners hold are exactly the published ones.
fn assert_pages_accounted(m: &MemStore) {
    let arena = m.reclaim.arena();
    let back = flush_until(
        || {
            let (held, published) = (arena.nr_live(), m.nr_pages());
            assert!(held >= published, "{published} pages published but only {held} held");
            held == published
        },
        || m.reclaim.flush(),
    );
    assert!(back, "{} pages held, {} published: retired pages never came back", arena.nr_live(), m.nr_pages());
}

/// Overwriting retires pages to the arena; once they are back, as many
/// overwrites again map no new memory.
#[test]
fn overwrites_reuse_pages() {
    let rounds = if cfg!(miri) { 24 } else { 2000 };
    let m = store_pages(8);
    overwrite(&m, rounds);
    assert_eq!(m.nr_pages(), 8);
    assert_pages_accounted(&m);
    let arena = m.reclaim.arena();
    let chunks = arena.nr_chunks();
    overwrite(&m, rounds);
    assert_pages_accounted(&m);
    assert_eq!(arena.nr_chunks(), chunks, "steady overwrites reuse the pages they retired");
    assert!(arena.nr_resident_chunks() <= 2, "8 live pages: one chunk in use and at most the spare");
}

/// The pages a discard frees go back to the kernel by whole chunks, also
/// after overwrites scattered the live pages over every chunk; what stays
/// is one empty chunk kept as the spare.
#[test]
fn discard_returns_memory_by_chunks() {
    let pages = if cfg!(miri) { 40 } else { 3000 };
    let m = store_pages(pages);
    m.write(0, &vec![3; pages as usize * PAGE]);
    let arena = m.reclaim.arena();
    assert!(arena.nr_resident_chunks() >= 2);
    let mut rng = Rng(7);
    for _ in 0..pages {
        m.write(rng.below(pages) * PAGE_SIZE, &[4; PAGE]);
    }
    m.zero(0, pages * PAGE_SIZE);
    assert_eq!(m.nr_pages(), 0);
    assert_pages_accounted(&m);
    assert_eq!(arena.nr_live(), 0);
    assert!(arena.nr_resident_chunks() <= 1, "{} chunks resident, only a spare may stay", arena.nr_resident_chunks());
}

/// Dropping the store gives its memory back even while a retirement still
/// waits out its grace period somewhere: only that page's chunk stays
/// until it does.
#[test]
fn dropping_the_store_releases_its_chunks() {
    let pages = if cfg!(miri) { 40 } else { 3000 };
    let m = store_pages(pages);
    m.write(0, &vec![3; pages as usize * PAGE]);
    let arena = m.reclaim.arena();
    // Pinned across the overwrite, the retired page cannot come back yet.
    // The pin is the global collector's, which the store uses; under Miri
    // the store has a collector of its own, which runs every deferred
    // function when the store is dropped, so nothing stays pending there.
    #[cfg(not(miri))]
    let pin = crossbeam_epoch::pin();
    m.write(0, &[4; PAGE]);
    drop(m);
    assert!(arena.nr_resident_chunks() <= 1, "{} chunks resident after the drop", arena.nr_resident_chunks());
    #[cfg(not(miri))]
    assert!(arena.preparer_stopped(), "the preparing thread and its ready chunk go with the store");
    #[cfg(not(miri))]
    drop(pin);
    let gone = flush_until(|| arena.nr_resident_chunks() == 0, || crossbeam_epoch::pin().flush());
    assert!(gone, "the retired page's chunk stayed resident: {}", arena.nr_resident_chunks());
}

/// A tiny deterministic generator (xorshift64*).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

struct Stress {
    threads: u64,
    shared_pages: u64,
    private_pages: u64,
    ops: u64,
}

const STRESS: Stress = if cfg!(miri) {
    Stress { threads: 3, shared_pages: 4, private_pages: 2, ops: 6 }
} else {
    Stress { threads: 4, shared_pages: 32, private_pages: 16, ops: 4000 }
};

/// The page's tag if every word of it is the same (0: never written):
/// compared with its first word repeated, one memcmp (a loop over the
/// words costs Miri seconds a page).
fn uniform_tag(page: &[u8]) -> Option<u64> {
    let first = &page[..8];
    (page == first.repeat(page.len() / 8).as_slice()).then(|| u64::from_ne_bytes(first.try_into().unwrap()))
}

/// Reads `pages` pages at `first` and checks each is one whole write.
fn read_uniform(m: &MemStore, first: u64, pages: u64) -> Vec<u64> {
    let mut buf = vec![0u8; (pages * PAGE_SIZE) as usize];
    m.read(first * PAGE_SIZE, &mut buf);
    buf.chunks_exact(PAGE).map(|p| uniform_tag(p).expect("a torn page")).collect()
}

/// One stress thread: whole-page writes, discards and reads over the
/// shared pages and its own; returns the tag each own page should hold.
fn stress_thread(m: &MemStore, t: u64) -> Vec<u64> {
    let s = &STRESS;
    let own_first = s.shared_pages + t * s.private_pages;
    let mut own = vec![0u64; s.private_pages as usize];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
    for seq in 1..=s.ops {
        let private = rng.below(2) == 0;
        let (base, span) = if private { (own_first, s.private_pages) } else { (0, s.shared_pages) };
        let start = rng.below(span);
        let len = 1 + rng.below(3.min(span - start));
        let tag = (t + 1) << 32 | seq;
        let mut scratch = [0u64; 3];
        let mine =
            if private { &mut own[start as usize..(start + len) as usize] } else { &mut scratch[..len as usize] };
        let now = match rng.below(4) {
            0 | 1 => {
                m.write((base + start) * PAGE_SIZE, &tag.to_ne_bytes().repeat((len * PAGE_SIZE / 8) as usize));
                tag
            }
            2 => {
                m.zero((base + start) * PAGE_SIZE, len * PAGE_SIZE);
                0
            }
            _ => {
                let got = read_uniform(m, base + start, len);
                assert!(!private || got == mine, "own pages read back their last write");
                continue;
            }
        };
        mine.fill(now);
    }
    own
}

#[test]
fn stress_pages_stay_whole_and_page_count_is_exact() {
    let s = &STRESS;
    let m = Arc::new(store_pages(s.shared_pages + s.threads * s.private_pages));
    let workers: Vec<_> = (0..s.threads)
        .map(|t| {
            let m = m.clone();
            thread::spawn(move || stress_thread(&m, t))
        })
        .collect();
    let own: Vec<u64> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    let shared = read_uniform(&m, 0, s.shared_pages);
    assert_eq!(read_uniform(&m, s.shared_pages, own.len() as u64), own, "own pages hold their last write");
    let all: Vec<u64> = shared.iter().chain(&own).copied().collect();
    for (page, tag) in all.iter().enumerate() {
        assert_eq!(m.is_present(page as u64 * PAGE_SIZE), *tag != 0, "page {page}");
    }
    assert_eq!(m.nr_pages(), all.iter().filter(|&&t| t != 0).count());
    assert_pages_accounted(&m);
}

/// Threads each rewrite their own quarter of one page: every partial write
/// must survive the others' copy-on-write races (no lost update).
#[test]
fn partial_writes_to_one_page_lose_nothing() {
    const QUARTER: usize = PAGE / 4;
    let rounds: u32 = if cfg!(miri) { 8 } else { 2000 };
    let m = Arc::new(store_pages(1));
    let workers: Vec<_> = (0..4u32)
        .map(|t| {
            let m = m.clone();
            thread::spawn(move || {
                for seq in 1..=rounds {
                    let word = (t << 24 | seq).to_ne_bytes();
                    m.write(t as u64 * QUARTER as u64, &word.repeat(QUARTER / 4));
                    let mut page = vec![0u8; PAGE];
                    m.read(0, &mut page);
                    assert!(page[t as usize * QUARTER..][..QUARTER] == word.repeat(QUARTER / 4), "our write is there");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let mut page = vec![0u8; PAGE];
    m.read(0, &mut page);
    for (t, quarter) in page.chunks_exact(QUARTER).enumerate() {
        assert_eq!(quarter, (((t as u32) << 24) | rounds).to_ne_bytes().repeat(QUARTER / 4));
    }
    assert_eq!(m.nr_pages(), 1);
    // Pages built for a lost race went straight back to the arena.
    assert_pages_accounted(&m);
}

/// Counts the heap allocations of one chosen thread (the test's own), so a
/// test can check that a steady workload does not allocate; every other
/// thread, and every thread while no test counts, passes straight through
/// to the system allocator. Not under Miri (each pin registers with the
/// store's collector there, which allocates by design: reclaim.rs).
#[cfg(not(miri))]
pub(super) mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

    pub(super) struct CountingAlloc;

    /// The counted thread's id, 0 when nothing is counted.
    static COUNTED_TID: AtomicI32 = AtomicI32::new(0);
    static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

    fn count() {
        let tid = COUNTED_TID.load(Ordering::Relaxed);
        // SAFETY: gettid has no preconditions and cannot fail.
        if tid != 0 && tid == unsafe { libc::gettid() } {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
    }

    // SAFETY: every method forwards to `System` with the caller's own
    // arguments, so `System`'s guarantees are ours; counting touches only
    // two atomics and never allocates.
    unsafe impl GlobalAlloc for CountingAlloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            count();
            // SAFETY: forwarded unchanged (impl comment).
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            count();
            // SAFETY: forwarded unchanged (impl comment).
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            count();
            // SAFETY: forwarded unchanged (impl comment).
            unsafe { System.realloc(ptr, layout, new_size) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: forwarded unchanged (impl comment).
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    /// Allocations made by the calling thread while `f` runs.
    pub(in crate::mem) fn allocations_in(f: impl FnOnce()) -> usize {
        // One counted thread at a time (tests may share the process).
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        ALLOCATIONS.store(0, Ordering::Relaxed);
        // SAFETY: as in `count`.
        COUNTED_TID.store(unsafe { libc::gettid() }, Ordering::Relaxed);
        f();
        COUNTED_TID.store(0, Ordering::Relaxed);
        ALLOCATIONS.load(Ordering::Relaxed)
    }
}

#[cfg(not(miri))]
#[global_allocator]
static ALLOCATOR: counting::CountingAlloc = counting::CountingAlloc;

/// Once warm, overwrites and reads allocate nothing per I/O: pages come
/// from the arena's free pages. What remains is crossbeam-epoch's: a full bag
/// of 64 deferred functions moves to its global queue in one allocated
/// node, so at most one allocation per 64 retirements (plus the queue's own
/// node frees, which take bag entries too): asserted as one per 32 writes.
#[cfg(not(miri))]
#[test]
fn steady_overwrites_and_reads_do_not_allocate_per_io() {
    let m = store_pages(8);
    overwrite(&m, 2000);
    // Every retired page back in the pool (or freed): the next
    // `pooled / 2` rounds (two writes each) find a page there every time.
    assert_pages_accounted(&m);
    let rounds = 1000;
    let chunks_before = m.reclaim.arena().nr_chunks();
    let writes = 2 * rounds;
    let allocations = counting::allocations_in(|| overwrite(&m, rounds));
    assert_eq!(m.reclaim.arena().nr_chunks(), chunks_before, "no new chunk: the pages retired are reused");
    assert!(allocations * 32 <= writes, "{allocations} allocations for {writes} overwrites");
    let mut out = [0u8; PAGE];
    let allocations = counting::allocations_in(|| {
        for i in 0..writes {
            m.read((i % 8) as u64 * PAGE_SIZE, &mut out);
        }
    });
    assert_eq!(allocations, 0, "reads allocate nothing");
}
