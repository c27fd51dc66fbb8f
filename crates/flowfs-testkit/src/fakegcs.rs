//! fake-gcs-server (v1.54.0, the GCS JSON API) on 127.0.0.1 for one test process, as
//! tests/integration/emulators.py starts it: the port explicit, the memory backend (the
//! filesystem one drops `dir/` markers from listings), nothing phoning home (it has no
//! telemetry); ready when it answers HTTP. Installed pinned by scripts/setup.sh under
//! ~/.cache/flowfs-emul (FLOWFS_EMUL_DIR).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use flowfs_client::gcs::{GcsClient, GcsConfig};

pub struct FakeGcs {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// The `fake-gcs-server` scripts/setup.sh installed.
pub fn find_fake_gcs() -> Option<PathBuf> {
    let p = crate::group::emul_dir()?.join("bin/fake-gcs-server");
    p.is_file().then_some(p)
}

/// fake-gcs-server, or `None` when `FLOWFS_CONFORMANCE_GCS=0` says to skip `what` on
/// purpose. Without it installed the test fails: CI installs it.
pub fn fake_gcs_or_skip(what: &str) -> Option<PathBuf> {
    if std::env::var("FLOWFS_CONFORMANCE_GCS").as_deref() == Ok("0") {
        eprintln!("FLOWFS_CONFORMANCE_GCS=0: {what} is skipped on purpose");
        return None;
    }
    Some(find_fake_gcs().unwrap_or_else(|| {
        panic!("{what} needs fake-gcs-server: run `bash scripts/setup.sh` (or set FLOWFS_CONFORMANCE_GCS=0 to skip)")
    }))
}

impl FakeGcs {
    pub fn start(bin: &std::path::Path) -> FakeGcs {
        let dir = tempfile::Builder::new()
            .prefix("flowfs-fakegcs-")
            .tempdir()
            .expect("temp dir");
        let mut last = String::new();
        for attempt in 0..3 {
            let port = crate::weed::free_port();
            let endpoint = format!("http://127.0.0.1:{port}");
            let log = dir.path().join(format!("fake-gcs-{attempt}.log"));
            let out = std::fs::File::create(&log).expect("log");
            let mut cmd = Command::new(bin);
            cmd.args([
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                &port.to_string(),
            ])
            .args(["-backend", "memory", "-log-level", "warn"])
            .args(["-public-host", &format!("127.0.0.1:{port}")])
            .args(["-external-url", &endpoint])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out);
            let mut child = crate::group::spawn(&mut cmd, "fake-gcs-server");
            let probe = "/storage/v1/b?project=test";
            match crate::group::wait_http(&mut child, port, probe, "fake-gcs-server") {
                Ok(()) => {
                    return FakeGcs {
                        child: Some(child),
                        endpoint,
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
        panic!("fake-gcs-server did not start: {last}");
    }

    /// The product's client of `bucket` on this server (unsigned, as an emulator is).
    pub fn client(&self, bucket: &str) -> GcsClient {
        GcsClient::new(&GcsConfig {
            metrics: Default::default(),
            bucket: bucket.to_string(),
            endpoint_url: Some(self.endpoint.clone()),
            anonymous: true,
        })
        .expect("GCS client")
    }

    pub fn log_tail(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for FakeGcs {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            crate::group::stop(c);
        }
    }
}
