//! Command-line surface. Options read like mount-s3 and rclone; the cache options can
//! also come from `FLOWFS_*` environment variables (handy in containers).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "flowfs",
    version,
    about = "Mount S3-compatible object storage as a fast local file system for workflow tasks",
    long_about = "flowfs mounts an S3 bucket (or a prefix of one) as a POSIX file system.\n\
        Reads are lazy, ranged and prefetched; a local disk cache keeps what was read.\n\n\
        Credentials, region and endpoint come from the standard AWS sources:\n\
        AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_REGION,\n\
        AWS_ENDPOINT_URL, AWS_PROFILE with ~/.aws/config and ~/.aws/credentials,\n\
        then container and instance roles."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Mount s3://BUCKET[/PREFIX] at DIR
    Mount(MountArgs),
    /// Flush everything the mount at DIR still holds, then unmount it
    Unmount(UnmountArgs),
    /// Show what the mount at DIR holds that is not in the bucket yet, and what failed
    Status(StatusArgs),
    /// Mount, run a task command, flush its outputs, unmount (a task wrapper)
    Run(RunArgs),
    /// The node cache: its statistics, objects read into it ahead of tasks, its removal
    #[command(subcommand)]
    Cache(CacheCommand),
}

#[derive(Subcommand, Debug)]
pub enum CacheCommand {
    /// Show what the cache directory DIR holds: size, objects, per bucket, hit ratio
    Stats(CacheStatsArgs),
    /// Read whole objects into the cache of --cache-dir (e.g. a reference genome before
    /// the tasks of a node start); mounts on that directory then read them from disk
    Prefetch(Box<PrefetchArgs>),
    /// Remove every cached object from the cache directory DIR (files staged for upload
    /// stay); refused while a flowfs process uses DIR, unless --force
    Clear(CacheClearArgs),
}

#[derive(Args, Debug)]
pub struct CacheStatsArgs {
    /// Cache directory (the --cache-dir of the mounts)
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CacheClearArgs {
    /// Cache directory (the --cache-dir of the mounts)
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Clear it even while mounts use it (their reads fetch again)
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
#[command(
    after_help = "The cache and object storage options are those of `flowfs mount`.\n\n\
    Example:\n  flowfs cache prefetch s3://refs/GRCh38.fa s3://refs/GRCh38.fa.fai --cache-dir /scratch/flowfs"
)]
pub struct PrefetchArgs {
    /// Objects to read into the cache: s3://BUCKET/KEY (repeatable)
    #[arg(value_name = "s3://BUCKET/KEY", required = true)]
    pub objects: Vec<String>,
    #[command(flatten)]
    pub opts: MountOptions,
}

#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Exit status: the command's own, or 196 when a mount failed, or 197 when the\n\
    command's outputs could not be made durable (the files are named on stderr).\n\n\
    Example (a Nextflow task in a container):\n  \
    flowfs run --mount s3://my-bucket/work=/work -- bash /work/ab/12cd/.command.run"
)]
pub struct RunArgs {
    /// s3://BUCKET[/PREFIX]=DIR to mount for the command (repeatable; DIR is created)
    #[arg(
        long = "mount",
        value_name = "s3://BUCKET[/PREFIX]=DIR",
        required = true
    )]
    pub mounts: Vec<String>,
    /// Options given to every mount, as for `flowfs mount`
    #[command(flatten)]
    pub opts: MountOptions,
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:\n  \
    flowfs mount s3://my-bucket /mnt/data\n  \
    flowfs mount s3://my-bucket/runs/42 ./work --cache-dir /scratch/flowfs --cache-size 50G\n  \
    AWS_ENDPOINT_URL=http://127.0.0.1:8333 flowfs mount s3://test ./mnt --read-only\n  \
    flowfs unmount /mnt/data")]
pub struct MountArgs {
    /// Bucket to mount, with an optional key prefix: s3://BUCKET[/PREFIX]
    #[arg(value_name = "s3://BUCKET[/PREFIX]")]
    pub source: String,
    /// Empty directory to mount on
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    #[command(flatten)]
    pub opts: MountOptions,
}

