//! Write-back as the file system drives it: staging a file for writing, writes, fsync,
//! the upload task, flush at unmount and recovery of a dead mount's journal. Where each
//! staged file stands is `WriteBack`'s (crate::writeback); this file does the I/O its
//! transitions call for and keeps the namespace in step.

use super::*;
use crate::meta::Posix;
use crate::writeback::{Durability, Finished, Note, Released, UploadFailure, UploadJob};

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

impl Fs {
    /// Opens `ino`'s staged content as a handle (`write`: a writer), staging it first
    /// with the object's first `keep` bytes: all of them (`u64::MAX`), none for a caller
    /// about to replace it (O_TRUNC), the bytes a truncation keeps. Only the bytes kept
    /// are fetched (`truncate -s 4096` of a 256 MiB object fetched it whole, issue 26).
    pub(super) async fn open_staged(
        self: &Arc<Self>,
        ino: u64,
        write: bool,
        keep: u64,
    ) -> Result<Arc<StagedFile>> {
        if let Some(f) = self.wb.open(ino, write) {
            return Ok(f);
        }
        // One download per object; opens of other files never wait for it.
        let _guard = self.fills.hold(ino).await;
        if let Some(f) = self.wb.open(ino, write) {
            return Ok(f);
        }
        let (path, etag, size, mtime) = {
            let t = self.inodes.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            let path = t.path(ino).ok_or(FsError::NotFound)?;
            (
                path,
                n.entry.etag.clone(),
                n.entry.size,
                n.entry.shown_mtime(),
            )
        };
        let kept = size.min(keep);
        let file = self.wb.staging().create()?;
        if kept > 0 {
            let etag = etag.filter(|e| !e.is_empty());
            let r = download_into(
                &self.client,
                &self.key(&path),
                etag.as_deref(),
                kept,
                self.cfg.part_size,
                self.prefetch.gets(),
                &file.file,
            )
            .await;
            if let Err(e) = r {
                file.discard();
                return Err(e.into());
            }
        }
        if let Err(e) = file.file.set_len(kept) {
            file.discard();
            return Err(e.into());
        }
        // A staged prefix is already a change the bucket lacks.
        let durable = kept == size;
        Ok(self.wb.install(ino, file, (kept, mtime), write, durable))
    }

    /// Sets the length of `ino`'s staged content (O_TRUNC, ftruncate), journaled.
    pub(super) fn truncate_staged(&self, ino: u64, staged: &StagedFile, size: u64) -> Result<()> {
        self.wb.set_len(ino, staged, size)?;
        self.journal(ino)
    }

    /// Makes the journal record of `ino` agree with its state (written for a change the
    /// bucket lacks, removed once durable). A record that cannot be written fails the
    /// operation: a file is never changed without crash protection.
    pub(super) fn journal(&self, ino: u64) -> Result<()> {
        let (key, rec) = {
            let t = self.inodes.lock();
            let mut rec = crate::writeback::Record::default();
            if let Some(n) = t.get(ino) {
                rec.symlink = n.entry.kind == Kind::Symlink;
                // A recovered FIFO stays a FIFO, a script executable (the times go:
                // recovery takes the data file's).
                let mut p = self.full_posix(&n.entry);
                (p.mtime, p.atime, p.ctime) = (None, None, None);
                let mut m = HashMap::new();
                p.encode_into(&mut m);
                rec.metadata = m.into_iter().collect();
                rec.metadata.sort();
            }
            (t.path(ino).map(|p| self.key(&p)), rec)
        };
        self.wb
            .sync_journal(ino, key.as_deref(), &self.cfg.bucket, &rec)
            .map_err(|e| {
                tracing::warn!(?key, "cannot write the journal record: {e}");
                FsError::from(e)
            })
    }

    pub(super) fn close_node(&self, ino: u64) {
        let mut t = self.inodes.lock();
        if let Some(n) = t.get_mut(ino) {
            n.closed();
        }
        t.remove_if_unreferenced(ino);
    }

    /// Writes `data` at `off` to the staged copy (local disk only); returns the bytes
    /// written.
    pub fn write(self: &Arc<Self>, fh: u64, off: u64, data: &[u8]) -> Result<u32> {
        let (ino, staged) = match self.handle(fh)? {
            Handle::Local {
                ino,
                staged,
                access,
                ..
            } if access.writes() => (ino, staged),
            _ => return Err(FsError::BadHandle),
        };
        let journal = match self.wb.write(ino, &staged, off, data) {
            Ok(j) => j,
            Err(e) => {
                let e = FsError::from(e);
                if !matches!(e, FsError::NoSpace(_)) {
                    return Err(e);
                }
                // The task's output goes before cached data: free the disk and try once more.
                self.cache.make_room(data.len() as u64);
                self.wb.write(ino, &staged, off, data)?
            }
        };
        if journal {
            self.journal(ino)?;
        }
        self.send_early(ino);
        Ok(data.len() as u32)
    }

