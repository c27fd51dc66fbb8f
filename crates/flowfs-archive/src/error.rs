//! What can go wrong with an archive, each with its cause kept.

use flowfs_client::ClientError;
use thiserror::Error;

/// Errors of opening or reading an archive.
#[derive(Debug, Error)]
pub enum ArchiveError {
    /// The store failed (the archive is missing, changed, unreachable).
    #[error(transparent)]
    Store(#[from] ClientError),
    /// The bytes are not a tar or a gzip-compressed tar.
    #[error("not a tar archive: {0}")]
    NotAnArchive(String),
    /// The archive is damaged or cut short where the index or a read needed it.
    #[error("corrupt or truncated archive: {0}")]
    Corrupt(#[source] std::io::Error),
    /// The index could not be kept on the cache disk.
    #[error("{what}: {source}")]
    Disk {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A task of ours failed.
    #[error("{0}")]
    Internal(String),
}

impl ArchiveError {
    /// An error of reading the archive's bytes: the store's own error when one is
    /// inside it (the byte stream carries them as I/O errors, the tar crate wraps them
    /// once more), else damage in the archive.
    pub(crate) fn from_io(e: std::io::Error) -> ArchiveError {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = e.get_ref().map(|r| r as _);
        while let Some(c) = cause {
            if let Some(store) = c.downcast_ref::<ClientError>() {
                return ArchiveError::Store(store.clone());
            }
            // An io::Error's `source` is its inner error's source: look at the inner.
            cause = match c.downcast_ref::<std::io::Error>() {
                Some(io) => io.get_ref().map(|r| r as _),
                None => c.source(),
            };
        }
        ArchiveError::Corrupt(e)
    }

    pub(crate) fn disk(what: &'static str, source: std::io::Error) -> ArchiveError {
        ArchiveError::Disk { what, source }
    }
}

impl From<ArchiveError> for ClientError {
    /// What a reader of a member sees: the store's own error as it was; anything about
    /// the archive's bytes as a failure that a retry cannot mend (EIO).
    fn from(e: ArchiveError) -> ClientError {
        match e {
            ArchiveError::Store(c) => c,
            other => ClientError::Other(other.to_string()),
        }
    }
}
