//! Staged files on local disk and the journal: the staging directory of a mount (locked
//! while it lives), one `<n>.data` file per staged file, its journal record `<n>.rec`
//! that lets a later mount finish an upload this one could not, and the scan of a dead
//! mount's directory for such records. Files only: their state lives in `super`.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::record::{read_record, record_text, Record};
use super::spares::{JournalCounts, Spares, SPARE_EXT};
use crate::dirlock::{being_created, create_locked, try_lock};

/// The local file behind a staged file: its data, its journal record and the waiters
/// for its uploads. What it holds and where it stands is `super::FileWb`'s to say.
pub struct StagedFile {
    pub id: u64,
    data: PathBuf,
    rec: PathBuf,
    pub file: File,
    /// Woken whenever an upload of this file ends or the file is given up.
    pub done: Notify,
    /// Taken around the journal record's I/O, so that writing it (first change after an
    /// upload) and removing it (an upload made it durable) happen in the order decided.
    pub(super) journal: Mutex<()>,
    /// Held by an upload from the choice of its key until its end is recorded, and by a
    /// rename of the file from its look at what the bucket holds until the node has its
    /// new name (`WriteBack::hold_name`): an upload never goes to a name the file is
    /// leaving. One that did was deleted afterwards as a stray, and that delete could
    /// remove a newer file created under the old name (git's `config.lock` renamed to
    /// `config` and created again failed its next rename with ENOENT in CI).
    pub(super) naming: Arc<tokio::sync::Mutex<()>>,
    /// The staging directory's reusable record files (spares.rs).
    spares: Arc<Spares>,
    /// Set once the file is given up (`WriteBack::retire`): an upload of it in flight
    /// sends nothing more and completes nothing (transfer.rs `check_stop`).
    pub(super) stop: AtomicBool,
}

impl std::fmt::Debug for StagedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StagedFile({})", self.id)
    }
}

impl StagedFile {
    /// Where the id of this file's early multipart upload is noted while it is open, so
    /// that the next mount aborts it if this one dies (an open upload keeps its parts,
    /// billed, until aborted).
    pub fn upload_note_path(&self) -> PathBuf {
        self.rec.with_extension("mpu")
    }

    /// Where the id of one whole-file multipart upload of this file is noted while it is
    /// open: a path of its own for each upload, so that the note of one never replaces
    /// another's (an early upload's abort may still be in flight).
    pub fn whole_upload_note_path(&self) -> PathBuf {
        whole_note(&self.rec)
    }

