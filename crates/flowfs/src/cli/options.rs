//! The options of a mount, under the help headings Caching, Mount options, Object
//! storage, Workflows and Logging: one struct that `flowfs mount`, `flowfs run` and
//! `flowfs cache prefetch` flatten into their arguments, so that they read alike.

use std::path::PathBuf;

use clap::Args;

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
    /// Which fetched bytes the node cache writes to disk: `reuse` those of an object opened a
    /// second time on the node (or prefetched), `always` every byte, `never` only what is
    /// prefetched (docs/CONFIGURATION.md)
    #[arg(
        long,
        value_name = "WHEN",
        default_value = "reuse",
        value_parser = ["reuse", "always", "never"],
        env = "FLOWFS_CACHE_ADMIT",
        help_heading = "Caching"
    )]
    pub cache_admit: String,
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
    /// Show each *.tar, *.tar.gz and *.tgz object also as a read-only directory NAME.d
    /// beside it, the archive's members inside (indexed on first use, kept in the cache)
    #[arg(long, help_heading = "Mount options")]
    pub archives: bool,
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

    /// Endpoint URL of the store: S3 (path-style requests) [env: AWS_ENDPOINT_URL],
    /// GCS's JSON API [env: STORAGE_EMULATOR_HOST] or Azure's blob endpoint (e.g.
    /// Azurite's http://127.0.0.1:10000/devstoreaccount1)
    #[arg(long, value_name = "URL", help_heading = "Object storage")]
    pub endpoint_url: Option<String>,
    /// Azure storage account of an az:// source [env: AZURE_STORAGE_ACCOUNT; or the
    /// connection string's]
    #[arg(long, value_name = "NAME", help_heading = "Object storage")]
    pub azure_account: Option<String>,
    /// Send requests unsigned, without looking for credentials: a public gs:// bucket
    #[arg(long, help_heading = "Object storage")]
    pub anonymous: bool,
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

    /// The smallest first `copy_file_range` call taken for the first of several that copy
    /// one object (the JDK asks for 2 GiB − 4 KiB at a time); tests lower it
    #[arg(
        long = "copy-chunk",
        value_name = "SIZE",
        default_value = "2147479552",
        hide = true
    )]
    pub copy_chunk: String,
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
    /// Serve Prometheus metrics at http://ADDR/metrics: PORT (on 127.0.0.1) or IP:PORT
    /// (beyond this host only when an address beyond it is given) [default: off]
    #[arg(
        long,
        value_name = "ADDR",
        env = "FLOWFS_METRICS_ADDR",
        help_heading = "Logging"
    )]
    pub metrics_addr: Option<String>,
    /// Log file (level from FLOWFS_LOG, e.g. info, debug) [default: stderr in the foreground, CACHE_DIR/flowfs.log otherwise]
    #[arg(long, value_name = "FILE", help_heading = "Logging")]
    pub log_file: Option<PathBuf>,
}
