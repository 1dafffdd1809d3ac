//! `mqblk ublk`: any mqblk device as a Linux /dev/ublkbN (crates/mqblk-ublk).
//!
//! `add --device SPEC [--queues N] [--depth D] [--id N] [--recovery MODE]
//! [--unprivileged]` creates the device and serves it in the foreground
//! until SIGINT or SIGTERM (or `del` from elsewhere), then stops and
//! deletes it; with `--recovery=reissue` a server that dies leaves the
//! device waiting, and `recover ID --device SPEC` serves it again (the
//! requests the dead server held reissued); `list` shows the kernel's ublk
//! devices, `info ID` one of them; `del ID` deletes one (its server exits).
//! `--unprivileged` adds a device without root (UBLK_F_UNPRIVILEGED_DEV);
//! `del`, `list`, `info` and `recover` need no option for such a device:
//! GET_DEV_INFO2 tells them it is one, and they name its /dev/ublkcN in
//! their commands as the kernel requires (mqblk-ublk's ctrl.rs).

use std::io::Write;

use mqblk::Device;
use mqblk_ublk::{CpuAffinity, Error, Options, Recovery, Server, ZeroCopy};

/// Linux ublk devices served by mqblk.
#[derive(clap::Subcommand, Debug)]
pub enum UblkCommand {
    /// Create /dev/ublkbN over an mqblk device and serve it until SIGINT or
    /// SIGTERM (then stop and delete it).
    Add(AddArgs),
    /// Serve ublk device ID again after its server died (a device added
    /// with --recovery): the held requests go to this server.
    Recover(RecoverArgs),
    /// List the ublk devices: id, state, queues, depth, server pid, block
    /// device, owner (uid:gid of an unprivileged device's owner).
    List,
    /// Show ublk device ID as `key value` lines (for scripts: the udev
    /// helper scripts/ublk-chown.sh reads `unprivileged` and `owner`).
    Info {
        /// The device id (N of /dev/ublkbN).
        id: u32,
    },
    /// Delete ublk device ID (its server, if running, exits).
    Del {
        /// The device id (N of /dev/ublkbN).
        id: u32,
    },
}

#[derive(clap::Args, Debug)]
pub struct AddArgs {
    /// The device to serve: driver:key=value,...
    #[arg(long, value_name = "SPEC")]
    device: String,
    /// Hardware queues (one server thread each; the kernel caps it at the CPU count).
    #[arg(long, value_name = "N", default_value_t = 1)]
    queues: u16,
    /// Tags per queue.
    #[arg(long, value_name = "D", default_value_t = 64)]
    depth: u16,
    /// The device id to ask for [default: the first free one].
    #[arg(long, value_name = "N")]
    id: Option<u32>,
    /// What the device does if this server dies: off (removed with it),
    /// reissue (kept; held I/O reissued to the server `ublk recover`
    /// starts), fail_io (kept; I/O fails until then: Linux 6.13+).
    #[arg(long, value_name = "MODE", default_value = "off")]
    recovery: String,
    /// A control socket at PATH for `mqblk control PATH ...`: power cuts
    /// and live attributes (bad blocks) of the device.
    #[arg(long, value_name = "PATH")]
    control: Option<std::path::PathBuf>,
    /// Add an unprivileged device (UBLK_F_UNPRIVILEGED_DEV), as a user
    /// without root: needs access to /dev/ublk-control and the udev rule
    /// that gives the device's nodes to their owner (README, "ublk without
    /// root"). Not with --recovery or a zoned device. As root, the kernel
    /// adds a privileged device instead.
    #[arg(long)]
    unprivileged: bool,
    /// Reads and writes with the request's own pages, no copy through the
    /// server (UBLK_F_SUPPORT_ZERO_COPY, Linux 6.16+, a file: device; the
    /// kernel registers the pages itself where it offers
    /// UBLK_F_AUTO_BUF_REG): auto (where the kernel and the device can),
    /// on (refused where they cannot, naming why), explicit (as on, but
    /// the file driver registers every request's pages), off (the kernel
    /// copies through the server).
    #[arg(long, value_name = "MODE", default_value = "auto")]
    zero_copy: String,
    /// Which CPUs each queue thread runs on, of those the kernel maps to
    /// its queue (UBLK_CMD_GET_QUEUE_AFFINITY) and this process may use:
    /// single (one of them, the last), queue (all of them), off (wherever
    /// the scheduler puts it).
    #[arg(long, value_name = "MODE", default_value = "single")]
    cpu_affinity: String,
}

