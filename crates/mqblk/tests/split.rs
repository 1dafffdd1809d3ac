//! Bios larger than a request are split into several requests (max_sectors
//! 255, null_blk's default, on the test RAM disk): the data lands where it
//! belongs, the bio completes once, the first error of any piece is its
//! status, and every tag comes back.
#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::periodic;
use common::ram::open;
use common::Held;
use mqblk::driver::{Driver, QueueRqResult};
use mqblk::driver::{Hctx, Rq};
use mqblk::{Bio, Buf, Device, QueueLimits, ReqFlags, Status, SubmitError, TagSetConfig};

/// Largest request in sectors (null_blk's default natively; smaller under
/// Miri, so bios of a fraction of the size still split as often).
const MAX_SECTORS: usize = if cfg!(miri) { 8 } else { 255 };
/// The split bios' size: 1 MiB natively, 16 KiB under Miri, which
/// interprets every byte copied.
const BIO_BYTES: usize = if cfg!(miri) { 16 << 10 } else { 1 << 20 };
/// Requests one such bio becomes.
const PIECES: u64 = BIO_BYTES.div_ceil(MAX_SECTORS * 512) as u64;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    periodic(len, 256, |i| (i as u8).wrapping_mul(31).wrapping_add(seed))
}

#[test]
fn one_mib_bios_split_and_read_back() {
    for mode in ["irqmode=0", "irqmode=1", "irqmode=2,completion_nsec=3000"] {
        let dev = open(&format!("ram:size=16,memory_backed=1,max_sectors={MAX_SECTORS},{mode}")).unwrap();
        let mut c = dev.client();
        let data = pattern(BIO_BYTES, 7);
        c.write_at(&data, 3 * 4096).unwrap();
        let mut back = vec![0u8; BIO_BYTES];
        c.read_at(&mut back, 3 * 4096).unwrap();
        assert!(back == data, "{mode}: data read back differs");
        let stats = dev.stats();
        // Natively 1 MiB in pieces of 255 sectors (130,560 bytes): 9 requests each way.
        assert_eq!(stats.dispatched, 2 * PIECES, "{mode}");
        assert_eq!(stats.splits, 2, "{mode}");
        assert_eq!(dev.busy_tags(), 0);
    }
}

#[test]
fn many_split_bios_in_flight_each_complete_once() {
    let spec = format!("ram:size=64,memory_backed=1,irqmode=1,hw_queue_depth=8,max_sectors={MAX_SECTORS}");
    let dev = open(&spec).unwrap();
    // 16 bios of 9 pieces over 8 tags (under Miri 3 bios of 4 pieces:
    // still more pieces than tags).
    const BIOS: u64 = if cfg!(miri) { 3 } else { 16 };
    let mut c = dev.client_with_capacity(16);
    let mut done = Vec::new();
    let offset = |i: u64| i * BIO_BYTES as u64;
    for i in 0..BIOS {
        c.submit(Bio::write(offset(i), Buf::from_slice(&pattern(BIO_BYTES, i as u8))), i).unwrap();
    }
    while c.in_flight() > 0 {
        c.do_io(&mut done, 1, 16, None).unwrap();
    }
    let mut ids: Vec<u64> = done.iter().map(|d| d.user_data).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..BIOS).collect::<Vec<_>>(), "each bio completes exactly once");
    assert!(done.iter().all(|d| d.status.is_ok() && d.segs.len_bytes() == BIO_BYTES as u64));
    for i in 0..BIOS {
        let mut back = vec![0u8; BIO_BYTES];
        c.read_at(&mut back, offset(i)).unwrap();
        assert!(back == pattern(BIO_BYTES, i as u8), "bio {i}");
    }
    assert_eq!(dev.busy_tags(), 0);
}

/// Fails the request that covers sector 300 with Medium, completes the rest.
struct BadSector {
    seen: AtomicU64,
}

impl Driver for BadSector {
    fn name(&self) -> &str {
        "badsector"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, 4)
    }
    fn limits(&self) -> QueueLimits {
        let mut l = QueueLimits::new(1 << 24, 512);
        l.max_sectors = 128;
        l
    }
    fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
        self.seen.fetch_add(1, Ordering::Relaxed);
        let range = rq.sector()..rq.sector() + u64::from(rq.nr_sectors());
        rq.complete(if range.contains(&300) { Status::Medium } else { Status::Ok });
        QueueRqResult::Queued
    }
}

#[test]
fn first_error_of_any_piece_is_the_bio_status() {
    let dev = Device::with_driver(Box::new(BadSector { seen: AtomicU64::new(0) })).unwrap();
    let mut c = dev.client();
    // 512 sectors in 4 pieces of 128; the third (256..384) holds sector 300.
    c.submit(Bio::read(0, Buf::new(512 * 512)), 5).unwrap();
    let mut done = Vec::new();
    assert_eq!(c.do_io(&mut done, 1, 4, None).unwrap(), 1);
    assert_eq!((done[0].user_data, done[0].status), (5, Status::Medium));
    assert_eq!(dev.stats().dispatched, 4);
    // A bio clear of the bad sector is fine.
    c.submit(Bio::read(1024 * 512, Buf::new(512 * 512)), 6).unwrap();
    done.clear();
    c.do_io(&mut done, 1, 4, None).unwrap();
    assert_eq!(done[0].status, Status::Ok);
    assert_eq!(dev.busy_tags(), 0);
}

#[test]
fn nowait_split_is_refused_whole_with_its_buffer() {
    // 2 tags, held by the driver: the first bio (2 pieces) takes both; the
    // second bio with NOWAIT finds no tag for its first piece and comes
    // back intact.
    let held = Arc::new(Mutex::new(Vec::new()));
    // 2 tags; pieces of MAX_SECTORS.
    let mut holding = Held::new(held.clone(), 2);
    holding.limits = QueueLimits::new(16 << 20, 512);
    holding.limits.max_sectors = MAX_SECTORS as u32;
    let dev = Device::with_driver(Box::new(holding)).unwrap();
    let mut c = dev.client_with_capacity(4);
    let piece_bytes = MAX_SECTORS * 512;
    c.submit(Bio::read(0, Buf::new(2 * piece_bytes)), 1).unwrap();
    assert_eq!(held.lock().unwrap().len(), 2, "the first bio holds both tags");
    let data = pattern(2 * piece_bytes + piece_bytes / 3 / 512 * 512, 3);
    let bio = Bio::write(1 << 20, Buf::from_slice(&data)).with_flags(ReqFlags::NOWAIT);
    let r = c.submit(bio, 2).unwrap_err();
    assert_eq!(r.error, SubmitError::Again);
    assert_eq!(r.bio.segs.as_slice()[0][..], data[..]);
    assert_eq!(c.in_flight(), 1);
    for rq in held.lock().unwrap().drain(..) {
        rq.complete(Status::Ok);
    }
    c.drain();
    assert_eq!(dev.busy_tags(), 0);
}
