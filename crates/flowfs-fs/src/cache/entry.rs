//! One object version in the cache: a sparse data file, the bitmap of the 64 KiB chunks
//! it holds (saved beside it as `.meta`), the fetches in flight for its missing chunks and
//! its fetched ranges still in memory.
//!
//! Locks of an entry (each guards only what is named; none is held across I/O except
//! where said):
//! - `state` (the bitmap, its count, whether it changed since saved): readers hold it to
//!   read the file (`try_read`), so eviction, which clears chunks under its write lock,
//!   never punches chunks a reader is copying. Eviction takes it under the cache's
//!   `inner`, so it waits for such a read in progress (page-cache copies, as before).
//!   Bitmap saves copy the bitmap under it and write it without it.
//! - `inflight` (chunk -> the fetch or punch in flight for it), taken before `state`.
//! - `save`: one bitmap save at a time, held across the write of the `.meta`, so that the
//!   last file renamed is the newest bitmap. Reads never take it.
//! - `users`, `file`, `direct`: handles open on it, and its data file opened once.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use flowfs_client::ALIGN;
use parking_lot::{Mutex, RwLock};

use super::bitmap::Bitmap;
use super::disk::punch_hole;
use super::fetch::{Claim, Fetch};
use super::index::Id;
use super::memory::Ranges;
use super::persist::{self, data_path, meta_path};
use super::{BLOCK_CHUNKS, CHUNK};

struct EntryState {
    bits: Bitmap,
    /// Changed since saved.
    dirty: bool,
}

/// Chunks eviction took from one block: no longer present, reserved in `inflight` (a
/// reader waits instead of fetching them into the file before they are punched).
pub(super) struct Taken {
    runs: Vec<(u64, u64)>,
    punch: Arc<Fetch>,
    /// The entry held nothing after this block went.
    pub empty: bool,
}

impl Taken {
    /// Chunks taken.
    pub(super) fn freed(&self) -> u64 {
        self.runs.iter().map(|(s, c)| c - s).sum()
    }
}

/// One object version in the cache, shared by every handle that reads it.
pub struct CacheEntry {
    id: Id,
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
    save: Mutex<()>,
}

impl CacheEntry {
    /// `bits` is what the saved bitmap says (saved already: not dirty).
    pub(super) fn new(
        id: Id,
        root: &Path,
        hash: &str,
        ident: String,
        size: u64,
        bits: Bitmap,
        users: u32,
    ) -> CacheEntry {
        CacheEntry {
            id,
            ident,
            size,
            data_path: data_path(root, hash),
            meta_path: meta_path(root, hash),
            file: Mutex::new(None),
            direct: Mutex::new(None),
            mem: Ranges::default(),
            users: Mutex::new(users),
            state: RwLock::new(EntryState { bits, dirty: false }),
            inflight: Mutex::new(HashMap::new()),
            save: Mutex::new(()),
        }
    }

    pub(super) fn id(&self) -> Id {
        self.id
    }

    pub(super) fn mem(&self) -> &Ranges {
        &self.mem
    }

    #[cfg(test)]
    pub(super) fn data_path(&self) -> &Path {
        &self.data_path
    }

    pub fn chunks(&self) -> u64 {
        self.size.div_ceil(CHUNK)
    }

    pub(super) fn add_user(&self) {
        *self.users.lock() += 1;
    }

    /// One handle fewer; true if it was the last.
    pub(super) fn drop_user(&self) -> bool {
        let mut users = self.users.lock();
        *users = users.saturating_sub(1);
        *users == 0
    }