#[derive(Args, Debug, Clone)]
pub struct MountOptions {
    /// Directory of the local disk cache [default: $XDG_CACHE_HOME/flowfs or $TMPDIR/flowfs-cache-UID]
    #[arg(
        long,
        value_name = "D",
        env = "FLOWFS_CACHE_DIR",
        help_heading = "Caching"
    )]
    pub cache_dir: Option<PathBuf>,
    /// Largest size of the disk cache (e.g. 512M, 20G)
    #[arg(
        long,
        value_name = "SIZE",
        default_value = "10G",
        env = "FLOWFS_CACHE_SIZE",
        help_heading = "Caching"
    )]
    pub cache_size: String,
    /// Free space the cache leaves on its disk for files being written: SIZE or a percentage
    /// of the disk (the cache shrinks below --cache-size to keep it)
    #[arg(
        long,
        value_name = "SIZE|N%",
        default_value = "10%",
        env = "FLOWFS_CACHE_MIN_FREE",
        help_heading = "Caching"
    )]
    pub cache_min_free: String,
    /// Seconds that file attributes and directory listings are trusted without asking the server
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 1.0,
        env = "FLOWFS_METADATA_TTL",
        help_heading = "Caching"
    )]
    pub metadata_ttl: f64,
    /// Seconds `flowfs unmount` (or SIGTERM) waits for pending uploads before it unmounts
    /// anyway, naming every file not uploaded (they stay in the journal for the next mount)
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 300.0,
        env = "FLOWFS_UNMOUNT_TIMEOUT",
        help_heading = "Mount options"
    )]
    pub unmount_timeout: f64,

    /// Refuse every change (writes, creates, deletes) with EROFS
    #[arg(long, help_heading = "Mount options")]
    pub read_only: bool,
    /// Stay in the foreground; unmount cleanly on SIGINT or SIGTERM
    #[arg(short, long, help_heading = "Mount options")]
    pub foreground: bool,
    /// Let other users access the mount, with mode bits enforced by the kernel
    /// (default_permissions; needs user_allow_other in /etc/fuse.conf unless root)
    #[arg(long, help_heading = "Mount options")]
    pub allow_other: bool,
    /// Permission bits of files
    #[arg(
        long,
        value_name = "OCTAL",
        default_value = "644",
        help_heading = "Mount options"
    )]
    pub file_mode: String,
    /// Permission bits of directories
    #[arg(
        long,
        value_name = "OCTAL",
        default_value = "755",
        help_heading = "Mount options"
    )]
    pub dir_mode: String,
    /// Owner shown for objects whose metadata names none [default: the mounting user]
    #[arg(long, value_name = "UID", help_heading = "Mount options")]
    pub uid: Option<u32>,
    /// Group shown for objects whose metadata names none [default: the mounting user's]
    #[arg(long, value_name = "GID", help_heading = "Mount options")]
    pub gid: Option<u32>,
    /// Which directory listings read their objects' attributes (mode, owner, mtime) with a
    /// HEAD each: marked (directories with a marker object, as mkdir makes), always, never
    #[arg(
        long,
        value_name = "WHEN",
        default_value = "marked",
        value_parser = ["marked", "always", "never"],
        help_heading = "Mount options"
    )]
    pub meta_heads: String,
    /// FUSE passthrough: the kernel reads and writes files whose bytes are on local disk
    /// (files being written, files whose every byte is cached) itself, at local-disk
    /// speed; auto uses it where the kernel allows (Linux >= 6.9, CAP_SYS_ADMIN), off never
    #[arg(
        long,
        value_name = "WHEN",
        default_value = "auto",
        value_parser = ["auto", "off"],
        help_heading = "Mount options"
    )]
    pub passthrough: String,
    /// What a close() of a written file waits for: bucket (nothing; the file is safe on
    /// local disk against a crash of flowfs, in the bucket once uploaded) or local (its
    /// staged bytes and journal record are fsynced first, so that a power loss or reboot
    /// before the upload loses nothing the next mount cannot upload)
    #[arg(
        long,
        value_name = "WHAT",
        default_value = "bucket",
        value_parser = ["bucket", "local"],
        help_heading = "Mount options"
    )]
    pub durability: String,
    /// FUSE worker threads
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4,
        help_heading = "Mount options"
    )]
    pub fuse_threads: usize,

    /// S3 endpoint URL; a custom endpoint uses path-style requests [env: AWS_ENDPOINT_URL]
    #[arg(long, value_name = "URL", help_heading = "Object storage")]
    pub endpoint_url: Option<String>,
    /// Region of the bucket [env: AWS_REGION, default: us-east-1]
    #[arg(long, value_name = "R", help_heading = "Object storage")]
    pub region: Option<String>,
    /// Part size of ranged reads and multipart uploads (e.g. 8M)
    #[arg(
        long,
        value_name = "SIZE",
        default_value = "8M",
        help_heading = "Object storage"
    )]
    pub part_size: String,
    /// GET requests in flight at once (reads and read-ahead)
    #[arg(
        long,
        value_name = "N",
        default_value_t = 16,
        help_heading = "Object storage"
    )]
    pub max_concurrency: usize,
    /// Multipart upload parts in flight at once; each holds one part in memory
    #[arg(
        long,
        value_name = "N",
        default_value_t = 8,
        help_heading = "Object storage"
    )]
    pub max_upload_concurrency: usize,
    /// How far ahead of a sequential reader to fetch (e.g. 64M)
    #[arg(
        long,
        value_name = "SIZE",
        default_value = "64M",
        help_heading = "Object storage"
    )]
    pub max_readahead: String,
    /// Attempts per request at most, the first included (within --retry-budget)
    #[arg(
        long,
        value_name = "N",
        default_value_t = 100,
        help_heading = "Object storage"
    )]
    pub max_attempts: u32,
    /// Seconds a failing request keeps being sent again (exponential backoff with full
    /// jitter, slowed down further by SlowDown) before its error is returned
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 60.0,
        env = "FLOWFS_RETRY_BUDGET",
        help_heading = "Object storage"
    )]
    pub retry_budget: f64,

    /// File name uploaded only after every file closed before it in its directory tree
    /// is durable (repeatable)
    #[arg(
        long = "completion-marker",
        value_name = "NAME",
        default_value = ".exitcode",
        help_heading = "Workflows"
    )]
    pub completion_markers: Vec<String>,

    /// Write the pid of the mount process here once the mount is ready
    #[arg(long, value_name = "FILE", help_heading = "Logging")]
    pub pid_file: Option<PathBuf>,
    /// The mount ends when the process that started it dies (`flowfs run`'s mounts)
    #[arg(skip)]
    pub end_with_parent: bool,
    /// Log file (level from FLOWFS_LOG, e.g. info, debug) [default: stderr in the foreground, CACHE_DIR/flowfs.log otherwise]
    #[arg(long, value_name = "FILE", help_heading = "Logging")]
    pub log_file: Option<PathBuf>,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 when everything was uploaded and DIR is unmounted; 1 otherwise,\n\
    naming the files not uploaded (they stay in the journal for the next mount with the same\n\
    cache dir)."
)]
pub struct UnmountArgs {
    /// Mount point
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Unmount at once without waiting for uploads: files not uploaded stay in the journal
    /// and the next mount with the same cache dir uploads them
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 when everything written is in the bucket and nothing failed,\n\
    1 when something is pending or failed, 2 when the mount could not be asked."
)]
pub struct StatusArgs {
    /// Mount point
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Print JSON (stable field names; see docs/CONFIGURATION.md)
    #[arg(long)]
    pub json: bool,
}

