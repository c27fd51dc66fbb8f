//! The end of a mount: `flowfs unmount` (over the control socket) and SIGTERM/SIGINT
//! flush and unmount; `flowfs unmount --force` and a second signal end the mount without
//! waiting for uploads, keeping what is not uploaded in the journal.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use flowfs_client::retry::Retrying;
use flowfs_fs::Fs;
use tokio::sync::watch;

use crate::mountinfo::mount_type;

/// What the parts that end a mount share: the control socket's threads, the signal
/// task and the session loop.
pub struct Ending {
    pub fs: Arc<Fs>,
    pub rt: tokio::runtime::Handle,
    pub dir: PathBuf,
    /// `s3://BUCKET[/PREFIX]` as given to `flowfs mount`.
    pub source: String,
    state: Mutex<State>,
    cv: Condvar,
    /// Set by a forced unmount: a flush under way stops waiting for uploads.
    force: watch::Sender<bool>,
    /// The client's retry layer, whose counters `flowfs status` reports.
    pub retries: Option<Arc<Retrying>>,
    /// When the mount started (a usage report's `mount_secs`).
    pub started: std::time::Instant,
}

#[derive(Default)]
struct State {
    /// The session has ended.
    ended: bool,
    /// `flowfs unmount` requests not answered yet.
    answering: u32,
    /// An unmount (flush, then umount) is under way.
    unmounting: bool,
    /// How the last unmount attempt ended, for requests that joined it.
    outcome: Option<Result<(), String>>,
}

