//! The trace's writer thread (blktrace's reader of the relay files): it
//! drains every stream into its file, NAME.blktrace.INDEX in the trace's
//! directory, and sleeps 1 ms when it finds nothing, so producers never
//! wait for a file. Files are numbered without gaps (blkparse reads
//! NAME.blktrace.0, .1, ... up to the first one missing); a stream with
//! no events leaves an empty file, which blkparse skips.
//!
//! Relies on: stream.rs for the streams (the writer is each ring's only
//! consumer), record.rs for the encoding.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::record::{Action, Event, MAX_PDU_BYTES, RECORD_BYTES};
use super::stream::Streams;

/// The writer's idle sleep (a stream fills in about 5 ms at full speed).
const IDLE_SLEEP: Duration = Duration::from_millis(1);
/// Each file's write buffer.
const FILE_BUFFER_BYTES: usize = 256 << 10;

/// What the writer and the producers share.
pub(crate) struct Shared {
    pub(crate) streams: Streams,
    /// The device number in every record.
    pub(crate) device: u32,
    pub(crate) dir: PathBuf,
    pub(crate) name: String,
    /// Set by `Tracer::stop`: drain once more and close the files.
    pub(crate) stop: AtomicBool,
}

impl Shared {
    /// The file of stream `index`.
    pub(crate) fn path(&self, index: usize) -> PathBuf {
        file_path(&self.dir, &self.name, index)
    }
}

/// NAME.blktrace.INDEX in `dir`, as blktrace names its per-CPU files.
pub(crate) fn file_path(dir: &Path, name: &str, index: usize) -> PathBuf {
    dir.join(format!("{name}.blktrace.{index}"))
}

/// Removes NAME.blktrace.0, .1, ... left by an earlier trace, up to the
/// first missing (as far as blkparse would read).
pub(crate) fn remove_stale(dir: &Path, name: &str) -> io::Result<()> {
    for index in 0.. {
        match std::fs::remove_file(file_path(dir, name, index)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What the writer wrote: records, and files.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Written {
    pub(crate) events: u64,
    pub(crate) files: usize,
}

/// The writer thread's body: drain until stopped, then once more.
pub(crate) fn run(shared: Arc<Shared>) -> io::Result<Written> {
    let mut files: Vec<BufWriter<File>> = Vec::new();
    let mut written = Written::default();
    loop {
        // Read before the pass: a pass that starts after the stop was set
        // and finds nothing has drained everything recorded before it.
        let stopping = shared.stop.load(Ordering::Acquire);
        let moved = drain(&shared, &mut files, &mut written)?;
        if stopping && moved == 0 {
            break;
        }
        if moved == 0 {
            std::thread::park_timeout(IDLE_SLEEP);
        }
    }
    // Every stream claimed gets its file, so the numbering has no gap.
    open_up_to(&shared, &mut files, shared.streams.claimed().count())?;
    for file in &mut files {
        file.flush()?;
    }
    written.files = files.len();
    Ok(written)
}

/// One pass over the streams; returns the records written (events, and
/// the notes naming threads, which `written` does not count).
fn drain(shared: &Shared, files: &mut Vec<BufWriter<File>>, written: &mut Written) -> io::Result<u64> {
    let mut moved = 0;
    let mut out = [0u8; RECORD_BYTES + MAX_PDU_BYTES];
    for (index, stream) in shared.streams.claimed().enumerate() {
        let Some(stream) = stream else { continue };
        open_up_to(shared, files, index + 1)?;
        // SAFETY: the writer thread is every stream's only consumer.
        while let Some(e) = unsafe { stream.ring.pop() } {
            write_event(&mut files[index], &e, shared.device, index as u32, &mut out)?;
            written.events += u64::from(e.action != Action::NoteProcess as u32);
            moved += 1;
        }
    }
    Ok(moved)
}

/// Creates the files of streams below `count` not yet open.
fn open_up_to(shared: &Shared, files: &mut Vec<BufWriter<File>>, count: usize) -> io::Result<()> {
    while files.len() < count {
        let file = File::create(shared.path(files.len()))?;
        files.push(BufWriter::with_capacity(FILE_BUFFER_BYTES, file));
    }
    Ok(())
}

fn write_event(
    file: &mut BufWriter<File>,
    e: &Event,
    device: u32,
    cpu: u32,
    out: &mut [u8; RECORD_BYTES + MAX_PDU_BYTES],
) -> io::Result<()> {
    let len = e.encode(device, cpu, out);
    file.write_all(&out[..len])
}
