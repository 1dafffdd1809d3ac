//! The Rust twin of bench/qd1.c: N 4 KiB reads at queue depth 1 straight
//! through an mqblk `Client` (the buffer moves in and comes back), to
//! compare instructions per I/O with the C API's.
//!
//!     qd1_native SPEC N

use mqblk::{Bio, Buf, Device};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    assert_eq!(args.len(), 3, "usage: qd1_native SPEC N");
    let n: u64 = args[2].parse().expect("N");
    mqblk_null::register();
    mqblk_file::register();
    let dev = Device::open(&args[1]).expect("open");
    let mut client = dev.client();
    let mut buf = Some(Buf::new(4096));
    let mut done = Vec::with_capacity(1);
    for i in 0..n {
        let bio = Bio::read((i % 1024) * 4096, buf.take().expect("buffer back"));
        client.submit(bio, i).expect("submit");
        done.clear();
        assert_eq!(client.do_io(&mut done, 1, 1, None).expect("do_io"), 1);
        let c = done.pop().expect("completion");
        assert!(c.status.is_ok());
        buf = c.segs.into_buf().ok();
    }
}
