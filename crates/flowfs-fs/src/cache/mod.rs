//! The disk cache, one per node: every flowfs process on a cache directory (mounts,
//! `flowfs run` tasks, `flowfs cache prefetch`) shares `objects/`. Each object version
//! (bucket, key, ETag, size) has a data file that holds exactly its bytes (sparse: its
//! length is the object's size, so that the kernel can read it in place of the FUSE
//! file) and a sidecar with its chunk map, one word per 64 KiB chunk (persist.rs): the
//! map in the sidecar is the truth every process reads, and a chunk's word is set only
//! once its bytes are written. Bytes are evicted least recently used in 1 MiB blocks
//! (holes are punched) across the whole directory, by whichever process finds it over
//! its limit (evict.rs).
//!
//! Processes coordinate with files and locks only, no daemon (shared.rs), every lock of
//! an entry on its sidecar: OFD byte-range locks on an entry's words for a fetch in
//! flight (another process waits for it, then reads what it fetched: each range is
//! fetched once) and for an eviction punching; a shared lock on the sidecar's first byte
//! while a process uses the entry (only unused entries are removed); a shared lock on its
//! second byte while a process pins it (a complete entry whose data file the kernel reads
//! directly, FUSE passthrough: no eviction touches it, pin.rs); `objects/lock`, held
//! shared by every live process (the first one checks what earlier runs left);
//! `objects/evict.lock` (one eviction at a time); `objects/usage` (the directory's byte
//! count). All of them die with their process.
//!
//! Fetched ranges are written through the page cache (the kernel reads a complete data
//! file itself, FUSE passthrough, and finds the bytes in memory; with `O_DIRECT` it read
//! them back from the disk, entry/fetching.rs `write`) and also kept in memory, within a small
//! budget, until the reader has taken them: a cold read then costs one copy out of the
//! download buffer, not a read back from the data file.
//!
//! What is written at all is admission's (admit.rs, `--cache-admit`): under `reuse` a
//! version opened once is served from the download buffers and never written; its second
//! open on the node admits it.
//!
//! One job per file: this one is the public face and the wiring; `admit.rs` admission;
//! `keep.rs` what a fetch keeps and where (admitted, in memory, packed); `delivered.rs`
//! fetched bytes on their way to the disk; `index.rs` the choice
//! of victims (pure data); `evict.rs` eviction; `entry/` an entry (its files, fetches
//! in flight, the checks of a read); `punch.rs` an entry's files as eviction changes
//! them; `pin.rs` pins; `bitmap.rs` its chunk map; `fetch.rs` Fetch, Claim and Claimed (a
//! fetch in flight, owned); `memory.rs` fetched ranges in memory; `persist.rs` the files;
//! `shared.rs` the locks and the directory's counters; `disk.rs` statvfs, hole punching,
//! syncfs; `floor.rs` whether the free-space floor leaves room (asked at most once a
//! second); `error.rs` CacheError; `admin.rs` what `flowfs cache` does.
//!
//! Locks of the cache in this process (an entry's own are described in entry/mod.rs):
//! - `inner`: the entries open in this process (hash -> entry). A hit does not take it;
//!   no I/O runs under it.
//! - `evicting`: one eviction of this process at a time (with `evict.lock` for the
//!   others). Reads never take it.
//! - the memory budget's own (memory.rs).
//!
//! A cache hit costs, besides the copy from the file, one `pread` of the chunks' words
//! (the check that they were not evicted meanwhile) and, at most once a second per
//! block, a `pwrite` of its use time.

pub mod admin;
mod admit;
mod bitmap;
mod delivered;
mod disk;
mod durable;
mod entry;
mod error;
mod evict;
mod fetch;
#[cfg(test)]
mod fetch_tests;
mod floor;
mod index;
mod keep;
mod memory;
mod persist;
mod pin;
#[cfg(test)]
mod pin_tests;
mod punch;
mod root;
mod shared;
mod small;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use memory::MemBudget;
use persist::identity;
#[cfg(test)]
use persist::Layout;
use shared::Usage;

