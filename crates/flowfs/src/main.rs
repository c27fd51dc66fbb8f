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
mod otlp_messages;
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

// The static (musl) build: musl's allocator made B5 1.11x slower and cost 11 % more CPU
// than glibc's (docs/BENCHMARKS.md, "The static binary").
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's defaults kept freed memory: peak RSS in B1 was 246 MiB where glibc's build
/// has 123. Returning it at once (purge delay 0) and committing arena memory as it is used
/// brought it to 132 MiB at the same wall time and CPU. The option numbers are those of
/// mimalloc 3's `mi_option_e` (mimalloc.h; libmimalloc-sys exports no names for them).
#[cfg(target_env = "musl")]
fn tune_allocator() {
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: called first thing in main, before any other thread exists (mi_option_set
    // is not thread safe).
    unsafe {
        libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set(PURGE_DELAY, 0);
    }
}

fn main() {
    #[cfg(target_env = "musl")]
    tune_allocator();
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
