//! Pins: a fully cached entry held in place while the kernel reads its data file
//! directly (FUSE passthrough, Linux ≥ 6.9: the kernel reads the backing file at the FUSE
//! file's offsets, bypassing flowfs and the words' check of each read, so nothing may
//! punch a chunk under it).
//!
//! The protocol, on the sidecar's `PIN` byte (an OFD lock, so a process killed with -9
//! lets go of it with its files):
//! - a pin holds a shared lock on it, taken without waiting, on an open file of its own,
//!   and checks under it that every chunk's word in the sidecar says present;
//! - eviction takes an exclusive lock on it, without waiting, before it clears any word
//!   or removes the entry, and keeps it until it has punched (punch.rs `punch_block`,
//!   `remove_unused`); it skips the entry when it cannot. So either the pin came first
//!   and no eviction touches the entry until it is dropped, or the eviction came first
//!   and the pin is refused (then it may see cleared words: refused too).
//!
//! Nothing else clears a word. `flowfs cache clear --force` unlinks the files of an entry
//! in use, but a pin's open data file keeps every byte of it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::sync::Arc;

use super::bitmap::present;
use super::entry::CacheEntry;
use super::persist::{self, Layout, PIN};
use super::shared::{ofd_lock, reopen, Lock};
use super::{DiskCache, SMALL};

/// A fully cached entry that no process's eviction punches or removes while this value
/// lives: its data file, open read-only, holds exactly the object's bytes (its length is
/// the object's size), every one of them cached. Dropping it lets go of the pin.
pub struct Pinned {
    data: File,
    /// The sidecar, opened for this pin alone: its shared lock on `PIN` is the pin.
    _pin: File,
    size: u64,
}

impl Pinned {
    /// The entry's data file, read-only: a backing file for FUSE passthrough.
    pub fn file(&self) -> &File {
        &self.data
    }

    /// The object's size, which is the data file's length.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl std::fmt::Debug for Pinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pinned")
            .field("fd", &self.data.as_raw_fd())
            .field("size", &self.size)
            .finish()
    }
}

impl DiskCache {
    /// Pins `e` if every chunk of it is cached (the sidecar's words, read under the pin,
    /// not this process's hint): `None` if some chunk is not, if an eviction is working
    /// on the entry right now (the pin does not wait for it), for an empty object, or if
    /// the entry has no files (the cache directory went away: reads go without the
    /// cache). A few system calls (an open of the sidecar, a lock, one `pread` of the
    /// words, an open of the data file); no lock of this process is held across them.
    pub fn pin_complete(&self, e: &Arc<CacheEntry>) -> io::Result<Option<Pinned>> {
        // A small version has no files unless this process found or made them: packed
        // (small.rs) or read once, it is served through flowfs, without a look for them.
        if e.size == 0 || e.is_packed() || (e.size <= SMALL && e.absent()) {
            return Ok(None);
        }
        let Ok(files) = e.files() else {
            return Ok(None);
        };
        let pin = reopen(&files.map)?;
        if !ofd_lock(&pin, Lock::Shared, PIN, 1, false)? {
            return Ok(None);
        }
        let layout = Layout::new(e.size);
        let words = persist::read_words(&files.map, &layout, 0, e.chunks())?;
        e.take_words(0, &words);
        if present(&words) < e.chunks() {
            return Ok(None);
        }
        // A read-only open file of its own (not a duplicate of the read-write one): the
        // kernel reads through it, and nothing writes through it.
        let data = OpenOptions::new()
            .read(true)
            .open(format!("/proc/self/fd/{}", files.data.as_raw_fd()))?;
        // The kernel's reads through the pin are not seen here: the whole object counts
        // as read from the cache once, at its open (`flowfs cache stats`).
        self.hits
            .fetch_add(e.size, std::sync::atomic::Ordering::Relaxed);
        self.mem.forget(e.mem());
        Ok(Some(Pinned {
            data,
            _pin: pin,
            size: e.size,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::Pinned;

    #[test]
    fn a_pin_is_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<Pinned>();
    }
}
