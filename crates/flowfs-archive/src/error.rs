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
