//! Plugging and merging ("blk-plug: don't flush nested plug lists" and
//! "blk-mq: fix plugging in blk_sq_make_request", 2015): nesting, sync
//! bios with and without plug_sync, every flush rule, the merge rules
//! through the whole stack, per-bio completion of merged requests, and
//! data written through merged requests against a model.

#![cfg(not(loom))]

mod common;
use common::filled;
use common::periodic;
use common::proptest_config;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::ram::open;
use mqblk::driver::{Driver, QueueRqResult};
use mqblk::driver::{Hctx, Rq};
use mqblk::{Bio, Buf, Client, Completion, Device, QueueConfig, QueueLimits, Status, SubmitError, TagSetConfig};
use proptest::prelude::*;

/// One `queue_rq` call as the driver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Call {
    sector: u64,
    nr_sectors: u32,
    segments: u32,
    last: bool,
}

#[derive(Default)]
struct Record {
    calls: Mutex<Vec<Call>>,
    /// Complete only this many bytes of each request, failing the rest.
    partial_bytes: Option<u64>,
    /// The queue's max_sectors (None: the default).
    max_sectors: Option<u32>,
}

/// Records every request and completes it inline.
struct Recorder(Arc<Record>);

impl Driver for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, 64)
    }
    fn limits(&self) -> QueueLimits {
        let mut limits = QueueLimits::new(1 << 30, 512);
        limits.max_sectors = self.0.max_sectors.unwrap_or(limits.max_sectors);
        limits
    }
    fn queue_rq(&self, _hctx: &Hctx, rq: Rq, last: bool) -> QueueRqResult {
        let call = Call { sector: rq.sector(), nr_sectors: rq.nr_sectors(), segments: rq.nr_segments(), last };
        self.0.calls.lock().unwrap().push(call);
        match self.0.partial_bytes {
            Some(ok) => rq.complete_bytes(ok, Status::IoErr),
            None => rq.complete(Status::Ok),
        }
        QueueRqResult::Queued
    }
}

fn recorder(opts: QueueConfig, partial_bytes: Option<u64>) -> (Device, Arc<Record>) {
    let record = Arc::new(Record { partial_bytes, ..Record::default() });
    let dev = Device::with_driver_options(Box::new(Recorder(record.clone())), opts).unwrap();
    (dev, record)
}

fn calls(r: &Record) -> Vec<Call> {
    r.calls.lock().unwrap().clone()
}

/// A 4 KiB read at block `n` (far apart for different n: never adjacent).
fn far_read(n: u64) -> Bio {
    Bio::read(n * (1 << 20), Buf::new(4096))
}

fn reap_all(c: &mut Client) -> Vec<Completion> {
    let mut done = Vec::new();
    let n = c.in_flight();
    c.do_io(&mut done, n, n, None).unwrap();
    done
}

/// Runs `f` on another thread and fails if it does not finish: a
/// deadlock becomes a test failure instead of a hung suite.
fn finishes<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("{what}: deadlocked"))
}

#[test]
fn only_the_outermost_plug_flushes() {
    let (dev, record) = recorder(QueueConfig::default(), None);
    let mut c = dev.client();
    {
        let mut outer = c.plug();
        {
            let mut inner = outer.plug();
            inner.submit(far_read(1), 1).unwrap();
            assert_eq!(inner.plug_depth(), 2);
        }
        assert_eq!(outer.plug_depth(), 1);
        assert_eq!(outer.plugged_requests(), 1, "the inner plug's end flushed nothing");
        assert!(calls(&record).is_empty());
        outer.submit(far_read(2), 2).unwrap();
    }
    assert_eq!(c.plug_depth(), 0);
    assert_eq!(c.plugged_requests(), 0);
    let seen = calls(&record);
    assert_eq!(seen.len(), 2);
    assert_eq!(seen.iter().map(|c| c.last).collect::<Vec<_>>(), vec![false, true], "one batch, last on its end");
    assert_eq!(reap_all(&mut c).len(), 2);
    assert_eq!(dev.stats().plug_flushes, 1);
}

