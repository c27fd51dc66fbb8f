//! The disk cache: one sparse data file per object version (bucket, key, ETag) with a
//! bitmap of the 64 KiB chunks it holds. Bytes are evicted least-recently-used in 1 MiB
//! blocks (holes are punched), so one huge object cannot pin the whole cache. The bitmap
//! is saved beside the data when the last handle closes, so the cache survives restarts;
//! an entry is never trusted beyond what its saved bitmap says.
//!
//! Fetched ranges are written with `O_DIRECT` (no page-cache pages for the cache file) and
//! also kept in memory, within a small budget, until the reader has taken them: a cold
//! read then costs one copy out of the download buffer instead of a write into new
//! page-cache pages and a read back from them.
//!
//! One job per file: this one is the public face and the wiring; `index.rs` the LRU index
//! and the choice of victims (pure data); `evict.rs` eviction (decide under the lock, do
//! the I/O after); `entry.rs` an entry (data file, fetches in flight, bitmap saves);
//! `bitmap.rs` its chunk bitmap; `fetch.rs` Fetch and Claim; `memory.rs` fetched ranges
//! in memory; `persist.rs` what is kept on disk between runs; `disk.rs` statvfs, hole
//! punching, syncfs.
//!
//! Locks of the cache (an entry's own are described in entry.rs):
//! - `inner`: the index and the open entries (id -> entry). Every cache hit takes it
//!   (`touch`), so no disk I/O runs under it: what eviction takes is decided under it,
//!   and the statvfs before, the `.meta` writes, hole punching and file removals after.
//!   A name whose files are created or removed outside it is busy in the index; whoever
//!   finds it busy waits on `names`. Taken before an entry's locks.
//! - `evicting`: one eviction at a time, from its statvfs to its last punch, as when all
//!   of it ran under `inner`: a second one would see as used on the disk the bytes the
//!   first has taken but not yet punched, and only an eviction drops an entry (and frees
//!   its name for a new one), so a punch by path always hits the file it was decided
//!   for. Reads never take it; it is taken before `inner`.
//!
//! Chunks eviction took are reserved in their entry until punched (entry.rs `Taken`): a
//! reader that needs one meanwhile waits for the punch, then fetches it again, instead of
//! writing it into the file where the punch would zero it.
//! - the memory budget's own (memory.rs).

mod bitmap;
mod disk;
mod entry;
mod evict;
mod fetch;
mod index;
mod memory;
mod persist;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};

use crate::error::{FsError, Result};
use bitmap::Bitmap;
use index::{Id, Index, Lookup};
use memory::MemBudget;
use persist::{data_path, identity, meta_path};

pub use disk::{disk_space, DiskSpace};
pub use entry::CacheEntry;
pub use fetch::Fetch;

pub const CHUNK: u64 = 64 * 1024;
const BLOCK_CHUNKS: u64 = 16;

/// What `inner` guards: the index and the entries open in this process.
struct Inner {
    index: Index,
    hot: HashMap<Id, Arc<CacheEntry>>,
}

pub struct DiskCache {
    root: PathBuf,
    /// Held while the mount lives: `objects/` (or the private directory) is ours.
    lock: File,
    /// A private cache of a mount that found `objects/` taken: nothing to hand on.
    private: bool,
    /// Free space to leave on the cache's file system (staged writes need it).
    min_free: u64,
    capacity: u64,
    /// The index and the open entries; no I/O under it (see above).
    inner: Mutex<Inner>,
    /// Woken when a busy name of the index is unreserved.
    names: Condvar,
    /// One eviction at a time (see above).
    evicting: Mutex<()>,
    mem: MemBudget,
    /// Cleared once the cache's file system refuses `O_DIRECT` (tmpfs).
    direct_ok: AtomicBool,
    /// True until `close`: what writes to the directory (a store, an adoption, an
    /// eviction, a bitmap saved) holds it shared and does nothing once it is false, so
    /// that nothing of this process touches the directory after it is handed on.
    open: RwLock<bool>,
}

impl DiskCache {
    /// Opens (or creates) the cache under `root` and indexes what an earlier run left.
    /// `mem_cap` bounds the fetched bytes kept in memory until a reader takes them.
    ///
    /// `objects/` is used by one mount at a time (it holds the lock `objects/lock`): the
    /// index, the bitmaps and eviction live in the process, and a second process punching
    /// holes in files the first one vouches for would make it serve zeros. A mount that
    /// finds it taken uses a private cache under `objects.private/`, removed at unmount.
    pub fn open(cache_dir: &Path, capacity: u64, mem_cap: u64) -> io::Result<DiskCache> {
        let root = persist::lock_root(cache_dir)?;
        let mut index = Index::default();
        for s in persist::start(&root.dir)? {
            index.add_cold(s.hash, s.mtime, s.bytes);
        }
        let cache = DiskCache {
            root: root.dir,
            lock: root.lock,
            private: root.private,
            min_free: 0,
            capacity,
            inner: Mutex::new(Inner {
                index,
                hot: HashMap::new(),
            }),
            names: Condvar::new(),
            evicting: Mutex::new(()),
            mem: MemBudget::new(mem_cap),
            direct_ok: AtomicBool::new(true),
            open: RwLock::new(true),
        };
        cache.evict();
        Ok(cache)
    }

