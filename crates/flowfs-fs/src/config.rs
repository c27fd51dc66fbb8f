//! Settings of one mount, built once by the binary and passed down.

use std::path::PathBuf;
use std::time::Duration;

pub use crate::inode::MetaHeads;

/// Settings of one mount, built once from the command line and read everywhere below.
#[derive(Debug, Clone)]
pub struct FsConfig {
    /// Bucket name.
    pub bucket: String,
    /// Key prefix the mount shows, empty or ending in `/`.
    pub prefix: String,
    /// Where the object cache, the staging files and the journal live.
    pub cache_dir: PathBuf,
    /// Bytes of object data the cache keeps before it evicts.
    pub cache_size: u64,
    /// Free space the cache leaves on its file system for staged writes (0: no floor).
    pub cache_min_free: u64,
    /// Which fetched bytes the node cache writes to disk (cache/admit.rs).
    pub cache_admit: crate::cache::Admit,
    /// How long attributes, listings and negative entries are trusted without asking the
    /// store.
    pub metadata_ttl: Duration,
    /// How long an unmount waits for pending uploads before it gives up on them (they
    /// stay in the journal) and names them.
    pub unmount_timeout: Duration,
    /// Refuses every change with EROFS.
    pub read_only: bool,
    /// Ranged GET size for sequential reads and multipart part size for uploads.
    pub part_size: u64,
    /// Most bytes a sequential reader may have requested ahead of its position.
    pub max_readahead: u64,
    /// GETs in flight at once, over all files.
    pub max_gets: usize,
    /// Upload parts (or small files) in flight at once, over all files.
    pub max_uploads: usize,
    /// The smallest first `copy_file_range` call taken for the first of several that copy
    /// one object whole (fs/copy.rs): `cp` asks for all (cut by the kernel to 4 GiB − 4 KiB),
    /// the JDK for 0x7ffff000 bytes at a time. Lowered by tests.
    pub copy_chunk: u64,
    /// Names of files (like Nextflow's `.exitcode`) uploaded only after every file
    /// closed before them in their directory tree is durable.
    pub completion_markers: Vec<String>,
    /// Owner shown by objects whose metadata names none, and of nodes made without a
    /// caller (`--uid`, else the mounting user).
    pub uid: u32,
    /// Group likewise (`--gid`).
    pub gid: u32,
    /// Permission bits of files (until a chmod through this mount).
    pub file_mode: u16,
    /// Permission bits of directories.
    pub dir_mode: u16,
    /// Which listings HEAD their objects for the attributes in their metadata.
    pub meta_heads: MetaHeads,
    /// `--durability local`: the close of a written file fsyncs its staged bytes and
    /// journal record before it returns (a power loss then loses no closed file).
    pub local_durability: bool,
}

impl FsConfig {
    /// The defaults for `bucket` and `prefix` (slashes trimmed, one added), files owned by
    /// the calling user.
    pub fn new(bucket: &str, prefix: &str, cache_dir: PathBuf) -> FsConfig {
        let prefix = prefix.trim_matches('/');
        FsConfig {
            bucket: bucket.to_string(),
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
            cache_dir,
            cache_size: 10 << 30,
            cache_min_free: 0,
            cache_admit: crate::cache::Admit::Reuse,
            metadata_ttl: Duration::from_secs(1),
            unmount_timeout: Duration::from_secs(300),
            read_only: false,
            part_size: 8 << 20,
            max_readahead: 64 << 20,
            max_gets: 16,
            max_uploads: 16,
            copy_chunk: 0x7fff_f000,
            completion_markers: vec![".exitcode".to_string()],
            // SAFETY: getuid/getgid cannot fail.
            uid: unsafe { libc::getuid() },
            gid: unsafe { libc::getgid() },
            file_mode: 0o644,
            dir_mode: 0o755,
            meta_heads: MetaHeads::Marked,
            local_durability: false,
        }
    }
}