impl Ending {
    pub fn new(fs: Arc<Fs>, rt: tokio::runtime::Handle, dir: &Path, source: &str) -> Ending {
        Ending {
            fs,
            rt,
            dir: dir.to_path_buf(),
            source: source.to_string(),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            force: watch::channel(false).0,
            retries: None,
            started: std::time::Instant::now(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session loop has returned.
    pub fn finish(&self) {
        self.lock().ended = true;
        self.cv.notify_all();
    }

    /// Waits for the end of the session; whether it ended.
    pub fn wait(&self, timeout: Duration) -> bool {
        let g = self.lock();
        let (g, _) = self
            .cv
            .wait_timeout_while(g, timeout, |s| !s.ended)
            .unwrap_or_else(|e| e.into_inner());
        g.ended
    }

    pub fn answering(&self, delta: i32) {
        let mut g = self.lock();
        g.answering = g.answering.saturating_add_signed(delta);
        self.cv.notify_all();
    }

    /// The process must not exit before `flowfs unmount` has its answer: it would take
    /// the lost answer for a mount that died.
    pub fn wait_answered(&self, timeout: Duration) {
        let g = self.lock();
        let _ = self.cv.wait_timeout_while(g, timeout, |s| s.answering > 0);
    }

    pub fn unmounting(&self) -> bool {
        self.lock().unmounting
    }

    /// How the last unmount ended, if one was tried (the process's exit status).
    pub fn outcome(&self) -> Option<Result<(), String>> {
        self.lock().outcome.clone()
    }

    /// Ends the mount. Unless `force`, every staged file is uploaded first (bounded by
    /// --unmount-timeout). A request that comes while another unmount runs joins it, and
    /// a forced one makes that unmount stop waiting for uploads.
    pub fn end(&self, force: bool) -> Result<(), String> {
        if force {
            self.force.send_replace(true);
        }
        let joined = {
            let mut g = self.lock();
            let joined = g.unmounting;
            g.unmounting = true;
            joined
        };
        if joined {
            let g = self.lock();
            let g = self
                .cv
                .wait_while(g, |s| s.unmounting)
                .unwrap_or_else(|e| e.into_inner());
            return g.outcome.clone().unwrap_or(Ok(()));
        }
        let r = self.unmount_now();
        let mut g = self.lock();
        g.unmounting = false;
        g.outcome = Some(r.clone());
        if r.is_err() && mount_type(&self.dir).is_some() {
            // Still mounted (busy): a later plain unmount flushes again.
            self.force.send_replace(false);
        }
        self.cv.notify_all();
        r
    }

    /// Flushes (unless forced) and unmounts; the session loop then ends by itself. Files
    /// not uploaded stay in the journal and are named in the error.
    fn unmount_now(&self) -> Result<(), String> {
        let mut forced = self.force.subscribe();
        let flushed = if *forced.borrow() {
            None
        } else {
            self.rt.block_on(async {
                tokio::select! {
                    failed = self.fs.flush_all() => Some(failed),
                    r = forced.wait_for(|f| *f) => match r {
                        Ok(_) => None,
                        // Cannot happen (the sender lives in self); then flush anyway.
                        Err(_) => Some(self.fs.flush_all().await),
                    },
                }
            })
        };
        let (failed, forced) = match flushed {
            Some(failed) => (failed, false),
            None => (self.fs.status().not_uploaded(), true),
        };
        umount(&self.dir)?;
        if failed.is_empty() {
            return Ok(());
        }
        let staging = self.fs.config().cache_dir.join("staging");
        Err(if forced {
            format!(
                "unmounted without waiting for uploads; {} file(s) not uploaded are kept in the journal under {} and the next mount with this cache dir uploads them: {}",
                failed.len(),
                staging.display(),
                failed.join("; ")
            )
        } else {
            format!(
                "unmounted, but {} file(s) could not be uploaded; they are kept in the journal under {} and the next mount with this cache dir uploads them: {}",
                failed.len(),
                staging.display(),
                failed.join("; ")
            )
        })
    }
}

/// How long an unmount tries again while the mount is busy. A path walk in flight holds
/// the mount for as long as it waits on this process (a `stat` of the mount point, or any
/// name below it, asked just as the unmount began); the test suite here saw a mount outlive
/// its killed `flowfs run` that way (test_shared_cache.py, 3 of about 25 runs). An open
/// file or a working directory in the mount does not pass by itself: it is reported.
const BUSY_RETRY: Duration = Duration::from_secs(2);
const BUSY_PAUSE: Duration = Duration::from_millis(20);

/// One try at unmounting.
enum Try {
    Done,
    Busy,
    Failed(String),
}

fn umount(dir: &Path) -> Result<(), String> {
    let c =
        std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    let deadline = std::time::Instant::now() + BUSY_RETRY;
    loop {
        match umount_once(dir, &c) {
            Try::Done => return Ok(()),
            Try::Failed(e) => return Err(e),
            Try::Busy if std::time::Instant::now() >= deadline => {
                return Err(format!(
                    "{} is busy: a process still uses it (see `fuser -m {}`)",
                    dir.display(),
                    dir.display()
                ))
            }
            Try::Busy => std::thread::sleep(BUSY_PAUSE),
        }
    }
}

fn umount_once(dir: &Path, c: &std::ffi::CStr) -> Try {
    // SAFETY: umount2 on a path we own.
    if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
        return Try::Done;
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EBUSY) => Try::Busy,
        // Not root: the setuid helper unmounts the user's own FUSE mount, and says when
        // it is busy in the same words as umount2's error.
        Some(libc::EPERM) => {
            let out = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg(dir)
                .stdin(std::process::Stdio::null())
                .output();
            match out {
                Ok(o) if o.status.success() => Try::Done,
                Ok(o) => {
                    let why = String::from_utf8_lossy(&o.stderr).trim().to_string();
                    if why.contains("busy") {
                        Try::Busy
                    } else {
                        Try::Failed(format!("fusermount3 -u {} failed: {why}", dir.display()))
                    }
                }
                Err(e) => Try::Failed(format!("cannot run fusermount3: {e}")),
            }
        }
        _ => Try::Failed(format!("cannot unmount {}: {err}", dir.display())),
    }
}

/// SIGTERM or SIGINT unmounts as `flowfs unmount` does; a second one while that unmount
/// waits for uploads ends the mount at once, as `flowfs unmount --force`.
pub fn spawn_signal_task(ending: Arc<Ending>) {
    let rt = ending.rt.clone();
    rt.spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return;
        };
        let mut running: Option<tokio::task::JoinHandle<Result<(), String>>> = None;
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
                r = async { running.as_mut().expect("guarded").await }, if running.is_some() => {
                    running = None;
                    let failed = match r {
                        Ok(Ok(())) => None,
                        Ok(Err(e)) => Some(e),
                        Err(e) => Some(e.to_string()),
                    };
                    match failed {
                        // Unmounted: the session's end logs the outcome (logging it here
                        // raced the runtime's shutdown and was sometimes lost).
                        None => break,
                        Some(_) if mount_type(&ending.dir).is_none() => break,
                        // Still mounted (busy): the mount goes on, so say why here.
                        Some(e) => tracing::error!("{e}"),
                    }
                    continue;
                }
            }
            if running.is_none() && mount_type(&ending.dir).is_none() {
                // Already unmounted (`flowfs run` died right after its unmount ended).
                break;
            }
            if running.is_some() {
                tracing::warn!("second signal: ending the mount without waiting for uploads");
                ending.force.send_replace(true);
                continue;
            }
            let e = ending.clone();
            running = Some(tokio::task::spawn_blocking(move || e.end(false)));
        }
    });
}