    /// Keeps at least `bytes` free on the cache's file system: the cache shrinks below
    /// `--cache-size` when the disk fills up with other things (staged writes above all).
    pub fn with_min_free(mut self, bytes: u64) -> DiskCache {
        self.min_free = bytes;
        self.evict();
        self
    }

    #[cfg(test)]
    pub fn used(&self) -> u64 {
        self.inner.lock().index.used()
    }

    #[cfg(test)]
    fn mem_used(&self) -> u64 {
        self.mem.used()
    }

    /// The cache entry of one object version, shared by every handle that reads it.
    pub fn entry(&self, bucket: &str, key: &str, etag: &str, size: u64) -> Result<Arc<CacheEntry>> {
        let (ident, hash) = identity(bucket, key, etag, size);
        let mut inner = self.inner.lock();
        loop {
            match inner.index.lookup(&hash) {
                Lookup::Open(id) => {
                    if let Some(e) = inner.hot.get(&id) {
                        e.add_user();
                        return Ok(e.clone());
                    }
                    // Not reached: the index and `hot` change together.
                    return Ok(self.insert(&mut inner, hash, ident, size, Vec::new(), 1));
                }
                Lookup::Busy => self.names.wait(&mut inner),
                Lookup::Cold => {
                    inner.index.take_cold(&hash);
                    drop(inner);
                    // Its name is busy: nobody else opens, adopts or evicts it meanwhile.
                    let present = persist::load(&self.root, &hash, &ident, size);
                    let mut inner = self.inner.lock();
                    let e = self.insert(&mut inner, hash, ident, size, present, 1);
                    drop(inner);
                    self.names.notify_all();
                    return Ok(e);
                }
                Lookup::Absent => {
                    return Ok(self.insert(&mut inner, hash, ident, size, Vec::new(), 1));
                }
            }
        }
    }

    /// Opens an entry in the index with `present` (empty: nothing) and `users` handles.
    fn insert(
        &self,
        inner: &mut MutexGuard<Inner>,
        hash: String,
        ident: String,
        size: u64,
        mut present: Vec<u64>,
        users: u32,
    ) -> Arc<CacheEntry> {
        let chunks = size.div_ceil(CHUNK);
        present.resize(chunks.div_ceil(64) as usize, 0);
        let bits = Bitmap::new(present);
        let id = inner.index.insert(hash.clone(), &bits.blocks(chunks));
        let e = CacheEntry::new(id, &self.root, &hash, ident, size, bits, users);
        let e = Arc::new(e);
        inner.hot.insert(id, e.clone());
        e
    }

    /// Takes over the file at `src` (same file system), which holds all `size` bytes of
    /// the object version, as a complete entry: a file this mount has just uploaded is
    /// read by the next task without downloading it again. Returns false (and leaves
    /// `src` alone) when it does not fit or the version is already cached.
    pub fn adopt(&self, bucket: &str, key: &str, etag: &str, size: u64, src: &Path) -> bool {
        let open = self.open.read_recursive();
        if !*open {
            return false;
        }
        let (ident, hash) = identity(bucket, key, etag, size);
        let avail = self.avail(0);
        {
            let mut inner = self.inner.lock();
            // A file larger than half the cache would only push out everything else. Under
            // a free-space floor the cache may be smaller than `--cache-size`; the staged
            // file already takes its space on the disk, so it counts as free here.
            let room = (self.limit(inner.index.used(), 0, avail) + size).min(self.capacity);
            if size == 0 || size > room / 2 {
                return false;
            }
            while inner.index.lookup(&hash) == Lookup::Busy {
                self.names.wait(&mut inner);
            }
            if !inner.index.reserve(&hash) {
                return false;
            }
        }
        // The name is busy: its files are ours until it is in the index.
        let chunks = size.div_ceil(CHUNK);
        let mut present = vec![0u64; chunks.div_ceil(64) as usize];
        for c in 0..chunks {
            present[(c / 64) as usize] |= 1 << (c % 64);
        }
        let data = data_path(&self.root, &hash);
        let adopted = fs::rename(src, &data).is_ok();
        let saved = adopted
            && match persist::write_meta(&meta_path(&self.root, &hash), &ident, size, &present) {
                Ok(()) => true,
                Err(err) => {
                    tracing::warn!("cannot save cache metadata: {err}");
                    let _ = fs::remove_file(&data);
                    false
                }
            };
        let mut inner = self.inner.lock();
        if saved {
            self.insert(&mut inner, hash, ident, size, present, 0);
        } else {
            inner.index.unreserve(&hash);
        }
        drop(inner);
        self.names.notify_all();
        if saved {
            self.evict();
        }
        adopted
    }