#[derive(clap::Args, Debug)]
pub struct RecoverArgs {
    /// The device id (N of /dev/ublkbN) whose server died.
    id: u32,
    /// The device to serve it from: the dead server's, with the same
    /// capacity and block size (a file device keeps its data; a null
    /// device's memory died with the old server).
    #[arg(long, value_name = "SPEC")]
    device: String,
    /// A control socket at PATH for `mqblk control PATH ...`.
    #[arg(long, value_name = "PATH")]
    control: Option<std::path::PathBuf>,
}

/// Runs `mqblk ublk ...`. Err((exit code, message)).
pub fn run(command: UblkCommand) -> Result<String, (u8, String)> {
    crate::serve::init_logger("ublk");
    match command {
        UblkCommand::Add(args) => add(args),
        UblkCommand::Recover(args) => recover(args),
        UblkCommand::List => list(),
        UblkCommand::Info { id } => info(id),
        UblkCommand::Del { id } => {
            mqblk_ublk::delete(id).map_err(failed)?;
            Ok(format!("mqblk ublk: deleted device {id}\n"))
        }
    }
}

fn failed(e: Error) -> (u8, String) {
    let code = match e {
        Error::BadOption(_) | Error::Device(mqblk::Error::Config(_)) => 2,
        _ => 1,
    };
    (code, e.to_string())
}

fn add(args: AddArgs) -> Result<String, (u8, String)> {
    let recovery = Recovery::from_name(&args.recovery)
        .ok_or_else(|| (2, format!("--recovery {}: accepted: {}", args.recovery, Recovery::NAMES.join(", "))))?;
    let zero_copy = ZeroCopy::from_name(&args.zero_copy)
        .ok_or_else(|| (2, format!("--zero-copy {}: accepted: {}", args.zero_copy, ZeroCopy::NAMES.join(", "))))?;
    let cpu_affinity = CpuAffinity::from_name(&args.cpu_affinity).ok_or_else(|| {
        (2, format!("--cpu-affinity {}: accepted: {}", args.cpu_affinity, CpuAffinity::NAMES.join(", ")))
    })?;
    let opts = Options {
        queues: args.queues,
        depth: args.depth,
        id: args.id,
        recovery,
        unprivileged: args.unprivileged,
        zero_copy,
        cpu_affinity,
    };
    serve(&args.device, opts, args.control.as_deref(), None)
}

fn recover(args: RecoverArgs) -> Result<String, (u8, String)> {
    serve(&args.device, Options::default(), args.control.as_deref(), Some(args.id))
}

/// Serves `spec` as a new device (`recover`: None) or as device `recover`
/// whose server died, until stopped; then deletes it.
fn serve(
    spec: &str,
    opts: Options,
    control: Option<&std::path::Path>,
    recover: Option<u32>,
) -> Result<String, (u8, String)> {
    crate::register_drivers();
    let device = Device::open(spec).map_err(|e| (2, format!("--device {spec}: {e}")))?;
    let zoned = device.limits().zoned.is_some();
    let control = crate::control::Control::for_one_device(control, &device, mqblk::socket_mode::DEFAULT_SOCKET_MODE)?;
    // Its blktrace, if traced, ends once the server stops.
    let traced = device.clone();
    let server = Server::new(device, opts).map_err(failed)?;
    let signals = crate::serve::stop_on_signals({
        let stopper = server.stopper();
        move || stopper.stop()
    })?;
    let announce = |s: &mqblk_ublk::Started| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "mqblk ublk: {} serving {spec} ({} queues x {} tags, requests up to {} KiB, {}{}, {})",
            mqblk_ublk::uapi::block_path(s.dev_id),
            s.queues,
            s.depth,
            s.max_io_bytes / 1024,
            data_path(s.flags),
            if s.unprivileged { ", unprivileged" } else { "" },
            queue_placement(&s.queue_cpus)
        );
        let _ = out.flush();
    };
    let summary = match recover {
        None => server.run(announce),
        Some(id) => server.recover(id, announce),
    };
    signals.close();
    if let Some(c) = control {
        c.close();
    }
    let summary = summary.map_err(failed)?;
    if let Some(line) = crate::blktrace_stop_line(&traced) {
        eprintln!("{}", line.map_err(|e| (1, e))?);
    }
    let appends = if zoned { format!(", {} zone appends", summary.zone_appends) } else { String::new() };
    let zero_copy = if summary.zero_copy_ios + summary.copy_fallbacks > 0 {
        let auto = if summary.auto_registered_ios + summary.auto_fallbacks > 0 {
            format!(
                ", {} registered by the kernel, {} by the server after the kernel could not",
                summary.auto_registered_ios, summary.auto_fallbacks
            )
        } else {
            String::new()
        };
        format!(
            ", {} zero copy, {} copied after a failed registration{auto}",
            summary.zero_copy_ios, summary.copy_fallbacks
        )
    } else {
        String::new()
    };
    Ok(format!(
        "mqblk ublk: device {} stopped and deleted ({} requests, {} failed{appends}{zero_copy})\n",
        summary.dev_id, summary.requests, summary.errors
    ))
}

