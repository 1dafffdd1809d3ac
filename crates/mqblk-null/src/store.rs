//! The null device's medium when it keeps data: sparse pages in memory
//! (mem/), or a file (`backing_file=PATH`) so that the durable state
//! outlives the process.
//!
//! A file-backed medium is the device's durable state: what reached the
//! file survives the process being killed and a new process opening the
//! same file with the same size gets it back. The host's page cache sits
//! between the file and the disk under it, so a file-backed device
//! advertises a write cache: FLUSH and FUA call `fdatasync`, and only then
//! does the state survive the host too (as the kernel's loop driver does
//! for its file). Never-written ranges are holes and read as zeros;
//! discard and write zeroes punch holes (zeros written where the file
//! system cannot punch).
//!
//! The file is locked (`flock`, exclusive) while a device has it open, so
//! two devices, in one process or two, never write the same medium; its
//! size must equal the device's, so a file is never reinterpreted at
//! another size.
//!
//! Relies on: mem/ for the memory medium; libc for `flock`, `fallocate`,
//! `lseek(SEEK_DATA)` and `fdatasync`.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::mem::{MemStore, PAGE_SIZE};

/// Where a data-keeping null device keeps its data.
pub(crate) enum Store {
    Memory(MemStore),
    File(FileStore),
}

impl Store {
    /// Copies `[pos, pos + out.len())` into `out`; unwritten bytes are zero.
    pub(crate) fn read(&self, pos: u64, out: &mut [u8]) -> io::Result<()> {
        match self {
            Store::Memory(m) => {
                m.read(pos, out);
                Ok(())
            }
            Store::File(f) => f.file.read_exact_at(out, pos),
        }
    }

    /// Stores `data` at `pos`.
    pub(crate) fn write(&self, pos: u64, data: &[u8]) -> io::Result<()> {
        match self {
            Store::Memory(m) => {
                m.write(pos, data);
                Ok(())
            }
            Store::File(f) => f.file.write_all_at(data, pos),
        }
    }

    /// Makes `[pos, pos + len)` read as zeros.
    pub(crate) fn zero(&self, pos: u64, len: u64) -> io::Result<()> {
        match self {
            Store::Memory(m) => {
                m.zero(pos, len);
                Ok(())
            }
            Store::File(f) => f.zero(pos, len),
        }
    }

    /// Makes `[pos, pos + len)` read as zeros without deallocating it (a
    /// write zeroes with REQ_NOUNMAP): a file keeps its blocks, memory its
    /// pages.
    pub(crate) fn zero_in_place(&self, pos: u64, len: u64) -> io::Result<()> {
        match self {
            Store::Memory(m) => {
                m.zero_in_place(pos, len);
                Ok(())
            }
            Store::File(f) => f.zero_in_place(pos, len),
        }
    }

    /// Makes everything stored so far durable against a host crash too
    /// (nothing to do in memory, which a host crash loses anyway).
    pub(crate) fn sync(&self) -> io::Result<()> {
        match self {
            Store::Memory(_) => Ok(()),
            Store::File(f) => f.file.sync_data(),
        }
    }

    /// Whether the page holding byte `pos` holds data (else it reads as
    /// zeros).
    pub(crate) fn is_present(&self, pos: u64) -> bool {
        match self {
            Store::Memory(m) => m.is_present(pos),
            Store::File(f) => f.is_present(pos),
        }
    }

    /// The memory medium, for the zoned path (`backing_file` is refused
    /// on zoned devices: their zone states live in memory only).
    pub(crate) fn memory(&self) -> &MemStore {
        match self {
            Store::Memory(m) => m,
            Store::File(_) => unreachable!("backing_file is refused with zoned=1 (config.rs)"),
        }
    }

    /// The device's stats lines for its medium: the memory store's pages
    /// and chunks (mem/), or the file.
    pub(crate) fn describe(&self) -> String {
        match self {
            Store::Memory(m) => m.describe(),
            Store::File(f) => format!("null/backing_file={}", f.path.display()),
        }
    }
}

/// A device's data in a file of exactly its size, locked while open.
pub(crate) struct FileStore {
    file: File,
    path: PathBuf,
    /// False once the file system refused to punch a hole: zeros are
    /// written instead from then on.
    punch: std::sync::atomic::AtomicBool,
}

