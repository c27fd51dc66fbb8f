//! Command-line surface. Options read like mount-s3 and rclone; the cache options can
//! also come from `FLOWFS_*` environment variables (handy in containers).
//!
//! This file holds the commands and their arguments; the options every mount takes are
//! in cli/options.rs, and the parsers of their values (sizes, endpoints, s3:// names)
//! in cli/parse.rs.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod options;
mod parse;

pub use options::MountOptions;
pub use parse::{parse_endpoint, parse_min_free, parse_object, parse_size, parse_source, Store};

#[derive(Parser, Debug)]
#[command(
    name = "flowfs",
    version,
    about = "Mount an object store bucket (S3, GCS, Azure Blob) as a fast local file system for workflow tasks",
    long_about = "flowfs mounts a bucket (or a prefix of one) of S3, Google Cloud Storage or Azure\n\
        Blob Storage as a POSIX file system. Reads are lazy, ranged and prefetched; a local\n\
        disk cache keeps what is read again (docs/CONFIGURATION.md).\n\n\
        Sources: s3://BUCKET[/PREFIX], gs://BUCKET[/PREFIX], az://CONTAINER[/PREFIX].\n\n\
        Credentials come from each store's own sources:\n\
        s3://  AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_REGION,\n       \
        AWS_ENDPOINT_URL, AWS_PROFILE with ~/.aws/config and ~/.aws/credentials,\n       \
        then container and instance roles;\n\
        gs://  STORAGE_EMULATOR_HOST, GOOGLE_APPLICATION_CREDENTIALS, gcloud's\n       \
        application-default credentials, then the metadata server (--anonymous:\n       \
        a public bucket);\n\
        az://  AZURE_STORAGE_CONNECTION_STRING, or the account (--azure-account,\n       \
        AZURE_STORAGE_ACCOUNT) with AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN,\n       \
        then Microsoft Entra ID (service principal, workload identity, az login,\n       \
        managed identity)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Mount s3://BUCKET[/PREFIX], gs://BUCKET[/PREFIX] or az://CONTAINER[/PREFIX] at DIR
    Mount(MountArgs),
    /// Flush everything the mount at DIR still holds, then unmount it
    Unmount(UnmountArgs),
    /// Show what the mount at DIR holds that is not in the bucket yet, and what failed
    Status(StatusArgs),
    /// Mount, run a task command, flush its outputs, unmount (a task wrapper)
    Run(RunArgs),
    /// Add up usage reports (of many tasks) into one table of requests, bytes and cost
    Report(ReportArgs),
    /// A live view of the mount at DIR: requests/s, MiB/s, cache hits, the upload queue
    Top(TopArgs),
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
pub struct TopArgs {
    /// Mount point
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Seconds between lines
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub interval: f64,
    /// Stop after N lines [default: until interrupted or the mount ends]
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    flowfs report work/                   # every flowfs-report*.json below work/\n  \
    flowfs report a.json b.json --prices gcs-europe.json --json\n  \
    flowfs report --mount /mnt/project     # the running mount's cost so far")]
pub struct ReportArgs {
    /// Usage reports (of `flowfs run --report`, `flowfs unmount --report`), or directories
    /// searched for files named flowfs-report*.json
    #[arg(value_name = "FILE|DIR", required_unless_present = "mounts")]
    pub paths: Vec<PathBuf>,
    /// Also what the running mount at DIR did so far (repeatable)
    #[arg(long = "mount", value_name = "DIR")]
    pub mounts: Vec<PathBuf>,
    /// Price table (JSON; docs/CONFIGURATION.md) [default: built in]
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Print the sum as JSON (a usage report of its own) instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
#[command(
    after_help = "The cache and object storage options are those of `flowfs mount`.\n\n\
    Example:\n  flowfs cache prefetch s3://refs/GRCh38.fa s3://refs/GRCh38.fa.fai --cache-dir /scratch/flowfs"
)]
pub struct PrefetchArgs {
    /// Objects to read into the cache: s3://BUCKET/KEY (repeatable); of an archive
    /// (*.tar, *.tar.gz, *.tgz) its index is built and kept too
    #[arg(value_name = "s3://BUCKET/KEY", required = true)]
    pub objects: Vec<String>,
    /// Of an archive, build its index only: its members are read through an archive
    /// mount or view, which caches them as its own objects, not the archive's bytes
    #[arg(long)]
    pub index_only: bool,
    #[command(flatten)]
    pub opts: MountOptions,
}

#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Exit status: the command's own, or 196 when a mount failed, or 197 when the\n\
    command's outputs could not be made durable (the files are named on stderr), or 198\n\
    when --report could not be written.\n\n\
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
    /// Write what the mounts did (requests, bytes, cache, cost) to FILE as JSON once they
    /// are unmounted
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Price table for the report's cost (JSON; docs/CONFIGURATION.md) [default: built in]
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:\n  \
    flowfs mount s3://my-bucket /mnt/data\n  \
    flowfs mount s3://my-bucket/runs/42 ./work --cache-dir /scratch/flowfs --cache-size 50G\n  \
    AWS_ENDPOINT_URL=http://127.0.0.1:8333 flowfs mount s3://test ./mnt --read-only\n  \
    flowfs mount gs://my-bucket/refs /mnt/refs\n  \
    AZURE_STORAGE_CONNECTION_STRING=... flowfs mount az://my-container /mnt/az\n  \
    flowfs unmount /mnt/data")]
pub struct MountArgs {
    /// Bucket to mount, with an optional key prefix: s3://BUCKET[/PREFIX],
    /// gs://BUCKET[/PREFIX] or az://CONTAINER[/PREFIX]
    #[arg(value_name = "s3|gs|az://BUCKET[/PREFIX]")]
    pub source: String,
    /// Empty directory to mount on
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    #[command(flatten)]
    pub opts: MountOptions,
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
    /// Write what the mount did (requests, bytes, cache, cost) to FILE as JSON
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Price table for the report's cost (JSON; docs/CONFIGURATION.md) [default: built in]
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn the_help_names_every_store_its_url_and_its_credentials() {
        let mut cmd = Cli::command();
        let top = cmd.render_long_help().to_string();
        for want in [
            "s3://BUCKET",
            "gs://BUCKET",
            "az://CONTAINER",
            "AWS_ACCESS_KEY_ID",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "AZURE_STORAGE_CONNECTION_STRING",
        ] {
            assert!(top.contains(want), "flowfs --help lacks {want}:\n{top}");
        }
        let mount = cmd.find_subcommand_mut("mount").expect("mount");
        let help = mount.render_long_help().to_string();
        for want in ["s3://", "gs://", "az://CONTAINER"] {
            assert!(
                help.contains(want),
                "flowfs mount --help lacks {want}:\n{help}"
            );
        }
    }
}
