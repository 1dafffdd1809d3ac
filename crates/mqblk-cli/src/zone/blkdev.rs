//! A real zoned block device (the kernel's null_blk in the oracle's guest)
//! as a script target: BLKREPORTZONE, BLK{RESET,OPEN,CLOSE,FINISH}ZONE
//! (include/uapi/linux/blkzoned.h) and O_DIRECT pread/pwrite.

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
        Ok(Self { file, zone_sectors: u64::from(zone_sectors), nr_zones, capacity_sectors: bytes >> 9 })
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

    fn write(&mut self, offset_bytes: u64, data: &[u8]) -> Result<(), i32> {
        let buf = Buf::from_slice(data); // aligned for O_DIRECT
        match self.file.write_at(&buf, offset_bytes) {
            Ok(n) if n == data.len() => Ok(()),
            Ok(_) => Err(libc::EIO),
            Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    fn read(&mut self, offset_bytes: u64, out: &mut [u8]) -> Result<(), i32> {
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
