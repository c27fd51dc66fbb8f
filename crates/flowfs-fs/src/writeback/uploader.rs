//! The uploader: sends staged bytes to the bucket. It owns what every upload shares — the
//! client, the upload slots that bound the bytes in memory, and the lock a directory
//! rename takes against uploads below it — and knows nothing of names or inodes: the file
//! system gives it an `UploadJob`, the key and the metadata (one snapshot of the namespace
//! taken before) and brings the namespace in step with what it returns.

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use flowfs_client::{ClientError, ObjectClient, Version};
use parking_lot::Mutex;
use tokio::sync::{Notify, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{upload_file, Aborts, Early, Keys, Note, StagedFile, UploadJob, UploadSlots};

pub struct Uploader {
    client: Arc<dyn ObjectClient>,
    bucket: String,
    part_size: u64,
    slots: UploadSlots,
    /// Held shared by each upload, exclusively by a directory rename: an upload below a
    /// directory that moves must neither land nor start while its objects are copied.
    moves: RwLock<()>,
    /// Keys recovered from the journal of a mount that died.
    recovered: Mutex<Vec<String>>,
    /// chmod, chown and utimens of objects already in the bucket, on their way there:
    /// ino -> whether a setattr came after the running round read the attributes. One
    /// rewrite task per inode at a time; setattrs that come while it runs are taken by
    /// its next round, so `cp -p` (utimens, chown, chmod) costs one or two rewrites, not
    /// three.
    rewrites: Mutex<HashMap<u64, bool>>,
    rewrites_idle: Notify,
    /// The keys uploads are sending to, and the strays among them (keys.rs).
    keys: Keys,
}

/// What an upload left in the bucket: the object's ETag or the failure, and whether the
/// object carries the metadata it was given (`stamped`: false after an early multipart
/// upload whose metadata copy failed).
pub struct Sent {
    pub result: Result<String, ClientError>,
    pub stamped: bool,
}

/// A file to send as it is on disk: a staged job's data file, or a journal's orphan (no
/// staged state behind it).
pub struct Loose<'a> {
    pub key: &'a str,
    pub file: &'a File,
    pub size: u64,
    pub metadata: &'a HashMap<String, String>,
    pub one_part: bool,
    pub note: PathBuf,
    /// Set when the file is given up: the upload stops sending (transfer.rs `check_stop`).
    pub stop: &'a AtomicBool,
}

impl Uploader {
    pub fn new(
        client: Arc<dyn ObjectClient>,
        bucket: &str,
        part_size: u64,
        max_uploads: usize,
    ) -> Uploader {
        Uploader {
            client,
            bucket: bucket.to_string(),
            part_size,
            slots: UploadSlots::new(max_uploads),
            moves: RwLock::new(()),
            recovered: Mutex::new(Vec::new()),
            rewrites: Mutex::default(),
            rewrites_idle: Notify::new(),
            keys: Keys::default(),
        }
    }

