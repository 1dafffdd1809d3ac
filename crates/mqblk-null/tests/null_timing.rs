//! null_blk's own timing, seen through the block layer: timer mode
//! (irqmode=2) never completes a request before `completion_nsec`, and
//! `mbps` bounds the bandwidth. Lower bounds only: a slow or busy machine
//! can only make latencies longer.

#![cfg(not(loom))]

use std::time::Duration;

use mqblk::{Bio, Buf};

mod common;
use common::open;

#[test]
fn timer_mode_never_completes_early() {
    // A lower bound only: a slow machine can only make latencies longer.
    let dev = open("null:gb=1,irqmode=2,completion_nsec=300000").unwrap();
    let mut c = dev.client();
    for i in 0..20 {
        let t = std::time::Instant::now();
        c.read_at(&mut [0u8; 4096], i * 4096).unwrap();
        assert!(t.elapsed() >= Duration::from_micros(300), "completed after {:?}", t.elapsed());
    }
}

#[test]
fn mbps_limits_bandwidth() {
    // 40 MiB through a 100 MiB/s device takes at least 0.4 s (lower bound).
    for mode in ["irqmode=0", "irqmode=1"] {
        let dev = open(&format!("null:gb=1,mbps=100,{mode}")).unwrap();
        let mut c = dev.client_with_capacity(8);
        let t = std::time::Instant::now();
        let mut done = Vec::new();
        for i in 0..640u64 {
            if c.in_flight() == 8 {
                c.do_io(&mut done, 1, 8, None).unwrap();
            }
            c.submit(Bio::write(i * 65536, Buf::new(65536)), i).unwrap();
        }
        c.drain();
        assert!(t.elapsed() >= Duration::from_millis(390), "{mode}: {:?}", t.elapsed());
    }
}
