//! What can go wrong in the cache. None of it fails a read: a reader whose bytes could
//! not be cached has them from memory, and later readers fetch again.

use std::io;
use std::sync::Arc;

use thiserror::Error;

/// Why the cache could not do what it was asked (lock, look at, or store chunks).
#[derive(Debug, Error, Clone)]
pub enum CacheError {
    /// The unmount closed the cache while a fetch still used it.
    #[error("the cache is closed (unmounted)")]
    Closed,
    /// Fetched bytes could not be stored (another process held their chunks too long).
    #[error("{bytes} bytes were read but could not be cached: {why}")]
    NotCached {
        /// How many bytes were read and not cached.
        bytes: u64,
        /// Why.
        why: &'static str,
    },
    /// The cache's disk has less free than `--cache-min-free` keeps, which leaves the
    /// cache less than it was asked to hold.
    #[error(
        "{bytes} bytes were read but not cached: {room}; free space on that disk, or \
         lower --cache-min-free"
    )]
    NoRoom {
        /// How many bytes were read and not cached.
        bytes: u64,
        /// What the free-space floor leaves.
        room: Squeezed,
    },
    /// The cache's disk failed; `what` says at which step ("cache write", "cache map").
    #[error("{what}: {source}")]
    Disk {
        what: &'static str,
        #[source]
        source: Arc<io::Error>,
    },
}

/// What the free-space floor leaves the cache when it leaves less than `--cache-size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Squeezed {
    /// Bytes free on the cache's disk.
    pub avail: u64,
    /// Bytes `--cache-min-free` keeps free.
    pub min_free: u64,
    /// What the cache may hold now.
    pub limit: u64,
}

impl std::fmt::Display for Squeezed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::units::human;
        write!(
            f,
            "the cache's disk has {} free and --cache-min-free keeps {}, which leaves the cache {}",
            human(self.avail),
            human(self.min_free),
            human(self.limit)
        )
    }
}

impl CacheError {
    pub(super) fn disk(what: &'static str) -> impl FnOnce(io::Error) -> CacheError {
        move |source| CacheError::Disk {
            what,
            source: Arc::new(source),
        }
    }
}