    /// Up to `len` bytes at `off` of a file `size` bytes long.
    pub fn read_at(&self, off: u64, len: usize, size: u64) -> io::Result<Vec<u8>> {
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

    /// The journal record's path (present while the bucket lacks the file).
    pub(super) fn record_path(&self) -> &Path {
        &self.rec
    }

    /// Where the staged bytes are, for the disk cache to take them over after upload.
    pub fn data_path(&self) -> &Path {
        &self.data
    }

    pub(super) fn write_record(&self, bucket: &str, key: &str, rec: &Record) -> io::Result<()> {
        self.spares
            .write(&self.rec, record_text(bucket, key, rec).as_bytes())
    }

    pub(super) fn remove_record(&self) {
        self.spares.remove(&self.rec);
    }

    /// Makes the staged bytes and the journal record (if there is one) survive a power
    /// loss: `fdatasync` of the data, `fsync` of the record and of the directory that
    /// names both (`--durability local`).
    pub fn sync_local(&self) -> io::Result<()> {
        self.file.sync_data()?;
        let _j = self.journal.lock();
        match File::open(&self.rec) {
            Ok(rec) => rec.sync_all()?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        match self.rec.parent() {
            Some(dir) => File::open(dir)?.sync_all(),
            None => Ok(()),
        }
    }

    /// Drops the staging file and its record once its content is durable or deleted
    /// (handles still open keep reading and writing the unlinked file).
    pub fn discard(&self) {
        let _j = self.journal.lock();
        self.spares.remove(&self.rec);
        let _ = fs::remove_file(&self.data);
    }
}

/// The staging directory of one mount, locked while the mount lives so that another
/// mount sharing the cache dir never takes its files for orphans.
pub struct Staging {
    dir: PathBuf,
    _lock: File,
    next: AtomicU64,
    spares: Arc<Spares>,
}

/// Notes a multipart upload of `key` in `path` (see `StagedFile::upload_note_path`):
/// before CreateMultipartUpload is sent (`upload_id` None) and again once it answered.
/// A note without an id is found again by key and by `since` (seconds since the epoch
/// when the create was sent): if this mount dies while the server creates the upload,
/// its answer, the only place the id would be, is lost.
pub fn note_upload(
    path: &Path,
    bucket: &str,
    key: &str,
    upload_id: Option<&str>,
    since: u64,
) -> io::Result<()> {
    let tmp = path.with_extension("mpu.tmp");
    let id = upload_id.unwrap_or("");
    fs::write(&tmp, format!("{bucket}\n{key}\n{id}\n{since}\n"))?;
    fs::rename(tmp, path)
}

fn whole_note(rec: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    rec.with_extension(format!("w{}.mpu", NEXT.fetch_add(1, Ordering::Relaxed)))
}

/// Removes a staging directory of a dead mount once nothing but its lock and spare
/// record files are left in it.
fn remove_if_done(dir: &Path) {
    let spare = |p: &Path| p.extension().is_some_and(|e| e == SPARE_EXT);
    let Ok(files) = fs::read_dir(dir) else {
        return;
    };
    let files: Vec<PathBuf> = files.flatten().map(|f| f.path()).collect();
    if files.iter().any(|p| !spare(p) && !p.ends_with("lock")) {
        return;
    }
    for p in files.iter().filter(|p| spare(p)) {
        let _ = fs::remove_file(p);
    }
    let _ = fs::remove_file(dir.join("lock"));
    // Fails, leaving the directory, if anything was added meanwhile.
    let _ = fs::remove_dir(dir);
}

/// A multipart upload that a dead mount left open (an early upload of a file it was
/// writing): the next mount aborts it.
#[derive(Debug)]
pub struct OpenUpload {
    pub key: String,
    /// None: the mount died before CreateMultipartUpload answered.
    pub upload_id: Option<String>,
    /// When the create was sent (seconds since the epoch), if noted.
    pub since: Option<u64>,
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
    /// Its kind and metadata, as its record holds them.
    pub record: Record,
    rec: PathBuf,
}

impl Orphan {
    /// As `StagedFile::whole_upload_note_path`, for the upload that recovers it.
    pub fn upload_note_path(&self) -> PathBuf {
        whole_note(&self.rec)
    }

    /// Moves the data of a file the store refuses for good out of the journal, into
    /// `CACHE/failed/`, with a note of where it belonged and why it is there: later
    /// mounts stop trying it, and nothing written is deleted. Returns the data's path.
    pub fn set_aside(&self, cache_dir: &Path, bucket: &str, why: &str) -> io::Result<PathBuf> {
        let dir = cache_dir.join("failed");
        fs::create_dir_all(&dir)?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))?;
        let secs = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let name: String = self
            .key
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .take(150)
            .collect();
        let data = dir.join(format!("{secs}-{}-{name}", std::process::id()));
        fs::rename(&self.data, &data)?;
        let note = format!("bucket: {bucket}\nkey: {}\nwhy: {why}\n", self.key);
        fs::write(data.with_extension("why"), note)?;
        self.forget();
        Ok(data)
    }

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
    /// The directory of this mount's staged files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The records this mount's journal wrote, and holds now.
    pub fn journal(&self) -> JournalCounts {
        self.spares.counts()
    }

    pub fn open(cache_dir: &Path) -> io::Result<Staging> {
        let root = cache_dir.join("staging");
        fs::create_dir_all(&root)?;
        let (dir, lock) = create_locked(&root)?;
        Ok(Staging {
            spares: Arc::new(Spares::new(&dir)),
            dir,
            _lock: lock,
            next: AtomicU64::new(1),
        })
    }

    pub fn create(&self) -> io::Result<Arc<StagedFile>> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let data = self.dir.join(format!("{id}.data"));
        let rec = self.dir.join(format!("{id}.rec"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&data)?;
        Ok(Arc::new(StagedFile {
            id,
            data,
            rec,
            file,
            done: Notify::new(),
            journal: Mutex::new(()),
            naming: Arc::default(),
            spares: self.spares.clone(),
            stop: AtomicBool::new(false),
        }))
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
                            upload_id: (!id.is_empty()).then(|| id.to_string()),
                            since: lines.next().and_then(|t| t.parse().ok()),
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
            .filter(|dir| *dir != self.dir && !being_created(dir))
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
                        if b != bucket {
                            continue;
                        }
                        if !p.with_extension("data").exists() {
                            // Nothing to upload: the mount died after its upload had
                            // succeeded and the data went to the cache, before the
                            // record was removed (or before the data file was made).
                            let _ = fs::remove_file(&p);
                            recs -= 1;
                            continue;
                        }
                        out.push(Orphan {
                            key: k.to_string(),
                            data: p.with_extension("data"),
                            record: read_record(lines),
                            rec: p,
                        });
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
