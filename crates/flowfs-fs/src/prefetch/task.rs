//! The GET task: one ranged GET for consecutive claimed pieces.

use std::sync::Arc;

use bytes::Bytes;

use crate::cache::CHUNK;
use crate::error::{FsError, Result};

use super::gets::Piece;
use super::{Object, Prefetcher};

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

    /// Sends the GET and stores what it brings; `done` counts the pieces handed over
    /// (their readers are woken by their store, whatever happens to the rest).
    async fn get(
        self: &Arc<Self>,
        obj: &Arc<Object>,
        pieces: &[Piece],
        done: &mut usize,
    ) -> Result<()> {
        let _permit = (self.gets.acquire())
            .await
            .map_err(|e| FsError::Io(e.to_string()))?;
        let start = pieces[0].0 * CHUNK;
        let cuts: Vec<u64> = pieces.iter().map(|p| (p.1 * CHUNK).min(obj.size)).collect();
        let mut stores = Vec::with_capacity(pieces.len());
        let mut sink = |i: usize, data: Bytes| {
            let (c0, c1, f) = pieces[i].clone();
            self.cache.offer(&obj.entry, c0 * CHUNK, data.clone(), &f);
            // The O_DIRECT write waits for the disk: not on an async worker, where it
            // would hold up every FUSE request behind it.
            let (me, entry) = (self.clone(), obj.entry.clone());
            stores.push(tokio::task::spawn_blocking(move || {
                if let Err(e) = me.cache.store(&entry, c0 * CHUNK, &data) {
                    // A full or broken cache disk costs the cache, not the read: the
                    // bytes are in memory for the readers waiting on them, later ones
                    // fetch again.
                    me.cache_write_failed(&e);
                    me.cache.abandon(&entry, c0, c1);
                }
                me.cache.finish(&f, Ok(()));
            }));
            *done = i + 1;
        };
        let got = (self.client)
            .get_range_pieces(&obj.key, start, &cuts, obj.etag.as_deref(), &mut sink)
            .await;
        // The permit is held until the pieces are on disk: it bounds the memory of
        // downloaded bytes waiting for a slow cache disk too.
        for s in stores {
            s.await.map_err(|e| FsError::Io(e.to_string()))?;
        }
        got.map_err(FsError::from)
    }
}
