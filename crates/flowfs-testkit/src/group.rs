//! A server process in a group of its own: started so that it dies with the test process
//! (PR_SET_PDEATHSIG), stopped by its group (SIGTERM, SIGKILL after 20 s), reaped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Starts `cmd` as the leader of a new process group that gets SIGTERM when this process
/// dies; `what` names it in the panic when it cannot start.
pub(crate) fn spawn(cmd: &mut Command, what: &str) -> Child {
    cmd.process_group(0);
    // SAFETY: prctl is async-signal-safe; the server dies with this process.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"))
}

/// SIGTERM to the process group, SIGKILL after 20 s, then reap.
pub(crate) fn stop(mut child: Child) {
    let pgid = child.id() as libc::pid_t;
    // SAFETY: kill(2) on the process group `spawn` created.
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The leader may be gone while others of its group linger.
    // SAFETY: as above.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let _ = child.wait();
}

/// Waits (60 s at most) until `child` answers `GET path` on `port` with an HTTP status
/// line; an error if it exits or stays silent.
pub(crate) fn wait_http(
    child: &mut Child,
    port: u16,
    path: &str,
    what: &str,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::from("no answer yet");
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{what} exited early: {status}"));
        }
        match answers(port, path) {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("{what} not answering on port {port}: {last}"))
}

fn answers(port: u16, path: &str) -> Result<(), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok();
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 12];
    s.read_exact(&mut buf).map_err(|e| e.to_string())?;
    match buf.starts_with(b"HTTP/1.1 ") {
        true => Ok(()),
        false => Err(format!("not HTTP: {:?}", String::from_utf8_lossy(&buf))),
    }
}

/// Where scripts/setup.sh installs the emulators: FLOWFS_EMUL_DIR, else
/// ~/.cache/flowfs-emul.
pub(crate) fn emul_dir() -> Option<std::path::PathBuf> {
    std::env::var_os("FLOWFS_EMUL_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache/flowfs-emul"))
        })
}
