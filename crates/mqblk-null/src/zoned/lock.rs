//! The zone locks of the zoned null device (`zone_lock=`): a spinning
//! per-zone lock as null_blk's `spin_lock_irq`, or a sleeping one, behind
//! one guard type so the zone state machine does not care which.
//!
//! Relies on: parking_lot and spin.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard};
use spin::mutex::{SpinMutex, SpinMutexGuard};

/// `zone_lock` (example: [`ZonedConfig`](super::ZonedConfig)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneLock {
    /// A lock per zone (`zone_lock=per-zone`, the default).
    PerZone,
    /// One lock for the device (`zone_lock=global`).
    Global,
}

/// How a zone lock waits (chosen by memory backing, as null_blk does).
///
/// ```
/// use mqblk_null::zoned::ZoneLockKind;
///
/// assert_eq!(ZoneLockKind::for_memory_backed(true), ZoneLockKind::Sleep);
/// assert_eq!(ZoneLockKind::for_memory_backed(false).name(), "spin");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneLockKind {
    /// Spins (no memory backing: nothing sleeps under the lock).
    Spin,
    /// Sleeps (memory backing: a write may allocate under the lock).
    Sleep,
}

impl ZoneLockKind {
    /// The kind null_blk uses with or without memory backing.
    pub fn for_memory_backed(memory_backed: bool) -> Self {
        if memory_backed {
            Self::Sleep
        } else {
            Self::Spin
        }
    }

    /// `spin` or `sleep`, as the stats show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Spin => "spin",
            Self::Sleep => "sleep",
        }
    }
}

/// A zone's lock (or the global one): a spin lock or a sleeping mutex.
/// The kind is fixed when the device is made; each lock pays one
/// predictable branch on it, as null_blk's `if (dev->memory_backed)`.
pub(super) enum ZoneMutex<T> {
    Spin(SpinMutex<T>),
    Sleep(Mutex<T>),
}

/// A zone's state, held: through its own lock, released on drop, or
/// reached under the device lock (`zone_lock=global`), which already
/// excludes every other command, so no second lock is taken (null_blk
/// before "null_blk: improve zone locking" took only its `zone_lock`).
pub(super) enum ZoneGuard<'a, T> {
    Spin(SpinMutexGuard<'a, T>),
    Sleep(MutexGuard<'a, T>),
    UnderGlobal(&'a mut T),
}

impl<T> ZoneMutex<T> {
    pub(super) fn new(kind: ZoneLockKind, value: T) -> Self {
        match kind {
            ZoneLockKind::Spin => Self::Spin(SpinMutex::new(value)),
            ZoneLockKind::Sleep => Self::Sleep(Mutex::new(value)),
        }
    }

    /// Locks, counting in `contended` an acquisition that found the lock
    /// held. Uncontended this is one compare-and-swap, as a plain lock.
    #[inline]
    pub(super) fn lock(&self, contended: &AtomicU64) -> ZoneGuard<'_, T> {
        if let Some(guard) = self.try_lock() {
            return guard;
        }
        // Statistics only: Relaxed, and paid only by a waiter.
        contended.fetch_add(1, Ordering::Relaxed);
        match self {
            Self::Spin(m) => ZoneGuard::Spin(m.lock()),
            Self::Sleep(m) => ZoneGuard::Sleep(m.lock()),
        }
    }

    #[inline]
    pub(super) fn try_lock(&self) -> Option<ZoneGuard<'_, T>> {
        match self {
            Self::Spin(m) => m.try_lock().map(ZoneGuard::Spin),
            Self::Sleep(m) => m.try_lock().map(ZoneGuard::Sleep),
        }
    }

    /// Whether someone holds the lock (for debug assertions).
    pub(super) fn is_locked(&self) -> bool {
        match self {
            Self::Spin(m) => m.is_locked(),
            Self::Sleep(m) => m.is_locked(),
        }
    }

    /// The value without taking this lock, for a caller that holds the
    /// device lock (`zone_lock=global`).
    ///
    /// # Safety
    ///
    /// The caller holds the device lock for as long as the guard lives,
    /// every other access to this value is made under that same lock
    /// (through this method, or through `lock`/`try_lock` on a zone no
    /// guard of the caller's from this method points at), and the caller
    /// holds no other guard of this zone.
    #[inline]
    pub(super) unsafe fn under_global(&self) -> ZoneGuard<'_, T> {
        let ptr = match self {
            Self::Spin(m) => m.as_mut_ptr(),
            Self::Sleep(m) => m.data_ptr(),
        };
        // SAFETY: the pointer is the lock's own cell, valid for `&self`;
        // the caller's device lock makes this the only access (above).
        ZoneGuard::UnderGlobal(unsafe { &mut *ptr })
    }
}

impl<T> Deref for ZoneGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        match self {
            ZoneGuard::Spin(g) => g,
            ZoneGuard::Sleep(g) => g,
            ZoneGuard::UnderGlobal(v) => v,
        }
    }
}

impl<T> DerefMut for ZoneGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        match self {
            ZoneGuard::Spin(g) => g,
            ZoneGuard::Sleep(g) => g,
            ZoneGuard::UnderGlobal(v) => v,
        }
    }
}
