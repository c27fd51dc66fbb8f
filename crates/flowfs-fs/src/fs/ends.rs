//! The journal at the two ends of a mount: `flush_all` at unmount (every staged file
//! uploaded, or named with why it is not, within `--unmount-timeout`) and `recover` at
//! start (a dead mount's journal uploaded, its open multipart uploads aborted).

use flowfs_client::{Upload, Version};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use flowfs_client::ClientError;

use crate::error::FsError;
use crate::writeback::{Loose, OpenUpload, PendingState};

use super::WritePath;
use super::{percent_encode, Fs, SYMLINK_META};

/// How far the store's clock may be behind ours when the uploads a dead mount created
/// without learning their ids are told apart from older ones by their start time.
const CLOCK_SKEW: u64 = 120;

/// How long an unmount waits for the aborts of early uploads given up.
const ABORT_WAIT: Duration = Duration::from_secs(60);

impl Fs {
    /// Uploads everything staged and waits, at most `--unmount-timeout`; returns the
    /// files that could not be uploaded, or were not by then (their records stay).
    pub async fn flush_all(self: &Arc<Self>) -> Vec<String> {
        let mut set = tokio::task::JoinSet::new();
        for (ino, s) in self.wb.staged(false) {
            let fs = self.clone();
            set.spawn(async move {
                let r = fs.w.wait_durable_tried(ino, &s, true).await;
                r.err().map(|e| (ino, e))
            });
        }
        // What each wait ended with, not what the table says afterwards: a background
        // retry may have queued a failed file again by then, and it is not durable.
        let mut failed = Vec::new();
        let all = async {
            while let Some(r) = set.join_next().await {
                if let Ok(Some((ino, e))) = r {
                    failed.push(self.w.named_failure(ino, e));
                }
            }
        };
        let limit = self.cfg.unmount_timeout;
        if tokio::time::timeout(limit, all).await.is_err() {
            return self.w.not_durable(limit);
        }
        // Uploads of files removed meanwhile, whose tasks delete what they landed.
        if tokio::time::timeout(limit, self.up.keys().idle())
            .await
            .is_err()
        {
            tracing::warn!("uploads of removed files still running at the unmount");
        }
        if tokio::time::timeout(limit, self.up.rewrites_done())
            .await
            .is_err()
        {
            tracing::warn!("chmod, chown or utimens not stored in the bucket before the unmount");
        }
        // Bounded: an abort is one request, which the client's own timeouts bound too.
        let aborts = self.wb.aborts().wait();
        if tokio::time::timeout(ABORT_WAIT, aborts).await.is_err() {
            tracing::warn!("early multipart uploads not aborted yet; the next mount aborts them");
        }
        failed.extend(self.w.recovery_failures());
        failed
    }

    /// Uploads what a dead mount left in the journal; returns the keys it recovered.
    pub async fn recover(&self) -> (Vec<String>, Vec<String>) {
        let mut ok = Vec::new();
        let mut failed = Vec::new();
        // Multipart uploads a dead mount left open: their files (if journaled) go up
        // whole below; the parts they had sent are dropped.
        for u in self
            .wb
            .staging()
            .open_uploads(&self.cfg.cache_dir, &self.cfg.bucket)
        {
            let r = match &u.upload_id {
                Some(id) => self.client.abort_multipart(Upload::new(&u.key, id)).await,
                None => self.w.abort_unnamed(&u).await,
            };
            match r {
                Ok(()) | Err(ClientError::NotFound(_)) => u.forget(),
                Err(e) => tracing::warn!(
                    key = %u.key,
                    "cannot abort a multipart upload left open by an earlier mount: {e}"
                ),
            }
        }
        for o in self
            .wb
            .staging()
            .orphans(&self.cfg.cache_dir, &self.cfg.bucket)
        {
            let r = async {
                let mut metadata: HashMap<_, _> = o.record.metadata.iter().cloned().collect();
                let symlink = o.record.symlink;
                if symlink {
                    let target = std::fs::read_to_string(&o.data)
                        .map_err(|e| ClientError::Other(e.to_string()))?;
                    metadata.insert(SYMLINK_META.to_string(), percent_encode(&target));
                }
                let f =
                    std::fs::File::open(&o.data).map_err(|e| ClientError::Other(e.to_string()))?;
                let stat = f
                    .metadata()
                    .map_err(|e| ClientError::Other(e.to_string()))?;
                let size = stat.len();
                // The data file was last written when the file was.
                if let Ok(t) = stat.modified() {
                    metadata.insert(crate::meta::MTIME.into(), crate::meta::format_time(t));
                }
                self.up
                    .send_loose(Loose {
                        key: &o.key,
                        file: &f,
                        size,
                        metadata: &metadata,
                        one_part: symlink,
                        note: o.upload_note_path(),
                        stop: &AtomicBool::new(false),
                    })
                    .await?;
                // Its other names (hard links) get it too, as after a live upload.
                for link in &o.record.links {
                    self.client.copy(Version::any(&o.key), link, None).await?;
                }
                Ok(())
            }
            .await;
            match r {
                Ok(_) => {
                    o.forget();
                    ok.push(o.key.clone());
                }
                Err(e) => {
                    let why = self.w.set_aside(&o, &e);
                    self.wb.fail_key(&o.key, why.clone());
                    failed.push(format!("{}: {why}", o.key))
                }
            }
        }
        self.up.note_recovered(&ok);
        (ok, failed)
    }