/// A custom endpoint: `http(s)://HOST[:PORT][/PATH]`. Checked before anything else, so a
/// typo is named as such rather than surfacing as a request that could not be sent. The
/// URL is not echoed: it could carry credentials (`user:secret@host`).
pub fn parse_endpoint(s: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "malformed endpoint URL: {why} (expected e.g. https://s3.example.org or http://127.0.0.1:8333)"
        ))
    };
    let Some(rest) = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
    else {
        return bad("it must start with http:// or https://");
    };
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("it contains spaces or control characters");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return bad("credentials do not belong in the URL; use the AWS credential chain");
    }
    let (host, port) = match authority.strip_prefix('[') {
        // [IPv6]:port
        Some(v6) => match v6.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':')),
            None => return bad("an IPv6 address without its closing ]"),
        },
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let host_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':');
    if host.is_empty() || !host.chars().all(host_ok) {
        return bad("no valid host name");
    }
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return bad("the port is not a number from 0 to 65535");
    }
    Ok(())
}

/// `512K`, `8M`, `10G`, `1T` or plain bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?} (use e.g. 512M or 20G)"))?;
    let mult: u64 = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(format!("invalid size unit in {s:?} (use K, M, G or T)")),
    };
    Ok((n * mult as f64) as u64)
}

/// `--cache-min-free`: bytes, given a file system of `disk` bytes.
pub fn parse_min_free(s: &str, disk: u64) -> Result<u64, String> {
    match s.trim().strip_suffix('%') {
        Some(pct) => {
            let p: f64 = pct
                .trim()
                .parse()
                .map_err(|_| format!("invalid percentage {s:?} (use e.g. 10%)"))?;
            if !(0.0..=90.0).contains(&p) {
                return Err(format!("{s:?} is not between 0% and 90%"));
            }
            Ok((disk as f64 * p / 100.0) as u64)
        }
        None => parse_size(s),
    }
}

