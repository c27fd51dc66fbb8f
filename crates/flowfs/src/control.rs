//! The control socket of a running mount: `flowfs unmount` asks the mount process to
//! flush and unmount, and waits for its answer. One socket per mount point, in a
//! directory private to the user.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("flowfs"),
        // SAFETY: getuid cannot fail.
        _ => std::env::temp_dir().join(format!("flowfs-{}", unsafe { libc::getuid() })),
    }
}

/// FNV-1a: stable across builds, unlike the std hasher.
fn fnv(s: &[u8]) -> u64 {
    s.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100000001b3)
    })
}

pub fn socket_path(mountpoint: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    runtime_dir().join(format!(
        "{:016x}.sock",
        fnv(mountpoint.as_os_str().as_bytes())
    ))
}

pub fn ensure_runtime_dir() -> io::Result<PathBuf> {
    let d = runtime_dir();
    std::fs::create_dir_all(&d)?;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700))?;
    Ok(d)
}

/// Sends one command and returns the answer: `NOTE` lines, then `OK` or `ERR why`.
pub fn request(mountpoint: &Path, cmd: &str, timeout: Option<Duration>) -> io::Result<String> {
    let mut s = UnixStream::connect(socket_path(mountpoint))?;
    s.set_read_timeout(timeout)?;
    s.write_all(format!("{cmd}\n").as_bytes())?;
    let mut line = String::new();
    let mut r = BufReader::new(s);
    while r.read_line(&mut line)? > 0 {
        if !line.lines().last().unwrap_or("").starts_with("NOTE ") {
            break;
        }
    }
    if line.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the mount process closed the connection",
        ));
    }
    Ok(line.trim_end().to_string())
}
