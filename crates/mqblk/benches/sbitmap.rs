//! Micro-benchmarks of the hot paths: an uncontended tag get + put on the
//! sbitmap, and one whole I/O through the block layer on an inline RAM
//! disk, the tests' driver (submit, dispatch, complete, reap).

#[path = "../tests/common/ram.rs"]
mod ram;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use mqblk::sbitmap::SbitmapQueue;
use mqblk::sbitmap::{AllocHint, Sbitmap};
use mqblk::{Bio, Buf};
use ram::open;

fn tag_get_put(c: &mut Criterion) {
    let sb = Sbitmap::new(128, None, false);
    let mut hint = AllocHint::new(0);
    c.bench_function("sbitmap get+clear (depth 128)", |b| {
        b.iter(|| {
            let bit = sb.get(&mut hint).expect("free bit");
            sb.clear(black_box(bit), Some(&mut hint));
        })
    });
    let sbq = SbitmapQueue::new(128, false);
    c.bench_function("sbitmap_queue get+clear, no waiters (depth 128)", |b| {
        b.iter(|| {
            let bit = sbq.get(&mut hint).expect("free bit");
            sbq.clear(black_box(bit), Some(&mut hint));
        })
    });
    // A held bit in every other position keeps the search non-trivial.
    let sb = Sbitmap::new(128, None, false);
    let mut h = AllocHint::new(0);
    let held: Vec<u32> = (0..64).map(|_| sb.get(&mut h).unwrap()).collect();
    black_box(&held);
    c.bench_function("sbitmap get+clear, half full (depth 128)", |b| {
        b.iter(|| {
            let bit = sb.get(&mut hint).expect("free bit");
            sb.clear(black_box(bit), Some(&mut hint));
        })
    });
}

fn one_io(c: &mut Criterion) {
    let dev = open("ram:gb=1,irqmode=0,hw_queue_depth=128").unwrap();
    let mut client = dev.client_with_capacity(32);
    let mut bufs: Vec<Buf> = (0..32).map(|_| Buf::new(4096)).collect();
    let mut done = Vec::with_capacity(32);
    c.bench_function("ram irqmode=0 4k read, batches of 32 (per batch)", |b| {
        b.iter(|| {
            for (i, buf) in bufs.drain(..).enumerate() {
                client.submit(Bio::read(i as u64 * 4096, buf), i as u64).unwrap();
            }
            done.clear();
            client.do_io(&mut done, 32, 32, None).unwrap();
            bufs.extend(done.drain(..).map(|c| c.segs.into_buf().unwrap()));
        })
    });
}

criterion_group!(benches, tag_get_put, one_io);
criterion_main!(benches);
