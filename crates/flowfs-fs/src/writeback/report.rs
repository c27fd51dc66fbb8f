//! Read-only views of the write-back table for `flowfs status`: which staged files the
//! bucket lacks, where each stands, and the recoveries that failed. Nothing here changes
//! a file's state; each view is one look under the table's lock.

use std::time::SystemTime;

use super::{Phase, WriteBack};

/// Where a staged file that the bucket lacks stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingState {
    /// Open for writing, or changed after its last upload began: no upload asked yet.
    Waiting,
    /// An upload task is spawned and has not started.
    Queued,
    /// An upload is in flight.
    Uploading,
    /// The last upload failed with this error; retried in the background if it may go
    /// away, and by the next fsync, close or unmount.
    Failed(String),
    /// A file removed while it was uploaded: the requests it had in flight are ending,
    /// and what they land is deleted then (writeback/keys.rs).
    Removing,
}

/// One staged file whose content the bucket does not hold yet.
#[derive(Debug, Clone)]
pub struct PendingReport {
    pub ino: u64,
    pub size: u64,
    /// Since when the bucket lacks it: when its journal record was written (the first
    /// change after its last upload), else its last change.
    pub since: SystemTime,
    pub writers: u32,
    pub state: PendingState,
}

impl WriteBack {
    /// Every staged file the bucket lacks, not given up.
    pub fn pending_report(&self) -> Vec<PendingReport> {
        let files: Vec<_> = {
            let t = self.table.lock();
            t.files
                .iter()
                .filter(|(_, f)| f.dirty() && !matches!(f.phase, Phase::Retired))
                .map(|(ino, f)| {
                    let state = match &f.phase {
                        Phase::Queued => PendingState::Queued,
                        Phase::Uploading { .. } | Phase::Copying => PendingState::Uploading,
                        Phase::Failed { error, .. } => PendingState::Failed(error.to_string()),
                        Phase::Idle | Phase::Retired => PendingState::Waiting,
                    };
                    (*ino, f.size, f.mtime, f.writers, state, f.file.clone())
                })
                .collect()
        };
        // The record's time is read outside the lock: it is disk I/O.
        files
            .into_iter()
            .map(|(ino, size, mtime, writers, state, file)| PendingReport {
                ino,
                size,
                since: std::fs::metadata(file.record_path())
                    .and_then(|m| m.modified())
                    .map_or(mtime, |r| r.min(mtime)),
                writers,
                state,
            })
            .collect()
    }

    /// Keys a recovery of a dead mount's journal could not upload, with the reason.
    pub fn recovery_failures(&self) -> Vec<(String, String)> {
        let t = self.table.lock();
        t.failed
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect()
    }
}
