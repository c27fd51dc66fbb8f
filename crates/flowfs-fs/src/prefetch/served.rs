//! How reads of this mount were answered: at once from what was local (the node cache's
//! data file, or fetched ranges in memory), or after waiting for the store; the bytes
//! of each and the time spent waiting. Counted in `Prefetcher::read`; the binary turns
//! them into metrics and the cost report's `cache_bytes_served`. Reads the kernel
//! serves itself (its page cache, FUSE passthrough) never reach here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The counts since the mount started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Reads answered from local bytes at the first look.
    pub hits: u64,
    /// Their bytes.
    pub hit_bytes: u64,
    /// Reads that waited for a GET (theirs, another reader's or another process's).
    pub misses: u64,
    /// Their bytes.
    pub miss_bytes: u64,
    /// Time those reads waited, summed.
    pub wait_micros: u64,
    /// GETs that waited for another process (sharing the cache dir) fetching some of
    /// their bytes, rather than fetching them twice.
    pub other_process_waits: u64,
    /// Blocks of the node cache this process evicted (1 MiB each at most), and their
    /// bytes.
    pub evicted_blocks: u64,
    /// Their bytes.
    pub evicted_bytes: u64,
    /// Bytes fetched and handed to their readers without being written to the node
    /// cache, for not being admitted (`--cache-admit`).
    pub not_admitted_bytes: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Served {
    hits: AtomicU64,
    hit_bytes: AtomicU64,
    misses: AtomicU64,
    miss_bytes: AtomicU64,
    wait_micros: AtomicU64,
    other_process_waits: AtomicU64,
}

impl Served {
    pub(crate) fn waited_other_process(&self) {
        self.other_process_waits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn hit(&self, bytes: usize) {
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.hit_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn waited(&self, bytes: usize, waited: Duration) {
        self.misses.fetch_add(1, Ordering::Relaxed);
        self.miss_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        let micros = waited.as_micros().min(u64::MAX as u128) as u64;
        self.wait_micros.fetch_add(micros, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> ReadStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ReadStats {
            hits: l(&self.hits),
            hit_bytes: l(&self.hit_bytes),
            misses: l(&self.misses),
            miss_bytes: l(&self.miss_bytes),
            wait_micros: l(&self.wait_micros),
            other_process_waits: l(&self.other_process_waits),
            // The cache's own counts (prefetch/mod.rs `read_stats` fills them in).
            evicted_blocks: 0,
            evicted_bytes: 0,
            not_admitted_bytes: 0,
        }
    }
}