    /// Held by an upload from its start until its end is recorded.
    pub async fn hold_shared(&self) -> RwLockReadGuard<'_, ()> {
        self.moves.read().await
    }

    /// The keys uploads are sending to: one upload per key at a time (keys.rs).
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Held by a directory rename: no upload runs meanwhile.
    pub async fn hold_all(&self) -> RwLockWriteGuard<'_, ()> {
        self.moves.write().await
    }

    /// Uploads `job` to `key` with `metadata`. The object carries the time of the last
    /// write, which every later mount shows: an early multipart upload was begun before
    /// that time was known, so one copy onto itself gives it the metadata a PUT would
    /// have carried.
    pub async fn send(
        &self,
        job: &UploadJob,
        key: &str,
        metadata: &HashMap<String, String>,
    ) -> Sent {
        if let Some(sent) = self.send_copy(job, key, metadata).await {
            return sent;
        }
        let ps = self.part_size;
        if let Some(e) = &job.early {
            if let Some(r) = e.finish(&job.file, job.size, ps, &self.slots.parts).await {
                return self.stamp_early(key, metadata, r, job.size).await;
            }
        }
        let result = self
            .send_loose(Loose {
                key,
                file: &job.file.file,
                size: job.size,
                metadata,
                one_part: job.one_part,
                note: job.file.whole_upload_note_path(),
                stop: &job.file.stop,
            })
            .await;
        Sent {
            result,
            stamped: true,
        }
    }

    /// A job whose bytes the bucket already holds (`UploadJob::copy_of`) copied there on
    /// the server; `None` (the bytes are sent) where the store refuses the copy: the source
    /// was replaced or removed since, or it is too big for one copy.
    async fn send_copy(
        &self,
        job: &UploadJob,
        key: &str,
        metadata: &HashMap<String, String>,
    ) -> Option<Sent> {
        let src = job.copy_of.as_ref().filter(|_| job.early.is_none())?;
        let from = Version {
            key: &src.key,
            etag: Some(&src.etag),
        };
        match self.client.copy(from, key, Some(metadata)).await {
            Ok(put) => Some(Sent {
                result: Ok(put.etag),
                stamped: true,
            }),
            Err(e) => {
                tracing::info!(from = %src.key, to = %key, "copy refused, sending the bytes: {e}");
                None
            }
        }
    }

    /// Uploads a file as it is on disk: a staged job's, or a journal's orphan.
    pub async fn send_loose(&self, f: Loose<'_>) -> Result<String, ClientError> {
        let note = Note {
            path: f.note,
            bucket: &self.bucket,
        };
        let ps = self.part_size;
        upload_file(
            &self.client,
            f.key,
            f.file,
            f.size,
            ps,
            &self.slots,
            f.metadata,
            f.one_part,
            note,
            f.stop,
        )
        .await
    }

    /// The metadata of an early multipart upload just completed (`r`: its ETag), which
    /// began before its last write: one CopyObject onto itself (UploadPartCopy above 5 GiB),
    /// conditional on that ETag.
    async fn stamp_early(
        &self,
        key: &str,
        metadata: &HashMap<String, String>,
        r: Result<String, ClientError>,
        size: u64,
    ) -> Sent {
        let Ok(etag) = r else {
            return Sent {
                result: r,
                stamped: true,
            };
        };
        let stamp = self
            .client
            .replace_metadata(Version::new(key, Some(&etag)).rewrite(metadata, size));
        match stamp.await {
            Ok(put) => Sent {
                result: Ok(put.etag),
                stamped: true,
            },
            Err(e) => {
                tracing::warn!(%key, "the attributes of an early upload not stamped yet: {e}");
                Sent {
                    result: Ok(etag),
                    stamped: false,
                }
            }
        }
    }

    /// The early multipart upload of a new file written front to back.
    pub fn early(
        &self,
        key: String,
        note: PathBuf,
        aborts: Aborts,
        metadata: HashMap<String, String>,
    ) -> Arc<Early> {
        Early::new(
            self.client.clone(),
            &self.bucket,
            key,
            note,
            aborts,
            metadata,
        )
    }

    /// Sends `parts` of `file` through `early`, each holding an upload slot.
    pub fn send_early(&self, early: &Arc<Early>, file: &Arc<StagedFile>, parts: &[u64]) {
        for &index in parts {
            let slots = self.slots.parts.clone();
            early.send(file.clone(), index, self.part_size, slots);
        }
    }

    /// Notes keys uploaded from an earlier mount's journal.
    pub fn note_recovered(&self, keys: &[String]) {
        self.recovered.lock().extend(keys.iter().cloned());
    }

    /// Keys recovered from an earlier mount's journal and uploaded at start.
    pub fn recovered(&self) -> Vec<String> {
        self.recovered.lock().clone()
    }

    /// A metadata rewrite of `ino` is asked for: whether the caller must start its task
    /// (none runs for `ino`; one that runs takes it in its next round).
    pub fn rewrite_due(&self, ino: u64) -> bool {
        let mut r = self.rewrites.lock();
        match r.get_mut(&ino) {
            Some(again) => {
                *again = true;
                false
            }
            None => {
                r.insert(ino, false);
                true
            }
        }
    }

    /// After a round of `ino`'s rewrite task: whether another is due; if not the task ends.
    pub fn rewrite_again(&self, ino: u64) -> bool {
        let mut r = self.rewrites.lock();
        match r.get_mut(&ino) {
            Some(again) if *again => {
                *again = false;
                true
            }
            _ => {
                r.remove(&ino);
                if r.is_empty() {
                    self.rewrites_idle.notify_waiters();
                }
                false
            }
        }
    }

    /// Returns once no rewrite runs (unmount waits for them, as for uploads).
    pub async fn rewrites_done(&self) {
        let idle = || self.rewrites.lock().is_empty().then_some(());
        crate::wait::until(&self.rewrites_idle, idle).await
    }
}
