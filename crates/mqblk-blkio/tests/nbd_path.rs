//! The C library's `path` opens an `nbd:` spec like any other driver's:
//! a write and a read back through libblkio's API, to an nbdkit export.
//! nbdkit is installed by scripts/test-all.sh; a missing one fails the
//! test, naming it.

use std::alloc::Layout;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::ptr;
use std::time::{Duration, Instant};

use blkio::blkio_completion;

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
    fn blkioq_write(q: *mut Queue, start: u64, buf: *const c_void, len: usize, user_data: *mut c_void, flags: u32);
    fn blkioq_do_io(q: *mut Queue, out: *mut blkio_completion, min: c_int, max: c_int, t: *mut libc::timespec)
        -> c_int;
}

/// Waits for one completion of `q`; returns its ret.
fn wait(q: *mut Queue) -> c_int {
    let mut c = blkio_completion { user_data: ptr::null_mut(), error_msg: ptr::null(), ret: -1, reserved_: [0; 12] };
    // SAFETY: one writable completion, no timeout.
    assert_eq!(unsafe { blkioq_do_io(q, &mut c, 1, 1, ptr::null_mut()) }, 1);
    c.ret
}

#[test]
fn the_c_library_opens_an_nbd_spec() {
    let dir = std::env::temp_dir().join(format!("mqblk-blkio-nbd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("sock");
    let mut kit = Command::new("nbdkit")
        .args(["-U", sock.to_str().unwrap(), "-f", "--exit-with-parent", "memory", "16M"])
        .stdout(Stdio::null())
        .spawn()
        .expect("nbdkit (scripts/test-all.sh installs it)");
    let start = Instant::now();
    while UnixStream::connect(&sock).is_err() {
        assert!(start.elapsed() < Duration::from_secs(20), "nbdkit never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    let spec = CString::new(format!("nbd:uri=nbd+unix:///?socket={}", sock.display())).unwrap();
    let layout = Layout::from_size_align(8192, 4096).unwrap();
    // SAFETY: a non-zero size; freed at the end.
    let mem = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!mem.is_null());
    let mut b = ptr::null_mut();
    // SAFETY: valid C strings and out-pointers; the buffers outlive the I/O
    // (each is waited for), and the instance is destroyed once.
    unsafe {
        assert_eq!(blkio_create(c"mqblk".as_ptr(), &mut b), 0);
        let ok = blkio_set_str(b, c"path".as_ptr(), spec.as_ptr()) == 0 && blkio_connect(b) == 0 && blkio_start(b) == 0;
        assert!(ok, "{}", CStr::from_ptr(blkio_get_error_msg()).to_string_lossy());
        let q = blkio_get_queue(b, 0);
        assert!(!q.is_null());
        ptr::write_bytes(mem, 0x5a, 4096);
        blkioq_write(q, 1 << 20, mem.cast(), 4096, ptr::null_mut(), 0);
        assert_eq!(wait(q), 0);
        blkioq_read(q, 1 << 20, mem.add(4096).cast(), 4096, ptr::null_mut(), 0);
        assert_eq!(wait(q), 0);
        let back = std::slice::from_raw_parts(mem.add(4096), 4096);
        assert!(back.iter().all(|&x| x == 0x5a), "read back what was written, through nbdkit");
        blkio_destroy(&mut b);
        std::alloc::dealloc(mem, layout);
    }
    let _ = kit.kill();
    let _ = kit.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
