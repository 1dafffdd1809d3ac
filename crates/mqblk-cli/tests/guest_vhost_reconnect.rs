//! A vhost-user-blk server killed with SIGKILL mid-I/O loses nothing:
//! tests/guest/vhost_reconnect.sh serves a file to the Linux 6.12 guest
//! (qemu TCG, `reconnect=1` on the socket), kills the server while fio's
//! verified 4 KiB random writes are in flight, starts a new server on the
//! same file and socket, and checks that fio ends without an error, that
//! every block reads back with its crc32c, and that the second server stops
//! cleanly on SIGTERM (see the script's header). The server built before
//! answers went to the used ring in avail order failed it: the guest saw
//! "id 17 is not a head!", an I/O error, and hung.
//!
//! Builds the release binary first. Needs root, network for the first
//! kernel fetch, and 1 to 3 minutes; it never skips.

mod common;

#[test]
fn guest_vhost_reconnect_script_passes() {
    common::host_script_release("tests/guest/vhost_reconnect.sh", "vhost_reconnect: all checks passed");
}
