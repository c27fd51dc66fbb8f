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
//! Files: `fetch.rs` Fetch and Claim; `memory.rs` fetched ranges in memory; `persist.rs`
//! what is kept on disk between runs; `disk.rs` statvfs and hole punching; this one the
//! entries, the index and eviction.

mod disk;
mod fetch;
mod memory;
mod persist;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use flowfs_client::ALIGN;
use parking_lot::{Mutex, RwLock};

use crate::error::{FsError, Result};
use disk::punch_hole;
use fetch::Claim;
use memory::{MemBudget, Ranges};
use persist::{identity, popcount};

pub use disk::{disk_space, DiskSpace};
pub use fetch::Fetch;

pub const CHUNK: u64 = 64 * 1024;
const BLOCK_CHUNKS: u64 = 16;

struct EntryState {
    present: Vec<u64>,
    count: u64,
    dirty: bool,
}

impl EntryState {
    fn has(&self, c: u64) -> bool {
        self.present[(c / 64) as usize] & (1 << (c % 64)) != 0
    }
    fn set(&mut self, c: u64) -> bool {
        let (w, b) = ((c / 64) as usize, 1u64 << (c % 64));
        let new = self.present[w] & b == 0;
        self.present[w] |= b;
        new
    }
    fn clear(&mut self, c: u64) -> bool {
        let (w, b) = ((c / 64) as usize, 1u64 << (c % 64));
        let had = self.present[w] & b != 0;
        self.present[w] &= !b;
        had
    }
}

pub struct CacheEntry {
    id: u64,
    hash: String,
    ident: String,
    pub size: u64,
    data_path: PathBuf,
    meta_path: PathBuf,
    file: Mutex<Option<Arc<File>>>,
    direct: Mutex<Option<Arc<File>>>,
    mem: Ranges,
    users: Mutex<u32>,
    state: RwLock<EntryState>,
    inflight: Mutex<HashMap<u64, Arc<Fetch>>>,
}

impl CacheEntry {
    fn mem(&self) -> &Ranges {
        &self.mem
    }

    #[cfg(test)]
    fn data_path(&self) -> &Path {
        &self.data_path
    }

    pub fn chunks(&self) -> u64 {
        self.size.div_ceil(CHUNK)
    }

    fn open_file(&self) -> io::Result<Arc<File>> {
        let mut opts = OpenOptions::new();
        opts.read(true);
        self.open_in(&self.file, opts)
    }

    fn open_direct(&self) -> io::Result<Arc<File>> {
        let mut opts = OpenOptions::new();
        opts.custom_flags(libc::O_DIRECT);
        self.open_in(&self.direct, opts)
    }

    /// The data file opened (for writing, plus `opts`) once and kept in `slot`.
    fn open_in(
        &self,
        slot: &Mutex<Option<Arc<File>>>,
        mut opts: OpenOptions,
    ) -> io::Result<Arc<File>> {
        let mut f = slot.lock();
        if let Some(f) = &*f {
            return Ok(f.clone());
        }
        let file = Arc::new(
            opts.write(true)
                .create(true)
                .truncate(false)
                .open(&self.data_path)?,
        );
        *f = Some(file.clone());
        Ok(file)
    }

    /// Reads `[off, off + len)` if every chunk of it is in the cache.
    pub fn try_read(&self, off: u64, len: usize) -> io::Result<Option<Vec<u8>>> {
        let end = (off + len as u64).min(self.size);
        if off >= end {
            return Ok(Some(Vec::new()));
        }
        let state = self.state.read();
        if !(off / CHUNK..end.div_ceil(CHUNK)).all(|c| state.has(c)) {
            return Ok(None);
        }
        let file = self.open_file()?;
        let mut buf = vec![0u8; (end - off) as usize];
        // The read lock keeps eviction from punching these chunks while we copy them.
        file.read_exact_at(&mut buf, off)?;
        Ok(Some(buf))
    }

