//! `mqblk zone gen`: random zone op scripts for the kernel oracle, weighted
//! toward edge cases: writes at and just off the write pointer, past the
//! zone capacity, across zone boundaries and larger than max_sectors (so
//! they split); opens and finishes at the open/active limits; reset all;
//! zone indices out of range; a failing write without the zone report
//! after it (`noreport`), followed by a write at the write pointer (Linux
//! 6.12 fails it, 6.1 does not).
//!
//! With `--device SPEC` the generator runs each op on an mqblk device as it
//! writes it and aims at the true write pointers; without, it guesses them
//! (as if every write succeeded). Writes that fail part way are kept to at
//! most 1 MiB: the kernel builds a larger direct-I/O write from several
//! bios whose boundaries depend on the buffer's memory layout, so how far
//! such a write gets before failing is not reproducible (seen on 6.1).

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
    /// Run each op on this mqblk device as it is written and aim at its
    /// true write pointers.
    #[arg(long, value_name = "SPEC")]
    device: Option<String>,
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
}

/// Sectors of the largest write that may fail part way (one DIO bio).
const MAX_FAILING_WRITE: u64 = 2048;

/// The script (one op per line) for the given shape; with a target, each
/// op runs on it as it is generated.
pub fn generate(seed: u64, ops: u64, shape: Shape, mut target: Option<&mut dyn ZoneTarget>) -> String {
    let Shape { zones, nr_conv, zone_sectors, cap_sectors, block_sectors } = shape;
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut wp = vec![0u64; zones as usize];
    let mut out = format!("# mqblk zone gen --seed {seed} --ops {ops} --zones {zones}\n");
    let mut written = 0;
    while written < ops {
        // Mostly sequential zones; sometimes a conventional one.
        let z =
            if nr_conv > 0 && rng.below(8) == 0 { rng.below(nr_conv) } else { nr_conv + rng.below(zones - nr_conv) };
        let zi = z as usize;
        let line = match rng.below(100) {
            0..=34 => write_op(&mut rng, &shape, &mut wp, z),
            35..=49 => {
                let off = rng.below(zone_sectors);
                let n = (1 + rng.below(300)).min((zones - z) * zone_sectors - off);
                format!("read {z} {off} {n}")
            }
            50..=61 => "open".to_string() + &format!(" {z}"),
            62..=71 => format!("close {z}"),
            72..=79 => {
                wp[zi] = cap_sectors;
                format!("finish {z}")
            }
            80..=89 => {
                wp[zi] = 0;
                format!("reset {z}")
            }
            90..=92 => {
                wp.iter_mut().for_each(|w| *w = 0);
                "reset all".to_string()
            }
            93..=95 => "report".to_string(),
            _ => {
                let verb = ["open", "close", "finish", "reset"][rng.below(4) as usize];
                format!("{verb} {}", zones + rng.below(3)) // out of range
            }
        };
        let aligned = block_sectors > 1 && rng.below(16) != 0;
        for line in line.lines().take((ops - written) as usize) {
            let line = if aligned { align(line, block_sectors) } else { line.to_string() };
            if let Some(t) = target.as_deref_mut() {
                run_on_target(t, &line, &mut wp, cap_sectors);
            }
            out.push_str(&line);
            out.push('\n');
            written += 1;
        }
    }
    out
}

