//! Fetches in flight: one ranged GET (or one eviction punching chunks) that readers of
//! its chunks wait on, the claim that tells a reader which to wait for and which to run
//! itself, and `Claimed`, the owner of one it runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

use super::CacheEntry;
use crate::error::{FsError, Result};

/// One ranged GET in flight; every reader that needs its chunks waits on it.
#[derive(Default)]
pub struct Fetch {
    notify: Notify,
    /// The bytes are in memory (readers can take them) but maybe not yet in the file.
    ready: AtomicBool,
    result: OnceLock<Result<()>>,
}

impl Fetch {
    /// Until the bytes are in the data file (or the fetch failed).
    pub async fn wait(&self) -> Result<()> {
        self.wait_for(false).await
    }

    /// Until the bytes can be read, from memory if not yet from the file.
    pub async fn wait_ready(&self) -> Result<()> {
        self.wait_for(true).await
    }

    async fn wait_for(&self, ready: bool) -> Result<()> {
        loop {
            let notified = self.notify.notified();
            if let Some(r) = self.result.get() {
                return r.clone();
            }
            if ready && self.ready.load(Ordering::Acquire) {
                return Ok(());
            }
            notified.await;
        }
    }

    pub(super) fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub(super) fn finish(&self, r: Result<()>) {
        let _ = self.result.set(r);
        self.notify.notify_waiters();
    }
}

/// What a reader must do to get a chunk range: wait for the fetches already running
/// (start chunk, end chunk, fetch) and run the ones it was handed.
pub struct Claim {
    pub wait: Vec<(u64, u64, Arc<Fetch>)>,
    pub start: Vec<Claimed>,
}

/// Chunks `[c0, c1)` of an entry that this holder must fetch: the one owner of a fetch
/// in flight. Readers of those chunks wait on its `Fetch` until it ends, and it ends
/// only by being dropped (or stored, which drops it): the chunks leave the entry's
/// in-flight map first, then its readers wake, so a woken reader that claims them again
/// starts a new fetch rather than waiting on this one. A holder that fails says so with
/// `fail_all`; one that gives up or stores wakes its readers with `Ok`, and they read
/// from memory or the file, or claim again on a miss.
pub struct Claimed {
    entry: Arc<CacheEntry>,
    c0: u64,
    c1: u64,
    fetch: Arc<Fetch>,
}

impl Claimed {
    pub(super) fn new(entry: Arc<CacheEntry>, c0: u64, c1: u64, fetch: Arc<Fetch>) -> Claimed {
        Claimed {
            entry,
            c0,
            c1,
            fetch,
        }
    }

    /// Its chunks, `[c0, c1)`.
    pub fn chunks(&self) -> (u64, u64) {
        (self.c0, self.c1)
    }

    /// What its readers wait on.
    pub fn fetch(&self) -> &Arc<Fetch> {
        &self.fetch
    }

    pub(super) fn entry(&self) -> &Arc<CacheEntry> {
        &self.entry
    }

    /// Ends every claim of `pieces` (one GET's), then wakes their readers with `e`: a
    /// reader woken by the failure of one piece that fetches again never finds a later
    /// piece of the same GET still claimed (it would wait on it and fail with it,
    /// without a request of its own).
    pub fn fail_all(pieces: impl IntoIterator<Item = Claimed>, e: FsError) {
        let pieces: Vec<Claimed> = pieces.into_iter().collect();
        for p in &pieces {
            p.entry.end_claim(p.c0, p.c1, &p.fetch);
        }
        for p in &pieces {
            p.fetch.finish(Err(e.clone()));
        }
    }
}

impl Drop for Claimed {
    fn drop(&mut self) {
        // Both idempotent: `fail_all` has ended the claim and set the result already.
        self.entry.end_claim(self.c0, self.c1, &self.fetch);
        self.fetch.finish(Ok(()));
    }
}
