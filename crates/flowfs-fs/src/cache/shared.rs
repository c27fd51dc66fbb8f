//! What the processes sharing a cache directory coordinate with: open-file-description
//! (OFD) byte-range locks on an entry's sidecar (a fetch in flight, an eviction punching,
//! an entry in use, a pin), and the directory's byte count (`objects/usage`). OFD locks
//! belong to an open file, not to a thread or a process, and the kernel drops them when
//! the last descriptor of that open file closes: a process killed with -9 holds none.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// A lock on a byte range of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lock {
    Shared,
    Exclusive,
}

/// Sets `kind` on `[start, start + len)` of `f`. Without `wait`, false when another open
/// file holds a conflicting lock; with it, blocks until none does.
pub(super) fn ofd_lock(f: &File, kind: Lock, start: u64, len: u64, wait: bool) -> io::Result<bool> {
    // SAFETY: a plain struct for fcntl, zeroed (l_pid must be 0 for OFD locks).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = match kind {
        Lock::Shared => libc::F_RDLCK,
        Lock::Exclusive => libc::F_WRLCK,
    } as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start as libc::off_t;
    fl.l_len = len as libc::off_t;
    let cmd = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    // SAFETY: fcntl on an fd we own with a valid flock struct.
    if unsafe { libc::fcntl(f.as_raw_fd(), cmd, &fl) } == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) if !wait => Ok(false),
        _ => Err(err),
    }
}

/// A new open file of the same file as `f` (its own OFD locks, its own flags).
pub(super) fn reopen(f: &File, direct: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true);
    if direct {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_DIRECT);
    }
    opts.open(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

/// Counters of the whole directory, in `objects/usage` (three `u64`s): the bytes of
/// object data it holds, as every process counts them (a store adds what it made present,
/// an eviction takes off what it freed and corrects the count with what it found on disk:
/// a process killed between a store and its count leaves it wrong until then), and the
/// bytes read from the cache and fetched into it since the directory was made or cleared.
pub(super) struct Usage {
    file: File,
}

/// Slots of `objects/usage`.
pub(super) const USED: u64 = 0;
pub(super) const HITS: u64 = 1;
pub(super) const FETCHED: u64 = 2;

impl Usage {
    pub fn open(dir: &Path) -> io::Result<Usage> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join("usage"))?;
        Ok(Usage { file })
    }

    pub fn get_at(&self, slot: u64) -> u64 {
        let mut b = [0u8; 8];
        match self.file.read_exact_at(&mut b, slot * 8) {
            Ok(()) => u64::from_le_bytes(b),
            Err(_) => 0,
        }
    }

    pub fn get(&self) -> u64 {
        self.get_at(USED)
    }

    /// Adds `delta` to the byte count.
    pub fn add(&self, delta: i64) {
        self.add_at(USED, delta);
    }

    /// Adds `delta` to a slot (under the file's own flock: two syscalls long).
    pub fn add_at(&self, slot: u64, delta: i64) {
        if delta == 0 {
            return;
        }
        let fd = self.file.as_raw_fd();
        // SAFETY: flock on an fd we own; held only across the read and the write below.
        unsafe { libc::flock(fd, libc::LOCK_EX) };
        let v = self.get_at(slot).saturating_add_signed(delta);
        let _ = self.file.write_all_at(&v.to_le_bytes(), slot * 8);
        // SAFETY: as above.
        unsafe { libc::flock(fd, libc::LOCK_UN) };
    }

    /// Sets the byte count (a process alone on the directory, after counting it).
    pub fn set(&self, v: u64) {
        let _ = self.file.write_all_at(&v.to_le_bytes(), USED * 8);
    }
}