/// A write op to zone `z`: mostly at the write pointer, sometimes past it,
/// to or past capacity, or large enough to split; the write pointers
/// follow it.
fn write_op(rng: &mut Rng, shape: &Shape, wp: &mut [u64], z: u64) -> String {
    let Shape { zones, zone_sectors, cap_sectors, .. } = *shape;
    let zi = z as usize;
    let (off, n) = match rng.below(6) {
        0..=2 => (wp[zi], 1 + rng.below(64)), // at the wp
        3 if rng.below(2) == 0 => {
            // Past the wp with no report after it, then at the wp.
            let (off, n) = (wp[zi] + 1 + rng.below(8), 1 + rng.below(16));
            let n = n.min((zones - z) * zone_sectors - off.min((zones - z) * zone_sectors - 1));
            let at_wp = (1 + rng.below(64)).min(cap_sectors.saturating_sub(wp[zi])).max(1);
            return format!("noreport write {z} {off} {n}\nwrite {z} {} {at_wp}", wp[zi]);
        }
        3 => (wp[zi] + 1 + rng.below(8), 1 + rng.below(16)), // just past it
        4 => {
            // To or past capacity (past it only when small).
            let left = cap_sectors.saturating_sub(wp[zi]);
            let over = if left + 16 <= MAX_FAILING_WRITE { rng.below(16) } else { 0 };
            (wp[zi], left + over)
        }
        _ => (wp[zi], 200 + rng.below(400)), // splits at max_sectors
    };
    let n = n.max(1);
    // Keep inside the device (the kernel clips or fails past it).
    let n = n.min((zones - z) * zone_sectors - off.min((zones - z) * zone_sectors - 1));
    // Off the wp or past capacity, a write fails part way: keep it small.
    let fits = off == wp[zi] && off + n <= cap_sectors;
    let n = if fits { n } else { n.min(MAX_FAILING_WRITE) };
    if off == wp[zi] {
        wp[zi] = (wp[zi] + n).min(cap_sectors);
    }
    format!("write {z} {off} {n}")
}

/// Runs one op line on `t`, then aims the next ops at the true write
/// pointers.
fn run_on_target(t: &mut dyn ZoneTarget, line: &str, wp: &mut [u64], cap_sectors: u64) {
    if let Ok(Some((text, op))) = super::script::parse_line(line) {
        let _ = super::script::run_op(t, &text, &op);
        if matches!(op, super::script::ZoneOp::NoReport(_)) {
            return; // a report here would change what the next op sees
        }
    }
    if let Ok(report) = t.report() {
        for (w, (_, rel)) in wp.iter_mut().zip(report) {
            *w = rel.min(cap_sectors);
        }
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
            let off: u64 = off.parse().unwrap_or(0);
            let n: u64 = n.parse().unwrap_or(1);
            format!("{verb} {z} {} {}", off / block * block, n.div_ceil(block) * block)
        }
        _ => line.to_string(),
    }
}

pub fn run(args: GenArgs) -> Result<String, String> {
    let GenArgs { seed, ops, zones, nr_conv, zone_sectors, capacity_sectors, block_sectors, device } = args;
    let cap_sectors = capacity_sectors.unwrap_or(zone_sectors);
    if zones == 0 || nr_conv >= zones || cap_sectors > zone_sectors || zone_sectors == 0 || block_sectors == 0 {
        return Err("zone gen: need zones > nr-conv, 0 < capacity-sectors <= zone-sectors, block-sectors >= 1".into());
    }
    let shape = Shape { zones, nr_conv, zone_sectors, cap_sectors, block_sectors };
    let mut target = match device {
        Some(spec) => Some(super::DeviceTarget::open(&spec)?),
        None => None,
    };
    Ok(generate(seed, ops, shape, target.as_mut().map(|t| t as &mut dyn ZoneTarget)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_deterministic_and_parse() {
        let shape = Shape { zones: 16, nr_conv: 2, zone_sectors: 131_072, cap_sectors: 100_000, block_sectors: 1 };
        let a = generate(7, 300, shape, None);
        assert_eq!(a, generate(7, 300, shape, None));
        assert_ne!(a, generate(8, 300, shape, None));
        let ops: Vec<_> = a.lines().filter_map(|l| super::super::script::parse_line(l).unwrap()).collect();
        assert_eq!(ops.len(), 300);
        for verb in ["write", "read", "open", "close", "finish", "reset", "reset all", "noreport write"] {
            assert!(ops.iter().any(|(t, _)| t.starts_with(verb)), "{verb} never generated");
        }
    }
}
