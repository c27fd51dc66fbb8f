//! The file system core: every operation as an async function over the object client,
//! with no FUSE and no HTTP types. The FUSE adapter and the unit tests both call this.
//! This file holds the state and the read-only name space (lookup, getattr, readdir);
//! `open` the life of an open file and its reads, `upload` write-back, `namespace` the
//! operations that change names.

mod attrs;
mod direct;
mod ends;
mod locks;
mod namespace;
mod open;
mod pages;
mod remote;
mod rename;
mod status;
mod unstaged;
mod upload;
mod walk;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use flowfs_client::{ClientError, ObjectClient, ObjectInfo, ObjectMeta};
use parking_lot::Mutex;

use crate::cache::DiskCache;
use crate::config::FsConfig;
use crate::error::{FsError, Result};
use crate::inode::{Entry, Inodes, Kind, Listing, ROOT};
use crate::prefetch::{Prefetcher, Reader};
pub use crate::writeback::PendingState;
use crate::writeback::{
    download_into, send_early, upload_file, Early, NewFile, StagedFile, Staging, UploadSlots,
    WriteBack,
};
use attrs::MetaWrites;
pub use attrs::{Attr, AttrChanges, DirItem};
use direct::Access;
pub use direct::{Backing, BackingKey};
use locks::InodeLocks;
use remote::{batched, percent_encode};
pub use status::{Failure, PendingFile, Recovery, Status};
pub use walk::{ReadAhead, WalkStats};

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

/// Metadata key that marks an object as a symbolic link; its value is the target,
/// percent-encoded, and the object's content is the plain target too.
pub const SYMLINK_META: &str = "flowfs-symlink";
/// Largest directory that is listed again instead of asking for single names.
const RELIST_MAX: usize = 10_000;
/// Files fetched ahead of a reader that opens a directory's files in listing order.
const SIBLING_PREFETCH: usize = 64;
/// Longest object key the store accepts: 1,024 bytes on S3. A longer name is refused
/// with ENAMETOOLONG before anything is staged; an upload to such a key could never
/// succeed, and it used to stay in the journal failing every later mount.
const MAX_KEY: usize = 1024;
/// Longest target a symlink may have (PATH_MAX).
const MAX_SYMLINK: u64 = 4096;

#[derive(Clone)]
enum Handle {
    /// Reads of an object through the cache; `_backing`: its cached bytes, pinned (held,
    /// never read) as long as the handle lives, while the kernel reads them itself.
    Remote {
        ino: u64,
        reader: Arc<Reader>,
        _backing: Option<Backing>,
    },
    /// A reader of an empty object: nothing to fetch, so no cache entry either (making
    /// one costs five file system calls in the cache dir; issue 27).
    Empty { ino: u64 },
    /// A writer of an object not staged yet (opened without O_TRUNC): it reads the
    /// bucket through `reader` until its first change stages the object (unstaged.rs).
    Unstaged { ino: u64, reader: Arc<Reader> },
    /// A file whose content is staged on local disk.
    Local {
        ino: u64,
        staged: Arc<StagedFile>,
        access: Access,
    },
}

/// A directory's entries in listing order, indexed by readdir's offset.
type Items = Vec<(Arc<str>, Entry)>;

struct DirHandle {
    ino: u64,
    items: Option<Arc<Items>>,
    /// When the listing behind `items` was taken.
    at: Option<Instant>,
}

