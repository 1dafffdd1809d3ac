//! blktrace for mqblk's own block layer: the events the kernel's
//! kernel/trace/blktrace.c records, at the same points of the path of one
//! I/O, written in blktrace's binary format to NAME.blktrace.N files that
//! Debian's blkparse and btt read unchanged.
//!
//! A device traces when its spec has `blktrace=DIR` (QueueConfig); the
//! files are DIR/NAME.blktrace.N with NAME the driver's name and N a
//! stream (the records' CPU). The event points, as in the kernel:
//!
//! | event | where | kernel tracepoint |
//! |---|---|---|
//! | Q | a bio passed the checks (client/submit.rs) | block_bio_queue |
//! | X | a bio split at a piece's end, payload the next piece's sector | block_split |
//! | M, F | a bio merged at the back, front of a request (plug or scheduler) | block_bio_backmerge, _frontmerge |
//! | G | a request (tag) allocated for a bio or piece | block_getrq |
//! | P | a request added to an empty plug list (plug.rs) | block_plug |
//! | U, T | a plug list issued, by its owner or as it goes to sleep; payload its request count | block_unplug |
//! | I | a request inserted into the scheduler or the dispatch list (hctx/) | block_rq_insert |
//! | D | a request handed to the driver (`start_request`) | block_rq_issue |
//! | R | the driver answered Busy: the request goes back | block_rq_requeue |
//! | C | the request completed, with its errno (hctx/end.rs) | block_rq_complete |
//!
//! Cost when off: the block layer holds `Option<Arc<Tracer>>`s; each
//! event point tests one (the event methods are `#[cold]`, so the
//! compiler lays the traced side out of the hot code). The plain path
//! tests nothing: a traced device sends every bio down the general path
//! (`RequestQueue::plain_max_bytes` is 0), which issues through
//! `HwCtx::issue` (the plain one through `issue_plain`, without the D
//! point), and ends every request through the general end (`plain_end`
//! false), where the event points are. BENCHMARKS.md ("blktrace") has
//! the cost off and on, in instructions per I/O.
//!
//! When on: each thread stamps its events and pushes them into its own
//! stream (stream.rs), and a writer thread drains the streams to the
//! files (writer.rs). Nothing is allocated per event and no producer waits
//! for a file: a full stream drops the event and counts it, as relay does.
//!
//! Relies on: record.rs (the record's layout), stream.rs, writer.rs; bio.rs
//! for ops and flags; clock.rs for time stamps (CLOCK_MONOTONIC, as the
//! kernel's `ktime_get`).

mod record;
mod stream;
mod writer;

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::bio::{Op, ReqFlags, SECTOR_SHIFT};
use crate::sync::Mutex;

pub(crate) use record::Action;
use record::{op_categories, Event, FS_CATEGORY};
use writer::{Shared, Written};

/// The major number of traced devices' `dev_t`: none is registered, and
/// 0 is no real block major (253 and 254, device-mapper's, would make btt
/// treat the device as a remapper). The minor is the trace's number.
const TRACE_MAJOR: u32 = 0;

/// What a finished trace wrote ([`Device::blktrace_stop`](crate::Device::blktrace_stop)).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TraceStats {
    /// Events written to the files.
    pub events: u64,
    /// Events lost: a thread's stream was full when the writer fell behind,
    /// or more threads traced than there are streams.
    pub dropped: u64,
    /// Files written: DIR/NAME.blktrace.0 up to NAME.blktrace.(files - 1).
    pub files: usize,
    /// The files' directory and name, for blkparse's `-D DIR -i NAME`.
    pub dir: std::path::PathBuf,
    pub name: String,
}

/// A running trace of one device.
pub(crate) struct Tracer {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<io::Result<Written>>>>,
    /// Set once the trace stopped (then `result` holds its stats).
    stopped: AtomicBool,
    result: Mutex<Option<Result<TraceStats, String>>>,
}

impl Tracer {
    /// Starts tracing into DIR/NAME.blktrace.N: creates DIR, removes the
    /// files of an earlier trace there, starts the writer.
    pub(crate) fn start(dir: &Path, name: &str) -> io::Result<Arc<Self>> {
        std::fs::create_dir_all(dir)?;
        writer::remove_stale(dir, name)?;
        let streams = stream::Streams::new();
        let minor = streams.id() as u32 & ((1 << 20) - 1);
        let shared = Arc::new(Shared {
            device: record::dev_t(TRACE_MAJOR, minor),
            streams,
            dir: dir.to_path_buf(),
            name: name.to_string(),
            stop: AtomicBool::new(false),
        });
        let for_writer = shared.clone();
        let writer =
            std::thread::Builder::new().name("mqblk-blktrace".into()).spawn(move || writer::run(for_writer))?;
        Ok(Arc::new(Self {
            shared,
            writer: Mutex::new(Some(writer)),
            stopped: AtomicBool::new(false),
            result: Mutex::new(None),
        }))
    }

