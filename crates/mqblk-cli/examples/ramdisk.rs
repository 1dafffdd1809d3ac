//! A block driver written outside mqblk: a RAM disk registered as `ram`
//! with a typed config, then offered to the whole `mqblk` command line:
//!
//! ```text
//! cargo run -p mqblk-cli --example ramdisk -- bench --device ram:size_mb=64 \
//!     --rw=randwrite --bs=4k --iodepth=16 --size=8m --verify=crc32c
//! cargo run -p mqblk-cli --example ramdisk -- serve --device ram:size_mb=64 --unix /tmp/ram.sock
//! ```
//!
//! It shows a [`DriverConfig`] that parses, checks and prints back its
//! key; a [`Driver`] that completes requests inline in `queue_rq`; and two
//! capabilities: [`DirectAccess`] (`mqblk serve` sends reads of 64 KiB and
//! more straight from the disk's memory) and [`BlockStatus`] (NBD's
//! base:allocation). The memory, allocated at open, is in fixed-size
//! chunks, each behind its own lock; a chunk never written, or left all
//! zeros by a discard or write zeroes, is a hole.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use mqblk::config::{check_range, ConfigError, SpecParams, SpecWriter};
use mqblk::driver::{extents_by, BlockStatus, Capabilities, DirectAccess, Driver, DriverConfig, QueueRqResult, ReadFn};
use mqblk::driver::{Hctx, Rq};
use mqblk::{Op, QueueLimits, Status, TagSetConfig};

/// Direct reads and block-status queries served, for the closing line.
static DIRECT_READS: AtomicU64 = AtomicU64::new(0);
static BLOCK_STATUS_QUERIES: AtomicU64 = AtomicU64::new(0);

/// Bytes per chunk: the unit of locking and of the hole map.
const CHUNK_BYTES: u64 = 64 << 10;
const DEFAULT_SIZE_MB: u64 = 64;
/// The largest disk (16 GiB), all of it allocated at open.
const MAX_SIZE_MB: u64 = 16 << 10;

/// A `ram:` spec, typed: `size_mb`, the size in MiB.
#[derive(Debug, Clone)]
struct RamConfig {
    size_mb: u64,
}

/// A `ram:` spec's keys, typed (what `register_driver_config` takes).
fn parse(p: &SpecParams) -> Result<Box<dyn DriverConfig>, ConfigError> {
    p.check_keys(&["size_mb"])?;
    Ok(Box::new(RamConfig { size_mb: p.u64_in("size_mb", DEFAULT_SIZE_MB, 1, MAX_SIZE_MB)? }))
}

impl DriverConfig for RamConfig {
    fn driver_name(&self) -> &str {
        "ram"
    }
    fn validate(&self) -> Result<(), ConfigError> {
        check_range("ram", "size_mb", self.size_mb, (1, MAX_SIZE_MB))
    }
    fn write_spec(&self, w: &mut SpecWriter) {
        w.pair_if_not("size_mb", self.size_mb, DEFAULT_SIZE_MB);
    }
    fn open(&self) -> Result<Box<dyn Driver>, mqblk::Error> {
        Ok(Box::new(RamDisk::new(self.size_mb << 20)))
    }
}

/// One chunk of the disk.
struct Chunk {
    bytes: Box<[u8]>,
    /// Written since it was last wholly zeroed: false reads as a hole.
    has_data: bool,
}

struct RamDisk {
    size_bytes: u64,
    chunks: Box<[RwLock<Chunk>]>,
}

impl RamDisk {
    fn new(size_bytes: u64) -> Self {
        assert!(size_bytes > 0 && size_bytes % CHUNK_BYTES == 0, "size {size_bytes} is whole chunks");
        let chunk = || RwLock::new(Chunk { bytes: vec![0; CHUNK_BYTES as usize].into(), has_data: false });
        Self { size_bytes, chunks: (0..size_bytes / CHUNK_BYTES).map(|_| chunk()).collect() }
    }

