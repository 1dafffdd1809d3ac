//! The `mqblk` command as a library: [`run`] parses a command line and runs
//! it. The `mqblk` binary is `run(std::env::args())`; a program that first
//! sets up the mqblk library its own way (say, registers a scheduler with
//! `mqblk::sched::register_elevator`, which bench's `--sched=NAME` then finds:
//! examples/sstf.rs) can call the same entry point and offer the whole
//! command line.
//!
//! Commands: `bench` (fio-compatible benchmark), `serve` (NBD server),
//! `control` (faults and power cuts on a running server's devices),
//! `ublk` (a Linux /dev/ublkbN served by an mqblk device), `vhost` (a
//! vhost-user-blk disk of a QEMU guest), `zone` (zone reports, management and op scripts), `experiment`
//! (reproduces a source experiment). The command line stands on clap,
//! except bench's options, which are fio's and parsed as fio parses them
//! (bench/options.rs).
//!
//! Exit codes: 0 success (and `--help`, `--version`), 1 a run that failed,
//! 2 bad input (options, job files, device specs).

mod bench;
mod control;
mod experiment;
mod serve;
mod ublk;
mod vhost;
mod zone;

use std::io::Write;
use std::process::ExitCode;

use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

/// The drivers every command's `--device` spec may name: `null:`,
/// `file:` and `nbd:` (mqblk-null, mqblk-file, mqblk-nbd's client),
/// registered as an outside driver would be.
pub fn register_drivers() {
    mqblk_null::register();
    mqblk_file::register();
    mqblk_nbd::client::register();
}

/// Ends a device's blktrace (`blktrace=DIR` in its spec, or bench's
/// `--blktrace=DIR`) and says what it wrote: events, drops, files and the
/// blkparse command that reads them. `None` for an untraced device. Every
/// front end (bench, serve, ublk add, vhost add) prints this line on stderr once its
/// I/O is done, so a trace is complete when the line appears.
pub(crate) fn blktrace_stop_line(dev: &mqblk::Device) -> Option<Result<String, String>> {
    let stats = dev.blktrace_stop()?;
    Some(stats.map_err(|e| format!("blktrace: {e}")).map(|t| {
        let (events, dropped, files, dir, name) = (t.events, t.dropped, t.files, t.dir.display(), t.name);
        format!("blktrace: {events} events, {dropped} dropped, {files} files: blkparse -D {dir} -i {name}")
    }))
}

/// A block layer in user space: the Linux blk-mq design (tags, hardware
/// contexts, plugging, schedulers, zoned devices) as a library, and tools
/// over it.
#[derive(Parser, Debug)]
#[command(name = "mqblk", version, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run fio-style jobs on an mqblk device (fio's options and job files).
    ///
    /// Without options: 4k randread, iodepth 32, 10 s on null:gb=1, its
    /// completions on the job's CPU.
    #[command(
        disable_help_flag = true,
        override_usage = bench::usage(program()),
        after_help = bench::help(),
    )]
    Bench {
        /// fio options (--name=NAME starts a job; options before the first
        /// --name are global) and fio job files (INI).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "FIO_OPTION|JOBFILE")]
        args: Vec<String>,
    },
    Serve(serve::ServeArgs),
    /// Sends a command to a running server's control socket (mqblk serve
    /// --control PATH) and prints the reply: power_cut [EXPORT] (a
    /// device's volatile write cache is lost), power_off [EXPORT] (the same,
    /// and later changes dropped until power_on [EXPORT]), set KEY VALUE
    /// [EXPORT] (a live attribute, e.g. set badblocks +2048-2055), get KEY
    /// [EXPORT].
    Control {
        /// The control socket.
        path: std::path::PathBuf,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
        words: Vec<String>,
    },
    /// Linux ublk devices: any mqblk device as /dev/ublkbN (add, list, del).
    Ublk {
        #[command(subcommand)]
        command: ublk::UblkCommand,
    },
    /// vhost-user-blk: any mqblk device as the virtio-blk disk of a QEMU guest (add).
    Vhost {
        #[command(subcommand)]
        command: vhost::VhostCommand,
    },
    /// Zone reports, zone management and zone op scripts on a zoned device.
    Zone {
        #[command(subcommand)]
        command: zone::ZoneCommand,
    },
    /// Reproduce a source experiment: tables on stdout, NAME.json and
    /// NAME.svg in the results folder.
    Experiment(experiment::Options),
}