impl FileStore {
    /// Opens (or creates, sparse) the medium of a device of `size_bytes`.
    /// Errors name the file and what is wrong with it.
    pub(crate) fn open(path: &Path, size_bytes: u64) -> Result<Self, String> {
        let what = |e: io::Error| format!("backing_file {}: {e}", path.display());
        let file =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(what)?;
        // SAFETY: flock on a descriptor this function owns; no memory is
        // passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EWOULDBLOCK) => {
                    format!("backing_file {}: in use by another device (it is locked)", path.display())
                }
                _ => what(e),
            });
        }
        let len = file.metadata().map_err(what)?.len();
        if len == 0 {
            file.set_len(size_bytes).map_err(what)?;
        } else if len != size_bytes {
            return Err(format!(
                "backing_file {} holds {len} bytes but the device has {size_bytes} (gb/size): \
                 give the size it was made with, or a new file",
                path.display()
            ));
        }
        Ok(Self { file, path: path.to_path_buf(), punch: std::sync::atomic::AtomicBool::new(true) })
    }

    /// Punches a hole over `[pos, pos + len)` (the file's size kept), or
    /// writes zeros where the file system cannot.
    fn zero(&self, pos: u64, len: u64) -> io::Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.punch.load(Relaxed) {
            if self.fallocate(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, pos, len)? {
                return Ok(());
            }
            self.punch.store(false, Relaxed);
        }
        self.write_zeros(pos, len)
    }

    /// Zeroes `[pos, pos + len)` keeping its blocks allocated
    /// (FALLOC_FL_ZERO_RANGE), or writes zeros where the file system
    /// cannot.
    fn zero_in_place(&self, pos: u64, len: u64) -> io::Result<()> {
        if self.fallocate(libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE, pos, len)? {
            return Ok(());
        }
        self.write_zeros(pos, len)
    }

    /// fallocate(2) over `[pos, pos + len)` with `mode`: false where the
    /// file system does not support the mode (EOPNOTSUPP).
    fn fallocate(&self, mode: i32, pos: u64, len: u64) -> io::Result<bool> {
        // SAFETY: fallocate on our own descriptor; no memory is passed.
        if unsafe { libc::fallocate(self.file.as_raw_fd(), mode, pos as i64, len as i64) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
            return Ok(false);
        }
        Err(e)
    }

    fn write_zeros(&self, pos: u64, len: u64) -> io::Result<()> {
        let zeros = [0u8; PAGE_SIZE as usize];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(PAGE_SIZE);
            self.file.write_all_at(&zeros[..n as usize], pos + at)?;
            at += n;
        }
        Ok(())
    }

    /// Whether the file has data in the page holding `pos`: the next data
    /// at or after the page's start begins inside the page (file systems
    /// without SEEK_DATA call the whole file data, which is never wrong).
    fn is_present(&self, pos: u64) -> bool {
        let start = pos / PAGE_SIZE * PAGE_SIZE;
        // SAFETY: lseek on our own descriptor. The offset it moves is not
        // used by this store, which reads and writes at explicit positions.
        let next = unsafe { libc::lseek(self.file.as_raw_fd(), start as i64, libc::SEEK_DATA) };
        next >= 0 && (next as u64) < start + PAGE_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mqblk-store-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("medium")
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri does not emulate flock, fallocate or SEEK_DATA")]
    fn a_file_medium_keeps_data_for_the_next_open_and_reads_holes_as_zeros() {
        let path = temp("reopen");
        let _ = std::fs::remove_file(&path);
        let s = Store::File(FileStore::open(&path, 1 << 20).unwrap());
        s.write(5000, &[7; 3000]).unwrap();
        s.sync().unwrap();
        assert!(s.is_present(4096) && s.is_present(7999));
        assert!(!s.is_present(1 << 19), "never written: a hole");
        drop(s);
        let s = Store::File(FileStore::open(&path, 1 << 20).unwrap());
        let mut out = vec![1u8; 10000];
        s.read(0, &mut out).unwrap();
        assert!(out[..5000].iter().all(|&b| b == 0));
        assert!(out[5000..8000].iter().all(|&b| b == 7));
        s.zero(4096, 8192).unwrap();
        s.read(0, &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 0));
        assert!(!s.is_present(4096), "zeroed pages are holes again");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri does not emulate flock or fallocate")]
    fn a_nounmap_zeroing_keeps_the_files_blocks_and_a_plain_one_frees_them() {
        use std::os::unix::fs::MetadataExt;
        let path = temp("nounmap");
        let _ = std::fs::remove_file(&path);
        let s = Store::File(FileStore::open(&path, 1 << 20).unwrap());
        s.write(0, &[7; 65536]).unwrap();
        s.sync().unwrap();
        let blocks = || std::fs::metadata(&path).unwrap().blocks();
        let written = blocks();
        assert!(written >= 128, "64 KiB written: {written} blocks of 512");
        s.zero_in_place(0, 65536).unwrap();
        let mut out = vec![1u8; 65536];
        s.read(0, &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 0), "zeroed in place reads as zeros");
        assert_eq!(blocks(), written, "REQ_NOUNMAP: the blocks stay allocated");
        s.zero(0, 65536).unwrap();
        assert!(blocks() < written, "a plain zeroing punches the blocks out: {} of {written}", blocks());
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri does not emulate flock")]
    fn a_file_of_another_size_or_in_use_is_refused_by_name() {
        let path = temp("refuse");
        let _ = std::fs::remove_file(&path);
        let first = FileStore::open(&path, 1 << 20).unwrap();
        let busy = FileStore::open(&path, 1 << 20).err().unwrap();
        assert!(busy.contains("in use by another device"), "{busy}");
        drop(first);
        let wrong = FileStore::open(&path, 2 << 20).err().unwrap();
        assert!(wrong.contains("holds 1048576 bytes but the device has 2097152"), "{wrong}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20, "the refused open changed nothing");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
