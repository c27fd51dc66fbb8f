//! Write-back: the one owner of every staged file's state. A file written through the
//! mount lives on local disk (`staging`) until an upload (`transfer`, `early`) makes it
//! durable. Where each staged file stands — its size and generations, its open writers
//! and readers, its upload phase, its journal record — is held here, in one table under
//! one lock, and changed only by the methods below, each one transition taken under that
//! lock. A method decides; the disk and network work it calls for is done by the caller
//! after the lock is released (`Fs`, in fs/upload.rs), except the journal record's I/O,
//! which runs under the file's own journal lock that no read or write takes.
//!
//! Why one lock: a file reopened while the kernel's RELEASE of its last handle was still
//! on its way lost writes (issue 13) because "unchanged, drop the staged copy" was
//! decided under one lock and the new open counted under another.

mod asks;
mod copied;
mod early;
mod error;
mod file;
mod keys;
mod passthrough;
mod record;
mod report;
mod spares;
mod staging;
mod transfer;
mod uploader;

use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;

pub use asks::{
    CopySource, Durability, Finished, NameHold, NewFile, Released, Retired, StagedStat, UploadJob,
    Written,
};
pub use early::{Aborts, Early};
pub use error::UploadError;
pub use file::Phase;
use file::{DiskStat, EarlyState, FileWb, KernelWrites, Table};
pub use keys::Keys;
pub use record::Record;
pub use report::PendingState;
pub use spares::JournalCounts;
pub use staging::{OpenUpload, Orphan, StagedFile, Staging};
pub use transfer::{download_into, upload_file, Note, UploadSlots};
pub use uploader::{Loose, Uploader};

pub struct WriteBack {
    staging: Staging,
    /// Whether the staging files' timestamps tell every change after a look at them
    /// (passthrough.rs `fine_timestamps`).
    fine: bool,
    table: Mutex<Table>,
    /// How many files `Table::passthrough` holds, so that a lookup or stat with no passthrough
    /// writer open anywhere takes no lock of the table (set under that lock only).
    passthrough_files: AtomicUsize,
    aborts: Aborts,
}

impl WriteBack {
    /// The records this mount's journal wrote, and holds now.
    pub fn journal(&self) -> JournalCounts {
        self.staging.journal()
    }

    pub fn new(staging: Staging) -> WriteBack {
        WriteBack {
            fine: passthrough::fine_timestamps(staging.dir()),
            staging,
            table: Mutex::new(Table::default()),
            passthrough_files: AtomicUsize::new(0),
            aborts: Aborts::default(),
        }
    }

    /// The aborts of early uploads given up (an unmount waits for them).
    pub fn aborts(&self) -> &Aborts {
        &self.aborts
    }

    pub fn staging(&self) -> &Staging {
        &self.staging
    }

    /// A new staged file for `ino` (from `create` or `symlink`), with the target of a
    /// symlink as its content. The caller then journals it.
    pub fn insert_new(
        &self,
        ino: u64,
        kind: NewFile,
        target: &[u8],
    ) -> io::Result<Arc<StagedFile>> {
        let file = self.staging.create()?;
        file.file.write_all_at(target, 0)?;
        let now = SystemTime::now();
        let mut f = FileWb::new(file, target.len() as u64, false, now);
        f.ctime = now;
        if let NewFile::Created = kind {
            f.writers = 1;
            f.early = EarlyState::On {
                sent: 0,
                upload: None,
            };
        }
        let file = f.file.clone();
        self.table.lock().files.insert(ino, f);
        Ok(file)
    }

    /// Takes back a file `insert_new` made, whose name could not be kept.
    pub fn remove_new(&self, ino: u64) {
        let f = self.table.lock().files.remove(&ino);
        if let Some(f) = f {
            f.file.discard();
        }
    }

    /// `ino`'s staged file, unless it has none or it was given up.
    pub fn file(&self, ino: u64) -> Option<Arc<StagedFile>> {
        let t = self.table.lock();
        let f = t.files.get(&ino)?;
        (!matches!(f.phase, Phase::Retired)).then(|| f.file.clone())
    }

    /// Counts a new handle on `ino`'s staged file, if it has one.
    pub fn open(&self, ino: u64, write: bool) -> Option<Arc<StagedFile>> {
        let mut t = self.table.lock();
        let f = t.files.get_mut(&ino)?;
        count_open(f, write);
        Some(f.file.clone())
    }

