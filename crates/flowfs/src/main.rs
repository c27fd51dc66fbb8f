//! flowfs: the binary. Errors end here as one line on stderr and a non-zero exit.

mod archive;
mod cache_cmd;
mod cli;
mod control;
mod cost;
mod daemon;
mod logging;
mod metrics;
mod mount;
mod mountinfo;
mod otlp;
mod report;
mod report_cmd;
mod run;
mod samples;
mod session;
mod status;
mod stop;
mod stores;
mod top;
mod unmount;
mod usage;

use clap::Parser;

fn main() {
    let cli = cli::Cli::parse();
    let r = match cli.command {
        cli::Command::Mount(args) => mount::mount(args),
        cli::Command::Unmount(args) => unmount::unmount_cmd(&args),
        cli::Command::Report(args) => std::process::exit(report_cmd::report(&args)),
        cli::Command::Top(args) => std::process::exit(top::top(&args)),
        cli::Command::Status(args) => std::process::exit(status::status(&args.dir, args.json)),
        cli::Command::Run(args) => std::process::exit(run::run(args)),
        cli::Command::Cache(cmd) => cache_cmd::cache(cmd),
    };
    if let Err(e) = r {
        eprintln!("flowfs: {}", format!("{e:#}").replace('\n', " "));
        std::process::exit(1);
    }
}
