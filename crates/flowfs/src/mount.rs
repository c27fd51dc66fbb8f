//! `flowfs mount`: the source, the mount point and every option checked before anything
//! starts (a wrong value is named by its option), then the mount served here
//! (`--foreground`) or by a daemon (daemon.rs); the serving is session.rs.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use flowfs_fs::{disk_space, FsConfig, MetaHeads};

use crate::cli::{
    parse_endpoint, parse_min_free, parse_size, parse_source, MountArgs, MountOptions, Store,
};
use crate::daemon::{self, Ready};
use crate::mountinfo::mount_type;
use crate::session;

/// Azure's largest block (Put Block), the largest part of an upload there.
const AZURE_MAX_BLOCK: u64 = 4000 << 20;

/// Mounts `args.source` at `args.dir`; returns once the mount is ready (in the
/// foreground: once it is unmounted).
pub fn mount(args: MountArgs) -> Result<()> {
    let (store, prefix) = parse_source(&args.source).map_err(|e| anyhow!(e))?;
    check_endpoint(&args.opts)?;
    let bucket = crate::stores::cache_name(&store, &args.opts)?;
    let dir = check_mountpoint(&args.dir)?;
    if !Path::new("/dev/fuse").exists() {
        bail!(
            "/dev/fuse is missing: load the fuse module, or give the container --device /dev/fuse"
        );
    }
    let cfg = fs_config(&args.opts, &bucket, &prefix)?;
    if matches!(store, Store::Azure { .. }) && cfg.part_size > AZURE_MAX_BLOCK {
        bail!("--part-size must be at most 4000M on Azure Blob (its largest block)");
    }
    if let Some(a) = &args.opts.metrics_addr {
        crate::metrics::parse_addr(a)?;
    }
    crate::logging::format()?;
    crate::logging::filter()?;
    crate::otlp::OtlpConfig::from_env(&crate::otlp::process_env)?;
    if args.opts.fuse_threads == 0 {
        bail!("--fuse-threads must be at least 1");
    }
    if args.opts.foreground {
        return session::serve(&args, &store, cfg, &dir, Ready::nobody());
    }
    let tied = args.opts.end_with_parent;
    daemon::spawn(tied, |ready| {
        session::serve(&args, &store, cfg, &dir, ready)
    })
}

/// The settings of the file system, from the options.
pub(crate) fn fs_config(opts: &MountOptions, bucket: &str, prefix: &str) -> Result<FsConfig> {
    let mut cfg = FsConfig::new(bucket, prefix, cache_dir(opts)?);
    cfg.cache_size = parse_size(&opts.cache_size).map_err(|e| anyhow!("--cache-size: {e}"))?;
    cfg.cache_min_free = parse_min_free(
        &opts.cache_min_free,
        // A file system that cannot be asked gets no floor.
        disk_space(&cfg.cache_dir).map_or(0, |d| d.total),
    )
    .map_err(|e| anyhow!("--cache-min-free: {e}"))?;
    cfg.cache_admit = (opts.cache_admit.parse()).map_err(|e| anyhow!("--cache-admit: {e}"))?;
    cfg.part_size = parse_size(&opts.part_size).map_err(|e| anyhow!("--part-size: {e}"))?;
    if cfg.part_size < (5 << 20) || cfg.part_size > (5 << 30) {
        bail!("--part-size must be between 5M and 5G (the limits of S3 multipart uploads)");
    }
    cfg.max_readahead =
        parse_size(&opts.max_readahead).map_err(|e| anyhow!("--max-readahead: {e}"))?;
    if !(opts.metadata_ttl >= 0.0 && opts.metadata_ttl < 1e6) {
        bail!("--metadata-ttl must be a number of seconds");
    }
    cfg.metadata_ttl = Duration::from_secs_f64(opts.metadata_ttl);
    if !(opts.unmount_timeout > 0.0 && opts.unmount_timeout < 1e6) {
        bail!("--unmount-timeout must be a positive number of seconds");
    }
    cfg.unmount_timeout = Duration::from_secs_f64(opts.unmount_timeout);
    if !(opts.retry_budget >= 0.0 && opts.retry_budget < 1e6) {
        bail!(
            "--retry-budget must be a number of seconds from 0 (no retries), not {}",
            opts.retry_budget
        );
    }
    cfg.read_only = opts.read_only;
    cfg.completion_markers = opts.completion_markers.clone();
    cfg.copy_chunk = parse_size(&opts.copy_chunk).map_err(|e| anyhow!("--copy-chunk: {e}"))?;
    cfg.max_gets = opts.max_concurrency.max(1);
    cfg.max_uploads = opts.max_upload_concurrency.max(1);
    cfg.file_mode = u16::from_str_radix(&opts.file_mode, 8)
        .map_err(|_| anyhow!("--file-mode must be octal, like 644"))?;
    cfg.dir_mode = u16::from_str_radix(&opts.dir_mode, 8)
        .map_err(|_| anyhow!("--dir-mode must be octal, like 755"))?;
    cfg.uid = opts.uid.unwrap_or(cfg.uid);
    cfg.gid = opts.gid.unwrap_or(cfg.gid);
    cfg.meta_heads = match opts.meta_heads.as_str() {
        "always" => MetaHeads::Always,
        "never" => MetaHeads::Never,
        _ => MetaHeads::Marked,
    };
    cfg.local_durability = opts.durability == "local";
    Ok(cfg)
}

/// The endpoint, from the option or the environment, before anything touches the disk
/// or the network: a typo is named as such, not as a request that could not be sent.
pub(crate) fn check_endpoint(opts: &MountOptions) -> Result<()> {
    if let Some(url) = &opts.endpoint_url {
        parse_endpoint(url).map_err(|e| anyhow!("--endpoint-url: {e}"))?;
    } else if let Some(url) = std::env::var("AWS_ENDPOINT_URL")
        .ok()
        .filter(|u| !u.is_empty())
    {
        parse_endpoint(&url).map_err(|e| anyhow!("AWS_ENDPOINT_URL: {e}"))?;
    }
    Ok(())
}

fn cache_dir(opts: &MountOptions) -> Result<PathBuf> {
    let d = match &opts.cache_dir {
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