/// The program's name as it was run (the file name of
/// `std::env::args()`'s first): "mqblk", or a program of a user's own that
/// calls [`run`] after registering a policy, so that usage lines and
/// errors name what the user typed.
static PROGRAM: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The program's name for messages: as run, or "mqblk" before [`run`].
pub(crate) fn program() -> &'static str {
    PROGRAM.get().map_or("mqblk", String::as_str)
}

/// Runs the `mqblk` command line `args`, program name first (as
/// `std::env::args()` gives it), and returns the exit code: 0 success, 1 a
/// run that failed, 2 bad input. Output goes to stdout, errors to stderr.
pub fn run<I: IntoIterator<Item = String>>(args: I) -> ExitCode {
    register_drivers();
    let args: Vec<String> = args.into_iter().collect();
    if let Some(name) = args.first().and_then(|a| std::path::Path::new(a).file_name()) {
        let _ = PROGRAM.set(name.to_string_lossy().into_owned());
    }
    let parsed = Cli::command().try_get_matches_from(args).and_then(|m| Ok((Cli::from_arg_matches(&m)?, m)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            // Help and version print to stdout and exit 0; errors exit 2.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match cli.command {
        Command::Bench { args } => run_bench(&args),
        Command::Experiment(opts) => run_experiment(&opts),
        Command::Zone { command } => finish("zone", zone::run(command)),
        Command::Ublk { command } => finish("ublk", ublk::run(command)),
        Command::Vhost { command } => finish("vhost", vhost::run(command)),
        Command::Control { path, words } => finish("control", control::request(&path, &words)),
        Command::Serve(opts) => {
            let sub: &ArgMatches = matches.subcommand_matches("serve").expect("the serve subcommand matched");
            finish("serve", serve::run(opts, sub))
        }
    }
}

fn run_bench(args: &[String]) -> ExitCode {
    // bench's options go to the fio parser untouched, so clap does not see
    // its --help: print the bench subcommand's help here.
    if args.iter().any(|a| a == "--help" || a == "-h") {
        let mut cli = Cli::command();
        cli.build();
        let bench = cli.find_subcommand_mut("bench").expect("bench is a subcommand");
        print!("{}", bench.render_long_help());
        return ExitCode::SUCCESS;
    }
    let plan = match bench::options::parse_bench_args(args) {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("{} bench: {e}", program());
            return ExitCode::from(2);
        }
    };
    let result = bench::run(&plan).map_err(|e| match e {
        bench::BenchError::BadInput(e) => (2, e),
        bench::BenchError::Failed(e) => (1, e),
        // fio's exit status: non-zero when a job ended with an error, after
        // the report.
        bench::BenchError::JobErrors { report, jobs } => {
            let _ = std::io::stdout().lock().write_all(report.as_bytes());
            (1, format!("{jobs} job(s) ended with an error (see err= in the report)"))
        }
    });
    finish("bench", result)
}

fn run_experiment(opts: &experiment::Options) -> ExitCode {
    let result = experiment::run(opts).map_err(|e| match e {
        experiment::ExperimentError::BadInput(e) => (2, e),
        experiment::ExperimentError::Failed(e) => (1, e),
    });
    finish("experiment", result)
}

/// Prints a command's output, or its error with the exit code: 2 for bad
/// input, 1 for a failed run.
fn finish(command: &str, result: Result<String, (u8, String)>) -> ExitCode {
    match result {
        Ok(out) => {
            let _ = std::io::stdout().lock().write_all(out.as_bytes());
            ExitCode::SUCCESS
        }
        Err((code, e)) => {
            eprintln!("{} {command}: {e}", program());
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
