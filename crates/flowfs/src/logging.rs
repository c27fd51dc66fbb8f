//! The mount process's log: tracing's fmt output, filtered by `FLOWFS_LOG` (default
//! `warn`), to `--log-file`, to stderr in the foreground, or to `CACHE_DIR/flowfs.log`;
//! one JSON object per line with `FLOWFS_LOG_FORMAT=json` (each with its span's fields:
//! a FUSE request's `op` and what it is about, a request's key; never a credential).

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Result};
use tracing_subscriber::fmt::MakeWriter;

use crate::cli::MountArgs;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// The format `FLOWFS_LOG_FORMAT` asks for (text when unset); checked before a mount
/// starts, so that a typo is named rather than logged nowhere.
pub fn format() -> Result<Format> {
    match std::env::var("FLOWFS_LOG_FORMAT").as_deref() {
        Err(_) | Ok("") | Ok("text") => Ok(Format::Text),
        Ok("json") => Ok(Format::Json),
        Ok(other) => bail!("FLOWFS_LOG_FORMAT must be text or json, not {other:?}"),
    }
}

/// Installs the subscriber once; a second call (as in tests) keeps the first.
pub fn init(args: &MountArgs, cache_dir: &Path) {
    let path = match (&args.opts.log_file, args.opts.foreground) {
        (Some(p), _) => Some(p.clone()),
        (None, true) => None,
        (None, false) => Some(cache_dir.join("flowfs.log")),
    };
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
        Some(f) => install(Mutex::new(f)),
        None => install(std::io::stderr),
    }
}

fn install<W>(writer: W)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = tracing_subscriber::EnvFilter::try_from_env("FLOWFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(writer);
    let _ = match format().unwrap_or(Format::Text) {
        Format::Text => builder.try_init(),
        Format::Json => builder.json().with_current_span(true).try_init(),
    };
}
