//! `copy_file_range` within one mount. A file just created (or emptied) whose first change
//! is a copy of a whole object from offset 0 (`cp`, the JDK's `Files.copy`, Nextflow's
//! `publishDir mode: 'copy'`) becomes a copy on the server: no byte of it passes through
//! the node. The copy lands under the destination's key with the destination's own
//! attributes, its staged file (empty) is given up, and the handle reads the bucket until
//! a later change stages the copy as any object (unstaged.rs).
//!
//! One call copies at most 4 GiB − 4 KiB through FUSE, and the JDK asks for 2 GiB at a
//! time: a first call that asks for that much is taken for the first of several, and the
//! whole object is copied then (`Ahead`); the calls that follow with the next bytes of the
//! same version are answered at once. Until they have asked for all of it, the file is what
//! they were answered (its size, and what a change stages); a close, fsync or other call
//! before that cuts the copy to it (staged, uploaded as any change).
//!
//! A source written on this node and closed (a task's output, published as soon as the
//! task ends) is still being uploaded: the copy waits for that upload, then copies the
//! object it landed as (`settled_source`). Copying its bytes instead sent them up twice.
//!
//! A passthrough writer (the kernel reads and writes its staged file itself) is filled on
//! local disk instead, its upload a copy on the server (copy_fill.rs).
//!
//! Anything else — a source still open for writing, a range, a destination with bytes or
//! other handles — answers `None`: the caller lets the kernel copy the bytes through reads
//! and writes, as before.

use flowfs_client::Version;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crate::error::Result;
use crate::writeback::StagedFile;

use super::handles::Ahead;
use super::names::NodeEdit;
use super::passthrough::Access;
use super::Fs;
use super::WritePath;

/// One `copy_file_range` call: `(handle, offset)` of the source and of the destination,
/// and the most bytes to copy.
#[derive(Debug, Clone, Copy)]
pub struct CopyRange {
    /// The source's handle and offset.
    pub from: (u64, u64),
    /// The destination's handle and offset.
    pub to: (u64, u64),
    /// The most bytes to copy.
    pub len: u64,
}

/// The object a copy's source handle reads: (inode, key, ETag, size).
pub(super) type SourceVersion = (u64, String, String, u64);

/// A copy the server can make: the source's version, and the destination's staged file;
/// `acked`: what the call is answered (`size`, or less for the first of several).
struct ServerCopy {
    key: String,
    etag: String,
    size: u64,
    acked: u64,
    ino: u64,
    staged: Arc<StagedFile>,
}

impl Fs {
    /// Copies on the server when `c` is a whole object onto an empty file (see the module
    /// header); returns the bytes copied, or `None`: the kernel is to copy the bytes.
    pub async fn copy_range(self: &Arc<Self>, c: CopyRange) -> Result<Option<u64>> {
        if let Some((ino, ahead)) = self.handles.ahead(c.to.0) {
            return self.copy_on(c, ino, ahead).await;
        }
        if !self
            .w
            .settled_source(self.handles.local(Access::Read, c.from.0))
            .await
        {
            return Ok(None);
        }
        let Some(source) = self.source_version(c.from.0) else {
            return Ok(None);
        };
        let dest = self.handles.local(Access::Write, c.to.0);
        let Some(plan) = self.w.server_copy(&c, &source, dest) else {
            return self.fill_copy(&c, source).await;
        };
        let ServerCopy {
            ino, size, acked, ..
        } = plan;
        let _moves = self.up.hold_shared().await;
        // A rename of the destination waits for the copy: it never lands under a name left.
        let Some(_name) = self.wb.hold_name(ino).await else {
            return Ok(None);
        };
        let Some((key, metadata, mtime)) = self.w.copy_target_attrs(ino) else {
            return Ok(None);
        };
        // As an upload: no other upload or stray's delete on this key meanwhile.
        let _key = self.up.keys().hold(&key).await;
        if !self.wb.begin_copy(ino, &plan.staged) {
            return Ok(None);
        }
        // The empty file's record goes: a crash from here leaves the copy or nothing.
        if let Err(e) = self.w.journal(ino) {
            self.w.copy_not_taken(&plan);
            return Err(e);
        }
        let sent = (self.client)
            .copy(
                Version {
                    key: &plan.key,
                    etag: Some(&plan.etag),
                },
                &key,
                Some(&metadata),
            )
            .await;
        let etag = match sent {
            Ok(p) => p.etag,
            Err(e) => {
                tracing::info!(from = %plan.key, to = %key, "server-side copy refused, copying the bytes: {e}");
                self.w.copy_not_taken(&plan);
                return Ok(None);
            }
        };
        if !self.w.finish_copy(&plan, &etag, mtime) {
            self.w.copy_not_taken(&plan);
            self.w.copy_given_up(&plan, &key).await;
            return Ok(None);
        }
        let reader = self.prefetch.reader(key, Some(etag.as_str().into()), size);
        let ahead = (acked < size).then(|| Ahead {
            key: plan.key.clone(),
            etag: plan.etag.clone(),
            acked,
            size,
        });
        if !self
            .handles
            .unstage(c.to.0, &plan.staged, reader.clone(), ahead)
        {
            self.prefetch.close(&reader);
        }
        plan.staged.discard();
        Ok(Some(acked))
    }