/// The file system over one bucket prefix: every FUSE operation is a method, with no FUSE
/// or HTTP types.
pub struct Fs {
    cfg: FsConfig,
    /// Directories have no time of their own in S3: they show the mount time.
    started: SystemTime,
    client: Arc<dyn ObjectClient>,
    cache: Arc<DiskCache>,
    inodes: Mutex<Inodes>,
    files: Mutex<HashMap<u64, Handle>>,
    dirs: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<DirHandle>>>>,
    next_fh: AtomicU64,
    /// Reads from the store: read-ahead, GETs, the prefetch of a directory's next files.
    prefetch: Arc<Prefetcher>,
    /// Bounds on the bytes uploads hold in memory.
    slots: UploadSlots,
    /// Every staged file and where it stands on its way to the bucket.
    wb: WriteBack,
    /// Keys recovered from the journal of a mount that died.
    recovered: Mutex<Vec<String>>,
    /// Per inode: one download of an object opened for modification at a time.
    fills: InodeLocks,
    /// Held shared by each upload, exclusively by a directory rename: an upload below a
    /// directory that moves must neither land nor start while its objects are copied.
    dir_moves: tokio::sync::RwLock<()>,
    /// chmod, chown and utimens of objects already in the bucket, on their way there.
    meta_writes: MetaWrites,
    /// Per inode: a rename, an unlink and a metadata rewrite never overlap.
    keys: InodeLocks,
    /// Listings fetched ahead of directory walks.
    walks: walk::Walks,
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

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

impl Fs {
    /// Opens the cache and the staging directory of `cfg.cache_dir`; nothing is sent to the
    /// store.
    pub fn new(cfg: FsConfig, client: Arc<dyn ObjectClient>) -> Result<Fs> {
        // Room for one sequential reader's whole read-ahead window, plus a part either side.
        let read_memory = cfg.max_readahead + 2 * cfg.part_size;
        let cache = DiskCache::open(&cfg.cache_dir, cfg.cache_size, read_memory)
            .map_err(|e| FsError::disk(format!("cache dir {}", cfg.cache_dir.display()), e))?
            .with_min_free(cfg.cache_min_free);
        let staging = Staging::open(&cfg.cache_dir).map_err(|e| {
            FsError::disk(format!("staging dir under {}", cfg.cache_dir.display()), e)
        })?;
        let cache = Arc::new(cache);
        Ok(Fs {
            prefetch: Arc::new(Prefetcher::new(&cfg, client.clone(), cache.clone())),
            slots: UploadSlots::new(cfg.max_uploads),
            wb: WriteBack::new(staging),
            recovered: Mutex::new(Vec::new()),
            fills: InodeLocks::default(),
            dir_moves: tokio::sync::RwLock::new(()),
            meta_writes: MetaWrites::default(),
            keys: InodeLocks::default(),
            walks: walk::Walks::default(),
            started: SystemTime::now(),
            cfg,
            client,
            cache,
            inodes: Mutex::new(Inodes::new()),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        })
    }

    /// The settings this mount was built with.
    pub fn config(&self) -> &FsConfig {
        &self.cfg
    }

    fn attr(&self, ino: u64, e: &Entry) -> Attr {
        let (perm, size) = match e.kind {
            Kind::Dir => (self.cfg.dir_mode, 0),
            Kind::File | Kind::Special(_) => (self.cfg.file_mode, e.size),
            Kind::Symlink => (0o777, e.target.as_ref().map_or(e.size, |t| t.len() as u64)),
        };
        // What the object's metadata (or this mount) says, else the mount's defaults.
        let p = e.posix().unwrap_or_default();
        let mtime = e.shown_mtime();
        Attr {
            ino,
            kind: e.kind,
            size,
            mtime,
            atime: p.atime.unwrap_or(mtime),
            ctime: p.ctime.unwrap_or(mtime),
            perm: p.perm().filter(|_| e.kind != Kind::Symlink).unwrap_or(perm),
            uid: p.uid.unwrap_or(self.cfg.uid),
            gid: p.gid.unwrap_or(self.cfg.gid),
            nlink: if e.kind == Kind::Dir { 2 } else { 1 },
            rdev: p.rdev.unwrap_or(0),
        }
    }

    /// Refuses a path whose key (with a directory marker's `/` for `dir`) the store
    /// cannot hold.
    fn check_key(&self, path: &str, dir: bool) -> Result<()> {
        if self.cfg.prefix.len() + path.len() + usize::from(dir) > MAX_KEY {
            return Err(FsError::NameTooLong);
        }
        Ok(())
    }

