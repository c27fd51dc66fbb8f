//! Open files: handles, reads (of staged files here, of the store through the
//! prefetcher, prefetch/), the choice of a directory's next files to fetch ahead, and
//! close.

use std::sync::Arc;

use bytes::Bytes;

use crate::error::{FsError, Result};
use crate::inode::Kind;
use crate::writeback::StagedFile;

use super::{Access, Backing, Fs, Handle, OpenHints, OpenMode};

impl Fs {
    /// Opens a file; returns the handle and what the kernel may skip for it.
    /// A writer's object is staged at the open (see `open_as` for the lazy way).
    pub async fn open(self: &Arc<Self>, ino: u64, mode: OpenMode) -> Result<(u64, OpenHints)> {
        let (fh, hints) = self.open_as(ino, mode, false).await?;
        if self.needs_stage(fh) {
            if let Err(e) = self.stage(fh, u64::MAX).await {
                let _ = self.release(fh);
                return Err(e);
            }
        }
        Ok((fh, hints))
    }

    /// Opens a file; `passthrough`: the caller can have the kernel serve the handle itself
    /// from the local file offered in `OpenHints::backing` (FUSE passthrough), and a writer
    /// is counted as one whose writes flowfs will not see (`begin_passthrough`). A writer of an
    /// object not staged yet, opened without O_TRUNC, stages it only at its first change
    /// (unstaged.rs; the caller of `write` asks `needs_stage` first); it is offered no
    /// backing file.
    pub async fn open_as(
        self: &Arc<Self>,
        ino: u64,
        mode: OpenMode,
        passthrough: bool,
    ) -> Result<(u64, OpenHints)> {
        if mode.writes() {
            self.w.check_writable(ino)?;
        }
        let ttl = self.cfg.metadata_ttl;
        let known = self
            .ns
            .read_at(ino, |n, path| (n.entry.kind, path, n.fresh(ttl)));
        let (path, fresh) = match known.ok_or(FsError::NotFound)? {
            (Kind::Dir, ..) => return Err(FsError::IsDir),
            (Kind::Symlink, ..) => return Err(FsError::Invalid("symlink")),
            (Kind::Special(_), ..) => return Err(FsError::Invalid("special file")),
            (Kind::File, path, fresh) => (path, fresh),
        };
        if mode.writes() {
            let truncate = mode == OpenMode::Truncate;
            return self.open_writer(ino, truncate, passthrough).await;
        }
        if let Some(staged) = self.wb.open(ino, false) {
            let hints = OpenHints {
                backing: passthrough.then(|| Backing::Staged(staged.clone())),
                ..OpenHints::default()
            };
            return Ok((self.open_local(ino, staged, Access::Read), hints));
        }
        // Close-to-open: an open after the TTL sees the object as it is now.
        if !fresh {
            self.revalidate(ino, &path).await?;
        }
        let key = self.keys.key(&path);
        let opened = self.ns.update(ino, |n| {
            let etag = n.entry.etag.clone().filter(|e| !e.is_empty());
            let keep = etag.is_some() && n.page_cache_etag() == etag.as_ref();
            n.set_page_cache_etag(etag.clone());
            n.opened();
            (etag, n.entry.size, keep)
        });
        let (etag, size, keep) = opened.ok_or(FsError::NotFound)?;
        let (handle, backing) = if size == 0 {
            (Handle::Empty { ino }, None)
        } else {
            let reader = self.prefetch.reader(key, etag, size);
            let backing = passthrough
                .then(|| self.prefetch.pin(&reader))
                .flatten()
                .and_then(Backing::cached);
            let handle = Handle::Remote {
                ino,
                reader,
                _backing: backing.clone(),
            };
            (handle, backing)
        };
        let fh = self.handles.add(handle);
        self.prefetch_siblings(ino);
        // `flush` has nothing to report for a handle that only reads the bucket.
        Ok((
            fh,
            OpenHints {
                keep_cache: keep,
                no_flush: true,
                backing,
            },
        ))
    }

