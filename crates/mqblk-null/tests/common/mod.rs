//! What every null_blk integration test needs: `Device::open` with the
//! drivers registered (null, and file for the tests that compare with it).
#![allow(dead_code)] // each test binary uses what it needs

/// True if every byte of `buf` is `byte`. A slice comparison (one memcmp)
/// rather than a loop over the bytes: Miri interprets such a loop byte by
/// byte, and 4 KiB reads checked that way cost a zoned test a minute.
pub fn filled(buf: &[u8], byte: u8) -> bool {
    buf == vec![byte; buf.len()].as_slice()
}

/// `len` bytes of `byte_at(i)`, a function of period `period` in `i`: the
/// first period is computed and the rest copied (`repeat`, a memcpy), since
/// Miri interprets a byte-by-byte generator at tens of steps a byte.
pub fn periodic(len: usize, period: usize, byte_at: impl Fn(usize) -> u8) -> Vec<u8> {
    let one: Vec<u8> = (0..period.min(len)).map(byte_at).collect();
    let mut bytes = one.repeat(len.div_ceil(period.max(1)));
    bytes.truncate(len);
    bytes
}

/// `Device::open` with `null:` and `file:` registered.
pub fn open(spec: &str) -> Result<mqblk::Device, mqblk::Error> {
    mqblk_null::register();
    mqblk_file::register();
    mqblk::Device::open(spec)
}

/// `cases` random cases natively; two under Miri (each costs it 20 s or
/// more), which also has no getcwd in its isolation for proptest's file of
/// failing cases.
pub fn proptest_config(cases: u32) -> proptest::prelude::ProptestConfig {
    let mut config = proptest::prelude::ProptestConfig::with_cases(if cfg!(miri) { 2 } else { cases });
    if cfg!(miri) {
        config.failure_persistence = None;
    }
    config
}

/// One step of the power-cut workloads (null_cache, null_backing_file):
/// from the seeded random `r`, a FLUSH (one in `flush_every`) or a write of
/// 1-16 sectors inside `region_sectors` filled with a byte from `op`, one
/// in seven FUA; submitted and waited for.
pub enum Step {
    Flush,
    Write { sector: u64, nr: u64, fill: u8, fua: bool },
}

/// Runs step `op` of a workload whose generator stands at `rng` (advanced
/// here, the LCG of Knuth's MMIX).
pub fn seeded_step(c: &mut mqblk::Client, rng: &mut u64, op: usize, region_sectors: u64, flush_every: u64) -> Step {
    use mqblk::{Bio, Buf, ReqFlags, SECTOR_SIZE};
    *rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let r = *rng >> 33;
    if r % flush_every == 0 {
        c.submit_and_wait(Bio::flush()).unwrap();
        return Step::Flush;
    }
    let sector = (r >> 4) % region_sectors;
    let nr = (1 + (r >> 16) % 16).min(region_sectors - sector);
    let fill = (op % 250 + 1) as u8;
    let fua = r % 7 == 0;
    let mut bio = Bio::write(sector * SECTOR_SIZE, Buf::from_slice(&vec![fill; (nr * SECTOR_SIZE) as usize]));
    if fua {
        bio = bio.with_flags(ReqFlags::FUA);
    }
    c.submit_and_wait(bio).unwrap();
    Step::Write { sector, nr, fill, fua }
}
