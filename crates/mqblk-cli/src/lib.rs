//! The `mqblk` command as a library: [`run`] parses a command line and runs
//! it. The `mqblk` binary is `run(std::env::args())`; a program that first
//! registers its own policies (`mqblk::register_elevator`, ...) calls the
//! same entry point, and device specs then find them by name.
//!
//! Exit codes: 0 success, 1 a run that failed, 2 bad input (options, job
//! files, device specs).

mod bench;
mod experiment;
mod serve;
mod zone;

use std::io::Write;
use std::process::ExitCode;

const USAGE: &str = "\
usage: mqblk <command> [options]

commands:
  bench [--device SPEC] [--output-format=normal|json] [--stats] [fio options] [jobfile ...]
        Run fio-style jobs on an mqblk device (default: 4k randread, iodepth 32,
        10 s on null:gb=1). Options: --name=NAME starts a job; options before the
        first --name are global. Job files use fio's INI format.
  experiment NAME [--quick] [--out DIR]
        Reproduce a source experiment (tag-wakeup): tables on stdout, NAME.json
        and NAME.svg in DIR (default: results/). --quick: under a minute.
  help  Show this message.
";

fn usage() -> String {
    format!("{USAGE}{}{}", zone::USAGE, serve::USAGE)
}

/// Runs one `mqblk` command line (`args[0]` is the program name).
pub fn run<I: IntoIterator<Item = String>>(args: I) -> ExitCode {
    let args: Vec<String> = args.into_iter().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{}", usage());
        return ExitCode::from(2);
    };
    match cmd.as_str() {
        "bench" => run_bench(&args[1..]),
        "experiment" => run_experiment(&args[1..]),
        "zone" => finish("zone", zone::run(&args[1..])),
        "serve" => finish("serve", serve::run(&args[1..])),
        "help" | "--help" | "-h" => {
            print!("{}", usage());
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("mqblk: unknown command '{other}' (accepted: bench, experiment, zone, serve, help)");
            ExitCode::from(2)
        }
    }
}

fn run_bench(args: &[String]) -> ExitCode {
    let plan = match bench::options::parse_bench_args(args) {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("mqblk bench: {e}");
            return ExitCode::from(2);
        }
    };
    let result = bench::run(&plan).map_err(|e| match e {
        bench::BenchError::BadInput(e) => (2, e),
        bench::BenchError::Failed(e) => (1, e),
    });
    finish("bench", result)
}

fn run_experiment(args: &[String]) -> ExitCode {
    let result = experiment::parse(args).and_then(|opts| experiment::run(&opts)).map_err(|e| match e {
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
            eprintln!("mqblk {command}: {e}");
            ExitCode::from(code)
        }
    }
}
