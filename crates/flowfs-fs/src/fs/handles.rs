//! The open handles of the mount: files and directories by handle number. The one owner
//! of the handle tables; each method takes its table's lock once and does no I/O under it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::passthrough::{Access, Backing};
use crate::error::{FsError, Result};
use crate::inode::Entry;
use crate::prefetch::Reader;
use crate::writeback::StagedFile;

#[derive(Clone)]
pub(super) enum Handle {
    /// Reads of an object through the cache; `_backing`: its cached bytes, pinned (held,
    /// never read) as long as the handle lives, while the kernel reads them itself.
    Remote {
        ino: u64,
        reader: Arc<Reader>,
        _backing: Option<Backing>,
    },
    /// A reader of an empty object: nothing to fetch, so no cache entry either (making
    /// one costs five file system calls in the cache dir; issue 27).
    Empty { ino: u64 },
    /// A writer of an object not staged yet (opened without O_TRUNC): it reads the
    /// bucket through `reader` until its first change stages the object (unstaged.rs).
    /// `ahead`: the object is a copy made on the server ahead of the calls that ask for it.
    Unstaged {
        ino: u64,
        reader: Arc<Reader>,
        ahead: Option<Ahead>,
    },
    /// A file whose content is staged on local disk.
    Local {
        ino: u64,
        staged: Arc<StagedFile>,
        access: Access,
    },
}

/// A whole object copied on the server at the first of the `copy_file_range` calls that ask
/// for it, when that call asked for less than all (the kernel's cap, the JDK's 2 GiB
/// chunks; fs/copy.rs): `acked` of its `size` bytes answered so far, from version `etag`
/// of `key`. Until `acked` reaches `size`, the file is its first `acked` bytes.
#[derive(Clone, Debug)]
pub(super) struct Ahead {
    pub(super) key: String,
    pub(super) etag: String,
    pub(super) acked: u64,
    pub(super) size: u64,
}

/// A directory's entries in listing order, indexed by readdir's offset.
pub(super) type Items = Vec<(Arc<str>, Entry)>;

pub(super) struct DirHandle {
    pub(super) ino: u64,
    pub(super) items: Option<Arc<Items>>,
    /// When the listing behind `items` was taken.
    pub(super) at: Option<Instant>,
}

/// A directory handle; readdirs of one handle take their turns on it.
pub(super) type SharedDir = Arc<tokio::sync::Mutex<DirHandle>>;

pub(super) struct Handles {
    files: Mutex<HashMap<u64, Handle>>,
    dirs: Mutex<HashMap<u64, SharedDir>>,
    next: AtomicU64,
}

impl Default for Handles {
    fn default() -> Self {
        Handles {
            files: Mutex::default(),
            dirs: Mutex::default(),
            next: AtomicU64::new(1),
        }
    }
}