    fn key(&self, path: &str) -> String {
        format!("{}{}", self.cfg.prefix, path)
    }

    fn dir_prefix(&self, path: &str) -> String {
        if path.is_empty() {
            self.cfg.prefix.clone()
        } else {
            format!("{}{}/", self.cfg.prefix, path)
        }
    }

    /// The attributes of `name` in `parent`, asking the store if the cached answer is older
    /// than the TTL; counts a kernel reference.
    pub async fn lookup(self: &Arc<Self>, parent: u64, name: &str) -> Result<Attr> {
        valid_name(name)?;
        self.refresh_direct(None);
        let (path, marker, was_dir) = {
            let mut t = self.inodes.lock();
            let p = t.get(parent).ok_or(FsError::NotFound)?;
            if p.entry.kind != Kind::Dir {
                return Err(FsError::NotDir);
            }
            if let Some(ino) = t.child(parent, name) {
                let fresh = t.get(ino).is_some_and(|n| n.fresh(self.cfg.metadata_ttl));
                // A staged file is what this mount made of the name: the bucket's copy is
                // older until the upload (a HEAD of a file created and then renamed here
                // finds nothing).
                if fresh || self.wb.stat(ino).is_some() {
                    return self.counted(&mut t, ino);
                }
            }
            let path = join(&t.path(parent).ok_or(FsError::NotFound)?, name);
            self.check_key(&path, false)?;
            let p = t.get(parent).ok_or(FsError::NotFound)?;
            match p.cached_child(name, self.cfg.metadata_ttl) {
                Some(Some((e, at))) => {
                    let ino = t.upsert(parent, name, &e, Some(at));
                    return self.counted(&mut t, ino);
                }
                Some(None) => return Err(FsError::NotFound),
                None => {}
            }
            let node = t.child(parent, name).and_then(|c| t.get(c));
            let was_dir = node.is_some_and(|n| n.entry.kind == Kind::Dir);
            // A directory known here does not read its marker again.
            let known = node.and_then(|n| n.entry.posix());
            (path, known.is_none_or(|p| p.mode.is_none()), was_dir)
        };
        let (found, at) = self
            .ask_store(parent, name, &path, (marker, was_dir))
            .await?;
        let mut t = self.inodes.lock();
        match found {
            Some(e) => {
                let ino = t.upsert(parent, name, &e, Some(at));
                self.counted(&mut t, ino)
            }
            None => {
                t.add_negative(parent, name);
                Err(FsError::NotFound)
            }
        }
    }

    fn counted(&self, t: &mut Inodes, ino: u64) -> Result<Attr> {
        let n = t.get_mut(ino).ok_or(FsError::NotFound)?;
        n.looked_up();
        self.attr_of(t, ino)
    }

    /// The kernel dropped `n` references to `ino`; a node neither referenced nor open goes.
    pub fn forget(&self, ino: u64, n: u64) {
        self.inodes.lock().forget(ino, n);
    }

    /// The attributes of `ino`; a file not open is confirmed with the store once the TTL
    /// has passed (a directory by the lookups of its parent).
    pub async fn getattr(self: &Arc<Self>, ino: u64) -> Result<Attr> {
        self.refresh_direct(Some(ino));
        let path = {
            let t = self.inodes.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            // Directories are confirmed by the lookups of their parent; a staged file is
            // newer than the bucket's copy.
            if n.fresh(self.cfg.metadata_ttl)
                || n.entry.kind == Kind::Dir
                || n.is_open()
                || self.wb.stat(ino).is_some()
            {
                return Ok(self.node_attr(ino, n));
            }
            t.path(ino).ok_or(FsError::NotFound)?
        };
        self.revalidate(ino, &path).await
    }

