//! Azurite's blob service on 127.0.0.1 for one test process, as
//! tests/integration/emulators.py starts it: the port explicit, `--disableTelemetry` (it
//! phones home without it), data in a private temp dir; ready when it answers HTTP. It is
//! installed pinned by scripts/setup.sh under ~/.cache/flowfs-emul (FLOWFS_EMUL_DIR).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use flowfs_client::azure::{AzureClient, AzureConfig};

/// Azurite's documented development account (public by design, the same everywhere).
pub const ACCOUNT: &str = "devstoreaccount1";
pub const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

pub struct Azurite {
    child: Option<Child>,
    /// The blob endpoint, the account's path included.
    pub endpoint: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// The `azurite-blob` scripts/setup.sh installed.
pub fn find_azurite() -> Option<PathBuf> {
    let p = crate::group::emul_dir()?.join("azurite/node_modules/.bin/azurite-blob");
    p.is_file().then_some(p)
}

/// Azurite, or `None` when `FLOWFS_CONFORMANCE_AZURE=0` says to skip `what` on purpose.
/// Without it installed the test fails: CI installs it.
pub fn azurite_or_skip(what: &str) -> Option<PathBuf> {
    if std::env::var("FLOWFS_CONFORMANCE_AZURE").as_deref() == Ok("0") {
        eprintln!("FLOWFS_CONFORMANCE_AZURE=0: {what} is skipped on purpose");
        return None;
    }
    Some(find_azurite().unwrap_or_else(|| {
        panic!("{what} needs Azurite: run `bash scripts/setup.sh` (or set FLOWFS_CONFORMANCE_AZURE=0 to skip)")
    }))
}

impl Azurite {
    pub fn start(bin: &std::path::Path) -> Azurite {
        let dir = tempfile::Builder::new()
            .prefix("flowfs-azurite-")
            .tempdir()
            .expect("temp dir");
        let mut last = String::new();
        for attempt in 0..3 {
            let port = crate::weed::free_port();
            let log = dir.path().join(format!("azurite-{attempt}.log"));
            let out = std::fs::File::create(&log).expect("log");
            let mut cmd = Command::new(bin);
            cmd.args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
                .arg("--location")
                .arg(dir.path().join("data"))
                .args(["--disableTelemetry", "--skipApiVersionCheck", "--silent"])
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(out.try_clone().expect("log"))
                .stderr(out);
            for (k, _) in std::env::vars_os() {
                if k.to_string_lossy().to_lowercase().ends_with("_proxy") {
                    cmd.env_remove(&k);
                }
            }
            let mut child = crate::group::spawn(&mut cmd, "azurite-blob");
            let probe = format!("/{ACCOUNT}?comp=list");
            match crate::group::wait_http(&mut child, port, &probe, "azurite") {
                Ok(()) => {
                    return Azurite {
                        child: Some(child),
                        endpoint: format!("http://127.0.0.1:{port}/{ACCOUNT}"),
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
        panic!("Azurite did not start: {last}");
    }

    /// The connection string of the development account here.
    pub fn connection_string(&self) -> String {
        format!(
            "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};BlobEndpoint={};",
            self.endpoint
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
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            crate::group::stop(c);
        }
    }
}