    /// Marks the missing chunks of `[c0, c1)` as in flight in runs of at most `max_run`
    /// chunks, and returns those runs together with the fetches already running.
    pub fn claim(&self, c0: u64, c1: u64, max_run: u64) -> Claim {
        let mut inflight = self.inflight.lock();
        let state = self.state.read();
        let mut claim = Claim {
            wait: Vec::new(),
            start: Vec::new(),
        };
        let mut run: Option<u64> = None;
        let mut last_wait: Option<*const Fetch> = None;
        let c1 = c1.min(self.chunks());
        let mut c = c0;
        let close = |run: &mut Option<u64>,
                     c: u64,
                     claim: &mut Claim,
                     inflight: &mut HashMap<u64, Arc<Fetch>>| {
            if let Some(s) = run.take() {
                let f = Arc::new(Fetch::default());
                for i in s..c {
                    inflight.insert(i, f.clone());
                }
                claim.start.push((s, c, f));
            }
        };
        while c < c1 {
            if state.has(c) {
                close(&mut run, c, &mut claim, &mut inflight);
            } else if let Some(f) = inflight.get(&c).cloned() {
                close(&mut run, c, &mut claim, &mut inflight);
                if last_wait != Some(Arc::as_ptr(&f)) {
                    last_wait = Some(Arc::as_ptr(&f));
                    claim.wait.push(f);
                }
            } else {
                match run {
                    Some(s) if c - s >= max_run => {
                        close(&mut run, c, &mut claim, &mut inflight);
                        run = Some(c);
                    }
                    Some(_) => {}
                    None => run = Some(c),
                }
            }
            c += 1;
        }
        close(&mut run, c1, &mut claim, &mut inflight);
        claim
    }

    fn drop_inflight(&self, c0: u64, c1: u64) {
        let mut inflight = self.inflight.lock();
        for c in c0..c1 {
            inflight.remove(&c);
        }
    }
}

struct Inner {
    hot: HashMap<u64, Arc<CacheEntry>>,
    by_hash: HashMap<String, u64>,
    lru: BTreeMap<u64, (u64, u64)>,
    ticks: HashMap<(u64, u64), u64>,
    /// Entries found on disk at start and not opened since: (mtime, hash) -> bytes.
    cold: BTreeMap<(SystemTime, String), u64>,
    cold_index: HashMap<String, SystemTime>,
    tick: u64,
    next_id: u64,
    used: u64,
}