    async fn revalidate(self: &Arc<Self>, ino: u64, path: &str) -> Result<Attr> {
        let (parent, name) = {
            let t = self.inodes.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            (n.parent(), n.name().clone())
        };
        let (found, at) = self.ask_store(parent, &name, path, (false, false)).await?;
        let mut t = self.inodes.lock();
        let n = t.get_mut(ino).ok_or(FsError::NotFound)?;
        match found {
            Some(e) if e.kind == n.entry.kind => {
                if n.validated().is_some_and(|v| at >= v) {
                    n.entry.refresh(&e);
                    n.confirm(at);
                }
                Ok(self.node_attr(ino, n))
            }
            Some(_) => Err(FsError::Stale),
            None => Err(FsError::NotFound),
        }
    }

    /// The target of symlink `ino`.
    pub async fn readlink(&self, ino: u64) -> Result<String> {
        let t = self.inodes.lock();
        let n = t.get(ino).ok_or(FsError::NotFound)?;
        match (&n.entry.kind, &n.entry.target) {
            (Kind::Symlink, Some(target)) => Ok(target.to_string()),
            _ => Err(FsError::Invalid("not a symlink")),
        }
    }

    /// A handle for reading directory `ino`; its listing is taken at the first readdir.
    pub fn opendir(&self, ino: u64) -> Result<u64> {
        let t = self.inodes.lock();
        let n = t.get(ino).ok_or(FsError::NotFound)?;
        if n.entry.kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        drop(t);
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().insert(
            fh,
            Arc::new(tokio::sync::Mutex::new(DirHandle {
                ino,
                items: None,
                at: None,
            })),
        );
        Ok(fh)
    }

    /// Drops a directory handle and the listing it holds.
    pub fn releasedir(&self, fh: u64) {
        self.dirs.lock().remove(&fh);
    }

    /// The entries of a directory, from the listing cache while it is fresh.
    async fn listing(&self, ino: u64) -> Result<Listing> {
        let l = self.listing_within(ino, usize::MAX).await?;
        l.ok_or_else(|| FsError::Internal("a listing without a page bound gave up".into()))
    }

    /// `listing`, or `None` for a directory listed anew that has more than `max_pages`
    /// pages of keys (nothing is kept of it then).
    async fn listing_within(&self, ino: u64, max_pages: usize) -> Result<Option<Listing>> {
        let fresh = |t: &Inodes| {
            t.get(ino)
                .and_then(|n| n.fresh_listing(self.cfg.metadata_ttl).cloned())
        };
        let lock = {
            let mut t = self.inodes.lock();
            if let Some(l) = fresh(&t) {
                return Ok(Some(l));
            }
            t.get_mut(ino).ok_or(FsError::NotFound)?.list_lock()
        };
        // Concurrent lookups in one directory share a single listing.
        let _guard = lock.lock().await;
        let path = {
            let t = self.inodes.lock();
            if let Some(l) = fresh(&t) {
                return Ok(Some(l));
            }
            t.path(ino).ok_or(FsError::NotFound)?
        };
        let at = Instant::now();
        let Some((mut entries, marker, marked)) = self.list_remote(ino, &path, max_pages).await?
        else {
            return Ok(None);
        };
        let mut t = self.inodes.lock();
        if let Some(n) = t.get_mut(ino) {
            n.set_marked(marked);
            if let Some(p) = marker {
                n.entry.set_posix(Some(p.merged_over(n.entry.posix())));
            }
        }
        // The LIST is a snapshot from `at`. What this mount did here since then is newer:
        // files staged and not yet in the bucket, uploads that landed while the LIST ran
        // (their nodes were confirmed after `at`), names removed after `at`.
        for (cino, n) in t.children_of(ino) {
            let staged = self.wb.stat(cino);
            if staged.is_some() || n.validated().is_none_or(|v| v > at) {
                let mut e = n.entry.clone();
                if let Some(st) = staged {
                    e.size = st.size;
                    e.mtime = st.mtime;
                }
                entries.insert(n.name().to_string(), e);
            }
        }
        if let Some(n) = t.get_mut(ino) {
            for name in n.negatives_after(at) {
                entries.remove(&name);
            }
        }
        let listing = Listing {
            at,
            // Rebuilt in one pass: a B-tree filled by inserts in key order leaves its
            // nodes about half full, one built from sorted entries fills them (measured
            // on the scale probe at 100,000 files: 571 -> 485 bytes per file seen).
            entries: Arc::new(entries.into_iter().map(|(k, v)| (k.into(), v)).collect()),
        };
        t.set_listing(ino, Some(listing.clone()));
        Ok(Some(listing))
    }

