//! `objects/` under a cache directory: its lock, which every live process holds shared and
//! the first one exclusively while it decides what earlier runs left can be trusted, and
//! the boot state that decision reads (a word vouches for bytes only within one boot,
//! unless the last process of that boot ended cleanly).

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use super::bitmap::present;
use super::persist::{data_name, scan_one};
use super::shared::Usage;
use super::CHUNK;
use crate::dirlock::{open_lock, try_lock};

/// `objects/` under a cache directory, with the lock every live process holds shared.
pub(super) struct Root {
    pub dir: PathBuf,
    pub lock: File,
    pub usage: Usage,
}

/// Opens `objects/` under `cache_dir`. The first process (none holds the lock) checks what
/// earlier runs left (`start`), then every process holds the lock shared until it ends.
pub(super) fn lock_root(cache_dir: &Path) -> io::Result<Root> {
    let dir = cache_dir.join("objects");
    fs::create_dir_all(&dir)?;
    let lock = open_lock(&dir)?;
    let usage = Usage::open(&dir)?;
    if try_lock(&lock) {
        remove_private(&cache_dir.join("objects.private"));
        start(&dir, &usage)?;
    }
    // From exclusive (alone) or nothing to shared. A process clearing the directory
    // holds it exclusively only for that long.
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(std::os::unix::io::AsRawFd::as_raw_fd(&lock), libc::LOCK_SH) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Root { dir, lock, usage })
}

/// Whether no other live process uses the directory whose lock is `lock` (held shared by
/// this one): true leaves it held exclusively.
pub(super) fn alone(lock: &File) -> bool {
    try_lock(lock)
}

/// Private caches of an older flowfs (one per concurrent mount): their mounts are gone.
fn remove_private(root: &Path) {
    let Ok(dirs) = fs::read_dir(root) else {
        return;
    };
    for d in dirs.flatten() {
        let free = File::open(d.path().join("lock")).map_or(true, |l| try_lock(&l));
        if free {
            let _ = fs::remove_dir_all(d.path());
        }
    }
    let _ = fs::remove_dir(root);
}

/// Starts the first run on `dir` (held exclusively): what earlier runs left is kept if it
/// can be trusted, the rest removed, and the byte count set to what is there.
fn start(dir: &Path, usage: &Usage) -> io::Result<()> {
    // Words are written without fsync, and only ever vouch for chunks already written
    // (and stop before a chunk is punched): a killed process loses nothing, the page
    // cache survives it. A machine that went down uncleanly may have lost data a word
    // vouches for, so after a reboot only a clean end is trusted.
    let boot = boot_id();
    let state = fs::read_to_string(dir.join("state")).unwrap_or_default();
    let same_boot = !boot.is_empty() && state.starts_with(&format!("{boot} "));
    let trusted = same_boot || state.ends_with(" clean");
    fs::write(dir.join("state"), format!("{boot} dirty"))?;
    // Sidecars first: a data file is kept only if a kept sidecar names it. Everything
    // else goes: data files no sidecar names (a process killed while it made or removed
    // an entry), temporary files, and the files of older formats (`<h>.cache`, whose
    // header followed the bytes; `<h>.data`/`<h>.meta`).
    let mut used = 0;
    let mut keep = std::collections::HashSet::new();
    let names: Vec<String> = fs::read_dir(dir)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    for name in names.iter().filter(|n| trusted && n.ends_with(".map")) {
        let Some(s) = scan_one(&dir.join(name)) else {
            continue;
        };
        let data = data_name(&s.hash, s.tag);
        let whole = fs::metadata(dir.join(&data)).is_ok_and(|m| m.len() == s.layout.size);
        if whole {
            used += present(&s.words) * CHUNK;
            keep.insert(name.clone());
            keep.insert(data);
        }
    }
    for name in names {
        // Not the lock: a new file of that name would be a second, free lock. Not the
        // record of opens (admit.rs): hints only, good after any end.
        let own = ["lock", "state", "usage", "seen", super::small::DIR];
        if !own.contains(&name.as_str()) && !keep.contains(&name) {
            let _ = fs::remove_file(dir.join(name));
        }
    }
    used += super::small::start(dir, trusted);
    usage.set(used);
    if !same_boot {
        // Counts of processes of an earlier boot (durable.rs): nothing of theirs is pending.
        usage.set_at(super::shared::UNSYNCED, 0);
    }
    Ok(())
}

/// The last process ends cleanly: what is on disk may be trusted after a reboot.
pub(super) fn mark_clean(dir: &Path) {
    let _ = fs::write(dir.join("state"), format!("{} clean", boot_id()));
}

pub(super) fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
