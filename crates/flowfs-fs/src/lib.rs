//! flowfs-fs: the file system core (namespace, reads with read-ahead, disk cache) and
//! its FUSE adapter. Only `fuse` names fuser; everything else is testable without it.

pub mod cache;
pub mod config;
pub mod error;
pub mod fs;
pub mod fuse;
pub mod inode;
pub mod read;
pub mod stamp;
pub mod writeback;

pub use config::FsConfig;
pub use error::{FsError, Result};
pub use fs::{Attr, DirItem, Failure, Fs, OpenHints, PendingFile, PendingState, Recovery, Status};
pub use inode::Kind;
