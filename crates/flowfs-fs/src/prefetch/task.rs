//! The GET task: one ranged GET for consecutive claimed pieces.

use std::sync::Arc;

use bytes::Bytes;

use crate::cache::{FetchLock, CHUNK};
use crate::error::{FsError, Result};

use super::gets::Piece;
use super::{Object, Prefetcher};

/// The longest a GET waits for another process fetching some of its chunks: past it, the
/// bytes are fetched again and not cached (that process may be stuck).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

impl Prefetcher {
    /// One GET for consecutive pieces. Each piece is handed to its readers as soon as its
    /// bytes are in, and written to the cache file while the rest is still arriving.
    pub(super) fn spawn_get(self: &Arc<Self>, obj: &Arc<Object>, pieces: Vec<Piece>) {
        let me = self.clone();
        let obj = obj.clone();
        tokio::spawn(async move {
            let mut done = 0;
            if let Err(e) = me.get(&obj, &pieces, &mut done).await {
                tracing::warn!(key = %obj.key, "read failed: {e}");
                // Every chunk given up before any reader wakes: one woken by the failure
                // of one piece and fetching again never waits on a later piece of this
                // GET, which would fail it without a request.
                for (c0, c1, _) in &pieces[done..] {
                    me.cache.abandon(&obj.entry, *c0, *c1);
                }
                for (_, _, f) in &pieces[done..] {
                    me.cache.finish(f, Err(e.clone()));
                }
            }
        });
    }

    /// Locks the chunks `[c0, c1)` of a GET across processes (entry.rs `FetchLock`):
    /// at once, or after the process fetching some of them is done, within `LOCK_WAIT`.
    /// `None`: fetched without the lock, the bytes are not cached.
    async fn lock_fetch(&self, obj: &Arc<Object>, c0: u64, c1: u64) -> Option<Arc<FetchLock>> {
        match self.cache.lock_fetch(&obj.entry, c0, c1, false) {
            Ok(Some(l)) => return Some(Arc::new(l)),
            Ok(None) => {}
            Err(e) => {
                self.cache_write_failed(&e);
                return None;
            }
        }
        let (cache, entry) = (self.cache.clone(), obj.entry.clone());
        // A blocked thread that outlives the timeout drops its lock as soon as it has it.
        let wait = tokio::task::spawn_blocking(move || cache.lock_fetch(&entry, c0, c1, true));
        match tokio::time::timeout(LOCK_WAIT, wait).await {
            Ok(Ok(Ok(Some(l)))) => Some(Arc::new(l)),
            Ok(Ok(Err(e))) => {
                self.cache_write_failed(&e);
                None
            }
            _ => {
                tracing::warn!(key = %obj.key, "another process fetches these bytes for too long: fetched again, not cached");
                None
            }
        }
    }

    /// Sends the GET and stores what it brings; `done` counts the pieces handed over
    /// (their readers are woken by their store, whatever happens to the rest). Pieces
    /// another process fetched meanwhile are not fetched: their readers read the file.
    async fn get(
        self: &Arc<Self>,
        obj: &Arc<Object>,
        pieces: &[Piece],
        done: &mut usize,
    ) -> Result<()> {
        let c0 = pieces[0].0;
        let lock = self.lock_fetch(obj, c0, pieces[pieces.len() - 1].1).await;
        let (a, b) = match &lock {
            Some(l) => {
                let have = self.cache.present_under(&obj.entry, l)?;
                let full = |p: &Piece| (p.0..p.1).all(|c| have[(c - c0) as usize]);
                for p in pieces.iter().filter(|p| full(p)) {
                    self.cache.abandon(&obj.entry, p.0, p.1);
                    self.cache.finish(&p.2, Ok(()));
                }
                match pieces.iter().position(|p| !full(p)) {
                    None => {
                        *done = pieces.len();
                        return Ok(());
                    }
                    Some(a) => (
                        a,
                        pieces.iter().rposition(|p| !full(p)).map_or(a, |b| b) + 1,
                    ),
                }
            }
            None => (0, pieces.len()),
        };
        *done = a;
        let todo = &pieces[a..b];
        let start = todo[0].0 * CHUNK;
        let cuts: Vec<u64> = todo.iter().map(|p| (p.1 * CHUNK).min(obj.size)).collect();
        let _permit = (self.gets.acquire(cuts[cuts.len() - 1] - start))
            .await
            .map_err(|e| FsError::Internal(format!("GET permits: {e}")))?;
        let mut stores = Vec::with_capacity(todo.len());
        let mut sink = |i: usize, data: Bytes| {
            let (c0, c1, f) = todo[i].clone();
            self.cache.offer(&obj.entry, c0 * CHUNK, data.clone(), &f);
            // The cache write is blocking file I/O (it may wait for the disk under dirty
            // page throttling): not on an async worker, where it would hold up every
            // FUSE request behind it.
            let (me, entry, lock) = (self.clone(), obj.entry.clone(), lock.clone());
            stores.push(tokio::task::spawn_blocking(move || {
                if let Err(e) = me.cache.store(&entry, lock.as_deref(), c0 * CHUNK, &data) {
                    // A full or broken cache disk costs the cache, not the read: the
                    // bytes are in memory for the readers waiting on them, later ones
                    // fetch again.
                    me.cache_write_failed(&e);
                    me.cache.abandon(&entry, c0, c1);
                }
                me.cache.finish(&f, Ok(()));
            }));
            *done = a + i + 1;
        };
        let got = (self.client)
            .get_range_pieces(&obj.key, start, &cuts, obj.etag.as_deref(), &mut sink)
            .await;
        // The permit (and the lock) are held until the pieces are on disk: the permit
        // bounds the memory of downloaded bytes waiting for a slow cache disk too.
        for s in stores {
            s.await
                .map_err(|e| FsError::Internal(format!("cache write task: {e}")))?;
        }
        // The chunks it held can be evicted now, if the directory is over its limit.
        drop(lock);
        let cache = self.cache.clone();
        drop(tokio::task::spawn_blocking(move || cache.evict()));
        got.map_err(FsError::from)
    }
}
