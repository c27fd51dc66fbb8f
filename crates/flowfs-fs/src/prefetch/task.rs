//! The GET task: one ranged GET for consecutive claimed pieces.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use flowfs_client::ObjectClient;

use crate::cache::{Claimed, Delivered, FetchLock, CHUNK};
use crate::error::{FsError, Result};

use super::{Object, Prefetcher};

/// The longest a GET waits for another process fetching some of its chunks: past it, the
/// bytes are fetched again and not cached (that process may be stuck).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

impl Prefetcher {
    /// One GET for consecutive pieces. Each piece is handed to its readers as soon as its
    /// bytes are in, and written to the cache file while the rest is still arriving.
    pub(super) fn spawn_get(self: &Arc<Self>, obj: &Arc<Object>, pieces: Vec<Claimed>) {
        let me = self.clone();
        let obj = obj.clone();
        tokio::spawn(async move {
            let mut left = VecDeque::from(pieces);
            if let Err(e) = me.get(&obj, &mut left).await {
                tracing::warn!(key = %obj.key, "read failed: {e}");
                Claimed::fail_all(left, e);
            }
        });
    }

    /// Locks the chunks `[c0, c1)` of a GET across processes (cache/entry/ `FetchLock`):
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
        self.served.waited_other_process();
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

    /// Sends the GET and stores what it brings. `left` holds the pieces not yet handed
    /// over (their readers are woken by their store, whatever happens to the rest).
    async fn get(self: &Arc<Self>, obj: &Arc<Object>, left: &mut VecDeque<Claimed>) -> Result<()> {
        let (c0, c1) = (left[0].chunks().0, left[left.len() - 1].chunks().1);
        let off_disk = self.cache.keeps_off_disk(&obj.entry);
        let mut lock = match off_disk {
            true => None,
            false => self.lock_fetch(obj, c0, c1).await,
        };
        if let Some(l) = &lock {
            skip_present(l, left);
            if left.is_empty() {
                return Ok(());
            }
        }
        let start = left[0].chunks().0 * CHUNK;
        let cuts: Vec<u64> = (left.iter())
            .map(|p| (p.chunks().1 * CHUNK).min(obj.size))
            .collect();
        let _permit = (self.gets.acquire(cuts[cuts.len() - 1] - start))
            .await
            .map_err(|e| FsError::Internal(format!("GET permits: {e}")))?;
        let (pieces, mut stores) = (left.len(), Vec::with_capacity(left.len()));
        // A small version fetched whole off the disk is packed once all of it is in, if
        // it is admitted by then (cache/small.rs); not if a piece went to its files (the
        // memory budget could not keep it). Its pieces' claims end after that.
        let whole = off_disk && start == 0 && cuts[cuts.len() - 1] == obj.size;
        let mut held = Vec::new();
        let mut sink = |i: usize, data: Bytes| {
            // Pieces arrive in order, each once: the next one is the first left.
            debug_assert_eq!(i, pieces - left.len());
            let Some(p) = left.pop_front() else {
                return;
            };
            let delivered = self.cache.deliver(p, data, off_disk);
            let memory_only = delivered.in_memory_only();
            if memory_only && whole {
                held.push(delivered);
                return;
            }
            if memory_only {
                // Nothing to write: no hand-off to a blocking thread.
                delivered.skip();
                return;
            }
            // The cache write is blocking file I/O (it may wait for the disk under dirty
            // page throttling): not on an async worker, where it would hold up every
            // FUSE request behind it.
            let (me, lock) = (self.clone(), lock.clone());
            stores.push(tokio::task::spawn_blocking(move || {
                if let Err(e) = delivered.store(lock.as_deref()) {
                    // A full or broken cache disk costs the cache, not the read: the
                    // bytes are in memory for the readers waiting on them, later ones
                    // fetch again.
                    me.cache_write_failed(&e);
                }
            }));
        };
        let got = send_get(&*self.client, obj, start, &cuts, &mut sink).await;
        // The permit (and the lock) are held until the pieces are on disk: the permit
        // bounds the memory of downloaded bytes waiting for a slow cache disk too.
        if got.is_ok() && held.len() == pieces && self.cache.packs(&obj.entry) {
            stores.push(tokio::task::spawn_blocking(move || Delivered::pack(held)));
        } else {
            held.into_iter().for_each(Delivered::skip);
        }
        for s in stores {
            s.await
                .map_err(|e| FsError::Internal(format!("cache write task: {e}")))?;
        }
        // The chunks it held can be evicted now, if the directory is over its limit (a
        // fetch kept off the disk held none: no hand-off to the blocking pool, whose
        // thread and statfs were a third of a read-once small file's system calls).
        if lock.take().is_some() {
            let cache = self.cache.clone();
            drop(tokio::task::spawn_blocking(move || cache.evict()));
        }
        got.map_err(FsError::from)
    }
}

/// Under the fetch lock, gives up the leading and trailing pieces that another process
/// fetched meanwhile (their readers read the file); pieces between them are fetched again
/// with the rest, one GET.
fn skip_present(lock: &FetchLock, left: &mut VecDeque<Claimed>) {
    let c0 = left[0].chunks().0;
    let have = lock.present();
    let full = |p: &Claimed| {
        let (a, b) = p.chunks();
        (a..b).all(|c| have[(c - c0) as usize])
    };
    while left.front().is_some_and(full) {
        left.pop_front();
    }
    while left.back().is_some_and(full) {
        left.pop_back();
    }
}

/// One GET of `[start, cuts.last())` of `obj`; the whole object's is checked against the
/// store's checksum before any piece is handed over (issue 49).
async fn send_get(
    client: &dyn ObjectClient,
    obj: &Object,
    start: u64,
    cuts: &[u64],
    sink: &mut (dyn FnMut(usize, Bytes) + Send),
) -> flowfs_client::Result<()> {
    let src = flowfs_client::Version::new(&obj.key, obj.etag.as_deref());
    if start == 0 && cuts.last() == Some(&obj.size) {
        return client.get_whole_pieces(src, cuts, sink).await;
    }
    client.get_range_pieces(src.pieces(start, cuts), sink).await
}