    /// A call after the first of a copy made ahead (`a`): the next bytes of the same
    /// version are answered at once; anything else first cuts the file to what was
    /// answered, and is left to the kernel.
    async fn copy_on(self: &Arc<Self>, c: CopyRange, ino: u64, a: Ahead) -> Result<Option<u64>> {
        let source = self.source_version(c.from.0);
        let same = source.is_some_and(|(_, key, etag, _)| key == a.key && etag == a.etag);
        if !same || c.from.1 != a.acked || c.to.1 != a.acked {
            self.stage(c.to.0, u64::MAX).await?;
            return Ok(None);
        }
        let n = c.len.min(a.size - a.acked);
        let acked = self
            .handles
            .advance(c.to.0, n)
            .map_or(a.acked, |now| now.acked);
        self.ns.edit(ino, |mut t| {
            let Some(node) = t.node_mut() else { return };
            node.entry.size = acked;
            if acked == a.size {
                // Whole: the file is the object in the bucket again.
                node.confirm(Instant::now());
                t.relist();
            }
        });
        Ok(Some(n))
    }

    /// Whether closing `fh` must first cut a copy made ahead to what was answered.
    pub fn needs_settle(&self, fh: u64) -> bool {
        self.handles.ahead(fh).is_some()
    }

    /// The close of `fh` (`flush`) once a copy made ahead that its calls did not ask for
    /// whole is cut to what they were answered: staged, and uploaded at the release. A
    /// file removed meanwhile has nothing to cut.
    pub async fn settle(self: &Arc<Self>, fh: u64) -> Result<()> {
        if let Some((ino, _)) = self.handles.ahead(fh) {
            if let Err(e) = self.stage(fh, u64::MAX).await {
                let gone = self.ns.read(ino, |n| n.is_unlinked()).unwrap_or(true);
                if !gone {
                    return Err(e);
                }
            }
        }
        self.flush(fh)
    }

    /// The object `fh` reads, as (inode, key, ETag, size): a reader of the bucket, or of
    /// a staged file the bucket holds as it is (`settled_source`).
    fn source_version(&self, fh: u64) -> Option<SourceVersion> {
        if let Some((src, reader)) = self.handles.bucket_reader(fh) {
            // Staged by another handle: what it holds may differ from the bucket's.
            if self.wb.stat(src).is_some() {
                return None;
            }
            let (key, etag, size) = reader.version();
            return Some((src, key.to_string(), etag?.to_string(), size));
        }
        let (src, staged) = self.handles.local(Access::Read, fh)?;
        let known = self.ns.read_at(src, |n, path| {
            let etag = n.entry.etag.as_deref()?.to_string();
            let durable = self.wb.durable_source(src, &staged) && !n.is_unlinked();
            durable.then(|| (src, self.keys.key(&path), etag, n.entry.size))
        });
        known.flatten()
    }
}

impl WritePath {
    /// False where the source's staged file (`local`, of its handle) is still open for
    /// writing, or its upload failed; otherwise, once a closed staged file's upload has
    /// landed (at once for a source read from the bucket).
    async fn settled_source(self: &Arc<Self>, local: Option<(u64, Arc<StagedFile>)>) -> bool {
        let Some((src, staged)) = local else {
            return true;
        };
        if !self.wb.closed_source(src, &staged) {
            return false;
        }
        // A failure is the source's own to report (its fsync, its close); this copy
        // leaves the bytes to the kernel.
        self.wait_durable(src, &staged).await.is_ok()
    }

