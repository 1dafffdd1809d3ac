//! The `nbd:` driver allocates nothing per request once warm: reads and
//! writes at queue depth 16, vectored ones among them, sent and answered
//! over a connection to nbdkit (a process of its own, so every allocation
//! this process makes is the client's: its thread, the connection's
//! receiving thread, kblockd). Counted by a global allocator over all
//! threads; the replies' data is checked too.

use std::alloc::{GlobalAlloc, Layout, System};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mqblk::{Bio, BioVec, Buf, Completion, Device};

/// Counts every allocation of the process.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator, only counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: allocated by `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as GlobalAlloc::realloc requires, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

const DEPTH: usize = 16;
const BLOCK: usize = 4096;

/// One round of DEPTH writes (every fourth a writev of two segments),
/// then DEPTH reads of the same blocks, each checked; the buffers and
/// segment vectors come back in the completions and are used again.
fn round(c: &mut mqblk::Client, bufs: &mut Vec<BioVec>, done: &mut Vec<Completion>, seed: u8) {
    for (i, segs) in bufs.drain(..).enumerate() {
        let (at, byte) = ((i * 2 * BLOCK) as u64, seed.wrapping_add(i as u8));
        let bio = match segs.into_buf() {
            Ok(mut buf) => {
                buf.fill(byte);
                Bio::write(at, buf)
            }
            Err(segs) => {
                let mut segs = segs.into_vec(); // the vector itself, moved: no allocation
                segs.iter_mut().for_each(|b| b.fill(byte));
                Bio::writev(at, segs)
            }
        };
        c.submit(bio, i as u64).unwrap();
    }
    reap_into(c, bufs, done);
    for (i, segs) in bufs.drain(..).enumerate() {
        let at = (i * 2 * BLOCK) as u64;
        let bio = match segs.into_buf() {
            Ok(buf) => Bio::read(at, buf),
            Err(segs) => Bio::readv(at, segs),
        };
        c.submit(bio, i as u64).unwrap();
    }
    reap_into(c, bufs, done);
    for (i, segs) in bufs.iter().enumerate() {
        assert!(segs.iter().all(|b| b.iter().all(|&x| x == seed.wrapping_add(i as u8))), "block {i}");
    }
}

/// Waits for DEPTH completions and puts their buffers back in tag order.
fn reap_into(c: &mut mqblk::Client, bufs: &mut Vec<BioVec>, done: &mut Vec<Completion>) {
    done.clear();
    while done.len() < DEPTH {
        c.do_io(done, 1, DEPTH, Some(Duration::from_secs(30))).unwrap();
    }
    done.sort_unstable_by_key(|d| d.user_data);
    for d in done.drain(..) {
        assert!(d.status.is_ok(), "{:?}", d.status);
        bufs.push(d.segs);
    }
}

#[test]
fn warm_reads_and_writes_allocate_nothing() {
    let dir = std::env::temp_dir().join(format!("mqblk-nbd-alloc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("sock");
    let mut kit = Command::new("nbdkit")
        .args(["-U", sock.to_str().unwrap(), "-f", "--exit-with-parent", "memory", "64M"])
        .stdout(Stdio::null())
        .spawn()
        .expect("nbdkit (scripts/test-all.sh installs it)");
    let start = Instant::now();
    while UnixStream::connect(&sock).is_err() {
        assert!(start.elapsed() < Duration::from_secs(20), "nbdkit never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    mqblk_nbd::client::register();
    let dev = Device::open(&format!("nbd:uri=nbd+unix:///?socket={}", sock.display())).unwrap();
    let mut c = dev.client_with_capacity(DEPTH);
    let mut bufs: Vec<BioVec> = (0..DEPTH)
        .map(|i| match i % 4 {
            0 => BioVec::from(vec![Buf::new(BLOCK / 2), Buf::new(BLOCK / 2)]),
            _ => BioVec::from(Buf::new(BLOCK)),
        })
        .collect();
    let mut done = Vec::with_capacity(DEPTH);
    for seed in 0..8 {
        round(&mut c, &mut bufs, &mut done, seed); // warm: pools, slots, the stream
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    assert!(before > 0, "the counter sees the set-up's allocations");
    for seed in 8..72 {
        round(&mut c, &mut bufs, &mut done, seed);
    }
    let allocated = ALLOCS.load(Ordering::Relaxed) - before;
    drop((c, dev));
    let _ = kit.kill();
    let _ = kit.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(allocated, 0, "allocations during 2,048 warm requests");
}
