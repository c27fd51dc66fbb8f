//! Writers of an object not staged yet. An open for writing without `O_TRUNC` used to
//! download the whole object at the open, whether or not the writer changed anything
//! (`touch`, an `O_RDWR` open that only reads) and however little it kept (coreutils'
//! `truncate -s 4096` opens, then `ftruncate`s: 1 GiB fetched for 4 KiB kept, issue 26).
//! Such a handle now reads the bucket until its first change, which stages the object
//! with the bytes that change keeps: all of them for a write or `fallocate`, the first
//! `n` for an `ftruncate` to `n`.

use std::sync::Arc;

use crate::error::{FsError, Result};
use crate::writeback::StagedFile;

use super::{Access, Fs, Handle};

impl Fs {
    /// A writer handle of `ino` that stages nothing yet, if the object is worth leaving in
    /// the bucket until a change (not staged here already, not empty). `None`: stage now.
    pub(super) fn open_unstaged(&self, ino: u64) -> Result<Option<u64>> {
        if self.wb.stat(ino).is_some() {
            return Ok(None);
        }
        let opened = self.ns.edit(ino, |mut t| {
            let path = t.path()?;
            let n = t.node_mut()?;
            let etag = n.entry.etag.clone().filter(|e| !e.is_empty());
            if n.entry.size == 0 || etag.is_none() {
                return Some(None);
            }
            n.opened();
            Some(Some((self.keys.key(&path), etag, n.entry.size)))
        });
        let Some((key, etag, size)) = opened.ok_or(FsError::NotFound)? else {
            return Ok(None);
        };
        let reader = self.prefetch.reader(key, etag, size);
        let h = Handle::Unstaged {
            ino,
            reader,
            ahead: None,
        };
        Ok(Some(self.handles.add(h)))
    }

    /// Whether `fh` is a writer that must stage its object before a write.
    pub fn needs_stage(&self, fh: u64) -> bool {
        self.handles.is_unstaged(fh)
    }

    /// Stages the object of writer `fh` with its first `keep` bytes (`u64::MAX`: all),
    /// unless it is staged already, and makes `fh` a writer of the staged file. A copy made
    /// ahead of the calls that asked for it (fs/copy.rs) keeps only what they were
    /// answered, and that is a change the bucket lacks: the object holds more.
    pub async fn stage(self: &Arc<Self>, fh: u64, keep: u64) -> Result<Arc<StagedFile>> {
        let (ino, reader, ahead) = match self.handles.get(fh)? {
            Handle::Unstaged { ino, reader, ahead } => (ino, reader, ahead),
            Handle::Local { staged, .. } => return Ok(staged),
            Handle::Remote { .. } | Handle::Empty { .. } => return Err(FsError::BadHandle),
        };
        let keep = ahead.as_ref().map_or(keep, |a| keep.min(a.acked));
        let staged = self.open_staged(ino, true, keep).await?;
        if ahead.is_some() {
            self.wb.changed(ino);
            if let Err(e) = self.w.journal(ino) {
                let extra = self.open_local(ino, staged, Access::Write);
                self.release(extra)?;
                return Err(e);
            }
        }
        if self.handles.staged(fh, ino, &staged) {
            self.prefetch.close(&reader);
            return Ok(staged);
        }
        // Another change of `fh` staged it first, or `fh` was closed meanwhile: the
        // writer counted above goes as a handle of its own would.
        let extra = self.open_local(ino, staged, Access::Write);
        self.release(extra)?;
        match self.handles.get(fh)? {
            Handle::Local { staged, .. } => Ok(staged),
            _ => Err(FsError::BadHandle),
        }
    }

    /// A write that must stage first (`needs_stage`): the object staged whole, then the
    /// write as any other.
    pub async fn write_staging(self: &Arc<Self>, fh: u64, off: u64, data: Vec<u8>) -> Result<u32> {
        self.stage(fh, u64::MAX).await?;
        self.write(fh, off, &data)
    }
}
