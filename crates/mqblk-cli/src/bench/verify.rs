//! fio's `verify=crc32c` for write jobs: every written block carries a
//! header (magic, its offset and length, a sequence number and the CRC-32C
//! of everything after the checksum field) and fresh pseudo-random data;
//! when the job's writes are done, every block written is read back and
//! checked, so data integrity is tested through the whole stack.
//!
//! Header layout (little endian): 0..8 magic `mqblkvfy`, 8..16 offset,
//! 16..20 length, 20..24 CRC-32C of bytes 24..len, 24..32 sequence.

use mqblk::{Bio, Buf, Client, Completion};

const MAGIC: &[u8; 8] = b"mqblkvfy";
const HEADER_BYTES: usize = 32;

pub struct Verifier {
    region_start: u64,
    block_bytes: u64,
    /// One bit per block of the region: written (last write succeeded).
    written: Vec<u64>,
    seq: u64,
}

impl Verifier {
    pub fn new(region_start: u64, region_len: u64, block_bytes: u64) -> Result<Self, String> {
        if (block_bytes as usize) < HEADER_BYTES {
            return Err(format!("verify=crc32c needs blocks of at least {HEADER_BYTES} bytes"));
        }
        let blocks = region_len / block_bytes;
        Ok(Self { region_start, block_bytes, written: vec![0; blocks.div_ceil(64) as usize], seq: 0 })
    }

    /// Fills `buf` (one block, to be written at `offset`) with a header and
    /// fresh data.
    pub fn fill(&mut self, buf: &mut [u8], offset: u64) {
        self.seq += 1;
        let mut x = self.seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ offset | 1;
        for chunk in buf[HEADER_BYTES..].chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
        buf[0..8].copy_from_slice(MAGIC);
        buf[8..16].copy_from_slice(&offset.to_le_bytes());
        let len = buf.len() as u32;
        buf[16..20].copy_from_slice(&len.to_le_bytes());
        buf[24..32].copy_from_slice(&self.seq.to_le_bytes());
        let crc = crc32c::crc32c(&buf[24..]);
        buf[20..24].copy_from_slice(&crc.to_le_bytes());
    }

    /// Records that the block at `offset` was written successfully.
    pub fn written(&mut self, offset: u64) {
        let b = ((offset - self.region_start) / self.block_bytes) as usize;
        self.written[b / 64] |= 1 << (b % 64);
    }

    /// Checks a block read back from `offset`.
    pub fn check(buf: &[u8], offset: u64) -> Result<(), String> {
        if &buf[0..8] != MAGIC {
            return Err(format!("bad magic header at offset {offset} (found {:02x?})", &buf[0..8]));
        }
        let hdr_off = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
        let hdr_len = u32::from_le_bytes(buf[16..20].try_into().expect("4 bytes"));
        if hdr_off != offset || hdr_len as usize != buf.len() {
            return Err(format!("block at offset {offset} says it is {hdr_len} bytes at offset {hdr_off}"));
        }
        let want = u32::from_le_bytes(buf[20..24].try_into().expect("4 bytes"));
        let got = crc32c::crc32c(&buf[24..]);
        if want != got {
            return Err(format!("crc32c mismatch at offset {offset}: header {want:08x}, data {got:08x}"));
        }
        Ok(())
    }

    /// Reads back every written block into `bufs` (the job's write
    /// buffers, as fio reuses its io_u buffers: registered ones stay
    /// registered), as many at a time as there are buffers; returns how
    /// many were verified, or the first failure.
    pub fn run(&self, client: &mut Client, bufs: Vec<Buf>) -> Result<u64, String> {
        let mut bufs: Vec<Option<Buf>> = bufs.into_iter().take(client.capacity()).map(Some).collect();
        if bufs.is_empty() {
            bufs.push(Some(Buf::new(self.block_bytes as usize)));
        }
        assert!(bufs.iter().flatten().all(|b| b.len() as u64 == self.block_bytes), "verify buffers are one block");
        let depth = bufs.len();
        let mut free: Vec<usize> = (0..depth).collect();
        let mut done: Vec<Completion> = Vec::with_capacity(depth);
        let mut blocks = self.written_blocks();
        let mut verified = 0;
        loop {
            while let Some(&idx) = free.last() {
                let Some(b) = blocks.next() else { break };
                free.pop();
                let offset = self.region_start + b * self.block_bytes;
                let mut buf = bufs[idx].take().expect("a free verify slot has its buffer");
                // A device that does not fill the buffer must not pass on
                // what the buffer held before (a block written from it).
                buf.fill(0);
                client
                    .submit(Bio::read(offset, buf), (offset << 16) | idx as u64)
                    .map_err(|r| format!("verify: read at {offset}: {}", r.error))?;
            }
            if client.in_flight() == 0 {
                return Ok(verified);
            }
            done.clear();
            client.do_io(&mut done, 1, depth, None).map_err(|e| format!("verify: {e}"))?;
            for c in done.drain(..) {
                let (offset, idx) = (c.user_data >> 16, (c.user_data & 0xffff) as usize);
                let buf = c.segs.into_buf().expect("reads give their buffer back");
                if !c.status.is_ok() {
                    return Err(format!("verify: read at offset {offset} failed: {}", c.status));
                }
                Self::check(&buf, offset)?;
                verified += 1;
                bufs[idx] = Some(buf);
                free.push(idx);
            }
        }
    }

    fn written_blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.written
            .iter()
            .enumerate()
            .flat_map(|(w, bits)| (0..64u64).filter(move |i| bits & (1 << i) != 0).map(move |i| w as u64 * 64 + i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_block_checks_and_any_corruption_is_caught() {
        let mut v = Verifier::new(0, 1 << 20, 4096).unwrap();
        let mut buf = vec![0u8; 4096];
        v.fill(&mut buf, 8192);
        assert_eq!(Verifier::check(&buf, 8192), Ok(()));
        assert!(Verifier::check(&buf, 4096).unwrap_err().contains("says it is"));
        let mut flipped = buf.clone();
        flipped[3000] ^= 1;
        assert!(Verifier::check(&flipped, 8192).unwrap_err().contains("crc32c mismatch"));
        assert!(Verifier::check(&[0u8; 4096], 8192).unwrap_err().contains("bad magic"));
        v.written(8192);
        v.written(0);
        assert_eq!(v.written_blocks().collect::<Vec<_>>(), vec![0, 2]);
    }
}
