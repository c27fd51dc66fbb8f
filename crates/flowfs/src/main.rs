//! flowfs: the binary. Errors end here as one line on stderr and a non-zero exit.

mod cli;
mod control;
mod mount;
mod run;

use clap::Parser;

fn main() {
    let cli = cli::Cli::parse();
    let r = match cli.command {
        cli::Command::Mount(args) => mount::mount(args),
        cli::Command::Unmount(args) => mount::unmount(&args.dir),
        cli::Command::Run(args) => std::process::exit(run::run(args)),
    };
    if let Err(e) = r {
        eprintln!("flowfs: {}", format!("{e:#}").replace('\n', " "));
        std::process::exit(1);
    }
}
