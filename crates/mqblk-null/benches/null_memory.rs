//! The memory-backed null device's medium (driver/null/mem.rs) through the
//! whole block layer, inline: 1 MiB and 4 KiB reads of written pages, and
//! 4 KiB writes over them, beside a plain 1 MiB memcpy (the floor). Bytes
//! per second are criterion's throughput.
//!
//! `cargo bench -p mqblk --bench null_memory`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mqblk::{Bio, Buf, Client, Device};

/// `Device::open` with the driver registered.
fn open(spec: &str) -> Result<mqblk::Device, mqblk::Error> {
    mqblk_null::register();
    mqblk::Device::open(spec)
}

const REGION: u64 = 64 << 20;

fn filled() -> (Device, Client) {
    let dev = open("null:gb=1,memory_backed=1,irqmode=0,max_sectors=2048").unwrap();
    let mut c = dev.client();
    let mut buf = Buf::new(1 << 20);
    buf.fill(0x5a);
    for pos in (0..REGION).step_by(1 << 20) {
        buf = c.submit_and_wait(Bio::write(pos, buf)).unwrap().into_buf().unwrap();
    }
    (dev, c)
}

fn reads(cr: &mut Criterion) {
    let (_dev, mut c) = filled();
    let mut g = cr.benchmark_group("null memory_backed");
    for (name, bs) in [("read 1 MiB", 1u64 << 20), ("read 4 KiB", 4096)] {
        g.throughput(Throughput::Bytes(bs));
        let mut buf = Some(Buf::new(bs as usize));
        let mut pos = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                // A stride that visits every block of the region in turn.
                pos = (pos + bs * 7919) % REGION / bs * bs;
                let done = c.submit_and_wait(Bio::read(pos, buf.take().unwrap())).unwrap();
                buf = done.into_buf().ok();
            })
        });
    }
    g.throughput(Throughput::Bytes(4096));
    let mut buf = Some(Buf::new(4096));
    let mut pos = 0u64;
    g.bench_function("write 4 KiB", |b| {
        b.iter(|| {
            pos = (pos + 4096 * 7919) % REGION;
            let done = c.submit_and_wait(Bio::write(pos, buf.take().unwrap())).unwrap();
            buf = done.into_buf().ok();
        })
    });
    // The floor: copying 1 MiB between two buffers of the same region
    // size, stride and alignment, without the block layer.
    g.throughput(Throughput::Bytes(1 << 20));
    let src = vec![0x5au8; REGION as usize];
    let mut dst = Buf::new(1 << 20);
    let mut pos = 0u64;
    g.bench_function("memcpy 1 MiB (the floor)", |b| {
        b.iter(|| {
            pos = (pos + (1 << 20) * 7919) % REGION;
            dst.copy_from_slice(&src[pos as usize..pos as usize + (1 << 20)]);
            criterion::black_box(&dst);
        })
    });
    g.finish();
}

criterion_group!(benches, reads);
criterion_main!(benches);