pub use admit::Admit;
pub use delivered::Delivered;
pub use disk::{disk_space, DiskSpace};
pub use entry::{CacheEntry, FetchLock};
pub use error::{CacheError, Squeezed};
pub use fetch::{Claim, Claimed, Fetch};
pub use pin::Pinned;

pub const CHUNK: u64 = 64 * 1024;
const BLOCK_CHUNKS: u64 = 16;

/// Versions up to this size are fetched without locking their chunks or making their
/// files (`DiskCache::keeps_off_disk`), and written, once admitted, as a record of a
/// segment (small.rs): two processes reading one at once may both fetch it, at most this
/// many bytes more.
pub(crate) const SMALL: u64 = 1 << 20;

pub struct DiskCache {
    root: PathBuf,
    /// `objects/lock`, held shared while this process uses the directory.
    lock: File,
    /// `objects/evict.lock`: one eviction at a time in the directory.
    evict_lock: File,
    usage: Usage,
    /// Free space to leave on the cache's file system (staged writes need it).
    min_free: u64,
    /// Whether that floor leaves room, as admission last found it.
    floor: floor::Floor,
    capacity: u64,
    /// The entries open in this process; no I/O under it.
    inner: Mutex<HashMap<String, Arc<CacheEntry>>>,
    /// One eviction of this process at a time.
    evicting: Mutex<()>,
    mem: MemBudget,
    /// What this process changed, made durable at its end (durable.rs).
    changes: durable::Changes,
    /// Bytes read from the cache and fetched into it, not yet added to `objects/usage`.
    hits: AtomicU64,
    fetched: AtomicU64,
    /// Blocks this process evicted, and their bytes (since it opened the cache).
    evicted_blocks: AtomicU64,
    evicted_bytes: AtomicU64,
    /// True until `close`: what writes to the directory (a store, an adoption, an
    /// eviction) holds it shared and does nothing once it is false.
    open: RwLock<bool>,
    /// Which fetched bytes are written (admit.rs), and the node's record of opens.
    admit: Admit,
    seen: admit::Seen,
    /// Bytes fetched and not written, for not being admitted.
    not_admitted: AtomicU64,
    /// Admitted small versions, packed in segments.
    small: small::Small,
}

impl DiskCache {
    /// Blocks this process evicted since it opened the cache, and their bytes.
    pub fn evicted(&self) -> (u64, u64) {
        let l = |a: &AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        (l(&self.evicted_blocks), l(&self.evicted_bytes))
    }

    /// Opens (or creates) the cache under `cache_dir`, shared with every other process
    /// that uses it. `mem_cap` bounds the fetched bytes kept in memory until a reader
    /// takes them.
    pub fn open(cache_dir: &Path, capacity: u64, mem_cap: u64) -> io::Result<DiskCache> {
        let root = root::lock_root(cache_dir)?;
        let seen = admit::Seen::open(&root.dir);
        let small = small::Small::open(&root.dir, capacity);
        let evict_lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(root.dir.join("evict.lock"))?;
        let cache = DiskCache {
            root: root.dir,
            lock: root.lock,
            evict_lock,
            usage: root.usage,
            min_free: 0,
            floor: floor::Floor::new(),
            capacity,
            inner: Mutex::new(HashMap::new()),
            evicting: Mutex::new(()),
            mem: MemBudget::new(mem_cap),
            changes: durable::Changes::default(),
            hits: AtomicU64::new(0),
            fetched: AtomicU64::new(0),
            evicted_blocks: AtomicU64::new(0),
            evicted_bytes: AtomicU64::new(0),
            open: RwLock::new(true),
            admit: Admit::Always,
            seen,
            not_admitted: AtomicU64::new(0),
            small,
        };
        cache.evict();
        Ok(cache)
    }