#[test]
fn flush_each_flushes_every_level_and_merges_within_it() {
    let opts = QueueConfig { plug_nesting: mqblk::PlugNesting::FlushEach, ..QueueConfig::default() };
    let (dev, record) = recorder(opts, None);
    let mut c = dev.client();
    {
        let mut outer = c.plug();
        for i in 0..4u64 {
            let mut inner = outer.plug();
            inner.submit(Bio::read(i * 4096, Buf::new(4096)), i).unwrap();
            drop(inner);
            assert_eq!(calls(&record).len() as u64, i + 1, "each inner plug flushed its own bio");
        }
    }
    assert!(calls(&record).iter().all(|c| c.segments == 1 && c.last));
    assert_eq!(dev.stats().merges.total(), 0, "nothing to merge within a level of one bio");
    assert_eq!(reap_all(&mut c).len(), 4);
}

/// Submits 16 adjacent 4 KiB bios made by `bio`, each under an inner plug
/// inside one outer plug (as io_submit and the direct-I/O path nest
/// them).
fn nested_batch(c: &mut Client, bio: impl Fn(u64) -> Bio) {
    let mut outer = c.plug_nr_ios(16);
    for i in 0..16u64 {
        let mut inner = outer.plug();
        inner.submit(bio(i * 4096), i).unwrap();
    }
}

#[test]
fn sync_bios_bypass_the_plug_without_plug_sync() {
    // plug_sync=0: blk_sq_make_request before "blk-mq: fix plugging in
    // blk_sq_make_request" (2015): reads are sync, so none waits in the
    // plug and none merges: 16 requests, each issued at once.
    let opts = QueueConfig { plug_sync: false, ..QueueConfig::default() };
    let (dev, record) = recorder(opts, None);
    let mut c = dev.client();
    nested_batch(&mut c, |off| Bio::read(off, Buf::new(4096)));
    let seen = calls(&record);
    assert_eq!(seen.len(), 16);
    assert!(seen.iter().all(|c| c.segments == 1 && c.last), "each issued on its own");
    assert_eq!(reap_all(&mut c).len(), 16);
    let s = dev.stats();
    assert_eq!(s.merges.total(), 0);
    assert_eq!(s.requests.read, 16);
    assert_eq!(s.plug_flushes, 0, "nothing ever waited in the plug");
    assert_eq!(c.plug_cached_tags(), 0);
}

#[test]
fn sync_bios_merge_in_the_plug_with_plug_sync() {
    // The default (Linux since 4.1): the same batch merges into one request
    // of 16 segments, issued when the outermost plug ends.
    let (dev, record) = recorder(QueueConfig::default(), None);
    let mut c = dev.client();
    nested_batch(&mut c, |off| Bio::read(off, Buf::new(4096)));
    assert_eq!(calls(&record), vec![Call { sector: 0, nr_sectors: 128, segments: 16, last: true }]);
    assert_eq!(reap_all(&mut c).len(), 16);
    let s = dev.stats();
    assert_eq!(s.merges.read, 15);
    assert_eq!(s.requests.read, 1);
}

#[test]
fn without_plug_sync_async_writes_still_plug_and_sync_writes_do_not() {
    let opts = QueueConfig { plug_sync: false, ..QueueConfig::default() };
    let (dev, record) = recorder(opts, None);
    let mut c = dev.client();
    nested_batch(&mut c, |off| Bio::write(off, Buf::new(4096)));
    assert_eq!(calls(&record).len(), 1, "async writes merged in the plug");
    nested_batch(&mut c, |off| Bio::write((1 << 20) + off, Buf::new(4096)).with_flags(mqblk::ReqFlags::SYNC));
    assert_eq!(calls(&record).len(), 17, "sync writes issued one by one");
    assert_eq!(reap_all(&mut c).len(), 32);
    assert_eq!(dev.stats().merges.write, 15);
}

