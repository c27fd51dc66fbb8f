//! Daemonizing `flowfs mount`: the process forks; the child serves the mount in a new
//! session with its standard descriptors on /dev/null, and the parent waits on a pipe until
//! the child says the mount is ready (`OK`) or why not (`ERR <line>`).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};

use anyhow::{bail, Result};

/// Where a daemon tells the waiting parent that the mount is ready, or why not.
pub struct Ready(Option<File>);

impl Ready {
    /// Nobody waits: a mount in the foreground.
    pub fn nobody() -> Ready {
        Ready(None)
    }

    /// Tells the waiting parent, once; later messages go nowhere.
    pub fn send(&mut self, msg: &str) {
        if let Some(mut f) = self.0.take() {
            let _ = f.write_all(msg.as_bytes());
        }
    }
}

/// Forks: the child runs `serve` with the pipe's writing end and exits with its outcome;
/// the parent returns what the child sent (`OK`, or the error of `ERR <line>`).
/// `tied`: the child gets SIGTERM (an unmount, as a batch system's stop) when this
/// process dies, even by SIGKILL (`flowfs run`: its task's mount must not outlive it).
pub fn spawn(tied: bool, serve: impl FnOnce(Ready) -> Result<()>) -> Result<()> {
    let mut fds = [0i32; 2];
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: plain syscalls; no other thread exists yet, so fork is safe.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            bail!("pipe: {}", std::io::Error::last_os_error());
        }
        match libc::fork() {
            -1 => bail!("fork: {}", std::io::Error::last_os_error()),
            0 => {
                libc::close(fds[0]);
                libc::setsid();
                if tied {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    if libc::getppid() != parent {
                        // It died before the signal was asked for: nothing mounted yet.
                        libc::_exit(1);
                    }
                }
                detach_stdio();
                let ready = Ready(Some(File::from(OwnedFd::from_raw_fd(fds[1]))));
                let code = match serve(ready) {
                    Ok(()) => 0,
                    Err(e) => {
                        tracing::error!("{e:#}");
                        1
                    }
                };
                std::process::exit(code);
            }
            _ => {
                libc::close(fds[1]);
                let mut answer = String::new();
                let _ = File::from(OwnedFd::from_raw_fd(fds[0])).read_to_string(&mut answer);
                match answer.strip_prefix("OK") {
                    Some(_) => Ok(()),
                    None if answer.is_empty() => {
                        bail!("the mount process exited before the mount was ready")
                    }
                    None => bail!("{}", answer.trim_start_matches("ERR ").trim()),
                }
            }
        }
    }
}

/// A daemon must not keep the caller's terminal or pipes open.
fn detach_stdio() {
    if let Ok(null) = OpenOptions::new().read(true).write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        // SAFETY: dup2 onto the standard descriptors of this process.
        unsafe {
            for fd in 0..3 {
                libc::dup2(null.as_raw_fd(), fd);
            }
        }
    }
}
