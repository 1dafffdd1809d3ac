//! A vhost-user-blk backend: any mqblk device as the virtio-blk disk of a
//! QEMU guest (`-device vhost-user-blk-pci`).
#![deny(unsafe_op_in_unsafe_fn)]

pub mod config;
pub mod request;
