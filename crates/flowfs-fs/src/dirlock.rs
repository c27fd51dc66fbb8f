//! Directories owned by one live process: each holds a `lock` file locked with `flock`,
//! which the kernel releases when the process dies, so that another mount tells a live
//! owner from a dead one. Used by the cache (`objects/`, `objects.private/`) and by the
//! staging directories.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::Path;

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