    /// Makes `file` (just filled with `size` bytes of the object, last changed at
    /// `mtime`: all of them when `durable`, else a prefix, a change the bucket lacks)
    /// `ino`'s staged file and counts a handle on it; if another open staged `ino`
    /// meanwhile, that one is used and `file` is removed.
    pub fn install(
        &self,
        ino: u64,
        file: Arc<StagedFile>,
        (size, mtime): (u64, SystemTime),
        write: bool,
        durable: bool,
    ) -> Arc<StagedFile> {
        let mut t = self.table.lock();
        let f = t.files.entry(ino).or_insert_with(|| {
            // The bucket holds a version either way (a rename or unlink must deal
            // with it); a prefix is one generation past it.
            let mut f = FileWb::new(file.clone(), size, true, mtime);
            f.gen += u64::from(!durable);
            f
        });
        count_open(f, write);
        let chosen = f.file.clone();
        drop(t);
        if !Arc::ptr_eq(&chosen, &file) {
            file.discard();
        }
        chosen
    }

    /// A handle on `file` (staged for `ino`) is closed.
    pub fn release(&self, ino: u64, file: &Arc<StagedFile>, write: bool) -> Released {
        let mut t = self.table.lock();
        let Some(f) = t.files.get_mut(&ino).filter(|f| Arc::ptr_eq(&f.file, file)) else {
            return Released::Nothing;
        };
        if write {
            f.writers = f.writers.saturating_sub(1);
        } else {
            f.readers = f.readers.saturating_sub(1);
        }
        let closed = f.writers == 0 && f.readers == 0;
        let out = match &f.phase {
            Phase::Retired if closed => Released::Dropped,
            Phase::Idle if closed && !f.dirty() => Released::Clean,
            Phase::Idle | Phase::Failed { .. } if f.writers == 0 && f.dirty() => {
                f.phase = Phase::Queued;
                Released::Upload
            }
            Phase::Uploading { gen, .. } if f.writers == 0 && *gen != f.gen => {
                f.phase = Phase::Uploading {
                    gen: *gen,
                    rerun: true,
                };
                Released::Nothing
            }
            _ => Released::Nothing,
        };
        if matches!(out, Released::Dropped | Released::Clean) {
            let f = t.files.remove(&ino);
            drop(t);
            if let Some(f) = f {
                // A clean file is discarded by the caller, once the cache had its data.
                if out == Released::Dropped {
                    f.file.discard();
                }
                f.file.done.notify_waiters();
            }
        }
        out
    }

    /// `utimens` of a staged file: the time it shows until it is uploaded.
    pub fn set_mtime(&self, ino: u64, mtime: SystemTime) {
        if let Some(f) = self.table.lock().files.get_mut(&ino) {
            f.mtime = mtime;
            f.ctime = SystemTime::now();
        }
    }

    /// Whether an upload still to come, or in flight, takes `ino`'s attributes to the
    /// bucket: it is staged with changes the bucket lacks, or queued, or uploading.
    pub fn carries_attrs(&self, ino: u64) -> bool {
        self.table
            .lock()
            .files
            .get(&ino)
            .is_some_and(|f| match f.phase {
                Phase::Queued | Phase::Uploading { .. } => true,
                Phase::Retired => false,
                Phase::Idle | Phase::Failed { .. } | Phase::Copying => f.dirty(),
            })
    }

    /// Size and times of `ino`'s staged content, if it has any.
    pub fn stat(&self, ino: u64) -> Option<StagedStat> {
        self.table.lock().files.get(&ino).map(|f| StagedStat {
            size: f.size,
            mtime: f.mtime,
            ctime: f.ctime,
        })
    }

    /// Up to `len` bytes at `off` of the staged content.
    pub fn read(&self, ino: u64, file: &StagedFile, off: u64, len: usize) -> io::Result<Vec<u8>> {
        let size = self.table.lock().files.get(&ino).map_or(0, |f| f.size);
        file.read_at(off, len, size)
    }