    /// What `parent/name` is, asked of the store (`marker`: read a directory's marker;
    /// `was_dir`: this mount knows the name as a directory). A parent listed before and
    /// small enough is listed again, so that the lookups after this one are answered from
    /// memory (`ls -l`, `cp -r` and globbing in work directories). A name that listing
    /// had waits for it: a reader walking the directory, whose next names it answers all
    /// at once (asking each name as well cost B1s, 10,000 files at 20 ms, 1,600 requests
    /// and a tenth more time). A name it lacked (a create, mostly) takes whichever answers
    /// first, the listing or a HEAD and a one-key LIST of the name: waiting for the
    /// listing alone stalled a loop of creates 180-350 ms once a TTL (a LIST of 1,000
    /// keys takes about 200 ms on SeaweedFS here).
    async fn ask_store(
        self: &Arc<Self>,
        parent: u64,
        name: &str,
        path: &str,
        (marker, was_dir): (bool, bool),
    ) -> Result<(Option<Entry>, Instant)> {
        let by_name = async {
            let at = Instant::now();
            let found = if was_dir {
                self.stat_remote_dir(path, marker).await?
            } else {
                self.stat_remote(path, marker).await?
            };
            Ok((found, at))
        };
        match self.listed_before(parent, name) {
            None => by_name.await,
            Some(true) => {
                let l = self.listing(parent).await?;
                Ok((l.entries.get(name).cloned(), l.at))
            }
            Some(false) => {
                self.relist_behind(parent);
                tokio::select! {
                    biased;
                    l = self.listing_when_relisted(parent) => {
                        Ok((l.entries.get(name).cloned(), l.at))
                    }
                    r = by_name => r,
                }
            }
        }
    }

    /// Whether `parent`'s last listing had `name` (one dropped to bound memory counts as
    /// having it); `None` when it is not listed again (never listed, too big, or
    /// `--metadata-ttl 0`: no listing is used twice).
    fn listed_before(&self, parent: u64, name: &str) -> Option<bool> {
        if self.cfg.metadata_ttl.is_zero() {
            return None;
        }
        let t = self.inodes.lock();
        let p = t.get(parent)?;
        if p.listed_len()? > RELIST_MAX {
            return None;
        }
        Some(p.listing().is_none_or(|l| l.entries.contains_key(name)))
    }

    /// Lists `parent` again in a task of its own; a listing already under way is joined,
    /// not repeated.
    fn relist_behind(self: &Arc<Self>, parent: u64) {
        let Some(lock) = self.inodes.lock().get_mut(parent).map(|p| p.list_lock()) else {
            return;
        };
        if lock.try_lock().is_ok() {
            let fs = self.clone();
            tokio::spawn(async move {
                // Its error reaches the lookups that wait for it no more than its answer:
                // they have their own.
                let _ = fs.listing(parent).await;
            });
        }
    }

    /// The listing of `parent` once the one under way ends; never ready if that one
    /// failed (the lookup's own request answers then).
    async fn listing_when_relisted(&self, parent: u64) -> Listing {
        let lock = self.inodes.lock().get_mut(parent).map(|p| p.list_lock());
        if let Some(lock) = lock {
            let _guard = lock.lock().await;
            let t = self.inodes.lock();
            let fresh = t
                .get(parent)
                .and_then(|p| p.fresh_listing(self.cfg.metadata_ttl));
            if let Some(l) = fresh {
                return l.clone();
            }
        }
        std::future::pending().await
    }