    /// Keys recovered from an earlier mount's journal and uploaded at start.
    pub fn recovered(&self) -> Vec<String> {
        self.up.recovered()
    }
}

impl WritePath {
    /// An upload's error as `KEY: reason` (the write-back error already starts so).
    fn named_failure(&self, ino: u64, e: FsError) -> String {
        match e {
            FsError::Upload(e) => e.to_string(),
            other => {
                let key = self.ns.path(ino).map(|p| self.keys.key(&p));
                format!("{}: {other}", key.unwrap_or_else(|| format!("inode {ino}")))
            }
        }
    }

    /// Every staged file not in the bucket yet, named once (with its failure when its
    /// last upload failed), for an unmount that gave up.
    fn not_durable(&self, waited: Duration) -> Vec<String> {
        let pending = self.wb.pending_report();
        let mut out: Vec<String> = pending
            .into_iter()
            .filter_map(|p| match p.state {
                PendingState::Failed(error) => Some(error),
                _ => self.ns.path(p.ino).map(|path| {
                    let key = self.keys.key(&path);
                    format!("{key}: not uploaded after {} s", waited.as_secs())
                }),
            })
            .collect();
        out.extend(self.recovery_failures());
        out
    }

    /// Keys a recovery of a dead mount's journal could not upload, as `KEY: reason`.
    fn recovery_failures(&self) -> impl Iterator<Item = String> {
        let failed = self.wb.recovery_failures().into_iter();
        failed.map(|(k, e)| format!("{k}: {e}"))
    }

    /// Aborts the uploads of `u.key` that a dead mount may have created without learning
    /// their ids: those initiated since it sent the create (less `CLOCK_SKEW`, for the
    /// server's clock). Another writer's upload of the same key begun in that window
    /// would be aborted too; two writers of one key at once lose one's data anyway.
    async fn abort_unnamed(&self, u: &OpenUpload) -> std::result::Result<(), ClientError> {
        let Some(since) = u.since else {
            return Ok(()); // a note of an older flowfs always has its id
        };
        let from = UNIX_EPOCH + Duration::from_secs(since.saturating_sub(CLOCK_SKEW));
        for up in self.client.list_uploads(&u.key).await? {
            if up.initiated >= from {
                match self
                    .client
                    .abort_multipart(Upload::new(&u.key, &up.upload_id))
                    .await
                {
                    Ok(()) | Err(ClientError::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// What became of an orphan whose recovery failed: one the store refuses for good
    /// goes to `CACHE/failed/` (else every later mount would fail on it again); any
    /// other stays in the journal for the next mount.
    fn set_aside(&self, o: &crate::writeback::Orphan, e: &ClientError) -> String {
        if !matches!(e, ClientError::Refused(_)) {
            return format!("recovery from the journal of an earlier mount failed: {e}");
        }
        match o.set_aside(&self.cfg.cache_dir, &self.cfg.bucket, &e.to_string()) {
            Ok(p) => format!("{e}; not tried again: its data is kept at {}", p.display()),
            Err(io) => format!("{e}; it stays in the journal (cannot set it aside: {io})"),
        }
    }
}
