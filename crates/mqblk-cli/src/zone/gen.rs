//! `mqblk zone gen`: random zone op scripts for the kernel oracle, weighted
//! toward edge cases: writes at and just off the write pointer, past the
//! zone capacity, across zone boundaries and the device's end, longer than
//! a zone, of sizes around max_sectors (255 sectors, 248 with 4 KiB
//! blocks) and over 1 MiB; opens and finishes at the open/active limits;
//! reset all; zone indices out of range; a failing write without the zone
//! report after it (`noreport`), followed by a write at the write pointer
//! (Linux 6.12 fails it, 6.1 does not).
//!
//! With `--device SPEC` the generator runs each op on an mqblk device as it
//! writes it and aims at its true write pointers, zone conditions and
//! open/active limits; without, it guesses them (as if every write
//! succeeded).
//!
//! Which writes, as measured on the oracle's kernels
//! (docs/results/zoned-spanning-writes.txt: the same scripts 3 and 5 times
//! on Debian's 6.1 and 6.12 with null_blk, traced). `zone script --blkdev`
//! issues each write as one direct-I/O bio (blkdev.rs), which the block
//! layer splits at max_sectors and zone boundaries:
//! - Deterministic on both kernels, so generated: writes past the zone
//!   capacity of any size (the pieces before the one that crosses it land,
//!   that one fails, the rest fail or, on 6.12, are aborted by
//!   disk_zone_wplug_abort), across the zone's end into the next zones and
//!   past the device's end (the pwrite is cut at the end, a short write),
//!   longer than a zone from its start, and of any size around max_sectors.
//! - Generated only with `--spans-at-limits` (the kernel oracle's scripts):
//!   a write that reaches a later zone while that zone could only open by
//!   implicitly closing another or not at all (zone_max_open or
//!   zone_max_active reached). Which zone null_blk closes, or which piece
//!   it refuses (null_check_zone_resources), follows the order in which
//!   the zones' pieces reach it. 6.1 issues every piece in order from the
//!   writing task. 6.12 and 7.x issue the first piece of each zone from the
//!   task and the zone's further pieces one at a time from its zone write
//!   plug's work (blk_zone_wplug_bio_work) as each completes: on one CPU,
//!   with the task not preempted by that work, the zones' first pieces
//!   and then one piece of each zone in turn (plug.rs), the same on every
//!   run, which is how the oracle's guests run (one vCPU, `zone script
//!   --blkdev` SCHED_FIFO: blkdev.rs). When the work preempted the task
//!   (one vCPU, the task SCHED_NORMAL) or ran beside it (several vCPUs),
//!   the order changed from run to run: zone 7 ended CLOSED in one run and
//!   IMP_OPEN in the next, and a write over three zones filled one of
//!   them in one run and two in another. Without the option a write
//!   reaches past its zone only when every zone it may open fits under
//!   both limits at once (`Model::room`), so that tests comparing two
//!   zoned devices whose pieces complete at different times (null_blk and
//!   ublk in tests/guest/ublk_zoned.sh, on two vCPUs) may use the scripts.
//!
//! Writes are at most `MAX_WRITE` sectors, to keep a 1 GiB guest's memory
//! (the huge pages of the write, its copy, the memory-backed null_blk)
//! sane.

use super::script::ZoneTarget;

/// xorshift64*: deterministic per seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// `mqblk zone gen`'s options.
#[derive(clap::Args, Debug)]
pub struct GenArgs {
    /// The random seed: the same seed and shape give the same script.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Ops in the script.
    #[arg(long, value_name = "N", default_value_t = 300)]
    ops: u64,
    /// Zones of the target device.
    #[arg(long, value_name = "N", default_value_t = 16)]
    zones: u64,
    /// Conventional zones (the first ones).
    #[arg(long, value_name = "N", default_value_t = 0)]
    nr_conv: u64,
    /// Zone size in 512-byte sectors.
    #[arg(long, value_name = "N", default_value_t = 131_072)]
    zone_sectors: u64,
    /// Zone capacity in sectors [default: the zone size].
    #[arg(long, value_name = "N")]
    capacity_sectors: Option<u64>,
    /// Logical block size in sectors.
    #[arg(long, value_name = "N", default_value_t = 1)]
    block_sectors: u64,
    /// The open zone limit (0: none); with --device, the device's.
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_open: u64,
    /// The active zone limit (0: none); with --device, the device's.
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_active: u64,
    /// Run each op on this mqblk device as it is written and aim at its
    /// true write pointers.
    #[arg(long, value_name = "SPEC")]
    device: Option<String>,
    /// Also let writes reach later zones while zone_max_open or
    /// zone_max_active is reached (deterministic only on one CPU with the
    /// script runner unpreempted, as in the kernel oracle).
    #[arg(long)]
    spans_at_limits: bool,
}

