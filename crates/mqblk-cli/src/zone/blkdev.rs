//! A real zoned block device (the kernel's null_blk in the oracle's guest)
//! as a script target: BLKREPORTZONE, BLK{RESET,OPEN,CLOSE,FINISH}ZONE
//! (include/uapi/linux/blkzoned.h) and O_DIRECT pread/pwrite.
//!
//! Writes come from 2 MiB huge pages (`HugeBuf`), so that each is one
//! direct-I/O bio whatever its size. From ordinary pages a pwrite of more
//! than 1 MiB (BIO_MAX_VECS 4 KiB pages) is several bios whose boundaries
//! follow the physical contiguity of the buffer's pages, which is random
//! (bio_iov_iter_get_pages merges only physically adjacent pages into one
//! bvec), and on 6.12 those bios race through the zone write plugs: how far
//! such a write gets, and the conditions of the zones it spans, differed
//! from run to run. A huge page is one folio, physically contiguous:
//! __bio_iov_iter_get_pages (6.1: bio_iov_add_page merging page by page;
//! 6.12: get_contig_folio_len and bio_iov_add_folio) makes it one bvec, a
//! bio holds BIO_MAX_VECS (256) bvecs and up to UINT_MAX bytes, so
//! __blkdev_direct_IO builds one bio for any write up to 512 MiB; the block
//! layer then splits it (max_sectors, zone boundaries) the same way every
//! time.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

use mqblk::zoned::{ZoneCond, ZoneMgmt};
use mqblk::Buf;

use super::script::ZoneTarget;

/// `struct blk_zone` (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct BlkZone {
    start: u64,
    len: u64,
    wp: u64,
    ztype: u8,
    cond: u8,
    non_seq: u8,
    reset: u8,
    resv: [u8; 4],
    capacity: u64,
    reserved: [u8; 24],
}

/// `struct blk_zone_range`.
#[repr(C)]
struct BlkZoneRange {
    sector: u64,
    nr_sectors: u64,
}

// _IOWR(0x12, 130, struct blk_zone_report) and friends (asm-generic ioctl
// encoding: dir << 30 | size << 16 | type << 8 | nr).
const BLKREPORTZONE: u64 = (3 << 30) | (16 << 16) | (0x12 << 8) | 130;
const BLKRESETZONE: u64 = (1 << 30) | (16 << 16) | (0x12 << 8) | 131;
const BLKGETZONESZ: u64 = (2 << 30) | (4 << 16) | (0x12 << 8) | 132;
const BLKGETNRZONES: u64 = (2 << 30) | (4 << 16) | (0x12 << 8) | 133;
const BLKOPENZONE: u64 = (1 << 30) | (16 << 16) | (0x12 << 8) | 134;
const BLKCLOSEZONE: u64 = (1 << 30) | (16 << 16) | (0x12 << 8) | 135;
const BLKFINISHZONE: u64 = (1 << 30) | (16 << 16) | (0x12 << 8) | 136;
const BLKGETSIZE64: u64 = (2 << 30) | (8 << 16) | (0x12 << 8) | 114;

pub struct BlkdevTarget {
    file: File,
    zone_sectors: u64,
    nr_zones: u32,
    capacity_sectors: u64,
    /// Where writes are copied before their pwrite (grown on demand).
    huge: Option<HugeBuf>,
}