/// `s3://bucket/key` (one object) into its bucket and key, the key as written.
pub fn parse_object(s: &str) -> Result<(String, String), String> {
    let rest = s
        .strip_prefix("s3://")
        .ok_or_else(|| format!("an object must look like s3://BUCKET/KEY, got {s:?}"))?;
    match rest.split_once('/') {
        Some((b, k)) if !b.is_empty() && !k.is_empty() && !k.ends_with('/') => {
            Ok((b.to_string(), k.to_string()))
        }
        _ => Err(format!(
            "an object must look like s3://BUCKET/KEY, got {s:?}"
        )),
    }
}

/// `s3://bucket/prefix` into its bucket and prefix.
pub fn parse_source(s: &str) -> Result<(String, String), String> {
    let rest = s
        .strip_prefix("s3://")
        .ok_or_else(|| format!("source must look like s3://BUCKET[/PREFIX], got {s:?}"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(format!("no bucket name in {s:?}"));
    }
    Ok((bucket.to_string(), prefix.trim_matches('/').to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_free_is_a_size_or_a_share_of_the_disk() {
        assert_eq!(parse_min_free("10%", 1000 << 20), Ok(100 << 20));
        assert_eq!(parse_min_free(" 0% ", 1 << 30), Ok(0));
        assert_eq!(parse_min_free("2G", 1 << 20), Ok(2 << 30));
        assert!(parse_min_free("95%", 1 << 30).is_err());
        assert!(parse_min_free("x%", 1 << 30).is_err());
        assert!(parse_min_free("-1%", 1 << 30).is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8M"), Ok(8 << 20));
        assert_eq!(parse_size("10G"), Ok(10 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3X").is_err());
    }

    #[test]
    fn endpoints() {
        for ok in [
            "http://127.0.0.1:8333",
            "https://s3.eu-west-1.amazonaws.com",
            "https://minio.example.org:9000/",
            "http://[::1]:9000",
            "http://localhost",
        ] {
            assert_eq!(parse_endpoint(ok), Ok(()), "{ok}");
        }
        for bad in [
            "not a url",
            "127.0.0.1:8333",
            "ftp://host",
            "http://",
            "http://host:port",
            "http://host:99999",
            "http://a b",
            "http://[::1:9000",
        ] {
            let e = parse_endpoint(bad).unwrap_err();
            assert!(e.starts_with("malformed endpoint URL"), "{bad}: {e}");
        }
        let e = parse_endpoint("https://key:secret@host").unwrap_err();
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn objects() {
        assert_eq!(
            parse_object("s3://b/a/b.fa"),
            Ok(("b".into(), "a/b.fa".into()))
        );
        for bad in ["s3://b", "s3://b/", "s3:///k", "b/k", "s3://b/dir/"] {
            assert!(parse_object(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sources() {
        assert_eq!(parse_source("s3://b"), Ok(("b".into(), "".into())));
        assert_eq!(parse_source("s3://b/p/q/"), Ok(("b".into(), "p/q".into())));
        assert!(parse_source("b/p").is_err());
        assert!(parse_source("s3:///p").is_err());
    }
}