    /// Starts the upload of the parts a front-to-back writer has left a whole part behind.
    pub(super) fn send_early(&self, ino: u64) {
        let ps = self.cfg.part_size;
        if !self.wb.early_due(ino, ps) {
            return;
        }
        let mut metadata = HashMap::new();
        let key = {
            let t = self.inodes.lock();
            let (Some(n), Some(path)) = (t.get(ino), t.path(ino)) else {
                return;
            };
            self.full_posix(&n.entry).encode_into(&mut metadata);
            self.key(&path)
        };
        let claimed = self.wb.claim_early_parts(ino, ps, |file| {
            let note = file.upload_note_path();
            let aborts = self.wb.aborts().clone();
            Early::new(
                self.client.clone(),
                &self.cfg.bucket,
                key,
                note,
                aborts,
                metadata,
            )
        });
        if let Some((early, file, parts)) = claimed {
            send_early(&early, &file, &parts, ps, &self.slots.parts);
        }
    }

    /// Returns once the file's content as of now is durable in the bucket.
    pub async fn fsync(self: &Arc<Self>, fh: u64) -> Result<()> {
        let (ino, staged) = match self.handle(fh)? {
            Handle::Local { ino, staged, .. } => (ino, staged),
            // The file was staged through another handle: fsync is of the file.
            Handle::Unstaged { ino, .. } if self.wb.stat(ino).is_some() => {
                (ino, self.stage(fh, u64::MAX).await?)
            }
            // Nothing changed through it: nothing of it to make durable.
            Handle::Remote { .. } | Handle::Empty { .. } | Handle::Unstaged { .. } => return Ok(()),
        };
        // What a passthrough writer wrote so far is what must become durable.
        self.refresh_direct(Some(ino));
        self.wait_durable(ino, &staged).await
    }

    pub(super) async fn wait_durable(
        self: &Arc<Self>,
        ino: u64,
        staged: &Arc<StagedFile>,
    ) -> Result<()> {
        self.wait_durable_tried(ino, staged, false).await
    }

    /// `wait_durable`; `own_try`: a failure counts only for an upload begun after this
    /// call (the unmount's "failed uploads are retried once more", SEMANTICS.md): one in
    /// flight already that fails is followed by one more. (Without it, an upload failing
    /// just before the unmount was retried and one failing just after it began was not.)
    pub(super) async fn wait_durable_tried(
        self: &Arc<Self>,
        ino: u64,
        staged: &Arc<StagedFile>,
        own_try: bool,
    ) -> Result<()> {
        let Some((target, spawn, in_flight)) = self.wb.request_upload_seen(ino) else {
            return Ok(());
        };
        let mut owed = own_try && in_flight;
        if spawn {
            self.spawn_upload(ino);
        }
        loop {
            let notified = staged.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.wb.durability(ino, staged, target) {
                Durability::Done => return Ok(()),
                Durability::Failed(_) if owed => {
                    owed = false;
                    if let Some((_, true)) = self.wb.request_upload(ino) {
                        self.spawn_upload(ino);
                    }
                }
                Durability::Failed(e) => return Err(FsError::Upload(e)),
                Durability::Pending => notified.await,
                Durability::Stalled => {
                    if let Some((_, true)) = self.wb.request_upload(ino) {
                        self.spawn_upload(ino);
                    }
                }
            }
        }
    }

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

    /// Waits until every file closed so far below `dir` (but `except`) is durable.
    pub(super) async fn wait_tree(self: &Arc<Self>, dir: u64, except: u64) -> Result<()> {
        let staged = self.closed_staged(|t, i| i != except && t.is_within(i, dir));
        self.wait_all_durable(staged).await
    }

    /// `fsync` of a directory: the names in it that this mount wrote back (symlinks,
    /// closed files) are in the bucket when it returns, or it fails with their error.
    pub async fn fsyncdir(self: &Arc<Self>, ino: u64) -> Result<()> {
        let staged = self.closed_staged(|t, i| {
            t.get(i)
                .is_some_and(|n| n.parent() == ino && t.child(ino, n.name()) == Some(i))
        });
        self.wait_all_durable(staged).await
    }

