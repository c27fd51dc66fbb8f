//! The mount process: logging, the tokio runtime, the store's client and its check,
//! recovery of an earlier mount's journal, the control socket, the FUSE session and the
//! signal task, then `session.run()` until the unmount, and the clean-up after it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use flowfs_fs::{Fs, FsConfig, FuseAdapter};

use crate::cli::{MountArgs, Store};
use crate::control;
use crate::daemon::Ready;
use crate::logging;
use crate::otlp::{Otlp, OtlpConfig};
use crate::stop::{spawn_signal_task, Ending};

/// Serves the mount at `dir` until it is unmounted; `ready` hears `OK` once the mount is
/// up, or `ERR <why>` if it never comes up.
pub fn serve(
    args: &MountArgs,
    store: &Store,
    cfg: FsConfig,
    dir: &Path,
    mut ready: Ready,
) -> Result<()> {
    // Everything the mount process creates (log, journal, cache files, pid file) is its
    // user's alone: logs and journal records name buckets, keys and paths. Set here, in
    // the mount process only: `flowfs run` must not hand this umask to its command.
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(0o077) };
    logging::init(args, &cfg.cache_dir);
    let r = session(args, store, cfg, dir, &mut ready);
    if let Err(e) = &r {
        ready.send(&format!("ERR {e:#}"));
    }
    r
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
        // A shared mount is as safe as a local directory: the kernel checks the mode
        // bits and owners flowfs shows (and chmod/chown/utimens against the caller).
        opts.push(fuser::MountOption::DefaultPermissions);
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

/// Uploads what a killed mount left staged (its journal), and says what it did.
fn recover(rt: &tokio::runtime::Runtime, fs: &Arc<Fs>) {
    let (recovered, unrecovered) = rt.block_on(fs.recover());
    for k in &recovered {
        tracing::warn!(key = %k, "recovered from the journal of an earlier mount and uploaded");
    }
    for k in &unrecovered {
        tracing::error!("could not recover {k}; it stays in the journal");
    }
}

/// The mount's metrics served at `--metrics-addr`, and pushed by OTLP when the environment
/// asks for it (returned: its last push comes at the unmount).
fn export_metrics(
    args: &MountArgs,
    rt: &tokio::runtime::Runtime,
    ending: &Arc<Ending>,
    fuse_ops: Arc<flowfs_fs::OpStats>,
) -> Result<Option<Arc<Otlp>>> {
    if let Some(a) = &args.opts.metrics_addr {
        let addr = crate::metrics::parse_addr(a)?;
        let bound = crate::metrics::serve(addr, ending.clone(), fuse_ops.clone())?;
        tracing::info!("metrics at http://{bound}/metrics");
    }
    let Some(c) = OtlpConfig::from_env(&crate::otlp::process_env)? else {
        return Ok(None);
    };
    tracing::info!("pushing metrics to {} every {:?}", c.url, c.interval);
    let o = Otlp::new(c, ending.clone(), fuse_ops)?;
    o.spawn(rt.handle());
    Ok(Some(o))
}

/// The life of the mount after its checks, from the runtime to the clean-up after the
/// session ends; `ready` hears `OK` once the kernel has the mount.
fn session(
    args: &MountArgs,
    store: &Store,
    mut cfg: FsConfig,
    dir: &Path,
    ready: &mut Ready,
) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .thread_name("flowfs-io")
        .enable_all()
        .build()?;
    let client = crate::stores::connect(&rt, &args.opts, &cfg, store)?;
    let store = crate::archive::serve_source(&rt, client.clone(), &mut cfg, args.opts.archives)?;
    let read_only = cfg.read_only;
    let fs = Arc::new(Fs::new(cfg, store)?);
    // What a killed mount left staged goes up before this one serves anything.
    recover(&rt, &fs);
    let adapter = FuseAdapter::new(fs.clone(), rt.handle().clone())
        .with_passthrough(args.opts.passthrough == "auto");

    let fuse_ops = adapter.op_stats();
    let fcfg = fuse_config(args, read_only)?;

    let (listener, sock) = control::listen(dir)?;

    let session = fuser::Session::new(adapter, dir, &fcfg)
        .map_err(|e| anyhow!("cannot mount {}: {e}", dir.display()))?;

    let mut ending = Ending::new(fs.clone(), rt.handle().clone(), dir, &args.source);
    ending.retries = Some(client);
    let ending = Arc::new(ending);
    control::serve(listener, ending.clone()).context("cannot start the control thread")?;
    let otlp = export_metrics(args, &rt, &ending, fuse_ops)?;
    spawn_signal_task(ending.clone());
    if let Some(p) = &args.opts.pid_file {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .with_context(|| format!("cannot write pid file {}", p.display()))?;
    }
    ready.send("OK");
    let result = session.run();
    if let Some(o) = &otlp {
        // The last counts (the uploads of the unmount), so that a short task's arrive.
        rt.block_on(async {
            let _ = tokio::time::timeout(Duration::from_secs(5), o.push()).await;
        });
    }
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
        Some(Err(e)) => {
            // In the log too: a daemon's stderr is gone, and the files named are the
            // operator's to recover.
            tracing::error!("{e}");
            bail!("{e}")
        }
        _ => Ok(()),
    }
}
