//! The write side: staging files on local disk, the journal that lets a later mount
//! finish what a killed one had not uploaded, and the upload of one staged file (one PUT
//! when small, a parallel multipart upload when large; a failed multipart upload is
//! aborted, so no partial object is ever visible).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use flowfs_client::{AlignedBuf, ClientError, CompletedPart, ObjectClient};
use parking_lot::Mutex;
use tokio::sync::{Notify, Semaphore};

use crate::early::Early;

#[derive(Debug, Default)]
pub struct StagedState {
    pub size: u64,
    /// Bumped by every change of content or size.
    pub gen: u64,
    /// The generation the bucket holds.
    pub durable_gen: u64,
    pub writers: u32,
    pub queued: bool,
    pub uploading: bool,
    /// An upload was asked for (fsync, close) while one was in flight: the one in flight
    /// runs again when it ends, even with a writer still open.
    pub rerun: bool,
    pub error: Option<String>,
    pub deleted: bool,
    /// Key written in the journal record, if there is one.
    pub journaled: Option<String>,
    /// Whole parts may go up while the file is still being written (a new file written
    /// front to back); cleared for good by a change below `sent`.
    pub early_ok: bool,
    /// Bytes `[0, sent)` are claimed by the early upload.
    pub sent: u64,
    pub early: Option<Arc<Early>>,
}

impl StagedState {
    pub fn dirty(&self) -> bool {
        self.gen != self.durable_gen
    }
}

/// A file whose content lives on local disk until it is durable in the bucket.
pub struct Staged {
    pub id: u64,
    data: PathBuf,
    rec: PathBuf,
    pub file: File,
    pub st: Mutex<StagedState>,
    pub done: Notify,
}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Staged({})", self.id)
    }
}

impl Staged {
    /// Where the id of this file's early multipart upload is noted while it is open, so
    /// that the next mount aborts it if this one dies (an open upload keeps its parts,
    /// billed, until aborted).
    pub fn upload_note_path(&self) -> PathBuf {
        self.rec.with_extension("mpu")
    }

    pub fn read_at(&self, off: u64, len: usize) -> io::Result<Vec<u8>> {
        let size = self.st.lock().size;
        if off >= size {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; len.min((size - off) as usize)];
        let mut done = 0;
        while done < buf.len() {
            let n = self.file.read_at(&mut buf[done..], off + done as u64)?;
            if n == 0 {
                // A sparse tail beyond what was written reads as zeros.
                break;
            }
            done += n;
        }
        Ok(buf)
    }

    pub fn write_at(&self, off: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, off)?;
        let mut st = self.st.lock();
        if off < st.sent {
            // Bytes already sent changed: the early upload is dropped (and aborted).
            st.early_ok = false;
            st.early = None;
        }
        st.size = st.size.max(off + data.len() as u64);
        st.gen += 1;
        Ok(())
    }

    pub fn set_len(&self, size: u64) -> io::Result<()> {
        // Under the lock: an upload whose read fails because of this truncation must
        // find the generation already bumped (it then retries instead of failing).
        let mut st = self.st.lock();
        if size < st.sent {
            st.early_ok = false;
            st.early = None;
        }
        self.file.set_len(size)?;
        st.size = size;
        st.gen += 1;
        Ok(())
    }
}

/// The staging directory of one mount, locked while the mount lives so that another
/// mount sharing the cache dir never takes its files for orphans.
pub struct Staging {
    dir: PathBuf,
    _lock: File,
    next: AtomicU64,
}

fn try_lock(f: &File) -> bool {
    // SAFETY: flock on an fd we own.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// `bucket`, `key` and, for a symlink (whose data is its target), a third line `symlink`.
fn write_record(path: &Path, bucket: &str, key: &str, symlink: bool) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let kind = if symlink { "symlink\n" } else { "" };
    fs::write(&tmp, format!("{bucket}\n{key}\n{kind}"))?;
    fs::rename(tmp, path)
}

/// Notes `upload_id` of `key` in `path` (see `Staged::upload_note_path`).
pub fn note_upload(path: &Path, bucket: &str, key: &str, upload_id: &str) -> io::Result<()> {
    let tmp = path.with_extension("mpu.tmp");
    fs::write(&tmp, format!("{bucket}\n{key}\n{upload_id}\n"))?;
    fs::rename(tmp, path)
}

/// Removes a staging directory of a dead mount once nothing but its lock is left in it.
fn remove_if_done(dir: &Path) {
    let busy = fs::read_dir(dir).map_or(true, |r| r.flatten().any(|f| f.file_name() != "lock"));
    if !busy {
        let _ = fs::remove_file(dir.join("lock"));
        let _ = fs::remove_dir(dir);
    }
}

