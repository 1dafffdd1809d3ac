//! `mqblk vhost`: any mqblk device as a vhost-user-blk disk of a QEMU
//! guest (crates/mqblk-vhost).
//!
//! `add --device SPEC --socket PATH [--queues N] [--depth D] [--read-only]
//! [--control PATH]` listens on PATH and serves QEMU's connections in the
//! foreground until SIGINT or SIGTERM, then flushes the device and ends its
//! blktrace (`blktrace=DIR` in the spec), as serve and ublk add do.

use std::io::Write;
use std::path::PathBuf;

use mqblk_vhost::{Error, Options, Server};

/// vhost-user-blk disks served by mqblk.
#[derive(clap::Subcommand, Debug)]
pub enum VhostCommand {
    /// Serve an mqblk device on a vhost-user socket (QEMU: -chardev
    /// socket,id=vh0,path=PATH -device vhost-user-blk-pci,chardev=vh0) until
    /// SIGINT or SIGTERM.
    Add(AddArgs),
}

#[derive(clap::Args, Debug)]
pub struct AddArgs {
    /// The device to serve: driver:key=value,...
    #[arg(long, value_name = "SPEC")]
    device: String,
    /// The vhost-user socket to listen on (an old socket file is replaced).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// Virtqueues offered (one worker thread and mqblk client each; QEMU's
    /// num-queues may ask for fewer).
    #[arg(long, value_name = "N", default_value_t = 1)]
    queues: u16,
    /// Requests in flight per virtqueue.
    #[arg(long, value_name = "D", default_value_t = 128)]
    depth: u16,
    /// Offer a read-only disk (VIRTIO_BLK_F_RO); writes fail.
    #[arg(long)]
    read_only: bool,
    /// A control socket at PATH for `mqblk control PATH ...`: power cuts
    /// and live attributes (bad blocks) of the device.
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// The permissions of the vhost-user and control sockets, in octal:
    /// who may connect (only their owner unless told otherwise; QEMU run
    /// as another user needs 660 or more).
    #[arg(long, value_name = "MODE", default_value = "600")]
    socket_mode: String,
}

/// Runs `mqblk vhost ...`. Err((exit code, message)).
pub fn run(command: VhostCommand) -> Result<String, (u8, String)> {
    crate::serve::init_logger("vhost");
    match command {
        VhostCommand::Add(args) => add(args),
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
    crate::register_drivers();
    let config = crate::serve::fast_config(&args.device).map_err(|e| (2, format!("--device {}: {e}", args.device)))?;
    let device = config.build().map_err(|e| (2, format!("--device {}: {e}", args.device)))?;
    let socket_mode = mqblk::socket_mode::parse_socket_mode(&args.socket_mode).map_err(|e| (2, e))?;
    let opts = Options {
        queues: args.queues,
        depth: args.depth,
        read_only: args.read_only,
        socket_mode,
        ..Options::default()
    };
    let control = crate::control::Control::for_one_device(args.control.as_deref(), &device, socket_mode)?;
    // Its blktrace, if traced, ends once the server stops.
    let traced = device.clone();
    let server = Server::new(device, &args.socket, opts).map_err(failed)?;
    let signals = crate::serve::stop_on_signals({
        let stopper = server.stopper();
        move || stopper.stop()
    })?;
    {
        let d = server.disk();
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "mqblk vhost: serving {} on {} ({} queues x {} requests, {} MiB, {} byte blocks{}{})",
            args.device,
            server.socket().display(),
            d.num_queues,
            args.depth,
            d.capacity_bytes >> 20,
            d.logical_block_size,
            if d.write_cache { ", write cache" } else { "" },
            if d.read_only { ", read-only" } else { "" }
        );
        let _ = out.flush();
    }
    let summary = server.run();
    signals.close();
    if let Some(c) = control {
        c.close();
    }
    let summary = summary.map_err(failed)?;
    if let Some(line) = crate::blktrace_stop_line(&traced) {
        eprintln!("{}", line.map_err(|e| (1, e))?);
    }
    Ok(format!(
        "mqblk vhost: stopped ({} connections, {} requests, {} failed)\n",
        summary.connections, summary.requests, summary.errors
    ))
}
