//! One object version in the cache: its two files, a sidecar with its chunk map and a
//! data file with its bytes (shared by every process on the directory, persist.rs), this
//! process's copy of its chunk map (a hint), the fetches in flight here for its missing
//! chunks and its fetched ranges still in memory.
//!
//! How processes stay out of each other's way on one entry (shared.rs locks, all on the
//! sidecar, each on an open file of its own; the data file is never locked):
//! - a fetch holds an exclusive lock on the words of its chunks from before it looks at
//!   them until its bytes are written and their words set (`FetchLock`): another process
//!   wanting them waits for it, then finds them present (cross-process single flight);
//! - eviction takes the same lock without waiting (a chunk being fetched is skipped),
//!   and the pin byte's exclusively, also without waiting (a pinned entry is skipped,
//!   pin.rs), clears the words, punches the data file, and lets go;
//! - a reader copies from the data file when its hint says the chunks are present, then
//!   reads their words again: unchanged (present, same generation), the bytes it copied
//!   were there; changed, it takes the new words and reads as on a miss. No lock, one
//!   `pread`.
//! - every process with the entry in use holds a shared lock on the sidecar's first byte
//!   (`INUSE`): eviction removes an entry only when it can lock that byte exclusively.
//!
//! Locks of this process (none held across I/O except where said):
//! - `state` (the hint): readers hold it shared while they copy from the file, so this
//!   process's evictions (which clear chunks under it, `take_block`) wait for them.
//! - `inflight` (chunk -> the fetch or punch in flight for it here), taken before `state`.
//! - `files`, `users`: the open files of the entry and the handles on it.
//!
//! An entry's files are made by its first fetch that writes (`lock_fetch`), not at its
//! open: a small version that is not admitted (admit.rs) is served from memory and never
//! costs the two inodes, the sidecar's header and the locks (issue 48: a quarter of the
//! mount's CPU in B11 went to ext4 making per-object files).

mod fetching;

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use super::bitmap::{made_present, present, ChunkMap};
use super::fetch::{Claim, Claimed, Fetch};
use super::memory::Ranges;
use super::persist::{self, now_ms, Layout, INUSE};
use super::shared::{ofd_lock, reopen, Lock};
use super::small::Packed;
use super::{BLOCK_CHUNKS, CHUNK, SMALL};

/// How often (ms) a process writes the use time of a block it keeps reading.
const STAMP_EVERY: u64 = 1000;

/// The open files of an entry; while they are open, the entry is in use (a shared lock
/// on its sidecar's first byte, held by `map`'s open file: nothing else of this process
/// locks through it).
pub(super) struct Files {
    /// The sidecar: header, use times, chunk words.
    pub(super) map: File,
    /// The data file: the object's bytes.
    pub(super) data: File,
}

/// An exclusive lock on the words of chunks `[c0, c1)`: a fetch of them in flight. It
/// lasts as long as this value (the lock goes with its own open file).
pub struct FetchLock {
    _fd: File,
    files: Arc<Files>,
    c0: u64,
    c1: u64,
    /// Which of its chunks were present when it was taken (fetched by another process
    /// since the claim): their readers read the file, a fetch gives them up.
    present: Vec<bool>,
}

impl FetchLock {
    /// Which of chunks `[c0, c1)` were present when the lock was taken.
    pub fn present(&self) -> &[bool] {
        &self.present
    }
}

/// Chunks eviction took from one block here: no longer present in the hint, reserved in
/// `inflight` (a reader waits instead of fetching them) until punched.
pub(super) struct Taken {
    runs: Vec<(u64, u64)>,
    punch: Arc<Fetch>,
}

/// One object version in the cache, shared by every handle that reads it.
pub struct CacheEntry {
    pub(super) hash: String,
    ident: String,
    pub size: u64,
    layout: Layout,
    dir: PathBuf,
    files: Mutex<Option<Arc<Files>>>,
    mem: Arc<Ranges>,
    users: Mutex<u32>,
    state: RwLock<ChunkMap>,
    /// The last use time this process wrote, per block.
    stamped: Vec<AtomicU64>,
    inflight: Mutex<HashMap<u64, Arc<Fetch>>>,
    /// Its fetched bytes are written to disk (admit.rs); decided at its opens.
    admitted: AtomicBool,
    /// Where all its bytes are if it is a small version packed in a segment (small.rs):
    /// found at its open or written by its fetch, and never changed then.
    packed: OnceLock<Packed>,
}

