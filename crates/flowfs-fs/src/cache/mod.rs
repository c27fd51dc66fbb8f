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
//! them back from the disk, entry.rs `write`) and also kept in memory, within a small
//! budget, until the reader has taken them: a cold read then costs one copy out of the
//! download buffer, not a read back from the data file.
//!
//! What is written at all is admission's (admit.rs, `--cache-admit`): under `reuse` a
//! version opened once is served from the download buffers and never written; its second
//! open on the node admits it.
//!
//! One job per file: this one is the public face and the wiring; `admit.rs` admission;
//! `index.rs` the choice
//! of victims (pure data); `evict.rs` eviction; `entry.rs` an entry (its files, fetches
//! in flight, the checks of a read); `punch.rs` an entry's files as eviction changes
//! them; `pin.rs` pins; `bitmap.rs` its chunk map; `fetch.rs` Fetch, Claim and Claimed (a
//! fetch in flight, owned); `memory.rs` fetched ranges in memory; `persist.rs` the files;
//! `shared.rs` the locks and the directory's counters; `disk.rs` statvfs, hole punching,
//! syncfs; `error.rs` CacheError; `admin.rs` what `flowfs cache` does.
//!
//! Locks of the cache in this process (an entry's own are described in entry.rs):
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
mod disk;
mod durable;
mod entry;
mod error;
mod evict;
mod fetch;
#[cfg(test)]
mod fetch_tests;
mod index;
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
pub use disk::{disk_space, DiskSpace};
pub use entry::{CacheEntry, FetchLock};
pub use error::CacheError;
pub use fetch::{Claim, Claimed, Fetch};
pub use pin::Pinned;

pub const CHUNK: u64 = 64 * 1024;
const BLOCK_CHUNKS: u64 = 16;

/// Versions up to this size are fetched without locking their chunks or making their
/// files (`DiskCache::keeps_off_disk`), and written, once admitted, as a record of a
/// segment (small.rs): two processes reading one at once may both fetch it, at most this
/// many bytes more.
const SMALL: u64 = 1 << 20;

/// Fetched bytes already handed to their readers, on their way to the data file: `store`
/// writes them under the fetch's lock and ends the piece's claim.
pub struct Delivered {
    cache: Arc<DiskCache>,
    piece: Claimed,
    data: Bytes,
    /// Its readers have the bytes in memory (else only the data file can serve them).
    in_memory: bool,
    /// Its fetch took no lock and made no files (`DiskCache::keeps_off_disk`).
    off_disk: bool,
}

impl Delivered {
    /// Whether `store` would write nothing: its readers have the bytes in memory and they
    /// are not admitted (or kept off the disk). Then `skip` ends it without I/O.
    pub fn in_memory_only(&self) -> bool {
        self.in_memory && (self.off_disk || !self.cache.admits(self.piece.entry()))
    }

    /// Ends it without writing (`in_memory_only`): its readers wake and read memory.
    pub fn skip(self) {
        let n = self.data.len() as u64;
        self.cache.not_admitted.fetch_add(n, Ordering::Relaxed);
    }

    /// Packs the deliveries of all the bytes of a small version, in order, as a record
    /// of a segment (`DiskCache::pack`); their claims end after it. Blocks on the disk.
    pub fn pack(all: Vec<Delivered>) {
        let Some(first) = all.first() else {
            return;
        };
        let parts: Vec<Bytes> = all.iter().map(|d| d.data.clone()).collect();
        first.cache.pack(first.piece.entry(), &parts);
    }

    /// Writes the bytes and marks them present (`lock`: none when the fetch could not
    /// lock them, and then they are not cached). Blocks on the disk. For a delivery that
    /// is not `in_memory_only` (the caller asked, once: each asking reads the record of
    /// opens; admission only grows, so the answer holds).
    pub fn store(self, lock: Option<&FetchLock>) -> Result<(), CacheError> {
        if self.off_disk {
            // The memory budget could not keep them: written after all, under a lock
            // taken now, so that their readers find them in the file.
            let (c0, c1) = self.piece.chunks();
            let late = self.cache.lock_fetch(self.piece.entry(), c0, c1, false)?;
            return self.cache.store(self.piece, late.as_ref(), &self.data);
        }
        self.cache.store(self.piece, lock, &self.data)
    }
}

