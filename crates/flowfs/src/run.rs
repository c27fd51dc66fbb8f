//! `flowfs run`: the task wrapper. Mounts, runs the command, flushes its outputs,
//! unmounts; the exit status says which of these failed.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::cli::{MountArgs, RunArgs};
use crate::cost::Prices;
use crate::mount;
use crate::unmount::unmount;
use crate::usage::Usage;

/// A mount could not be set up; the command did not run.
pub const EXIT_MOUNT_FAILED: i32 = 196;
/// The command ran, but its outputs could not all be made durable.
pub const EXIT_FLUSH_FAILED: i32 = 197;
/// The command ran and its outputs are durable, but `--report` could not be written.
pub const EXIT_REPORT_FAILED: i32 = 198;

static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Unmounts every mount, the last first; with `usage`, adds up what they did (`None`
/// when a mount could not say). False when one could not be unmounted cleanly.
fn unmount_all(dirs: &[PathBuf], usage: bool) -> (bool, Option<Usage>) {
    let (mut ok, mut sum) = (true, Some(Usage::default()));
    for d in dirs.iter().rev() {
        match unmount(d, false, usage) {
            Ok(Some(u)) => {
                if let Some(s) = &mut sum {
                    s.add(&u);
                }
            }
            Ok(None) => sum = None,
            Err(e) => {
                eprintln!("flowfs: {}", format!("{e:#}").replace('\n', " "));
                (ok, sum) = (false, None);
            }
        }
    }
    (ok, sum.filter(|_| usage))
}

/// Writes the run's report, priced; says why on stderr when it cannot.
fn write_report(path: &Path, usage: Option<Usage>, prices: &Prices) -> bool {
    let r = match usage {
        Some(u) => u.priced(prices).write(path),
        None => Err(anyhow::anyhow!("a mount did not say what it did")),
    };
    if let Err(e) = &r {
        eprintln!("flowfs: no report written to {}: {e:#}", path.display());
    }
    r.is_ok()
}

pub fn run(args: RunArgs) -> i32 {
    let prices = match args
        .report
        .is_some()
        .then(|| Prices::load(args.prices.as_deref()))
    {
        Some(Err(e)) => {
            eprintln!("flowfs: {e:#}");
            return EXIT_MOUNT_FAILED;
        }
        Some(Ok(p)) => Some(p),
        None => None,
    };
    let Some(mounted) = mount_each(&args) else {
        return EXIT_MOUNT_FAILED;
    };
    let code = run_command(&args.command);
    let (flushed, usage) = unmount_all(&mounted, args.report.is_some());
    if !flushed {
        return EXIT_FLUSH_FAILED;
    }
    if let (Some(path), Some(prices)) = (&args.report, &prices) {
        if !write_report(path, usage, prices) {
            return EXIT_REPORT_FAILED;
        }
    }
    code
}

/// Mounts every `--mount SOURCE=DIR` of `args` in the background; the mount points, or
/// `None` (said on stderr) once one fails, after the ones before it are unmounted.
fn mount_each(args: &RunArgs) -> Option<Vec<PathBuf>> {
    let mut mounted = Vec::new();
    for m in &args.mounts {
        match mount_one(args, m) {
            Ok(dir) => mounted.push(dir),
            Err(e) => {
                eprintln!("flowfs: {e}");
                unmount_all(&mounted, false);
                return None;
            }
        }
    }
    Some(mounted)
}

/// One `--mount SOURCE=DIR`: its mount point made, the source mounted there.
fn mount_one(args: &RunArgs, m: &str) -> Result<PathBuf, String> {
    let Some((source, dir)) = m.split_once('=') else {
        return Err(format!(
            "--mount must look like s3://BUCKET[/PREFIX]=DIR, got {m:?}"
        ));
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create mount point {}: {e}", dir.display()))?;
    let mut opts = args.opts.clone();
    opts.foreground = false;
    opts.pid_file = None;
    // Killed with -9, this process can no longer unmount: its death ends the mount.
    opts.end_with_parent = true;
    let margs = MountArgs {
        source: source.to_string(),
        dir: dir.clone(),
        opts,
    };
    mount::mount(margs).map_err(|e| {
        let why = format!("{e:#}").replace('\n', " ");
        format!("cannot mount {source} at {}: {why}", dir.display())
    })?;
    Ok(dir.canonicalize().unwrap_or(dir))
}

/// Runs `command` with the batch system's signals forwarded to it; its exit code (128 +
/// the signal that ended it; 127 when it is not found, 126 when it cannot start).
fn run_command(command: &[String]) -> i32 {
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("flowfs: cannot run {:?}: {e}", command[0]);
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    // The batch system's signals go to the task; the flush still happens after.
    // SAFETY: installing a handler that only calls kill.
    unsafe {
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::signal(sig, forward as *const () as libc::sighandler_t);
        }
    }
    match child.wait() {
        Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
        Err(e) => {
            eprintln!("flowfs: waiting for the command failed: {e}");
            1
        }
    }
}