impl CacheEntry {
    /// The entry of a version, with one user; its files are opened at its first use
    /// (`files`) and made by its first fetch that writes (`lock_fetch`).
    pub(super) fn new(dir: &Path, hash: String, ident: String, size: u64) -> CacheEntry {
        let layout = Layout::new(size);
        CacheEntry {
            hash,
            ident,
            size,
            layout,
            dir: dir.to_path_buf(),
            files: Mutex::new(None),
            mem: Arc::default(),
            users: Mutex::new(1),
            state: RwLock::new(ChunkMap::new(vec![0; layout.chunks as usize])),
            stamped: (0..layout.blocks).map(|_| AtomicU64::new(0)).collect(),
            inflight: Mutex::new(HashMap::new()),
            admitted: AtomicBool::new(true),
            packed: OnceLock::new(),
        }
    }

    pub(super) fn ident(&self) -> &str {
        &self.ident
    }

    /// All its bytes are in a segment's record (small.rs).
    pub(super) fn set_packed(&self, p: Packed) {
        let _ = self.packed.set(p);
    }

    pub(super) fn is_packed(&self) -> bool {
        self.packed.get().is_some()
    }

    /// `[off, off + len)` from its segment's record, if it is packed.
    pub(super) fn read_packed(&self, off: u64, len: usize) -> io::Result<Option<Vec<u8>>> {
        self.packed.get().map(|p| p.read(off, len)).transpose()
    }

    /// Whether its fetched bytes are written to disk.
    pub(super) fn admitted(&self) -> bool {
        self.admitted.load(Ordering::Relaxed)
    }

    pub(super) fn set_admitted(&self, admitted: bool) {
        self.admitted.store(admitted, Ordering::Relaxed);
    }

    /// Whether any of its chunks is on disk (as this process last read the map).
    pub(super) fn any_present(&self) -> bool {
        self.state.read().any()
    }

    /// Whether this process has no files of it open (none were found, or its handles
    /// closed).
    pub(super) fn absent(&self) -> bool {
        self.files.lock().is_none()
    }

    pub(super) fn mem(&self) -> &Arc<Ranges> {
        &self.mem
    }

    /// The entry's sidecar.
    pub(super) fn map_path(&self) -> PathBuf {
        persist::map_path(&self.dir, &self.hash)
    }

    /// The data file this process has open (the entry in use).
    #[cfg(test)]
    pub(super) fn data_path(&self) -> PathBuf {
        use std::os::unix::io::AsRawFd;
        let f = self.made_files().expect("the entry's files");
        std::fs::read_link(format!("/proc/self/fd/{}", f.data.as_raw_fd())).expect("its name")
    }

    pub fn chunks(&self) -> u64 {
        self.layout.chunks
    }

    pub(super) fn add_user(&self) {
        *self.users.lock() += 1;
    }

    pub(super) fn unused(&self) -> bool {
        *self.users.lock() == 0
    }

    /// One handle fewer; true if it was the last (its files are closed then).
    pub(super) fn drop_user(&self) -> bool {
        let mut users = self.users.lock();
        *users = users.saturating_sub(1);
        let last = *users == 0;
        drop(users);
        if last {
            *self.files.lock() = None;
        }
        last
    }

    /// The entry's open files, if it has any (`NotFound` if not: looked for again at the
    /// next call, another process may make them); opened again (and the hint read anew)
    /// after they were closed: the file may have been removed and made again meanwhile.
    pub(super) fn files(&self) -> io::Result<Arc<Files>> {
        self.open_files(false)
    }

    /// The entry's open files, made if there are none.
    fn made_files(&self) -> io::Result<Arc<Files>> {
        self.open_files(true)
    }

    fn open_files(&self, make: bool) -> io::Result<Arc<Files>> {
        if let Some(f) = &*self.files.lock() {
            return Ok(f.clone());
        }
        // Opened without the lock (hits take it): two threads may both open; one wins.
        let (map, data) = self.open_in_use(make)?;
        let words = persist::read_words(&map, &self.layout, 0, self.layout.chunks)?;
        let files = Arc::new(Files { map, data });
        let mut slot = self.files.lock();
        if let Some(f) = &*slot {
            return Ok(f.clone());
        }
        *slot = Some(files.clone());
        drop(slot);
        self.take_words(0, &words);
        Ok(files)
    }

