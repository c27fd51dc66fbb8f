//! Azurite's blob service on 127.0.0.1 for one test process, as
//! tests/integration/emulators.py starts it: the port explicit, `--disableTelemetry` (it
//! phones home without it), data in a private temp dir; ready when it answers HTTP. It is
//! installed pinned by scripts/setup.sh under ~/.cache/flowfs-emul (FLOWFS_EMUL_DIR).

use std::process::Command;

use flowfs_client::azure::{AzureClient, AzureConfig};

use crate::emulator::{installed_or_skip, Emulator};

/// Azurite's documented development account (public by design, the same everywhere).
pub const ACCOUNT: &str = "devstoreaccount1";
pub const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Azurite's blob service; its endpoint is the account's (its path included).
pub struct Azurite(Emulator);

impl Azurite {
    /// Azurite started, or `None` when `FLOWFS_CONFORMANCE_AZURE=0` says to skip `what` on
    /// purpose.
    pub fn start_or_skip(what: &str) -> Option<Azurite> {
        let under = "azurite/node_modules/.bin/azurite-blob";
        let bin = installed_or_skip("Azurite", "FLOWFS_CONFORMANCE_AZURE", what, under)?;
        let probe = format!("/{ACCOUNT}?comp=list");
        let server = Emulator::start("azurite", &probe, &format!("/{ACCOUNT}"), |port, dir| {
            let mut cmd = Command::new(&bin);
            cmd.args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
                .arg("--location")
                .arg(dir.join("data"))
                .args(["--disableTelemetry", "--skipApiVersionCheck", "--silent"]);
            for (k, _) in std::env::vars_os() {
                if k.to_string_lossy().to_lowercase().ends_with("_proxy") {
                    cmd.env_remove(&k);
                }
            }
            cmd
        });
        Some(Azurite(server))
    }

    /// The connection string of the development account here.
    pub fn connection_string(&self) -> String {
        format!(
            "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};BlobEndpoint={};",
            self.0.endpoint
        )
    }

    /// The product's client of `container` (AZURE_STORAGE_CONNECTION_STRING must name
    /// this server: `use_connection_string`).
    pub fn client(&self, container: &str) -> AzureClient {
        AzureClient::new(&AzureConfig {
            metrics: Default::default(),
            container: container.to_string(),
            account: None,
            endpoint_url: None,
        })
        .expect("Azure client")
    }

    /// Points AZURE_STORAGE_CONNECTION_STRING at this server, and no other Azure variable
    /// is left set. Call on one thread, before any other reads the environment.
    pub fn use_connection_string(&self) {
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("AZURE_") {
                // SAFETY: the caller's contract: one thread, before others start.
                unsafe { std::env::remove_var(&k) };
            }
        }
        // SAFETY: as above.
        unsafe { std::env::set_var("AZURE_STORAGE_CONNECTION_STRING", self.connection_string()) };
    }

    pub fn log_tail(&self) -> String {
        self.0.log_tail()
    }
}
