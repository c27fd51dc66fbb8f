//! The upload task as the file system drives it: a snapshot of the namespace facts an
//! upload needs (key, metadata), the upload itself by the `Uploader`, then the namespace
//! brought in step with its end; background retries, and a handle's release that queues
//! an upload. Where each staged file stands is `WriteBack`'s (crate::writeback).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use flowfs_client::ClientError;

use crate::inode::Kind;
use crate::meta::Posix;
use crate::writeback::{Finished, Released, StagedFile, UploadError, UploadJob};

use super::names::NodeEdit;
use super::WritePath;
use super::{percent_encode, SYMLINK_META};

/// The pause before the first background retry of a failed upload, and the longest
/// between two: each failure already spent the client's retry budget (a minute).
const FIRST_RETRY: std::time::Duration = std::time::Duration::from_secs(10);
const LAST_RETRY: std::time::Duration = std::time::Duration::from_secs(300);

/// The attributes an upload sent with the object, and whether an early multipart
/// upload's metadata copy succeeded (`stamped`).
struct Carried {
    posix: Posix,
    stamped: bool,
}

impl WritePath {
    pub(super) fn spawn_upload(self: &Arc<Self>, ino: u64) {
        let fs = self.clone();
        tokio::spawn(async move { fs.upload(ino, FIRST_RETRY).await });
    }

