//! The one table from file-system failures to errno values.

use std::sync::Arc;

use flowfs_client::ClientError;
use thiserror::Error;

/// Why a file-system operation failed; each kind has one errno (`errno`).
#[derive(Debug, Error, Clone)]
pub enum FsError {
    /// ENOENT.
    #[error("no such file or directory")]
    NotFound,
    /// ENOTDIR: a path component is a file.
    #[error("not a directory")]
    NotDir,
    /// EISDIR: a file operation on a directory.
    #[error("is a directory")]
    IsDir,
    /// ENOTEMPTY: rmdir of a directory with entries.
    #[error("directory not empty")]
    NotEmpty,
    /// EEXIST: the name is taken.
    #[error("file exists")]
    Exists,
    /// EROFS: the mount is read-only.
    #[error("read-only file system")]
    ReadOnly,
    /// EPERM: an operation this file system does not permit, where the man page names
    /// EPERM for it (`link(2)` of a directory).
    #[error("operation not permitted: {0}")]
    NotPermitted(&'static str),
    /// EMLINK: a file has as many names as it can count (`link`).
    #[error("too many links")]
    TooManyLinks,
    /// ENOTSUP: something object storage cannot do (some flags and modes).
    #[error("not supported: {0}")]
    NotSupported(&'static str),
    /// EINVAL: an argument this file system cannot accept.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// EINVAL: a name the store would change or refuse (its key rules): accepted, the
    /// file would vanish after its upload or never be uploaded.
    #[error("{store} cannot hold the key {key:?}: {}", rule.describe())]
    KeyRefused {
        /// The key the name would have.
        key: String,
        /// The store (`KeyRules::store`).
        store: &'static str,
        /// The rule the name breaks.
        rule: flowfs_client::KeyRule,
    },
    /// ENODATA: no extended attribute of that name.
    #[error("no such attribute")]
    NoAttr,
    /// E2BIG: extended attributes beyond what the object's metadata can hold.
    #[error("attributes too big for the object's metadata: {0}")]
    AttrsTooBig(String),
    /// ERANGE: the caller's buffer is smaller than the answer (getxattr, listxattr).
    #[error("result larger than the buffer given")]
    Range,
    /// ENAMETOOLONG: the key would exceed S3's limit.
    #[error("file name too long")]
    NameTooLong,
    /// EBADF: a handle the kernel should not have.
    #[error("bad file handle")]
    BadHandle,
    /// EBUSY: the file is in a use that excludes this one (passthrough readers of the
    /// cache's file, when it is opened for writing).
    #[error("busy: {0}")]
    Busy(&'static str),
    /// ESTALE: the object changed on the server under an open reader.
    #[error("the object changed on the server while it was open")]
    Stale,
    /// EACCES: the store refused the credentials.
    #[error("access denied: {0}")]
    AccessDenied(String),
    /// ENOSPC: the local disk (staging) is full.
    #[error("no space left on the local disk: {0}")]
    NoSpace(String),
    /// EFBIG: a length past what the staging disk's file system can hold (ext4: 16 TiB;
    /// stress-ng's fsize stressor expects it, issue 26).
    #[error("file too large: {0}")]
    TooBig(String),
    /// EIO: the store failed, after the client's own retries.
    #[error("{0}")]
    Store(#[source] Arc<ClientError>),
    /// EIO: the local disk (cache or staging) failed; `what` says where.
    #[error("{what}: {source}")]
    Disk {
        /// Where: a path, or a part of the cache ("cache map").
        what: String,
        /// What the disk said.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// EIO: the cache failed (closed by the unmount, its disk, bytes it could not keep).
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    /// EIO: what a read needed was evicted again before it was read, four times over.
    #[error("cached data was evicted while being read; raise --cache-size")]
    Evicted,
    /// EIO: the upload of a staged file failed (`KEY: reason`, as `flowfs status` and
    /// the unmount report it); sent again later when the reason may pass.
    #[error(transparent)]
    Upload(#[from] crate::writeback::UploadError),
    /// EIO: a task of this process ended without its answer (a panic, a runtime going
    /// away at unmount); a bug if it happens otherwise.
    #[error("internal: {0}")]
    Internal(String),
}

impl FsError {
    /// The errno the kernel is answered with: the one place that decides it.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::Exists => libc::EEXIST,
            FsError::ReadOnly => libc::EROFS,
            FsError::NotPermitted(_) => libc::EPERM,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::NotSupported(_) => libc::ENOTSUP,
            FsError::Invalid(_) | FsError::KeyRefused { .. } => libc::EINVAL,
            FsError::NoAttr => libc::ENODATA,
            FsError::AttrsTooBig(_) => libc::E2BIG,
            FsError::Range => libc::ERANGE,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::BadHandle => libc::EBADF,
            FsError::Busy(_) => libc::EBUSY,
            FsError::Stale => libc::ESTALE,
            FsError::AccessDenied(_) => libc::EACCES,
            FsError::NoSpace(_) => libc::ENOSPC,
            FsError::TooBig(_) => libc::EFBIG,
            FsError::Store(_)
            | FsError::Disk { .. }
            | FsError::Cache(_)
            | FsError::Evicted
            | FsError::Upload(_)
            | FsError::Internal(_) => libc::EIO,
        }
    }
}

impl From<ClientError> for FsError {
    fn from(e: ClientError) -> FsError {
        match e {
            ClientError::NotFound(_) => FsError::NotFound,
            ClientError::AccessDenied(m) => FsError::AccessDenied(m),
            ClientError::Precondition(_) => FsError::Stale,
            other => FsError::Store(Arc::new(other)),
        }
    }
}

impl From<std::io::Error> for FsError {
    fn from(e: std::io::Error) -> FsError {
        // A full staging disk (or quota) is the one local failure a task can act on.
        match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => FsError::NoSpace(e.to_string()),
            Some(libc::EFBIG) => FsError::TooBig(e.to_string()),
            _ => FsError::Disk {
                what: "local disk".into(),
                source: Arc::new(e),
            },
        }
    }
}

impl FsError {
    /// A local disk failure at `what` (a path or a part of the cache).
    pub fn disk(what: impl Into<String>, source: std::io::Error) -> FsError {
        match FsError::from(source) {
            FsError::Disk { source, .. } => FsError::Disk {
                what: what.into(),
                source,
            },
            other => other,
        }
    }

    /// A download that broke off (a body cut mid-stream, which the client does not send
    /// again itself): fetching once more may succeed. Nothing else is worth a retry
    /// here; a closed cache or a broken disk fails the same way again.
    pub fn may_pass(&self) -> bool {
        matches!(self, FsError::Store(e) if matches!(**e, ClientError::Transient(_) | ClientError::Unreachable(_)))
    }
}

/// The result of every file-system operation.
pub type Result<T> = std::result::Result<T, FsError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_local_disk_is_enospc_a_too_long_file_efbig_other_disk_errors_eio() {
        for (os, want) in [
            (libc::ENOSPC, libc::ENOSPC),
            (libc::EDQUOT, libc::ENOSPC),
            (libc::EFBIG, libc::EFBIG),
            (libc::EIO, libc::EIO),
            (libc::EROFS, libc::EIO),
        ] {
            let e = FsError::from(std::io::Error::from_raw_os_error(os));
            assert_eq!(e.errno(), want, "{e}");
        }
    }
}
