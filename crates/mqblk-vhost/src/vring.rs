//! The vring of one virtqueue: vhost-user-backend's `VringMutex`, plus two
//! things the frontend sends that it would otherwise lose.
//!
//! - The queue size asked (SET_VRING_NUM). vhost-user-backend refuses 0
//!   and sizes above the maximum, but hands any other to virtio-queue,
//!   which keeps its old size when the new one is not a power of two and
//!   only logs it; the queue would then read the guest's rings with a
//!   size the guest does not use. The size asked is kept here, and the
//!   queue stops when it differs from the ring's (queue.rs `pop`).
//! - The error eventfd (SET_VRING_ERR), which vhost-user-backend stores
//!   but never signals. A queue that stops on a broken ring signals it
//!   (`signal_error`), as the vhost-user spec has it; QEMU then reports
//!   "vhost vring error in virtqueue N".
//!
//! Every other call passes through.
//!
//! Relies on: vhost-user-backend (`VringT`, `VringMutex`); queue.rs (`Mem`).

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use vhost_user_backend::{VringMutex, VringStateGuard, VringStateMutGuard, VringT};
use virtio_queue::Error as VirtQueError;
use vm_memory::GuestMemoryAtomic;

use crate::queue::Mem;

type Gm = GuestMemoryAtomic<Mem>;

/// The vring type served (see the module header).
#[derive(Clone)]
pub struct Vring {
    inner: VringMutex<Gm>,
    asked: Arc<Asked>,
}

#[derive(Default)]
struct Asked {
    /// The last SET_VRING_NUM's size (0: none yet).
    size: AtomicU32,
    /// A duplicate of the SET_VRING_ERR eventfd.
    err: Mutex<Option<File>>,
}

impl Vring {
    /// The queue size the frontend last set, if it set one.
    pub fn asked_size(&self) -> Option<u16> {
        // Relaxed: SET_VRING_NUM comes while the ring is stopped, and the
        // worker reads the ring's state under its lock after that.
        u16::try_from(self.asked.size.load(Ordering::Relaxed)).ok().filter(|&n| n != 0)
    }

    /// Tells the frontend the ring is broken (its error eventfd), if it
    /// gave one.
    pub fn signal_error(&self) -> io::Result<()> {
        let err = self.asked.err.lock().unwrap_or_else(|e| e.into_inner());
        match err.as_ref() {
            // An eventfd adds the 8-byte count written.
            Some(mut file) => file.write_all(&1u64.to_ne_bytes()),
            None => Ok(()),
        }
    }
}

impl<'a> VringStateGuard<'a, Gm> for Vring {
    type G = <VringMutex<Gm> as VringStateGuard<'a, Gm>>::G;
}

impl<'a> VringStateMutGuard<'a, Gm> for Vring {
    type G = <VringMutex<Gm> as VringStateMutGuard<'a, Gm>>::G;
}

impl VringT<Gm> for Vring {
    fn new(mem: Gm, max_queue_size: u16) -> Result<Self, VirtQueError> {
        Ok(Self { inner: VringMutex::new(mem, max_queue_size)?, asked: Arc::default() })
    }

    fn get_ref(&self) -> <Self as VringStateGuard<'_, Gm>>::G {
        self.inner.get_ref()
    }

    fn get_mut(&self) -> <Self as VringStateMutGuard<'_, Gm>>::G {
        self.inner.get_mut()
    }

    fn add_used(&self, desc_index: u16, len: u32) -> Result<(), VirtQueError> {
        self.inner.add_used(desc_index, len)
    }

    fn signal_used_queue(&self) -> io::Result<()> {
        self.inner.signal_used_queue()
    }

    fn enable_notification(&self) -> Result<bool, VirtQueError> {
        self.inner.enable_notification()
    }

    fn disable_notification(&self) -> Result<(), VirtQueError> {
        self.inner.disable_notification()
    }

    fn needs_notification(&self) -> Result<bool, VirtQueError> {
        self.inner.needs_notification()
    }

    fn set_enabled(&self, enabled: bool) {
        self.inner.set_enabled(enabled)
    }

    fn set_queue_info(&self, desc_table: u64, avail_ring: u64, used_ring: u64) -> Result<(), VirtQueError> {
        self.inner.set_queue_info(desc_table, avail_ring, used_ring)
    }

    fn queue_next_avail(&self) -> u16 {
        self.inner.queue_next_avail()
    }

    fn set_queue_next_avail(&self, base: u16) {
        self.inner.set_queue_next_avail(base)
    }

    fn set_queue_next_used(&self, idx: u16) {
        self.inner.set_queue_next_used(idx)
    }

    fn queue_used_idx(&self) -> Result<u16, VirtQueError> {
        self.inner.queue_used_idx()
    }

    fn set_queue_size(&self, num: u16) {
        self.asked.size.store(u32::from(num), Ordering::Relaxed);
        self.inner.set_queue_size(num)
    }

    fn set_queue_event_idx(&self, enabled: bool) {
        self.inner.set_queue_event_idx(enabled)
    }

    fn set_queue_ready(&self, ready: bool) {
        self.inner.set_queue_ready(ready)
    }

    fn set_kick(&self, file: Option<File>) {
        self.inner.set_kick(file)
    }

    fn read_kick(&self) -> io::Result<bool> {
        self.inner.read_kick()
    }

    fn set_call(&self, file: Option<File>) {
        self.inner.set_call(file)
    }

    fn set_err(&self, file: Option<File>) {
        // A duplicate: vhost-user-backend keeps the original (and closes it).
        let dup = file.as_ref().and_then(|f| {
            f.try_clone().inspect_err(|e| log::warn!("the ring's error eventfd cannot be kept: {e}")).ok()
        });
        *self.asked.err.lock().unwrap_or_else(|e| e.into_inner()) = dup;
        self.inner.set_err(file)
    }
}
