//! Writers the kernel serves itself (FUSE passthrough): their writes go straight to the
//! staging file and never reach flowfs. What `write` records for other writers (size,
//! mtime, a new generation, the need for a journal record) is therefore taken from the
//! file: it is journaled at the open of such a writer, its size and times are read back
//! with `fstat` when stat asks, at fsync and when the writer closes, and any change seen
//! moves the generation on.
//!
//! At the last such writer's close the generation moves on once more, so that an upload
//! begun while it wrote (an fsync's) is followed by one of the final content, unless
//! nothing at all happened since the first of them opened: the same size, mtime and
//! ctime, and no generation in between. That is trusted only where timestamps tell every
//! change after a look at them (`fine_timestamps`); elsewhere every passthrough writer
//! counts as a change. (Counting every one cost B7 47 PUTs and two multipart uploads of
//! files opened for writing and closed unchanged, 46 MiB of 139.)

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Direct, DiskStat, EarlyState, FileWb, Phase, StagedFile, WriteBack};

impl WriteBack {
    /// A passthrough writer of `ino`'s staged `file` is opening; returns whether the
    /// file needs its journal record (its changes are unseen from now on, so they are
    /// recorded before the first one is made).
    pub fn begin_direct(&self, ino: u64, file: &Arc<StagedFile>) -> io::Result<bool> {
        let st = disk_stat(file)?;
        let mut t = self.table.lock();
        let Some(f) = t.files.get_mut(&ino).filter(|f| Arc::ptr_eq(&f.file, file)) else {
            return Ok(false);
        };
        f.direct = match f.direct {
            Direct::None => Direct::Writing {
                writers: 1,
                seen: st,
                opened: (st, f.gen),
            },
            Direct::Writing {
                writers,
                seen,
                opened,
            } => Direct::Writing {
                writers: writers + 1,
                seen,
                opened,
            },
        };
        // Parts sent early are taken from writes flowfs sees; it will see none.
        f.early = EarlyState::Off;
        if !self.fine {
            f.gen += 1;
        }
        let journal = f.journaled.is_none() && f.phase != Phase::Retired;
        t.direct.insert(ino);
        self.direct_files.store(t.direct.len(), Ordering::Release);
        Ok(journal)
    }

    /// `refresh_direct` of every file with passthrough writers open (before a lookup or
    /// a listing answers with sizes): as many `fstat`s as there are such files.
    pub fn refresh_all_direct(&self) {
        if self.direct_files.load(Ordering::Acquire) == 0 {
            return;
        }
        let inos: Vec<u64> = {
            let t = self.table.lock();
            if t.direct.is_empty() {
                return;
            }
            t.direct.iter().copied().collect()
        };
        for ino in inos {
            let _ = self.refresh_direct(ino);
        }
    }

    /// Takes the size and mtime of `ino`'s staging file from the file while passthrough
    /// writers are open (the `fstat` runs outside the table's lock).
    pub fn refresh_direct(&self, ino: u64) -> io::Result<()> {
        if self.direct_files.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let file = {
            let mut t = self.table.lock();
            match t.files.get(&ino) {
                Some(f) if f.direct != Direct::None => f.file.clone(),
                _ => {
                    // Its writers are gone (or it left the table): out of the index.
                    t.direct.remove(&ino);
                    self.direct_files.store(t.direct.len(), Ordering::Release);
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
    pub fn end_direct(&self, ino: u64, file: &Arc<StagedFile>) -> io::Result<()> {
        let st = disk_stat(file);
        let mut t = self.table.lock();
        let Some(f) = t.files.get_mut(&ino).filter(|f| Arc::ptr_eq(&f.file, file)) else {
            return st.map(|_| ());
        };
        if let Ok(st) = &st {
            take_stat(f, *st);
        }
        let untouched = self.fine
            && matches!((&st, f.direct), (Ok(now), Direct::Writing { opened, .. })
                if opened == (*now, f.gen));
        f.direct = match f.direct {
            Direct::Writing {
                writers,
                seen,
                opened,
            } if writers > 1 => Direct::Writing {
                writers: writers - 1,
                seen,
                opened,
            },
            _ => Direct::None,
        };
        if !untouched {
            f.gen += 1;
        }
        if f.direct == Direct::None {
            t.direct.remove(&ino);
            self.direct_files.store(t.direct.len(), Ordering::Release);
        }
        st.map(|_| ())
    }
}

fn disk_stat(file: &StagedFile) -> io::Result<DiskStat> {
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
fn take_stat(f: &mut FileWb, st: DiskStat) {
    let Direct::Writing {
        writers,
        seen,
        opened,
    } = f.direct
    else {
        return;
    };
    if st == seen {
        return;
    }
    f.direct = Direct::Writing {
        writers,
        seen: st,
        opened,
    };
    f.size = st.len;
    f.mtime = st.mtime;
    f.ctime = f.ctime.max(st.mtime);
    f.gen += 1;
}
