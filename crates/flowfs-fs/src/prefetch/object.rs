//! A whole object fetched ahead of any reader: the next small files of a directory read
//! in listing order (which ones is the namespace's choice, fs/open.rs).

use std::sync::Arc;

use super::gets::PIECE;
use super::Prefetcher;

impl Prefetcher {
    /// Fetches all `size` bytes of `key` at `etag` (none: any version) into the cache
    /// unless they are there or on their way, in GETs of at most one part. What is
    /// fetched waits in memory (within its budget) for the reader that opens it next.
    /// A failure is only logged: that reader fetches again.
    pub(crate) fn object(self: &Arc<Self>, key: String, etag: Option<String>, size: u64) {
        let obj = self.version(key, etag, size);
        self.cache.fetched_ahead(&obj.entry);
        if self.cache.ahead_packed(&obj.entry, 2 * self.part_size) {
            self.cache.release(&obj.entry);
            return;
        }
        // Bytes not admitted wait in memory only: none are fetched ahead beyond its
        // budget (pushed out unread, they were fetched again); its reader fetches it.
        let Some(promised) = self.cache.room_ahead(&obj.entry, 2 * self.part_size) else {
            self.cache.release(&obj.entry);
            return;
        };
        let claim = (self.cache).claim(&obj.entry, 0, obj.entry.chunks(), PIECE);
        if !claim.start.is_empty() {
            self.ahead.lock().fetched(&obj.key, obj.size);
        }
        let mut waits: Vec<_> = claim.wait.into_iter().map(|w| w.2).collect();
        waits.extend(claim.start.iter().map(|p| p.fetch().clone()));
        self.spawn_gets(&obj, claim.start, self.sizing.part_run());
        // The entry stays open until its bytes are in, as a handle would keep it.
        let me = self.clone();
        tokio::spawn(async move {
            for w in waits {
                let _ = w.wait().await;
            }
            me.cache.release(&obj.entry);
            me.cache.unpromise(promised);
        });
    }
}