/// A multipart upload that a dead mount left open (an early upload of a file it was
/// writing): the next mount aborts it.
#[derive(Debug)]
pub struct OpenUpload {
    pub key: String,
    pub upload_id: String,
    note: PathBuf,
}

impl OpenUpload {
    pub fn forget(&self) {
        let _ = fs::remove_file(&self.note);
        if let Some(d) = self.note.parent() {
            remove_if_done(d);
        }
    }
}

/// A staged file left by a mount that died before uploading it.
#[derive(Debug)]
pub struct Orphan {
    pub key: String,
    pub data: PathBuf,
    /// The data is a symlink's target.
    pub symlink: bool,
    rec: PathBuf,
}

impl Orphan {
    pub fn forget(&self) {
        let _ = fs::remove_file(&self.rec);
        let _ = fs::remove_file(&self.data);
        // Not while other records are left: without its lock file, the directory would
        // be skipped by every later scan.
        if let Some(d) = self.rec.parent() {
            remove_if_done(d);
        }
    }
}

impl Staging {
    pub fn open(cache_dir: &Path) -> io::Result<Staging> {
        let root = cache_dir.join("staging");
        fs::create_dir_all(&root)?;
        let name = format!("{}-{:08x}", std::process::id(), rand::random::<u32>());
        let dir = root.join(name);
        fs::create_dir(&dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))?;
        if !try_lock(&lock) {
            return Err(io::Error::other("cannot lock the staging directory"));
        }
        Ok(Staging {
            dir,
            _lock: lock,
            next: AtomicU64::new(1),
        })
    }

    pub fn create(&self) -> io::Result<Arc<Staged>> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let data = self.dir.join(format!("{id}.data"));
        let rec = self.dir.join(format!("{id}.rec"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&data)?;
        Ok(Arc::new(Staged {
            id,
            data,
            rec,
            file,
            st: Mutex::new(StagedState::default()),
            done: Notify::new(),
        }))
    }

    /// Records that `s` must reach `key`; a later mount uploads it if this one dies.
    pub fn journal(&self, s: &Staged, bucket: &str, key: &str, symlink: bool) -> io::Result<()> {
        write_record(&s.rec, bucket, key, symlink)
    }

    pub fn unjournal(&self, s: &Staged) {
        let _ = fs::remove_file(&s.rec);
    }

    /// Where the staged bytes are, for the disk cache to take them over after upload.
    pub fn data_path<'a>(&self, s: &'a Staged) -> &'a Path {
        &s.data
    }

    /// Drops the staging file once its content is durable or deleted.
    pub fn discard(&self, s: &Staged) {
        let _ = fs::remove_file(&s.rec);
        let _ = fs::remove_file(&s.data);
    }

    /// Multipart uploads a dead mount left open for `bucket` (noted by `note_upload`).
    pub fn open_uploads(&self, cache_dir: &Path, bucket: &str) -> Vec<OpenUpload> {
        let mut out = Vec::new();
        for dir in self.dead_dirs(cache_dir) {
            let Ok(files) = fs::read_dir(&dir) else {
                continue;
            };
            for f in files.flatten() {
                let p = f.path();
                if p.extension().is_none_or(|e| e != "mpu") {
                    continue;
                }
                let Ok(text) = fs::read_to_string(&p) else {
                    continue;
                };
                let mut lines = text.lines();
                if let (Some(b), Some(k), Some(id)) = (lines.next(), lines.next(), lines.next()) {
                    if b == bucket {
                        out.push(OpenUpload {
                            key: k.to_string(),
                            upload_id: id.to_string(),
                            note: p,
                        });
                    }
                }
            }
        }
        out
    }

    /// Staging directories of other mounts that are not running (their lock is free).
    /// One left without its lock file is removed if empty.
    fn dead_dirs(&self, cache_dir: &Path) -> Vec<PathBuf> {
        let Ok(dirs) = fs::read_dir(cache_dir.join("staging")) else {
            return Vec::new();
        };
        dirs.flatten()
            .map(|d| d.path())
            .filter(|dir| *dir != self.dir)
            .filter(|dir| match File::open(dir.join("lock")) {
                Ok(lock) => try_lock(&lock), // else a live mount owns it
                Err(_) => {
                    let _ = fs::remove_dir(dir);
                    false
                }
            })
            .collect()
    }

    /// Staged files of dead mounts for `bucket`, found under `cache_dir`.
    pub fn orphans(&self, cache_dir: &Path, bucket: &str) -> Vec<Orphan> {
        let mut out = Vec::new();
        for dir in self.dead_dirs(cache_dir) {
            let Ok(files) = fs::read_dir(&dir) else {
                continue;
            };
            let mut recs = 0;
            for f in files.flatten() {
                let p = f.path();
                if p.extension().is_some_and(|e| e == "mpu") {
                    recs += 1; // an open upload to abort: see `open_uploads`
                } else if p.extension().is_some_and(|e| e == "rec") {
                    recs += 1;
                    let Ok(text) = fs::read_to_string(&p) else {
                        continue;
                    };
                    let mut lines = text.lines();
                    if let (Some(b), Some(k)) = (lines.next(), lines.next()) {
                        if b == bucket && p.with_extension("data").exists() {
                            out.push(Orphan {
                                key: k.to_string(),
                                data: p.with_extension("data"),
                                symlink: lines.next() == Some("symlink"),
                                rec: p,
                            });
                        }
                    }
                }
            }
            if recs == 0 {
                let _ = fs::remove_dir_all(&dir);
            }
        }
        out
    }

    /// Removes the staging directory at a clean exit; records of failed uploads stay.
    pub fn close(&self) {
        let has_records = fs::read_dir(&self.dir)
            .map(|r| {
                r.flatten().any(|f| {
                    f.path()
                        .extension()
                        .is_some_and(|e| e == "rec" || e == "mpu")
                })
            })
            .unwrap_or(false);
        if !has_records {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Bytes of small files (one PUT each) held in memory by uploads at once, over the mount.
const SMALL_BUDGET_KIB: u32 = 64 << 10;
/// What one small upload counts against that budget at least: it also bounds how many
/// PUTs (and connections) are in flight when thousands of tiny files close together.
const SMALL_MIN_KIB: u32 = 256;

/// The bounds on upload memory, shared by every upload of a mount.
#[derive(Clone)]
pub struct UploadSlots {
    /// Parts of multipart uploads whose bytes are in memory.
    pub parts: Arc<Semaphore>,
    /// Small files in flight, weighted by size in KiB.
    small: Arc<Semaphore>,
}

impl UploadSlots {
    pub fn new(parts: usize) -> UploadSlots {
        UploadSlots {
            parts: Arc::new(Semaphore::new(parts.max(1))),
            small: Arc::new(Semaphore::new(SMALL_BUDGET_KIB as usize)),
        }
    }
}

/// Uploads `body` as a multipart upload of one part, so that the object's ETag ends in
/// `-1` (how a listing tells symlink candidates apart); aborted if it fails.
pub async fn upload_single_part(
    client: &Arc<dyn ObjectClient>,
    key: &str,
    body: Bytes,
    metadata: &HashMap<String, String>,
) -> Result<String, ClientError> {
    let id = client.create_multipart(key, metadata).await?;
    let r = async {
        let etag = client.upload_part(key, &id, 1, body).await?;
        client
            .complete_multipart(
                key,
                &id,
                vec![CompletedPart {
                    part_number: 1,
                    etag,
                }],
            )
            .await
    }
    .await;
    match r {
        Ok(p) => Ok(p.etag),
        Err(e) => {
            let _ = client.abort_multipart(key, &id).await;
            Err(e)
        }
    }
}

/// Uploads `size` bytes of `file` to `key`. Parts of a large file go in parallel, each
/// holding a permit of `parts` while its bytes are in memory; a small file holds its
/// weight of the small-file budget until its PUT is answered: memory stays bounded.
/// `one_part` (symlinks, which are tiny) makes it a single-part multipart upload.
#[allow(clippy::too_many_arguments)]
pub async fn upload_file(
    client: &Arc<dyn ObjectClient>,
    key: &str,
    file: &File,
    size: u64,
    part_size: u64,
    slots: &UploadSlots,
    metadata: &HashMap<String, String>,
    one_part: bool,
    early: Option<Arc<Early>>,
) -> Result<String, ClientError> {
    let parts = &slots.parts;
    let read = |off: u64, len: u64| read_part(file, key, off, len);
    if one_part {
        return upload_single_part(client, key, read(0, size)?, metadata).await;
    }
    if size <= part_size {
        let kib = u32::try_from(size.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(SMALL_MIN_KIB, SMALL_BUDGET_KIB);
        let _permit = slots
            .small
            .acquire_many(kib)
            .await
            .map_err(|e| ClientError::Other(e.to_string()))?;
        let body = read(0, size)?;
        return Ok(client.put(key, body, metadata).await?.etag);
    }
    if let Some(e) = early {
        if let Some(r) = e.finish(file, size, part_size, parts).await {
            return r;
        }
    }
    let upload_id = client.create_multipart(key, metadata).await?;
    upload_parts(
        client,
        key,
        &upload_id,
        file,
        size,
        part_size,
        parts,
        Vec::new(),
    )
    .await
}

/// Reads `len` staged bytes at `off` into one buffer, for a PUT or a part.
pub fn read_part(file: &File, key: &str, off: u64, len: u64) -> Result<Bytes, ClientError> {
    // A pooled buffer: a fresh 8 MiB one per part had every page faulted in anew.
    let mut buf = AlignedBuf::with_capacity(len as usize);
    buf.fill(len as usize, |b| {
        file.read_exact_at(b, off).map(|()| b.len())
    })
    .map_err(|e| ClientError::Other(format!("reading staged data of {key}: {e}")))?;
    Ok(buf.into_bytes())
}

/// Uploads the parts of `[0, size)` not in `done` (which holds parts 1..=k, in order)
/// and completes the upload; aborts it on failure, so nothing partial is ever visible.
#[allow(clippy::too_many_arguments)]
pub async fn upload_parts(
    client: &Arc<dyn ObjectClient>,
    key: &str,
    upload_id: &str,
    file: &File,
    size: u64,
    part_size: u64,
    parts: &Arc<Semaphore>,
    mut done: Vec<CompletedPart>,
) -> Result<String, ClientError> {
    let n = size.div_ceil(part_size).max(1);
    let mut set = tokio::task::JoinSet::new();
    let mut failure = None;
    for i in done.len() as u64..n {
        let permit = match parts.clone().acquire_owned().await {
            Ok(p) => p,
            Err(e) => {
                failure = Some(ClientError::Other(e.to_string()));
                break;
            }
        };
        let off = i * part_size;
        let body = match read_part(file, key, off, part_size.min(size - off)) {
            Ok(b) => b,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        let (client, key, id) = (client.clone(), key.to_string(), upload_id.to_string());
        set.spawn(async move {
            let r = client.upload_part(&key, &id, i as i32 + 1, body).await;
            drop(permit);
            r.map(|etag| CompletedPart {
                part_number: i as i32 + 1,
                etag,
            })
        });
        // Collect finished parts as we go so that a failure stops the loop early.
        while let Some(r) = set.try_join_next() {
            match r {
                Ok(Ok(p)) => done.push(p),
                Ok(Err(e)) => failure = failure.or(Some(e)),
                Err(e) => failure = failure.or(Some(ClientError::Other(e.to_string()))),
            }
        }
        if failure.is_some() {
            break;
        }
    }
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(p)) => done.push(p),
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(ClientError::Other(e.to_string()))),
        }
    }
    if let Some(e) = failure {
        if let Err(abort) = client.abort_multipart(key, upload_id).await {
            tracing::warn!(%key, "abort of a failed multipart upload failed: {abort}");
        }
        return Err(e);
    }
    done.sort_by_key(|p| p.part_number);
    match client.complete_multipart(key, upload_id, done).await {
        Ok(r) => Ok(r.etag),
        Err(e) => {
            let _ = client.abort_multipart(key, upload_id).await;
            Err(e)
        }
    }
}

/// Downloads a whole object into a staging file (to modify a file in place).
pub async fn download_into(
    client: &Arc<dyn ObjectClient>,
    key: &str,
    etag: Option<&str>,
    size: u64,
    part_size: u64,
    gets: &Arc<Semaphore>,
    file: &File,
) -> Result<(), ClientError> {
    let mut set = tokio::task::JoinSet::new();
    let mut off = 0;
    while off < size {
        let end = (off + part_size).min(size);
        let (client, key, etag, gets) = (
            client.clone(),
            key.to_string(),
            etag.map(str::to_string),
            gets.clone(),
        );
        set.spawn(async move {
            let _p = gets
                .acquire_owned()
                .await
                .map_err(|e| ClientError::Other(e.to_string()))?;
            client
                .get_range(&key, off, end, etag.as_deref())
                .await
                .map(|b| (off, b))
        });
        off = end;
    }
    while let Some(r) = set.join_next().await {
        let (off, data) = r.map_err(|e| ClientError::Other(e.to_string()))??;
        file.write_all_at(&data, off)
            .map_err(|e| ClientError::Other(format!("staging {key}: {e}")))?;
    }
    Ok(())
}
