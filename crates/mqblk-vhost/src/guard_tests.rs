//! The guard's registry (under Miri too: atomics only), and the handler
//! against real faults: a memfd truncated under its mapping (not under
//! Miri, which runs neither mmap nor signal handlers).

use super::*;

/// Fake mapping addresses for the registry alone, far from any real one
/// and apart per test (tests share the registry).
const FAKE: usize = 0x7e00_0000_0000;

#[test]
fn a_mapping_is_found_while_registered_and_not_after() {
    let faulted = Arc::new(AtomicBool::new(false));
    let start = FAKE;
    let guarded = register(start, 3 * 4096 + 100, 4096, &faulted).unwrap();
    let (page, bytes, flag) = find(start + 2 * 4096 + 7).expect("inside");
    let to_the_end = 2 * 4096;
    assert_eq!((page, bytes, flag.cast_const()), (start + 2 * 4096, to_the_end, Arc::as_ptr(&faulted)));
    assert!(find(start + 3 * 4096 + 100).is_none(), "one past the end");
    assert!(find(start - 1).is_none(), "before the start");
    drop(guarded);
    assert!(find(start).is_none(), "released");
}

#[test]
fn released_entries_are_reused() {
    let faulted = Arc::new(AtomicBool::new(false));
    // More registrations than entries, one at a time.
    for i in 0..2 * ENTRIES {
        let start = FAKE + 0x10_0000_0000 + i * 0x20_0000;
        let guarded = register(start, 0x20_0000, 0x20_0000, &faulted).unwrap();
        assert_eq!(
            find(start + 0x1f_ffff).map(|(page, bytes, _)| (page, bytes)),
            Some((start, 0x20_0000)),
            "a huge page"
        );
        drop(guarded);
    }
}

#[test]
fn entries_live_together_are_told_apart() {
    let (a, b) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let start = FAKE + 0x20_0000_0000;
    let first = register(start, 4096, 4096, &a).unwrap();
    let second = register(start + 4096, 4096, 4096, &b).unwrap();
    assert_eq!(find(start).map(|f| f.2.cast_const()), Some(Arc::as_ptr(&a)));
    assert_eq!(find(start + 4096).map(|f| f.2.cast_const()), Some(Arc::as_ptr(&b)));
    drop(first);
    assert!(find(start).is_none());
    assert!(find(start + 4096).is_some(), "the other stays");
    drop(second);
}

/// A memfd of `pages` pages mapped shared, as vm-memory maps a region.
#[cfg(not(miri))]
fn memfd_mapping(pages: usize) -> (std::fs::File, *mut u8, usize) {
    use std::os::fd::FromRawFd;
    // SAFETY: a NUL-terminated name; the fd returned is ours to own.
    let fd = unsafe { libc::memfd_create(c"mqblk-guard-test".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
    // SAFETY: a fresh fd nobody else owns.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let len = pages * 4096;
    file.set_len(len as u64).unwrap();
    // SAFETY: maps a live fd; the mapping is unmapped by the test.
    let ptr =
        unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
    assert_ne!(ptr, libc::MAP_FAILED, "mmap: {}", io::Error::last_os_error());
    (file, ptr.cast(), len)
}

#[cfg(not(miri))]
#[test]
fn a_fault_past_a_shrunk_files_end_is_survived_and_flagged() {
    let (file, ptr, len) = memfd_mapping(4);
    // SAFETY: inside the live mapping of 4 pages.
    unsafe { ptr.add(4096).write_volatile(0x5a) };
    let faulted = Arc::new(AtomicBool::new(false));
    let guarded = guard(ptr, len, 4096, &faulted).unwrap();
    file.set_len(2 * 4096).unwrap();

    // SAFETY: page 3 is mapped; past the file's end now, so it faults and
    // the handler covers it with a zeroed page.
    let past = unsafe { ptr.add(3 * 4096 + 8).read_volatile() };
    assert_eq!(past, 0, "an anonymous page stands in");
    assert!(faulted.load(Ordering::Acquire), "the fault is flagged");
    // SAFETY: page 2, before the one that faulted and past the file's
    // end as well: it faults too, and is covered the same way.
    unsafe { ptr.add(2 * 4096).write_volatile(7) };
    // SAFETY: the page covered just now.
    assert_eq!(unsafe { ptr.add(2 * 4096).read_volatile() }, 7, "the write landed in the anonymous page");
    // SAFETY: page 1 is within the file still.
    assert_eq!(unsafe { ptr.add(4096).read_volatile() }, 0x5a, "the file's pages are untouched");
    drop(guarded);
    // SAFETY: the mapping made above, unmapped once.
    assert_eq!(unsafe { libc::munmap(ptr.cast(), len) }, 0);
}

/// The child of `a_fault_outside_guest_memory_still_ends_the_process`,
/// which runs it (ignored otherwise: it ends its process).
#[cfg(not(miri))]
#[test]
#[ignore = "run by a_fault_outside_guest_memory_still_ends_the_process"]
fn fault_outside_guest_memory_child() {
    if std::env::var_os("MQBLK_GUARD_CHILD").is_none() {
        return;
    }
    let (_guarded_file, guarded_ptr, guarded_len) = memfd_mapping(1);
    let faulted = Arc::new(AtomicBool::new(false));
    let _guarded = guard(guarded_ptr, guarded_len, 4096, &faulted).unwrap();
    let (file, ptr, _) = memfd_mapping(2);
    file.set_len(0).unwrap();
    // SAFETY: a mapping the guard does not hold, past its file's end: the
    // fault goes to the handler before ours, which ends the process.
    let _ = unsafe { ptr.add(4096).read_volatile() };
    unreachable!("survived a fault outside guest memory");
}

#[cfg(not(miri))]
#[test]
fn a_fault_outside_guest_memory_still_ends_the_process() {
    use std::os::unix::process::ExitStatusExt;
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "guard::tests::fault_outside_guest_memory_child", "--ignored", "--test-threads=1"])
        .env("MQBLK_GUARD_CHILD", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGBUS), "{status}");
}