pub struct DiskCache {
    root: PathBuf,
    /// `objects/lock`, held shared while this process uses the directory.
    lock: File,
    /// `objects/evict.lock`: one eviction at a time in the directory.
    evict_lock: File,
    usage: Usage,
    /// Free space to leave on the cache's file system (staged writes need it).
    min_free: u64,
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
        self.evict();
        self
    }

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
    /// or another process opened it again since.
    fn admits(&self, e: &CacheEntry) -> bool {
        e.admitted() || (self.admit == Admit::Reuse && self.seen.again(&e.hash))
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
    fn pack(&self, e: &CacheEntry, parts: &[Bytes]) {
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
    fn put_small(
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

    /// `adopt` of a small version: its bytes, read from `src`, appended to this process's
    /// segment, unless it is packed already.
    fn adopt_small(&self, hash: &str, ident: &str, size: u64, src: &Path) -> bool {
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

    /// Claims the missing chunks of `[c0, c1)` of `e` for fetches of at most `max_run`
    /// chunks each (fetch.rs `Claimed`), and says which fetches already running cover
    /// the rest.
    pub fn claim(&self, e: &Arc<CacheEntry>, c0: u64, c1: u64, max_run: u64) -> Claim {
        e.claim(c0, c1, max_run)
    }

    /// Hands the fetched bytes of `p`, from its first chunk on, to its readers (from
    /// memory) at once; the `Delivered` it returns stores them (disk I/O: off the async
    /// workers), which ends the claim.
    /// `off_disk`: its fetch took no lock (`keeps_off_disk`).
    pub fn deliver(self: &Arc<Self>, p: Claimed, data: Bytes, off_disk: bool) -> Delivered {
        let in_memory = self.offer(&p, &data);
        Delivered {
            cache: self.clone(),
            piece: p,
            data,
            in_memory,
            off_disk,
        }
    }

    /// Hands the bytes of `p` to its readers from memory; false if the memory budget
    /// could not keep them.
    fn offer(&self, p: &Claimed, data: &Bytes) -> bool {
        let kept = (self.mem).remember(p.entry().mem(), p.chunks().0 * CHUNK, data.clone());
        if kept {
            p.fetch().set_ready();
        }
        kept
    }

    /// Locks chunks `[c0, c1)` of `e` for a fetch (entry.rs), and reads which of them are
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

    /// Writes the fetched bytes of `p` into the data file and marks them present, under
    /// `lock` (none: the fetch could not lock them, the bytes are not cached), then ends
    /// the claim (its readers wake, whatever the outcome: they have the bytes in memory,
    /// or claim them again). Blocks on the disk: call it off the async workers.
    fn store(&self, p: Claimed, lock: Option<&FetchLock>, data: &[u8]) -> Result<(), CacheError> {
        let e = p.entry();
        let off = p.chunks().0 * CHUNK;
        let end = off + data.len() as u64;
        // A trailing partial chunk counts only when it reaches the end of the object.
        let (c0, c1) = (
            off / CHUNK,
            if end >= e.size {
                e.chunks()
            } else {
                end / CHUNK
            },
        );
        let open = self.open.read_recursive();
        let r = match lock {
            _ if !*open => Err(CacheError::Closed),
            None => Err(CacheError::NotCached {
                bytes: data.len() as u64,
                why: "another process held their chunks too long",
            }),
            Some(lock) => {
                // Noted before the bytes and words change: a process killed after it is
                // still counted as not synced (durable.rs).
                self.changes.note(&self.usage, Some(&e.map_path()));
                e.write(lock, off, data)
                    .and_then(|()| e.set_present(lock, c0, c1))
                    .map_err(CacheError::disk("cache write"))
            }
        };
        drop(p);
        let added = r?;
        self.usage.add(added as i64);
        self.fetched.fetch_add(added, Ordering::Relaxed);
        drop(open);
        self.evict();
        Ok(())
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
