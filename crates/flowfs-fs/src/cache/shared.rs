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
use std::sync::atomic::Ordering;

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
pub(super) fn reopen(f: &File) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

/// Counters of the whole directory, in `objects/usage` (four `u64`s): the bytes of
/// object data it holds, as every process counts them (a store adds what it made present,
/// an eviction takes off what it freed and corrects the count with what it found on disk:
/// a process killed between a store and its count leaves it wrong until then), and the
/// bytes read from the cache and fetched into it since the directory was made or cleared,
/// and the processes whose changes are not yet durable (`UNSYNCED`, durable.rs).
///
/// Every process maps the file shared and changes the counters with atomic operations on
/// the mapping (one physical page for all of them): no system call per store or per
/// check. Reading and updating them with `pread`, `pwrite` and an `flock` cost a cold
/// read of a 1 MiB object 14 system calls. Where the file cannot be mapped, that is
/// still what is done.
pub(super) struct Usage {
    file: File,
    map: Option<Mapping>,
}

/// `objects/usage` mapped shared, page-aligned: slot `i` is the `u64` at `8 * i`.
struct Mapping {
    ptr: std::ptr::NonNull<libc::c_void>,
}

// SAFETY: the mapping is only ever accessed through atomics (`slot`).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

const SLOTS: u64 = 4;

impl Mapping {
    fn new(file: &File) -> Option<Mapping> {
        let len = SLOTS * 8;
        if file.metadata().ok()?.len() < len {
            // Never shortens: another process may have made it longer and counted.
            file.set_len(len).ok()?;
        }
        // SAFETY: a fresh shared mapping of a file we have open read-write, of a length
        // the file has; unmapped in Drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        std::ptr::NonNull::new(ptr).map(|ptr| Mapping { ptr })
    }

    fn slot(&self, slot: u64) -> &std::sync::atomic::AtomicU64 {
        debug_assert!(slot < SLOTS);
        // SAFETY: the mapping is page-aligned and SLOTS * 8 long, so every slot is an
        // aligned u64 inside it, alive as long as `self`; every process touches it only
        // with atomic operations.
        unsafe { &*(self.ptr.as_ptr() as *const std::sync::atomic::AtomicU64).add(slot as usize) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of that length.
        unsafe { libc::munmap(self.ptr.as_ptr(), (SLOTS * 8) as usize) };
    }
}

/// Slots of `objects/usage`.
pub(super) const USED: u64 = 0;
pub(super) const HITS: u64 = 1;
pub(super) const FETCHED: u64 = 2;
/// Processes that changed the directory and have not made that durable (durable.rs).
pub(super) const UNSYNCED: u64 = 3;

impl Usage {
    pub fn open(dir: &Path) -> io::Result<Usage> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join("usage"))?;
        let map = Mapping::new(&file);
        Ok(Usage { file, map })
    }

    pub fn get_at(&self, slot: u64) -> u64 {
        if let Some(m) = &self.map {
            return m.slot(slot).load(Ordering::Acquire);
        }
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

    /// Adds `delta` to a slot (an atomic update of the mapping; without one, under the
    /// file's own flock, two syscalls long).
    pub fn add_at(&self, slot: u64, delta: i64) {
        if delta == 0 {
            return;
        }
        if let Some(m) = &self.map {
            let _ = m
                .slot(slot)
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                    Some(v.saturating_add_signed(delta))
                });
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
        self.set_at(USED, v);
    }

    /// Sets a slot (a process alone on the directory).
    pub fn set_at(&self, slot: u64, v: u64) {
        if let Some(m) = &self.map {
            m.slot(slot).store(v, Ordering::Release);
            return;
        }
        let _ = self.file.write_all_at(&v.to_le_bytes(), slot * 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two openings of `objects/usage` (as two processes have) count together, with no
    /// update lost under concurrent adds, and the file holds the counts.
    #[test]
    fn counts_from_two_openings_add_up_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let a = Usage::open(dir.path()).unwrap();
        let b = Usage::open(dir.path()).unwrap();
        assert!(a.map.is_some() && b.map.is_some(), "mapped on a local disk");
        std::thread::scope(|s| {
            for u in [&a, &b, &a, &b] {
                s.spawn(move || {
                    for _ in 0..10_000 {
                        u.add_at(HITS, 3);
                        u.add(1);
                    }
                });
            }
        });
        assert_eq!((a.get_at(HITS), b.get()), (120_000, 40_000));
        let raw = std::fs::read(dir.path().join("usage")).unwrap();
        let slot = |i: usize| u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!((slot(0), slot(1), slot(2)), (40_000, 120_000, 0));
        // A count never goes below zero; `set` is seen by the other opening.
        b.add(-50_000);
        assert_eq!(a.get(), 0);
        a.set(7);
        assert_eq!(b.get(), 7);
        drop(a);
        assert_eq!(Usage::open(dir.path()).unwrap().get(), 7);
    }
}
