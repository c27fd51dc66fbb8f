//! The mount process's log: tracing's fmt output, filtered by `FLOWFS_LOG` (default
//! `warn`), to `--log-file`, to stderr in the foreground, or to `CACHE_DIR/flowfs.log`.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::cli::MountArgs;

/// Installs the subscriber once; a second call (as in tests) keeps the first.
pub fn init(args: &MountArgs, cache_dir: &Path) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FLOWFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let path = match (&args.opts.log_file, args.opts.foreground) {
        (Some(p), _) => Some(p.clone()),
        (None, true) => None,
        (None, false) => Some(cache_dir.join("flowfs.log")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false);
    // Readable by its owner only: a log names buckets, keys and paths.
    let open = |p: PathBuf| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(p)
            .ok()
    };
    match path.and_then(open) {
        Some(f) => {
            let _ = builder.with_writer(Mutex::new(f)).try_init();
        }
        None => {
            let _ = builder.with_writer(std::io::stderr).try_init();
        }
    }
}
