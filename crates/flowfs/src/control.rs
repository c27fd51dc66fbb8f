//! The control socket of a running mount: `flowfs unmount` asks the mount process to
//! flush and unmount (or, with `--force`, to unmount without waiting for uploads) and
//! waits for its answer; `flowfs status` asks what is not durable yet. One socket per
//! mount point, in a directory private to the user; only that user and root are answered.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::report;
use crate::stop::Ending;
use crate::usage::Usage;

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

/// Listens on the control socket of `mountpoint`, in place of a socket nobody answers on
/// (left by a dead mount); returns the listener and the socket's path.
pub fn listen(mountpoint: &Path) -> anyhow::Result<(UnixListener, PathBuf)> {
    use anyhow::Context;
    ensure_runtime_dir().context("cannot create the control socket directory")?;
    let sock = socket_path(mountpoint);
    let listener = bind(&runtime_dir(), &sock)
        .with_context(|| format!("control socket {}", sock.display()))?;
    Ok((listener, sock))
}

/// Binds `sock` in `dir` after removing the dead sockets there. The socket listens before
/// its name appears: it is bound under a name no scan looks at and renamed into place.
/// Bound in place, another mount starting at the same moment could connect between its
/// bind and its listen, be refused and remove it as dead: that mount's `flowfs unmount`
/// then found nobody to ask (test_shared_cache, 1 in ~10: "the flowfs process ... was
/// gone").
fn bind(dir: &Path, sock: &Path) -> io::Result<UnixListener> {
    if sock.exists() && UnixStream::connect(sock).is_err() {
        let _ = std::fs::remove_file(sock);
    }
    remove_dead_sockets(dir);
    let tmp = sock.with_extension(format!("{}.new", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp)?;
    let taken = sock.exists() && UnixStream::connect(sock).is_ok();
    let placed = if taken {
        Err(io::Error::from(io::ErrorKind::AddrInUse))
    } else {
        std::fs::rename(&tmp, sock)
    };
    if placed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    placed.map(|()| listener)
}

/// Removes the sockets of mounts that died without removing theirs (killed with -9):
/// nothing listens on them any more (`ECONNREFUSED`). One `connect` per socket in the
/// directory, at a mount's start; a live mount answers the empty request with an error
/// line and carries on.
fn remove_dead_sockets(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_some_and(|x| x == "new") {
            remove_if_old(&path);
            continue;
        }
        if path.extension().is_none_or(|x| x != "sock") {
            continue;
        }
        if let Err(err) = UnixStream::connect(&path) {
            if err.raw_os_error() == Some(libc::ECONNREFUSED) {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

/// A socket left under its temporary name by a mount killed as it started.
fn remove_if_old(path: &Path) {
    let old = std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|a| a > Duration::from_secs(600)));
    if old {
        let _ = std::fs::remove_file(path);
    }
}

/// Sends one command and returns the answer: `NOTE` and `USAGE` lines, then `OK` or
/// `ERR why`.
pub fn request(mountpoint: &Path, cmd: &str, timeout: Option<Duration>) -> io::Result<String> {
    let mut s = UnixStream::connect(socket_path(mountpoint))?;
    s.set_read_timeout(timeout)?;
    s.write_all(format!("{cmd}\n").as_bytes())?;
    let mut line = String::new();
    let mut r = BufReader::new(s);
    while r.read_line(&mut line)? > 0 {
        let last = line.lines().last().unwrap_or("");
        if !last.starts_with("NOTE ") && !last.starts_with("USAGE ") {
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

/// Asks the mount at `dir` a command answered by `OK <json>` (`status`, `usage`) and reads
/// the JSON; the error says why in one line (nobody answers and why, the mount's `ERR`, or
/// an answer that is not the JSON asked for).
pub fn ask_json<T: serde::de::DeserializeOwned>(
    dir: &Path,
    cmd: &str,
    timeout: Duration,
) -> Result<T, String> {
    let a = request(dir, cmd, Some(timeout)).map_err(|e| why_no_answer(dir, &e))?;
    let j = (a.strip_prefix("OK ")).ok_or_else(|| a.trim_start_matches("ERR ").to_string())?;
    serde_json::from_str(j).map_err(|e| e.to_string())
}

/// Answers the control socket of a mount, one thread per connection, so that `status`
/// and `unmount --force` are answered while an unmount waits for uploads.
pub fn serve(listener: UnixListener, ending: Arc<Ending>) -> io::Result<()> {
    // SAFETY: getuid cannot fail.
    let owner = unsafe { libc::getuid() };
    std::thread::Builder::new()
        .name("flowfs-control".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let ending = ending.clone();
                let spawned = std::thread::Builder::new()
                    .name("flowfs-control".into())
                    .spawn(move || answer(conn, &ending, owner));
                if let Err(e) = spawned {
                    tracing::error!("cannot answer a control request: {e}");
                }
            }
        })?;
    Ok(())
}

fn answer(mut conn: UnixStream, ending: &Ending, owner: u32) {
    let mut line = String::new();
    let _ = BufReader::new(&conn).read_line(&mut line);
    let cmd = line.trim();
    let peer = peer_uid(&conn);
    if !may_control(peer, owner) {
        let who = peer.map_or_else(|| "an unknown user".to_string(), user_name);
        tracing::warn!("refused control request {cmd:?} from {who}");
        let msg = format!(
            "ERR this mount belongs to {}; {who} may not control it\n",
            user_name(owner)
        );
        let _ = conn.write_all(msg.as_bytes());
        return;
    }
    let unmount = cmd.split_whitespace().next() == Some("unmount");
    if unmount {
        ending.answering(1);
    }
    let answer = match cmd {
        "unmount" | "unmount --force" | "unmount --usage" | "unmount --force --usage" => {
            unmount_answer(ending, cmd.contains("--force"), cmd.ends_with("--usage"))
        }
        "usage" => match serde_json::to_string(&Usage::of(ending)) {
            Ok(j) => format!("OK {j}"),
            Err(e) => format!("ERR {e}"),
        },
        "status" => match serde_json::to_string(&report::report(ending)) {
            Ok(j) => format!("OK {j}"),
            Err(e) => format!("ERR {e}"),
        },
        "ping" => "OK".to_string(),
        other => format!("ERR unknown command {other:?}"),
    };
    let _ = conn.write_all(format!("{answer}\n").as_bytes());
    if unmount {
        ending.answering(-1);
    }
}

/// Ends the mount and says how: `NOTE` lines for recovered files, with `usage` a
/// `USAGE` line (what the mount did, its uploads at the unmount included), then `OK` or
/// `ERR`.
fn unmount_answer(ending: &Ending, force: bool, usage: bool) -> String {
    let notes: String = ending
        .fs
        .recovered()
        .iter()
        .map(|k| {
            format!("NOTE recovered {k} from the journal of an earlier mount and uploaded it\n")
        })
        .collect();
    let r = ending.end(force);
    // Once unmounted, the answer waits for the session to end.
    let gone =
        crate::mountinfo::mount_type(&ending.dir).is_none() && ending.wait(Duration::from_secs(60));
    let last = match r {
        Ok(()) if gone => "OK".to_string(),
        Ok(()) => "ERR the file system did not stop within 60 s".to_string(),
        Err(e) => format!("ERR {e}"),
    };
    let usage = match usage.then(|| serde_json::to_string(&Usage::settled(ending))) {
        Some(Ok(j)) => format!("USAGE {j}\n"),
        _ => String::new(),
    };
    format!("{notes}{usage}{last}")
}

/// The user at the other end of a control connection (SO_PEERCRED).
pub fn peer_uid(s: &UnixStream) -> Option<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt fills `cred` of the size given.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(cred.uid)
}

/// Who may control a mount: the user who mounted it, and root. The socket's directory is
/// private already; this holds even when XDG_RUNTIME_DIR points somewhere shared.
pub fn may_control(peer: Option<u32>, owner: u32) -> bool {
    peer.is_some_and(|p| p == owner || p == 0)
}

/// Why nobody answered on the control socket of `dir`, decided from the mount table.
#[derive(Debug, PartialEq, Eq)]
pub enum NoAnswer {
    NotMounted,
    /// Another kind of mount is there.
    Foreign(String),
    /// A flowfs mount of another user: its socket is in that user's directory, and its
    /// process may well be alive. Never removed from here.
    OtherUser(u32),
    /// A flowfs mount of this user whose process does not answer: it died.
    Dead,
}

/// `fstype` and `owner` (the `user_id=` of a FUSE mount) of what is mounted at the
/// directory, for a caller running as `me`.
pub fn no_answer(fstype: Option<&str>, owner: Option<u32>, me: u32) -> NoAnswer {
    match fstype {
        None => NoAnswer::NotMounted,
        Some(t) if t != "fuse.flowfs" && t != "fuse" => NoAnswer::Foreign(t.to_string()),
        Some(_) => match owner {
            Some(o) if o != me => NoAnswer::OtherUser(o),
            _ => NoAnswer::Dead,
        },
    }
}

/// A user's name for messages, or their uid.
pub fn user_name(uid: u32) -> String {
    // SAFETY: getpwuid returns static storage or null; read at once, one thread here.
    unsafe {
        let pw = libc::getpwuid(uid);
        if pw.is_null() || (*pw).pw_name.is_null() {
            return format!("uid {uid}");
        }
        let name = std::ffi::CStr::from_ptr((*pw).pw_name).to_string_lossy();
        format!("{name} (uid {uid})")
    }
}

/// One line for a failed request to `dir`'s socket (`flowfs status`).
pub fn why_no_answer(dir: &Path, e: &io::Error) -> String {
    let (t, owner) = crate::mountinfo::mount_entry(dir).unzip();
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    match no_answer(t.as_deref(), owner.flatten(), me) {
        NoAnswer::NotMounted => format!("{} is not mounted", dir.display()),
        NoAnswer::Foreign(t) => format!("{} is a {t} mount, not a flowfs mount", dir.display()),
        NoAnswer::OtherUser(o) => format!(
            "{} is a flowfs mount of {}; ask as that user",
            dir.display(),
            user_name(o)
        ),
        NoAnswer::Dead => format!("its process does not answer ({e}); it may have died"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mounts starting at once each remove the sockets nobody listens on: none may take
    /// another's, being bound, for a dead one.
    #[test]
    fn sockets_bound_at_once_are_never_removed_as_dead() {
        let dir = tempfile::tempdir().expect("tempdir");
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let dir = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    let mut kept = Vec::new();
                    for n in 0..100 {
                        let sock = dir.join(format!("{t}-{n}.sock"));
                        kept.push(bind(&dir, &sock).map_err(|e| e.to_string())?);
                    }
                    Ok::<_, String>(kept)
                })
            })
            .collect();
        let kept: Vec<_> = (threads.into_iter())
            .map(|t| t.join().expect("thread").expect("bound"))
            .collect();
        for t in 0..6 {
            for n in 0..100 {
                let sock = dir.path().join(format!("{t}-{n}.sock"));
                assert!(
                    UnixStream::connect(&sock).is_ok(),
                    "{} removed",
                    sock.display()
                );
            }
        }
        drop(kept);
    }

    #[test]
    fn only_the_owner_and_root_control_a_mount() {
        assert!(may_control(Some(1000), 1000));
        assert!(may_control(Some(0), 1000));
        assert!(!may_control(Some(1001), 1000));
        assert!(!may_control(None, 1000));
    }

    #[test]
    fn a_silent_socket_is_a_dead_mount_only_for_its_own_user() {
        use NoAnswer::*;
        assert_eq!(no_answer(None, None, 0), NotMounted);
        assert_eq!(no_answer(Some("ext4"), None, 0), Foreign("ext4".into()));
        assert_eq!(no_answer(Some("fuse.flowfs"), Some(1000), 1000), Dead);
        assert_eq!(no_answer(Some("fuse.flowfs"), None, 1000), Dead);
        // Root's socket is not where another user's mount listens: never "gone".
        assert_eq!(
            no_answer(Some("fuse.flowfs"), Some(1000), 0),
            OtherUser(1000)
        );
        assert_eq!(no_answer(Some("fuse"), Some(0), 1000), OtherUser(0));
    }

    #[test]
    fn peer_credentials_name_the_connecting_user() {
        let (a, _b) = UnixStream::pair().unwrap();
        // SAFETY: getuid cannot fail.
        assert_eq!(peer_uid(&a), Some(unsafe { libc::getuid() }));
    }

    /// A socket nobody listens on any more goes; a live one and other files stay.
    #[test]
    fn dead_sockets_are_removed_live_ones_kept() {
        let dir = std::env::temp_dir().join(format!("flowfs-ctl-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (dead, live, other) = (dir.join("a.sock"), dir.join("b.sock"), dir.join("c.txt"));
        drop(UnixListener::bind(&dead).unwrap()); // its process died: the file stays
        let _listening = UnixListener::bind(&live).unwrap();
        std::fs::write(&other, b"x").unwrap();
        remove_dead_sockets(&dir);
        let left = (dead.exists(), live.exists(), other.exists());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(left, (false, true, true));
    }
}
