//! What the mount holds that is not durable yet, for `flowfs status` and for an unmount
//! that gives up on uploads (`--force`): pending files with their size, age and upload
//! state, failed uploads with their reason, and what the recovery of a dead mount's
//! journal did. A plain snapshot; the binary renders it.

use std::time::SystemTime;

use crate::writeback::PendingState;

use super::Fs;

/// A staged file whose content the bucket does not hold yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingFile {
    /// The object's key.
    pub key: String,
    /// Its staged size.
    pub bytes: u64,
    /// Since when the bucket lacks this content.
    pub since: SystemTime,
    /// A handle still has it open for writing (its upload starts at the last close).
    pub open_for_writing: bool,
    /// Where its upload stands.
    pub state: PendingState,
}

/// An upload that failed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The object's key.
    pub key: String,
    /// The store's or the disk's error.
    pub reason: String,
}

/// A file found in the journal of a dead mount at start, and whether it went up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The object's key.
    pub key: String,
    /// Whether it is in the bucket now.
    pub uploaded: bool,
    /// Why not, when it is not.
    pub error: Option<String>,
}

/// What is not durable yet, for `flowfs status` and for a forced unmount.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// Oldest first.
    pub pending: Vec<PendingFile>,
    /// Failed uploads of this mount's files and failed recoveries.
    pub failures: Vec<Failure>,
    /// What the recovery of a dead mount's journal did at start.
    pub recovery: Vec<Recovery>,
    /// The records this mount's journal wrote since it started, and holds now.
    pub journal: crate::JournalCounts,
}

impl Status {
    /// Everything written through the mount is in the bucket and nothing failed.
    pub fn durable(&self) -> bool {
        self.pending.is_empty() && self.failures.is_empty()
    }

    /// Bytes the bucket does not hold yet.
    pub fn pending_bytes(&self) -> u64 {
        self.pending.iter().map(|p| p.bytes).sum()
    }

    /// The files an unmount that does not wait leaves in the journal: `KEY (N bytes)`,
    /// and the recoveries that failed, `KEY: reason`.
    pub fn not_uploaded(&self) -> Vec<String> {
        let pending = self
            .pending
            .iter()
            .map(|p| format!("{} ({} bytes)", p.key, p.bytes));
        let lost = self.recovery.iter().filter(|r| !r.uploaded).map(|r| {
            format!(
                "{}: {}",
                r.key,
                r.error.as_deref().unwrap_or("not uploaded")
            )
        });
        pending.chain(lost).collect()
    }

    /// When the oldest pending content was written.
    pub fn oldest(&self) -> Option<SystemTime> {
        self.pending.iter().map(|p| p.since).min()
    }
}

impl Fs {
    /// A snapshot of what is not durable yet, what failed and what recovery did.
    pub fn status(&self) -> Status {
        let report = self.wb.pending_report();
        let mut pending: Vec<PendingFile> = {
            report
                .into_iter()
                .map(|r| PendingFile {
                    // An open file whose name is gone is retired and not listed, so a
                    // missing path is a race with a rename: say which file it is.
                    key: (self.ns)
                        .path(r.ino)
                        .map_or_else(|| format!("(inode {})", r.ino), |p| self.keys.key(&p)),
                    bytes: r.size,
                    since: r.since,
                    open_for_writing: r.writers > 0,
                    state: r.state,
                })
                .collect()
        };
        // Not the mount's data, but the bucket is not as the mount shows it until a
        // removed file's upload has ended and what it landed is deleted.
        let now = SystemTime::now();
        pending.extend(self.up.keys().strays().into_iter().map(|key| PendingFile {
            key,
            bytes: 0,
            since: now,
            open_for_writing: false,
            state: PendingState::Removing,
        }));
        pending.sort_by(|a, b| a.since.cmp(&b.since).then_with(|| a.key.cmp(&b.key)));
        let mut failures: Vec<Failure> = pending
            .iter()
            .filter_map(|p| match &p.state {
                PendingState::Failed(e) => Some(Failure {
                    key: p.key.clone(),
                    // The upload's error starts with the key it went to.
                    reason: e
                        .strip_prefix(&format!("{}: ", p.key))
                        .unwrap_or(e)
                        .to_string(),
                }),
                _ => None,
            })
            .collect();
        let lost = self.wb.recovery_failures();
        let mut recovery: Vec<Recovery> = self
            .recovered()
            .into_iter()
            .map(|key| Recovery {
                key,
                uploaded: true,
                error: None,
            })
            .collect();
        for (key, reason) in lost {
            recovery.push(Recovery {
                key: key.clone(),
                uploaded: false,
                error: Some(reason.clone()),
            });
            failures.push(Failure { key, reason });
        }
        Status {
            pending,
            failures,
            recovery,
            journal: self.wb.journal(),
        }
    }
}