    /// Chunk `index`, locked (a writer that panicked left a torn write, as a power cut would).
    fn read(&self, index: usize) -> RwLockReadGuard<'_, Chunk> {
        self.chunks[index].read().unwrap_or_else(PoisonError::into_inner)
    }
    fn write(&self, index: usize) -> RwLockWriteGuard<'_, Chunk> {
        self.chunks[index].write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Splits `[pos, pos + len)` at chunk boundaries, in order: `f(chunk
/// index, byte range within the chunk, bytes of the range before it)`.
fn by_chunk(pos: u64, len: u64, mut f: impl FnMut(usize, std::ops::Range<usize>, usize)) {
    let (end, mut at) = (pos + len, pos);
    while at < end {
        let start = (at % CHUNK_BYTES) as usize;
        let n = (CHUNK_BYTES - at % CHUNK_BYTES).min(end - at) as usize;
        f((at / CHUNK_BYTES) as usize, start..start + n, (at - pos) as usize);
        at += n as u64;
    }
}

impl Driver for RamDisk {
    fn name(&self) -> &str {
        "ram"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(2, 64)
    }
    fn limits(&self) -> QueueLimits {
        let mut limits = QueueLimits::new(self.size_bytes, 512);
        limits.max_discard_sectors = u32::MAX >> 9;
        limits.max_write_zeroes_sectors = u32::MAX >> 9;
        limits
    }

    /// Moves the data under each chunk's lock and completes at once.
    fn queue_rq(&self, _hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
        match rq.op() {
            Op::Read => rq.for_each_segment_mut(|pos, buf| {
                by_chunk(pos, buf.len() as u64, |i, range, at| {
                    buf[at..at + range.len()].copy_from_slice(&self.read(i).bytes[range]);
                });
            }),
            Op::Write => rq.for_each_segment(|pos, data| {
                by_chunk(pos, data.len() as u64, |i, range, at| {
                    let mut chunk = self.write(i);
                    chunk.bytes[range.clone()].copy_from_slice(&data[at..at + range.len()]);
                    chunk.has_data = true;
                });
            }),
            // A chunk left all zeros is a hole again.
            Op::Discard | Op::WriteZeroes => by_chunk(rq.pos_bytes(), rq.len_bytes(), |i, range, _| {
                let mut chunk = self.write(i);
                let whole = range.len() as u64 == CHUNK_BYTES;
                chunk.bytes[range].fill(0);
                chunk.has_data = chunk.has_data && !whole && chunk.bytes.iter().any(|b| *b != 0);
            }),
            // No volatile cache: a completed write is as durable as RAM is.
            Op::Flush => {}
            // Zone operations (the block layer sends them to zoned devices only).
            _ => {
                rq.complete(Status::NotSupp);
                return QueueRqResult::Queued;
            }
        }
        rq.complete(Status::Ok);
        QueueRqResult::Queued
    }

    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities::none().direct_access(self).block_status(self)
    }
}

impl DirectAccess for RamDisk {
    /// One call of `f` per chunk, under that chunk's read lock: a write to
    /// the chunk waits until `f` returns.
    fn read_direct(&self, offset: u64, len: u64, f: &mut ReadFn<'_>) -> Option<std::io::Result<()>> {
        DIRECT_READS.fetch_add(1, Ordering::Relaxed);
        let mut result = Ok(());
        by_chunk(offset, len, |i, range, _| {
            if result.is_ok() {
                result = f(&[std::io::IoSlice::new(&self.read(i).bytes[range])]);
            }
        });
        Some(result)
    }
}

impl BlockStatus for RamDisk {
    fn block_status(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) {
        BLOCK_STATUS_QUERIES.fetch_add(1, Ordering::Relaxed);
        extents_by(offset, len, CHUNK_BYTES, out, |pos| !self.read((pos / CHUNK_BYTES) as usize).has_data);
    }

    /// A flag per chunk, read under its lock: as cheap as a lookup.
    fn is_cheap(&self) -> bool {
        true
    }
}

fn main() -> std::process::ExitCode {
    // The one call that makes `ram:size_mb=N` open this driver.
    mqblk::driver::register_driver_config("ram", parse);
    let code = mqblk_cli::run(std::env::args());
    let (reads, queries) = (DIRECT_READS.load(Ordering::Relaxed), BLOCK_STATUS_QUERIES.load(Ordering::Relaxed));
    eprintln!("ramdisk: direct reads {reads}, block status queries {queries}");
    code
}
