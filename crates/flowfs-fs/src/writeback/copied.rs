//! A staged file replaced by a server-side copy (`copy_file_range`, fs/copy.rs): a file
//! just created or emptied whose first change is a copy of a whole object is not staged
//! at all; the bucket holds the copy under its key, and the file leaves the table. While
//! the copy is made the file is `Phase::Copying`, with no journal record.

use std::sync::Arc;

use std::io;

use super::file::{EarlyState, FileWb, KernelWrites, Phase};
use super::passthrough::{disk_stat, take_stat};
use super::{CopySource, StagedFile, WriteBack};

impl WriteBack {
    /// Whether `file`, `ino`'s staged file, is a closed copy source: no writer (its
    /// content stays as it is until one opens), not given up. Its upload is then waited
    /// for, and the copy made from the object it lands as.
    pub fn closed_source(&self, ino: u64, file: &Arc<StagedFile>) -> bool {
        let t = self.table.lock();
        t.files.get(&ino).is_some_and(|f| {
            Arc::ptr_eq(&f.file, file)
                && f.writers == 0
                && f.passthrough == KernelWrites::None
                && !matches!(f.phase, Phase::Retired | Phase::Copying)
        })
    }

    /// Whether the bucket holds `file`'s content as it is now, and nothing writes it.
    pub fn durable_source(&self, ino: u64, file: &Arc<StagedFile>) -> bool {
        let t = self.table.lock();
        t.files.get(&ino).is_some_and(|f| {
            Arc::ptr_eq(&f.file, file)
                && f.writers == 0
                && matches!(f.phase, Phase::Idle)
                && f.durable_gen == f.gen
        })
    }

    /// Whether `file`, `ino`'s staged file, may be filled by a copy (`filled_by_copy`):
    /// empty, idle, its one writer the caller's passthrough handle, no reader.
    pub fn fill_target(&self, ino: u64, file: &Arc<StagedFile>) -> bool {
        let t = self.table.lock();
        t.files.get(&ino).is_some_and(|f| {
            let one = matches!(f.passthrough, KernelWrites::Writing { writers: 1, .. });
            one && matches!(f.phase, Phase::Idle) && lone_empty(f, file)
        })
    }

    /// `file` now holds `size` bytes, those of `source` (copied on local disk by the
    /// caller): a change as the kernel's writes are, whose upload is a copy of `source` on
    /// the server (`UploadJob::copy_of`). What the kernel writes from now on is seen
    /// against the file as it is now.
    pub fn filled_by_copy(
        &self,
        ino: u64,
        file: &Arc<StagedFile>,
        size: u64,
        source: CopySource,
    ) -> io::Result<()> {
        let st = disk_stat(file)?;
        let mut t = self.table.lock();
        let Some(f) = t.files.get_mut(&ino).filter(|f| Arc::ptr_eq(&f.file, file)) else {
            return Ok(());
        };
        // As the kernel's own writes are taken in (`fill_target`: a passthrough writer's
        // file, empty until now, so the look sees a change).
        take_stat(f, st);
        debug_assert_eq!(f.size, size, "filled with the source's bytes");
        f.copy_of = Some((source, f.gen));
        Ok(())
    }

    /// Whether `file`, `ino`'s staged file, may be replaced by a copy made on the server:
    /// empty, its one writer the caller's handle, no reader, no passthrough writer (the
    /// kernel would write on into the staged file), no upload queued, in flight or early.
    pub fn copy_target(&self, ino: u64, file: &Arc<StagedFile>) -> bool {
        let t = self.table.lock();
        t.files
            .get(&ino)
            .is_some_and(|f| matches!(f.phase, Phase::Idle) && replaceable(f, file))
    }

    /// The copy is about to be sent: `Copying`, if `copy_target` still holds. The caller
    /// then syncs the journal (the record goes).
    pub fn begin_copy(&self, ino: u64, file: &Arc<StagedFile>) -> bool {
        let mut t = self.table.lock();
        let Some(f) = t.files.get_mut(&ino) else {
            return false;
        };
        let ok = matches!(f.phase, Phase::Idle) && replaceable(f, file);
        if ok {
            f.phase = Phase::Copying;
        }
        ok
    }

    /// The copy was not made, or not taken: `Idle` again (unless given up meanwhile). The
    /// caller then syncs the journal (the record comes back).
    pub fn end_copy(&self, ino: u64, file: &Arc<StagedFile>) {
        let mut t = self.table.lock();
        let Some(f) = t.files.get_mut(&ino).filter(|f| Arc::ptr_eq(&f.file, file)) else {
            return;
        };
        if matches!(f.phase, Phase::Copying) {
            f.phase = Phase::Idle;
        }
        drop(t);
        file.done.notify_waiters();
    }

    /// The bucket holds a copy at `ino`'s key now: its staged file leaves the table, if it
    /// still may (`Copying`, and nothing else opened or changed it); the caller discards
    /// it. False: it stays, and its next upload replaces the copy (or, given up
    /// meanwhile, the copy is a stray).
    pub fn replace_by_copy(&self, ino: u64, file: &Arc<StagedFile>) -> bool {
        let mut t = self.table.lock();
        let taken = t
            .files
            .get(&ino)
            .is_some_and(|f| matches!(f.phase, Phase::Copying) && replaceable(f, file));
        if !taken {
            return false;
        }
        t.files.remove(&ino);
        drop(t);
        file.done.notify_waiters();
        true
    }
}

impl WriteBack {
    /// The bucket's object of `ino` is not its staged content, though no byte of that
    /// changed: it was staged from a copy made ahead that holds more (fs/copy.rs).
    pub fn changed(&self, ino: u64) {
        if let Some(f) = self.table.lock().files.get_mut(&ino) {
            f.gen += 1;
        }
    }
}

fn replaceable(f: &FileWb, file: &Arc<StagedFile>) -> bool {
    lone_empty(f, file) && f.passthrough == KernelWrites::None
}

/// `file` is `f`'s, empty, with one writer (the caller's), no reader and no early upload.
fn lone_empty(f: &FileWb, file: &Arc<StagedFile>) -> bool {
    let no_early = match &f.early {
        EarlyState::Off => true,
        EarlyState::On { sent, upload } => *sent == 0 && upload.is_none(),
    };
    Arc::ptr_eq(&f.file, file) && f.size == 0 && f.writers == 1 && f.readers == 0 && no_early
}