    /// Items from `offset` on. With `plus`, each item but `.` and `..` carries its
    /// attributes and counts as a lookup; the caller forgets the ones it could not send.
    pub async fn readdir(
        self: &Arc<Self>,
        ino: u64,
        fh: u64,
        offset: u64,
        plus: bool,
    ) -> Result<Vec<DirItem>> {
        if plus {
            self.refresh_direct(None);
        }
        let handle = self
            .dirs
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(FsError::BadHandle)?;
        let mut h = handle.lock().await;
        if h.ino != ino {
            return Err(FsError::BadHandle);
        }
        if offset == 0 || h.items.is_none() {
            let listing = self.listing(ino).await?;
            if offset == 0 {
                self.walk_ahead(ino, &listing);
            }
            h.at = Some(listing.at);
            h.items = Some(Arc::new(
                listing
                    .entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ));
        }
        let items = h.items.clone().unwrap_or_default();
        let mut t = self.inodes.lock();
        let dir_entry = t.get(ino).ok_or(FsError::NotFound)?.entry.clone();
        let parent = t.get(ino).map_or(ROOT, |n| n.parent());
        let mut out = Vec::new();
        for (i, name) in [".", ".."].iter().enumerate() {
            if offset <= i as u64 {
                let dino = if i == 0 { ino } else { parent };
                out.push(DirItem {
                    next: i as u64 + 1,
                    name: name.to_string(),
                    ino: dino,
                    kind: Kind::Dir,
                    attr: plus.then(|| self.attr(dino, &dir_entry)),
                });
            }
        }
        let at = Some(h.at.unwrap_or_else(Instant::now));
        for (i, (name, e)) in items
            .iter()
            .enumerate()
            .skip(offset.saturating_sub(2) as usize)
        {
            let (cino, attr) = if plus {
                let cino = t.upsert(ino, name.clone(), e, at);
                (cino, Some(self.counted(&mut t, cino)?))
            } else {
                (t.child(ino, name).unwrap_or(u64::MAX - i as u64), None)
            };
            out.push(DirItem {
                next: i as u64 + 3,
                name: name.to_string(),
                ino: cino,
                kind: e.kind,
                attr,
            });
        }
        Ok(out)
    }

    fn check_writable(&self) -> Result<()> {
        if self.cfg.read_only {
            return Err(FsError::ReadOnly);
        }
        Ok(())
    }

    fn node_attr(&self, ino: u64, n: &crate::inode::Node) -> Attr {
        let mut a = self.attr(ino, &n.entry);
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
        } else if let Some(dirs) = n.subdirs() {
            // Each subdirectory's `..`, as a local file system counts it, where this
            // mount keeps the directory's listing (no request for it).
            a.nlink = 2 + dirs as u32;
        }
        a
    }

    fn attr_of(&self, t: &Inodes, ino: u64) -> Result<Attr> {
        let n = t.get(ino).ok_or(FsError::NotFound)?;
        Ok(self.node_attr(ino, n))
    }

    /// Records a name in the parent's cached listing so that lookups of it need no request.
    fn listing_put(t: &mut Inodes, parent: u64, name: &str, e: Option<Entry>) {
        t.listing_put(parent, name, e);
    }

    /// An entry was added to, removed from or renamed in `dir` through this mount: its
    /// mtime and ctime are now, as on a local file system. Kept in memory only (a marker's
    /// metadata is not rewritten for it).
    fn entries_changed(t: &mut Inodes, dir: u64) {
        if let Some(n) = t.get_mut(dir) {
            let now = SystemTime::now();
            n.entry.mtime = now;
            let p = n.entry.posix_mut();
            p.mtime = Some(now);
            p.ctime = Some(now);
        }
    }

    /// Saves what must survive a restart (cache bitmaps); called at unmount.
    pub fn shutdown(&self) {
        self.cache.close();
        self.wb.staging().close();
    }
}
