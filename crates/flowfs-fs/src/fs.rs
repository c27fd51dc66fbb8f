//! The file system core: every operation as an async function over the object client,
//! with no FUSE and no HTTP types. The FUSE adapter and the unit tests both call this.
//! `Fs` routes each operation to a few owners: the namespace (`Namespace`: `Inodes`,
//! the per-inode locks, the walks' listings), the open
//! handles (`Handles`), the reader (`Prefetcher`, over the `DiskCache`), the write-back
//! table (`WriteBack`) and the `Uploader`. This file holds the state and what every part
//! shares (attributes, keys); `lookup` and `readdir` answer names, `open` the life of an
//! open file and its reads, `staged` writes, `upload` the upload task, `durable` fsync,
//! `namespace` and `rename` the operations that change names, `ends` mount and unmount.

mod attrs;
mod batch;
mod changes;
mod checksum;
mod copy;
mod copy_fill;
mod durable;
mod ends;
mod handles;
mod keys;
mod links;
mod listing;
mod locks;
mod lookup;
mod names;
mod namespace;
mod open;
mod pages;
mod passthrough;
mod readdir;
mod remote;
mod remove;
mod rename;
mod staged;
mod status;
mod unstaged;
mod upload;
mod walk;
mod xattrs;

use std::sync::Arc;

use flowfs_client::ObjectClient;

use crate::cache::DiskCache;
use crate::config::FsConfig;
use crate::error::{FsError, Result};
use crate::inode::Kind;
use crate::prefetch::Prefetcher;
pub use crate::writeback::PendingState;
use crate::writeback::{Staging, Uploader, WriteBack};
use attrs::Defaults;
pub use attrs::{Attr, AttrChanges, DirItem};
use batch::batched;
pub use copy::CopyRange;
use flowfs_client::meta::{percent_encode, SYMLINK_META};
use handles::{Handle, Handles};
use keys::Keys;
use names::Namespace;
use passthrough::Access;
pub use passthrough::{Backing, BackingKey};
use remote::Remote;
pub use status::{Failure, PendingFile, Recovery, Status};
pub use walk::{ReadAhead, WalkStats};
pub use xattrs::XattrMode;

/// What an open of a file asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Reads only.
    Read,
    /// Reads and writes (O_WRONLY or O_RDWR) of the content as it is.
    Write,
    /// Writes of a file emptied first (O_TRUNC).
    Truncate,
}

impl OpenMode {
    /// The mode of `open(2)` flags' access and O_TRUNC.
    pub fn of(write: bool, truncate: bool) -> OpenMode {
        match (write, truncate) {
            (false, _) => OpenMode::Read,
            (true, false) => OpenMode::Write,
            (true, true) => OpenMode::Truncate,
        }
    }

    fn writes(self) -> bool {
        self != OpenMode::Read
    }
}

/// What the kernel may skip for an open handle.
#[derive(Debug, Default, Clone)]
pub struct OpenHints {
    /// Keep the pages cached for the inode: the object's ETag is unchanged since.
    pub keep_cache: bool,
    /// No `flush` at close: the handle has no upload whose error close must report.
    pub no_flush: bool,
    /// The local file the kernel may serve this open from (passthrough), when asked for.
    pub backing: Option<Backing>,
}

/// Largest directory that is listed again instead of asking for single names.
const RELIST_MAX: usize = 10_000;
/// Files fetched ahead of a reader that opens a directory's files in listing order.
const SIBLING_PREFETCH: usize = 64;
/// Longest target a symlink may have (PATH_MAX).
const MAX_SYMLINK: u64 = 4096;

/// The file system over one bucket prefix: every FUSE operation is a method, with no FUSE
/// or HTTP types. It routes each to the owners below; the namespace and the write-back
/// table are shared with the write path and the listings, each behind its own lock.
pub struct Fs {
    cfg: Arc<FsConfig>,
    client: Arc<dyn ObjectClient>,
    cache: Arc<DiskCache>,
    /// The inode table, the per-inode orders of name changes, the walks' listings.
    ns: Arc<Namespace>,
    /// Open files and directories by handle number.
    handles: Handles,
    /// Reads from the store: read-ahead, GETs, the prefetch of a directory's next files.
    prefetch: Arc<Prefetcher>,
    /// Sends staged files to the bucket (a directory rename holds its moves).
    up: Arc<Uploader>,
    /// The keys of the mount's names, and which the store refuses.
    keys: Keys,
    /// What a node shows where its object says nothing.
    shown: Defaults,
    /// Every staged file and where it stands on its way to the bucket.
    wb: Arc<WriteBack>,
    /// Journal, uploads, durability waits, attribute rewrites and renames in the store.
    w: Arc<WritePath>,
    /// Directory listings from the store, and the ones fetched ahead of walks.
    lists: Arc<Listings>,
}

/// The write path: a staged file's journal record, its upload and what follows it
/// (links, attribute rewrites, the cache's copy), the waits of fsync and unmount, and
/// the store's side of renames and removals (upload.rs, durable.rs, changes.rs, ends.rs).
struct WritePath {
    cfg: Arc<FsConfig>,
    client: Arc<dyn ObjectClient>,
    cache: Arc<DiskCache>,
    ns: Arc<Namespace>,
    up: Arc<Uploader>,
    keys: Keys,
    shown: Defaults,
    wb: Arc<WriteBack>,
}

/// Directory listings: what a lookup or readdir asks the store (`Remote`) and keeps in
/// the namespace, and the listings fetched ahead of walks (lookup.rs, readdir.rs,
/// listing.rs, walk.rs).
struct Listings {
    cfg: Arc<FsConfig>,
    ns: Arc<Namespace>,
    remote: Remote,
    keys: Keys,
    wb: Arc<WriteBack>,
}

