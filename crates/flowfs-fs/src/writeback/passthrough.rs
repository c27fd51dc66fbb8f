//! Writers the kernel serves itself (FUSE passthrough): their writes go straight to the
//! staging file and never reach flowfs. What `write` records for other writers (size,
//! mtime, a new generation, the need for a journal record) is therefore taken from the
//! file: it is journaled at the open of such a writer, its size and times are read back
//! with `fstat` when stat asks, at fsync and when the writer closes, and any change seen
//! since the last look moves the generation on.
//!
//! Where timestamps tell every change made after a look at them (`fine_timestamps`),
//! that is all: an upload begun while the writer wrote (an fsync's) carries the
//! generation of the last look before it, so a write after that look shows at the next
//! one (at the latest the close) and moves the generation past the upload's, which is
//! then followed by one of the final content; a close after no write since the last
//! look uploads nothing. Elsewhere a write in the same clock tick as a look could hide,
//! so every passthrough writer's open and close count as a change.
//!
//! Measured on B7 (Nextflow): counting every close as a change uploaded 47 unchanged
//! small files and two big ones again; comparing the close with the first open still
//! uploaded every file written, fsynced and closed twice (bcftools' outputs and indexes,
//! samtools' BAMs: 46 MiB of 139).

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{DiskStat, EarlyState, FileWb, KernelWrites, Phase, StagedFile, WriteBack};

impl WriteBack {
    /// A passthrough writer of `ino`'s staged `file` is opening; returns whether the
    /// file needs its journal record (its changes are unseen from now on, so they are
    /// recorded before the first one is made).
    pub fn begin_passthrough(&self, ino: u64, file: &Arc<StagedFile>) -> io::Result<bool> {
        let st = disk_stat(file)?;
        let mut t = self.table.lock();
        let Some(f) = t.files.get_mut(&ino).filter(|f| Arc::ptr_eq(&f.file, file)) else {
            return Ok(false);
        };
        f.passthrough = match f.passthrough {
            KernelWrites::None => KernelWrites::Writing {
                writers: 1,
                seen: st,
            },
            KernelWrites::Writing { writers, seen } => KernelWrites::Writing {
                writers: writers + 1,
                seen,
            },
        };
        // Parts sent early are taken from writes flowfs sees; it will see none.
        f.early = EarlyState::Off;
        if !self.fine {
            f.gen += 1;
        }
        let journal = f.journaled.is_none() && !matches!(f.phase, Phase::Retired);
        t.passthrough.insert(ino);
        self.passthrough_files
            .store(t.passthrough.len(), Ordering::Release);
        Ok(journal)
    }

    /// `refresh_passthrough` of every file with passthrough writers open (before a lookup or
    /// a listing answers with sizes): as many `fstat`s as there are such files.
    fn refresh_all_passthrough(&self) {
        if self.passthrough_files.load(Ordering::Acquire) == 0 {
            return;
        }
        let inos: Vec<u64> = {
            let t = self.table.lock();
            if t.passthrough.is_empty() {
                return;
            }
            t.passthrough.iter().copied().collect()
        };
        for ino in inos {
            let _ = self.refresh_one(ino);
        }
    }

    /// Sizes and mtimes of files with passthrough writers (of `ino`, or of all), taken
    /// from their staged files before an answer carries them: one `fstat` per such file,
    /// none without. A file that cannot be looked at keeps what was known.
    pub fn refresh_passthrough(&self, ino: Option<u64>) {
        match ino {
            Some(ino) => {
                if let Err(e) = self.refresh_one(ino) {
                    tracing::debug!(ino, "cannot stat a passthrough writer's file: {e}");
                }
            }
            None => self.refresh_all_passthrough(),
        }
    }

