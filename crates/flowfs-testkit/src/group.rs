//! A server process in a group of its own: started so that it dies with the test process
//! (PR_SET_PDEATHSIG), stopped by its group (SIGTERM, SIGKILL after 20 s), reaped.

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
