//! What the cache keeps on disk between runs: the directory it may use (`objects/` or a
//! private one) and its lock, the boot state that says whether the saved bitmaps can be
//! trusted, the names of an entry's files, and the `.meta` format (the bitmap that
//! vouches for the chunks of a `.data` file).

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use super::CHUNK;
use crate::dirlock::{open_lock, private_name, try_lock};

const MAGIC: &[u8; 8] = b"FLOWFSC1";

/// The directory a cache uses, locked while the mount lives.
pub(super) struct Root {
    pub dir: PathBuf,
    /// Held while the mount lives: `dir` is ours.
    pub lock: File,
    /// A private cache of a mount that found `objects/` taken: nothing to hand on.
    pub private: bool,
}

/// `objects/` under `cache_dir` if no live mount holds it, else a new private directory
/// under `objects.private/` (see `DiskCache::open`).
pub(super) fn lock_root(cache_dir: &Path) -> io::Result<Root> {
    let shared = cache_dir.join("objects");
    fs::create_dir_all(&shared)?;
    let private_root = cache_dir.join("objects.private");
    remove_dead_private(&private_root);
    let lock = open_lock(&shared)?;
    if try_lock(&lock) {
        return Ok(Root {
            dir: shared,
            lock,
            private: false,
        });
    }
    let dir = private_root.join(private_name());
    fs::create_dir_all(&dir)?;
    let lock = open_lock(&dir)?;
    if !try_lock(&lock) {
        return Err(io::Error::other(
            "cannot lock a new private cache directory",
        ));
    }
    tracing::info!(
        "{} is in use by another mount: this mount caches in {} (removed at unmount)",
        shared.display(),
        dir.display()
    );
    Ok(Root {
        dir,
        lock,
        private: true,
    })
}

/// Private caches of mounts that are gone (killed: their lock is free).
fn remove_dead_private(root: &Path) {
    let Ok(dirs) = fs::read_dir(root) else {
        return;
    };
    for d in dirs.flatten() {
        let free = File::open(d.path().join("lock")).map_or(true, |l| try_lock(&l));
        if free {
            let _ = fs::remove_dir_all(d.path());
        }
    }
}

/// An entry an earlier run left: the hash that names its files, the time its bitmap was
/// saved and the bytes it vouches for.
pub(super) struct Saved {
    pub hash: String,
    pub mtime: SystemTime,
    pub bytes: u64,
}

