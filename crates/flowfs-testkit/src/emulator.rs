//! What Azurite and fake-gcs-server are started and stopped by, as
//! tests/integration/emulators.py starts them: installed pinned by scripts/setup.sh under
//! ~/.cache/flowfs-emul (FLOWFS_EMUL_DIR), run on an explicit port of 127.0.0.1 in a
//! private temp dir, ready when they answer HTTP, stopped by their process group.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// An emulator's process, stopped when dropped.
pub(crate) struct Emulator {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT` and the path `Emulator::start` was given.
    pub(crate) endpoint: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// The emulator scripts/setup.sh installed at `under` in its directory, or `None` when the
/// variable `skip` is `0` (skipping `what` on purpose). Without it installed the test
/// fails: CI installs it.
pub(crate) fn installed_or_skip(
    name: &str,
    skip: &str,
    what: &str,
    under: &str,
) -> Option<PathBuf> {
    if std::env::var(skip).as_deref() == Ok("0") {
        eprintln!("{skip}=0: {what} is skipped on purpose");
        return None;
    }
    let found = crate::group::emul_dir().map(|d| d.join(under));
    Some(found.filter(|p| p.is_file()).unwrap_or_else(|| {
        panic!("{what} needs {name}: run `bash scripts/setup.sh` (or set {skip}=0 to skip)")
    }))
}

impl Emulator {
    /// Starts `command(port, dir)` (its own arguments; the directory, stdio and log are
    /// set here) until it answers `GET probe`: three tries with fresh ports, as a port
    /// picked free can be taken before the emulator binds it. `path` ends its endpoint.
    pub(crate) fn start(
        name: &str,
        probe: &str,
        path: &str,
        command: impl Fn(u16, &Path) -> Command,
    ) -> Emulator {
        let dir = tempfile::Builder::new()
            .prefix(&format!("flowfs-{name}-"))
            .tempdir()
            .expect("temp dir");
        let mut last = String::new();
        for attempt in 0..3 {
            let port = crate::weed::free_port();
            let log = dir.path().join(format!("{name}-{attempt}.log"));
            let out = std::fs::File::create(&log).expect("log");
            let mut cmd = command(port, dir.path());
            cmd.current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(out.try_clone().expect("log"))
                .stderr(out);
            let mut child = crate::group::spawn(&mut cmd, name);
            match crate::group::wait_http(&mut child, port, probe, name) {
                Ok(()) => {
                    return Emulator {
                        child: Some(child),
                        endpoint: format!("http://127.0.0.1:{port}{path}"),
                        log,
                        _dir: dir,
                    }
                }
                Err(e) => {
                    crate::group::stop(child);
                    last = format!("{e}\n{}", std::fs::read_to_string(&log).unwrap_or_default());
                }
            }
        }
        panic!("{name} did not start: {last}");
    }

    pub(crate) fn log_tail(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            crate::group::stop(c);
        }
    }
}
