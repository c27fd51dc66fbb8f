//! Staged content: a file staged for writing (fetching what it keeps), its writes,
//! truncations and fallocate, each journaled before it returns, and the early parts of a
//! front-to-back writer handed to the uploader.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{FsError, Result};
use crate::inode::Kind;
use crate::writeback::{download_into, StagedFile};

use super::Fs;
use super::WritePath;

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
        let _guard = self.ns.locks().fill(ino).await;
        if let Some(f) = self.wb.open(ino, write) {
            return Ok(f);
        }
        let known = self.ns.read_at(ino, |n, path| {
            let e = &n.entry;
            (path, e.etag.clone(), e.size, e.shown_mtime())
        });
        let (path, etag, size, mtime) = known.ok_or(FsError::NotFound)?;
        let kept = size.min(keep);
        let file = self.wb.staging().create()?;
        if kept > 0 {
            let etag = etag.filter(|e| !e.is_empty());
            let r = download_into(
                &self.client,
                &self.keys.key(&path),
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
        let staged = self.wb.install(ino, file, (kept, mtime), write, durable);
        // The node describes the staged copy until it is uploaded or given up (then it
        // is confirmed): a kernel forget meanwhile left a lookup the bucket's older copy.
        self.ns.update(ino, |n| n.own());
        Ok(staged)
    }

    /// Writes `data` at `off` to the staged copy (local disk only); returns the bytes
    /// written.
    pub fn write(self: &Arc<Self>, fh: u64, off: u64, data: &[u8]) -> Result<u32> {
        let (ino, staged) = self.handles.writer(fh).ok_or(FsError::BadHandle)?;
        let ps = self.cfg.part_size;
        let next = match self.wb.write(ino, &staged, (off, data), ps) {
            Ok(j) => j,
            Err(e) => {
                let e = FsError::from(e);
                if !matches!(e, FsError::NoSpace(_)) {
                    return Err(e);
                }
                // The task's output goes before cached data: free the disk and try once more.
                self.cache.make_room(data.len() as u64);
                self.wb.write(ino, &staged, (off, data), ps)?
            }
        };
        if next.journal {
            self.w.journal(ino)?;
        }
        if next.early_due {
            self.w.send_early(ino);
        }
        Ok(data.len() as u32)
    }

    /// Extends a file (fallocate mode 0); space is not reserved in object storage.
    pub async fn fallocate(self: &Arc<Self>, fh: u64, off: u64, len: u64) -> Result<()> {
        if self.needs_stage(fh) {
            self.stage(fh, u64::MAX).await?;
        }
        let (ino, staged) = self.handles.writer(fh).ok_or(FsError::BadHandle)?;
        if off + len > self.wb.stat(ino).map_or(0, |st| st.size) {
            self.wb.set_len(ino, &staged, off + len)?;
            self.w.journal(ino)?;
        }
        Ok(())
    }
}

impl WritePath {
    /// Sets the length of `ino`'s staged content (O_TRUNC, ftruncate), journaled.
    pub(super) fn truncate_staged(&self, ino: u64, staged: &StagedFile, size: u64) -> Result<()> {
        self.wb.set_len(ino, staged, size)?;
        self.journal(ino)
    }

    /// Makes the journal record of `ino` agree with its state (written for a change the
    /// bucket lacks, removed once durable). A record that cannot be written fails the
    /// operation: a file is never changed without crash protection.
    pub(super) fn journal(&self, ino: u64) -> Result<()> {
        let named = self.ns.names_of(ino);
        let mut rec = crate::writeback::Record::default();
        if let Some(entry) = &named.entry {
            rec.symlink = entry.kind == Kind::Symlink;
            // A recovered FIFO stays a FIFO, a script executable (the times go:
            // recovery takes the data file's).
            let mut p = self.shown.full_posix(entry);
            (p.mtime, p.atime, p.ctime) = (None, None, None);
            let mut m = HashMap::new();
            p.encode_into(&mut m);
            rec.metadata = m.into_iter().collect();
            rec.metadata.sort();
            rec.links = named.extra.iter().map(|p| self.keys.key(p)).collect();
        }
        let key = named.path.map(|p| self.keys.key(&p));
        self.wb
            .sync_journal(ino, key.as_deref(), &self.cfg.bucket, &rec)
            .map_err(|e| {
                tracing::warn!(?key, "cannot write the journal record: {e}");
                FsError::from(e)
            })
    }

    /// Starts the upload of the parts a front-to-back writer has left a whole part behind.
    fn send_early(&self, ino: u64) {
        let ps = self.cfg.part_size;
        let mut metadata = HashMap::new();
        let named = self.ns.read_at(ino, |n, path| {
            self.shown.full_posix(&n.entry).encode_into(&mut metadata);
            self.keys.key(&path)
        });
        let Some(key) = named else {
            return;
        };
        let claimed = self.wb.claim_early_parts(ino, ps, |file| {
            let note = file.upload_note_path();
            let aborts = self.wb.aborts().clone();
            self.up.early(key, note, aborts, metadata)
        });
        if let Some((early, file, parts)) = claimed {
            self.up.send_early(&early, &file, &parts);
        }
    }
}