/// Starts a run on the locked `root`: what an earlier run left is kept if it can be
/// trusted (and listed), the rest removed; the state says "dirty" until `mark_clean`.
pub(super) fn start(root: &Path) -> io::Result<Vec<Saved>> {
    // Bitmaps are saved without fsync, and only ever vouch for chunks already written
    // (and stop vouching before a chunk is punched): a killed process loses nothing,
    // the page cache survives it. A machine that went down uncleanly may have lost
    // data a bitmap vouches for, so after a reboot only a clean shutdown is trusted.
    let boot = boot_id();
    let state = fs::read_to_string(root.join("state")).unwrap_or_default();
    let same_boot = !boot.is_empty() && state.starts_with(&format!("{boot} "));
    if !same_boot && !state.ends_with(" clean") {
        for e in fs::read_dir(root)?.flatten() {
            // Not the lock: a new file of that name would be a second, free lock.
            if e.file_name() != "lock" {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    fs::write(root.join("state"), format!("{boot} dirty"))?;
    let mut saved = Vec::new();
    for e in fs::read_dir(root)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().to_string();
        let Some(hash) = name.strip_suffix(".meta") else {
            continue;
        };
        let path = e.path();
        match read_meta(&path) {
            Ok((_, _, present)) if data_path(root, hash).exists() => {
                let mtime = e.metadata()?.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                saved.push(Saved {
                    hash: hash.to_string(),
                    mtime,
                    bytes: popcount(&present) * CHUNK,
                });
            }
            _ => remove(root, hash),
        }
    }
    // Data files whose metadata never got written hold nothing we can trust.
    let kept: HashSet<&str> = saved.iter().map(|s| s.hash.as_str()).collect();
    for e in fs::read_dir(root)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(hash) = name.strip_suffix(".data") {
            if !kept.contains(hash) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    Ok(saved)
}

/// Every bitmap is saved and synced (at unmount): the next run may trust them all.
pub(super) fn mark_clean(root: &Path) {
    let _ = fs::write(root.join("state"), format!("{} clean", boot_id()));
}

fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// What names an object version in the cache: its identity (bucket, key, ETag and size,
/// kept in its `.meta`) and the hash of that, which names its files. A changed object is
/// another version: it never reads the bytes of the old one.
pub(super) fn identity(bucket: &str, key: &str, etag: &str, size: u64) -> (String, String) {
    let ident = format!("{bucket}\0{key}\0{etag}\0{size}");
    let d = Sha256::digest(ident.as_bytes());
    let hash = d.iter().take(16).map(|b| format!("{b:02x}")).collect();
    (ident, hash)
}

pub(super) fn data_path(root: &Path, hash: &str) -> PathBuf {
    root.join(format!("{hash}.data"))
}

pub(super) fn meta_path(root: &Path, hash: &str) -> PathBuf {
    root.join(format!("{hash}.meta"))
}

/// Removes an entry's files, its bitmap first.
pub(super) fn remove(root: &Path, hash: &str) {
    let _ = fs::remove_file(meta_path(root, hash));
    let _ = fs::remove_file(data_path(root, hash));
}

/// The saved bitmap of a cold entry about to be opened, if it is this version's; else its
/// files are removed and the entry starts empty.
pub(super) fn load(root: &Path, hash: &str, ident: &str, size: u64) -> Vec<u64> {
    let words = size.div_ceil(CHUNK).div_ceil(64) as usize;
    match read_meta(&meta_path(root, hash)) {
        Ok((id2, s2, bits)) if id2 == ident && s2 == size && bits.len() == words => bits,
        _ => {
            remove(root, hash);
            vec![0u64; words]
        }
    }
}

fn read_meta(path: &Path) -> io::Result<(String, u64, Vec<u64>)> {
    let mut raw = Vec::new();
    File::open(path)?.read_to_end(&mut raw)?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "bad cache metadata");
    if raw.len() < 20 || &raw[..8] != MAGIC {
        return Err(bad());
    }
    let size = u64::from_le_bytes(raw[8..16].try_into().map_err(|_| bad())?);
    let ilen = u32::from_le_bytes(raw[16..20].try_into().map_err(|_| bad())?) as usize;
    let ident = raw.get(20..20 + ilen).ok_or_else(bad)?;
    let ident = String::from_utf8(ident.to_vec()).map_err(|_| bad())?;
    let words = size.div_ceil(CHUNK).div_ceil(64) as usize;
    let bits = raw.get(20 + ilen..20 + ilen + words * 8).ok_or_else(bad)?;
    let present = bits
        .chunks(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
        .collect();
    Ok((ident, size, present))
}

/// Saves a bitmap (write to a temporary file, rename over the old one; no fsync, see
/// `start`).
pub(super) fn write_meta(path: &Path, ident: &str, size: u64, present: &[u64]) -> io::Result<()> {
    let mut raw = Vec::with_capacity(20 + ident.len() + present.len() * 8);
    raw.extend_from_slice(MAGIC);
    raw.extend_from_slice(&size.to_le_bytes());
    raw.extend_from_slice(&(ident.len() as u32).to_le_bytes());
    raw.extend_from_slice(ident.as_bytes());
    for w in present {
        raw.extend_from_slice(&w.to_le_bytes());
    }
    let tmp = path.with_extension("meta.tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(&raw)?;
    fs::rename(&tmp, path)?;
    Ok(())
}

pub(super) fn popcount(bits: &[u64]) -> u64 {
    bits.iter().map(|w| w.count_ones() as u64).sum()
}