    /// Keeps at least `bytes` free on the cache's file system: the cache shrinks below
    /// `--cache-size` when the disk fills up with other things (staged writes above all).
    pub fn with_min_free(mut self, bytes: u64) -> DiskCache {
        self.min_free = bytes;
        self.floor.forget();
        self.evict();
        self
    }

    /// What the free-space floor leaves the cache, when it is less than `--cache-size`
    /// (one statvfs; `None` without a floor).
    pub fn squeezed(&self) -> Option<Squeezed> {
        let avail = self.avail(0)?;
        let limit = self.limit(self.usage.get(), 0, Some(avail));
        (limit < self.capacity).then_some(Squeezed {
            avail,
            min_free: self.min_free,
            limit,
        })
    }

    /// Bytes of object data the directory holds, as its processes count them.
    #[cfg(test)]
    pub fn used(&self) -> u64 {
        self.usage.get()
    }

    #[cfg(test)]
    fn mem_used(&self) -> u64 {
        self.mem.used()
    }

    /// The cache entry of one object version, shared by every handle that reads it.
    pub fn entry(&self, bucket: &str, key: &str, etag: &str, size: u64) -> Arc<CacheEntry> {
        let (ident, hash) = identity(bucket, key, etag, size);
        if let Some(e) = self.inner.lock().get(&hash) {
            e.add_user();
            return e.clone();
        }
        // Outside `inner`: its files are opened, if there are any, and its map read (a
        // fetch that writes makes them). If they cannot be, the entry reads without the
        // cache (reads, fetches and stores try again).
        let e = CacheEntry::new(&self.root, hash.clone(), ident, size);
        match e.files() {
            Err(err) if err.kind() == io::ErrorKind::NotFound && size <= SMALL => {
                if let Some(p) = self.small.find(&hash, e.ident(), size) {
                    e.set_packed(p);
                }
            }
            Err(err) if err.kind() == io::ErrorKind::InvalidData => {
                // Not this version's file (damaged): it goes, this one is made anew.
                tracing::warn!("cache file of {key} replaced: {err}");
                persist::remove_damaged(&self.root, &hash);
                let _ = e.files();
            }
            Err(err) => tracing::debug!("cache file of {key}: {err}"),
            Ok(_) => {}
        }
        let mut inner = self.inner.lock();
        if let Some(other) = inner.get(&hash) {
            other.add_user();
            return other.clone();
        }
        // Until an open admits it (`opened`), unless every fetched byte is.
        e.set_admitted(self.admit == Admit::Always);
        let e = Arc::new(e);
        inner.insert(hash, e.clone());
        e
    }

    /// Takes over the file at `src` (same file system), which holds all `size` bytes of
    /// the object version, as a complete entry: a file this mount has just uploaded is
    /// read by the next task without downloading it again. Returns false (and leaves
    /// `src` as it was) when it does not fit or the version is already cached.
    pub fn adopt(&self, bucket: &str, key: &str, etag: &str, size: u64, src: &Path) -> bool {
        let open = self.open.read_recursive();
        if !*open {
            return false;
        }
        let (ident, hash) = identity(bucket, key, etag, size);
        // A file larger than half the cache would only push out everything else. Under
        // a free-space floor the cache may be smaller than `--cache-size`; the staged
        // file already takes its space on the disk, so it counts as free here.
        let room = (self.limit(self.usage.get(), 0, self.avail(0)) + size).min(self.capacity);
        if size == 0 || size > room / 2 {
            return false;
        }
        if size <= SMALL {
            // Copied into a record of a segment (small.rs): the staged file goes, and the
            // version costs no inode of its own.
            drop(open);
            return self.adopt_small(&hash, &ident, size, src);
        }
        match persist::adopt_file(&self.root, &hash, &ident, size, src) {
            Ok(true) => {
                self.usage.add((size.div_ceil(CHUNK) * CHUNK) as i64);
                drop(open);
                self.evict();
                true
            }
            Ok(false) => false,
            Err(err) => {
                tracing::warn!("cannot adopt an uploaded file into the cache: {err}");
                false
            }
        }
    }

