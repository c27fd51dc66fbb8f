//! What a running mount reports of itself (`Report`), made in the mount process for the
//! control socket's `status` command; `flowfs status` (status.rs) asks for it and prints it.
//! Both sides share the types; neither imports the other's module.

use std::path::Path;
use std::time::{Duration, SystemTime};

use flowfs_fs::{PendingState, Status};
use serde::{Deserialize, Serialize};

use crate::stop::Ending;

/// The JSON of `flowfs status --json`. Field names are stable; new fields may be added,
/// so readers must ignore fields they do not know.
#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    pub version: u32,
    pub mountpoint: String,
    pub source: String,
    pub cache_dir: String,
    pub pid: u32,
    /// An unmount is under way (flushing).
    pub unmounting: bool,
    /// Nothing pending and nothing failed.
    pub durable: bool,
    pub pending: Pending,
    pub failures: Vec<FailureItem>,
    pub recovery: Vec<RecoveryItem>,
    /// What the retry layer did since the mount started.
    #[serde(default)]
    pub retries: Retries,
    /// What was fetched ahead of readers and walkers since the mount started.
    #[serde(default)]
    pub read_ahead: ReadAheadItem,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ReadAheadItem {
    /// Directories listed ahead of a walk (find, du, ls -R).
    pub listings: u64,
    /// Of those, too big for one page and dropped (listed again when reached).
    pub listings_dropped: u64,
    /// Small files fetched ahead of a reader of their directory.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Of those files, the ones a reader opened since; the rest is the prefetch's waste
    /// so far.
    pub files_read: u64,
    /// Their bytes.
    pub bytes_read: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Retries {
    /// Requests sent again after a retryable failure.
    pub retried: u64,
    /// Failures that were throttling (SlowDown, 429).
    pub throttled: u64,
    /// Requests that failed although retryable: the budget or the attempts were spent.
    pub gave_up: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Pending {
    pub files: usize,
    pub bytes: u64,
    /// Seconds since the oldest pending content was written; null when nothing is pending.
    pub oldest_age_secs: Option<f64>,
    pub list: Vec<PendingItem>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PendingItem {
    pub key: String,
    pub bytes: u64,
    pub age_secs: f64,
    /// `waiting` (no upload asked yet), `queued`, `uploading` or `failed`.
    pub state: String,
    pub open_for_writing: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct FailureItem {
    pub key: String,
    pub reason: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RecoveryItem {
    pub key: String,
    pub uploaded: bool,
    pub error: Option<String>,
}

fn age(t: SystemTime, now: SystemTime) -> f64 {
    let secs = now
        .duration_since(t)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64();
    (secs * 10.0).round() / 10.0
}

/// The report of a mount, made in the mount process.
pub fn report(ending: &Ending) -> Report {
    let s = ending.fs.status();
    let mut r = report_of(&s, &ending.dir, &ending.source, ending.unmounting());
    r.cache_dir = ending.fs.config().cache_dir.display().to_string();
    let a = ending.fs.read_ahead();
    r.read_ahead = ReadAheadItem {
        listings: a.walks.listed,
        listings_dropped: a.walks.too_big,
        files: a.files.files,
        bytes: a.files.bytes,
        files_read: a.files.files_read,
        bytes_read: a.files.bytes_read,
    };
    if let Some(c) = &ending.retries {
        let st = c.stats();
        r.retries = Retries {
            retried: st.retries,
            throttled: st.throttled,
            gave_up: st.gave_up,
        };
    }
    r
}

pub(crate) fn report_of(s: &Status, mountpoint: &Path, source: &str, unmounting: bool) -> Report {
    let now = SystemTime::now();
    let list = s
        .pending
        .iter()
        .map(|p| PendingItem {
            key: p.key.clone(),
            bytes: p.bytes,
            age_secs: age(p.since, now),
            state: match p.state {
                PendingState::Waiting => "waiting",
                PendingState::Queued => "queued",
                PendingState::Uploading => "uploading",
                PendingState::Failed(_) => "failed",
                PendingState::Removing => "removing",
            }
            .to_string(),
            open_for_writing: p.open_for_writing,
        })
        .collect();
    Report {
        version: 1,
        mountpoint: mountpoint.display().to_string(),
        source: source.to_string(),
        cache_dir: String::new(),
        pid: std::process::id(),
        unmounting,
        durable: s.durable(),
        pending: Pending {
            files: s.pending.len(),
            bytes: s.pending_bytes(),
            oldest_age_secs: s.oldest().map(|t| age(t, now)),
            list,
        },
        failures: s
            .failures
            .iter()
            .map(|f| FailureItem {
                key: f.key.clone(),
                reason: f.reason.clone(),
            })
            .collect(),
        recovery: s
            .recovery
            .iter()
            .map(|r| RecoveryItem {
                key: r.key.clone(),
                uploaded: r.uploaded,
                error: r.error.clone(),
            })
            .collect(),
        retries: Retries::default(),
        read_ahead: ReadAheadItem::default(),
    }
}