    /// Hands fetched bytes to the readers waiting on `fetch` (from memory).
    pub fn offer(&self, e: &Arc<CacheEntry>, off: u64, data: Bytes, fetch: &Fetch) {
        if self.mem.remember(e, off, data) {
            fetch.set_ready();
        }
    }

    /// Writes fetched bytes into the cache file and marks them present. Blocks on the
    /// disk: call it off the async workers.
    pub fn store(&self, e: &Arc<CacheEntry>, off: u64, data: &[u8]) -> Result<()> {
        debug_assert_eq!(off % CHUNK, 0);
        let end = off + data.len() as u64;
        let open = self.open.read_recursive();
        if !*open {
            e.drop_inflight(off / CHUNK, end.div_ceil(CHUNK));
            return Err(FsError::Io("the cache is closed (unmounted)".into()));
        }
        if let Err(err) = self.write_data(e, off, data) {
            e.drop_inflight(off / CHUNK, end.div_ceil(CHUNK));
            return Err(FsError::Io(format!("cache write: {err}")));
        }
        self.mark(e, off, end);
        Ok(())
    }

    fn write_data(&self, e: &CacheEntry, off: u64, data: &[u8]) -> io::Result<()> {
        e.write(off, data, &self.direct_ok)
    }

    /// Marks the chunks of `[off, end)`, just written, present. Between the write and
    /// this, eviction may run: it must not touch these chunks (they are not present yet).
    fn mark(&self, e: &Arc<CacheEntry>, off: u64, end: u64) {
        let c0 = off / CHUNK;
        // A trailing partial chunk counts only when it reaches the end of the object.
        let c1 = if end >= e.size {
            e.chunks()
        } else {
            end / CHUNK
        };
        {
            let mut inner = self.inner.lock();
            let added = e.set_present(c0, c1);
            e.drop_inflight(c0, end.div_ceil(CHUNK));
            // An entry that eviction dropped meanwhile is read by nobody: not counted.
            for (b, bytes) in added {
                inner.index.add(e.id(), b, bytes);
            }
        }
        self.evict();
    }

    /// Bytes `[off, off + len)` of the entry from memory or the cache file, if it has all
    /// of them.
    pub fn read(&self, e: &CacheEntry, off: u64, len: usize) -> io::Result<Option<Bytes>> {
        if let Some(data) = self.read_mem(e, off, len) {
            return Ok(Some(data));
        }
        Ok(e.try_read(off, len)?.map(Bytes::from))
    }

    fn read_mem(&self, e: &CacheEntry, off: u64, len: usize) -> Option<Bytes> {
        self.mem.read(e, off, len)
    }

    /// Gives up a claimed range after a failed fetch so that the next reader retries.
    pub fn abandon(&self, e: &CacheEntry, c0: u64, c1: u64) {
        e.drop_inflight(c0, c1);
    }

    pub fn finish(&self, f: &Fetch, r: Result<()>) {
        f.finish(r);
    }

    /// Marks the blocks under `[off, off+len)` as recently used.
    pub fn touch(&self, e: &CacheEntry, off: u64, len: u64) {
        let mut inner = self.inner.lock();
        let b0 = off / CHUNK / BLOCK_CHUNKS;
        let b1 = (off + len).div_ceil(CHUNK).div_ceil(BLOCK_CHUNKS);
        for b in b0..b1.max(b0 + 1) {
            inner.index.touch(e.id(), b);
        }
    }

    /// A handle on `e` closed: the last one saves the bitmap and closes the file.
    pub fn release(&self, e: &Arc<CacheEntry>) {
        if e.drop_user() {
            let open = self.open.read_recursive();
            if let Some(Err(err)) = open.then(|| e.save()) {
                tracing::warn!("cannot save cache metadata: {err}");
            }
            drop(open);
            e.close_files();
            // Ranges in memory stay (within the budget): a file prefetched by a sibling's
            // open is read by the next open, from memory.
        }
    }

    /// Drops an entry's ranges in memory, when the entry itself goes.
    fn forget_mem(&self, e: &CacheEntry) {
        self.mem.forget(e);
    }

    /// The cache's end, at unmount: every bitmap saved, the cache durable, and the
    /// directory handed on at once, not at the exit of the process: a mount started
    /// as soon as `flowfs unmount` had returned found `objects/` still locked, cached
    /// privately and fetched everything again (CI, test_big_object_second_read...).
    /// Nothing of this process writes to the directory afterwards. Idempotent.
    pub fn close(&self) {
        let mut open = self.open.write();
        if !*open {
            return;
        }
        self.persist_all();
        *open = false;
        crate::dirlock::unlock(&self.lock);
    }

    /// Saves every entry's bitmap and makes the cache durable. A private cache is
    /// removed instead.
    fn persist_all(&self) {
        if self.private {
            let _ = fs::remove_dir_all(&self.root);
            return;
        }
        let entries: Vec<_> = self.inner.lock().hot.values().cloned().collect();
        for e in entries {
            if let Err(err) = e.save() {
                tracing::warn!("cannot save cache metadata: {err}");
            }
        }
        disk::sync_fs(&self.root);
        persist::mark_clean(&self.root);
    }
}
