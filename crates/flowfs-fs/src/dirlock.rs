//! Directories owned by one live process: each holds a `lock` file locked with `flock`,
//! which the kernel releases when the process dies, so that another mount tells a live
//! owner from a dead one. Used by the cache (`objects/`, `objects.private/`) and by the
//! staging directories.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A hidden directory being created (see `create_locked`) older than this is left over
/// from a process killed in those microseconds, and removed.
const BIRTH_LEFTOVER: Duration = Duration::from_secs(600);

/// Opens (or creates) the lock file of `dir`, not locked yet.
pub fn open_lock(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lock"))
}

/// Takes the exclusive lock of `f` if no other open file holds it; it lasts as long as
/// the file stays open.
pub fn try_lock(f: &File) -> bool {
    // SAFETY: flock on an fd we own; the lock goes with the fd.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Releases the lock of `f` before the file is closed (a directory handed on while the
/// process still runs).
pub fn unlock(f: &File) {
    // SAFETY: flock on an fd we own.
    unsafe {
        libc::flock(f.as_raw_fd(), libc::LOCK_UN);
    }
}

/// A directory name of this process no other process picks: `<pid>-<8 hex digits>`.
pub fn private_name() -> String {
    format!("{}-{:08x}", std::process::id(), rand::random::<u32>())
}

/// Creates a directory of this process under `root`, its lock file already locked when
/// any other process can first see it: it is made under a hidden name (`.NAME.new`,
/// which scans skip) and renamed into place. Made in place, another process starting
/// at the same moment found it without its lock file and removed it as a dead mount's
/// leftover, or locked it before its owner did (test_shared_cache: 1 start in ~10 of
/// four concurrent `flowfs run`s failed with ENOENT).
pub fn create_locked(root: &Path) -> io::Result<(PathBuf, File)> {
    let name = private_name();
    let tmp = root.join(format!(".{name}.new"));
    fs::create_dir(&tmp)?;
    let made = open_lock(&tmp).and_then(|lock| {
        if !try_lock(&lock) {
            return Err(io::Error::other("cannot lock a directory just made"));
        }
        let dir = root.join(&name);
        fs::rename(&tmp, &dir)?;
        Ok((dir, lock))
    });
    if made.is_err() {
        let _ = fs::remove_dir_all(&tmp);
    }
    made
}

/// True for a directory `create_locked` is making (or a process died making); such a
/// directory holds nothing but its lock. Its lock says nothing while it is young (the
/// maker may not have taken it yet): one is removed only when old and not locked.
pub fn being_created(dir: &Path) -> bool {
    let hidden = dir
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with('.'));
    if !hidden {
        return false;
    }
    let old = fs::metadata(dir)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > BIRTH_LEFTOVER));
    let dead = old && File::open(dir.join("lock")).map_or(true, |lock| try_lock(&lock));
    if dead {
        let _ = fs::remove_file(dir.join("lock"));
        let _ = fs::remove_dir(dir);
    }
    true
}
