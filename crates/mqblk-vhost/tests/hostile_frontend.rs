//! A frontend that breaks what it sends cannot end the server: a memory
//! region past its file's end is refused, a memory file shrunk under a
//! request ends that connection (and the next is served), each broken
//! ring stops its queue with a log line that names why, the frontend told
//! through the ring's error eventfd, and a broken chain (a loop, a buffer
//! outside guest memory) is given back with nothing written and a log
//! line, the queue serving on. Each test acts as the frontend over the
//! socket (tests/common), its guest memory a memfd.

mod common;

use common::*;
use vhost::VhostBackend;
use virtio_bindings::virtio_blk::VIRTIO_BLK_S_OK;

/// A read served whole on a fresh connection: the server is alive.
fn serves_a_read(served: &Served) {
    let mut guest = Guest::connect(&served.socket, Memfd::new(MEM_BYTES));
    guest.start();
    guest.read_chain(0, 8, DATA);
    guest.offer(0);
    assert_eq!(guest.wait_used(), 1);
    assert_eq!(guest.used(0), (0, 4097));
    assert_eq!(guest.status(0), VIRTIO_BLK_S_OK as u8);
}

/// Waits for the ring's error eventfd; the server's log lines naming
/// `reason`.
fn stopped_because(guest: &Guest, reason: &str) -> Vec<String> {
    guest.err.read().unwrap();
    let lines = logged(reason);
    assert!(lines.iter().any(|l| l.contains("queue 0 stopped")), "no stop saying '{reason}': {lines:?}");
    lines
}

#[test]
fn a_region_past_its_files_end_is_refused_and_the_server_serves_on() {
    let served = Served::start("past-end");
    let mut guest = Guest::connect(&served.socket, Memfd::new(0x10000));
    guest.set_mem_table(MEM_BYTES).expect_err("a region of 1 MiB in a file of 64 KiB");
    let lines = logged("runs past the end of its file");
    assert!(
        lines.iter().any(|l| l.contains(
            "memory region 0 (guest address 0x0, 1048576 bytes at file offset 0) runs past the end of its file (65536 bytes)"
        )),
        "{lines:?}"
    );
    guest.wait_hang_up();
    serves_a_read(&served);
    assert_eq!(served.stop().connections, 2);
}

#[test]
fn a_memory_file_shrunk_under_a_request_ends_the_connection_not_the_server() {
    let served = Served::start("shrunk");
    let mut guest = Guest::connect(&served.socket, Memfd::new(MEM_BYTES));
    guest.start();
    // The rings and the header stay in the file; the data buffer does not.
    guest.mem.file.set_len(0x8_0000).unwrap();
    guest.read_chain(0, 8, 0xc_0000);
    guest.offer(0);
    guest.wait_hang_up();
    let lines = logged("memory file shrank");
    assert!(lines.iter().any(|l| l.contains("queue 0 stopped") && l.contains("1 requests failed")), "{lines:?}");
    // The used ring is inside the file still: nothing was put in it.
    assert_eq!(u16::from_le_bytes(guest.mem.read(USED + 2)), 0, "the faulted request is not answered");
    serves_a_read(&served);
    let summary = served.stop();
    assert_eq!((summary.connections, summary.errors), (2, 1));
}

#[test]
fn an_avail_index_more_than_a_ring_ahead_stops_the_queue() {
    let served = Served::start("avail-jump");
    let mut guest = Guest::connect(&served.socket, Memfd::new(MEM_BYTES));
    guest.start();
    guest.read_chain(0, 0, DATA);
    guest.set_avail_idx(QUEUE_SIZE + 20);
    guest.kick.write(1).unwrap();
    stopped_because(&guest, "avail index 36 is more than a ring (16) ahead of 0");
    served.stop();
}

#[test]
fn a_base_far_ahead_of_the_used_index_stops_the_queue() {
    let served = Served::start("base-ahead");
    let mut guest = Guest::connect(&served.socket, Memfd::new(MEM_BYTES));
    guest.set_mem_table(MEM_BYTES).unwrap();
    guest.start_ring_at(QUEUE_SIZE, 40, USED).unwrap();
    guest.read_chain(0, 0, DATA);
    guest.offer(0);
    stopped_because(&guest, "starts at avail 40, more than a ring (16) past the used index 0");
    served.stop();
}

#[test]
fn a_queue_size_not_a_power_of_two_stops_the_queue() {
    let served = Served::start("size-12");
    let mut guest = Guest::connect(&served.socket, Memfd::new(MEM_BYTES));
    guest.set_mem_table(MEM_BYTES).unwrap();
    guest.start_ring_at(12, 0, USED).unwrap();
    guest.read_chain(0, 0, DATA);
    guest.offer(0);
    stopped_because(&guest, "the frontend set a ring of 12 entries, not a power of two");
    served.stop();
}

#[test]
fn a_queue_size_above_the_maximum_is_refused() {
    let served = Served::start("size-2048");
    let mut guest = Guest::connect(&served.socket, Memfd::new(MEM_BYTES));
    guest.set_mem_table(MEM_BYTES).unwrap();
    guest.fe.set_vring_num(0, 2048).expect_err("above the 1024 offered");
    assert!(!logged("requested queue size 2048 out of range (1-1024)").is_empty());
    guest.wait_hang_up();
    serves_a_read(&served);
    served.stop();
}

#[test]
fn a_used_ring_past_guest_memory_stops_the_queue() {
    let served = Served::start("used-outside");
    let mut guest = Guest::connect(&served.socket, Memfd::new(MEM_BYTES));
    guest.set_mem_table(MEM_BYTES).unwrap();
    // Its index is the region's last bytes; its entries lie past them.
    guest.start_ring_at(QUEUE_SIZE, 0, MEM_BYTES - 4).unwrap();
    guest.read_chain(0, 0, DATA);
    guest.offer(0);
    stopped_because(&guest, "cannot put an answer in the used ring");
    served.stop();
}

#[test]
fn a_chain_that_loops_is_given_back_and_the_queue_serves_on() {
    let served = Served::start("loop");
    let mut guest = Guest::connect(&served.socket, Memfd::new(MEM_BYTES));
    guest.start();
    // The status descriptor names the data descriptor again.
    guest.read_chain(0, 0, DATA);
    guest.desc(2, HEADERS + 0x80, 1, WRITE | NEXT, 1);
    guest.offer(0);
    assert_eq!(guest.wait_used(), 1);
    assert_eq!(guest.used(0), (0, 0), "given back with nothing written");
    assert_eq!(guest.status(0), 0xff, "no status written");
    assert!(!logged("the chain ends at a descriptor that names a next one").is_empty());
    guest.read_chain(3, 8, DATA);
    guest.offer(3);
    assert_eq!(guest.wait_used(), 2);
    assert_eq!(guest.used(1), (3, 4097));
    served.stop();
}

#[test]
fn a_descriptor_outside_guest_memory_is_given_back_and_the_queue_serves_on() {
    let served = Served::start("desc-outside");
    let mut guest = Guest::connect(&served.socket, Memfd::new(MEM_BYTES));
    guest.start();
    guest.read_chain(0, 0, MEM_BYTES - 0x800);
    guest.offer(0);
    assert_eq!(guest.wait_used(), 1);
    assert_eq!(guest.used(0), (0, 0), "given back with nothing written");
    let reason = format!("descriptor at {:#x} of 4096 bytes lies outside guest memory", MEM_BYTES - 0x800);
    assert!(!logged(&reason).is_empty(), "{reason}");
    guest.read_chain(3, 8, DATA);
    guest.offer(3);
    assert_eq!(guest.wait_used(), 2);
    served.stop();
}
