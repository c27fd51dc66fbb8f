//! Files the kernel may serve itself (FUSE passthrough): the local file behind an open
//! file that the adapter can hand to the kernel, and what a writer served that way
//! changes in the write-back bookkeeping (writeback/passthrough.rs). Whether an open is
//! served that way is the adapter's choice (fuse/passthrough.rs); the core only offers
//! the file and is told.

use std::fs::File;
use std::sync::Arc;

use crate::cache::Pinned;
use crate::error::Result;
use crate::writeback::StagedFile;

use super::WritePath;

/// How an open handle on a staged file uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    Read,
    /// Writes arrive as `write` calls.
    Write,
    /// A writer whose writes the kernel sends to the staged file itself.
    Passthrough,
}

impl Access {
    pub(super) fn writes(self) -> bool {
        self != Access::Read
    }
}

/// A local file holding exactly an open file's bytes, which the kernel may read and
/// write in place of flowfs (FUSE passthrough).
#[derive(Clone)]
pub enum Backing {
    /// The file's staged copy (written here, not yet uploaded or still open).
    Staged(Arc<StagedFile>),
    /// The cache's data file of the object version an open reads, every byte of it
    /// present and pinned there while the handle is open; `ino`: its inode number.
    Cached {
        /// The pin: no eviction punches the file while it lives.
        pin: Arc<Pinned>,
        /// The data file's inode number.
        ino: u64,
    },
}

/// Which local file a `Backing` is: every open of one inode served by passthrough must
/// name the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackingKey {
    /// A staged file, by its id.
    Staged(u64),
    /// A cache data file, by its inode number.
    Cached(u64),
}

impl Backing {
    /// The open file the kernel is handed.
    pub fn file(&self) -> &File {
        match self {
            Backing::Staged(s) => &s.file,
            Backing::Cached { pin, .. } => pin.file(),
        }
    }

    /// Which file it is.
    pub fn key(&self) -> BackingKey {
        match self {
            Backing::Staged(s) => BackingKey::Staged(s.id),
            Backing::Cached { ino, .. } => BackingKey::Cached(*ino),
        }
    }
}

impl std::fmt::Debug for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.key())
    }
}

impl Backing {
    /// The pinned cached bytes of a reader (`Prefetcher::pin`) as a backing file.
    pub(super) fn cached(pin: Pinned) -> Option<Backing> {
        use std::os::unix::fs::MetadataExt;
        let ino = pin.file().metadata().ok()?.ino();
        Some(Backing::Cached {
            pin: Arc::new(pin),
            ino,
        })
    }
}

impl WritePath {
    /// A writer of `ino`'s `staged` file will be served by passthrough: its changes are
    /// journaled before it makes any.
    pub(super) fn begin_passthrough(&self, ino: u64, staged: &Arc<StagedFile>) -> Result<()> {
        if self.wb.begin_passthrough(ino, staged)? {
            self.journal(ino)?;
        }
        Ok(())
    }
}