/// The script's shape: the device it is aimed at.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub zones: u64,
    pub nr_conv: u64,
    pub zone_sectors: u64,
    pub cap_sectors: u64,
    /// Logical block size in sectors: most offsets and lengths are
    /// multiples of it (one op in 16 is not, to test the refusal).
    pub block_sectors: u64,
    /// zone_max_open and zone_max_active (0: no limit).
    pub max_open: u64,
    pub max_active: u64,
    /// Writes may reach later zones while a limit is reached.
    pub spans_at_limits: bool,
}

/// The largest write in sectors (72 MiB: a 64 MiB zone and then some, two
/// whole 32 MiB zones).
pub const MAX_WRITE: u64 = 147_456;

/// A zone's condition as the generator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cond {
    Conv,
    Empty,
    Open,
    Closed,
    Full,
    /// Read-only or offline: takes no write.
    Other,
}

impl Cond {
    fn from_name(name: &str) -> Self {
        match name {
            "NOT_WP" => Self::Conv,
            "EMPTY" => Self::Empty,
            "IMP_OPEN" | "EXP_OPEN" => Self::Open,
            "CLOSED" => Self::Closed,
            "FULL" => Self::Full,
            _ => Self::Other,
        }
    }
}

/// The write pointers (relative, at most the capacity) and conditions the
/// next op is aimed at: the device's after each op, or guesses.
struct Model {
    shape: Shape,
    wp: Vec<u64>,
    cond: Vec<Cond>,
}

impl Model {
    fn new(shape: Shape) -> Self {
        let cond = (0..shape.zones).map(|z| if z < shape.nr_conv { Cond::Conv } else { Cond::Empty }).collect();
        Self { shape, wp: vec![0; shape.zones as usize], cond }
    }

    /// Whether a write into zones `first..=last` cannot depend on the order
    /// in which the zones' pieces reach the driver: every sequential zone it
    /// may open or activate fits under zone_max_open and zone_max_active
    /// together with the zones open and active now, so null_blk neither
    /// closes a zone implicitly nor refuses one. Full zones are not counted
    /// (their pieces fail before any resource check).
    fn room(&self, first: u64, last: u64) -> bool {
        let count = |f: &dyn Fn(Cond) -> bool| self.cond.iter().filter(|&&c| f(c)).count() as u64;
        let open = count(&|c| c == Cond::Open);
        let active = count(&|c| matches!(c, Cond::Open | Cond::Closed));
        let span = &self.cond[first as usize..=last as usize];
        let to_open = span.iter().filter(|&&c| matches!(c, Cond::Empty | Cond::Closed)).count() as u64;
        let to_activate = span.iter().filter(|&&c| c == Cond::Empty).count() as u64;
        let Shape { max_open, max_active, .. } = self.shape;
        (max_open == 0 || open + to_open <= max_open) && (max_active == 0 || active + to_activate <= max_active)
    }

    /// The guess after `write z off n`, as if it succeeded where it starts
    /// at a write pointer.
    fn guess_write(&mut self, z: u64, off: u64, n: u64) {
        let Shape { zones, zone_sectors, cap_sectors, .. } = self.shape;
        let (mut z, mut off, mut left) = (z as usize, off, n);
        while left > 0 && z < zones as usize {
            let here = left.min(zone_sectors - off);
            if self.cond[z] != Cond::Conv && off == self.wp[z] && off + here <= cap_sectors {
                self.wp[z] += here;
                self.cond[z] = if self.wp[z] == cap_sectors { Cond::Full } else { Cond::Open };
            }
            (z, off, left) = (z + 1, 0, left - here);
        }
    }

    fn guess_reset(&mut self, z: usize) {
        if self.cond[z] != Cond::Conv {
            (self.wp[z], self.cond[z]) = (0, Cond::Empty);
        }
    }

