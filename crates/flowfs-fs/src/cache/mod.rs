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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::SystemTime;

use bytes::Bytes;
use flowfs_client::ALIGN;
use parking_lot::{Mutex, RwLock};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::dirlock::{open_lock, private_name, try_lock};
use crate::error::{FsError, Result};

pub const CHUNK: u64 = 64 * 1024;
const BLOCK_CHUNKS: u64 = 16;
const MAGIC: &[u8; 8] = b"FLOWFSC1";
/// Most fetched ranges remembered for the memory budget's FIFO (stale ones included).
const MEM_QUEUE: usize = 4096;

/// One ranged GET in flight; every reader that needs its chunks waits on it.
#[derive(Default)]
pub struct Fetch {
    notify: Notify,
    /// The bytes are in memory (readers can take them) but maybe not yet in the file.
    ready: AtomicBool,
    result: OnceLock<Result<()>>,
}

impl Fetch {
    /// Until the bytes are in the cache file (or the fetch failed).
    pub async fn wait(&self) -> Result<()> {
        self.wait_for(false).await
    }

    /// Until the bytes can be read, from memory if not yet from the file.
    pub async fn wait_ready(&self) -> Result<()> {
        self.wait_for(true).await
    }

    async fn wait_for(&self, ready: bool) -> Result<()> {
        loop {
            let notified = self.notify.notified();
            if let Some(r) = self.result.get() {
                return r.clone();
            }
            if ready && self.ready.load(Ordering::Acquire) {
                return Ok(());
            }
            notified.await;
        }
    }

    fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    fn finish(&self, r: Result<()>) {
        let _ = self.result.set(r);
        self.notify.notify_waiters();
    }
}

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

/// A fetched range kept in memory until its bytes have been read once.
struct MemBuf {
    data: Bytes,
    served: usize,
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
    mem: Mutex<BTreeMap<u64, MemBuf>>,
    users: Mutex<u32>,
    state: RwLock<EntryState>,
    inflight: Mutex<HashMap<u64, Arc<Fetch>>>,
}

/// What a reader must do to get a chunk range: wait for fetches already running and
/// run the ones it was handed (start chunk, end chunk, fetch).
pub struct Claim {
    pub wait: Vec<Arc<Fetch>>,
    pub start: Vec<(u64, u64, Arc<Fetch>)>,
}

impl CacheEntry {
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
    mem_cap: u64,
    mem_used: AtomicU64,
    /// The memory budget of fetched ranges not read yet, oldest first (stale ones too).
    mem: Mutex<VecDeque<(Weak<CacheEntry>, u64)>>,
    /// Cleared once the cache's file system refuses `O_DIRECT` (tmpfs).
    direct_ok: AtomicBool,
}

/// What names an object version in the cache: its identity (bucket, key, ETag and size,
/// kept in its `.meta`) and the hash of that, which names its files. A changed object is
/// another version: it never reads the bytes of the old one.
fn identity(bucket: &str, key: &str, etag: &str, size: u64) -> (String, String) {
    let ident = format!("{bucket}\0{key}\0{etag}\0{size}");
    let d = Sha256::digest(ident.as_bytes());
    let hash = d.iter().take(16).map(|b| format!("{b:02x}")).collect();
    (ident, hash)
}

fn read_meta(path: &Path) -> io::Result<(String, u64, Vec<u64>)> {
    let mut raw = Vec::new();
    File::open(path)?.read_to_end(&mut raw)?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "bad cache metadata");
    if raw.len() < 20 || &raw[..8] != MAGIC {
        return Err(bad());
    }
    let size = u64::from_le_bytes(raw[8..16].try_into().map_err(|_| bad())?);
    let ilen = u32::from_le_bytes(raw[16..20].try_into().map_err(|_| bad())?) as usize;
    let ident = raw.get(20..20 + ilen).ok_or_else(bad)?;
    let ident = String::from_utf8(ident.to_vec()).map_err(|_| bad())?;
    let words = size.div_ceil(CHUNK).div_ceil(64) as usize;
    let bits = raw.get(20 + ilen..20 + ilen + words * 8).ok_or_else(bad)?;
    let present = bits
        .chunks(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
        .collect();
    Ok((ident, size, present))
}

