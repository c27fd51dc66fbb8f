//! flowfs-fs: the file system core (namespace, reads with read-ahead, disk cache) and
//! its FUSE adapter. Only `fuse` names fuser; everything else is testable without it.

#![warn(missing_docs)]

mod budget;
mod cache;
mod config;
mod dirlock;
mod error;
mod fs;
mod fuse;
mod inode;
mod prefetch;
pub mod units;
mod wait;
mod writeback;

// The metadata convention (s3fs-fuse's attributes, flowfs's symlinks) is the client's.
use flowfs_client::meta;

pub use cache::{admin, disk_space, Admit, DiskSpace, Squeezed};
pub use config::{FsConfig, MetaHeads};
pub use error::{FsError, Result};
pub use fs::{
    Attr, AttrChanges, Backing, BackingKey, CopyRange, DirItem, Failure, Fs, OpenHints, OpenMode,
    PendingFile, PendingState, ReadAhead, Recovery, Status, WalkStats, XattrMode,
};
pub use fuse::{FuseAdapter, FuseOpCounts, Op as FuseOp, OpStats};
pub use inode::{Kind, ROOT};
pub use prefetch::{AheadStats, ReadStats, Warmer};
pub use writeback::JournalCounts;
