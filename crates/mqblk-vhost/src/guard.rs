//! A SIGBUS guard for guest memory whose file may shrink under the
//! server: a frontend that truncates its memory file after SET_MEM_TABLE
//! turns the next access to a page past the new end into SIGBUS, which
//! would end the whole process without a word. Here a fault inside a
//! registered guest mapping is survived instead: the handler maps
//! anonymous memory over the faulting page and the rest of the mapping
//! after it (so the access completes, on zeros, and the pages after it,
//! past the file's end too, fault no more), sets the mapping's fault
//! flag, and returns; the queue reads the
//! flag and ends that connection (memory.rs, queue.rs). A fault anywhere
//! else goes to the handler installed before ours, as if we were not
//! there (Rust's own stack-overflow handler, or the default: death).
//!
//! Only what is async-signal-safe happens in the handler: loads of
//! atomics, one mmap(2) (a plain system call on Linux), a store. The
//! registry is a fixed array of entries, each a seqlock over (start, len,
//! page size, flag pointer): registering writes an entry between two
//! stores of its state word, and the handler trusts an entry only if it
//! read the same state word, marked live, before and after its fields.
//! An entry is released only once nothing touches its mapping any more
//! (memory.rs), so the handler never needs the fields of an entry being
//! changed for the fault it handles.
//!
//! The handler is installed once per process, when the first mapping is
//! registered (a server whose frontend seals its memory, as QEMU's memfd
//! backend does, never installs it).
//!
//! Relies on: libc (sigaction, mmap).

use std::io;
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Mappings registered at most at once: a memory table has at most 8
/// regions (VHOST_MEMORY_BASELINE_NREGIONS), and a replaced table stays
/// registered only while requests still borrow it.
pub(crate) const ENTRIES: usize = 128;

/// The low bits of an entry's state word: free, being written, live; the
/// rest counts the changes, so a reader sees any change between its two
/// loads.
const FREE: usize = 0;
const BUSY: usize = 1;
const LIVE: usize = 2;
const KIND: usize = 3;
const STEP: usize = 4;

struct Entry {
    state: AtomicUsize,
    start: AtomicUsize,
    len: AtomicUsize,
    page_bytes: AtomicUsize,
    /// The flag a fault in this mapping sets (kept alive by `Guarded`).
    faulted: AtomicPtr<AtomicBool>,
}

