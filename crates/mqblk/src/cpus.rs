//! The CPUs a thread may run on: read (sched_getaffinity) and set
//! (sched_setaffinity) as plain CPU numbers, for the front ends that place
//! their threads (fio's `cpus_allowed` in bench, the ublk server's queue
//! threads on the CPUs blk-mq maps to their queue).
//!
//! Relies on: the kernel's cpu mask layout (an array of unsigned longs,
//! CPU n at bit n % 64 of word n / 64), 1,024 CPUs as in glibc's cpu_set_t.

use std::io;

/// A kernel cpu mask, as large as glibc's cpu_set_t.
pub type CpuMask = [u64; 16];

/// CPUs a `CpuMask` holds.
pub const MASK_CPUS: usize = 64 * 16;

/// The CPUs of a mask (sched_getaffinity's answer, or the ublk
/// driver's GET_QUEUE_AFFINITY), in order.
pub fn cpus_of(mask: &CpuMask) -> Vec<usize> {
    (0..MASK_CPUS).filter(|&cpu| mask[cpu / 64] & (1 << (cpu % 64)) != 0).collect()
}

/// The mask of `cpus`; each must be below `MASK_CPUS`.
pub fn mask_of(cpus: &[usize]) -> CpuMask {
    let mut mask = [0u64; 16];
    for &cpu in cpus {
        assert!(cpu < MASK_CPUS, "CPU {cpu} beyond a {MASK_CPUS}-CPU mask");
        mask[cpu / 64] |= 1 << (cpu % 64);
    }
    mask
}

/// The CPUs the calling thread may run on.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    let mut mask: CpuMask = [0; 16];
    // SAFETY: the kernel writes at most size_of::<CpuMask>() bytes into
    // `mask`, which is laid out as the cpu_set_t it expects (size 128,
    // alignment 8).
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<CpuMask>(), mask.as_mut_ptr().cast()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cpus_of(&mask))
}

/// Pins the calling thread to `cpus` (none: leaves it as it is); each
/// must be below `MASK_CPUS`.
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    let mask = mask_of(cpus);
    // SAFETY: the kernel reads size_of::<CpuMask>() bytes of a live `mask`.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<CpuMask>(), mask.as_ptr().cast()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_put_cpu_n_at_bit_n() {
        let mask = mask_of(&[0, 63, 64, 1023]);
        assert_eq!(mask[0], 1 | 1 << 63);
        assert_eq!(mask[1], 1);
        assert_eq!(mask[15], 1 << 63);
        assert_eq!(cpus_of(&mask), [0, 63, 64, 1023]);
    }

    #[test]
    fn this_thread_can_be_pinned_to_a_cpu_it_may_use_and_back() {
        let allowed = allowed_cpus().expect("sched_getaffinity");
        assert!(!allowed.is_empty());
        let one = vec![*allowed.last().unwrap()];
        std::thread::spawn(move || {
            pin_current_thread(&one).expect("sched_setaffinity");
            assert_eq!(allowed_cpus().unwrap(), one);
            pin_current_thread(&allowed).expect("sched_setaffinity back");
            assert_eq!(allowed_cpus().unwrap(), allowed);
        })
        .join()
        .unwrap();
    }
}