pub struct DiskCache {
    root: PathBuf,
    /// Held while the mount lives: `objects/` (or the private directory) is ours.
    _lock: File,
    /// A private cache of a mount that found `objects/` taken: nothing to hand on.
    private: bool,
    /// Free space to leave on the cache's file system (staged writes need it).
    min_free: u64,
    capacity: u64,
    inner: Mutex<Inner>,
    mem: MemBudget,
    /// Cleared once the cache's file system refuses `O_DIRECT` (tmpfs).
    direct_ok: AtomicBool,
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
        let mut inner = Inner {
            hot: HashMap::new(),
            by_hash: HashMap::new(),
            lru: BTreeMap::new(),
            ticks: HashMap::new(),
            cold: BTreeMap::new(),
            cold_index: HashMap::new(),
            tick: 0,
            next_id: 1,
            used: 0,
        };
        for s in persist::start(&root.dir)? {
            inner.cold.insert((s.mtime, s.hash.clone()), s.bytes);
            inner.cold_index.insert(s.hash, s.mtime);
            inner.used += s.bytes;
        }
        let cache = DiskCache {
            root: root.dir,
            _lock: root.lock,
            private: root.private,
            min_free: 0,
            capacity,
            inner: Mutex::new(inner),
            mem: MemBudget::new(mem_cap),
            direct_ok: AtomicBool::new(true),
        };
        cache.evict(&mut cache.inner.lock());
        Ok(cache)
    }

    /// Keeps at least `bytes` free on the cache's file system: the cache shrinks below
    /// `--cache-size` when the disk fills up with other things (staged writes above all).
    pub fn with_min_free(mut self, bytes: u64) -> DiskCache {
        self.min_free = bytes;
        let mut inner = self.inner.lock();
        self.evict(&mut inner);
        drop(inner);
        self
    }

    /// What the cache may hold now, with `used` bytes in it and `room` more to free.
    fn limit(&self, used: u64, room: u64) -> u64 {
        if self.min_free == 0 && room == 0 {
            return self.capacity;
        }
        match disk_space(&self.root) {
            Some(DiskSpace { avail, .. }) => self
                .capacity
                .min((used + avail).saturating_sub(self.min_free + room)),
            None => self.capacity,
        }
    }

    /// Evicts until `bytes` more (plus the floor) are free on the disk, or the cache is
    /// empty: a staged write that found the disk full goes before cached data.
    pub fn make_room(&self, bytes: u64) {
        let mut inner = self.inner.lock();
        let limit = self.limit(inner.used, bytes);
        self.evict_to(&mut inner, limit);
    }

    #[cfg(test)]
    pub fn used(&self) -> u64 {
        self.inner.lock().used
    }

    #[cfg(test)]
    fn mem_used(&self) -> u64 {
        self.mem.used()
    }

    /// The cache entry of one object version, shared by every handle that reads it.
    pub fn entry(&self, bucket: &str, key: &str, etag: &str, size: u64) -> Result<Arc<CacheEntry>> {
        let (ident, hash) = identity(bucket, key, etag, size);
        let mut inner = self.inner.lock();
        if let Some(id) = inner.by_hash.get(&hash) {
            if let Some(e) = inner.hot.get(id) {
                let e = e.clone();
                *e.users.lock() += 1;
                return Ok(e);
            }
        }
        let words = size.div_ceil(CHUNK).div_ceil(64) as usize;
        let mut present = vec![0u64; words];
        if let Some(mtime) = inner.cold_index.remove(&hash) {
            let bytes = inner.cold.remove(&(mtime, hash.clone())).unwrap_or(0);
            inner.used -= bytes;
            present = persist::load(&self.root, &hash, &ident, size);
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let count = popcount(&present);
        let entry = self.new_entry(id, &hash, ident, size, present, 1);
        inner.used += count * CHUNK;
        let blocks: Vec<u64> = {
            let st = entry.state.read();
            (0..entry.chunks().div_ceil(BLOCK_CHUNKS))
                .filter(|b| {
                    (b * BLOCK_CHUNKS..((b + 1) * BLOCK_CHUNKS).min(entry.chunks()))
                        .any(|c| st.has(c))
                })
                .collect()
        };
        for b in blocks {
            inner.tick += 1;
            let t = inner.tick;
            inner.lru.insert(t, (id, b));
            inner.ticks.insert((id, b), t);
        }
        inner.hot.insert(id, entry.clone());
        inner.by_hash.insert(hash, id);
        Ok(entry)
    }

    fn new_entry(
        &self,
        id: u64,
        hash: &str,
        ident: String,
        size: u64,
        present: Vec<u64>,
        users: u32,
    ) -> Arc<CacheEntry> {
        let count = popcount(&present);
        Arc::new(CacheEntry {
            id,
            hash: hash.to_string(),
            ident,
            size,
            data_path: self.root.join(format!("{hash}.data")),
            meta_path: self.root.join(format!("{hash}.meta")),
            file: Mutex::new(None),
            direct: Mutex::new(None),
            mem: Ranges::default(),
            users: Mutex::new(users),
            state: RwLock::new(EntryState {
                present,
                count,
                dirty: false,
            }),
            inflight: Mutex::new(HashMap::new()),
        })
    }

    /// Takes over the file at `src` (same file system), which holds all `size` bytes of
    /// the object version, as a complete entry: a file this mount has just uploaded is
    /// read by the next task without downloading it again. Returns false (and leaves
    /// `src` alone) when it does not fit or the version is already cached.
    pub fn adopt(&self, bucket: &str, key: &str, etag: &str, size: u64, src: &Path) -> bool {
        let (ident, hash) = identity(bucket, key, etag, size);
        let mut inner = self.inner.lock();
        // A file larger than half the cache would only push out everything else. Under a
        // free-space floor the cache may be smaller than `--cache-size`; the staged file
        // already takes its space on the disk, so it counts as free here.
        let room = (self.limit(inner.used, 0) + size).min(self.capacity);
        if size == 0 || size > room / 2 {
            return false;
        }
        if inner.by_hash.contains_key(&hash) || inner.cold_index.contains_key(&hash) {
            return false;
        }
        if fs::rename(src, self.root.join(format!("{hash}.data"))).is_err() {
            return false;
        }
        let chunks = size.div_ceil(CHUNK);
        let mut present = vec![0u64; chunks.div_ceil(64) as usize];
        for c in 0..chunks {
            present[(c / 64) as usize] |= 1 << (c % 64);
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let entry = self.new_entry(id, &hash, ident, size, present, 0);
        entry.state.write().dirty = true;
        if let Err(err) = self.persist(&entry) {
            tracing::warn!("cannot save cache metadata: {err}");
            let _ = fs::remove_file(&entry.data_path);
            return true;
        }
        inner.used += chunks * CHUNK;
        for b in 0..chunks.div_ceil(BLOCK_CHUNKS) {
            Self::touch_block(&mut inner, id, b);
        }
        inner.hot.insert(id, entry);
        inner.by_hash.insert(hash, id);
        self.evict(&mut inner);
        true
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
        if let Err(err) = self.write_data(e, off, data) {
            e.drop_inflight(off / CHUNK, end.div_ceil(CHUNK));
            return Err(FsError::Io(format!("cache write: {err}")));
        }
        self.mark(e, off, end);
        Ok(())
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
        let mut inner = self.inner.lock();
        let mut added = 0;
        {
            let mut st = e.state.write();
            for c in c0..c1 {
                if st.set(c) {
                    added += 1;
                }
            }
            st.count += added;
            st.dirty |= added > 0;
        }
        e.drop_inflight(c0, end.div_ceil(CHUNK));
        // An entry that eviction dropped meanwhile is read by nobody: not counted.
        if inner.hot.contains_key(&e.id) {
            inner.used += added * CHUNK;
            for b in c0 / BLOCK_CHUNKS..c1.div_ceil(BLOCK_CHUNKS) {
                Self::touch_block(&mut inner, e.id, b);
            }
        }
        self.evict(&mut inner);
    }

    /// Writes the page-aligned body of `data` with `O_DIRECT` when it can, the rest (a
    /// tail shorter than a page, at the end of the object) through the page cache.
    fn write_data(&self, e: &CacheEntry, off: u64, data: &[u8]) -> io::Result<()> {
        let mut done = 0;
        let aligned =
            (data.as_ptr() as usize).is_multiple_of(ALIGN) && off.is_multiple_of(ALIGN as u64);
        let body = data.len() / ALIGN * ALIGN;
        if aligned && body > 0 && self.direct_ok.load(Ordering::Relaxed) {
            match e
                .open_direct()
                .and_then(|f| f.write_all_at(&data[..body], off))
            {
                Ok(()) => done = body,
                Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::info!("the cache directory does not take O_DIRECT: {err}");
                    self.direct_ok.store(false, Ordering::Relaxed);
                }
                Err(err) => return Err(err),
            }
        }
        if done < data.len() {
            e.open_file()?
                .write_all_at(&data[done..], off + done as u64)?;
        }
        Ok(())
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
            if inner.ticks.contains_key(&(e.id, b)) {
                Self::touch_block(&mut inner, e.id, b);
            }
        }
    }

    fn touch_block(inner: &mut Inner, id: u64, b: u64) {
        if let Some(old) = inner.ticks.remove(&(id, b)) {
            inner.lru.remove(&old);
        }
        inner.tick += 1;
        let t = inner.tick;
        inner.lru.insert(t, (id, b));
        inner.ticks.insert((id, b), t);
    }

    fn evict(&self, inner: &mut Inner) {
        let limit = self.limit(inner.used, 0);
        self.evict_to(inner, limit);
    }

    fn evict_to(&self, inner: &mut Inner, limit: u64) {
        while inner.used > limit {
            if let Some(((mtime, hash), bytes)) = inner.cold.pop_first() {
                let _ = mtime;
                inner.cold_index.remove(&hash);
                inner.used -= bytes;
                let _ = fs::remove_file(self.root.join(format!("{hash}.meta")));
                let _ = fs::remove_file(self.root.join(format!("{hash}.data")));
                continue;
            }
            let Some((_, (id, b))) = inner.lru.pop_first() else {
                break;
            };
            inner.ticks.remove(&(id, b));
            let Some(e) = inner.hot.get(&id).cloned() else {
                continue;
            };
            let (c0, c1) = (b * BLOCK_CHUNKS, ((b + 1) * BLOCK_CHUNKS).min(e.chunks()));
            let mut st = e.state.write();
            // Only chunks that are present are punched, never a whole block: a fetch may
            // have written one of the others and be about to mark it present.
            let mut runs = Vec::new();
            let mut run: Option<u64> = None;
            for c in c0..=c1 {
                if c < c1 && st.clear(c) {
                    run.get_or_insert(c);
                } else if let Some(s) = run.take() {
                    runs.push((s, c));
                }
            }
            let freed: u64 = runs.iter().map(|(s, c)| c - s).sum();
            st.count -= freed;
            st.dirty = true;
            inner.used -= freed * CHUNK;
            let empty = st.count == 0;
            drop(st);
            // The bitmap on disk stops vouching for the chunks before they are punched,
            // so that a process killed in between leaves nothing wrong behind.
            if *e.users.lock() == 0 {
                if empty {
                    inner.hot.remove(&id);
                    self.forget_mem(&e);
                    inner.by_hash.remove(&e.hash);
                    let _ = fs::remove_file(&e.meta_path);
                    let _ = fs::remove_file(&e.data_path);
                    continue;
                }
                if let Err(err) = self.persist(&e) {
                    tracing::warn!("cannot save cache metadata: {err}");
                    let _ = fs::remove_file(&e.meta_path);
                }
            } else {
                // In use: the bitmap is saved again at release; until then none on disk.
                let _ = fs::remove_file(&e.meta_path);
            }
            let open = e.file.lock().clone().or_else(|| e.direct.lock().clone());
            let file = match open {
                Some(f) => Some(f),
                None => File::options()
                    .write(true)
                    .open(&e.data_path)
                    .ok()
                    .map(Arc::new),
            };
            if let Some(f) = file {
                for (s, c) in runs {
                    punch_hole(&f, s * CHUNK, (c - s) * CHUNK);
                }
            }
        }
    }

    /// A handle on `e` closed: the last one saves the bitmap and closes the file.
    pub fn release(&self, e: &Arc<CacheEntry>) {
        let last = {
            let mut users = e.users.lock();
            *users = users.saturating_sub(1);
            *users == 0
        };
        if last {
            if let Err(err) = self.persist(e) {
                tracing::warn!("cannot save cache metadata: {err}");
            }
            *e.file.lock() = None;
            *e.direct.lock() = None;
            // Ranges in memory stay (within the budget): a file prefetched by a sibling's
            // open is read by the next open, from memory.
        }
    }

    /// Drops an entry's ranges in memory, when the entry itself goes.
    fn forget_mem(&self, e: &CacheEntry) {
        self.mem.forget(e);
    }

    /// Saves the bitmap that vouches for the data (see `open` for crash safety).
    fn persist(&self, e: &CacheEntry) -> io::Result<()> {
        let mut st = e.state.write();
        if !st.dirty {
            return Ok(());
        }
        if st.count == 0 {
            let _ = fs::remove_file(&e.meta_path);
            st.dirty = false;
            return Ok(());
        }
        persist::write_meta(&e.meta_path, &e.ident, e.size, &st.present)?;
        st.dirty = false;
        Ok(())
    }

    /// Saves every entry's bitmap and makes the cache durable (at unmount). A private
    /// cache is removed instead.
    pub fn persist_all(&self) {
        if self.private {
            let _ = fs::remove_dir_all(&self.root);
            return;
        }
        let entries: Vec<_> = self.inner.lock().hot.values().cloned().collect();
        for e in entries {
            if let Err(err) = self.persist(&e) {
                tracing::warn!("cannot save cache metadata: {err}");
            }
        }
        disk::sync_fs(&self.root);
        persist::mark_clean(&self.root);
    }
}
