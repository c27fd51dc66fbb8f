//! What the cache keeps of what it fetches, and where (issue 48): the admission of a
//! version at its opens and at fetches ahead (admit.rs decides), the memory budget's room
//! for bytes fetched ahead and not admitted, and small versions packed as records of a
//! segment (small.rs) instead of a file pair each.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{small, Admit, CacheEntry, DiskCache, SMALL};

impl DiskCache {
    /// Sets which fetched bytes are written to disk (`--cache-admit`).
    pub fn with_admission(mut self, admit: Admit) -> DiskCache {
        self.admit = admit;
        self
    }

    /// Bytes fetched by this process and not written, for not being admitted.
    pub fn not_admitted(&self) -> u64 {
        self.not_admitted.load(Ordering::Relaxed)
    }

    /// A reader opened `e` (an open, not a fetch ahead): under `Reuse` its second open on
    /// the node admits it, as does a version already on disk; `explicit` (a prefetch
    /// asked for) admits it under every policy.
    pub fn opened(&self, e: &CacheEntry, explicit: bool) {
        if e.admitted() {
            return;
        }
        if explicit || self.policy_admits(e, true) {
            e.set_admitted(true);
            // What a reader before left in memory would be served and never written
            // (`flowfs cache prefetch` then found the object incomplete): fetched anew.
            self.mem.forget(e.mem());
        }
    }

    /// `e` is fetched ahead of the reader expected to open it next (a directory's next
    /// file): under `Reuse` it is admitted if that open will be its second on the node.
    pub fn fetched_ahead(&self, e: &CacheEntry) {
        if self.policy_admits(e, false) {
            e.set_admitted(true);
        }
    }

    /// The policy's word on `e` at an open (`count`: the open is recorded) or at a fetch
    /// ahead (which stands for the open it expects: a version seen once is admitted).
    fn policy_admits(&self, e: &CacheEntry, count: bool) -> bool {
        match self.admit {
            Admit::Always => true,
            Admit::Never => false,
            Admit::Reuse if e.any_present() || e.is_packed() => true,
            Admit::Reuse if count => self.seen.opened(&e.hash),
            Admit::Reuse => self.seen.known(&e.hash),
        }
    }

    /// Whether the fetched bytes of `e` are written to disk: it was admitted at an open,
    /// or another process opened it again since, and the free-space floor leaves the
    /// cache room (on a disk below it, a store was written, then punched by an eviction
    /// that scanned the whole directory, store after store). The floor's answer is at
    /// most a second old (floor.rs).
    pub(super) fn admits(&self, e: &CacheEntry) -> bool {
        let policy = e.admitted() || (self.admit == Admit::Reuse && self.seen.again(&e.hash));
        policy && (self.floor).has_room(|| self.squeezed().is_none_or(|room| room.limit > 0))
    }

    /// Whether a fetch of all of `e` ahead of its reader may start: `Some(0)` if its
    /// bytes go to the disk; if they stay in memory only (not admitted), `Some(its size)`
    /// promised to it by the memory budget, when that has room for them beside `keep`
    /// bytes for the readers' own fetches (given back by `unpromise`); else `None`.
    pub fn room_ahead(&self, e: &CacheEntry, keep: u64) -> Option<u64> {
        if self.admits(e) {
            Some(0)
        } else {
            self.mem.promise(e.size, keep).then_some(e.size)
        }
    }

    /// A fetch ahead of `e`, if it is a packed small version: its bytes are read from its
    /// segment into memory now, when the memory budget has room for them beside `keep`,
    /// so that its open finds the entry here (no second look in the index) and its reads
    /// take them from memory. True if `e` is packed: nothing is fetched either way.
    pub fn ahead_packed(&self, e: &CacheEntry, keep: u64) -> bool {
        if !e.is_packed() {
            return false;
        }
        if self.mem.promise(e.size, keep) {
            if let Ok(Some(d)) = e.read_packed(0, e.size as usize) {
                self.hits.fetch_add(d.len() as u64, Ordering::Relaxed);
                self.mem.remember(e.mem(), 0, Bytes::from(d));
            }
            self.mem.unpromise(e.size);
        }
        true
    }

    /// Gives back bytes `room_ahead` promised.
    pub fn unpromise(&self, n: u64) {
        self.mem.unpromise(n);
    }

    /// Whether a fetch of `e` goes without the cross-process lock of its chunks and
    /// without making its files: a small version that has no files here is served from
    /// memory (a read-once file costs no inode, header or lock) and, if it is admitted
    /// once it is whole, packed (`pack`).
    pub fn keeps_off_disk(&self, e: &CacheEntry) -> bool {
        e.size <= SMALL && e.absent()
    }

    /// Whether all the bytes of `e`, fetched off the disk (`keeps_off_disk`), are
    /// written as a record of a segment (`pack`): it is admitted now.
    pub fn packs(&self, e: &CacheEntry) -> bool {
        e.size <= SMALL && !e.is_packed() && self.admits(e)
    }

    /// Writes `parts`, all the bytes of the small version `e` in order, as a record of
    /// this process's segment (small.rs): its later reads, and other processes' opens,
    /// find them there. A failure costs the cache only. Blocks on the disk.
    pub(super) fn pack(&self, e: &CacheEntry, parts: &[Bytes]) {
        if e.is_packed() {
            return;
        }
        match self.put_small(&e.hash, e.ident(), parts) {
            Some(Ok(packed)) => {
                // The directory's count is of its files' bytes (`put_small`); the
                // fetched count, of the object's (as `flowfs cache stats` shows them).
                self.fetched.fetch_add(e.size, Ordering::Relaxed);
                // Last: whoever finds it packed finds its count done (its segment is
                // this process's, which no eviction takes).
                e.set_packed(packed);
            }
            Some(Err(err)) => tracing::debug!("cannot pack a small file into the cache: {err}"),
            None => {}
        }
    }

    /// Appends a small version (`parts`: all its bytes) to this process's segment and
    /// counts its bytes, then evicts if the directory is over its limit; `None` once the
    /// cache is closed. Blocks on the disk.
    pub(super) fn put_small(
        &self,
        hash: &str,
        ident: &str,
        parts: &[Bytes],
    ) -> Option<io::Result<small::Packed>> {
        let open = self.open.read_recursive();
        if !*open {
            return None;
        }
        self.changes.note(&self.usage, None);
        let put = self.small.put(hash, ident, parts);
        drop(open);
        Some(put.map(|(packed, n)| {
            self.usage.add(n as i64);
            self.evict();
            packed
        }))
    }

    /// `adopt` of a small version: its bytes, read from `src`, appended to this process's
    /// segment, unless it is packed already.
    pub(super) fn adopt_small(&self, hash: &str, ident: &str, size: u64, src: &Path) -> bool {
        if self.small.find(hash, ident, size).is_some() {
            return false;
        }
        let data = match fs::read(src) {
            Ok(d) if d.len() as u64 == size => Bytes::from(d),
            Ok(_) => return false,
            Err(err) => {
                tracing::warn!("cannot adopt an uploaded file into the cache: {err}");
                return false;
            }
        };
        match self.put_small(hash, ident, &[data]) {
            Some(Ok(_)) => true,
            Some(Err(err)) => {
                tracing::warn!("cannot adopt an uploaded file into the cache: {err}");
                false
            }
            None => false,
        }
    }
}
