//! The one pass over a scattered iovec array (`blkioq_readv`/`writev`'s
//! common array, every iovec a segment on its own): is each iovec one the
//! block layer takes as it is, and how long are they in all? It is the
//! only look at the iovecs on the way to the device (vectored.rs), so
//! its cost is most of what a vectored read costs over one buffer.
//!
//! Each iovec is an (address, length) pair, and both words go through the
//! same three operations: less one block, OR-ed into `bits`, added into
//! `sum`. Less one block, an aligned word keeps its low bits (so `bits`
//! holds every address's and length's misalignment); a null address or a
//! length of 0 wraps to the top bit, and a length over 4 GiB reaches bit
//! 32 or above (so every length is at least a block and at most 4 GiB and
//! a block: 256 of them cannot wrap the sum, which is the lengths' less a
//! block each). One vector register holds a pair on x86-64, where the
//! pass is written in SSE2 (part of every x86-64 CPU), two iovecs a turn.
//! Measured per readv8 (qd1.c's eight iovecs, callgrind): the pass with a
//! zero test of its own for addresses and for lengths cost 21
//! instructions more than this one in plain Rust, which cost 20 more than
//! this one in SSE2 (left to itself, the compiler splits the pairs into
//! an address and a length vector). Elsewhere the pass is plain Rust.
//!
//! Sound, not complete: an address at or above 2^63 and one block (a
//! tagged pointer's top bit, never a Linux x86-64 user address) turns the
//! array down as if it were null, and vectored.rs' `other_shapes` then
//! looks at each iovec exactly.
//!
//! Relies on: `libc::iovec`'s layout (the address, then the length, each
//! a word).

use mqblk::MAX_BIO_BYTES;

/// The total length of `iovecs` if every one is a segment on its own: not
/// empty, not null, in all no longer than the largest bio, address and
/// length multiples of buf-alignment (`align_mask` + 1, one block); None
/// if one is not, or an address is in the upper half (module header).
#[inline(always)]
pub(super) fn each_a_segment(iovecs: &[libc::iovec], align_mask: usize) -> Option<u64> {
    // In u64 words whatever the machine's (the top-bit tests need 64 bits).
    let block = align_mask as u64 + 1;
    let (bits, sum) = fold(iovecs, block);
    let aligned = (bits[0] | bits[1]) & align_mask as u64 == 0;
    let addresses_ok = bits[0] >> 63 == 0;
    let lengths_ok = bits[1] >> 32 == 0;
    // (Each length at most 4 GiB and a block, so no wrap: 256 of them.)
    let total = sum[1].wrapping_add(iovecs.len() as u64 * block);
    (aligned && addresses_ok && lengths_ok && total <= MAX_BIO_BYTES).then_some(total)
}