/// "queue 0 on CPU 1, queue 1 on CPU 3", or "queue threads unpinned".
fn queue_placement(queue_cpus: &[Vec<usize>]) -> String {
    if queue_cpus.iter().all(Vec::is_empty) {
        return "queue threads unpinned".to_string();
    }
    let each: Vec<String> = queue_cpus
        .iter()
        .enumerate()
        .map(|(q, cpus)| {
            if cpus.is_empty() {
                format!("queue {q} unpinned")
            } else {
                format!("queue {q} on {}", mqblk_ublk::cpu_list(cpus))
            }
        })
        .collect();
    each.join(", ")
}

/// How a device's data moves, by the flags it was added with.
fn data_path(flags: u64) -> &'static str {
    use mqblk_ublk::uapi;
    if flags & uapi::UBLK_F_AUTO_BUF_REG != 0 {
        "zero copy, auto-registered"
    } else if flags & uapi::UBLK_F_SUPPORT_ZERO_COPY != 0 {
        "zero copy"
    } else if flags & uapi::UBLK_F_USER_COPY != 0 {
        "user copy"
    } else {
        "copied by the kernel"
    }
}

fn list() -> Result<String, (u8, String)> {
    let devices = mqblk_ublk::list().map_err(failed)?;
    let mut out = String::from("ID  STATE     QUEUES  DEPTH  MAX_IO_KIB  PID      BLOCK        OWNER\n");
    for d in devices {
        let d = match d {
            mqblk_ublk::Listed::Visible(d) => d,
            // The kernel describes it to its owner (or root) only.
            mqblk_ublk::Listed::Hidden { dev_id, why } => {
                out.push_str(&format!(
                    "{dev_id:<3} {:<9} {:<7} {:<6} {:<11} {:<8} {:<12} {why}\n",
                    "?", "?", "?", "?", "?", "?"
                ));
                continue;
            }
        };
        let block = if d.state == mqblk_ublk::uapi::UBLK_S_DEV_LIVE {
            mqblk_ublk::uapi::block_path(d.dev_id)
        } else {
            "-".into()
        };
        out.push_str(&format!(
            "{:<3} {:<9} {:<7} {:<6} {:<11} {:<8} {:<12} {}\n",
            d.dev_id,
            mqblk_ublk::uapi::state_name(d.state),
            d.nr_hw_queues,
            d.queue_depth,
            d.max_io_buf_bytes / 1024,
            d.ublksrv_pid,
            block,
            owner(&d)
        ));
    }
    Ok(out)
}

/// An unprivileged device's owner as uid:gid; "privileged" otherwise (only
/// root controls it, whoever added it).
fn owner(d: &mqblk_ublk::uapi::DevInfo) -> String {
    if d.flags & mqblk_ublk::uapi::UBLK_F_UNPRIVILEGED_DEV != 0 {
        format!("{}:{}", d.owner_uid, d.owner_gid)
    } else {
        "privileged".into()
    }
}

fn info(id: u32) -> Result<String, (u8, String)> {
    let d = mqblk_ublk::info(id).map_err(failed)?;
    let unprivileged = d.flags & mqblk_ublk::uapi::UBLK_F_UNPRIVILEGED_DEV != 0;
    Ok(format!(
        "id {}\nstate {}\nqueues {}\ndepth {}\nmax_io_bytes {}\npid {}\nflags {}\nunprivileged {}\nowner {}:{}\n",
        d.dev_id,
        mqblk_ublk::uapi::state_name(d.state),
        d.nr_hw_queues,
        d.queue_depth,
        d.max_io_buf_bytes,
        d.ublksrv_pid,
        mqblk_ublk::uapi::feature_names(d.flags).join(","),
        if unprivileged { "yes" } else { "no" },
        d.owner_uid,
        d.owner_gid
    ))
}
