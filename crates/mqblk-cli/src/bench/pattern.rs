//! Where a job's next I/O goes: fio's offset patterns (sequential or
//! random over the job's region, the read/write mix) and, for
//! `zonemode=zbd`, the write pointers of the job's zones.

use mqblk::Device;

/// Where the next I/O goes.
pub(super) struct Pattern {
    pub(super) random: bool,
    pub(super) read_pct: u32,
    pub(super) region_start: u64,
    pub(super) region_len: u64,
    pub(super) pos: u64,
    /// (block size, blocks of that size in the region): the last random
    /// I/O's, so a fixed block size divides once per job, not per I/O.
    pub(super) blocks: (u64, u64),
    pub(super) rng: u64,
}

impl Pattern {
    #[inline]
    fn next_rand(&mut self) -> u64 {
        // xorshift64*: fast and good enough for offsets.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    #[inline]
    pub(super) fn next_is_write(&mut self) -> bool {
        match self.read_pct {
            100 => false,
            0 => true,
            pct => (self.next_rand() % 100) as u32 >= pct,
        }
    }

    #[inline]
    pub(super) fn next_offset(&mut self, bs: u64) -> u64 {
        if self.random {
            if self.blocks.0 != bs {
                self.blocks = (bs, self.region_len / bs);
            }
            let blocks = self.blocks.1;
            // Multiply-high maps the random word onto 0..blocks without a
            // 64-bit division (Lemire's reduction; bias below 2^-40 here).
            let block = ((u128::from(self.next_rand()) * u128::from(blocks)) >> 64) as u64;
            return self.region_start + block * bs;
        }
        if self.pos + bs > self.region_len {
            self.pos = 0; // wrap (time_based runs loop over the region)
        }
        let off = self.region_start + self.pos;
        self.pos += bs;
        off
    }
}

/// fio's `zonemode=zbd` for writes: each goes to a zone's write pointer.
/// The job owns the sequential zones inside its region (give jobs their
/// own zones with `offset_increment`), so it tracks their write pointers
/// itself; a zone too full for the next write is reset first.
pub(super) struct ZoneWriter {
    /// (zone start, capacity, write pointer), bytes.
    zones: Vec<(u64, u64, u64)>,
    cur: usize,
}

impl ZoneWriter {
    pub(super) fn new(dev: &Device, region_start: u64, region_len: u64) -> Result<Self, String> {
        let zones = dev.zones().ok_or("zonemode=zbd: the device is not zoned")?;
        let all = zones.report(0, usize::MAX).map_err(|s| format!("zonemode=zbd: zone report failed: {s}"))?;
        let zones: Vec<(u64, u64, u64)> = all
            .iter()
            .filter(|z| z.ztype == mqblk::zoned::ZoneType::SeqWriteRequired)
            .map(|z| (z.start << 9, z.capacity << 9, (z.wp - z.start) << 9))
            .filter(|&(start, cap, _)| start >= region_start && start + cap <= region_start + region_len)
            .collect();
        if zones.is_empty() {
            return Err("zonemode=zbd: no sequential zone lies inside the job's region".into());
        }
        Ok(Self { zones, cur: 0 })
    }

    /// The next write's offset, and the zone to reset before it, if any.
    #[inline]
    pub(super) fn next(&mut self, pattern: &mut Pattern, bs: u64) -> (u64, Option<u64>) {
        let n = self.zones.len();
        let fits = |z: &(u64, u64, u64)| z.2 + bs <= z.1;
        let z = if pattern.random {
            (pattern.next_rand() % n as u64) as usize
        } else {
            if !fits(&self.zones[self.cur]) {
                self.cur = (self.cur + 1) % n; // sequential: on to the next zone
            }
            self.cur
        };
        let mut reset = None;
        if !fits(&self.zones[z]) {
            reset = Some(self.zones[z].0);
            self.zones[z].2 = 0;
        }
        let (start, _, wp) = &mut self.zones[z];
        let off = *start + *wp;
        *wp += bs;
        (off, reset)
    }
}