    /// The entry's sidecar, opened and locked in use, and its data file (made if there
    /// are none and `make`). An eviction may remove the entry between the open and the
    /// lock: then it is opened (made) again. Once the sidecar is locked in use and still
    /// in place, nobody removes it or its data file, which is opened then (unless this
    /// call made it).
    fn open_in_use(&self, make: bool) -> io::Result<(File, File)> {
        let path = persist::map_path(&self.dir, &self.hash);
        for _ in 0..3 {
            let e = persist::open_entry(&self.dir, &self.hash, &self.ident, self.size, make)?;
            ofd_lock(&e.map, Lock::Shared, INUSE, 1, true)?;
            if !same_file(&path, &e.map) {
                continue;
            }
            let data = match e.data {
                Some(data) => Ok(data),
                None => persist::open_data(&self.dir, &self.hash, e.tag, self.size),
            };
            match data {
                Ok(data) => return Ok((e.map, data)),
                // `flowfs cache clear --force` meanwhile: made again.
                Err(err) if err.kind() == io::ErrorKind::NotFound && !same_file(&path, &e.map) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, err));
                }
                Err(err) => return Err(err),
            }
        }
        Err(io::Error::other("the cache entry keeps being removed"))
    }

    /// Takes the words the file has for chunks from `c0` on into the hint, except those
    /// in flight here.
    pub(super) fn take_words(&self, c0: u64, words: &[u32]) {
        let inflight = self.inflight.lock();
        self.state
            .write()
            .update(c0, words, |c| inflight.contains_key(&c));
    }

    /// Reads `[off, off + len)` if every chunk of it is in the cache (this process's hint,
    /// checked against the file after the copy; on a miss the hint is read anew once).
    pub fn try_read(&self, off: u64, len: usize) -> io::Result<Option<Vec<u8>>> {
        let end = (off + len as u64).min(self.size);
        if off >= end {
            return Ok(Some(Vec::new()));
        }
        let (c0, c1) = (off / CHUNK, end.div_ceil(CHUNK));
        // A cache directory that went away (a scratch cleaner) costs the cache only.
        let Ok(files) = self.files() else {
            return Ok(None);
        };
        for _ in 0..2 {
            let state = self.state.read();
            if (c0..c1).all(|c| state.has(c)) {
                let mut buf = vec![0u8; (end - off) as usize];
                files.data.read_exact_at(&mut buf, off)?;
                let now = persist::read_words(&files.map, &self.layout, c0, c1)?;
                if now == state.words(c0, c1) {
                    return Ok(Some(buf));
                }
                drop(state);
                self.take_words(c0, &now);
            } else {
                drop(state);
                let now = persist::read_words(&files.map, &self.layout, c0, c1)?;
                if present(&now) < c1 - c0 {
                    self.take_words(c0, &now);
                    return Ok(None);
                }
                self.take_words(c0, &now);
            }
        }
        Ok(None)
    }

    /// Marks the blocks under `[off, off + len)` used now, in the file at most once a
    /// second per block: eviction across processes goes by these times.
    pub(super) fn touch(&self, off: u64, len: u64) {
        let now = now_ms();
        let b0 = off / CHUNK / BLOCK_CHUNKS;
        let b1 = (off + len).div_ceil(CHUNK).div_ceil(BLOCK_CHUNKS);
        for b in b0..b1.max(b0 + 1) {
            let Some(last) = self.stamped.get(b as usize) else {
                continue;
            };
            if now.saturating_sub(last.load(Ordering::Relaxed)) >= STAMP_EVERY {
                last.store(now, Ordering::Relaxed);
                // Not under `files`: hits take it.
                let files = self.files.lock().clone();
                if let Some(f) = files {
                    persist::write_stamp(&f.map, &self.layout, b, now);
                }
            }
        }
    }
}

/// Whether `path` names the file `f` has open.
pub(in crate::cache) fn same_file(path: &Path, f: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = |m: std::fs::Metadata| (m.dev(), m.ino());
    std::fs::metadata(path).ok().map(ino) == f.metadata().ok().map(ino)
}
