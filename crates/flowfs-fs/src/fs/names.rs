//! The namespace `Fs` routes name operations to: the inode table behind its one lock,
//! the per-inode orders of operations that change a key or rewrite an object in place
//! (locks.rs), the listings fetched ahead of directory walks (walk.rs), and the time the
//! mount started, which directories show (S3 keeps none for them).

use std::time::SystemTime;

use parking_lot::{Mutex, MutexGuard};

use super::locks::Locks;
use super::walk::Walks;
use crate::inode::Inodes;

pub(super) struct Namespace {
    inodes: Mutex<Inodes>,
    locks: Locks,
    walks: Walks,
    started: SystemTime,
}

impl Namespace {
    pub(super) fn new() -> Namespace {
        Namespace {
            inodes: Mutex::new(Inodes::new()),
            locks: Locks::default(),
            walks: Walks::default(),
            started: SystemTime::now(),
        }
    }

    /// The inode table, under its lock: no I/O while it is held (the lock table in
    /// ARCHITECTURE.md).
    pub(super) fn lock(&self) -> MutexGuard<'_, Inodes> {
        self.inodes.lock()
    }

    /// The per-inode orders of renames, unlinks, rewrites and downloads for writing.
    pub(super) fn locks(&self) -> &Locks {
        &self.locks
    }

    /// The listings fetched ahead of directory walks.
    pub(super) fn walks(&self) -> &Walks {
        &self.walks
    }

    /// When the mount started: the time a directory shows.
    pub(super) fn started(&self) -> SystemTime {
        self.started
    }
}