    /// Claims the missing chunks of `[c0, c1)` of `e` for fetches of at most `max_run`
    /// chunks each (fetch.rs `Claimed`), and says which fetches already running cover
    /// the rest.
    pub fn claim(&self, e: &Arc<CacheEntry>, c0: u64, c1: u64, max_run: u64) -> Claim {
        e.claim(c0, c1, max_run)
    }

    /// Locks chunks `[c0, c1)` of `e` for a fetch (entry/fetching.rs), and reads which of them are
    /// present under it (`FetchLock::present`): `None` if another process fetches or
    /// evicts some of them and `wait` is false. Blocks while it waits: call it off the
    /// async workers.
    pub fn lock_fetch(
        &self,
        e: &CacheEntry,
        c0: u64,
        c1: u64,
        wait: bool,
    ) -> Result<Option<FetchLock>, CacheError> {
        e.lock_fetch(c0, c1, wait)
            .map_err(CacheError::disk("cache lock or map"))
    }

    /// Bytes `[off, off + len)` of the entry from memory or its data file, if it has all
    /// of them.
    pub fn read(&self, e: &CacheEntry, off: u64, len: usize) -> io::Result<Option<Bytes>> {
        if let Some(data) = self.read_mem(e, off, len) {
            // Just fetched (a miss, counted as fetched).
            return Ok(Some(data));
        }
        if let Some(d) = e.read_packed(off, len)? {
            self.hits.fetch_add(d.len() as u64, Ordering::Relaxed);
            return Ok(Some(Bytes::from(d)));
        }
        let got = e.try_read(off, len)?.map(Bytes::from);
        if let Some(d) = &got {
            self.hits.fetch_add(d.len() as u64, Ordering::Relaxed);
        }
        Ok(got)
    }

    fn read_mem(&self, e: &CacheEntry, off: u64, len: usize) -> Option<Bytes> {
        self.mem.read(e.mem(), e.size, off, len)
    }

    /// Marks the blocks under `[off, off+len)` as recently used (in the entry's file, at
    /// most once a second per block).
    pub fn touch(&self, e: &CacheEntry, off: u64, len: u64) {
        e.touch(off, len);
    }

    /// A handle on `e` closed: the last one closes its files, and the entry leaves this
    /// process's table unless fetched ranges of it wait in memory (a file prefetched by
    /// a sibling's open is read by the next open, from memory).
    pub fn release(&self, e: &Arc<CacheEntry>) {
        if e.drop_user() {
            self.flush_counts();
            let mut inner = self.inner.lock();
            let ours = inner.get(&e.hash).is_some_and(|x| Arc::ptr_eq(x, e));
            if ours && e.mem().is_empty() && e.unused() {
                inner.remove(&e.hash);
            }
        }
    }

    /// Adds this process's hit and fetch counts to the directory's.
    fn flush_counts(&self) {
        let hits = self.hits.swap(0, Ordering::Relaxed);
        let fetched = self.fetched.swap(0, Ordering::Relaxed);
        self.usage.add_at(shared::HITS, hits as i64);
        self.usage.add_at(shared::FETCHED, fetched as i64);
    }

    /// The cache's end, at unmount: nothing of this process writes to the directory
    /// afterwards; what it changed is made durable (durable.rs), and the last process on
    /// it marks it clean (trusted after a reboot). Idempotent.
    pub fn close(&self) {
        let mut open = self.open.write();
        if !*open {
            return;
        }
        *open = false;
        // Evictions of this process stop here too (they hold `open` for reading).
        self.flush_counts();
        self.small.sync();
        self.changes.sync(&self.root, &self.usage);
        if root::alone(&self.lock) {
            if self.usage.get_at(shared::UNSYNCED) > 0 {
                // A process killed before it made its changes durable.
                disk::sync_fs(&self.root);
                self.usage.set_at(shared::UNSYNCED, 0);
            }
            root::mark_clean(&self.root);
        }
        crate::dirlock::unlock(&self.lock);
    }
}