    /// Writes `data` at `off`; returns what the caller must do next, decided in the same
    /// step (one crossing per write: it was three, issue 28).
    pub fn write(
        &self,
        ino: u64,
        file: &StagedFile,
        at: (u64, &[u8]),
        part_size: u64,
    ) -> io::Result<Written> {
        let (off, data) = at;
        file.file.write_all_at(data, off)?;
        let mut t = self.table.lock();
        let Some(f) = t.files.get_mut(&ino) else {
            return Ok(Written::default());
        };
        f.changed_below(off);
        f.size = f.size.max(off + data.len() as u64);
        f.gen += 1;
        f.mtime = SystemTime::now();
        f.ctime = f.mtime;
        Ok(Written {
            journal: f.journaled.is_none() && !matches!(f.phase, Phase::Retired),
            early_due: f.early_due(part_size),
        })
    }

    /// Sets the staged file's length. An upload reading the file meanwhile must never
    /// fail on it: the generation is bumped before and after the truncation, so that an
    /// upload begun earlier finds its generation stale and runs again, and a shrinking
    /// size is recorded before the file shrinks, so that an upload begun in between reads
    /// only bytes that are there (CI saw EIO at a close when it read the old size).
    pub fn set_len(&self, ino: u64, file: &StagedFile, size: u64) -> io::Result<()> {
        let before = self.resize_begin(ino, size);
        let r = file.file.set_len(size);
        self.resize_end(ino, size, before, r.is_ok());
        r
    }

    /// The bookkeeping before a truncation; returns the size before it.
    fn resize_begin(&self, ino: u64, size: u64) -> Option<u64> {
        let mut t = self.table.lock();
        let f = t.files.get_mut(&ino)?;
        let before = f.size;
        f.changed_below(size);
        f.size = f.size.min(size);
        f.gen += 1;
        Some(before)
    }

    /// The bookkeeping after it: a failed truncation left the file as long as it was.
    fn resize_end(&self, ino: u64, size: u64, before: Option<u64>, ok: bool) {
        let mut t = self.table.lock();
        let Some(f) = t.files.get_mut(&ino) else {
            return;
        };
        if ok {
            f.size = size;
            f.mtime = SystemTime::now();
            f.ctime = f.mtime;
        } else if let Some(b) = before {
            f.size = f.size.max(b);
        }
        f.gen += 1;
    }

    /// Makes the journal record agree with the file's state: present (naming `key`)
    /// while the file has changes the bucket lacks, absent once it is durable or given
    /// up. The record's I/O runs under the file's journal lock only.
    pub fn sync_journal(
        &self,
        ino: u64,
        key: Option<&str>,
        bucket: &str,
        rec: &Record,
    ) -> io::Result<()> {
        let Some(file) = self.table.lock().files.get(&ino).map(|f| f.file.clone()) else {
            return Ok(());
        };
        let _j = file.journal.lock();
        let (want, have) = {
            let t = self.table.lock();
            let Some(f) = t.files.get(&ino).filter(|f| Arc::ptr_eq(&f.file, &file)) else {
                return Ok(());
            };
            // A passthrough writer's changes are unseen: journaled while it is open.
            let open_passthrough = f.passthrough != KernelWrites::None;
            let kept = !matches!(f.phase, Phase::Retired | Phase::Copying);
            let want = ((f.dirty() || open_passthrough) && kept)
                .then(|| key.map(str::to_string).or_else(|| f.journaled.clone()))
                .flatten();
            (want, f.journaled.clone())
        };
        if want == have {
            return Ok(());
        }
        match &want {
            Some(k) => file.write_record(bucket, k, rec)?,
            None => file.remove_record(),
        }
        if let Some(f) = self.table.lock().files.get_mut(&ino) {
            f.journaled = want;
        }
        Ok(())
    }

    /// `ino` was renamed to a name the bucket may (`shadows`) or may not hold another
    /// object under.
    pub fn set_shadows(&self, ino: u64, shadows: bool) {
        if let Some(f) = self.table.lock().files.get_mut(&ino) {
            f.shadows = shadows;
        }
    }

    /// A rename changed the key of `ino`: the record is written again by `sync_journal`.
    pub fn rekey(&self, ino: u64) -> bool {
        let mut t = self.table.lock();
        t.files.get_mut(&ino).is_some_and(|f| {
            f.early = EarlyState::Off;
            f.journaled.take().is_some()
        })
    }
}

fn count_open(f: &mut FileWb, write: bool) {
    if write {
        f.writers += 1;
    } else {
        f.readers += 1;
    }
}

mod lifecycle;

#[cfg(test)]
mod tests;