    /// Takes the size and mtime of `ino`'s staging file from the file while passthrough
    /// writers are open (the `fstat` runs outside the table's lock).
    fn refresh_one(&self, ino: u64) -> io::Result<()> {
        if self.passthrough_files.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let file = {
            let mut t = self.table.lock();
            match t.files.get(&ino) {
                Some(f) if f.passthrough != KernelWrites::None => f.file.clone(),
                _ => {
                    // Its writers are gone (or it left the table): out of the index.
                    t.passthrough.remove(&ino);
                    self.passthrough_files
                        .store(t.passthrough.len(), Ordering::Release);
                    return Ok(());
                }
            }
        };
        let st = disk_stat(&file)?;
        let mut t = self.table.lock();
        if let Some(f) = t
            .files
            .get_mut(&ino)
            .filter(|f| Arc::ptr_eq(&f.file, &file))
        {
            take_stat(f, st);
        }
        Ok(())
    }

    /// A passthrough writer of `ino`'s staged `file` closes: its changes are taken in, and
    /// the generation moves on (see the module's comment).
    pub fn end_passthrough(&self, ino: u64, file: &Arc<StagedFile>) {
        if let Err(e) = self.end_kernel_writes(ino, file) {
            // The generation moved on anyway: the file is uploaded as it is on disk.
            tracing::warn!(
                ino,
                "cannot stat the staged file of a passthrough writer: {e}"
            );
        }
    }

    fn end_kernel_writes(&self, ino: u64, file: &Arc<StagedFile>) -> io::Result<()> {
        let st = disk_stat(file);
        let mut t = self.table.lock();
        let Some(f) = t.files.get_mut(&ino).filter(|f| Arc::ptr_eq(&f.file, file)) else {
            return st.map(|_| ());
        };
        if let Ok(st) = &st {
            take_stat(f, *st);
        }
        f.passthrough = match f.passthrough {
            KernelWrites::Writing { writers, seen } if writers > 1 => KernelWrites::Writing {
                writers: writers - 1,
                seen,
            },
            _ => KernelWrites::None,
        };
        // With fine timestamps, `take_stat` above moved the generation on if anything
        // changed since the last look (see the module's comment); elsewhere every close
        // counts as a change, and so does a file that could not be looked at.
        if !self.fine || st.is_err() {
            f.gen += 1;
        }
        if f.passthrough == KernelWrites::None {
            t.passthrough.remove(&ino);
            self.passthrough_files
                .store(t.passthrough.len(), Ordering::Release);
        }
        st.map(|_| ())
    }
}

pub(super) fn disk_stat(file: &StagedFile) -> io::Result<DiskStat> {
    use std::os::unix::fs::MetadataExt;
    let m = file.file.metadata()?;
    Ok(DiskStat {
        len: m.len(),
        mtime: m.modified()?,
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

/// Whether a change made after a look at a file's timestamps always shows in them:
/// Linux ≥ 6.13 gives ext4, xfs, btrfs and tmpfs multigrain timestamps (a change after
/// a query gets a fine-grained, newer one). Elsewhere a change in the same clock tick as
/// the look could leave them as they were.
pub(super) fn fine_timestamps(dir: &std::path::Path) -> bool {
    const FS: [i64; 4] = [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994];
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs fills the zeroed struct; uname the zeroed utsname.
    let (fs, release) = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut st) != 0 || libc::uname(&mut u) != 0 {
            return false;
        }
        let r = std::ffi::CStr::from_ptr(u.release.as_ptr());
        (st.f_type as i64, r.to_string_lossy().into_owned())
    };
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>());
    let version = (v.next(), v.next());
    let new_enough =
        matches!(version, (Some(Ok(major)), Some(Ok(minor))) if (major, minor) >= (6, 13));
    new_enough && FS.contains(&fs)
}

/// What the file shows now, if it changed since last seen: a change of content or size.
pub(super) fn take_stat(f: &mut FileWb, st: DiskStat) {
    let KernelWrites::Writing { writers, seen } = f.passthrough else {
        return;
    };
    if st == seen {
        return;
    }
    f.passthrough = KernelWrites::Writing { writers, seen: st };
    f.size = st.len;
    f.mtime = st.mtime;
    f.ctime = f.ctime.max(st.mtime);
    f.gen += 1;
}
