//! The C library's I/O allocates nothing per request once warm: plain
//! reads, and readv/writev of scattered iovecs, whose segment vectors come
//! back to the queue's pool at completion, and also when the block layer
//! refuses the bio. Counted by a global allocator on this thread, through
//! the exported C functions, on a null device that completes inline and
//! keeps no data (its memory store allocates as it reclaims replaced
//! pages; the data itself is checked by the C tests, tests/c/vectored.c).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;

use blkio::blkio_completion;

/// Counts this thread's allocations (the device completes on it too).
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
}

// SAFETY: forwards to the system allocator, only counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: allocated by `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: as GlobalAlloc::realloc requires, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations() -> u64 {
    ALLOCS.with(Cell::get)
}

/// `struct blkio` and `struct blkioq`, opaque to C.
#[repr(C)]
struct Blkio {
    _opaque: [u8; 0],
}

#[repr(C)]
struct Queue {
    _opaque: [u8; 0],
}

extern "C" {
    fn blkio_create(driver: *const c_char, bp: *mut *mut Blkio) -> c_int;
    fn blkio_set_str(b: *mut Blkio, name: *const c_char, value: *const c_char) -> c_int;
    fn blkio_connect(b: *mut Blkio) -> c_int;
    fn blkio_start(b: *mut Blkio) -> c_int;
    fn blkio_get_queue(b: *mut Blkio, index: c_int) -> *mut Queue;
    fn blkio_destroy(bp: *mut *mut Blkio);
    fn blkio_get_error_msg() -> *const c_char;
    fn blkioq_read(q: *mut Queue, start: u64, buf: *mut c_void, len: usize, user_data: *mut c_void, flags: u32);
    fn blkioq_readv(q: *mut Queue, start: u64, iov: *const libc::iovec, n: c_int, user_data: *mut c_void, flags: u32);
    fn blkioq_writev(q: *mut Queue, start: u64, iov: *mut libc::iovec, n: c_int, user_data: *mut c_void, flags: u32);
    fn blkioq_do_io(q: *mut Queue, out: *mut blkio_completion, min: c_int, max: c_int, t: *mut libc::timespec)
        -> c_int;
}

const BS: usize = 4096;
const SEGS: usize = 8;

/// A started instance of `spec` with its first queue.
struct Instance {
    b: *mut Blkio,
    q: *mut Queue,
}

impl Instance {
    fn start(spec: &CStr) -> Self {
        let mut b = ptr::null_mut();
        // SAFETY: valid C strings and out-pointers; the instance lives until drop.
        unsafe {
            assert_eq!(blkio_create(c"mqblk".as_ptr(), &mut b), 0);
            let ok =
                blkio_set_str(b, c"path".as_ptr(), spec.as_ptr()) == 0 && blkio_connect(b) == 0 && blkio_start(b) == 0;
            assert!(ok, "{}", CStr::from_ptr(blkio_get_error_msg()).to_string_lossy());
            let q = blkio_get_queue(b, 0);
            assert!(!q.is_null());
            Self { b, q }
        }
    }

    /// Waits for one completion; returns its ret.
    fn wait(&self) -> c_int {
        let mut c =
            blkio_completion { user_data: ptr::null_mut(), error_msg: ptr::null(), ret: -1, reserved_: [0; 12] };
        // SAFETY: one writable completion, no timeout.
        assert_eq!(unsafe { blkioq_do_io(self.q, &mut c, 1, 1, ptr::null_mut()) }, 1);
        c.ret
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: the instance `start` created, destroyed once.
        unsafe { blkio_destroy(&mut self.b) };
    }
}

/// Block-aligned memory for the iovecs, scattered: every other block.
struct Pages {
    ptr: *mut u8,
    layout: Layout,
}

impl Pages {
    fn new(blocks: usize) -> Self {
        let layout = Layout::from_size_align(blocks * BS, BS).unwrap();
        // SAFETY: a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Self { ptr, layout }
    }

    /// Blocks first, first + 2, ... as iovecs.
    fn scattered(&self, first: usize) -> [libc::iovec; SEGS] {
        assert!((first + 2 * SEGS) * BS <= self.layout.size());
        std::array::from_fn(|i| {
            // SAFETY: inside the allocation (asserted above).
            let block = unsafe { self.ptr.add((first + 2 * i) * BS) };
            libc::iovec { iov_base: block.cast(), iov_len: BS }
        })
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// One writev and readv of 8 scattered blocks at `offset`, and a plain
/// read of as many, each completed without error.
fn round(dev: &Instance, pages: &Pages, offset: u64) {
    let mut w = pages.scattered(0);
    let r = pages.scattered(1);
    // SAFETY: the iovecs and their memory outlive the waits below.
    unsafe { blkioq_writev(dev.q, offset, w.as_mut_ptr(), SEGS as c_int, ptr::null_mut(), 0) };
    assert_eq!(dev.wait(), 0);
    // SAFETY: as above.
    unsafe { blkioq_readv(dev.q, offset, r.as_ptr(), SEGS as c_int, ptr::null_mut(), 0) };
    assert_eq!(dev.wait(), 0);
    // SAFETY: 8 blocks of `pages` from block 16.
    unsafe { blkioq_read(dev.q, offset, pages.ptr.add(16 * BS).cast(), SEGS * BS, ptr::null_mut(), 0) };
    assert_eq!(dev.wait(), 0);
}

#[test]
fn vectored_and_plain_io_allocate_nothing_once_warm() {
    let dev = Instance::start(c"null:gb=1,bs=4096,irqmode=0");
    let pages = Pages::new(24);
    for i in 0..64 {
        round(&dev, &pages, (i % 8) * 64 * BS as u64);
    }
    let before = allocations();
    for i in 0..1000 {
        round(&dev, &pages, (i % 8) * 64 * BS as u64);
    }
    assert_eq!(allocations() - before, 0, "allocations in 1000 rounds of writev, readv and read");
}

/// A vectored bio the block layer refuses (past the end) allocates what
/// its plain twin does (the error message) and no more: its segment
/// vector went back to the pool.
#[test]
fn a_refused_vectored_bio_gives_its_vector_back() {
    let dev = Instance::start(c"null:gb=1,bs=4096,irqmode=0");
    let pages = Pages::new(24);
    let end = 1u64 << 30;
    let v = pages.scattered(0);
    let mut refuse = |vectored: bool| {
        if vectored {
            // SAFETY: the iovecs and their memory outlive the wait.
            unsafe { blkioq_readv(dev.q, end, v.as_ptr(), SEGS as c_int, ptr::null_mut(), 0) };
        } else {
            // SAFETY: 8 blocks of `pages`.
            unsafe { blkioq_read(dev.q, end, pages.ptr.cast(), SEGS * BS, ptr::null_mut(), 0) };
        }
        assert_eq!(dev.wait(), -libc::EIO);
    };
    for vectored in [true, false, true, false] {
        refuse(vectored);
    }
    let per_round = |refuse: &mut dyn FnMut(bool), vectored: bool| {
        let before = allocations();
        for _ in 0..100 {
            refuse(vectored);
        }
        allocations() - before
    };
    let vectored = per_round(&mut refuse, true);
    let plain = per_round(&mut refuse, false);
    assert!(plain > 0, "a refusal's message is allocated");
    assert_eq!(vectored, plain, "100 refused readv allocate as 100 refused reads do");
}
