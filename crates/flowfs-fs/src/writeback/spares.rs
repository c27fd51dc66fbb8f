//! Journal records written into reused files. A record written to a fresh `.tmp` and
//! renamed over, and unlinked once its file was uploaded, costs an inode allocated and
//! freed per small file. On ext4 without a journal (common for scratch and cache disks)
//! the allocator skips every inode freed in the last seconds, and the scan past them
//! grew with the files written: 21 % of the mount's CPU in a `cp -r` of 1,000 files of
//! 4 KiB (perf: `find_inode_bit` → `recently_deleted`, issue 27). A record is now
//! written into a spare file and swapped in atomically (`RENAME_EXCHANGE`), and a
//! removed record becomes a spare again: the same inodes serve file after file.
//!
//! Recovery reads `<n>.rec` files only; a spare (`<n>.spare`) is never a record, so a
//! crash at any step leaves either the old record, the new one, or none where the file
//! was already durable, exactly as the rename of a `.tmp` did.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Spare files kept for reuse at most: the records written at once in a burst of small
/// files (each upload holds its record until durable) without keeping a file per file
/// ever written.
const SPARES_MAX: usize = 256;

/// The extension of a spare file, which no scan of the journal reads.
pub(super) const SPARE_EXT: &str = "spare";

/// The spare record files of one staging directory, and the counts of its records.
pub(super) struct Spares {
    dir: PathBuf,
    next: AtomicU64,
    free: Mutex<Vec<PathBuf>>,
    /// Records written (each a write and a rename) and records present now.
    written: AtomicU64,
    present: AtomicU64,
}

/// This mount's journal: records written since it started, and records present now
/// (files whose content the bucket lacks, as a recovery would find them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalCounts {
    /// Records written since the mount started (a new one or one replaced).
    pub written: u64,
    /// Records in the journal now.
    pub present: u64,
}

impl Spares {
    pub(super) fn new(dir: &Path) -> Spares {
        Spares {
            dir: dir.to_path_buf(),
            next: AtomicU64::new(1),
            free: Mutex::new(Vec::new()),
            written: AtomicU64::new(0),
            present: AtomicU64::new(0),
        }
    }

    pub(super) fn counts(&self) -> JournalCounts {
        JournalCounts {
            written: self.written.load(Ordering::Relaxed),
            present: self.present.load(Ordering::Relaxed),
        }
    }

    /// How many spares wait for reuse.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.free.lock().len()
    }

    fn fresh_name(&self) -> PathBuf {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.dir.join(format!("{n}.{SPARE_EXT}"))
    }

    /// Writes `text` as the record at `rec`, replacing the one there atomically.
    pub(super) fn write(&self, rec: &Path, text: &[u8]) -> io::Result<()> {
        let spare = self.free.lock().pop();
        let spare = spare.unwrap_or_else(|| self.fresh_name());
        // Written over and cut to length, not opened with O_TRUNC: ext4 flushes a file
        // truncated to zero at its close (`auto_da_alloc`), 4 % of the mount's CPU in
        // the `cp -r` above.
        let written = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&spare)
            .and_then(|f| {
                f.write_all_at(text, 0)?;
                f.set_len(text.len() as u64)
            });
        if let Err(e) = written {
            let _ = fs::remove_file(&spare);
            return Err(e);
        }
        let placed = match exchange(&spare, rec) {
            // The spare now holds the old record's inode, for the next record.
            Ok(()) => {
                self.give(spare);
                Ok(false)
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                fs::rename(&spare, rec).map(|()| true)
            }
            // A file system without RENAME_EXCHANGE: replaced as before.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let new = !rec.exists();
                fs::rename(&spare, rec).map(|()| new)
            }
            Err(e) => {
                self.give(spare);
                Err(e)
            }
        };
        let new = placed?;
        self.written.fetch_add(1, Ordering::Relaxed);
        if new {
            self.present.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Removes the record at `rec` (nothing if there is none), keeping its file.
    pub(super) fn remove(&self, rec: &Path) {
        let spare = self.fresh_name();
        if fs::rename(rec, &spare).is_ok() {
            self.present.fetch_sub(1, Ordering::Relaxed);
            self.give(spare);
        }
    }

    fn give(&self, spare: PathBuf) {
        let mut free = self.free.lock();
        if free.len() < SPARES_MAX {
            free.push(spare);
        } else {
            drop(free);
            let _ = fs::remove_file(spare);
        }
    }
}

