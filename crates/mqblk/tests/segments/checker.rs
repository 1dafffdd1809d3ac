//! The checking driver of the segment tests: it keeps a small device's
//! data and records every request it is given, with each way the request
//! breaks the queue limits; and the arena the tests carve segments from.

use std::sync::{Arc, Mutex};

use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq};
use mqblk::{Bio, Buf, Device, Op, QueueLimits, Status, TagSetConfig};

/// The device: 1 MiB of 512-byte blocks (128 KiB under Miri, which
/// interprets every byte the model and the driver copy).
pub const DEVICE_BYTES: usize = if cfg!(miri) { 64 << 10 } else { 1 << 20 };

/// What the driver saw of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub op: Op,
    pub pos: u64,
    pub len: u64,
    pub nr_bios: u32,
    pub nr_segments: u32,
    /// The physical segments' lengths, as `for_each_phys_segment` mapped them.
    pub phys: Vec<usize>,
}

#[derive(Default)]
pub struct State {
    pub mem: Mutex<Vec<u8>>,
    pub seen: Mutex<Vec<Seen>>,
    pub violations: Mutex<Vec<String>>,
}

/// Keeps the data and checks every request against the limits.
pub struct Checker {
    pub limits: QueueLimits,
    pub state: Arc<State>,
}

impl Checker {
    /// Every way `rq` may break the limits, as messages.
    pub fn check(&self, rq: &mut Rq) -> Vec<String> {
        let l = &self.limits;
        let mut phys = Vec::new();
        rq.for_each_phys_segment(|addr, len| phys.push((addr as usize, len)));
        let mut bad = Vec::new();
        if phys.len() as u32 > rq.nr_phys_segments() || rq.nr_phys_segments() > l.max_segments {
            bad.push(format!("{} mapped, {} counted, max {}", phys.len(), rq.nr_phys_segments(), l.max_segments));
        }
        let boundary = usize::try_from(l.seg_boundary_mask).unwrap_or(usize::MAX);
        let virt = l.virt_boundary_mask as usize;
        for (i, &(addr, len)) in phys.iter().enumerate() {
            if len > l.max_segment_size as usize || len == 0 {
                bad.push(format!("segment {i} of {len} bytes"));
            }
            if addr | boundary != (addr + len - 1) | boundary {
                bad.push(format!("segment {i} crosses the boundary"));
            }
            if let Some(&(next, _)) = phys.get(i + 1) {
                if next != addr + len && virt != 0 && ((addr + len) | next) & virt != 0 {
                    bad.push(format!("a gap after segment {i}"));
                }
            }
        }
        let mapped: usize = phys.iter().map(|p| p.1).sum();
        if rq.op().has_data() && mapped as u64 != rq.len_bytes() {
            bad.push(format!("{mapped} bytes mapped of {}", rq.len_bytes()));
        }
        if rq.len_bytes() > l.max_transfer_bytes() {
            bad.push(format!("{} bytes past max_sectors", rq.len_bytes()));
        }
        let seen = Seen {
            op: rq.op(),
            pos: rq.pos_bytes(),
            len: rq.len_bytes(),
            nr_bios: rq.nr_bios(),
            nr_segments: rq.nr_segments(),
            phys: phys.iter().map(|p| p.1).collect(),
        };
        self.state.seen.lock().unwrap().push(seen);
        bad
    }
}

impl Driver for Checker {
    fn name(&self) -> &str {
        "checker"
    }
    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(1, 16)
    }
    fn limits(&self) -> QueueLimits {
        self.limits.clone()
    }
    fn queue_rq(&self, _hctx: &Hctx, mut rq: Rq, _last: bool) -> QueueRqResult {
        let bad = self.check(&mut rq);
        self.state.violations.lock().unwrap().extend(bad);
        let mut mem = self.state.mem.lock().unwrap();
        match rq.op() {
            Op::Write => {
                for (pos, data) in rq.segments() {
                    mem[pos as usize..][..data.len()].copy_from_slice(data);
                }
            }
            Op::Read => {
                for (pos, data) in rq.segments_mut() {
                    let len = data.len();
                    data.copy_from_slice(&mem[pos as usize..][..len]);
                }
            }
            _ => {}
        }
        drop(mem);
        rq.complete(Status::Ok);
        QueueRqResult::Queued
    }
}

/// Limits of a 1 MiB device of 512-byte blocks, changed by `set`.
pub fn limits(set: impl FnOnce(&mut QueueLimits)) -> QueueLimits {
    let mut l = QueueLimits::new(DEVICE_BYTES as u64, 512);
    l.max_sectors = 2048;
    set(&mut l);
    l
}

pub fn device(limits: QueueLimits) -> (Device, Arc<State>) {
    let state = Arc::new(State { mem: Mutex::new(vec![0; DEVICE_BYTES]), ..State::default() });
    let dev = Device::with_driver(Box::new(Checker { limits, state: state.clone() })).unwrap();
    (dev, state)
}

/// Memory the tests carve segments from: its start is 64 KiB aligned, so
/// where a segment lies against a boundary is known.
pub struct Arena {
    pub bytes: Vec<u8>,
    pub start: usize,
}

impl Arena {
    pub const ALIGN: usize = 64 << 10;

    pub fn new(len: usize) -> Self {
        let bytes = vec![0u8; len + Self::ALIGN];
        let start = (bytes.as_ptr() as usize).next_multiple_of(Self::ALIGN) - bytes.as_ptr() as usize;
        Self { bytes, start }
    }

    /// `len` bytes at `at` (from the aligned start) as a segment.
    pub fn seg(&mut self, at: usize, len: usize) -> Buf {
        let p = self.bytes[self.start + at..][..len].as_mut_ptr();
        // SAFETY: the arena outlives every bio of the test, and the test
        // touches its bytes only between I/Os.
        unsafe { Buf::borrowed(p, len) }
    }

    pub fn bytes(&self, at: usize, len: usize) -> &[u8] {
        &self.bytes[self.start + at..][..len]
    }

    /// A pattern of period 251 (prime, so no two 512-byte blocks match),
    /// copied a period at a time: Miri interprets a byte loop slowly.
    pub fn fill(&mut self, at: usize, len: usize, seed: u8) {
        let period: Vec<u8> = (0..251u8).map(|i| i.wrapping_mul(13).wrapping_add(seed)).collect();
        for chunk in self.bytes[self.start + at..][..len].chunks_mut(251) {
            chunk.copy_from_slice(&period[..chunk.len()]);
        }
    }
}

/// Writes `segs` (arena ranges) at `offset` as one bio; returns what the
/// driver saw for it.
pub fn writev(dev: &Device, state: &State, arena: &mut Arena, offset: u64, segs: &[(usize, usize)]) -> Vec<Seen> {
    state.seen.lock().unwrap().clear();
    let bufs: Vec<Buf> = segs.iter().map(|&(at, len)| arena.seg(at, len)).collect();
    dev.client().submit_and_wait(Bio::writev(offset, bufs)).unwrap();
    assert_eq!(*state.violations.lock().unwrap(), Vec::<String>::new());
    state.seen.lock().unwrap().clone()
}

/// `n` segments of `len` bytes, `stride` bytes apart in the arena.
pub fn spaced(n: usize, len: usize, stride: usize) -> Vec<(usize, usize)> {
    (0..n).map(|i| (i * stride, len)).collect()
}