#[test]
fn plug_sync_is_a_spec_key_and_a_builder_option() {
    let spec = open("ram:gb=1,irqmode=0,plug_sync=0").unwrap();
    let built = mqblk::DeviceConfig::parse("ram:gb=1,irqmode=0").unwrap().plug_sync(false).build().unwrap();
    for dev in [spec, built] {
        let mut c = dev.client();
        nested_batch(&mut c, |off| Bio::read(off, Buf::new(4096)));
        assert_eq!(reap_all(&mut c).len(), 16);
        assert_eq!(dev.stats().merges.total(), 0);
        assert!(dev.show_stats().contains("plug_sync=0"));
    }
    let e = open("ram:plug_sync=2").unwrap_err().to_string();
    assert!(e.contains("plug_sync"), "{e}");
}

#[test]
fn a_plug_holds_at_most_32_requests() {
    let (dev, record) = recorder(QueueConfig::default(), None);
    let mut c = dev.client();
    let mut plug = c.plug();
    for i in 0..32u64 {
        plug.submit(far_read(i), i).unwrap();
    }
    assert!(calls(&record).is_empty());
    plug.submit(far_read(32), 32).unwrap();
    assert_eq!(calls(&record).len(), 32, "adding a 33rd request flushed the 32 before it");
    assert_eq!(plug.plugged_requests(), 1);
    drop(plug);
    assert_eq!(reap_all(&mut c).len(), 33);
}

#[test]
fn a_large_request_flushes_the_plug_before_the_next() {
    let (dev, record) = recorder(QueueConfig::default(), None);
    let mut c = dev.client();
    let mut plug = c.plug();
    plug.submit(Bio::read(0, Buf::new(128 << 10)), 0).unwrap();
    assert!(calls(&record).is_empty());
    plug.submit(far_read(5), 1).unwrap();
    assert_eq!(calls(&record).len(), 1, "the 128 KiB request went out before the next was added");
    drop(plug);
    assert_eq!(reap_all(&mut c).len(), 2);
}

#[test]
fn waiting_for_a_tag_flushes_the_plug_first() {
    // 4 tags, completions only when requests reach the device: without the
    // flush before sleeping, the fifth submit waits forever for a tag held
    // by a request still in its own plug.
    let dev = open("ram:gb=1,irqmode=0,hw_queue_depth=4").unwrap();
    let stats = finishes("tag wait under a plug", move || {
        let mut c = dev.client_with_capacity(8);
        {
            let mut plug = c.plug();
            for i in 0..6u64 {
                plug.submit(far_read(i), i).unwrap();
            }
        }
        assert_eq!(reap_all(&mut c).len(), 6);
        dev.stats()
    });
    assert_eq!(stats.completed, 6);
    // One flush when the fifth bio found no tag, one when the plug ended.
    assert_eq!(stats.plug_flushes, 2, "{stats:?}");
}

#[test]
fn waiting_for_completions_flushes_the_plug_first() {
    let dev = open("ram:gb=1,irqmode=1").unwrap();
    let done = finishes("do_io under a plug", move || {
        let mut c = dev.client();
        let mut plug = c.plug();
        plug.submit(far_read(0), 7).unwrap();
        let mut done = Vec::new();
        plug.do_io(&mut done, 1, 1, None).unwrap();
        done
    });
    assert_eq!(done[0].user_data, 7);
}

#[test]
fn merged_bios_complete_once_each_with_their_own_status() {
    // The driver transfers the first 8 KiB of each request and fails the
    // rest: of four merged 4 KiB bios, the first two succeed.
    let (dev, record) = recorder(QueueConfig::default(), Some(8192));
    let mut c = dev.client();
    {
        let mut plug = c.plug();
        for i in 0..4u64 {
            plug.submit(Bio::write(i * 4096, Buf::new(4096)), 100 + i).unwrap();
        }
    }
    assert_eq!(calls(&record), vec![Call { sector: 0, nr_sectors: 32, segments: 4, last: true }]);
    let mut done = reap_all(&mut c);
    done.sort_by_key(|d| d.user_data);
    let got: Vec<(u64, Status)> = done.iter().map(|d| (d.user_data, d.status)).collect();
    assert_eq!(got, vec![(100, Status::Ok), (101, Status::Ok), (102, Status::IoErr), (103, Status::IoErr)]);
    assert!(done.iter().all(|d| d.segs.len_bytes() == 4096), "every bio gets its buffer back");
    let s = dev.stats();
    assert_eq!((s.bios.write, s.requests.write, s.merges.write), (4, 1, 3));
}

