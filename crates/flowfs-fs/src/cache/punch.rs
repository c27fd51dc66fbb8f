//! An entry's files as an eviction changes them, from any process and without the entry
//! open: a block punched (`punch_block`) and an empty, unused entry removed
//! (`remove_unused`), each under the sidecar's locks taken without waiting (entry/fetching.rs
//! describes them), each skipping an entry a process pins.

use std::fs::File;
use std::io;
use std::path::Path;

use super::bitmap::{present, ChunkMap};
use super::disk::punch_hole;
use super::entry::same_file;
use super::persist::{self, Layout, INUSE, PIN};
use super::shared::{ofd_lock, Lock};
use super::{BLOCK_CHUNKS, CHUNK};

/// An entry's sidecar as an eviction opens it.
enum Opened {
    /// Locked against pins (the lock lasts as long as the file), with its header.
    Unpinned(File, persist::Header),
    /// A process pins it.
    Pinned,
    /// It went, or was made again for another size, since the scan.
    Gone,
}

/// Opens the sidecar at `path` for an eviction and locks its pin byte exclusively,
/// without waiting.
fn open_unpinned(path: &Path, l: &Layout) -> io::Result<Opened> {
    let f = match File::options().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Opened::Gone),
        Err(e) => return Err(e),
    };
    if !ofd_lock(&f, Lock::Exclusive, PIN, 1, false)? {
        return Ok(Opened::Pinned);
    }
    let h = persist::read_header(&f)?;
    Ok(if h.layout == *l {
        Opened::Unpinned(f, h)
    } else {
        Opened::Gone
    })
}

/// Evicts block `b` of the entry whose sidecar is at `path` (any process's): under an
/// exclusive lock on its words and one on its pin byte, both taken without waiting (a
/// fetch holds some of them, or a process pins the entry: the block is skipped), the
/// present chunks' words are cleared, then their bytes punched in the data file. The
/// bytes freed; `None` if the entry is pinned.
pub(super) fn punch_block(path: &Path, l: &Layout, b: u64) -> io::Result<Option<u64>> {
    let (f, h) = match open_unpinned(path, l)? {
        Opened::Unpinned(f, h) => (f, h),
        Opened::Pinned => return Ok(None),
        Opened::Gone => return Ok(Some(0)),
    };
    let (c0, c1) = (b * BLOCK_CHUNKS, ((b + 1) * BLOCK_CHUNKS).min(l.chunks));
    if !ofd_lock(&f, Lock::Exclusive, l.word(c0), (c1 - c0) * 4, false)? {
        return Ok(Some(0));
    }
    let old = persist::read_words(&f, l, c0, c1)?;
    let freed = present(&old) * CHUNK;
    if freed == 0 {
        return Ok(Some(0));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let hash = hash_of(path);
    let data = File::options()
        .write(true)
        .open(persist::data_path(dir, &hash, h.tag))?;
    let new: Vec<u32> = old.iter().map(|w| w & !1).collect();
    // The words stop vouching before the bytes go: a process killed in between leaves
    // nothing wrong behind.
    persist::write_words(&f, l, c0, &new)?;
    for (s, c) in ChunkMap::new(old).clear_range(0, c1 - c0) {
        punch_hole(&data, (c0 + s) * CHUNK, (c - s) * CHUNK);
    }
    Ok(Some(freed))
}

/// The entry's hash, from its sidecar's name.
fn hash_of(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().to_string());
    let name = name.unwrap_or_default();
    name.strip_suffix(".map").unwrap_or(&name).to_string()
}

/// Removes the entry whose sidecar is at `path` if no process uses it (an exclusive lock
/// on its `INUSE` byte, without waiting) or pins it, and it holds nothing; true if
/// removed. The sidecar goes first, then the data file, both under the lock (a process
/// that waits to use the entry finds the sidecar gone and makes a new one).
pub(super) fn remove_unused(path: &Path, l: &Layout) -> bool {
    let Ok(Opened::Unpinned(f, h)) = open_unpinned(path, l) else {
        return false;
    };
    if !matches!(ofd_lock(&f, Lock::Exclusive, INUSE, 1, false), Ok(true)) {
        return false;
    }
    // Nothing present and no fetch (a fetch holds its entry in use).
    let empty = matches!(persist::read_words(&f, l, 0, l.chunks), Ok(w) if present(&w) == 0);
    if !empty || !same_file(path, &f) || std::fs::remove_file(path).is_err() {
        return false;
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let _ = std::fs::remove_file(persist::data_path(dir, &hash_of(path), h.tag));
    true
}
