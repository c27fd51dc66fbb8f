//! `flowfs mount`: checks, daemonizing, the FUSE session and the control socket.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use flowfs_client::retry::{RetryPolicy, Retrying};
use flowfs_client::s3::{S3Client, S3Config};
use flowfs_client::{ClientError, ObjectClient};
use flowfs_fs::{disk_space, Fs, FsConfig, FuseAdapter};

use crate::cli::{parse_endpoint, parse_min_free, parse_size, parse_source, MountArgs};
use crate::control::{self, NoAnswer};
use crate::stop::{spawn_signal_task, Ending};

/// Where a daemon tells the waiting parent that the mount is ready, or why not.
struct Ready(Option<File>);

impl Ready {
    fn send(&mut self, msg: &str) {
        if let Some(mut f) = self.0.take() {
            let _ = f.write_all(msg.as_bytes());
        }
    }
}

pub fn mount(args: MountArgs) -> Result<()> {
    let (bucket, prefix) = parse_source(&args.source).map_err(|e| anyhow!(e))?;
    check_endpoint(&args)?;
    let dir = check_mountpoint(&args.dir)?;
    if !Path::new("/dev/fuse").exists() {
        bail!(
            "/dev/fuse is missing: load the fuse module, or give the container --device /dev/fuse"
        );
    }
    let mut cfg = FsConfig::new(&bucket, &prefix, cache_dir(&args)?);
    cfg.cache_size = parse_size(&args.opts.cache_size).map_err(|e| anyhow!("--cache-size: {e}"))?;
    cfg.cache_min_free = parse_min_free(
        &args.opts.cache_min_free,
        // A file system that cannot be asked gets no floor.
        disk_space(&cfg.cache_dir).map_or(0, |d| d.total),
    )
    .map_err(|e| anyhow!("--cache-min-free: {e}"))?;
    cfg.part_size = parse_size(&args.opts.part_size).map_err(|e| anyhow!("--part-size: {e}"))?;
    if cfg.part_size < (5 << 20) || cfg.part_size > (5 << 30) {
        bail!("--part-size must be between 5M and 5G (the limits of S3 multipart uploads)");
    }
    cfg.max_readahead =
        parse_size(&args.opts.max_readahead).map_err(|e| anyhow!("--max-readahead: {e}"))?;
    if !(args.opts.metadata_ttl >= 0.0 && args.opts.metadata_ttl < 1e6) {
        bail!("--metadata-ttl must be a number of seconds");
    }
    cfg.metadata_ttl = Duration::from_secs_f64(args.opts.metadata_ttl);
    if !(args.opts.unmount_timeout > 0.0 && args.opts.unmount_timeout < 1e6) {
        bail!("--unmount-timeout must be a positive number of seconds");
    }
    cfg.unmount_timeout = Duration::from_secs_f64(args.opts.unmount_timeout);
    if !(args.opts.retry_budget >= 0.0 && args.opts.retry_budget < 1e6) {
        bail!(
            "--retry-budget must be a number of seconds from 0 (no retries), not {}",
            args.opts.retry_budget
        );
    }
    cfg.read_only = args.opts.read_only;
    cfg.completion_markers = args.opts.completion_markers.clone();
    cfg.max_gets = args.opts.max_concurrency.max(1);
    cfg.max_uploads = args.opts.max_upload_concurrency.max(1);
    cfg.file_mode = u16::from_str_radix(&args.opts.file_mode, 8)
        .map_err(|_| anyhow!("--file-mode must be octal, like 644"))?;
    cfg.dir_mode = u16::from_str_radix(&args.opts.dir_mode, 8)
        .map_err(|_| anyhow!("--dir-mode must be octal, like 755"))?;
    if args.opts.fuse_threads == 0 {
        bail!("--fuse-threads must be at least 1");
    }

    if args.opts.foreground {
        return serve(&args, cfg, &dir, Ready(None));
    }
    let mut fds = [0i32; 2];
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
                detach_stdio();
                let mut ready = Ready(Some(File::from(OwnedFd::from_raw_fd(fds[1]))));
                let code = match serve(&args, cfg, &dir, Ready(ready.0.take())) {
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

/// The endpoint, from the option or the environment, before anything touches the disk
/// or the network: a typo is named as such, not as a request that could not be sent.
fn check_endpoint(args: &MountArgs) -> Result<()> {
    if let Some(url) = &args.opts.endpoint_url {
        parse_endpoint(url).map_err(|e| anyhow!("--endpoint-url: {e}"))?;
    } else if let Some(url) = std::env::var("AWS_ENDPOINT_URL")
        .ok()
        .filter(|u| !u.is_empty())
    {
        parse_endpoint(&url).map_err(|e| anyhow!("AWS_ENDPOINT_URL: {e}"))?;
    }
    Ok(())
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

fn cache_dir(args: &MountArgs) -> Result<PathBuf> {
    let d = match &args.opts.cache_dir {
        Some(d) => d.clone(),
        None => match std::env::var_os("XDG_CACHE_HOME") {
            Some(x) if !x.is_empty() => PathBuf::from(x).join("flowfs"),
            // SAFETY: getuid cannot fail.
            _ => std::env::temp_dir().join(format!("flowfs-cache-{}", unsafe { libc::getuid() })),
        },
    };
    std::fs::create_dir_all(&d)
        .with_context(|| format!("cannot create cache dir {}", d.display()))?;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot set permissions of cache dir {}", d.display()))?;
    Ok(std::path::absolute(&d)?)
}

fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// File system type of the mount at exactly `dir`, if one is there.
pub fn mount_type(dir: &Path) -> Option<String> {
    mount_entry(dir).map(|(t, _)| t)
}

/// Type and, for a FUSE mount, owner (its `user_id=` option) of the mount at `dir`.
pub fn mount_entry(dir: &Path) -> Option<(String, Option<u32>)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = dir.to_string_lossy();
    info.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-")?;
        if f.len() <= sep + 1 || unescape_mountinfo(f.get(4)?) != want {
            return None;
        }
        let owner = f.get(sep + 3).and_then(|opts| {
            opts.split(',')
                .find_map(|o| o.strip_prefix("user_id=")?.parse().ok())
        });
        Some((f[sep + 1].to_string(), owner))
    })
}