    /// The staged files with no writer among the nodes `pick` selects.
    pub(super) fn closed_staged(
        &self,
        pick: impl Fn(&Inodes, u64) -> bool,
    ) -> Vec<(u64, Arc<StagedFile>)> {
        let staged = self.wb.staged(true);
        let t = self.inodes.lock();
        staged.into_iter().filter(|(i, _)| pick(&t, *i)).collect()
    }

    pub(super) async fn wait_all_durable(
        self: &Arc<Self>,
        staged: Vec<(u64, Arc<StagedFile>)>,
    ) -> Result<()> {
        for (i, s) in staged {
            self.wait_durable(i, &s).await?;
        }
        Ok(())
    }

    /// The upload task of `ino` (its phase is `Queued`): uploads until the bucket holds
    /// what is staged, or it fails, or the file changes under an open writer.
    /// `retry`: the pause before a background retry if this upload fails retryably.
    pub(super) async fn upload(self: Arc<Self>, ino: u64, retry: std::time::Duration) {
        // A completion marker goes last: whoever sees it may read the task's outputs.
        let marker = {
            let t = self.inodes.lock();
            t.get(ino)
                .filter(|n| {
                    self.cfg
                        .completion_markers
                        .iter()
                        .any(|m| **m == **n.name())
                })
                .map(|n| n.parent())
        };
        if let Some(dir) = marker {
            if let Err(e) = self.wait_tree(dir, ino).await {
                let msg = format!("not uploaded because an output of its task failed: {e}");
                self.wb.cancel_queued(ino, Some(msg));
                return;
            }
        }
        loop {
            let _moves = self.dir_moves.read().await;
            // Held until the end is recorded: a rename of this file waits for it.
            let Some(_name) = self.wb.hold_name(ino).await else {
                return;
            };
            let Some((job, key, metadata, written)) = self.begin_upload(ino) else {
                return;
            };
            let (mut r, carried) = self.upload_job(&job, &key, &metadata).await;
            // The object carries the time of the last write, which every later mount
            // shows. An early multipart upload was begun before that time was known: one
            // copy onto itself gives it the metadata a PUT would have carried.
            let mut stamped = true;
            if !carried {
                (r, stamped) = self.stamp_early(&key, &metadata, r, job.size).await;
            }
            let carried = Carried {
                posix: written,
                stamped,
            };
            let (fin, rewrite) = self.finish_upload(ino, &job, &key, r, &carried);
            if rewrite {
                let fs = self.clone();
                tokio::spawn(async move { fs.rewrite_meta(ino).await });
            }
            if let Some(token) = fin.retry {
                self.retry_later(ino, token, retry);
            }
            if fin.stray {
                if let Err(e) = self.client.delete(&key).await {
                    tracing::warn!(%key, "cannot delete an object uploaded under a name that was given up: {e}");
                }
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
        let mut t = self.inodes.lock();
        let Some(path) = t.path(ino) else {
            drop(t);
            self.wb.cancel_queued(ino, None);
            return None;
        };
        let key = self.key(&path);
        let mut job = self.wb.begin_upload(ino, &key)?;
        let mut metadata = HashMap::new();
        let mut posix = Posix::default();
        let marked = t
            .get(ino)
            .and_then(|n| t.get(n.parent()))
            .is_some_and(|p| p.is_marked());
        if let Some(n) = t.get_mut(ino) {
            if let Some(target) = &n.entry.target {
                metadata.insert(SYMLINK_META.to_string(), percent_encode(target));
                // A listing of a marked directory reads every object's metadata: one PUT
                // is enough there. Elsewhere only the `-1` ETag of a single-part
                // multipart upload tells a listing to look (3 requests).
                job.one_part = !marked;
            }
            posix = self.full_posix(&n.entry);
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
    }

    /// After an upload that `carried` went with: a chmod, chown or utimens that came
    /// while it was under way (`write; touch -d` closes, which starts the upload, then
    /// sets the time), which the upload did not carry, goes to the bucket as a metadata
    /// rewrite. So does a failed `stamp_early`. Decided under the namespace lock that
    /// `change_attrs` takes, in the same step as the upload's end: a chmod between a
    /// separate look and that end was carried by neither (issue 26).
    /// Returns whether the caller must start that rewrite's task.
    fn after_upload_attrs(&self, t: &Inodes, ino: u64, carried: &Carried) -> bool {
        let Some(n) = t.get(ino) else {
            return false;
        };
        let mut now = self.full_posix(&n.entry);
        now.atime = carried.posix.atime;
        let stale = now != carried.posix || !carried.stamped;
        stale && self.meta_writes.start(ino)
    }

    /// The metadata of an early multipart upload just completed (`r`: its ETag), which
    /// began before its last write: one CopyObject onto itself (UploadPartCopy above 5 GiB),
    /// conditional on that ETag. Returns the object's ETag now, and whether it is stamped.
    async fn stamp_early(
        &self,
        key: &str,
        metadata: &HashMap<String, String>,
        r: std::result::Result<String, ClientError>,
        size: u64,
    ) -> (std::result::Result<String, ClientError>, bool) {
        let Ok(etag) = r else {
            return (r, true);
        };
        let stamp = self
            .client
            .replace_metadata(key, metadata, Some(&etag), size);
        match stamp.await {
            Ok(put) => (Ok(put.etag), true),
            Err(e) => {
                tracing::warn!(%key, "the attributes of an early upload not stamped yet: {e}");
                (Ok(etag), false)
            }
        }
    }

    async fn upload_job(
        &self,
        job: &UploadJob,
        key: &str,
        metadata: &HashMap<String, String>,
    ) -> (std::result::Result<String, ClientError>, bool) {
        let ps = self.cfg.part_size;
        if let Some(e) = &job.early {
            if let Some(r) = e
                .finish(&job.file.file, job.size, ps, &self.slots.parts)
                .await
            {
                return (r, false);
            }
        }
        let (file, size, one_part) = (&job.file.file, job.size, job.one_part);
        let r = upload_file(
            &self.client,
            key,
            file,
            size,
            ps,
            &self.slots,
            metadata,
            one_part,
            Note {
                path: job.file.whole_upload_note_path(),
                bucket: &self.cfg.bucket,
            },
        )
        .await;
        (r, true)
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
        let mut t = self.inodes.lock();
        let mtime = r.as_ref().ok().and(carried.posix.mtime);
        let rewrite = r.is_ok() && self.after_upload_attrs(&t, ino, carried);
        let named = t.path(ino).map(|p| self.key(&p)).as_deref() == Some(key);
        let result = match &r {
            Ok(_) => Ok(()),
            Err(e) => Err(UploadFailure {
                error: format!("{key}: upload failed: {e}"),
                retryable: e.is_retryable(),
            }),
        };
        let fin = self.wb.finish_upload(ino, job, result, named);
        if let Some(e) = &fin.error {
            tracing::error!(%key, "{e}");
        }
        if let (true, Ok(etag)) = (fin.durable, r) {
            if let Some(n) = t.get_mut(ino) {
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
                let (parent, name, e) = (n.parent(), n.name().clone(), n.entry.clone());
                Self::listing_put(&mut t, parent, &name, Some(e));
            }
            if let Some(file) = &fin.released {
                let kind = t.get(ino).map(|n| n.entry.kind);
                t.remove_if_unreferenced(ino);
                drop(t);
                if kind == Some(Kind::File) {
                    // Downstream tasks read what upstream ones wrote: keep it as a
                    // cached copy of the new object.
                    self.cache
                        .adopt(&self.cfg.bucket, key, &etag, job.size, file.data_path());
                }
                file.discard();
                return (fin, rewrite);
            }
        }
        drop(t);
        if fin.durable {
            // Not under the namespace lock: the record's removal is disk I/O.
            let _ = self.journal(ino);
        }
        (fin, rewrite)
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
        let mut t = self.inodes.lock();
        if let Some(n) = t.get_mut(ino) {
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
            Released::Clean => self.adoptable(&t, ino),
            _ => None,
        };
        t.remove_if_unreferenced(ino);
        drop(t);
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
    fn adoptable(&self, t: &Inodes, ino: u64) -> Option<(String, Arc<str>, u64)> {
        let n = t
            .get(ino)
            .filter(|n| n.entry.kind == Kind::File && !n.is_unlinked())?;
        let etag = n.entry.etag.clone()?;
        Some((self.key(&t.path(ino)?), etag, n.entry.size))
    }

    /// Extends a file (fallocate mode 0); space is not reserved in object storage.
    pub async fn fallocate(self: &Arc<Self>, fh: u64, off: u64, len: u64) -> Result<()> {
        if self.needs_stage(fh) {
            self.stage(fh, u64::MAX).await?;
        }
        let (ino, staged) = match self.handle(fh)? {
            Handle::Local {
                ino,
                staged,
                access,
                ..
            } if access.writes() => (ino, staged),
            _ => return Err(FsError::BadHandle),
        };
        if off + len > self.wb.stat(ino).map_or(0, |st| st.size) {
            self.wb.set_len(ino, &staged, off + len)?;
            self.journal(ino)?;
        }
        Ok(())
    }
}