fn valid_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(FsError::Invalid("name"));
    }
    if name.len() > 255 {
        return Err(FsError::NameTooLong);
    }
    Ok(())
}

use crate::inode::join_path as join;

impl Fs {
    /// Opens the cache and the staging directory of `cfg.cache_dir`; nothing is sent to the
    /// store.
    pub fn new(cfg: FsConfig, client: Arc<dyn ObjectClient>) -> Result<Fs> {
        // Room for one sequential reader's whole read-ahead window, plus a part either side.
        let read_memory = cfg.max_readahead + 2 * cfg.part_size;
        let cache = DiskCache::open(&cfg.cache_dir, cfg.cache_size, read_memory)
            .map_err(|e| FsError::disk(format!("cache dir {}", cfg.cache_dir.display()), e))?
            .with_min_free(cfg.cache_min_free)
            .with_admission(cfg.cache_admit);
        let staging = Staging::open(&cfg.cache_dir).map_err(|e| {
            FsError::disk(format!("staging dir under {}", cfg.cache_dir.display()), e)
        })?;
        if let Some(room) = cache.squeezed() {
            tracing::warn!("{room}: reads are cached only within that until the disk has room");
        }
        let cache = Arc::new(cache);
        let up = Arc::new(Uploader::new(
            client.clone(),
            &cfg.bucket,
            cfg.part_size,
            cfg.max_uploads,
        ));
        let cfg = Arc::new(cfg);
        let (ns, wb) = (
            Arc::new(Namespace::new()),
            Arc::new(WriteBack::new(staging)),
        );
        let (keys, shown) = (Keys::new(&cfg, client.clone()), Defaults::new(&cfg));
        let w = Arc::new(WritePath {
            cfg: cfg.clone(),
            client: client.clone(),
            cache: cache.clone(),
            ns: ns.clone(),
            up: up.clone(),
            keys: keys.clone(),
            shown: shown.clone(),
            wb: wb.clone(),
        });
        let lists = Arc::new(Listings {
            cfg: cfg.clone(),
            ns: ns.clone(),
            remote: Remote::new(&cfg, client.clone(), up.keys().clone()),
            keys: keys.clone(),
            wb: wb.clone(),
        });
        Ok(Fs {
            prefetch: Arc::new(Prefetcher::new(&cfg, client.clone(), cache.clone())),
            handles: Handles::default(),
            cfg,
            client,
            cache,
            ns,
            up,
            keys,
            shown,
            wb,
            w,
            lists,
        })
    }

    /// The settings this mount was built with.
    pub fn config(&self) -> &FsConfig {
        &self.cfg
    }

    /// The target of symlink `ino`.
    pub async fn readlink(&self, ino: u64) -> Result<String> {
        let target = self
            .ns
            .read(ino, |n| match (&n.entry.kind, &n.entry.target) {
                (Kind::Symlink, Some(target)) => Ok(target.to_string()),
                _ => Err(FsError::Invalid("not a symlink")),
            });
        target.ok_or(FsError::NotFound)?
    }

    /// Saves what must survive a restart (cache bitmaps); called at unmount.
    pub fn shutdown(&self) {
        let t = std::time::Instant::now();
        self.cache.close();
        self.wb.staging().close();
        // Closing syncs what the cache changed (fdatasync per entry), slow on a disk busy
        // with other writers: the suspect when an unmount's 60 s wait for the session's end
        // ran out (a CI run, fsx seed 5, with other work loading the disk). Say so.
        if t.elapsed() > std::time::Duration::from_secs(5) {
            tracing::warn!("closing the cache took {:.1} s", t.elapsed().as_secs_f64());
        }
    }
}

impl WritePath {
    /// `Keys::check_writable` of the node `ino`. A node without a path (gone from the
    /// namespace) has no key to refuse: the operation answers for itself, as it did
    /// before writes were checked per key.
    fn check_writable(&self, ino: u64) -> Result<()> {
        match self.ns.path(ino) {
            Some(path) => self.keys.check_writable(&self.keys.key(&path)),
            None => self.keys.check_writable(""),
        }
    }

    /// `Keys::check_writable` of the name `name` in the directory `parent`.
    fn check_writable_in(&self, parent: u64, name: &str) -> Result<()> {
        match self.ns.path(parent) {
            Some(path) => self
                .keys
                .check_writable(&format!("{}{name}", self.keys.dir_prefix(&path))),
            None => self.keys.check_writable(""),
        }
    }

    fn node_attr(&self, ino: u64, n: &crate::inode::Node) -> Attr {
        let mut a = self.shown.attr(ino, &n.entry);
        if let Some(st) = self.wb.stat(ino) {
            let p = n.entry.posix().unwrap_or_default();
            a.size = st.size;
            a.mtime = st.mtime;
            a.atime = p.atime.unwrap_or(st.mtime);
            // The later of the node's last change (chmod) and the staged file's (write).
            a.ctime = a.ctime.max(st.ctime);
        }
        if n.is_unlinked() {
            a.nlink = 0;
        } else if n.entry.kind != Kind::Dir {
            a.nlink = n.nlink();
        } else if let Some(dirs) = n.subdirs() {
            // Each subdirectory's `..`, as a local file system counts it, where this
            // mount keeps the directory's listing (no request for it).
            a.nlink = 2 + dirs as u32;
        }
        a
    }

    /// The attributes `ino` has now.
    fn attr_now(&self, ino: u64) -> Result<Attr> {
        let attr = self.ns.read(ino, |n| self.node_attr(ino, n));
        attr.ok_or(FsError::NotFound)
    }
}
