//! `mqblk zone`: zone reports and zone management on a device spec, and
//! zone op scripts (script.rs) for the kernel differential oracle
//! (tests/oracle/): `script --device SPEC FILE` runs on mqblk, `script
//! --blkdev PATH FILE` on a real zoned block device (blkdev.rs), and `gen`
//! writes random scripts weighted toward the edge cases.

mod blkdev;
mod gen;
mod plug;
pub mod script;

use mqblk::zoned::{ZoneMgmt, ZonedLimits};
use mqblk::{Bio, Buf, Client, Device, Error, Status};

use script::ZoneTarget;

/// `mqblk zone`'s subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ZoneCommand {
    /// Zone report: index, start, len, capacity, wp, type, condition.
    Report {
        #[command(flatten)]
        device: DeviceArg,
    },
    /// Reset zone Z's write pointer (or every zone's, with `all`), then
    /// report.
    Reset {
        /// The zone index, or `all`.
        #[arg(value_name = "Z|all")]
        zone: String,
        #[command(flatten)]
        device: DeviceArg,
    },
    /// Open zone Z explicitly, then report.
    Open(ZoneArgs),
    /// Close zone Z, then report.
    Close(ZoneArgs),
    /// Finish zone Z (its write pointer to the end), then report.
    Finish(ZoneArgs),
    /// Run a zone op script on a fresh device or a real zoned block device;
    /// one JSON line per op.
    Script {
        /// An mqblk zoned device: driver:key=value,...,zoned=1.
        #[arg(long, value_name = "SPEC", conflicts_with = "blkdev")]
        device: Option<String>,
        /// A real zoned block device (the kernel oracle).
        #[arg(long, value_name = "PATH")]
        blkdev: Option<String>,
        /// The script: one op a line (report, reset Z|all, open Z, close Z,
        /// finish Z, write Z OFF N, read Z OFF N).
        file: String,
    },
    /// Write a random zone op script, weighted toward edge cases.
    Gen(gen::GenArgs),
}

/// The zoned device a zone command works on.
#[derive(clap::Args, Debug)]
pub struct DeviceArg {
    /// The zoned device: driver:key=value,...,zoned=1.
    #[arg(long = "device", value_name = "SPEC")]
    spec: String,
}

/// A zone index and the device.
#[derive(clap::Args, Debug)]
pub struct ZoneArgs {
    /// The zone index.
    #[arg(value_name = "Z")]
    zone: String,
    #[command(flatten)]
    device: DeviceArg,
}

/// An mqblk device as a script target.
struct DeviceTarget {
    dev: Device,
    client: Client,
    zoned: ZonedLimits,
    /// The kernel followed has zone write plugs (a null device's
    /// `zoned_compat` other than 6.1): a write across zones is issued in
    /// their order (plug.rs), which mqblk's block layer does not take.
    zone_write_plugs: bool,
    /// Conventional zones (the first ones): they have no write plug.
    nr_conv: u64,
}

impl DeviceTarget {
    fn open(spec: &str) -> Result<Self, String> {
        crate::register_drivers();
        let mut cfg = mqblk::DeviceConfig::parse(spec).map_err(|e| format!("cannot open device '{spec}': {e}"))?;
        let zone_write_plugs = cfg
            .driver_mut::<mqblk_null::NullConfig>()
            .and_then(|null| null.zoned.as_ref())
            .is_some_and(|z| z.compat.zone_write_plugs());
        let dev = Device::open(spec).map_err(|e| e.to_string())?;
        let zoned = dev.limits().zoned.ok_or_else(|| format!("{spec} is not a zoned device (add zoned=1)"))?;
        let client = dev.client();
        let mut target = Self { dev, client, zoned, zone_write_plugs, nr_conv: 0 };
        // A fresh device: this report changes no zone's state.
        target.nr_conv = target.report().map_err(script::errno_name)?.iter().filter(|z| z.0 == "NOT_WP").count() as u64;
        Ok(target)
    }

    /// Writes `data` at `offset_bytes` as the kernel with zone write plugs
    /// issues it on one CPU (plug.rs): each piece its own bio, in that
    /// order, and the status bio_chain gives.
    fn write_plugged(&mut self, offset_bytes: u64, data: &[u8]) -> Result<(), i32> {
        let limits = self.dev.limits();
        let lbs_sectors = u64::from(limits.logical_block_size) >> 9;
        let max_sectors = u64::from(limits.max_sectors) / lbs_sectors * lbs_sectors;
        let zs = self.zoned.zone_sectors;
        let pieces = plug::pieces(offset_bytes >> 9, data.len() as u64 >> 9, zs, max_sectors);
        plug::issue_plugged(&pieces, zs, self.nr_conv, |p| {
            let at = ((p.sector << 9) - offset_bytes) as usize;
            let piece = Buf::from_slice(&data[at..at + (p.nr << 9) as usize]);
            self.run(Bio::write(p.sector << 9, piece)).map(drop)
        })
    }

    fn run(&mut self, bio: Bio) -> Result<Option<Buf>, i32> {
        match self.client.submit_and_wait_completion(bio) {
            Ok(done) if done.status == Status::Ok => Ok(done.segs.into_buf().ok()),
            Ok(done) => Err(done.status.errno()),
            Err(Error::Submit(e)) => Err(e.errno()),
            Err(_) => Err(libc::EIO),
        }
    }
}

impl ZoneTarget for DeviceTarget {
    fn zone_sectors(&self) -> u64 {
        self.zoned.zone_sectors
    }