    /// `open_as` for writing: the file is staged (fetched first if it has content).
    async fn open_writer(
        self: &Arc<Self>,
        ino: u64,
        truncate: bool,
        passthrough: bool,
    ) -> Result<(u64, OpenHints)> {
        if !truncate {
            if let Some(fh) = self.open_unstaged(ino)? {
                return Ok((fh, OpenHints::default()));
            }
        }
        let keep = if truncate { 0 } else { u64::MAX };
        let staged = self.open_staged(ino, true, keep).await?;
        let access = if passthrough {
            Access::Passthrough
        } else {
            Access::Write
        };
        let fh = self.open_local(ino, staged.clone(), access);
        let mut ready = Ok(());
        if truncate {
            ready = self.w.truncate_staged(ino, &staged, 0);
        }
        if passthrough && ready.is_ok() {
            ready = self.w.begin_passthrough(ino, &staged);
        }
        if let Err(e) = ready {
            let _ = self.release(fh);
            return Err(e);
        }
        let hints = OpenHints {
            backing: passthrough.then(|| Backing::Staged(staged)),
            ..OpenHints::default()
        };
        Ok((fh, hints))
    }

    /// A handle on a staged file `WriteBack` has already counted.
    pub(super) fn open_local(&self, ino: u64, staged: Arc<StagedFile>, access: Access) -> u64 {
        self.ns.update(ino, |n| n.opened());
        self.handles.add(Handle::Local {
            ino,
            staged,
            access,
        })
    }

    /// The error of a failed upload of this file, reported at close and fsync.
    pub fn flush(&self, fh: u64) -> Result<()> {
        let h = self.handles.get(fh)?;
        if let Handle::Local {
            ino,
            staged,
            access,
        } = h
        {
            // A writer's close reports a refused upload of what it wrote; a reader's never
            // fails for it (`cat` of a file the store refused reported EIO, issue 47).
            if let Some(e) = access
                .writes()
                .then(|| self.wb.error(ino, &staged))
                .flatten()
            {
                return Err(FsError::Upload(e));
            }
            if self.cfg.local_durability && access.writes() {
                // What was written is on the disk, and the record that uploads it after
                // a crash, before close() returns.
                staged.sync_local()?;
            }
        }
        Ok(())
    }

    /// Closes a handle; the last writer of a changed file starts its upload.
    pub fn release(self: &Arc<Self>, fh: u64) -> Result<()> {
        let h = self.handles.take(fh)?;
        match h {
            Handle::Remote { ino, reader, .. } | Handle::Unstaged { ino, reader, .. } => {
                self.prefetch.close(&reader);
                self.ns.closed(ino);
            }
            Handle::Empty { ino } => self.ns.closed(ino),
            Handle::Local {
                ino,
                staged,
                access,
            } => {
                if access == Access::Passthrough {
                    self.wb.end_passthrough(ino, &staged);
                }
                self.w.release_staged(ino, &staged, access.writes())
            }
        }
        Ok(())
    }

    /// Up to `len` bytes at `off` of an open file, from the staged copy, the cache or the
    /// store (with read-ahead).
    pub async fn read(self: &Arc<Self>, fh: u64, off: u64, len: u32) -> Result<Bytes> {
        match self.handles.get(fh)? {
            Handle::Remote { reader, .. } => self.prefetch.read(&reader, off, len).await,
            Handle::Empty { .. } => Ok(Bytes::new()),
            // Staged by another handle meanwhile: its writes are what this one reads.
            Handle::Unstaged { ino, .. } if self.wb.stat(ino).is_some() => {
                let staged = self.stage(fh, u64::MAX).await?;
                Ok(Bytes::from(self.wb.read(
                    ino,
                    &staged,
                    off,
                    len as usize,
                )?))
            }
            Handle::Unstaged { reader, .. } => self.prefetch.read(&reader, off, len).await,
            Handle::Local { ino, staged, .. } => {
                let data = self.wb.read(ino, &staged, off, len as usize)?;
                Ok(Bytes::from(data))
            }
        }
    }

    /// A reader that opens a directory's files one after another in listing order (cp -r,
    /// cat *, tar) gets the next small files fetched in parallel ahead of it: many small
    /// files then come as fast as one big one.
    pub(super) fn prefetch_siblings(&self, ino: u64) {
        let (window, part) = (self.cfg.max_readahead, self.cfg.part_size);
        let todo = self.ns.next_siblings(ino, window, part);
        for (path, e) in todo {
            let etag = e
                .etag
                .as_deref()
                .filter(|x| !x.is_empty())
                .map(String::from);
            self.prefetch.object(self.keys.key(&path), etag, e.size);
        }
    }
}