#[test]
fn front_and_back_merges_put_data_in_place() {
    let dev = open("ram:gb=1,irqmode=1,memory_backed=1").unwrap();
    let mut c = dev.client();
    {
        let mut plug = c.plug();
        for (block, byte) in [(5u64, 0x55u8), (4, 0x44), (6, 0x66), (3, 0x33)] {
            plug.submit(Bio::write(block * 4096, Buf::from_slice(&[byte; 4096])), block).unwrap();
        }
    }
    let done = reap_all(&mut c);
    assert!(done.iter().all(|d| d.status.is_ok()));
    let s = dev.stats();
    assert_eq!((s.requests.write, s.merges.write, s.front_merges), (1, 3, 2));
    let mut back = vec![0u8; 4 * 4096];
    c.read_at(&mut back, 3 * 4096).unwrap();
    for (i, byte) in [0x33u8, 0x44, 0x55, 0x66].into_iter().enumerate() {
        assert!(filled(&back[i * 4096..(i + 1) * 4096], byte), "block {}", i + 3);
    }
}

#[test]
fn a_bad_bio_fails_alone_and_its_neighbours_merge() {
    let dev = open("ram:gb=1,irqmode=0,memory_backed=1,bs=4096").unwrap();
    let capacity = dev.limits().capacity_bytes;
    let mut c = dev.client();
    {
        let mut plug = c.plug();
        plug.submit(Bio::write(0, Buf::from_slice(&[1; 4096])), 0).unwrap();
        let e = plug.submit(Bio::write(100, Buf::new(4096)), 1).unwrap_err();
        assert!(matches!(e.error, SubmitError::Misaligned { .. }), "{e:?}");
        let e = plug.submit(Bio::write(capacity - 4096, Buf::new(8192)), 2).unwrap_err();
        assert!(matches!(e.error, SubmitError::OutOfRange { .. }), "{e:?}");
        plug.submit(Bio::write(4096, Buf::from_slice(&[2; 4096])), 3).unwrap();
    }
    let done = reap_all(&mut c);
    assert_eq!(done.len(), 2);
    assert!(done.iter().all(|d| d.status.is_ok()));
    assert_eq!((dev.stats().requests.write, dev.stats().merges.write), (1, 1));
    let mut back = vec![0u8; 8192];
    c.read_at(&mut back, 0).unwrap();
    assert!(filled(&back[..4096], 1) && filled(&back[4096..], 2));
}

#[test]
fn max_segments_and_max_sectors_cap_merges() {
    for (spec, requests) in [("max_segments=4", 4), ("max_sectors=16", 8), ("max_segments=128", 1)] {
        let dev = open(&format!("ram:gb=1,irqmode=0,{spec}")).unwrap();
        let mut c = dev.client();
        {
            let mut plug = c.plug();
            for i in 0..16u64 {
                plug.submit(Bio::read(i * 4096, Buf::new(4096)), i).unwrap();
            }
        }
        assert_eq!(reap_all(&mut c).len(), 16);
        let s = dev.stats();
        assert_eq!((s.requests.read, s.merges.read), (requests, 16 - requests), "{spec}");
    }
}