fn check_mountpoint(dir: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(dir)?;
    if mount_type(&abs).is_some() {
        bail!("{} is already a mount point", abs.display());
    }
    let meta = std::fs::metadata(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => anyhow!("mount point {} does not exist", abs.display()),
        _ => anyhow!("mount point {}: {e}", abs.display()),
    })?;
    if !meta.is_dir() {
        bail!("mount point {} is not a directory", abs.display());
    }
    let canon = dir.canonicalize()?;
    if mount_type(&canon).is_some() {
        bail!("{} is already a mount point", canon.display());
    }
    if std::fs::read_dir(&canon)?.next().is_some() {
        bail!("mount point {} is not empty", canon.display());
    }
    Ok(canon)
}

fn init_logging(args: &MountArgs, cache_dir: &Path) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FLOWFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let path = match (&args.opts.log_file, args.opts.foreground) {
        (Some(p), _) => Some(p.clone()),
        (None, true) => None,
        (None, false) => Some(cache_dir.join("flowfs.log")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false);
    // Readable by its owner only: a log names buckets, keys and paths.
    let open = |p: PathBuf| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(p)
            .ok()
    };
    match path.and_then(open) {
        Some(f) => {
            let _ = builder.with_writer(Mutex::new(f)).try_init();
        }
        None => {
            let _ = builder.with_writer(std::io::stderr).try_init();
        }
    }
}

fn describe(e: &ClientError, bucket: &str, endpoint: &str) -> String {
    let one_line = |s: String| s.replace(['\n', '\r'], " ");
    one_line(match e {
        ClientError::NoSuchBucket(_) => format!("bucket {bucket} does not exist (at {endpoint})"),
        ClientError::NotFound(_) => format!("bucket {bucket} does not exist (at {endpoint})"),
        ClientError::AccessDenied(m) => format!(
            "access to bucket {bucket} denied ({m}); check the credentials (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...) and the bucket policy"
        ),
        ClientError::Unreachable(m) => format!("cannot reach the S3 endpoint {endpoint}: {m}"),
        ClientError::NotS3(m) => format!(
            "the endpoint {endpoint} does not look like an S3 server ({m}); check --endpoint-url or AWS_ENDPOINT_URL"
        ),
        ClientError::NoCredentials | ClientError::Credentials(_) => e.to_string(),
        other => format!("cannot use bucket {bucket} at {endpoint}: {other}"),
    })
}