/// Makes the calling thread SCHED_FIFO, so that on the oracle's one-vCPU
/// guests no SCHED_NORMAL thread runs while it is runnable: a zone write
/// plug's work (blk_zone_wplug_bio_work, on a WQ_HIGHPRI workqueue) then
/// runs only once a write's submitter sleeps, not whenever its wakeup
/// preempts the submitter at a might_sleep() inside null_blk (a
/// memory-backed zone's mutex, a page allocation), which left the order of
/// a write's pieces across zones, and so the zone answers, to the
/// scheduler (the order mqblk then models: zone/plug.rs). The guest turns
/// RT throttling off (sched_rt_runtime_us -1), so a long script is never
/// paused mid-write. Each op starts after `settle`.
fn run_unpreempted() -> Result<(), String> {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: sets this thread's policy from a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        return Err(format!("cannot run the script SCHED_FIFO: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// How long the runner sleeps before each op.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(5);

/// Sleeps briefly before an op, so that the work the kernel deferred
/// after the last one (zone write plug work, the freeing of a plug after
/// a reset or a failed write) runs first, as it would beside a
/// SCHED_NORMAL task. A SCHED_FIFO runner that never slept kept that work
/// from running between ops: Linux 7.3 then failed, with EIO and without
/// writing, a write at the write pointer after a zone that had a failed
/// write was reset and written again, which 6.12 and 7.3 both took when
/// the runner slept between ops (docs/results/zoned-oracle-7.txt).
fn settle() {
    std::thread::sleep(SETTLE);
}

/// A huge page's size (x86-64's PMD size, MAP_HUGE_2MB).
const HUGE_PAGE: usize = 2 << 20;

/// The largest write that is one bio: BIO_MAX_VECS huge pages, each one
/// bvec (when two huge pages are physically adjacent they share a bvec,
/// which only lowers the count).
pub const MAX_ONE_BIO_WRITE: usize = 256 * HUGE_PAGE;

/// An anonymous mapping of 2 MiB huge pages (MAP_HUGETLB).
struct HugeBuf {
    ptr: *mut u8,
    len: usize,
}

impl HugeBuf {
    /// Maps `len` bytes rounded up to whole huge pages. hugetlbfs reserves
    /// the pages at mmap time, so a shortage fails here (ENOMEM), not at a
    /// later fault.
    fn new(len: usize) -> Result<Self, String> {
        let len = len.max(1).div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | libc::MAP_HUGE_2MB;
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        if ptr == libc::MAP_FAILED {
            let pages = len / HUGE_PAGE;
            return Err(format!(
                "cannot map {pages} huge pages of 2 MiB for the writes ({}): reserve them first \
                 (echo {pages} > /proc/sys/vm/nr_hugepages, and check that it took); from ordinary \
                 pages a write over 1 MiB becomes several bios at places that change from run to run",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Self { ptr: ptr.cast(), len })
    }

    /// The first `n` bytes (n <= len).
    fn slice_mut(&mut self, n: usize) -> &mut [u8] {
        assert!(n <= self.len);
        // SAFETY: the mapping is len bytes, readable and writable, and
        // owned by self, borrowed mutably here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, n) }
    }
}

impl Drop for HugeBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

impl BlkdevTarget {
    pub fn open(path: &str) -> Result<Self, String> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .map_err(|e| format!("cannot open {path}: {e}"))?;
        let fd = file.as_raw_fd();
        let (mut zone_sectors, mut nr_zones, mut bytes) = (0u32, 0u32, 0u64);
        // SAFETY: each ioctl writes one value of the pointed-to type.
        let ok = unsafe {
            libc::ioctl(fd, BLKGETZONESZ as _, &mut zone_sectors) == 0
                && libc::ioctl(fd, BLKGETNRZONES as _, &mut nr_zones) == 0
                && libc::ioctl(fd, BLKGETSIZE64 as _, &mut bytes) == 0
        };
        if !ok || zone_sectors == 0 {
            return Err(format!("{path} is not a zoned block device ({})", std::io::Error::last_os_error()));
        }
        run_unpreempted()?;
        Ok(Self { file, zone_sectors: u64::from(zone_sectors), nr_zones, capacity_sectors: bytes >> 9, huge: None })
    }

    fn range_ioctl(&self, request: u64, sector: u64, nr_sectors: u64) -> Result<(), i32> {
        let range = BlkZoneRange { sector, nr_sectors };
        // SAFETY: the ioctl reads one blk_zone_range.
        if unsafe { libc::ioctl(self.file.as_raw_fd(), request as _, &range) } == 0 {
            Ok(())
        } else {
            Err(last_errno())
        }
    }
}

impl ZoneTarget for BlkdevTarget {
    fn zone_sectors(&self) -> u64 {
        self.zone_sectors
    }

    fn report(&mut self) -> Result<Vec<(&'static str, u64)>, i32> {
        settle();
        #[repr(C)]
        struct Report {
            sector: u64,
            nr_zones: u32,
            flags: u32,
            zones: [BlkZone; 64],
        }
        let mut out = Vec::with_capacity(self.nr_zones as usize);
        let mut sector = 0;
        while out.len() < self.nr_zones as usize {
            let mut rep = Report { sector, nr_zones: 64, flags: 0, zones: [BlkZone::default(); 64] };
            // SAFETY: the header says 64 zones follow, and they do.
            if unsafe { libc::ioctl(self.file.as_raw_fd(), BLKREPORTZONE as _, &mut rep) } != 0 {
                return Err(last_errno());
            }
            if rep.nr_zones == 0 {
                break;
            }
            for z in &rep.zones[..rep.nr_zones as usize] {
                let cond = ZoneCond::from_raw(z.cond).map_or("UNKNOWN", ZoneCond::name);
                out.push((cond, z.wp - z.start));
                sector = z.start + z.len;
            }
        }
        Ok(out)
    }

    fn mgmt(&mut self, op: ZoneMgmt, zone: Option<u64>) -> Result<(), i32> {
        settle();
        let request = match op {
            ZoneMgmt::Reset => BLKRESETZONE,
            ZoneMgmt::Open => BLKOPENZONE,
            ZoneMgmt::Close => BLKCLOSEZONE,
            ZoneMgmt::Finish => BLKFINISHZONE,
        };
        match zone {
            None => self.range_ioctl(request, 0, self.capacity_sectors),
            Some(z) => self.range_ioctl(request, z.saturating_mul(self.zone_sectors), self.zone_sectors),
        }
    }

    /// Maps the huge pages for writes of up to `bytes` before the script
    /// starts, so a shortage stops the run with the reason instead of
    /// failing a write in the middle.
    fn prepare_writes(&mut self, bytes: usize) -> Result<(), String> {
        if bytes > MAX_ONE_BIO_WRITE {
            return Err(format!(
                "a write of {bytes} bytes is more than one bio holds ({MAX_ONE_BIO_WRITE} bytes of huge pages)"
            ));
        }
        if bytes > 0 && !matches!(&self.huge, Some(h) if h.len >= bytes) {
            self.huge = None; // give the pages back before mapping more
            self.huge = Some(HugeBuf::new(bytes)?);
        }
        Ok(())
    }

    fn write(&mut self, offset_bytes: u64, data: &[u8]) -> Result<(), i32> {
        settle();
        if let Err(e) = self.prepare_writes(data.len()) {
            eprintln!("zone script: {e}");
            return Err(libc::ENOMEM);
        }
        let buf = match self.huge.as_mut() {
            Some(huge) => huge.slice_mut(data.len()),
            None => &mut [], // a zero-length write: the kernel answers it without a bio
        };
        buf.copy_from_slice(data); // huge pages are aligned for O_DIRECT
        match self.file.write_at(buf, offset_bytes) {
            Ok(n) if n == data.len() => Ok(()),
            Ok(_) => Err(libc::EIO),
            Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    fn read(&mut self, offset_bytes: u64, out: &mut [u8]) -> Result<(), i32> {
        settle();
        let mut buf = Buf::new(out.len());
        match self.file.read_at(&mut buf, offset_bytes) {
            Ok(n) if n == out.len() => {
                out.copy_from_slice(&buf);
                Ok(())
            }
            Ok(_) => Err(libc::EIO),
            Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }
}
