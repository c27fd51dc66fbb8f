//! What a process changed in the cache directory, made durable at its end.
//!
//! The directory is trusted after a reboot only if its last process ended cleanly
//! (persist.rs), and that end must first make every change durable: the bytes a word
//! vouches for, the words an eviction cleared before punching. That was one `syncfs` of
//! the cache's file system, which also waits for every other program's dirty data there:
//! a mount that had read nothing took 6.0 s to unmount with 2.3 GiB of another program's
//! writes pending on the disk. Now each
//! process syncs the entries it changed itself (`fdatasync` of their two files) and the
//! directory, and counts itself in `objects/usage` (`UNSYNCED`) from its first change to
//! that sync: a process killed in between leaves the count up, and only then does the
//! last process fall back to `syncfs`.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use super::persist::{data_path, scan_one};
use super::shared::{Usage, UNSYNCED};

#[derive(Default)]
struct Changed {
    /// This process is counted in `UNSYNCED`.
    counted: bool,
    /// Sidecars of the entries it wrote to or evicted from.
    maps: HashSet<PathBuf>,
}

/// The changes of this process not yet made durable.
#[derive(Default)]
pub(super) struct Changes(Mutex<Changed>);

impl Changes {
    /// Notes a change to the entry whose sidecar is `map` (`None`: to the directory
    /// only, an entry made or removed). No I/O under the lock.
    pub fn note(&self, usage: &Usage, map: Option<&Path>) {
        let mut c = self.0.lock();
        let first = !c.counted;
        c.counted = true;
        if let Some(m) = map.filter(|m| !c.maps.contains(*m)) {
            c.maps.insert(m.to_path_buf());
        }
        drop(c);
        if first {
            usage.add_at(UNSYNCED, 1);
        }
    }

    /// Makes this process's changes durable and takes it off `UNSYNCED`. Entries removed
    /// meanwhile are skipped. Costs grow with the entries this process changed.
    pub fn sync(&self, dir: &Path, usage: &Usage) {
        let c = std::mem::take(&mut *self.0.lock());
        if !c.counted {
            return;
        }
        for map in &c.maps {
            sync_entry(dir, map);
        }
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        usage.add_at(UNSYNCED, -1);
    }
}

/// `fdatasync` of an entry's data file, then of its sidecar (the words vouch for bytes).
fn sync_entry(dir: &Path, map: &Path) {
    let Some(s) = scan_one(map) else {
        return;
    };
    for p in [data_path(dir, &s.hash, s.tag), map.to_path_buf()] {
        if let Ok(f) = File::open(&p) {
            let _ = f.sync_data();
        }
    }
}