    /// A failed upload that may succeed later is sent again in the background after
    /// `pause` (with jitter), and after twice that if it fails again, up to
    /// `LAST_RETRY`: a file closed during an outage goes up when the store is back,
    /// without waiting for an fsync or the unmount.
    fn retry_later(self: &Arc<Self>, ino: u64, token: u64, pause: std::time::Duration) {
        // Weak while it sleeps: a retry never keeps a finished mount (and its staging
        // lock) alive.
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let jittered = pause.mul_f64(0.5 + rand::random::<f64>() / 2.0);
            tokio::time::sleep(jittered).await;
            let Some(fs) = weak.upgrade() else {
                return;
            };
            if fs.wb.retry_due(ino, token) {
                tracing::info!(ino, "sending a failed upload again");
                fs.upload(ino, (pause * 2).min(LAST_RETRY)).await;
            }
        });
    }

    /// The upload task of `ino` (its phase is `Queued`): uploads until the bucket holds
    /// what is staged, or it fails, or the file changes under an open writer.
    /// `retry`: the pause before a background retry if this upload fails retryably.
    pub(super) async fn upload(self: Arc<Self>, ino: u64, retry: std::time::Duration) {
        // A completion marker goes last: whoever sees it may read the task's outputs.
        let marker = self
            .ns
            .read(ino, |n| self.keys.is_marker(n.name()).then(|| n.parent()));
        if let Some(dir) = marker.flatten() {
            if let Err(e) = self.wait_tree(dir, ino).await {
                let source = Arc::new(e);
                self.wb
                    .cancel_queued(ino, Some(UploadError::Upstream { source }));
                return;
            }
        }
        loop {
            let _moves = self.up.hold_shared().await;
            // Held until the end is recorded: a rename of this file waits for it.
            let Some(_name) = self.wb.hold_name(ino).await else {
                return;
            };
            let Some((job, key, metadata, written)) = self.begin_upload(ino) else {
                return;
            };
            // Until this upload's end is recorded (and a stray deleted), no other upload
            // sends to its key: one of a file removed meanwhile may still be landing.
            let _key = self.up.keys().hold(&key).await;
            let mut sent = self.up.send(&job, &key, &metadata).await;
            if sent.result.is_ok() {
                // Done only once every name of the file holds what was sent.
                if let Err(e) = self.copy_to_links(ino, &key).await {
                    sent.result = Err(e);
                }
            }
            let carried = Carried {
                posix: written,
                stamped: sent.stamped,
            };
            let (fin, rewrite) = self.finish_upload(ino, &job, &key, sent.result, &carried);
            if rewrite {
                let fs = self.clone();
                tokio::spawn(async move { fs.rewrite_meta(ino).await });
            }
            if let Some(token) = fin.retry {
                self.retry_later(ino, token, retry);
            }
            if fin.stray {
                self.delete_stray(&key).await;
            }
            if !fin.again {
                return;
            }
        }
    }

    fn begin_upload(
        &self,
        ino: u64,
    ) -> Option<(UploadJob, String, HashMap<String, String>, Posix)> {
        self.ns.edit(ino, |mut t| {
            let Some(path) = t.path() else {
                self.wb.cancel_queued(ino, None);
                return None;
            };
            let key = self.keys.key(&path);
            let mut job = self.wb.begin_upload(ino, &key)?;
            let mut metadata = HashMap::new();
            let mut posix = Posix::default();
            let marked = t.parent_marked();
            if let Some(n) = t.node_mut() {
                if let Some(target) = &n.entry.target {
                    metadata.insert(SYMLINK_META.to_string(), percent_encode(target));
                    // A listing of a marked directory reads every object's metadata: one PUT
                    // is enough there. Elsewhere only the `-1` ETag of a single-part
                    // multipart upload tells a listing to look (3 requests).
                    job.one_part = !marked;
                }
                posix = self.shown.full_posix(&n.entry);
                if let Some(st) = self.wb.stat(ino) {
                    posix.mtime = Some(st.mtime);
                    posix.ctime = Some(posix.ctime.map_or(st.ctime, |c| c.max(st.ctime)));
                }
                posix.encode_into(&mut metadata);
                // A utimens from now on differs from this: after_upload_attrs tells it so.
                let p = n.entry.posix_mut();
                (p.mtime, p.ctime) = (posix.mtime, posix.ctime);
            }
            Some((job, key, metadata, posix))
        })
    }

    /// After an upload that `carried` went with: a chmod, chown or utimens that came
    /// while it was under way (`write; touch -d` closes, which starts the upload, then
    /// sets the time), which the upload did not carry, goes to the bucket as a metadata
    /// rewrite. So does a failed `stamp_early`. Decided under the namespace lock that
    /// `change_attrs` takes, in the same step as the upload's end: a chmod between a
    /// separate look and that end was carried by neither (issue 26).
    /// Returns whether the caller must start that rewrite's task.
    fn after_upload_attrs(&self, t: &NodeEdit<'_>, ino: u64, carried: &Carried) -> bool {
        let Some(n) = t.node() else {
            return false;
        };
        let mut now = self.shown.full_posix(&n.entry);
        now.atime = carried.posix.atime;
        let stale = now != carried.posix || !carried.stamped;
        stale && self.up.rewrite_due(ino)
    }

    /// Records the end of an upload and brings the node in step with it; also says
    /// whether a metadata rewrite must follow (`after_upload_attrs`), decided before the
    /// upload counts as done (and wakes fsync and unmount), so that an unmount waits for
    /// that rewrite too.
    fn finish_upload(
        &self,
        ino: u64,
        job: &UploadJob,
        key: &str,
        r: std::result::Result<String, ClientError>,
        carried: &Carried,
    ) -> (Finished, bool) {
        let (fin, rewrite, kind) =
            (self.ns).edit(ino, |t| self.upload_ended(t, (ino, job, key), &r, carried));
        if let (true, Ok(etag), Some(file)) = (fin.durable, &r, &fin.released) {
            if kind == Some(Kind::File) {
                // Downstream tasks read what upstream ones wrote: keep it as a cached
                // copy of the new object.
                self.cache
                    .adopt(&self.cfg.bucket, key, etag, job.size, file.data_path());
            }
            file.discard();
            return (fin, rewrite);
        }
        if fin.durable {
            // Not under the namespace lock: the record's removal is disk I/O.
            let _ = self.journal(ino);
        }
        (fin, rewrite)
    }

    /// `finish_upload`'s one step in the namespace; also the kind of a file released.
    fn upload_ended(
        &self,
        mut t: NodeEdit<'_>,
        (ino, job, key): (u64, &UploadJob, &str),
        r: &std::result::Result<String, ClientError>,
        carried: &Carried,
    ) -> (Finished, bool, Option<Kind>) {
        let mtime = r.as_ref().ok().and(carried.posix.mtime);
        let rewrite = r.is_ok() && self.after_upload_attrs(&t, ino, carried);
        let named = t.path().map(|p| self.keys.key(&p)).as_deref() == Some(key);
        let result = match r {
            Ok(_) => Ok(()),
            Err(e) => Err(UploadError::Store {
                key: key.to_string(),
                source: Arc::new(e.clone()),
            }),
        };
        let fin = self.wb.finish_upload(ino, job, result, named);
        if let Some(e) = &fin.error {
            tracing::error!(%key, "{e}");
        }
        let mut kind = None;
        if let (true, Ok(etag)) = (fin.durable, r) {
            if let Some(n) = t.node_mut() {
                // The node now describes the object in the bucket.
                n.entry.size = job.size;
                let etag: Arc<str> = etag.as_str().into();
                n.entry.etag = Some(etag.clone());
                if let Some(m) = mtime {
                    n.entry.mtime = m;
                }
                // The kernel's pages are exactly what we uploaded.
                n.set_page_cache_etag(Some(etag));
                if fin.released.is_some() {
                    n.confirm(Instant::now());
                }
                t.relist();
            }
            if fin.released.is_some() {
                kind = t.node().map(|n| n.entry.kind);
                t.remove_if_unreferenced();
            }
        }
        (fin, rewrite, kind)
    }

    /// A handle on a staged file is closed: queue its upload, or give the staged copy up
    /// once it is unchanged and no handle uses it.
    pub(super) fn release_staged(
        self: &Arc<Self>,
        ino: u64,
        staged: &Arc<StagedFile>,
        write: bool,
    ) {
        let out = self.wb.release(ino, staged, write);
        let adopt = self.ns.edit(ino, |mut t| {
            if let Some(n) = t.node_mut() {
                n.closed();
                match out {
                    // The time of the last change, as a local file system shows.
                    Released::Upload => n.entry.mtime = SystemTime::now(),
                    // The bucket's copy is current again: the node follows it as before.
                    Released::Dropped | Released::Clean => n.confirm(Instant::now()),
                    Released::Nothing => {}
                }
            }
            let adopt = match out {
                Released::Clean => self.adoptable(&t),
                _ => None,
            };
            t.remove_if_unreferenced();
            adopt
        });
        if out == Released::Clean {
            if let Some((key, etag, size)) = adopt {
                // A file whose upload ended while a reader had it open (`samtools
                // index` right after `samtools sort`): the next task reads it from the
                // cache, as it would have had the upload ended after the last close.
                self.cache
                    .adopt(&self.cfg.bucket, &key, &etag, size, staged.data_path());
            }
            staged.discard();
        }
        if out == Released::Upload {
            self.spawn_upload(ino);
        }
    }

    /// Key, ETag and size of the object version a clean staged file of `ino` holds: a
    /// regular file that still has its name and the ETag of its upload (or download).
    fn adoptable(&self, t: &NodeEdit<'_>) -> Option<(String, Arc<str>, u64)> {
        let n = t
            .node()
            .filter(|n| n.entry.kind == Kind::File && !n.is_unlinked())?;
        let etag = n.entry.etag.clone()?;
        Some((self.keys.key(&t.path()?), etag, n.entry.size))
    }
}