    pub(super) fn unused(&self) -> bool {
        *self.users.lock() == 0
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

    /// The last handle closed: the data file is closed too.
    pub(super) fn close_files(&self) {
        *self.file.lock() = None;
        *self.direct.lock() = None;
    }

    /// Reads `[off, off + len)` if every chunk of it is in the cache.
    pub fn try_read(&self, off: u64, len: usize) -> io::Result<Option<Vec<u8>>> {
        let end = (off + len as u64).min(self.size);
        if off >= end {
            return Ok(Some(Vec::new()));
        }
        let state = self.state.read();
        if !(off / CHUNK..end.div_ceil(CHUNK)).all(|c| state.bits.has(c)) {
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
            if state.bits.has(c) {
                close(&mut run, c, &mut claim, &mut inflight);
            } else if let Some(f) = inflight.get(&c).cloned() {
                close(&mut run, c, &mut claim, &mut inflight);
                match claim.wait.last_mut() {
                    Some(w) if w.1 == c && Arc::ptr_eq(&w.2, &f) => w.1 = c + 1,
                    _ => claim.wait.push((c, c + 1, f)),
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

    pub(super) fn drop_inflight(&self, c0: u64, c1: u64) {
        let mut inflight = self.inflight.lock();
        for c in c0..c1 {
            inflight.remove(&c);
        }
    }

    /// Writes the page-aligned body of `data` with `O_DIRECT` when it can (`direct_ok`,
    /// cleared once the cache's file system refuses it), the rest (a tail shorter than a
    /// page, at the end of the object) through the page cache.
    pub(super) fn write(&self, off: u64, data: &[u8], direct_ok: &AtomicBool) -> io::Result<()> {
        let mut done = 0;
        let aligned =
            (data.as_ptr() as usize).is_multiple_of(ALIGN) && off.is_multiple_of(ALIGN as u64);
        let body = data.len() / ALIGN * ALIGN;
        if aligned && body > 0 && direct_ok.load(Ordering::Relaxed) {
            match self
                .open_direct()
                .and_then(|f| f.write_all_at(&data[..body], off))
            {
                Ok(()) => done = body,
                Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::info!("the cache directory does not take O_DIRECT: {err}");
                    direct_ok.store(false, Ordering::Relaxed);
                }
                Err(err) => return Err(err),
            }
        }
        if done < data.len() {
            self.open_file()?
                .write_all_at(&data[done..], off + done as u64)?;
        }
        Ok(())
    }

    /// Marks chunks `[c0, c1)`, just written, present; the bytes that added to each block
    /// of `[c0 / BLOCK_CHUNKS, c1 / BLOCK_CHUNKS)` (rounded up), 0 for those it had.
    pub(super) fn set_present(&self, c0: u64, c1: u64) -> Vec<(u64, u64)> {
        let mut st = self.state.write();
        let mut added = Vec::new();
        for b in c0 / BLOCK_CHUNKS..c1.div_ceil(BLOCK_CHUNKS) {
            let (from, to) = (c0.max(b * BLOCK_CHUNKS), c1.min((b + 1) * BLOCK_CHUNKS));
            let n = st.bits.set_range(from, to);
            st.dirty |= n > 0;
            added.push((b, n * CHUNK));
        }
        added
    }

    /// Eviction takes block `b`: its present chunks are no longer present and are
    /// reserved until `punch` has punched them. The bytes freed are the index's count of
    /// that block.
    pub(super) fn take_block(&self, b: u64) -> Taken {
        let mut inflight = self.inflight.lock();
        let mut st = self.state.write();
        let (c0, c1) = (
            b * BLOCK_CHUNKS,
            ((b + 1) * BLOCK_CHUNKS).min(self.chunks()),
        );
        // Only chunks that are present are punched, never a whole block: a fetch may
        // have written one of the others and be about to mark it present.
        let runs = st.bits.clear_range(c0, c1);
        st.dirty = true;
        let punch = Arc::new(Fetch::default());
        for &(s, c) in &runs {
            for i in s..c {
                inflight.insert(i, punch.clone());
            }
        }
        Taken {
            runs,
            punch,
            empty: st.bits.count() == 0,
        }
    }

    /// After eviction took chunks, before they are punched: the bitmap on disk stops
    /// vouching for them, so that a process killed in between leaves nothing wrong behind.
    pub(super) fn unvouch(&self) {
        let _save = self.save.lock();
        if self.unused() {
            if let Err(err) = self.save_locked() {
                tracing::warn!("cannot save cache metadata: {err}");
                let _ = fs::remove_file(&self.meta_path);
            }
        } else {
            // In use: the bitmap is saved again at release; until then none on disk.
            let _ = fs::remove_file(&self.meta_path);
        }
    }

    /// Punches the chunks eviction took (after `unvouch`) and ends their reservation:
    /// readers waiting on them fetch them again.
    pub(super) fn punch(&self, taken: &[Taken]) {
        let open = self
            .file
            .lock()
            .clone()
            .or_else(|| self.direct.lock().clone());
        let file = match open {
            Some(f) => Some(f),
            None => File::options()
                .write(true)
                .open(&self.data_path)
                .ok()
                .map(Arc::new),
        };
        if let Some(f) = file {
            for &(s, c) in taken.iter().flat_map(|t| &t.runs) {
                punch_hole(&f, s * CHUNK, (c - s) * CHUNK);
            }
        }
        self.end_punch(taken);
    }

    /// Ends the reservations of taken chunks (punched, or the whole entry removed).
    pub(super) fn end_punch(&self, taken: &[Taken]) {
        let mut inflight = self.inflight.lock();
        for t in taken {
            for c in t.runs.iter().flat_map(|&(s, c)| s..c) {
                if inflight.get(&c).is_some_and(|f| Arc::ptr_eq(f, &t.punch)) {
                    inflight.remove(&c);
                }
            }
        }
        drop(inflight);
        for t in taken {
            t.punch.finish(Ok(()));
        }
    }

    /// Saves the bitmap that vouches for the data, if it changed (see `persist::start`
    /// for crash safety).
    pub(super) fn save(&self) -> io::Result<()> {
        let _save = self.save.lock();
        self.save_locked()
    }

    /// `save`, with the `save` lock held: the bitmap is copied under `state` and written
    /// without it, so readers do not wait for the disk.
    fn save_locked(&self) -> io::Result<()> {
        let present = {
            let mut st = self.state.write();
            if !st.dirty {
                return Ok(());
            }
            st.dirty = false;
            (st.bits.count() > 0).then(|| st.bits.words().to_vec())
        };
        let r = match present {
            Some(present) => persist::write_meta(&self.meta_path, &self.ident, self.size, &present),
            None => {
                let _ = fs::remove_file(&self.meta_path);
                Ok(())
            }
        };
        if r.is_err() {
            self.state.write().dirty = true;
        }
        r
    }
}
