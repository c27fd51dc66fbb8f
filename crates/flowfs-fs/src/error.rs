//! The one table from file-system failures to errno values.

use flowfs_client::ClientError;
use thiserror::Error;

#[derive(Debug, Error, Clone)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("file exists")]
    Exists,
    #[error("read-only file system")]
    ReadOnly,
    #[error("not supported: {0}")]
    NotSupported(&'static str),
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("file name too long")]
    NameTooLong,
    #[error("bad file handle")]
    BadHandle,
    #[error("the object changed on the server while it was open")]
    Stale,
    #[error("access denied: {0}")]
    AccessDenied(String),
    #[error("no space left on the local disk: {0}")]
    NoSpace(String),
    #[error("I/O error: {0}")]
    Io(String),
}

impl FsError {
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::Exists => libc::EEXIST,
            FsError::ReadOnly => libc::EROFS,
            FsError::NotSupported(_) => libc::ENOTSUP,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::BadHandle => libc::EBADF,
            FsError::Stale => libc::ESTALE,
            FsError::AccessDenied(_) => libc::EACCES,
            FsError::NoSpace(_) => libc::ENOSPC,
            FsError::Io(_) => libc::EIO,
        }
    }
}

impl From<ClientError> for FsError {
    fn from(e: ClientError) -> FsError {
        match e {
            ClientError::NotFound(_) => FsError::NotFound,
            ClientError::AccessDenied(m) => FsError::AccessDenied(m),
            ClientError::Precondition(_) => FsError::Stale,
            other => FsError::Io(other.to_string()),
        }
    }
}

impl From<std::io::Error> for FsError {
    fn from(e: std::io::Error) -> FsError {
        // A full staging disk (or quota) is the one local failure a task can act on.
        match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => FsError::NoSpace(e.to_string()),
            _ => FsError::Io(e.to_string()),
        }
    }
}

pub type Result<T> = std::result::Result<T, FsError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_local_disk_is_enospc_other_disk_errors_eio() {
        for (os, want) in [
            (libc::ENOSPC, libc::ENOSPC),
            (libc::EDQUOT, libc::ENOSPC),
            (libc::EIO, libc::EIO),
            (libc::EROFS, libc::EIO),
        ] {
            let e = FsError::from(std::io::Error::from_raw_os_error(os));
            assert_eq!(e.errno(), want, "{e}");
        }
    }
}