/// Every (address, length) less `block`: OR-ed, and summed.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn fold(iovecs: &[libc::iovec], block: u64) -> ([u64; 2], [u64; 2]) {
    use std::arch::x86_64::{__m128i, _mm_add_epi64, _mm_loadu_si128, _mm_or_si128, _mm_set1_epi64x};
    use std::arch::x86_64::{_mm_setzero_si128, _mm_sub_epi64};
    const _: () = assert!(std::mem::size_of::<libc::iovec>() == std::mem::size_of::<__m128i>());
    // SAFETY: SSE2 is part of x86-64, and Rust's x86-64 targets enable it;
    // each load reads one iovec of the slice, 16 bytes (checked above) at
    // any alignment.
    unsafe {
        let block = _mm_set1_epi64x(block as i64);
        let (mut bits, mut sum) = (_mm_setzero_si128(), _mm_setzero_si128());
        let step = |bits: &mut __m128i, sum: &mut __m128i, v: &libc::iovec| {
            let less = _mm_sub_epi64(_mm_loadu_si128((v as *const libc::iovec).cast()), block);
            *bits = _mm_or_si128(*bits, less);
            *sum = _mm_add_epi64(*sum, less);
        };
        // Two iovecs a turn: half the loop's own instructions.
        let mut pairs = iovecs.chunks_exact(2);
        for pair in &mut pairs {
            step(&mut bits, &mut sum, &pair[0]);
            step(&mut bits, &mut sum, &pair[1]);
        }
        if let [last] = pairs.remainder() {
            step(&mut bits, &mut sum, last);
        }
        (std::mem::transmute::<__m128i, [u64; 2]>(bits), std::mem::transmute::<__m128i, [u64; 2]>(sum))
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn fold(iovecs: &[libc::iovec], block: u64) -> ([u64; 2], [u64; 2]) {
    fold_plain(iovecs, block)
}

/// `fold` in plain Rust (for other machines; tested against the SSE2 one).
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
fn fold_plain(iovecs: &[libc::iovec], block: u64) -> ([u64; 2], [u64; 2]) {
    let (mut bits, mut sum) = ([0u64; 2], [0u64; 2]);
    for v in iovecs {
        let less = [(v.iov_base as usize as u64).wrapping_sub(block), (v.iov_len as u64).wrapping_sub(block)];
        bits = [bits[0] | less[0], bits[1] | less[1]];
        sum = [sum[0].wrapping_add(less[0]), sum[1].wrapping_add(less[1])];
    }
    (bits, sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iov(addr: usize, len: usize) -> libc::iovec {
        libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len }
    }

    /// `each_a_segment`'s folded tests against the rule written plainly,
    /// for every pair of iovecs from addresses and lengths at each edge,
    /// and a third after and between them: never an array the rule
    /// refuses, and every array it takes whose addresses are in the lower
    /// half (the others go to `other_shapes`). Not under Miri: 115,000
    /// arrays of safe arithmetic over `fold`, whose unsafe loads
    /// `fold_is_fold_plain` covers there.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn each_a_segment_is_the_plain_rule_in_the_lower_half() {
        let addrs = [0usize, 512, 4096, 4097, 0x7fff_ffff_f000, 1 << 63, (1 << 63) + 4096, usize::MAX & !4095];
        let lens = [
            0usize,
            512,
            1000,
            4096,
            1 << 31,
            u32::MAX as usize & !4095,
            1 << 32,
            (1 << 32) + 4096,
            u32::MAX as usize,
            usize::MAX,
        ];
        for mask in [511, 4095] {
            each_a_segment_agrees(&addrs, &lens, mask);
        }
    }

    fn each_a_segment_agrees(addrs: &[usize], lens: &[usize], mask: usize) {
        let plain = |v: &[libc::iovec]| {
            let each = v.iter().all(|v| {
                let (addr, len) = (v.iov_base as usize, v.iov_len);
                addr != 0 && len != 0 && (addr | len) & mask == 0
            });
            let total = v.iter().try_fold(0u64, |t, v| t.checked_add(v.iov_len as u64));
            total.filter(|&t| each && t <= MAX_BIO_BYTES)
        };
        let lower_half = |v: &[libc::iovec]| v.iter().all(|v| v.iov_base as usize <= 1 << 63);
        let pairs: Vec<(usize, usize)> = addrs.iter().flat_map(|&a| lens.iter().map(move |&l| (a, l))).collect();
        for &(a0, l0) in &pairs {
            for &(a1, l1) in &pairs {
                let v = [iov(a0, l0), iov(a1, l1)];
                let want = plain(&v).filter(|_| lower_half(&v));
                assert_eq!(each_a_segment(&v, mask), want, "{a0:#x}+{l0:#x}, {a1:#x}+{l1:#x}, mask {mask:#x}");
                for (a2, l2) in [(4096, 4096), (0, 4096), (4096, 0), (8192, 1 << 31)] {
                    for v in [[v[0], v[1], iov(a2, l2)], [v[0], iov(a2, l2), v[1]]] {
                        let want = plain(&v).filter(|_| lower_half(&v));
                        assert_eq!(each_a_segment(&v, mask), want, "{a0:#x}+{l0:#x}, {a1:#x}+{l1:#x}, {a2:#x}+{l2:#x}");
                    }
                }
            }
        }
    }

    /// The machine's pass and the plain one agree for every count from 1
    /// to 9 (both parities of the SSE2 loop's pairs), on good and bad
    /// iovecs in each place.
    #[test]
    fn fold_is_fold_plain() {
        let good = (0..9).map(|i| iov(0x10_0000 + i * 0x2000, 4096 * (i + 1))).collect::<Vec<_>>();
        for n in 1..=good.len() {
            for bad in [None, Some(iov(0, 4096)), Some(iov(4096, 0)), Some(iov(4097, 512)), Some(iov(1 << 63, 1 << 40))]
            {
                for at in 0..n {
                    let mut v = good[..n].to_vec();
                    if let Some(b) = bad {
                        v[at] = b;
                    }
                    for block in [512, 4096] {
                        assert_eq!(fold(&v, block), fold_plain(&v, block), "{n} iovecs, {bad:?} at {at}");
                    }
                }
            }
        }
    }
}