fn popcount(bits: &[u64]) -> u64 {
    bits.iter().map(|w| w.count_ones() as u64).sum()
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
        let shared = cache_dir.join("objects");
        fs::create_dir_all(&shared)?;
        let private_root = cache_dir.join("objects.private");
        remove_dead_private(&private_root);
        let lock = open_lock(&shared)?;
        if try_lock(&lock) {
            return Self::open_dir(shared, lock, false, capacity, mem_cap);
        }
        let dir = private_root.join(private_name());
        fs::create_dir_all(&dir)?;
        let lock = open_lock(&dir)?;
        if !try_lock(&lock) {
            return Err(io::Error::other(
                "cannot lock a new private cache directory",
            ));
        }
        tracing::info!(
            "{} is in use by another mount: this mount caches in {} (removed at unmount)",
            shared.display(),
            dir.display()
        );
        Self::open_dir(dir, lock, true, capacity, mem_cap)
    }

    fn open_dir(
        root: PathBuf,
        lock: File,
        private: bool,
        capacity: u64,
        mem_cap: u64,
    ) -> io::Result<DiskCache> {
        // Bitmaps are saved without fsync, and only ever vouch for chunks already written
        // (and stop vouching before a chunk is punched): a killed process loses nothing,
        // the page cache survives it. A machine that went down uncleanly may have lost
        // data a bitmap vouches for, so after a reboot only a clean shutdown is trusted.
        let boot = boot_id();
        let state = fs::read_to_string(root.join("state")).unwrap_or_default();
        let same_boot = !boot.is_empty() && state.starts_with(&format!("{boot} "));
        if !same_boot && !state.ends_with(" clean") {
            for e in fs::read_dir(&root)?.flatten() {
                // Not the lock: a new file of that name would be a second, free lock.
                if e.file_name() != "lock" {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        fs::write(root.join("state"), format!("{boot} dirty"))?;
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
        for e in fs::read_dir(&root)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().to_string();
            let Some(hash) = name.strip_suffix(".meta") else {
                continue;
            };
            let path = e.path();
            match read_meta(&path) {
                Ok((_, _, present)) if root.join(format!("{hash}.data")).exists() => {
                    let bytes = popcount(&present) * CHUNK;
                    let mtime = e.metadata()?.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    inner.cold.insert((mtime, hash.to_string()), bytes);
                    inner.cold_index.insert(hash.to_string(), mtime);
                    inner.used += bytes;
                }
                _ => {
                    let _ = fs::remove_file(&path);
                    let _ = fs::remove_file(root.join(format!("{hash}.data")));
                }
            }
        }
        // Data files whose metadata never got written hold nothing we can trust.
        for e in fs::read_dir(&root)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(hash) = name.strip_suffix(".data") {
                if !inner.cold_index.contains_key(hash) {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        let cache = DiskCache {
            root,
            _lock: lock,
            private,
            min_free: 0,
            capacity,
            inner: Mutex::new(inner),
            mem_cap,
            mem_used: AtomicU64::new(0),
            mem: Mutex::new(VecDeque::new()),
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
        let data_path = self.root.join(format!("{hash}.data"));
        let meta_path = self.root.join(format!("{hash}.meta"));
        if let Some(mtime) = inner.cold_index.remove(&hash) {
            let bytes = inner.cold.remove(&(mtime, hash.clone())).unwrap_or(0);
            inner.used -= bytes;
            match read_meta(&meta_path) {
                Ok((id2, s2, bits)) if id2 == ident && s2 == size && bits.len() == words => {
                    present = bits
                }
                _ => {
                    let _ = fs::remove_file(&meta_path);
                    let _ = fs::remove_file(&data_path);
                }
            }
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
            mem: Mutex::new(BTreeMap::new()),
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
        if self.remember(e, off, data) {
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

    /// Keeps a fetched range in memory for the reader that asked for it, within the
    /// budget: the oldest ranges go first.
    fn remember(&self, e: &Arc<CacheEntry>, off: u64, data: Bytes) -> bool {
        let len = data.len() as u64;
        if len == 0 || len > self.mem_cap {
            return false;
        }
        if let Some(old) = e.mem.lock().insert(off, MemBuf { data, served: 0 }) {
            self.mem_used
                .fetch_sub(old.data.len() as u64, Ordering::Relaxed);
        }
        self.mem_used.fetch_add(len, Ordering::Relaxed);
        let mut q = self.mem.lock();
        q.push_back((Arc::downgrade(e), off));
        while self.mem_used.load(Ordering::Relaxed) > self.mem_cap || q.len() > MEM_QUEUE {
            let Some((w, o)) = q.pop_front() else {
                break;
            };
            if let Some(old) = w.upgrade().and_then(|e| e.mem.lock().remove(&o)) {
                self.mem_used
                    .fetch_sub(old.data.len() as u64, Ordering::Relaxed);
            }
        }
        true
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
        let end = (off + len as u64).min(e.size);
        if off >= end {
            return None;
        }
        let mut mem = e.mem.lock();
        let mut starts = Vec::new();
        let mut cur = off;
        while cur < end {
            let (&s, b) = mem.range(..=cur).next_back()?;
            let b_end = s + b.data.len() as u64;
            if b_end <= cur {
                return None;
            }
            starts.push(s);
            cur = b_end;
        }
        let mut out = Vec::new();
        let mut single = None;
        let mut freed = 0;
        let many = starts.len() > 1;
        for s in starts {
            let b = mem.get_mut(&s)?;
            let a = (off.max(s) - s) as usize;
            let z = ((end - s) as usize).min(b.data.len());
            if many {
                out.extend_from_slice(&b.data[a..z]);
            } else {
                // Within one range (the usual case): no copy.
                single = Some(b.data.slice(a..z));
            }
            b.served += z - a;
            // Read once: the kernel's page cache holds it from now on.
            if b.served >= b.data.len() {
                freed += b.data.len() as u64;
                mem.remove(&s);
            }
        }
        drop(mem);
        self.mem_used.fetch_sub(freed, Ordering::Relaxed);
        Some(single.unwrap_or_else(|| Bytes::from(out)))
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
        let freed: u64 = std::mem::take(&mut *e.mem.lock())
            .values()
            .map(|b| b.data.len() as u64)
            .sum();
        self.mem_used.fetch_sub(freed, Ordering::Relaxed);
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
        let mut raw = Vec::with_capacity(20 + e.ident.len() + st.present.len() * 8);
        raw.extend_from_slice(MAGIC);
        raw.extend_from_slice(&e.size.to_le_bytes());
        raw.extend_from_slice(&(e.ident.len() as u32).to_le_bytes());
        raw.extend_from_slice(e.ident.as_bytes());
        for w in &st.present {
            raw.extend_from_slice(&w.to_le_bytes());
        }
        let tmp = e.meta_path.with_extension("meta.tmp");
        let mut f = File::create(&tmp)?;
        f.write_all(&raw)?;
        fs::rename(&tmp, &e.meta_path)?;
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
        if let Ok(d) = File::open(&self.root) {
            // SAFETY: syncfs on an fd we own.
            unsafe { libc::syncfs(d.as_raw_fd()) };
        }
        let _ = fs::write(self.root.join("state"), format!("{} clean", boot_id()));
    }
}

/// Private caches of mounts that are gone (killed: their lock is free).
fn remove_dead_private(root: &Path) {
    let Ok(dirs) = fs::read_dir(root) else {
        return;
    };
    for d in dirs.flatten() {
        let free = File::open(d.path().join("lock")).map_or(true, |l| try_lock(&l));
        if free {
            let _ = fs::remove_dir_all(d.path());
        }
    }
}

/// Size of the file system holding `dir`, and the bytes on it available to us.
pub struct DiskSpace {
    /// Size of that file system in bytes.
    pub total: u64,
    /// Bytes an unprivileged user may still write there.
    pub avail: u64,
}

/// Asks statvfs about the file system of `dir`; `None` if it cannot be asked.
pub fn disk_space(dir: &Path) -> Option<DiskSpace> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the struct we pass; the path is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    Some(DiskSpace {
        total: st.f_blocks as u64 * frsize,
        avail: st.f_bavail as u64 * frsize,
    })
}

fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn punch_hole(f: &File, off: u64, len: u64) {
    // SAFETY: plain syscall on an fd we own; failure only means the space is not freed.
    unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off as libc::off_t,
            len as libc::off_t,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowfs_client::AlignedBuf;

    /// What a fetch does with the bytes it got: to the readers, then into the file.
    fn insert(cache: &DiskCache, e: &Arc<CacheEntry>, off: u64, data: Bytes) {
        cache.offer(e, off, data.clone(), &Fetch::default());
        cache.store(e, off, &data).unwrap();
    }

    fn aligned(data: &[u8]) -> Bytes {
        AlignedBuf::from_slice(data).into_bytes()
    }

    #[test]
    fn insert_read_and_evict() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 4 << 20, 0).unwrap();
        let size = 6 << 20;
        let e = cache.entry("b", "k", "\"e\"", size).unwrap();
        assert!(e.try_read(0, 10).unwrap().is_none());
        let claim = e.claim(0, e.chunks(), 32);
        assert_eq!(claim.start.len(), 3);
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        insert(&cache, &e, 0, aligned(&data[..2 << 20]));
        assert_eq!(e.try_read(100, 1000).unwrap().unwrap(), data[100..1100]);
        insert(&cache, &e, 2 << 20, aligned(&data[2 << 20..]));
        // 6 MiB do not fit in 4 MiB: the oldest blocks went, the newest stayed.
        assert!(cache.used() <= 4 << 20);
        assert!(e.try_read(0, 10).unwrap().is_none());
        assert_eq!(
            e.try_read(5 << 20, 4096).unwrap().unwrap(),
            data[5 << 20..(5 << 20) + 4096]
        );
    }

    #[test]
    fn survives_reopen_and_keys_by_etag() {
        let dir = tempfile::tempdir().unwrap();
        let data = vec![7u8; 100_000];
        {
            let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
            let e = cache.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
            insert(&cache, &e, 0, Bytes::copy_from_slice(&data));
            cache.release(&e);
            cache.persist_all();
        }
        let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
        assert_eq!(cache.used(), 2 * CHUNK);
        let e = cache.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
        assert_eq!(e.try_read(0, data.len()).unwrap().unwrap(), data);
        let other = cache.entry("b", "k", "\"v2\"", data.len() as u64).unwrap();
        assert!(other.try_read(0, 1).unwrap().is_none());
    }

    /// A cache as a killed mount leaves it: bitmaps saved at release, no `persist_all`.
    fn killed_mount(dir: &Path, data: &[u8]) {
        let cache = DiskCache::open(dir, 1 << 30, 0).unwrap();
        let e = cache.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
        insert(&cache, &e, 0, aligned(data));
        cache.release(&e);
    }

    #[test]
    fn a_killed_mounts_cache_is_kept_until_a_reboot() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..3 * CHUNK).map(|i| (i % 249) as u8).collect();
        killed_mount(dir.path(), &data);
        let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
        assert_eq!(cache.used(), 3 * CHUNK);
        let e = cache.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
        assert_eq!(e.try_read(0, data.len()).unwrap().unwrap(), data);
        drop(cache);

        // The same, but the machine went down: unsynced data may be gone.
        let dir = tempfile::tempdir().unwrap();
        killed_mount(dir.path(), &data);
        fs::write(dir.path().join("objects/state"), "another-boot dirty").unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
        assert_eq!(cache.used(), 0);
        let e = cache.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
        assert!(e.try_read(0, 1).unwrap().is_none());
    }

    /// A fetch has written its chunk but not yet marked it present when eviction takes
    /// the rest of the block: the chunk must keep its bytes, in this process and in the
    /// bitmap the next one reads.
    #[test]
    fn eviction_spares_a_chunk_written_but_not_yet_marked() {
        let dir = tempfile::tempdir().unwrap();
        let one = BLOCK_CHUNKS * CHUNK;
        let a: Vec<u8> = (0..2 * one).map(|i| (i % 241) as u8).collect();
        let chunk = |c: u64| aligned(&a[(c * CHUNK) as usize..((c + 1) * CHUNK) as usize]);
        {
            // Room for one block and one chunk.
            let cache = DiskCache::open(dir.path(), one + CHUNK, 0).unwrap();
            let e = cache.entry("b", "a", "\"e\"", a.len() as u64).unwrap();
            insert(&cache, &e, 0, chunk(0));
            insert(&cache, &e, one, chunk(BLOCK_CHUNKS));
            // The last handle closed while a read-ahead of chunk 1 is still running.
            cache.release(&e);
            assert_eq!(e.claim(1, 2, 1).start.len(), 1);
            cache.write_data(&e, CHUNK, &chunk(1)).unwrap();
            // Another file fills the cache: block 0 of a (chunk 0) is the oldest.
            let f = cache.entry("b", "f", "\"e\"", one).unwrap();
            insert(&cache, &f, 0, aligned(&vec![9; one as usize]));
            assert!(
                e.try_read(0, 1).unwrap().is_none(),
                "chunk 0 was not evicted"
            );
            cache.mark(&e, CHUNK, 2 * CHUNK);
            let got = e.try_read(CHUNK, CHUNK as usize).unwrap();
            assert!(
                got.as_deref() == Some(&chunk(1)[..]),
                "chunk 1 lost its bytes"
            );
            cache.release(&f);
            // killed: no persist_all
        }
        let cache = DiskCache::open(dir.path(), 4 * one, 0).unwrap();
        let e = cache.entry("b", "a", "\"e\"", a.len() as u64).unwrap();
        let got = e.try_read(CHUNK, CHUNK as usize).unwrap();
        assert!(
            got.as_deref() == Some(&chunk(1)[..]),
            "the next mount reads wrong bytes"
        );
        assert!(e.try_read(0, 1).unwrap().is_none());
    }

    #[test]
    fn a_second_live_mount_gets_a_private_cache() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..2 * CHUNK).map(|i| (i % 239) as u8).collect();
        let first = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
        let e = first.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
        insert(&first, &e, 0, aligned(&data));
        first.release(&e);
        {
            let second = DiskCache::open(dir.path(), CHUNK, 0).unwrap();
            assert!(second.private);
            assert_eq!(
                second.used(),
                0,
                "the second mount indexed the first one's files"
            );
            // Its eviction (capacity one chunk) must not touch the first mount's files.
            let f = second.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
            insert(&second, &f, 0, aligned(&data));
            second.release(&f);
            second.persist_all();
            let left: Vec<_> = fs::read_dir(dir.path().join("objects.private"))
                .unwrap()
                .collect();
            assert!(
                left.is_empty(),
                "the private cache was not removed at unmount"
            );
        }
        let e = first.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
        assert_eq!(e.try_read(0, data.len()).unwrap().unwrap(), data);
        first.release(&e);
        first.persist_all();
        drop(first);
        // One at a time, mounts share objects/.
        let third = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
        assert!(!third.private);
        assert_eq!(third.used(), 2 * CHUNK);
    }

    #[test]
    fn a_killed_mounts_private_cache_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir.path().join("objects.private/123-0badf00d");
        fs::create_dir_all(&dead).unwrap();
        fs::write(dead.join("lock"), "").unwrap();
        fs::write(dead.join("x.data"), "left behind").unwrap();
        let _cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
        assert!(!dead.exists());
    }

    #[test]
    fn the_cache_gives_way_to_free_space() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..4 * CHUNK).map(|i| (i % 233) as u8).collect();
        let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
        let e = cache.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
        insert(&cache, &e, 0, aligned(&data));
        assert_eq!(cache.used(), 4 * CHUNK);
        // A staged write found the disk full: asking for more room than the disk has
        // empties the cache.
        cache.make_room(u64::MAX / 4);
        assert_eq!(cache.used(), 0);
        assert!(e.try_read(0, 1).unwrap().is_none());
        cache.release(&e);
        // A floor above the disk's free space: nothing is kept, nothing adopted.
        let cache = cache.with_min_free(u64::MAX / 4);
        let e = cache.entry("b", "k2", "\"v1\"", data.len() as u64).unwrap();
        insert(&cache, &e, 0, aligned(&data));
        assert_eq!(cache.used(), 0);
        let staged = dir.path().join("staged");
        fs::write(&staged, &data).unwrap();
        assert!(!cache.adopt("b", "k3", "\"v1\"", data.len() as u64, &staged));
        assert!(staged.exists());
    }

    #[test]
    fn claims_are_shared_between_readers() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
        let e = cache.entry("b", "k", "\"e\"", 10 * CHUNK).unwrap();
        let first = e.claim(0, 4, 128);
        assert_eq!(first.start.len(), 1);
        let second = e.claim(2, 6, 128);
        assert_eq!(second.wait.len(), 1);
        assert_eq!((second.start[0].0, second.start[0].1), (4, 6));
    }

    #[test]
    fn fetched_ranges_are_read_from_memory_once_then_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        // 3 MiB of memory: the oldest range goes when a fourth comes.
        let cache = DiskCache::open(dir.path(), 1 << 30, 3 << 20).unwrap();
        // An odd size: the last range ends in a partial page, written through the page cache.
        let size = (4 << 20) + 1234;
        let data: Vec<u8> = (0..size).map(|i| (i % 253) as u8).collect();
        let e = cache.entry("b", "k", "\"e\"", size as u64).unwrap();
        for off in (0..size).step_by(1 << 20) {
            let end = (off + (1 << 20)).min(size);
            insert(&cache, &e, off as u64, aligned(&data[off..end]));
        }
        assert!(cache.mem_used.load(Ordering::Relaxed) <= 3 << 20);
        // Ranges 1.. are in memory; reading one whole frees it.
        let before = cache.mem_used.load(Ordering::Relaxed);
        let got = cache
            .read(&e, (2 << 20) - 100, (1 << 20) + 200)
            .unwrap()
            .unwrap();
        assert_eq!(got, data[(2 << 20) - 100..(3 << 20) + 100]);
        assert_eq!(
            cache.read_mem(&e, 2 << 20, 1 << 20).unwrap(),
            data[2 << 20..3 << 20]
        );
        assert_eq!(cache.mem_used.load(Ordering::Relaxed), before - (1 << 20));
        assert!(cache.read_mem(&e, 2 << 20, 10).is_none());
        // Everything, evicted from memory or read, is in the file too.
        assert_eq!(e.try_read(0, size).unwrap().unwrap(), data);
        assert!(cache.read_mem(&e, 0, 10).is_none());
        assert_eq!(cache.read(&e, 0, size).unwrap().unwrap(), data);
        cache.release(&e);
        cache.forget_mem(&e);
        assert_eq!(cache.mem_used.load(Ordering::Relaxed), 0);
        let len = fs::metadata(&e.data_path).unwrap().len();
        assert_eq!(len, size as u64);
    }
}