fn serve(args: &MountArgs, cfg: FsConfig, dir: &Path, mut ready: Ready) -> Result<()> {
    // Everything the mount process creates (log, journal, cache files, pid file) is its
    // user's alone: logs and journal records name buckets, keys and paths. Set here, in
    // the mount process only: `flowfs run` must not hand this umask to its command.
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(0o077) };
    init_logging(args, &cfg.cache_dir);
    let r = serve_inner(args, cfg, dir, &mut ready);
    if let Err(e) = &r {
        ready.send(&format!("ERR {e:#}"));
    }
    r
}

/// The S3 client, once credentials and the bucket are checked (within 30 s).
fn connect(
    rt: &tokio::runtime::Runtime,
    args: &MountArgs,
    cfg: &FsConfig,
) -> Result<Arc<Retrying>> {
    let s3cfg = S3Config {
        bucket: cfg.bucket.clone(),
        endpoint_url: args.opts.endpoint_url.clone(),
        region: args.opts.region.clone(),
        // One attempt per SDK call: the retry layer decides them all (`Retrying`).
        max_attempts: 1,
    };
    let endpoint = args
        .opts
        .endpoint_url
        .clone()
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
        .unwrap_or_else(|| "AWS S3".into());
    let policy = RetryPolicy {
        budget: Duration::from_secs_f64(args.opts.retry_budget),
        max_attempts: args.opts.max_attempts.max(1),
        ..RetryPolicy::default()
    };
    let s3 = Arc::new(rt.block_on(S3Client::new(&s3cfg)));
    let client = Arc::new(Retrying::new(s3.clone(), policy));
    // Credentials first: without them the bucket check fails as a request that could
    // not be sent, which says nothing about what to set.
    let check = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), async {
            s3.check_credentials().await?;
            client.check_bucket(&cfg.prefix).await
        })
        .await
    });
    match check {
        Err(_) => bail!("no answer from the S3 endpoint {endpoint} within 30 s"),
        Ok(Err(e)) => bail!("{}", describe(&e, &cfg.bucket, &endpoint)),
        Ok(Ok(())) => {}
    }
    Ok(client)
}

/// Mount options and session settings for fuser.
fn fuse_config(args: &MountArgs, read_only: bool) -> Result<fuser::Config> {
    let mut opts = vec![
        fuser::MountOption::FSName(format!("flowfs:{}", args.source)),
        fuser::MountOption::Subtype("flowfs".into()),
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
        fuser::MountOption::NoAtime,
    ];
    if read_only {
        opts.push(fuser::MountOption::RO);
    }
    let mut fcfg = fuser::Config::default();
    // SAFETY: getuid cannot fail.
    let root = unsafe { libc::getuid() } == 0;
    let allow_other_ok = root
        || std::fs::read_to_string("/etc/fuse.conf")
            .is_ok_and(|c| c.lines().any(|l| l.trim() == "user_allow_other"));
    if args.opts.allow_other {
        if !allow_other_ok {
            bail!("--allow-other needs user_allow_other in /etc/fuse.conf");
        }
        fcfg.acl = fuser::SessionACL::All;
    } else if allow_other_ok {
        // allow_root is what auto_unmount needs; a mount stays private to its user.
        fcfg.acl = fuser::SessionACL::RootAndOwner;
    }
    let fusermount = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").exists()));
    if fcfg.acl != fuser::SessionACL::Owner && fusermount {
        // If this process dies, fusermount3 removes the mount: never a dead mount left.
        opts.push(fuser::MountOption::AutoUnmount);
    }
    fcfg.mount_options = opts;
    fcfg.n_threads = Some(args.opts.fuse_threads);
    fcfg.clone_fd = true;
    Ok(fcfg)
}