    /// Stops the trace: the writer drains every stream and closes the
    /// files. Events recorded later are not written. Idempotent.
    pub(crate) fn stop(&self) -> io::Result<TraceStats> {
        let mut result = self.result.lock();
        if result.is_none() {
            *result = Some(self.finish().map_err(|e| e.to_string()));
            self.stopped.store(true, Ordering::Release);
        }
        result.clone().expect("set above").map_err(io::Error::other)
    }

    fn finish(&self) -> io::Result<TraceStats> {
        self.shared.stop.store(true, Ordering::Release);
        let Some(writer) = self.writer.lock().take() else {
            return Err(io::Error::other("blktrace writer already gone"));
        };
        writer.thread().unpark();
        let written = writer.join().map_err(|_| io::Error::other("blktrace writer panicked"))??;
        let streams = &self.shared.streams;
        let full: u64 = streams.claimed().flatten().map(|s| s.dropped.load(Ordering::Relaxed)).sum();
        Ok(TraceStats {
            events: written.events,
            dropped: full + streams.unstreamed.load(Ordering::Relaxed),
            files: written.files,
            dir: self.shared.dir.clone(),
            name: self.shared.name.clone(),
        })
    }

    /// Records `e` on the calling thread's stream.
    #[inline]
    fn record(&self, e: Event) {
        match self.shared.streams.current() {
            Some(stream) => stream.push(e),
            None => {
                self.shared.streams.unstreamed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A bio event: Q, M, F or G (the bio's or piece's position and size).
    #[cold]
    #[inline(never)]
    pub(crate) fn bio(&self, action: Action, op: Op, flags: ReqFlags, sector: u64, nr_sectors: u32) {
        let what = action as u32 | op_categories(op, flags);
        self.record(Event::new(what, sector, sectors_to_bytes(nr_sectors)));
    }

    /// X: the piece at `sector` was split off; the rest starts at `next_sector`.
    #[cold]
    #[inline(never)]
    pub(crate) fn split(&self, op: Op, flags: ReqFlags, sector: u64, nr_sectors: u32, next_sector: u64) {
        let what = Action::Split as u32 | op_categories(op, flags);
        self.record(Event::new(what, sector, sectors_to_bytes(nr_sectors)).with_be64(next_sector));
    }

    /// A request event: I, D, R or C (`errno`: 0, or the completion's).
    #[cold]
    #[inline(never)]
    pub(crate) fn request(&self, action: Action, op: Op, flags: ReqFlags, sector: u64, nr_sectors: u32, errno: i32) {
        let what = action as u32 | op_categories(op, flags) | FS_CATEGORY;
        let mut e = Event::new(what, sector, sectors_to_bytes(nr_sectors));
        // As the kernel: the negative errno, truncated to the field.
        e.error = errno.wrapping_neg() as u16;
        self.record(e);
    }

    /// P: a plug list got its first request.
    #[cold]
    #[inline(never)]
    pub(crate) fn plug(&self) {
        self.record(Event::new(Action::Plug as u32, 0, 0));
    }

    /// U (T if its owner is going to sleep): a plug list of `depth`
    /// requests was issued.
    #[cold]
    #[inline(never)]
    pub(crate) fn unplug(&self, depth: usize, before_sleep: bool) {
        let action = if before_sleep { Action::UnplugTimer } else { Action::UnplugIo };
        self.record(Event::new(action as u32, 0, 0).with_be64(depth as u64));
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if !self.stopped.load(Ordering::Acquire) {
            let _ = self.stop();
        }
    }
}

/// A size in sectors as the record's 32-bit byte count (saturating: a
/// bio is at most 4 GiB, one byte more than the field holds).
fn sectors_to_bytes(nr_sectors: u32) -> u32 {
    (u64::from(nr_sectors) << SECTOR_SHIFT).min(u64::from(u32::MAX)) as u32
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "writes files: Miri's isolation has no mkdir (the streams' tests run under Miri)")]
    fn each_thread_writes_its_own_file_and_stale_files_go() {
        let dir = std::env::temp_dir().join(format!("mqblk-trace-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..3 {
            std::fs::write(dir.join(format!("unit.blktrace.{i}")), b"stale").unwrap();
        }
        let t = Tracer::start(&dir, "unit").unwrap();
        t.plug();
        std::thread::scope(|s| {
            s.spawn(|| {
                t.unplug(3, false);
                t.unplug(4, true);
            });
        });
        let stats = t.stop().unwrap();
        assert_eq!((stats.events, stats.dropped, stats.files), (3, 0, 2));
        let len = |i: usize| std::fs::metadata(writer::file_path(&dir, "unit", i)).map(|m| m.len()).ok();
        // Each file starts with a note naming its thread (48 + 16 bytes).
        assert_eq!(len(0), Some(64 + 48), "P");
        assert_eq!(len(1), Some(64 + 2 * 56), "U and T with their counts");
        assert_eq!(len(2), None, "an earlier trace's file is gone: blkparse would read it");
        assert_eq!(t.stop().unwrap(), stats, "stopping again changes nothing");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
