//! Memory tables checked against their files, as vhost-user-backend maps
//! them (memfds; not under Miri, which cannot mmap a file).

use super::*;
use std::os::fd::FromRawFd;
use vm_memory::{FileOffset, GuestAddress, MmapRegion};

/// A memfd of `bytes` bytes, sealed against shrinking if `seal`.
fn memfd(bytes: u64, seal: bool) -> std::fs::File {
    // SAFETY: a NUL-terminated name; the fd returned is ours to own.
    let fd = unsafe { libc::memfd_create(c"mqblk-memory-test".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
    // SAFETY: a fresh fd nobody else owns.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.set_len(bytes).unwrap();
    if seal {
        // SAFETY: adds seals to a live memfd.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) }, 0);
    }
    file
}

/// The region vhost-user-backend would map for `size` bytes of `file`
/// from `offset`, at guest address `guest`.
fn region(file: &std::fs::File, offset: u64, size: usize, guest: u64) -> GuestRegionMmap<()> {
    let mapping = MmapRegion::from_file(FileOffset::new(file.try_clone().unwrap(), offset), size).unwrap();
    GuestRegionMmap::new(mapping, GuestAddress(guest)).unwrap()
}

#[test]
fn a_region_past_its_files_end_is_refused_naming_the_sizes() {
    let file = memfd(0x4000, false);
    let r = region(&file, 0x1000, 0x4000, 0x10_0000);
    let e = protection(2, &r).unwrap_err();
    assert_eq!(
        e,
        TableError::PastEnd { region: 2, guest_addr: 0x10_0000, offset: 0x1000, size: 0x4000, file_bytes: 0x4000 }
    );
    let text = e.to_string();
    assert!(text.contains("memory region 2") && text.contains("runs past the end of its file (16384 bytes)"), "{text}");
    assert_eq!(protection(0, &region(&file, 0x1000, 0x3000, 0)), Ok(Protection::Guard { page_bytes: 4096 }), "fits");
}

#[test]
fn a_sealed_file_needs_no_guard() {
    let file = memfd(0x4000, true);
    assert_eq!(protection(0, &region(&file, 0, 0x4000, 0)), Ok(Protection::None));
}

#[test]
fn a_refused_table_puts_the_last_good_one_back() {
    let good = memfd(0x4000, false);
    let watch = MemoryWatch::new(GuestMemoryAtomic::new(Mem::new()));
    let daemon = GuestMemoryAtomic::new(Mem::from_regions(vec![region(&good, 0, 0x4000, 0)]).unwrap());
    watch.update(&daemon).unwrap();
    assert_eq!(watch.served().memory().num_regions(), 1);
    assert_eq!(watch.guarded_tables(), 1, "an unsealed memfd is guarded");

    let short = memfd(0x1000, false);
    let bad = Mem::from_regions(vec![region(&good, 0, 0x4000, 0), region(&short, 0, 0x2000, 0x10_0000)]).unwrap();
    daemon.lock().unwrap().replace(bad);
    let e = watch.update(&daemon).unwrap_err();
    assert!(matches!(e, TableError::PastEnd { region: 1, file_bytes: 0x1000, .. }), "{e}");
    assert_eq!(daemon.memory().num_regions(), 1, "the daemon's memory is the good table again");
    assert_eq!(watch.served().memory().num_regions(), 1, "the queues never saw the bad one");
    assert_eq!(watch.guarded_tables(), 1, "the bad table's guards are released");
}

#[test]
fn a_replaced_table_stays_guarded_while_a_request_holds_it() {
    let file = memfd(0x8000, false);
    let watch = MemoryWatch::new(GuestMemoryAtomic::new(Mem::new()));
    let daemon = GuestMemoryAtomic::new(Mem::from_regions(vec![region(&file, 0, 0x4000, 0)]).unwrap());
    watch.update(&daemon).unwrap();
    // A request's slot keeps the table its bio borrows.
    let borrowed = watch.served().memory().into_inner();

    daemon.lock().unwrap().replace(Mem::from_regions(vec![region(&file, 0x4000, 0x4000, 0)]).unwrap());
    watch.update(&daemon).unwrap();
    assert_eq!(watch.guarded_tables(), 2, "the old table is still borrowed");
    drop(borrowed);
    daemon.lock().unwrap().replace(Mem::from_regions(vec![region(&file, 0, 0x8000, 0)]).unwrap());
    watch.update(&daemon).unwrap();
    assert_eq!(watch.guarded_tables(), 1, "only the table served now");
    watch.release();
    assert_eq!(watch.guarded_tables(), 0);
}