/// `ll_back_merge_fn` refuses a bio that would take the request past
/// max_sectors, and that bio starts the next request: a plugged batch of
/// 32 adjacent 4 KiB reads at null_blk's max_sectors of 255 reaches the
/// driver as 31 pages (248 sectors) and 1, not as two halves; at 256 as
/// one request.
#[test]
fn a_batch_past_max_sectors_is_a_full_request_and_the_rest() {
    for (max_sectors, sizes) in [(255, vec![248, 8]), (256, vec![256])] {
        let record = Arc::new(Record { max_sectors: Some(max_sectors), ..Record::default() });
        let dev = Device::with_driver_options(Box::new(Recorder(record.clone())), QueueConfig::default()).unwrap();
        let mut c = dev.client();
        {
            let mut plug = c.plug_nr_ios(32);
            for i in 0..32u64 {
                plug.submit(Bio::read(i * 4096, Buf::new(4096)), i).unwrap();
            }
        }
        assert_eq!(reap_all(&mut c).len(), 32);
        let seen: Vec<u32> = calls(&record).iter().map(|c| c.nr_sectors).collect();
        assert_eq!(seen, sizes, "max_sectors={max_sectors}");
        assert_eq!(dev.stats().plug_flushes, 1, "one flush: no request reached 128 KiB before the last");
    }
}

#[test]
fn nothing_merges_across_ops_flags_or_gaps() {
    use mqblk::ReqFlags;
    let dev = open("ram:gb=1,irqmode=0,discard=1,memory_backed=1").unwrap();
    let mut c = dev.client();
    {
        let mut plug = c.plug();
        plug.submit(Bio::read(0, Buf::new(4096)), 0).unwrap();
        plug.submit(Bio::write(4096, Buf::new(4096)), 1).unwrap(); // op
        plug.submit(Bio::write(8192, Buf::new(4096)).with_flags(ReqFlags::FUA), 2).unwrap(); // FUA
        plug.submit(Bio::write(12288, Buf::new(4096)).with_flags(ReqFlags::SYNC), 3).unwrap(); // class
        plug.submit(Bio::write(20480, Buf::new(4096)).with_flags(ReqFlags::SYNC), 4).unwrap(); // gap
        plug.submit(Bio::discard(1 << 20, 4096), 5).unwrap();
        plug.submit(Bio::discard((1 << 20) + 4096, 4096), 6).unwrap(); // discards merge
    }
    assert_eq!(reap_all(&mut c).len(), 7);
    let s = dev.stats();
    assert_eq!((s.requests.total(), s.merges.total()), (6, 1), "{s:?}");
}

#[test]
fn nr_ios_takes_tags_in_a_batch_and_returns_the_unused() {
    let dev = open("ram:gb=1,irqmode=1,hw_queue_depth=64").unwrap();
    let mut c = dev.client();
    let mut batched = 0;
    for round in 0..8u64 {
        {
            let mut plug = c.plug_nr_ios(8);
            plug.submit(far_read(round), round).unwrap();
            let cached = plug.plug_cached_tags();
            assert!(cached <= 7, "at most nr_ios tags in all: {cached}");
            batched += cached;
        }
        reap_all(&mut c);
        assert_eq!(dev.busy_tags(), 0, "cached tags went back when the plug ended");
    }
    assert!(batched > 0, "the batched get took more than one tag at least once");
}

/// Bios of a model workload: (first block, blocks, write?).
fn workload() -> impl Strategy<Value = Vec<Vec<(u64, u64, bool)>>> {
    // Batches of bios; a bio often starts where the previous one ended (or
    // ends where it started) so that merges happen in both directions.
    let bio = (0u64..3, 0u64..64, 1u64..9, prop::bool::weighted(0.7));
    // Fewer and shorter batches under Miri, where one case of the full
    // size took most of a minute (a batch of 8 still merges both ways).
    let (per_batch, batches) = if cfg!(miri) { (1..9, 1..4) } else { (1..24, 1..12) };
    prop::collection::vec(prop::collection::vec(bio, per_batch), batches).prop_map(|batches| {
        let mut prev = (0u64, 1u64);
        batches
            .into_iter()
            .map(|batch| {
                batch
                    .into_iter()
                    .map(|(how, at, len, write)| {
                        let start = match how {
                            0 => prev.0 + prev.1,
                            1 => prev.0.saturating_sub(len),
                            _ => at,
                        }
                        .min(BLOCKS - len);
                        prev = (start, len);
                        (start, len, write)
                    })
                    .collect()
            })
            .collect()
    })
}

