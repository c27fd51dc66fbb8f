//! What `flowfs cache` does with a cache directory without mounting anything: its
//! statistics (`stats`) and its removal (`clear`). Prefetching is a reader like any
//! other (prefetch/warm.rs).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;

use super::bitmap::present;
use super::persist::{self, scan};
use super::shared::{Usage, FETCHED, HITS};
use super::small;
use super::CHUNK;
use crate::dirlock::{open_lock, try_lock, unlock};

/// One bucket's share of a cache directory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BucketStats {
    /// Object versions with at least one chunk cached.
    pub objects: u64,
    /// Bytes of their data cached (whole 64 KiB chunks; a small version packed in a
    /// segment, its exact size).
    pub bytes: u64,
}

/// What a cache directory holds, from its files.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CacheStats {
    /// Object versions with at least one chunk cached.
    pub objects: u64,
    /// Bytes of their data cached.
    pub bytes: u64,
    /// The same, per bucket.
    pub buckets: BTreeMap<String, BucketStats>,
    /// Bytes read from the cache files (not those read from memory just after their
    /// fetch) and bytes fetched into them, since the directory was made or cleared, as
    /// its processes counted them (each adds its counts when it closes a file and at its
    /// end). A file served by FUSE passthrough from its cache file counts its whole size
    /// as read at its open: the kernel's reads are not seen.
    pub hit_bytes: u64,
    /// See `hit_bytes`.
    pub fetched_bytes: u64,
    /// Whether a live process uses the directory now.
    pub in_use: bool,
}

/// Why a directory cannot be cleared or read.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The directory has no `objects/`.
    #[error("{0} is not a flowfs cache directory (no objects/ in it)")]
    NotACache(String),
    /// A live process uses it (and no `--force`).
    #[error("{0} is in use by a running flowfs process (a mount, a task or a prefetch); unmount it first or pass --force")]
    InUse(String),
    /// A file of it could not be read or written.
    #[error("{0}: {1}")]
    Io(String, io::Error),
}

fn objects(dir: &Path) -> Result<std::path::PathBuf, AdminError> {
    let o = dir.join("objects");
    if !o.is_dir() {
        return Err(AdminError::NotACache(dir.display().to_string()));
    }
    Ok(o)
}

/// The statistics of the cache under `dir`.
pub fn stats(dir: &Path) -> Result<CacheStats, AdminError> {
    let o = objects(dir)?;
    let mut st = CacheStats::default();
    let entries = scan(&o)
        .into_iter()
        .map(|s| (s.ident, present(&s.words) * CHUNK));
    // Small versions packed in segments (small.rs) count as whole entries.
    for (ident, bytes) in entries.chain(small::records(&o)) {
        if bytes == 0 {
            continue;
        }
        let bucket = ident.split('\0').next().unwrap_or("").to_string();
        let b = st.buckets.entry(bucket).or_default();
        b.objects += 1;
        b.bytes += bytes;
        st.objects += 1;
        st.bytes += bytes;
    }
    let usage = Usage::open(&o).map_err(|e| AdminError::Io(o.display().to_string(), e))?;
    st.hit_bytes = usage.get_at(HITS);
    st.fetched_bytes = usage.get_at(FETCHED);
    st.in_use = !free(&o)?;
    Ok(st)
}

/// Whether no live process holds `objects/lock` (tried, not kept).
fn free(o: &Path) -> Result<bool, AdminError> {
    let lock = open_lock(o).map_err(|e| AdminError::Io(o.display().to_string(), e))?;
    let free = try_lock(&lock);
    if free {
        unlock(&lock);
    }
    Ok(free)
}

/// Removes every cached object under `dir` (not staged files); the bytes removed. While
/// a process uses the directory, only with `force` (its reads then fetch again; nothing
/// wrong is served: a removed file is no longer found, an open one stays private to the
/// processes that have it open, and a pinned entry's data file keeps its bytes).
pub fn clear(dir: &Path, force: bool) -> Result<u64, AdminError> {
    let o = objects(dir)?;
    let io_err = |e| AdminError::Io(o.display().to_string(), e);
    let lock = open_lock(&o).map_err(io_err)?;
    let alone = try_lock(&lock);
    if !alone && !force {
        return Err(AdminError::InUse(dir.display().to_string()));
    }
    let mut removed = 0;
    let mut files: Vec<_> = fs::read_dir(&o)
        .map_err(io_err)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().to_string());
            let own = ["lock", "state", "usage", "evict.lock", small::DIR];
            !own.contains(&name.unwrap_or_default().as_str())
        })
        .collect();
    // Sidecars before data files, as an eviction removes them: a process never finds a
    // sidecar whose data file is gone (it would take the entry for damaged).
    files.sort_by_key(|p| p.extension().is_none_or(|x| x != "map"));
    for path in files {
        if let Some(s) = persist::scan_one(&path) {
            removed += present(&s.words) * CHUNK;
        }
        let _ = fs::remove_file(path);
    }
    removed += small::clear(&o);
    let usage = Usage::open(&o).map_err(io_err)?;
    if alone {
        usage.set(0);
        usage.add_at(HITS, -(usage.get_at(HITS) as i64));
        usage.add_at(FETCHED, -(usage.get_at(FETCHED) as i64));
    } else {
        usage.add(-(removed as i64));
    }
    Ok(removed)
}
