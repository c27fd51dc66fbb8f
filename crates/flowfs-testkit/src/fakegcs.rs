//! fake-gcs-server (v1.54.0, the GCS JSON API) on 127.0.0.1 for one test process, as
//! tests/integration/emulators.py starts it: the port explicit, the memory backend (the
//! filesystem one drops `dir/` markers from listings), nothing phoning home (it has no
//! telemetry); ready when it answers HTTP. Installed pinned by scripts/setup.sh under
//! ~/.cache/flowfs-emul (FLOWFS_EMUL_DIR).

use std::process::Command;

use flowfs_client::gcs::{GcsClient, GcsConfig};

use crate::emulator::{installed_or_skip, Emulator};

/// fake-gcs-server; its endpoint is `http://127.0.0.1:PORT`.
pub struct FakeGcs(Emulator);

impl FakeGcs {
    /// fake-gcs-server started, or `None` when `FLOWFS_CONFORMANCE_GCS=0` says to skip
    /// `what` on purpose.
    pub fn start_or_skip(what: &str) -> Option<FakeGcs> {
        let name = "fake-gcs-server";
        let bin = installed_or_skip(name, "FLOWFS_CONFORMANCE_GCS", what, "bin/fake-gcs-server")?;
        let server = Emulator::start(name, "/storage/v1/b?project=test", "", |port, _| {
            let mut cmd = Command::new(&bin);
            cmd.args(["-scheme", "http", "-host", "127.0.0.1"])
                .args(["-port", &port.to_string()])
                .args(["-backend", "memory", "-log-level", "warn"])
                .args(["-public-host", &format!("127.0.0.1:{port}")])
                .args(["-external-url", &format!("http://127.0.0.1:{port}")]);
            cmd
        });
        Some(FakeGcs(server))
    }

    /// The product's client of `bucket` on this server (unsigned, as an emulator is).
    pub fn client(&self, bucket: &str) -> GcsClient {
        GcsClient::new(&GcsConfig {
            metrics: Default::default(),
            bucket: bucket.to_string(),
            endpoint_url: Some(self.0.endpoint.clone()),
            anonymous: true,
        })
        .expect("GCS client")
    }

    pub fn log_tail(&self) -> String {
        self.0.log_tail()
    }
}
