//! The system calls the cache makes on its disk: statvfs, hole punching, syncfs.

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

/// Makes what was written on the file system of `dir` durable.
pub(super) fn sync_fs(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        // SAFETY: syncfs on an fd we own.
        unsafe { libc::syncfs(d.as_raw_fd()) };
    }
}
