//! A staged file replaced by a server-side copy (`copy_file_range`, fs/copy.rs): a file
//! just created or emptied whose first change is a copy of a whole object is not staged
//! at all; the bucket holds the copy under its key, and the file leaves the table.

use std::sync::Arc;

use super::file::{EarlyState, FileWb, KernelWrites, Phase};
use super::{StagedFile, WriteBack};

impl WriteBack {
    /// Whether `file`, `ino`'s staged file, may be replaced by a copy made on the server:
    /// empty, its one writer the caller's handle, no reader, no passthrough writer (the
    /// kernel would write on into the staged file), no upload queued, in flight or early.
    pub fn copy_target(&self, ino: u64, file: &Arc<StagedFile>) -> bool {
        let t = self.table.lock();
        t.files.get(&ino).is_some_and(|f| replaceable(f, file))
    }

    /// The bucket holds a copy at `ino`'s key now: its staged file leaves the table, if it
    /// still may (`copy_target`); the caller discards it. False: it stays, and its next
    /// upload replaces the copy (or, given up meanwhile, the copy is a stray).
    pub fn replace_by_copy(&self, ino: u64, file: &Arc<StagedFile>) -> bool {
        let mut t = self.table.lock();
        if !t.files.get(&ino).is_some_and(|f| replaceable(f, file)) {
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
    let no_early = match &f.early {
        EarlyState::Off => true,
        EarlyState::On { sent, upload } => *sent == 0 && upload.is_none(),
    };
    Arc::ptr_eq(&f.file, file)
        && f.size == 0
        && f.writers == 1
        && f.readers == 0
        && matches!(f.phase, Phase::Idle)
        && f.passthrough == KernelWrites::None
        && no_early
}
