//! The stress harness shared by the block layer's stress tests (on its test
//! RAM disk, tests/stress.rs) and null_blk's (mqblk-null's
//! null_completion_stress.rs, which includes this file by path): many
//! threads over few tags, every completion counted.

use std::collections::HashSet;

use mqblk::{Bio, Buf};

pub const THREADS: usize = 6;
pub const IOS_PER_THREAD: u64 = 20_000;

/// `THREADS` clients of `depth_per_client` each on `dev` (a device with
/// few tags), each submitting `IOS_PER_THREAD` reads and writes and
/// checking that each completes once, to it, with its own user_data; then
/// every tag must be back. `spec` names the device in messages.
pub fn stress(dev: mqblk::Device, spec: &str, depth_per_client: usize) {
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let dev = &dev;
            s.spawn(move || {
                let mut client = dev.client_with_capacity(depth_per_client);
                let mut free: Vec<Buf> = (0..depth_per_client).map(|_| Buf::new(4096)).collect();
                let mut seen = HashSet::new();
                let mut done = Vec::with_capacity(depth_per_client);
                let mut next = 0u64;
                let blocks = dev.limits().capacity_bytes / 4096;
                while seen.len() < IOS_PER_THREAD as usize {
                    while next < IOS_PER_THREAD {
                        let Some(buf) = free.pop() else { break };
                        let user_data = (t as u64) << 32 | next;
                        let off = (next * 7919 % blocks) * 4096;
                        let bio = if next % 3 == 0 { Bio::write(off, buf) } else { Bio::read(off, buf) };
                        client.submit(bio, user_data).unwrap();
                        next += 1;
                    }
                    done.clear();
                    client.do_io(&mut done, 1, depth_per_client, None).unwrap();
                    for c in done.drain(..) {
                        assert!(c.status.is_ok(), "{:?}", c.status);
                        assert_eq!(c.user_data >> 32, t as u64, "completion went to the wrong client");
                        assert!(seen.insert(c.user_data), "user_data {} completed twice", c.user_data);
                        free.push(c.segs.into_buf().unwrap());
                    }
                }
                assert_eq!(client.in_flight(), 0);
                assert_eq!(client.stats().submitted, IOS_PER_THREAD);
                assert_eq!(client.stats().completed, IOS_PER_THREAD);
            });
        }
    });
    let total = THREADS as u64 * IOS_PER_THREAD;
    let stats = dev.stats();
    assert_eq!(stats.dispatched, total, "{spec}");
    assert_eq!(stats.completed, total, "{spec}");
    assert_eq!(dev.busy_tags(), 0, "every tag came back ({spec})");
}