/// Swaps the files at `a` and `b` atomically (`renameat2(RENAME_EXCHANGE)`).
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    let ca = std::ffi::CString::new(a.as_os_str().as_bytes())?;
    let cb = std::ffi::CString::new(b.as_os_str().as_bytes())?;
    // The system call itself, not libc's wrapper: the musl that the static build
    // (`make dist`) links has no `renameat2`.
    // SAFETY: both are valid NUL-terminated paths for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn records_reuse_the_same_inodes_and_leave_only_spares() {
        let dir = tempfile::tempdir().unwrap();
        let spares = Spares::new(dir.path());
        let rec = dir.path().join("1.rec");
        spares.write(&rec, b"first").unwrap();
        assert_eq!(fs::read(&rec).unwrap(), b"first");
        let first = fs::metadata(&rec).unwrap().ino();
        // A rewrite swaps in a new inode and keeps the old one as a spare.
        spares.write(&rec, b"second").unwrap();
        assert_eq!(fs::read(&rec).unwrap(), b"second");
        assert_eq!(spares.len(), 1);
        spares.remove(&rec);
        assert!(!rec.exists());
        assert_eq!(spares.len(), 2);
        // The next records are written into those inodes: none is allocated.
        let (r2, r3) = (dir.path().join("2.rec"), dir.path().join("3.rec"));
        spares.write(&r2, b"x").unwrap();
        spares.write(&r3, b"y").unwrap();
        let mut inos = [
            fs::metadata(&r2).unwrap().ino(),
            fs::metadata(&r3).unwrap().ino(),
        ];
        inos.sort();
        assert!(inos.contains(&first), "{inos:?} reuse {first}");
        assert_eq!(spares.len(), 0);
        assert_eq!(fs::read(&r2).unwrap(), b"x");
        // Removing what is not there is nothing.
        spares.remove(&dir.path().join("9.rec"));
        assert_eq!(spares.len(), 0);
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".rec"))
            .collect();
        assert!(names.iter().all(|n| n.ends_with(".spare")), "{names:?}");
    }

    #[test]
    fn a_full_pool_unlinks_what_it_cannot_keep() {
        let dir = tempfile::tempdir().unwrap();
        let spares = Spares::new(dir.path());
        let recs: Vec<PathBuf> = (0..SPARES_MAX + 3)
            .map(|i| dir.path().join(format!("{i}.rec")))
            .collect();
        for r in &recs {
            spares.write(r, b"r").unwrap();
        }
        for r in &recs {
            spares.remove(r);
        }
        assert_eq!(spares.len(), SPARES_MAX);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), SPARES_MAX);
    }

    #[test]
    fn the_journal_counts_records_written_and_present() {
        let dir = tempfile::tempdir().unwrap();
        let spares = Spares::new(dir.path());
        let (a, b) = (dir.path().join("1.rec"), dir.path().join("2.rec"));
        let counts = |w, p| JournalCounts {
            written: w,
            present: p,
        };
        spares.write(&a, b"a").unwrap();
        spares.write(&b, b"b").unwrap();
        assert_eq!(spares.counts(), counts(2, 2));
        spares.write(&a, b"a2").unwrap(); // replaced: one more written, none more present
        assert_eq!(spares.counts(), counts(3, 2));
        spares.remove(&a);
        spares.remove(&a); // not there: nothing
        assert_eq!(spares.counts(), counts(3, 1));
        spares.remove(&b);
        assert_eq!(spares.counts(), counts(3, 0));
        assert_eq!(
            fs::read_dir(dir.path())
                .unwrap()
                .filter(|e| e
                    .as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "rec"))
                .count(),
            0
        );
    }
}
