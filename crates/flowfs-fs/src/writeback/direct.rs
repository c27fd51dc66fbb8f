//! Writers the kernel serves itself (FUSE passthrough): their writes go straight to the
//! staging file and never reach flowfs. What `write` records for other writers (size,
//! mtime, a new generation, the need for a journal record) is therefore taken from the
//! file: the file counts as changed from the open of such a writer on, its size and
//! mtime are read back with `fstat` when stat asks and when the writer closes, and its
//! last close bumps the generation once more, so that an upload begun while it wrote
//! (an fsync's) is followed by one of the final content.

use std::io;
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
            },
            Direct::Writing { writers, seen } => Direct::Writing {
                writers: writers + 1,
                seen,
            },
        };
        // Parts sent early are taken from writes flowfs sees; it will see none.
        f.early = EarlyState::Off;
        f.gen += 1;
        let journal = f.journaled.is_none() && f.phase != Phase::Retired;
        t.direct.insert(ino);
        Ok(journal)
    }

    /// `refresh_direct` of every file with passthrough writers open (before a lookup or
    /// a listing answers with sizes): as many `fstat`s as there are such files.
    pub fn refresh_all_direct(&self) {
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
        let file = {
            let mut t = self.table.lock();
            match t.files.get(&ino) {
                Some(f) if f.direct != Direct::None => f.file.clone(),
                _ => {
                    // Its writers are gone (or it left the table): out of the index.
                    t.direct.remove(&ino);
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
        f.direct = match f.direct {
            Direct::Writing { writers, seen } if writers > 1 => Direct::Writing {
                writers: writers - 1,
                seen,
            },
            _ => Direct::None,
        };
        f.gen += 1;
        if f.direct == Direct::None {
            t.direct.remove(&ino);
        }
        st.map(|_| ())
    }
}

fn disk_stat(file: &StagedFile) -> io::Result<DiskStat> {
    let m = file.file.metadata()?;
    Ok(DiskStat {
        len: m.len(),
        mtime: m.modified()?,
    })
}

/// What the file shows now, if it changed since last seen: a change of content or size.
fn take_stat(f: &mut FileWb, st: DiskStat) {
    let Direct::Writing { writers, seen } = f.direct else {
        return;
    };
    if st == seen {
        return;
    }
    f.direct = Direct::Writing { writers, seen: st };
    f.size = st.len;
    f.mtime = st.mtime;
    f.ctime = f.ctime.max(st.mtime);
    f.gen += 1;
}
