//! Listings fetched ahead of a directory walk (`find`, `du`, `ls -lR`, `rsync`). A walk
//! reads directory after directory, each a LIST away: at S3's 20 ms per request, `find`
//! over 200 directories spent 5.5 s against s5cmd's 0.83 s for one flat listing of the
//! same 10,000 keys (issue 27). When a directory is read from its start, the listings
//! of its first subdirectories and of the directories after it in its parent are
//! fetched ahead, a bounded number at once, so that the walker finds them in memory.
//!
//! A file created in a directory never listed (one that was in the bucket before) lists
//! that directory ahead of the creates that follow, the same way (lookup.rs,
//! `list_unlisted_behind`).
//!
//! Bounds: at most `AHEAD` subdirectories and `AHEAD` following siblings per directory
//! read, `LISTS` LISTs in flight and `QUEUED` listings waiting over the whole mount, and
//! one page of keys (1,000) per listing fetched ahead: a bigger directory is listed when
//! the walker gets there, so a walk's waste is at most a LIST per directory it skips.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Semaphore;

use crate::inode::Listing;

use super::pages::PAGE;
use super::Fs;
use super::Listings;

/// Directories listed ahead per directory read: its first subdirectories, and as many
/// of the directories that follow it in its parent.
pub(super) const AHEAD: usize = 32;
/// LISTs in flight for walks over the whole mount (the GETs' budget is separate).
const LISTS: usize = 16;
/// Listings waiting for one of `LISTS` at most; more are not asked for.
const QUEUED: usize = 256;

/// What the walks of a mount have in flight.
pub(super) struct Walks {
    lists: Arc<Semaphore>,
    queue: Mutex<Queue>,
    /// Woken when the last queued listing ends.
    idle: tokio::sync::Notify,
}

/// The directories queued or being listed ahead, and what was listed so far.
#[derive(Default)]
struct Queue {
    dirs: HashSet<u64>,
    stats: WalkStats,
}

/// Listings fetched ahead of walks, for `flowfs status`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WalkStats {
    /// Directories listed ahead.
    pub listed: u64,
    /// Of those, too big for one page and not kept.
    pub too_big: u64,
}

impl Default for Walks {
    fn default() -> Walks {
        Walks {
            lists: Arc::new(Semaphore::new(LISTS)),
            queue: Mutex::default(),
            idle: tokio::sync::Notify::new(),
        }
    }
}

impl Walks {
    /// Takes `ino` into the queue, unless it is there already or the queue is full.
    fn enqueue(&self, ino: u64) -> bool {
        let mut q = self.queue.lock();
        q.dirs.len() < QUEUED && q.dirs.insert(ino)
    }

    fn done(&self, ino: u64, kept: bool) {
        let mut q = self.queue.lock();
        q.stats.listed += 1;
        q.stats.too_big += u64::from(!kept);
        q.dirs.remove(&ino);
        if q.dirs.is_empty() {
            self.idle.notify_waiters();
        }
    }

    /// Returns once no listing is queued or in flight.
    async fn settled(&self) {
        loop {
            let idle = self.idle.notified();
            if self.queue.lock().dirs.is_empty() {
                return;
            }
            idle.await;
        }
    }

    fn stats(&self) -> WalkStats {
        self.queue.lock().stats
    }
}

/// What a mount fetched ahead of its readers and walkers, for `flowfs status`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReadAhead {
    /// Directories listed ahead of walks.
    pub walks: WalkStats,
    /// Small files fetched ahead of a reader of their directory, and how many it read.
    pub files: crate::prefetch::AheadStats,
}

impl Fs {
    /// What this mount fetched ahead since it started.
    pub fn read_ahead(&self) -> ReadAhead {
        ReadAhead {
            walks: self.ns.walks().stats(),
            files: self.prefetch.ahead_stats(),
        }
    }

    /// How this mount's reads were answered since it started.
    pub fn read_stats(&self) -> crate::ReadStats {
        self.prefetch.read_stats()
    }

    /// Returns once the listings fetched ahead of walks so far have ended (for tests
    /// and benchmarks that count requests).
    pub async fn read_ahead_settled(&self) {
        self.ns.walks().settled().await;
    }
}

impl Listings {
    /// Directory `ino` is read from its start with `listing`: lists ahead the
    /// directories a walk reads next (module comment).
    pub(super) fn walk_ahead(self: &Arc<Self>, ino: u64, listing: &Listing) {
        if self.cfg.metadata_ttl.is_zero() {
            return; // no listing is used twice: one fetched ahead would be waste
        }
        let todo = self.ns.dirs_ahead(ino, listing, self.cfg.metadata_ttl);
        for dir in todo {
            self.list_ahead(dir, 1, false);
        }
    }

    /// Lists `dir` in a task of its own, up to `max_pages` pages, one of the mount's
    /// bounded listings ahead (`LISTS` at once; `read_ahead_settled` awaits them); a
    /// directory bigger than that is noted as too big to list again when `note_too_big`.
    /// Nothing is done when `dir` is queued already or the queue is full.
    pub(super) fn list_ahead(self: &Arc<Self>, dir: u64, max_pages: usize, note_too_big: bool) {
        if !self.ns.walks().enqueue(dir) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let kept = match me.ns.walks().lists.clone().acquire_owned().await {
                Ok(_permit) => me.listing_within(dir, max_pages).await,
                Err(_) => Ok(None),
            };
            match &kept {
                Err(e) => tracing::debug!(dir, "listing ahead failed: {e}"),
                Ok(None) if note_too_big => me.ns.too_big_to_list(dir, max_pages * PAGE + 1),
                Ok(_) => {}
            }
            me.ns.walks().done(dir, matches!(kept, Ok(Some(_))));
        });
    }
}
