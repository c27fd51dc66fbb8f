//! The system calls the cache makes on its disk: statvfs, hole punching, writeback, syncfs.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Size of the file system holding `dir`, and the bytes on it available to us.
pub struct DiskSpace {
    /// Size of that file system in bytes.
    pub total: u64,
    /// Bytes an unprivileged user may still write there.
    pub avail: u64,
}

/// Asks statvfs about the file system of `dir`; `None` if it cannot be asked.
pub fn disk_space(dir: &Path) -> Option<DiskSpace> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the struct we pass; the path is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    Some(DiskSpace {
        total: st.f_blocks as u64 * frsize,
        avail: st.f_bavail as u64 * frsize,
    })
}

pub(super) fn punch_hole(f: &File, off: u64, len: u64) {
    // SAFETY: plain syscall on an fd we own; failure only means the space is not freed.
    unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off as libc::off_t,
            len as libc::off_t,
        );
    }
}

/// Starts the disk write of `[off, off + len)` of `f`, just written through the page
/// cache, without waiting for it: the pages stay cached (the kernel serves passthrough
/// reads from them) and the disk work is spread over the fetch instead of piling up as
/// dirty pages for the sync at the process's end (a 1 GiB cold read then made the unmount
/// take 2.2 s in `syncfs`, where it took 0.5-1.3 s with `O_DIRECT` writes). Best effort:
/// that sync (durable.rs) is what makes them durable.
pub(super) fn start_writeback(f: &File, off: u64, len: usize) {
    // SAFETY: sync_file_range on an fd we own; no memory is passed.
    unsafe {
        libc::sync_file_range(
            f.as_raw_fd(),
            off as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
}

/// Makes what was written on the file system of `dir` durable.
pub(super) fn sync_fs(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        // SAFETY: syncfs on an fd we own.
        unsafe { libc::syncfs(d.as_raw_fd()) };
    }
}