fn serve_inner(args: &MountArgs, cfg: FsConfig, dir: &Path, ready: &mut Ready) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .thread_name("flowfs-io")
        .enable_all()
        .build()?;
    let client = connect(&rt, args, &cfg)?;
    let read_only = cfg.read_only;
    let fs = Arc::new(Fs::new(cfg, client.clone())?);
    // What a killed mount left staged goes up before this one serves anything.
    let (recovered, unrecovered) = rt.block_on(fs.recover());
    for k in &recovered {
        tracing::warn!(key = %k, "recovered from the journal of an earlier mount and uploaded");
    }
    for k in &unrecovered {
        tracing::error!("could not recover {k}; it stays in the journal");
    }
    let adapter = FuseAdapter::new(fs.clone(), rt.handle().clone());

    let fcfg = fuse_config(args, read_only)?;

    control::ensure_runtime_dir().context("cannot create the control socket directory")?;
    let sock = control::socket_path(dir);
    if sock.exists() && std::os::unix::net::UnixStream::connect(&sock).is_err() {
        let _ = std::fs::remove_file(&sock);
    }
    let listener =
        UnixListener::bind(&sock).with_context(|| format!("control socket {}", sock.display()))?;

    let session = fuser::Session::new(adapter, dir, &fcfg)
        .map_err(|e| anyhow!("cannot mount {}: {e}", dir.display()))?;

    let mut ending = Ending::new(fs.clone(), rt.handle().clone(), dir, &args.source);
    ending.retries = Some(client);
    let ending = Arc::new(ending);
    control::serve(listener, ending.clone()).context("cannot start the control thread")?;
    spawn_signal_task(ending.clone());
    if let Some(p) = &args.opts.pid_file {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .with_context(|| format!("cannot write pid file {}", p.display()))?;
    }
    ready.send("OK");
    let result = session.run();
    fs.shutdown();
    // The socket goes first, so that a new mount of this directory can start at once.
    let _ = std::fs::remove_file(&sock);
    if let Some(p) = &args.opts.pid_file {
        let _ = std::fs::remove_file(p);
    }
    ending.finish();
    ending.wait_answered(Duration::from_secs(10));
    rt.shutdown_timeout(Duration::from_secs(2));
    result.map_err(|e| anyhow!("FUSE session: {e}"))?;
    // Files left in the journal make the process fail too (seen by a --foreground caller).
    match ending.outcome() {
        Some(Err(e)) => bail!("{e}"),
        _ => Ok(()),
    }
}

pub fn unmount(dir: &Path, force: bool) -> Result<()> {
    let abs = std::path::absolute(dir)?;
    let dir = abs.canonicalize().unwrap_or(abs);
    let cmd = if force { "unmount --force" } else { "unmount" };
    match control::request(&dir, cmd, None) {
        Ok(a) => {
            let mut last = "";
            for line in a.lines() {
                match line.strip_prefix("NOTE ") {
                    Some(note) => eprintln!("flowfs: {note}"),
                    None => last = line,
                }
            }
            if last == "OK" {
                Ok(())
            } else {
                bail!("{}", last.trim_start_matches("ERR "))
            }
        }
        Err(_) => unmount_silent(&dir),
    }
}

/// Nobody answers on the control socket of `dir`: a dead mount of this user is removed;
/// another user's mount is left alone (its socket is in that user's directory).
fn unmount_silent(dir: &Path) -> Result<()> {
    let (t, owner) = mount_entry(dir).unzip();
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    match control::no_answer(t.as_deref(), owner.flatten(), me) {
        NoAnswer::NotMounted => bail!("{} is not mounted", dir.display()),
        NoAnswer::Foreign(t) => bail!("{} is a {t} mount, not a flowfs mount", dir.display()),
        NoAnswer::OtherUser(o) => bail!(
            "{} is a flowfs mount of {}, not of this user: run `flowfs unmount` as that user (with the environment it mounted with)",
            dir.display(),
            control::user_name(o)
        ),
        NoAnswer::Dead => {
            let st = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(dir)
                .status();
            match st {
                Ok(s) if s.success() => bail!(
                    "the flowfs process of {} was gone; removed its dead mount (what it had not uploaded is in its cache dir journal)",
                    dir.display()
                ),
                _ => bail!(
                    "the flowfs process of {} is gone and fusermount3 -u failed",
                    dir.display()
                ),
            }
        }
    }
}