    /// The copy `c` of `source` (`source_version`) asks for, if the server can make it
    /// onto `dest` (the staged file of the destination handle).
    fn server_copy(
        &self,
        c: &CopyRange,
        source: &SourceVersion,
        dest: Option<(u64, Arc<StagedFile>)>,
    ) -> Option<ServerCopy> {
        let (src, key, etag, size) = source.clone();
        let asks_all = c.len >= size || c.len >= self.cfg.copy_chunk;
        let whole = c.from.1 == 0 && c.to.1 == 0 && asks_all && size > 0;
        let (ino, staged) = dest?;
        let fits = whole && ino != src && self.wb.copy_target(ino, &staged);
        fits.then(|| ServerCopy {
            key,
            etag,
            size,
            acked: c.len.min(size),
            ino,
            staged,
        })
    }

    /// The destination's key and the metadata its copy carries: its own attributes with
    /// the time of the copy, as a write now would give it. `None` for a file with other
    /// names (each name's object must get the bytes: its upload copies them there) and for
    /// a completion marker (its upload waits for the outputs beside it).
    fn copy_target_attrs(&self, ino: u64) -> Option<(String, HashMap<String, String>, SystemTime)> {
        let (path, entry) = self.ns.edit(ino, |t| {
            let copyable = self.copyable_target(&t);
            Some((t.path()?, t.node()?.entry.clone())).filter(|_| copyable)
        })?;
        let now = SystemTime::now();
        let mut posix = self.shown.full_posix(&entry);
        (posix.mtime, posix.ctime) = (Some(now), Some(now));
        let mut metadata = HashMap::new();
        posix.encode_into(&mut metadata);
        Some((self.keys.key(&path), metadata, now))
    }

    /// Whether a copy may be `ino`'s content: not a file with other names (each name's
    /// object must get the bytes: its upload copies them there), nor a completion marker
    /// (its upload waits for the outputs beside it).
    pub(super) fn copyable_target(&self, t: &NodeEdit<'_>) -> bool {
        let named = t.node().is_some_and(|n| !self.keys.is_marker(n.name()));
        named && !t.has_other_names()
    }

    /// The copy is in the bucket: the staged file leaves the table and the node describes
    /// the copy, in one step under the namespace lock. False: the file changed meanwhile.
    fn finish_copy(&self, plan: &ServerCopy, etag: &str, mtime: SystemTime) -> bool {
        self.ns.edit(plan.ino, |mut t| {
            if !self.wb.replace_by_copy(plan.ino, &plan.staged) {
                return false;
            }
            let Some(n) = t.node_mut() else { return true };
            let etag: Arc<str> = etag.into();
            n.entry.size = plan.acked;
            n.entry.etag = Some(etag.clone());
            n.entry.mtime = mtime;
            n.set_page_cache_etag(Some(etag));
            if plan.acked == plan.size {
                n.confirm(Instant::now());
            } else {
                // No listing or lookup shows the copy's size until the calls asked for all.
                n.own();
            }
            t.relist();
            true
        })
    }

    /// The destination changed while the server copied: if it was removed, the copy is a
    /// stray and goes (its key is still held); otherwise its next upload replaces it.
    async fn copy_given_up(&self, plan: &ServerCopy, key: &str) {
        let kept = self
            .wb
            .file(plan.ino)
            .is_some_and(|f| Arc::ptr_eq(&f, &plan.staged));
        if !kept {
            if let Err(e) = self.client.delete(key).await {
                tracing::warn!(%key, "cannot delete the copy of a file removed while it was copied: {e}");
            }
        }
    }

    /// The copy was not made or not taken: the file is staged as before, its record back.
    fn copy_not_taken(&self, plan: &ServerCopy) {
        self.wb.end_copy(plan.ino, &plan.staged);
        if let Err(e) = self.journal(plan.ino) {
            tracing::warn!(ino = plan.ino, "cannot write the journal record back: {e}");
        }
    }
}
