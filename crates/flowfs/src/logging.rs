//! The mount process's log: tracing's fmt output, filtered by `FLOWFS_LOG` (default
//! `warn`; `Targets` directives, `LEVEL` or `TARGET=LEVEL` separated by commas: the
//! regex-based `EnvFilter` cost the build two crates and 15 s of CPU for span filters no
//! one used), to `--log-file`, to stderr in the foreground, or to `CACHE_DIR/flowfs.log`;
//! one JSON object per line with `FLOWFS_LOG_FORMAT=json` (each with its span's fields:
//! a FUSE request's `op` and what it is about, a request's key; never a credential).

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Result};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

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

/// The filter `FLOWFS_LOG` asks for (`warn` when unset); checked before a mount starts,
/// as `format` is.
pub fn filter() -> Result<Targets> {
    let asked = std::env::var("FLOWFS_LOG").unwrap_or_default();
    let asked = if asked.trim().is_empty() {
        "warn"
    } else {
        asked.trim()
    };
    asked.parse().map_err(|e| {
        anyhow::anyhow!("FLOWFS_LOG {asked:?}: {e}: give a level (error, warn, info, debug, trace) or TARGET=LEVEL, separated by commas, e.g. info,flowfs_fs=debug")
    })
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
    let filter = filter().unwrap_or_else(|_| Targets::new().with_default(tracing::Level::WARN));
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(writer);
    let layer = match format().unwrap_or(Format::Text) {
        Format::Text => layer.boxed(),
        Format::Json => layer.json().with_current_span(true).boxed(),
    };
    // The filter is the subscriber's, as `EnvFilter` was, not a per-layer filter on the
    // fmt layer: with that, each operation ran slower here, enough that stress-ng's
    // filename stressor (test_realworld, passthrough off) left SeaweedFS an empty folder
    // in 3 of about 20 runs, and in none of 12 with this.
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(layer)
        .try_init();
}