const BLOCKS: u64 = 96;
const BS: u64 = 512;

proptest! {
    // One case under Miri (each took about 50 s there on a loaded machine).
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 1 } else { 48 }, ..proptest_config(48) })]

    /// Random writes and reads submitted in plugged batches, many merged,
    /// read back exactly like a plain byte array.
    #[test]
    fn merged_io_matches_a_byte_model(batches in workload(), irqmode in 0u8..2) {
        let dev = open(&format!("ram:size=1,irqmode={irqmode},memory_backed=1,bs=512")).unwrap();
        let mut c = dev.client_with_capacity(64);
        let mut model = vec![0u8; (BLOCKS * BS) as usize];
        let mut stamp = 0u8;
        for batch in &batches {
            let mut expect = Vec::new();
            {
                let mut plug = c.plug();
                for (i, &(block, len, write)) in batch.iter().enumerate() {
                    let range = (block * BS) as usize..((block + len) * BS) as usize;
                    let bio = if write {
                        stamp = stamp.wrapping_add(1).max(1);
                        let data = periodic(range.len(), 256, |j| stamp ^ (j as u8));
                        model[range.clone()].copy_from_slice(&data);
                        Bio::write(block * BS, Buf::from_slice(&data))
                    } else {
                        expect.push((i as u64, model[range.clone()].to_vec()));
                        Bio::read(block * BS, Buf::new(range.len()))
                    };
                    plug.submit(bio, i as u64).unwrap();
                }
            }
            let done = reap_all(&mut c);
            prop_assert_eq!(done.len(), batch.len(), "every bio completes once");
            for d in &done {
                prop_assert!(d.status.is_ok());
                if let Some((_, want)) = expect.iter().find(|(i, _)| *i == d.user_data) {
                    prop_assert_eq!(&d.segs.as_slice()[0][..], &want[..], "read {}", d.user_data);
                }
            }
        }
        let mut back = vec![0u8; model.len()];
        c.read_at(&mut back, 0).unwrap();
        prop_assert_eq!(back, model);
    }
}

/// Walks every merged request's segments, and inside each segment walks
/// them all again (`for_each_segment` takes `&self`, so a driver may):
/// records (position, first byte, segments seen by the inner walk).
struct NestedWalker(Arc<Mutex<Vec<(u64, u8, u32)>>>);

impl Driver for NestedWalker {
    fn name(&self) -> &str {
        "nested-walker"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, 8)
    }
    fn limits(&self) -> QueueLimits {
        QueueLimits::new(1 << 30, 512)
    }
    fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
        let mut seen = self.0.lock().unwrap();
        rq.for_each_segment(|pos, data| {
            let mut inner = 0;
            rq.for_each_segment(|_, _| inner += 1);
            // `data` is read after the inner walk: sound only if neither
            // walk hands out a `&mut` to the bio slots (Miri checks).
            seen.push((pos, data[0], inner));
        });
        drop(seen);
        rq.complete(Status::Ok);
        QueueRqResult::Queued
    }
}

#[test]
fn segments_of_a_merged_request_can_be_walked_from_inside_a_walk() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let dev = Device::with_driver(Box::new(NestedWalker(seen.clone()))).unwrap();
    let mut c = dev.client();
    {
        let mut plug = c.plug();
        for i in 0..3u8 {
            plug.submit(Bio::write(u64::from(i) * 4096, Buf::from_slice(&[i + 1; 4096])), u64::from(i)).unwrap();
        }
    }
    assert_eq!(reap_all(&mut c).len(), 3);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, vec![(0, 1, 3), (4096, 2, 3), (8192, 3, 3)], "one request of three segments, in device order");
}
