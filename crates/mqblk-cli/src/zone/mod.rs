//! `mqblk zone`: zone reports and zone management on a device spec, and
//! zone op scripts (script.rs) for the kernel differential oracle
//! (tests/oracle/): `script --device SPEC FILE` runs on mqblk, `script
//! --blkdev PATH FILE` on a real zoned block device (blkdev.rs), and `gen`
//! writes random scripts weighted toward the edge cases.

mod blkdev;
mod gen;
pub mod script;

use mqblk::zoned::{ZoneMgmt, ZonedLimits};
use mqblk::{Bio, Buf, Client, Device, Error, Status};

use script::ZoneTarget;

pub const USAGE: &str = "\
  zone report|reset|open|close|finish [Z|all] --device SPEC
        Zone report (index, start, len, capacity, wp, type, condition), or a
        zone management op on zone Z (reset also takes `all`).
  zone script --device SPEC FILE | --blkdev PATH FILE
        Run a zone op script on a fresh device; one JSON line per op.
  zone gen --seed N [--ops N] [--zones N] [--nr-conv N] [--zone-sectors N] [--capacity-sectors N] [--block-sectors N] [--device SPEC]
        A random zone op script, weighted toward edge cases.
";

/// An mqblk device as a script target.
struct DeviceTarget {
    dev: Device,
    client: Client,
    zoned: ZonedLimits,
}

impl DeviceTarget {
    fn open(spec: &str) -> Result<Self, String> {
        let dev = Device::open(spec).map_err(|e| e.to_string())?;
        let zoned = dev.limits().zoned.ok_or_else(|| format!("{spec} is not a zoned device (add zoned=1)"))?;
        let client = dev.client();
        Ok(Self { dev, client, zoned })
    }

    fn run(&mut self, bio: Bio) -> Result<Option<Buf>, i32> {
        match self.client.submit_and_wait_completion(bio) {
            Ok(done) if done.status == Status::Ok => Ok(done.buf),
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
        let zones = self.dev.report_zones(0, self.zoned.nr_zones as usize).map_err(|e| e.errno())?;
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
        let capacity = self.dev.limits().capacity_bytes;
        if offset_bytes >= capacity {
            return Err(libc::ENOSPC);
        }
        let n = data.len().min((capacity - offset_bytes) as usize);
        self.run(Bio::write(offset_bytes, Buf::from_slice(&data[..n])))?;
        if n < data.len() {
            return Err(libc::EIO);
        }
        Ok(())
    }

    /// As pread: at or past the end nothing is read; across it, a short
    /// read (both EIO for the helper, which wants the whole length).
    fn read(&mut self, offset_bytes: u64, out: &mut [u8]) -> Result<(), i32> {
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

/// `--name VALUE` or `--name=VALUE` from `args`, removed from it.
fn take_opt(args: &mut Vec<String>, name: &str) -> Result<Option<String>, String> {
    let Some(i) = args.iter().position(|a| a == name || a.starts_with(&format!("{name}="))) else { return Ok(None) };
    let arg = args.remove(i);
    if let Some(v) = arg.strip_prefix(&format!("{name}=")) {
        return Ok(Some(v.to_string()));
    }
    if i >= args.len() {
        return Err(format!("{name} needs a value"));
    }
    Ok(Some(args.remove(i)))
}

/// Runs `mqblk zone ARGS`; Err((exit code, message)).
pub fn run(args: &[String]) -> Result<String, (u8, String)> {
    let bad = |e: String| (2u8, e);
    let mut args = args.to_vec();
    if args.is_empty() {
        return Err(bad(format!("a subcommand is needed:\n{USAGE}")));
    }
    let sub = args.remove(0);
    let device = take_opt(&mut args, "--device").map_err(bad)?;
    match sub.as_str() {
        "script" => {
            let blkdev = take_opt(&mut args, "--blkdev").map_err(bad)?;
            let [file] = args.as_slice() else { return Err(bad("zone script needs exactly one FILE".into())) };
            let text = std::fs::read_to_string(file).map_err(|e| bad(format!("cannot read {file}: {e}")))?;
            let mut target: Box<dyn ZoneTarget> = match (device, blkdev) {
                (Some(spec), None) => Box::new(DeviceTarget::open(&spec).map_err(bad)?),
                (None, Some(path)) => Box::new(blkdev::BlkdevTarget::open(&path).map_err(|e| (1, e))?),
                _ => return Err(bad("zone script needs one of --device SPEC or --blkdev PATH".into())),
            };
            script::run_script(target.as_mut(), &text).map_err(bad)
        }
        "gen" => gen::run(&mut args).map_err(bad),
        "report" | "reset" | "open" | "close" | "finish" => {
            let spec = device.ok_or_else(|| bad(format!("zone {sub} needs --device SPEC")))?;
            let mut target = DeviceTarget::open(&spec).map_err(bad)?;
            if sub != "report" {
                let mgmt = match sub.as_str() {
                    "reset" => ZoneMgmt::Reset,
                    "open" => ZoneMgmt::Open,
                    "close" => ZoneMgmt::Close,
                    _ => ZoneMgmt::Finish,
                };
                let zone = match args.as_slice() {
                    [all] if all == "all" && mgmt == ZoneMgmt::Reset => None,
                    [z] => Some(z.parse::<u64>().map_err(|_| bad(format!("zone index '{z}' is not a number")))?),
                    _ => {
                        return Err(bad(format!(
                            "zone {sub} needs one zone index{}",
                            if mgmt == ZoneMgmt::Reset { " or all" } else { "" }
                        )))
                    }
                };
                target.mgmt(mgmt, zone).map_err(|e| (1, format!("zone {sub}: {}", script::errno_name(e))))?;
            }
            Ok(report_table(&target))
        }
        other => Err(bad(format!("unknown zone subcommand '{other}'\n{USAGE}"))),
    }
}

fn report_table(t: &DeviceTarget) -> String {
    let mut out = String::from("zone  start        len          capacity     wp           type  cond\n");
    for (i, z) in t.dev.report_zones(0, t.zoned.nr_zones as usize).unwrap_or_default().iter().enumerate() {
        let ztype = if z.ztype == mqblk::zoned::ZoneType::Conventional { "conv" } else { "seq" };
        out.push_str(&format!(
            "{i:<5} {:<12} {:<12} {:<12} {:<12} {ztype:<5} {}\n",
            z.start, z.len, z.capacity, z.wp, z.cond
        ));
    }
    out
}
