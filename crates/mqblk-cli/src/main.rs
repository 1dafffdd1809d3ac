//! The `mqblk` command: the library's [`mqblk_cli::run`] on the process's
//! command line.

fn main() -> std::process::ExitCode {
    mqblk_cli::run(std::env::args())
}
