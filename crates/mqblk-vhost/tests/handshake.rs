//! The server speaks vhost-user to a frontend (vhost's own `Frontend`, as
//! QEMU would): the features and configuration space come from the
//! device, a frontend that hangs up leaves the server listening for the
//! next, and a stop ends the connection being served and the server.

use mqblk::Device;
use mqblk_vhost::{Options, Server};
use vhost::vhost_user::message::{VhostUserConfigFlags, VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::VhostBackend;
use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_F_DISCARD, VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_MQ, VIRTIO_BLK_F_RO, VIRTIO_BLK_F_WRITE_ZEROES,
};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

/// Connects, negotiates features as QEMU does, and returns the frontend
/// and the features offered.
fn negotiate(sock: &std::path::Path) -> (Frontend, u64) {
    let mut fe = Frontend::connect(sock, 2).expect("connect");
    fe.set_owner().unwrap();
    let features = fe.get_features().unwrap();
    fe.set_features(features).unwrap();
    let protocol = fe.get_protocol_features().unwrap();
    assert!(protocol.contains(VhostUserProtocolFeatures::CONFIG | VhostUserProtocolFeatures::MQ));
    fe.set_protocol_features(protocol).unwrap();
    (fe, features)
}

#[test]
fn frontend_sees_the_device_and_stop_ends_the_server() {
    mqblk_null::register();
    let dir = std::env::temp_dir().join(format!("mqblk-vhost-handshake-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("vhost.sock");
    let dev = Device::open("null:gb=1,memory_backed=1,discard=1,cache_size=16,irqmode=0").unwrap();
    let server = Server::new(dev, &sock, Options { queues: 2, ..Options::default() }).unwrap();
    let stopper = server.stopper();
    let serving = std::thread::spawn(move || server.run());

    let (mut fe, features) = negotiate(&sock);
    let bit = |b: u32| 1u64 << b;
    for (name, b) in [
        ("VERSION_1", VIRTIO_F_VERSION_1),
        ("EVENT_IDX", VIRTIO_RING_F_EVENT_IDX),
        ("INDIRECT_DESC", VIRTIO_RING_F_INDIRECT_DESC),
        ("MQ", VIRTIO_BLK_F_MQ),
        ("FLUSH", VIRTIO_BLK_F_FLUSH),
        ("DISCARD", VIRTIO_BLK_F_DISCARD),
        ("WRITE_ZEROES", VIRTIO_BLK_F_WRITE_ZEROES),
    ] {
        assert_ne!(features & bit(b), 0, "{name} offered");
    }
    assert_eq!(features & bit(VIRTIO_BLK_F_RO), 0);
    assert_ne!(features & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits(), 0);
    assert_eq!(fe.get_queue_num().unwrap(), 2);
    let (_, config) = fe.get_config(0, 60, VhostUserConfigFlags::WRITABLE, &[0u8; 60]).unwrap();
    assert_eq!(u64::from_le_bytes(config[0..8].try_into().unwrap()), (1 << 30) / 512, "capacity in sectors");
    assert_eq!(u16::from_le_bytes([config[34], config[35]]), 2, "num_queues");
    assert_eq!(config[32], 1, "write-back cache");
    drop(fe);

    // The server listens again after a frontend hangs up.
    let (_fe, again) = negotiate(&sock);
    assert_eq!(again, features);
    stopper.stop();
    let summary = serving.join().expect("server thread").expect("server");
    assert_eq!(summary.connections, 2);
    assert_eq!((summary.requests, summary.errors), (0, 0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fds this process has open.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}

#[test]
fn connections_that_end_leave_no_fd_behind() {
    mqblk_null::register();
    let dir = std::env::temp_dir().join(format!("mqblk-vhost-fds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("vhost.sock");
    let dev = Device::open("null:gb=1,irqmode=0").unwrap();
    let server = Server::new(dev, &sock, Options { queues: 2, ..Options::default() }).unwrap();
    let stopper = server.stopper();
    let serving = std::thread::spawn(move || server.run());

    // The server serves one connection at a time: when a frontend's
    // negotiation is answered, the one before it has been torn down, and
    // this one's set-up (its daemon, a worker per queue) is done.
    drop(negotiate(&sock));
    let (fe, _) = negotiate(&sock);
    let with_one = open_fds();
    drop(fe);
    for round in 0..4 {
        let (fe, _) = negotiate(&sock);
        assert_eq!(open_fds(), with_one, "round {round}: fds left by the connections before");
        drop(fe);
    }
    stopper.stop();
    let summary = serving.join().expect("server thread").expect("server");
    assert_eq!(summary.connections, 6);
    let _ = std::fs::remove_dir_all(&dir);
}