impl Handles {
    fn number(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Adds an open file; returns its handle number.
    pub(super) fn add(&self, h: Handle) -> u64 {
        let fh = self.number();
        self.files.lock().insert(fh, h);
        fh
    }

    pub(super) fn get(&self, fh: u64) -> Result<Handle> {
        self.files
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(FsError::BadHandle)
    }

    /// Removes an open file (its release).
    pub(super) fn take(&self, fh: u64) -> Result<Handle> {
        self.files.lock().remove(&fh).ok_or(FsError::BadHandle)
    }

    /// Whether `fh` is a writer that has not staged its object yet.
    pub(super) fn is_unstaged(&self, fh: u64) -> bool {
        matches!(self.files.lock().get(&fh), Some(Handle::Unstaged { .. }))
    }

    /// The inode and staged file `fh` writes, if it is a writer of one.
    pub(super) fn writer(&self, fh: u64) -> Option<(u64, Arc<StagedFile>)> {
        match self.files.lock().get(&fh) {
            Some(Handle::Local {
                ino,
                staged,
                access,
            }) if access.writes() => Some((*ino, staged.clone())),
            _ => None,
        }
    }

    /// The reader of the object version `fh` reads from the bucket, if it reads one
    /// (a reader, or a writer that has not staged it).
    pub(super) fn bucket_reader(&self, fh: u64) -> Option<(u64, Arc<Reader>)> {
        match self.files.lock().get(&fh) {
            Some(Handle::Remote { ino, reader, .. } | Handle::Unstaged { ino, reader, .. }) => {
                Some((*ino, reader.clone()))
            }
            _ => None,
        }
    }

    /// The inode and staged file `fh` uses as `access` says: a reader of a file written
    /// on this node (`Read`), a writer through `write` calls (`Write`), or one whose
    /// writes the kernel makes (`Passthrough`).
    pub(super) fn local(&self, access: Access, fh: u64) -> Option<(u64, Arc<StagedFile>)> {
        match self.files.lock().get(&fh) {
            Some(Handle::Local {
                ino,
                staged,
                access: a,
            }) if *a == access => Some((*ino, staged.clone())),
            _ => None,
        }
    }

    /// Makes writer `fh` of `staged` a writer that reads the bucket through `reader`
    /// until its next change (its staged file was replaced by a copy on the server).
    pub(super) fn unstage(
        &self,
        fh: u64,
        staged: &Arc<StagedFile>,
        reader: Arc<Reader>,
        ahead: Option<Ahead>,
    ) -> bool {
        let mut files = self.files.lock();
        let Some(h) = files.get_mut(&fh) else {
            return false;
        };
        let ino = match h {
            Handle::Local { ino, staged: s, .. } if Arc::ptr_eq(s, staged) => *ino,
            _ => return false,
        };
        *h = Handle::Unstaged { ino, reader, ahead };
        true
    }

    /// The inode and copy made ahead of unstaged writer `fh`, if it has one.
    pub(super) fn ahead(&self, fh: u64) -> Option<(u64, Ahead)> {
        match self.files.lock().get(&fh) {
            Some(Handle::Unstaged {
                ino,
                ahead: Some(a),
                ..
            }) => Some((*ino, a.clone())),
            _ => None,
        }
    }

    /// `n` more bytes of `fh`'s copy made ahead are answered; the copy as it stands now
    /// (`None` once whole: the handle has none any more).
    pub(super) fn advance(&self, fh: u64, n: u64) -> Option<Ahead> {
        let mut files = self.files.lock();
        let Some(Handle::Unstaged { ahead, .. }) = files.get_mut(&fh) else {
            return None;
        };
        let a = ahead.as_mut()?;
        a.acked = (a.acked + n).min(a.size);
        let now = a.clone();
        if a.acked == a.size {
            *ahead = None;
        }
        Some(now)
    }

    /// Makes unstaged writer `fh` a writer of `staged`; false if it is not an unstaged
    /// writer (any more).
    pub(super) fn staged(&self, fh: u64, ino: u64, staged: &Arc<StagedFile>) -> bool {
        let mut files = self.files.lock();
        match files.get_mut(&fh) {
            Some(h @ Handle::Unstaged { .. }) => {
                let access = Access::Write;
                let staged = staged.clone();
                *h = Handle::Local {
                    ino,
                    staged,
                    access,
                };
                true
            }
            _ => false,
        }
    }

    /// A handle for reading directory `ino`; its listing is taken at the first readdir.
    pub(super) fn add_dir(&self, ino: u64) -> u64 {
        let fh = self.number();
        let dir = DirHandle {
            ino,
            items: None,
            at: None,
        };
        let dir = Arc::new(tokio::sync::Mutex::new(dir));
        self.dirs.lock().insert(fh, dir);
        fh
    }

    pub(super) fn dir(&self, fh: u64) -> Result<SharedDir> {
        self.dirs.lock().get(&fh).cloned().ok_or(FsError::BadHandle)
    }

    pub(super) fn remove_dir(&self, fh: u64) {
        self.dirs.lock().remove(&fh);
    }
}