impl Entry {
    const fn new() -> Self {
        Self {
            state: AtomicUsize::new(FREE),
            start: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            page_bytes: AtomicUsize::new(0),
            faulted: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Moves the state word to `kind`, counting the change.
    fn set(&self, kind: usize) {
        let next = (self.state.load(Ordering::Relaxed) & !KIND).wrapping_add(STEP) | kind;
        self.state.store(next, Ordering::Release);
    }
}

static REGISTRY: [Entry; ENTRIES] = [const { Entry::new() }; ENTRIES];

/// A registered mapping; dropping it releases the entry. Drop it only
/// once nothing accesses the mapping any more.
#[derive(Debug)]
pub(crate) struct Guarded {
    index: usize,
    /// The flag the entry points at, alive as long as the entry.
    _faulted: Arc<AtomicBool>,
}

impl Drop for Guarded {
    fn drop(&mut self) {
        let entry = &REGISTRY[self.index];
        // Marked busy first: a handler that read the entry live before
        // sees the change and skips it.
        entry.set(BUSY);
        // Orders the busy mark before the field written (a seqlock's
        // writer): a reader that reads the field reads the mark after.
        fence(Ordering::Release);
        entry.faulted.store(std::ptr::null_mut(), Ordering::Relaxed);
        entry.set(FREE);
    }
}

/// Registers the mapping of `len` bytes at `start`, whose pages are
/// `page_bytes` (a power of two: the file's, which hugetlbfs makes huge),
/// so that a SIGBUS inside it sets `faulted` and is survived. Installs
/// the handler on first use.
pub(crate) fn guard(start: *mut u8, len: usize, page_bytes: usize, faulted: &Arc<AtomicBool>) -> io::Result<Guarded> {
    install()?;
    register(start as usize, len, page_bytes, faulted)
}

/// The registry's half of `guard`.
fn register(start: usize, len: usize, page_bytes: usize, faulted: &Arc<AtomicBool>) -> io::Result<Guarded> {
    if !page_bytes.is_power_of_two() || start % page_bytes != 0 || len == 0 {
        return Err(io::Error::other(format!(
            "a mapping of {len} bytes at {start:#x} is not on pages of {page_bytes} bytes"
        )));
    }
    let Some(index) = claim() else {
        return Err(io::Error::other(format!("more than {ENTRIES} guest memory mappings to guard")));
    };
    let entry = &REGISTRY[index];
    // As in `Guarded::drop`: the busy mark before the fields.
    fence(Ordering::Release);
    entry.start.store(start, Ordering::Relaxed);
    entry.len.store(len, Ordering::Relaxed);
    entry.page_bytes.store(page_bytes, Ordering::Relaxed);
    entry.faulted.store(Arc::as_ptr(faulted).cast_mut(), Ordering::Relaxed);
    // Release: a handler that reads the entry live reads these fields.
    entry.set(LIVE);
    Ok(Guarded { index, _faulted: Arc::clone(faulted) })
}

/// A free entry, marked busy for the caller.
fn claim() -> Option<usize> {
    REGISTRY.iter().position(|e| {
        let state = e.state.load(Ordering::Relaxed);
        state & KIND == FREE
            && e.state
                .compare_exchange(state, state.wrapping_add(STEP) | BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    })
}

/// Where to cover a fault at `addr` in a registered mapping: from its
/// page to the mapping's end (every page after one past the file's end is
/// past it too, so one mmap covers what would fault next), and the
/// mapping's fault flag. Read as the seqlock allows (module header).
fn find(addr: usize) -> Option<(usize, usize, *mut AtomicBool)> {
    REGISTRY.iter().find_map(|e| {
        let before = e.state.load(Ordering::Acquire);
        if before & KIND != LIVE {
            return None;
        }
        let (start, len) = (e.start.load(Ordering::Relaxed), e.len.load(Ordering::Relaxed));
        let (page, faulted) = (e.page_bytes.load(Ordering::Relaxed), e.faulted.load(Ordering::Relaxed));
        // Pairs with the Release of `set`: the fields read belong to the
        // state word read before, if it did not change since.
        fence(Ordering::Acquire);
        let changed = e.state.load(Ordering::Relaxed) != before;
        if changed || faulted.is_null() || !page.is_power_of_two() || addr.wrapping_sub(start) >= len {
            return None;
        }
        // No arithmetic that could panic here, in a signal handler.
        let end = start.checked_add(len)?.checked_next_multiple_of(page)?;
        let page_start = addr & !(page - 1);
        Some((page_start, end - page_start, faulted))
    })
}

/// The handler that was installed before ours, and whether installing
/// ours failed (the errno).
static PREVIOUS: OnceLock<Result<libc::sigaction, i32>> = OnceLock::new();

/// Installs the SIGBUS handler, once per process.
fn install() -> io::Result<()> {
    let installed = PREVIOUS.get_or_init(|| {
        // SAFETY: sigaction structs are plain data; zeroed is a valid
        // empty one.
        let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reads the current action into a live struct.
        if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) } != 0 {
            return Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
        }
        // SAFETY: as above.
        let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
        ours.sa_sigaction = on_sigbus as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
        // SA_ONSTACK: a handler we chain to may need the alternate stack
        // (Rust's stack-overflow report runs on it).
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // Until this closure returns, `PREVIOUS.get()` is None and the
        // handler defaults a fault (`chain`), as if it were not there; no
        // mapping is registered before `install` returns.
        // SAFETY: installs a handler that is async-signal-safe (module header).
        if unsafe { libc::sigaction(libc::SIGBUS, &ours, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
        }
        Ok(previous)
    });
    match installed {
        Ok(_) => Ok(()),
        Err(errno) => Err(io::Error::from_raw_os_error(*errno)),
    }
}

/// The SIGBUS handler: a fault past the end of a registered mapping's
/// file (BUS_ADRERR) is covered with anonymous memory and flagged; any
/// other goes to the previous handler.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel hands an SA_SIGINFO handler a valid siginfo; a
    // SIGBUS's carries the faulting address.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code == libc::BUS_ADRERR {
        if let Some((cover_start, cover_bytes, faulted)) = find(addr) {
            // SAFETY: errno is this thread's; saved and restored around
            // the system call so the interrupted code sees its own.
            let errno = unsafe { *libc::__errno_location() };
            // What the interrupted access reads or writes is plain guest
            // bytes, which no code trusts (slot.rs).
            // SAFETY: replaces the rest of a guest mapping the registry holds
            // (the server's own mmap, alive while registered) with zeroes.
            let covered = unsafe {
                libc::mmap(
                    cover_start as *mut libc::c_void,
                    cover_bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            if covered != libc::MAP_FAILED {
                // SAFETY: the flag lives as long as the entry (`Guarded`).
                // Release: the queue that reads it set (Acquire) after the
                // faulting access reached it also sees what led here.
                unsafe { (*faulted).store(true, Ordering::Release) };
                return;
            }
        }
    }
    chain(sig, info, context);
}

/// Hands the signal to the handler installed before ours.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let Some(Ok(previous)) = PREVIOUS.get() else { return reset_to_default(sig) };
    let handler = previous.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // The kernel does not let a fault be ignored: default it is.
        return reset_to_default(sig);
    }
    if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: a handler installed with SA_SIGINFO has this signature.
        let f = unsafe {
            std::mem::transmute::<usize, extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)>(handler)
        };
        f(sig, info, context);
    } else {
        // SAFETY: a handler installed without SA_SIGINFO has this one.
        let f = unsafe { std::mem::transmute::<usize, extern "C" fn(libc::c_int)>(handler) };
        f(sig);
    }
}

/// Restores the default action and returns: the faulting access runs
/// again and the fault ends the process, as it would have without us.
fn reset_to_default(sig: libc::c_int) {
    // SAFETY: zeroed is SIG_DFL with no flags; sigaction is
    // async-signal-safe.
    unsafe {
        let default: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, &default, std::ptr::null_mut());
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
