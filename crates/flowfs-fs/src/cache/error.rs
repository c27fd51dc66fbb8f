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
    /// The cache's disk failed; `what` says at which step ("cache write", "cache map").
    #[error("{what}: {source}")]
    Disk {
        what: &'static str,
        #[source]
        source: Arc<io::Error>,
    },
}

impl CacheError {
    pub(super) fn disk(what: &'static str) -> impl FnOnce(io::Error) -> CacheError {
        move |source| CacheError::Disk {
            what,
            source: Arc::new(source),
        }
    }
}