    /// Takes the device's zone report.
    fn learn(&mut self, report: &[(&'static str, u64)]) {
        for (z, (cond, rel)) in report.iter().enumerate().take(self.wp.len()) {
            self.wp[z] = (*rel).min(self.shape.cap_sectors);
            self.cond[z] = Cond::from_name(cond);
        }
    }
}

/// The script (one op per line) for the given shape; with a target, each
/// op runs on it as it is generated.
pub fn generate(seed: u64, ops: u64, shape: Shape, mut target: Option<&mut dyn ZoneTarget>) -> String {
    let Shape { zones, nr_conv, zone_sectors, cap_sectors, block_sectors, .. } = shape;
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut model = Model::new(shape);
    let mut out = format!("# mqblk zone gen --seed {seed} --ops {ops} --zones {zones}\n");
    let mut written = 0;
    while written < ops {
        // Mostly sequential zones; sometimes a conventional one.
        let z =
            if nr_conv > 0 && rng.below(8) == 0 { rng.below(nr_conv) } else { nr_conv + rng.below(zones - nr_conv) };
        let zi = z as usize;
        let block = if block_sectors > 1 && rng.below(16) != 0 { block_sectors } else { 1 };
        let line = match rng.below(100) {
            0..=34 => write_op(&mut rng, &mut model, z, block),
            35..=49 => {
                let off = rng.below(zone_sectors);
                let n = (1 + rng.below(300)).min((zones - z) * zone_sectors - off);
                format!("read {z} {off} {n}")
            }
            50..=61 => {
                if model.cond[zi] != Cond::Conv {
                    model.cond[zi] = Cond::Open;
                }
                format!("open {z}")
            }
            62..=71 => format!("close {z}"),
            72..=79 => {
                if model.cond[zi] != Cond::Conv {
                    (model.wp[zi], model.cond[zi]) = (cap_sectors, Cond::Full);
                }
                format!("finish {z}")
            }
            80..=89 => {
                model.guess_reset(zi);
                format!("reset {z}")
            }
            90..=92 => {
                (0..zones as usize).for_each(|z| model.guess_reset(z));
                "reset all".to_string()
            }
            93..=95 => "report".to_string(),
            _ => {
                let verb = ["open", "close", "finish", "reset"][rng.below(4) as usize];
                format!("{verb} {}", zones + rng.below(3)) // out of range
            }
        };
        for line in line.lines().take((ops - written) as usize) {
            let line = if block > 1 { align(line, block) } else { line.to_string() };
            if let Some(t) = target.as_deref_mut() {
                run_on_target(t, &line, &mut model);
            }
            out.push_str(&line);
            out.push('\n');
            written += 1;
        }
    }
    out
}

/// A write op to zone `z` (offsets and lengths in multiples of `block`),
/// as one of: at the write pointer; past it (also without the report
/// after it, then at it); to or past the capacity; of a size around
/// max_sectors or over 1 MiB; across the zone's end; longer than a zone
/// from its start. The model's guess follows it.
fn write_op(rng: &mut Rng, model: &mut Model, z: u64, block: u64) -> String {
    let Shape { zones, zone_sectors, cap_sectors, .. } = model.shape;
    let wp = model.wp[z as usize];
    let left = cap_sectors.saturating_sub(wp);
    let to_zone_end = zone_sectors - wp.min(zone_sectors);
    let (off, n) = match rng.below(10) {
        0..=3 => (wp, 1 + rng.below(64)), // at the wp
        4 if rng.below(2) == 0 => {
            // Past the wp with no report after it, then at the wp.
            let (off, n) = aligned((wp + 1 + rng.below(8)).min(zone_sectors - block), 1 + rng.below(16), block);
            let n = n.min(zone_sectors - off);
            let at_wp = aligned(wp, (1 + rng.below(64)).min(left).max(1), block).1;
            return format!("noreport write {z} {off} {n}\nwrite {z} {wp} {at_wp}");
        }
        4 => (wp + 1 + rng.below(8), 1 + rng.below(16)), // just past it
        5 => {
            // To the capacity, or past it by a little or a lot (across the
            // zone's end, too, when the capacity is the zone size).
            let over = [0, 1 + rng.below(16), 1 + rng.below(4096)][rng.below(3) as usize];
            (wp, left + over)
        }
        6 | 7 => {
            // Around max_sectors (255 or 248 sectors a piece) and 1 MiB
            // (2048 sectors: what one bio of ordinary pages held), or more.
            let k = 1 + rng.below(8);
            let n = match rng.below(5) {
                0 => 255 * k + rng.below(3) - 1,
                1 => 248 * k + 8 * rng.below(3) - 8,
                2 => 2047 + rng.below(3),
                3 => 200 + rng.below(400),
                _ => 2049 + rng.below(16_384),
            };
            (wp, n)
        }
        8 => (wp, to_zone_end + 1 + rng.below(4096)), // across the zone's end
        _ => {
            // Longer than a zone from its start; now and then two zones.
            let whole = if rng.below(4) == 0 { 2 * zone_sectors } else { zone_sectors };
            (0, whole + 1 + rng.below(4096))
        }
    };
    // MAX_WRITE is a multiple of any block size.
    let (off, n) = aligned(off.min(zone_sectors - block), n.clamp(1, MAX_WRITE), block);
    // Zones the write reaches on the device (it is cut at the device's end).
    let last = ((z * zone_sectors + off + n - 1) / zone_sectors).min(zones - 1);
    let n = if last == z || model.shape.spans_at_limits || model.room(z, last) {
        n
    } else {
        // No room for the next zones: up to the zone's end only.
        n.min(zone_sectors - off)
    };
    model.guess_write(z, off, n);
    format!("write {z} {off} {n}")
}

/// `off` down and `n` up to whole blocks.
fn aligned(off: u64, n: u64, block: u64) -> (u64, u64) {
    (off / block * block, n.div_ceil(block) * block)
}

/// Runs one op line on `t`, then aims the next ops at the device's true
/// zones.
fn run_on_target(t: &mut dyn ZoneTarget, line: &str, model: &mut Model) {
    if let Ok(Some((text, op))) = super::script::parse_line(line) {
        let _ = super::script::run_op(t, &text, &op);
        if matches!(op, super::script::ZoneOp::NoReport(_)) {
            return; // a report here would change what the next op sees
        }
    }
    if let Ok(report) = t.report() {
        model.learn(&report);
    }
}

/// Rounds a read or write line's OFF down and N up to whole blocks.
fn align(line: &str, block: u64) -> String {
    if let Some(rest) = line.strip_prefix("noreport ") {
        return format!("noreport {}", align(rest, block));
    }
    let w: Vec<&str> = line.split(' ').collect();
    match w.as_slice() {
        [verb @ ("read" | "write"), z, off, n] => {
            let (off, n) = aligned(off.parse().unwrap_or(0), n.parse().unwrap_or(1), block);
            format!("{verb} {z} {off} {n}")
        }
        _ => line.to_string(),
    }
}

pub fn run(args: GenArgs) -> Result<String, String> {
    let GenArgs {
        seed,
        ops,
        zones,
        nr_conv,
        zone_sectors,
        capacity_sectors,
        block_sectors,
        max_open,
        max_active,
        device,
        spans_at_limits,
    } = args;
    let cap_sectors = capacity_sectors.unwrap_or(zone_sectors);
    if zones == 0
        || nr_conv >= zones
        || cap_sectors > zone_sectors
        || zone_sectors == 0
        || block_sectors == 0
        || zone_sectors % block_sectors != 0
    {
        return Err("zone gen: need zones > nr-conv, 0 < capacity-sectors <= zone-sectors, block-sectors >= 1 \
                    dividing zone-sectors"
            .into());
    }
    let mut shape =
        Shape { zones, nr_conv, zone_sectors, cap_sectors, block_sectors, max_open, max_active, spans_at_limits };
    let mut target = match device {
        Some(spec) => Some(super::DeviceTarget::open(&spec)?),
        None => None,
    };
    if let Some(t) = &target {
        // The limits as the device applies them (null_blk drops a limit
        // that is not below the number of sequential zones).
        shape.max_open = u64::from(t.zoned.max_open_zones);
        shape.max_active = u64::from(t.zoned.max_active_zones);
    }
    Ok(generate(seed, ops, shape, target.as_mut().map(|t| t as &mut dyn ZoneTarget)))
}

#[cfg(test)]
mod tests;
