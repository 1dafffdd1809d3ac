//! Bios over kernel buffers (`Bio::read_kernel`, `KernelBuf`): a driver
//! that takes them gets each as one request of one segment, whose
//! physical segment is (offset 0, its length), with the buffer named;
//! they never merge, even plugged and adjacent; a device without the
//! feature, a bio larger than one request, or a non-data op is refused
//! with the reason named, before any request is made.

#![cfg(not(loom))]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Forward;
use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq};
use mqblk::{Bio, Buf, Device, KernelBuf, Op, QueueLimits, ReqFlags, Status, SubmitError, TagSetConfig};

/// What the driver saw of each request: op, byte offset, length, its
/// kernel buffer, its physical segments.
type Seen = (Op, u64, u64, Option<KernelBuf>, Vec<(usize, usize)>);

struct TakesKernelBufs {
    kernel_buffers: bool,
    seen: Mutex<Vec<Seen>>,
}

impl Driver for TakesKernelBufs {
    fn name(&self) -> &str {
        "kbuf"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, 8)
    }
    fn limits(&self) -> QueueLimits {
        let mut limits = QueueLimits::new(64 << 20, 512);
        limits.max_sectors = 256; // 128 KiB requests
        limits.max_segment_size = u32::MAX; // as a driver that maps nothing (file)
        limits.kernel_buffers = self.kernel_buffers;
        limits
    }
    fn queue_rq(&self, _hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
        let mut phys = Vec::new();
        rq.for_each_phys_segment(|addr, len| phys.push((addr as usize, len)));
        self.seen.lock().unwrap().push((rq.op(), rq.pos_bytes(), rq.len_bytes(), rq.kernel_buf(), phys));
        rq.complete(Status::Ok);
        QueueRqResult::Queued
    }
}

fn device(kernel_buffers: bool) -> (Arc<TakesKernelBufs>, Device) {
    let driver = Arc::new(TakesKernelBufs { kernel_buffers, seen: Mutex::new(Vec::new()) });
    let dev = Device::with_driver(Box::new(Forward(driver.clone()))).unwrap();
    (driver, dev)
}

const KBUF: KernelBuf = KernelBuf { fd: 9, q_id: 1, tag: 3 };

#[test]
fn each_kernel_buffer_bio_is_one_unmerged_request_naming_its_buffer() {
    let (driver, dev) = device(true);
    let mut c = dev.client();
    let mut done = Vec::new();
    {
        // Four adjacent writes under a plug: Buf bios would merge into one.
        let mut plug = c.plug();
        for i in 0..4u16 {
            let kbuf = KernelBuf { tag: i, ..KBUF };
            plug.submit(Bio::write_kernel(u64::from(i) * 8192, kbuf, 8192), u64::from(i)).unwrap();
        }
    }
    c.do_io(&mut done, 4, 4, Some(Duration::from_secs(10))).unwrap();
    assert!(done.iter().all(|d| d.status == Status::Ok && d.segs.kernel_buf().is_some()), "{done:?}");
    assert_eq!(dev.stats().merges.write, 0, "kernel buffers never merge");
    let mut seen = driver.seen.lock().unwrap().clone();
    seen.sort_by_key(|s| s.1);
    assert_eq!(seen.len(), 4);
    for (i, (op, pos, len, kbuf, phys)) in seen.into_iter().enumerate() {
        assert_eq!((op, pos, len), (Op::Write, i as u64 * 8192, 8192));
        assert_eq!(kbuf, Some(KernelBuf { tag: i as u16, ..KBUF }));
        assert_eq!(phys, [(0, 8192)], "one segment, addressed by its offset into the buffer");
    }
    // A read at the largest request size goes through whole.
    let read = c.submit_and_wait_completion(Bio::read_kernel(1 << 20, KBUF, 128 << 10)).unwrap();
    assert_eq!(read.status, Status::Ok);
    let last = driver.seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!((last.0, last.1, last.2, last.3), (Op::Read, 1 << 20, 128 << 10, Some(KBUF)));
}

#[test]
fn refusals_name_the_reason_and_make_no_request() {
    let (driver, dev) = device(false);
    let mut c = dev.client();
    let e = c.submit(Bio::read_kernel(0, KBUF, 4096), 1).unwrap_err();
    assert!(matches!(e.error, SubmitError::KernelBuffer { op: Op::Read, len: 4096, .. }), "{e}");
    assert!(e.to_string().contains("does not take kernel buffers"), "{e}");

    let (driver2, dev2) = device(true);
    let mut c2 = dev2.client();
    let e = c2.submit(Bio::write_kernel(0, KBUF, 256 << 10), 2).unwrap_err();
    assert!(e.to_string().contains("cannot be split"), "{e}");
    let e = c2.submit(Bio::read_kernel(100, KBUF, 4096), 3).unwrap_err();
    assert!(matches!(e.error, SubmitError::Misaligned { .. }), "{e}");
    let e = c2.submit(Bio::read_kernel(64 << 20, KBUF, 4096), 4).unwrap_err();
    assert!(matches!(e.error, SubmitError::OutOfRange { .. }), "{e}");
    // A kernel buffer's words on a flush, and one without its flag.
    let mut flush = Bio::flush();
    flush.segs = mqblk::BioVec::kernel(KBUF, 4096);
    flush.len = 4096;
    let e = c2.submit(flush, 5).unwrap_err();
    assert!(e.to_string().contains("only reads and writes"), "{e}");
    let mut bare = Bio::read_kernel(0, KBUF, 4096);
    bare.flags = ReqFlags::NONE;
    let e = c2.submit(bare, 6).unwrap_err();
    assert!(e.to_string().contains("KERNEL_BUF"), "{e}");
    assert!(driver.seen.lock().unwrap().is_empty() && driver2.seen.lock().unwrap().is_empty());
    // Buf bios are untouched by the feature.
    assert_eq!(c2.submit_and_wait_completion(Bio::read(0, Buf::new(4096))).unwrap().status, Status::Ok);
}