    fn report(&mut self) -> Result<Vec<(&'static str, u64)>, i32> {
        let zones = self.dev.zones().ok_or(libc::EOPNOTSUPP)?;
        let zones = zones.report(0, self.zoned.nr_zones as usize).map_err(|e| e.errno())?;
        Ok(zones.iter().map(|z| (z.cond.name(), z.wp - z.start)).collect())
    }

    fn mgmt(&mut self, op: ZoneMgmt, zone: Option<u64>) -> Result<(), i32> {
        let bio = match zone {
            None => Bio::zone_reset_all(),
            Some(z) => Bio::zone_mgmt(op, z.saturating_mul(self.zoned.zone_sectors << 9)),
        };
        self.run(bio).map(drop)
    }

    /// As pwrite on the block device file: at or past the end, ENOSPC;
    /// across it, the part before the end is written and the call is
    /// short (the oracle's helper reports a short call as EIO).
    fn write(&mut self, offset_bytes: u64, data: &[u8]) -> Result<(), i32> {
        if data.is_empty() {
            return Ok(()); // blkdev_write_iter: nothing to write, success
        }
        let capacity = self.dev.limits().capacity_bytes;
        if offset_bytes >= capacity {
            return Err(libc::ENOSPC);
        }
        let n = data.len().min((capacity - offset_bytes) as usize);
        let zs_bytes = self.zoned.zone_sectors << 9;
        let spans_zones = offset_bytes / zs_bytes != (offset_bytes + n as u64 - 1) / zs_bytes;
        // A write off the logical block size is refused whole, before any
        // piece (EINVAL, as O_DIRECT): the ordinary path does that.
        let lbs = u64::from(self.dev.limits().logical_block_size);
        let whole_blocks = offset_bytes % lbs == 0 && n as u64 % lbs == 0;
        if self.zone_write_plugs && spans_zones && whole_blocks {
            self.write_plugged(offset_bytes, &data[..n])?;
        } else {
            self.run(Bio::write(offset_bytes, Buf::from_slice(&data[..n])))?;
        }
        if n < data.len() {
            return Err(libc::EIO);
        }
        Ok(())
    }

    /// As pread: at or past the end nothing is read; across it, a short
    /// read (both EIO for the helper, which wants the whole length).
    fn read(&mut self, offset_bytes: u64, out: &mut [u8]) -> Result<(), i32> {
        if out.is_empty() {
            return Ok(()); // blkdev_read_iter: nothing to read, success
        }
        let capacity = self.dev.limits().capacity_bytes;
        if offset_bytes >= capacity {
            return Err(libc::EIO);
        }
        let n = out.len().min((capacity - offset_bytes) as usize);
        let buf = self.run(Bio::read(offset_bytes, Buf::new(n)))?;
        out[..n].copy_from_slice(&buf.expect("a read gives its buffer back"));
        if n < out.len() {
            return Err(libc::EIO);
        }
        Ok(())
    }
}

/// Runs `mqblk zone`; Err((exit code, message)).
pub fn run(command: ZoneCommand) -> Result<String, (u8, String)> {
    let bad = |e: String| (2u8, e);
    let (sub, mgmt, zone, spec) = match command {
        ZoneCommand::Script { device, blkdev, file } => {
            let text = std::fs::read_to_string(&file).map_err(|e| bad(format!("cannot read {file}: {e}")))?;
            let mut target: Box<dyn ZoneTarget> = match (device, blkdev) {
                (Some(spec), None) => Box::new(DeviceTarget::open(&spec).map_err(bad)?),
                (None, Some(path)) => Box::new(blkdev::BlkdevTarget::open(&path).map_err(|e| (1, e))?),
                _ => return Err(bad("zone script needs one of --device SPEC or --blkdev PATH".into())),
            };
            return script::run_script(target.as_mut(), &text).map_err(bad);
        }
        ZoneCommand::Gen(args) => return gen::run(args).map_err(bad),
        ZoneCommand::Report { device } => ("report", None, None, device.spec),
        ZoneCommand::Reset { zone, device } => ("reset", Some(ZoneMgmt::Reset), Some(zone), device.spec),
        ZoneCommand::Open(a) => ("open", Some(ZoneMgmt::Open), Some(a.zone), a.device.spec),
        ZoneCommand::Close(a) => ("close", Some(ZoneMgmt::Close), Some(a.zone), a.device.spec),
        ZoneCommand::Finish(a) => ("finish", Some(ZoneMgmt::Finish), Some(a.zone), a.device.spec),
    };
    let mut target = DeviceTarget::open(&spec).map_err(bad)?;
    if let (Some(mgmt), Some(z)) = (mgmt, zone) {
        let zone = match z.as_str() {
            "all" if mgmt == ZoneMgmt::Reset => None,
            z => Some(z.parse::<u64>().map_err(|_| bad(format!("zone index '{z}' is not a number")))?),
        };
        target.mgmt(mgmt, zone).map_err(|e| (1, format!("zone {sub}: {}", script::errno_name(e))))?;
    }
    Ok(report_table(&target))
}

fn report_table(t: &DeviceTarget) -> String {
    let mut out = String::from("zone  start        len          capacity     wp           type  cond\n");
    let zones = t.dev.zones().map(|z| z.report(0, t.zoned.nr_zones as usize).unwrap_or_default());
    for (i, z) in zones.unwrap_or_default().iter().enumerate() {
        let ztype = if z.ztype == mqblk::zoned::ZoneType::Conventional { "conv" } else { "seq" };
        out.push_str(&format!(
            "{i:<5} {:<12} {:<12} {:<12} {:<12} {ztype:<5} {}\n",
            z.start, z.len, z.capacity, z.wp, z.cond
        ));
    }
    out
}
