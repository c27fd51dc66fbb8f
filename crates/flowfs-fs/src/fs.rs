//! The file system core: every operation as an async function over the object client,
//! with no FUSE and no HTTP types. The FUSE adapter and the unit tests both call this.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use flowfs_client::{ClientError, ObjectClient, ObjectInfo, ObjectMeta};
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use crate::cache::{CacheEntry, DiskCache, Fetch, CHUNK};
use crate::config::FsConfig;
use crate::early::Early;
use crate::error::{FsError, Result};
use crate::inode::{Entry, Inodes, Kind, Listing, ROOT};
use crate::read::SeqState;
use crate::stamp::Stamps;
use crate::write::{download_into, upload_file, Staged, Staging, UploadSlots};

/// What the kernel may skip for an open handle.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OpenHints {
    /// Keep the pages cached for the inode: the object's ETag is unchanged since.
    pub keep_cache: bool,
    /// No `flush` at close: the handle has no upload whose error close must report.
    pub no_flush: bool,
}

/// Metadata key that marks an object as a symbolic link; its value is the target,
/// percent-encoded, and the object's content is the plain target too.
pub const SYMLINK_META: &str = "flowfs-symlink";
/// Largest directory that is listed again instead of asking for single names.
const RELIST_MAX: usize = 10_000;
/// Files fetched ahead of a reader that opens a directory's files in listing order.
const SIBLING_PREFETCH: usize = 64;
/// Longest target a symlink may have (PATH_MAX).
const MAX_SYMLINK: u64 = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub mtime: SystemTime,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
}

#[derive(Debug, Clone)]
pub struct DirItem {
    /// Offset of the item after this one, as readdir wants it.
    pub next: u64,
    pub name: String,
    pub ino: u64,
    pub kind: Kind,
    /// Set by `readdir(plus = true)`, which counts a lookup for every such item.
    pub attr: Option<Attr>,
}

struct ReadHandle {
    ino: u64,
    key: String,
    etag: Option<String>,
    size: u64,
    entry: Arc<CacheEntry>,
    seq: Mutex<SeqState>,
}

#[derive(Clone)]
enum Handle {
    /// Reads of an object through the cache.
    Remote(Arc<ReadHandle>),
    /// A file whose content is staged on local disk.
    Local {
        ino: u64,
        staged: Arc<Staged>,
        write: bool,
    },
}

struct DirHandle {
    ino: u64,
    items: Option<Arc<Vec<(String, Entry)>>>,
    /// When the listing behind `items` was taken.
    at: Option<Instant>,
}

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
    gets: Arc<Semaphore>,
    /// Bounds on the bytes uploads hold in memory.
    slots: UploadSlots,
    staging: Staging,
    /// Files whose upload failed after retries: path -> error.
    failed: Mutex<BTreeMap<String, String>>,
    /// Keys recovered from the journal of a mount that died.
    recovered: Mutex<Vec<String>>,
    /// Serializes the download of remote files that are opened for modification.
    fill: tokio::sync::Mutex<()>,
    /// Held shared by each upload, exclusively by a directory rename: an upload below a
    /// directory that moves must neither land nor start while its objects are copied.
    dir_moves: tokio::sync::RwLock<()>,
    stamps: Arc<Stamps>,
    /// A cache write failed (and was logged at warn level) in this mount.
    cache_write_warned: AtomicBool,
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

pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x21..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Only small objects written as single-part multipart uploads can be flowfs symlinks
/// (that is how flowfs writes them), so a listing needs a HEAD for those alone.
fn maybe_symlink(info: &ObjectInfo) -> bool {
    info.size <= MAX_SYMLINK && info.etag.trim_matches('"').ends_with("-1")
}

fn file_entry(info: &ObjectInfo) -> Entry {
    Entry {
        kind: Kind::File,
        size: info.size,
        mtime: info.last_modified,
        etag: Some(info.etag.clone()),
        target: None,
    }
}

/// ETags compared without the quotes some servers and SDKs keep around them.
fn same_etag(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.trim_matches('"') == b.trim_matches('"'),
        _ => false,
    }
}

fn meta_entry(meta: &ObjectMeta) -> Entry {
    let mut e = file_entry(&meta.info);
    if let Some(t) = meta.metadata.get(SYMLINK_META) {
        e.kind = Kind::Symlink;
        e.target = Some(percent_decode(t));
    }
    e
}

impl Fs {
    pub fn new(cfg: FsConfig, client: Arc<dyn ObjectClient>) -> Result<Fs> {
        // Room for one sequential reader's whole read-ahead window, plus a part either side.
        let read_memory = cfg.max_readahead + 2 * cfg.part_size;
        let cache = DiskCache::open(&cfg.cache_dir, cfg.cache_size, read_memory)
            .map_err(|e| FsError::Io(format!("cache dir {}: {e}", cfg.cache_dir.display())))?
            .with_min_free(cfg.cache_min_free);
        let staging = Staging::open(&cfg.cache_dir).map_err(|e| {
            FsError::Io(format!(
                "staging dir under {}: {e}",
                cfg.cache_dir.display()
            ))
        })?;
        Ok(Fs {
            gets: Arc::new(Semaphore::new(cfg.max_gets.max(1))),
            slots: UploadSlots::new(cfg.max_uploads),
            staging,
            failed: Mutex::new(BTreeMap::new()),
            recovered: Mutex::new(Vec::new()),
            fill: tokio::sync::Mutex::new(()),
            dir_moves: tokio::sync::RwLock::new(()),
            stamps: Arc::new(Stamps::default()),
            started: SystemTime::now(),
            cfg,
            client,
            cache: Arc::new(cache),
            inodes: Mutex::new(Inodes::new()),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            cache_write_warned: AtomicBool::new(false),
        })
    }

    pub fn config(&self) -> &FsConfig {
        &self.cfg
    }

    fn attr(&self, ino: u64, e: &Entry) -> Attr {
        let (perm, size) = match e.kind {
            Kind::Dir => (self.cfg.dir_mode, 0),
            Kind::File => (self.cfg.file_mode, e.size),
            Kind::Symlink => (0o777, e.target.as_ref().map_or(e.size, |t| t.len() as u64)),
        };
        Attr {
            ino,
            kind: e.kind,
            size,
            mtime: e.mtime,
            perm,
            uid: self.cfg.uid,
            gid: self.cfg.gid,
        }
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

    /// What the server holds at `path`: a directory (a common prefix or a `dir/`
    /// marker) wins over an object of the same name.
    async fn stat_remote(&self, path: &str) -> Result<Option<Entry>> {
        let key = self.key(path);
        let dir = format!("{key}/");
        let (head, list) = tokio::join!(
            self.client.head(&key),
            self.client.list_page(&dir, Some("/"), None, Some(1))
        );
        let list = list?;
        if !list.objects.is_empty() || !list.prefixes.is_empty() {
            return Ok(Some(Entry::dir(self.started)));
        }
        match head {
            Ok(meta) => Ok(Some(meta_entry(&meta))),
            Err(ClientError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Every entry of a directory, all listing pages, with symlinks resolved.
    async fn list_remote(&self, ino: u64, path: &str) -> Result<BTreeMap<String, Entry>> {
        let prefix = self.dir_prefix(path);
        let mut entries = BTreeMap::new();
        let mut candidates = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .client
                .list_page(&prefix, Some("/"), token, None)
                .await?;
            for p in &page.prefixes {
                let name = &p[prefix.len()..p.len() - 1];
                if valid_name(name).is_ok() {
                    entries.insert(name.to_string(), Entry::dir(self.started));
                }
            }
            for o in &page.objects {
                let name = &o.key[prefix.len()..];
                if valid_name(name).is_err() {
                    continue;
                }
                if entries
                    .get(name)
                    .is_some_and(|e: &Entry| e.kind == Kind::Dir)
                {
                    continue;
                }
                if maybe_symlink(o) {
                    candidates.push((name.to_string(), o.key.clone()));
                }
                entries.insert(name.to_string(), file_entry(o));
            }
            token = page.next_token;
            if token.is_none() {
                break;
            }
        }
        // An object listed before the prefix of the same name was replaced above only
        // if the prefix came later; drop candidates that turned out to be directories.
        candidates.retain(|(n, _)| entries.get(n).is_some_and(|e| e.kind != Kind::Dir));
        // A symlink this mount already knows under the same ETag needs no HEAD: a
        // pipeline's task directories hold many (Nextflow stages inputs as symlinks).
        {
            let t = self.inodes.lock();
            candidates.retain(|(name, _)| {
                let known = t
                    .child(ino, name)
                    .and_then(|c| t.get(c))
                    .filter(|n| n.entry.kind == Kind::Symlink && n.entry.target.is_some())
                    .map(|n| n.entry.clone());
                let Some(listed) = entries.get_mut(name) else {
                    return false;
                };
                match known {
                    Some(k) if same_etag(k.etag.as_deref(), listed.etag.as_deref()) => {
                        listed.kind = Kind::Symlink;
                        listed.target = k.target;
                        false
                    }
                    _ => true,
                }
            });
        }
        for batch in candidates.chunks(32) {
            let mut set = tokio::task::JoinSet::new();
            for (name, key) in batch {
                let client = self.client.clone();
                let (name, key) = (name.clone(), key.clone());
                set.spawn(async move { (name, client.head(&key).await) });
            }
            while let Some(r) = set.join_next().await {
                let (name, head) = r.map_err(|e| FsError::Io(e.to_string()))?;
                match head {
                    Ok(meta) => {
                        entries.insert(name, meta_entry(&meta));
                    }
                    Err(ClientError::NotFound(_)) => {
                        entries.remove(&name);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(entries)
    }

    pub async fn lookup(&self, parent: u64, name: &str) -> Result<Attr> {
        valid_name(name)?;
        let path = {
            let mut t = self.inodes.lock();
            let p = t.get(parent).ok_or(FsError::NotFound)?;
            if p.entry.kind != Kind::Dir {
                return Err(FsError::NotDir);
            }
            if let Some(ino) = t.child(parent, name) {
                if let Some(n) = t.get_mut(ino) {
                    if n.fresh(self.cfg.metadata_ttl) {
                        n.lookups += 1;
                        return self.attr_of(&t, ino);
                    }
                }
            }
            let p = t.get(parent).ok_or(FsError::NotFound)?;
            match p.cached_child(name, self.cfg.metadata_ttl) {
                Some(Some((e, at))) => {
                    let ino = t.upsert(parent, name, &e, Some(at));
                    return self.counted(&mut t, ino);
                }
                Some(None) => return Err(FsError::NotFound),
                None => {}
            }
            join(&t.path(parent).ok_or(FsError::NotFound)?, name)
        };
        let (found, at) = match self.via_listing(parent, name).await? {
            Some(f) => f,
            None => {
                let at = Instant::now();
                (self.stat_remote(&path).await?, at)
            }
        };
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
        n.lookups += 1;
        self.attr_of(t, ino)
    }

    pub fn forget(&self, ino: u64, n: u64) {
        self.inodes.lock().forget(ino, n);
    }

    pub async fn getattr(&self, ino: u64) -> Result<Attr> {
        let path = {
            let t = self.inodes.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            // Directories are confirmed by the lookups of their parent.
            if n.fresh(self.cfg.metadata_ttl) || n.entry.kind == Kind::Dir || n.open > 0 {
                return Ok(self.node_attr(ino, n));
            }
            t.path(ino).ok_or(FsError::NotFound)?
        };
        self.revalidate(ino, &path).await
    }

    async fn revalidate(&self, ino: u64, path: &str) -> Result<Attr> {
        let (parent, name) = {
            let t = self.inodes.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            (n.parent, n.name.clone())
        };
        let (found, at) = match self.via_listing(parent, &name).await? {
            Some(f) => f,
            None => {
                let at = Instant::now();
                (self.stat_remote(path).await?, at)
            }
        };
        let mut t = self.inodes.lock();
        let n = t.get_mut(ino).ok_or(FsError::NotFound)?;
        match found {
            Some(e) if e.kind == n.entry.kind => {
                if n.validated.is_some_and(|v| at >= v) {
                    n.entry = e;
                    n.validated = Some(at);
                }
                Ok(self.node_attr(ino, n))
            }
            Some(_) => Err(FsError::Stale),
            None => Err(FsError::NotFound),
        }
    }

    pub async fn readlink(&self, ino: u64) -> Result<String> {
        let t = self.inodes.lock();
        let n = t.get(ino).ok_or(FsError::NotFound)?;
        match (&n.entry.kind, &n.entry.target) {
            (Kind::Symlink, Some(target)) => Ok(target.clone()),
            _ => Err(FsError::Invalid("not a symlink")),
        }
    }

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

    pub fn releasedir(&self, fh: u64) {
        self.dirs.lock().remove(&fh);
    }

    /// The entries of a directory, from the listing cache while it is fresh.
    async fn listing(&self, ino: u64) -> Result<Listing> {
        let fresh = |t: &Inodes| {
            t.get(ino)
                .and_then(|n| n.listing.clone())
                .filter(|l| l.at.elapsed() < self.cfg.metadata_ttl)
        };
        let lock = {
            let t = self.inodes.lock();
            if let Some(l) = fresh(&t) {
                return Ok(l);
            }
            t.get(ino).ok_or(FsError::NotFound)?.list_lock.clone()
        };
        // Concurrent lookups in one directory share a single listing.
        let _guard = lock.lock().await;
        let path = {
            let t = self.inodes.lock();
            if let Some(l) = fresh(&t) {
                return Ok(l);
            }
            t.path(ino).ok_or(FsError::NotFound)?
        };
        let at = Instant::now();
        let mut entries = self.list_remote(ino, &path).await?;
        let mut t = self.inodes.lock();
        // The LIST is a snapshot from `at`. What this mount did here since then is newer:
        // files staged and not yet in the bucket, uploads that landed while the LIST ran
        // (their nodes were confirmed after `at`), names removed after `at`.
        for (cino, n) in t.nodes.iter() {
            if n.parent == ino
                && (n.staged.is_some() || n.validated.is_none_or(|v| v > at))
                && t.child(ino, &n.name) == Some(*cino)
            {
                let mut e = n.entry.clone();
                if let Some(s) = &n.staged {
                    e.size = s.st.lock().size;
                }
                entries.insert(n.name.clone(), e);
            }
        }
        if let Some(n) = t.get_mut(ino) {
            for (name, when) in &n.negative {
                if *when > at {
                    entries.remove(name);
                }
            }
            n.negative.retain(|_, when| *when > at);
        }
        let listing = Listing {
            at,
            entries: Arc::new(entries),
        };
        if let Some(n) = t.get_mut(ino) {
            n.listing = Some(listing.clone());
        }
        Ok(listing)
    }

    /// What `parent/name` is, from a fresh listing of the parent when the parent was
    /// listed before and is small enough that one listing is cheaper than a HEAD and a
    /// LIST per name (`ls -l`, `cp -r` and globbing in work directories).
    async fn via_listing(
        &self,
        parent: u64,
        name: &str,
    ) -> Result<Option<(Option<Entry>, Instant)>> {
        let listed = {
            let t = self.inodes.lock();
            t.get(parent)
                .and_then(|p| p.listing.as_ref())
                .is_some_and(|l| l.entries.len() <= RELIST_MAX)
        };
        if !listed {
            return Ok(None);
        }
        let l = self.listing(parent).await?;
        Ok(Some((l.entries.get(name).cloned(), l.at)))
    }

    /// Items from `offset` on. With `plus`, each item but `.` and `..` carries its
    /// attributes and counts as a lookup; the caller forgets the ones it could not send.
    pub async fn readdir(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        plus: bool,
    ) -> Result<Vec<DirItem>> {
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
        let parent = t.get(ino).map_or(ROOT, |n| n.parent);
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
                let cino = t.upsert(ino, name, e, at);
                (cino, Some(self.counted(&mut t, cino)?))
            } else {
                (t.child(ino, name).unwrap_or(u64::MAX - i as u64), None)
            };
            out.push(DirItem {
                next: i as u64 + 3,
                name: name.clone(),
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
        if let Some(s) = &n.staged {
            a.size = s.st.lock().size;
        }
        if let Some(p) = n.perm {
            a.perm = p;
        }
        a
    }

    fn attr_of(&self, t: &Inodes, ino: u64) -> Result<Attr> {
        let n = t.get(ino).ok_or(FsError::NotFound)?;
        Ok(self.node_attr(ino, n))
    }

    /// Records a name in the parent's cached listing so that lookups of it need no request.
    fn listing_put(t: &mut Inodes, parent: u64, name: &str, e: Option<Entry>) {
        if let Some(l) = t.get_mut(parent).and_then(|p| p.listing.as_mut()) {
            let entries = Arc::make_mut(&mut l.entries);
            match e {
                Some(e) => {
                    entries.insert(name.to_string(), e);
                }
                None => {
                    entries.remove(name);
                }
            }
        }
    }

    /// Opens a file; returns the handle and what the kernel may skip for it.
    pub async fn open(
        self: &Arc<Self>,
        ino: u64,
        write: bool,
        truncate: bool,
    ) -> Result<(u64, OpenHints)> {
        if write {
            self.check_writable()?;
        }
        let (path, fresh) = {
            let t = self.inodes.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            match n.entry.kind {
                Kind::Dir => return Err(FsError::IsDir),
                Kind::Symlink => return Err(FsError::Invalid("symlink")),
                Kind::File => {}
            }
            (
                t.path(ino).ok_or(FsError::NotFound)?,
                n.fresh(self.cfg.metadata_ttl),
            )
        };
        if write {
            let staged = self
                .stage(ino, if truncate { Some(0) } else { None })
                .await?;
            staged.st.lock().writers += 1;
            return Ok((self.open_local(ino, staged, true), OpenHints::default()));
        }
        let staged = self.inodes.lock().get(ino).and_then(|n| n.staged.clone());
        if let Some(staged) = staged {
            return Ok((self.open_local(ino, staged, false), OpenHints::default()));
        }
        // Close-to-open: an open after the TTL sees the object as it is now.
        if !fresh {
            self.revalidate(ino, &path).await?;
        }
        let key = self.key(&path);
        let (etag, size, keep) = {
            let mut t = self.inodes.lock();
            let n = t.get_mut(ino).ok_or(FsError::NotFound)?;
            let etag = n.entry.etag.clone().filter(|e| !e.is_empty());
            let keep = etag.is_some() && n.page_cache_etag == etag;
            n.page_cache_etag = etag.clone();
            n.open += 1;
            (etag, n.entry.size, keep)
        };
        let version = etag.clone().unwrap_or_default();
        let entry = match self.cache.entry(&self.cfg.bucket, &key, &version, size) {
            Ok(e) => e,
            Err(e) => {
                self.close_node(ino);
                return Err(e);
            }
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let h = ReadHandle {
            ino,
            key,
            etag,
            size,
            entry,
            seq: Mutex::new(SeqState::default()),
        };
        self.files.lock().insert(fh, Handle::Remote(Arc::new(h)));
        self.prefetch_siblings(ino);
        // `flush` has nothing to report for a handle that only reads the bucket.
        Ok((
            fh,
            OpenHints {
                keep_cache: keep,
                no_flush: true,
            },
        ))
    }

    fn handle(&self, fh: u64) -> Result<Handle> {
        self.files
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(FsError::BadHandle)
    }

    fn open_local(&self, ino: u64, staged: Arc<Staged>, write: bool) -> u64 {
        if let Some(n) = self.inodes.lock().get_mut(ino) {
            n.open += 1;
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files
            .lock()
            .insert(fh, Handle::Local { ino, staged, write });
        fh
    }

    /// The staged content of a file, downloading the object first unless the caller
    /// is about to replace it (`truncate_to`).
    async fn stage(&self, ino: u64, truncate_to: Option<u64>) -> Result<Arc<Staged>> {
        let existing = self.inodes.lock().get(ino).and_then(|n| n.staged.clone());
        let staged = match existing {
            Some(s) => s,
            None => {
                let _guard = self.fill.lock().await;
                let (path, etag, size) = {
                    let t = self.inodes.lock();
                    let n = t.get(ino).ok_or(FsError::NotFound)?;
                    if let Some(s) = &n.staged {
                        (None, None, s.st.lock().size)
                    } else {
                        (
                            Some(t.path(ino).ok_or(FsError::NotFound)?),
                            n.entry.etag.clone(),
                            n.entry.size,
                        )
                    }
                };
                match path {
                    None => self
                        .inodes
                        .lock()
                        .get(ino)
                        .and_then(|n| n.staged.clone())
                        .ok_or(FsError::NotFound)?,
                    Some(path) => {
                        let staged = self.staging.create()?;
                        let keep = truncate_to.map_or(size, |t| t.min(size));
                        if keep > 0 {
                            let etag = etag.filter(|e| !e.is_empty());
                            download_into(
                                &self.client,
                                &self.key(&path),
                                etag.as_deref(),
                                size,
                                self.cfg.part_size,
                                &self.gets,
                                &staged.file,
                            )
                            .await?;
                        }
                        {
                            let mut st = staged.st.lock();
                            st.size = size;
                            // The bucket already holds this content.
                            st.gen = 1;
                            st.durable_gen = 1;
                        }
                        staged.file.set_len(size)?;
                        let mut t = self.inodes.lock();
                        let n = t.get_mut(ino).ok_or(FsError::NotFound)?;
                        n.staged = Some(staged.clone());
                        n.validated = None;
                        staged
                    }
                }
            }
        };
        if let Some(len) = truncate_to {
            if staged.st.lock().size != len || len == 0 {
                staged.set_len(len)?;
                self.journal(ino, &staged);
            }
        }
        Ok(staged)
    }

    /// Writes the journal record that makes `staged` survive a crash of this process.
    fn journal(&self, ino: u64, staged: &Staged) {
        let (key, symlink) = {
            let t = self.inodes.lock();
            let symlink = t.get(ino).is_some_and(|n| n.entry.kind == Kind::Symlink);
            (t.path(ino).map(|p| self.key(&p)), symlink)
        };
        let Some(key) = key else { return };
        let mut st = staged.st.lock();
        if st.journaled.as_deref() == Some(key.as_str()) || st.deleted {
            return;
        }
        match self
            .staging
            .journal(staged, &self.cfg.bucket, &key, symlink)
        {
            Ok(()) => st.journaled = Some(key),
            Err(e) => tracing::warn!(%key, "cannot write the journal record: {e}"),
        }
    }

    fn close_node(&self, ino: u64) {
        let mut t = self.inodes.lock();
        if let Some(n) = t.get_mut(ino) {
            n.open = n.open.saturating_sub(1);
        }
        t.remove_if_unreferenced(ino);
    }

    /// The error of a failed upload of this file, reported at close and fsync.
    pub fn flush(&self, fh: u64) -> Result<()> {
        let h = self
            .files
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(FsError::BadHandle)?;
        if let Handle::Local { staged, .. } = h {
            if let Some(e) = &staged.st.lock().error {
                return Err(FsError::Io(e.clone()));
            }
        }
        Ok(())
    }

    pub fn release(self: &Arc<Self>, fh: u64) -> Result<()> {
        let h = self.files.lock().remove(&fh).ok_or(FsError::BadHandle)?;
        match h {
            Handle::Remote(h) => {
                self.cache.release(&h.entry);
                self.close_node(h.ino);
            }
            Handle::Local { ino, staged, write } => {
                let (upload, unchanged) = {
                    let mut st = staged.st.lock();
                    if write {
                        st.writers = st.writers.saturating_sub(1);
                    }
                    let idle = st.writers == 0 && !st.uploading && !st.queued;
                    (
                        st.writers == 0 && st.dirty(),
                        idle && !st.dirty() && st.error.is_none(),
                    )
                };
                {
                    // This handle stops counting as open before the upload is queued: an
                    // upload that finishes at once must see it gone to adopt the file.
                    let mut t = self.inodes.lock();
                    if let Some(n) = t.get_mut(ino) {
                        n.open = n.open.saturating_sub(1);
                        if upload {
                            // The time of the last change, as a local file system shows.
                            n.entry.mtime = SystemTime::now();
                        } else if unchanged
                            && n.open == 0
                            && n.staged.as_ref().is_some_and(|s| Arc::ptr_eq(s, &staged))
                        {
                            // Opened for writing but never changed: the bucket's copy is
                            // current again, and the node follows the bucket as before.
                            n.entry.size = staged.st.lock().size;
                            n.staged = None;
                            n.validated = Some(Instant::now());
                            self.staging.discard(&staged);
                        }
                    }
                    t.remove_if_unreferenced(ino);
                }
                if upload {
                    self.enqueue(ino, &staged);
                }
            }
        }
        Ok(())
    }

    pub async fn read(self: &Arc<Self>, fh: u64, off: u64, len: u32) -> Result<Bytes> {
        let h = match self.handle(fh)? {
            Handle::Remote(h) => h,
            Handle::Local { staged, .. } => {
                return Ok(Bytes::from(staged.read_at(off, len as usize)?))
            }
        };
        if off >= h.size {
            return Ok(Bytes::new());
        }
        let len = (len as u64).min(h.size - off);
        let plan = h
            .seq
            .lock()
            .plan(off, len, h.size, self.cfg.part_size, self.cfg.max_readahead);
        let max_run = (self.cfg.part_size / CHUNK).max(1);
        if let Some((a, b)) = plan.ahead {
            // Far ahead of a long run, GETs of half the window: a fifth of the requests
            // of part-sized ones, and the server spends its CPU per request.
            let ahead_run = (self.cfg.max_readahead / 2 / CHUNK).max(max_run);
            self.fetch(&h, a, b, ahead_run);
        }
        for attempt in 0..4 {
            if let Some(data) = self.cache.read(&h.entry, off, len as usize)? {
                self.cache.touch(&h.entry, off, len);
                return Ok(data);
            }
            // Start what the plan wants, then wait only for the chunks asked for.
            self.fetch(&h, plan.need.0, plan.need.1, max_run);
            let claim = h
                .entry
                .claim(off / CHUNK, (off + len).div_ceil(CHUNK), max_run);
            let mut waits = claim.wait;
            for (c0, c1, f) in claim.start {
                waits.push(f.clone());
                self.spawn_fetch(&h, c0, c1, f);
            }
            for w in waits {
                // First from memory as soon as it arrives; if another reader took it
                // from there meanwhile, from the file once written.
                if attempt == 0 {
                    w.wait_ready().await?;
                } else {
                    w.wait().await?;
                }
            }
        }
        Err(FsError::Io(
            "cached data was evicted while being read; raise --cache-size".into(),
        ))
    }

    pub fn write(&self, fh: u64, off: u64, data: &[u8]) -> Result<u32> {
        let (ino, staged) = match self.handle(fh)? {
            Handle::Local {
                ino,
                staged,
                write: true,
            } => (ino, staged),
            _ => return Err(FsError::BadHandle),
        };
        if let Err(e) = staged.write_at(off, data) {
            let e = FsError::from(e);
            if !matches!(e, FsError::NoSpace(_)) {
                return Err(e);
            }
            // The task's output goes before cached data: free the disk and try once more.
            self.cache.make_room(data.len() as u64);
            staged.write_at(off, data)?;
        }
        if staged.st.lock().journaled.is_none() {
            self.journal(ino, &staged);
        }
        self.send_early(ino, &staged);
        Ok(data.len() as u32)
    }

    /// Starts the upload of the parts a front-to-back writer has left a whole part behind
    /// (the slack spares writers that patch what they have just written).
    fn send_early(&self, ino: u64, staged: &Arc<Staged>) {
        let ps = self.cfg.part_size;
        let need_key = {
            let st = staged.st.lock();
            if !st.early_ok || st.size < st.sent + 2 * ps {
                return;
            }
            st.early.is_none()
        };
        let key = if need_key {
            match self.inodes.lock().path(ino) {
                Some(p) => Some(self.key(&p)),
                None => return,
            }
        } else {
            None
        };
        let mut st = staged.st.lock();
        if !st.early_ok {
            return;
        }
        let early = match (&st.early, key) {
            (Some(e), _) => e.clone(),
            (None, Some(key)) => {
                let e = Early::new(
                    self.client.clone(),
                    &self.cfg.bucket,
                    key,
                    staged.upload_note_path(),
                );
                st.early = Some(e.clone());
                e
            }
            (None, None) => return,
        };
        while st.size >= st.sent + 2 * ps {
            let index = st.sent / ps;
            st.sent += ps;
            early.send(staged.clone(), index, ps, self.slots.parts.clone());
        }
    }

    /// Returns once the file's content as of now is durable in the bucket.
    pub async fn fsync(self: &Arc<Self>, fh: u64) -> Result<()> {
        let (ino, staged) = match self.handle(fh)? {
            Handle::Local { ino, staged, .. } => (ino, staged),
            Handle::Remote(_) => return Ok(()),
        };
        self.wait_durable(ino, &staged).await
    }

    async fn wait_durable(self: &Arc<Self>, ino: u64, staged: &Arc<Staged>) -> Result<()> {
        let target = {
            let mut st = staged.st.lock();
            st.error = None;
            st.gen
        };
        self.enqueue(ino, staged);
        loop {
            let notified = staged.done.notified();
            {
                let st = staged.st.lock();
                if st.deleted || st.durable_gen >= target && !st.uploading {
                    return Ok(());
                }
                if let Some(e) = &st.error {
                    return Err(FsError::Io(e.clone()));
                }
            }
            notified.await;
        }
    }

    /// Waits until no upload of `staged` is in flight, so that a rename or unlink never
    /// races with an upload that would land under the old name afterwards.
    async fn wait_idle(&self, staged: &Staged) {
        loop {
            let notified = staged.done.notified();
            if !staged.st.lock().uploading {
                return;
            }
            notified.await;
        }
    }

    /// Gives up a staged file whose name is removed or replaced: waits out an upload in
    /// flight (it would land after whatever replaces the name) and marks it deleted in
    /// the same step, so that no new upload starts. Returns whether the bucket may hold
    /// an object of it.
    async fn retire(&self, staged: &Staged) -> bool {
        loop {
            let notified = staged.done.notified();
            {
                let mut st = staged.st.lock();
                if !st.uploading {
                    st.deleted = true;
                    let remote = st.durable_gen > 0;
                    drop(st);
                    self.staging.discard(staged);
                    staged.done.notify_waiters();
                    return remote;
                }
            }
            notified.await;
        }
    }

    /// Starts the upload of a staged file unless one is already waiting to start.
    fn enqueue(self: &Arc<Self>, ino: u64, staged: &Arc<Staged>) {
        {
            let mut st = staged.st.lock();
            if st.queued || st.deleted {
                return;
            }
            st.queued = true;
        }
        let (fs, staged) = (self.clone(), staged.clone());
        tokio::spawn(async move { fs.upload(ino, staged).await });
    }

    /// Waits until every file closed so far below `dir` (but `except`) is durable.
    async fn wait_tree(self: &Arc<Self>, dir: u64, except: u64) -> Result<()> {
        let staged = self.closed_staged(|t, i, _| i != except && t.is_within(i, dir));
        self.wait_all_durable(staged).await
    }

    /// `fsync` of a directory: the names in it that this mount wrote back (symlinks,
    /// closed files) are in the bucket when it returns, or it fails with their error.
    pub async fn fsyncdir(self: &Arc<Self>, ino: u64) -> Result<()> {
        let staged =
            self.closed_staged(|t, i, n| n.parent == ino && t.child(ino, &n.name) == Some(i));
        self.wait_all_durable(staged).await
    }

    /// The staged files with no writer among the nodes `pick` selects.
    fn closed_staged(
        &self,
        pick: impl Fn(&Inodes, u64, &crate::inode::Node) -> bool,
    ) -> Vec<(u64, Arc<Staged>)> {
        let t = self.inodes.lock();
        t.nodes
            .iter()
            .filter(|(i, n)| n.staged.is_some() && pick(&t, **i, n))
            .filter_map(|(i, n)| n.staged.clone().map(|s| (*i, s)))
            .filter(|(_, s)| s.st.lock().writers == 0)
            .collect()
    }

    async fn wait_all_durable(self: &Arc<Self>, staged: Vec<(u64, Arc<Staged>)>) -> Result<()> {
        for (i, s) in staged {
            self.wait_durable(i, &s).await?;
        }
        Ok(())
    }

    async fn upload(self: Arc<Self>, ino: u64, staged: Arc<Staged>) {
        // A completion marker goes last: whoever sees it may read the task's outputs.
        let marker = {
            let t = self.inodes.lock();
            t.get(ino)
                .filter(|n| self.cfg.completion_markers.contains(&n.name))
                .map(|n| n.parent)
        };
        if let Some(dir) = marker {
            if let Err(e) = self.wait_tree(dir, ino).await {
                let mut st = staged.st.lock();
                st.queued = false;
                st.error = Some(format!(
                    "not uploaded because an output of its task failed: {e}"
                ));
                drop(st);
                staged.done.notify_waiters();
                return;
            }
        }
        loop {
            let _moves = self.dir_moves.read().await;
            // An upload in progress finishes first; it re-checks the generation after.
            let (key, gen, size, metadata, early) = {
                let t = self.inodes.lock();
                let mut st = staged.st.lock();
                if st.uploading {
                    st.queued = false;
                    st.rerun = true;
                    return;
                }
                st.queued = false;
                st.rerun = false;
                if st.deleted || !st.dirty() {
                    // Unlinked while written: an early upload is aborted as it drops.
                    st.early = None;
                    drop(st);
                    staged.done.notify_waiters();
                    return;
                }
                let Some(path) = t.path(ino) else { return };
                st.uploading = true;
                let mut metadata = HashMap::new();
                if let Some(target) = t.get(ino).and_then(|n| n.entry.target.clone()) {
                    metadata.insert(SYMLINK_META.to_string(), percent_encode(&target));
                }
                let key = self.key(&path);
                // Parts sent while the file was written; only under the name they went to
                // (a file renamed meanwhile goes up whole, the early upload is aborted).
                st.early_ok = false;
                let early = st.early.take().filter(|e| e.key == key);
                (key, st.gen, st.size, metadata, early)
            };
            let r = upload_file(
                &self.client,
                &key,
                &staged.file,
                size,
                self.cfg.part_size,
                &self.slots,
                &metadata,
                metadata.contains_key(SYMLINK_META),
                early,
            )
            .await;
            // The time the bucket gives the object, which is what every later mount will
            // show: a file keeps one mtime for tools that compare them (-resume, make).
            let mtime = match &r {
                Ok(etag) => self.stamps.last_modified(&self.client, &key, etag).await,
                Err(_) => None,
            };
            let (again, stray) = {
                let mut t = self.inodes.lock();
                let cur_key = t.path(ino).map(|p| self.key(&p));
                let mut st = staged.st.lock();
                st.uploading = false;
                match r {
                    Ok(etag) => {
                        if st.deleted || cur_key.as_deref() != Some(key.as_str()) {
                            // Renamed or unlinked while uploading: the object we wrote
                            // does not belong there any more.
                            (!st.deleted, true)
                        } else {
                            st.durable_gen = gen;
                            st.error = None;
                            self.failed.lock().remove(&key);
                            if st.gen == gen {
                                self.staging.unjournal(&staged);
                                st.journaled = None;
                                let writers = st.writers;
                                let mut adopt = None;
                                if let Some(n) = t.get_mut(ino) {
                                    // The node now describes the object in the bucket.
                                    n.entry.size = size;
                                    n.entry.etag = Some(etag.clone());
                                    if let Some(m) = mtime {
                                        n.entry.mtime = m;
                                    }
                                    // The kernel's pages are exactly what we uploaded.
                                    n.page_cache_etag = Some(etag);
                                    if writers == 0 {
                                        n.validated = Some(Instant::now());
                                        n.staged = None;
                                        // No handle reads the staged file any more, so the
                                        // cache may own (and later punch) it.
                                        if n.open == 0 && n.entry.kind == Kind::File {
                                            adopt = n.entry.etag.clone();
                                        }
                                    }
                                    let (parent, name, e) =
                                        (n.parent, n.name.clone(), n.entry.clone());
                                    Self::listing_put(&mut t, parent, &name, Some(e));
                                }
                                if writers == 0 {
                                    if let Some(etag) = adopt {
                                        // Downstream tasks read what upstream ones wrote:
                                        // keep it as a cached copy of the new object.
                                        self.cache.adopt(
                                            &self.cfg.bucket,
                                            &key,
                                            &etag,
                                            size,
                                            self.staging.data_path(&staged),
                                        );
                                    }
                                    self.staging.discard(&staged);
                                    t.remove_if_unreferenced(ino);
                                }
                                (false, false)
                            } else {
                                (st.writers == 0 || st.rerun, false)
                            }
                        }
                    }
                    // The file changed while it was read for the upload (a rewrite with
                    // O_TRUNC shrinks it under the reader): that upload is moot, the
                    // next one carries the new content.
                    Err(_) if st.gen != gen && !st.deleted => (st.writers == 0 || st.rerun, false),
                    Err(e) => {
                        tracing::error!(%key, "upload failed: {e}");
                        let msg = format!("upload of {key} failed: {e}");
                        self.failed.lock().insert(key.clone(), msg.clone());
                        st.error = Some(msg);
                        (false, false)
                    }
                }
            };
            if stray {
                if let Err(e) = self.client.delete(&key).await {
                    tracing::warn!(%key, "cannot delete an object uploaded under a name that was given up: {e}");
                }
            }
            staged.done.notify_waiters();
            if !again {
                return;
            }
        }
    }

    /// Uploads everything staged and waits; returns the files that could not be.
    pub async fn flush_all(self: &Arc<Self>) -> Vec<String> {
        let staged: Vec<(u64, Arc<Staged>)> = {
            let t = self.inodes.lock();
            t.nodes
                .iter()
                .filter_map(|(ino, n)| n.staged.clone().map(|s| (*ino, s)))
                .collect()
        };
        let mut set = tokio::task::JoinSet::new();
        for (ino, s) in staged {
            let fs = self.clone();
            set.spawn(async move { fs.wait_durable(ino, &s).await });
        }
        while set.join_next().await.is_some() {}
        self.failed
            .lock()
            .iter()
            .map(|(k, e)| format!("{k}: {e}"))
            .collect()
    }

    /// Uploads what a dead mount left in the journal; returns the keys it recovered.
    pub async fn recover(&self) -> (Vec<String>, Vec<String>) {
        let mut ok = Vec::new();
        let mut failed = Vec::new();
        // Early uploads of files a dead mount was writing: their files (if journaled)
        // go up whole below; the parts they had sent are dropped.
        for u in self
            .staging
            .open_uploads(&self.cfg.cache_dir, &self.cfg.bucket)
        {
            match self.client.abort_multipart(&u.key, &u.upload_id).await {
                Ok(()) | Err(ClientError::NotFound(_)) => u.forget(),
                Err(e) => tracing::warn!(
                    key = %u.key,
                    "cannot abort a multipart upload left open by an earlier mount: {e}"
                ),
            }
        }
        for o in self.staging.orphans(&self.cfg.cache_dir, &self.cfg.bucket) {
            let r = async {
                let mut metadata = HashMap::new();
                if o.symlink {
                    let target = std::fs::read_to_string(&o.data)
                        .map_err(|e| ClientError::Other(e.to_string()))?;
                    metadata.insert(SYMLINK_META.to_string(), percent_encode(&target));
                }
                let f =
                    std::fs::File::open(&o.data).map_err(|e| ClientError::Other(e.to_string()))?;
                let size = f
                    .metadata()
                    .map_err(|e| ClientError::Other(e.to_string()))?
                    .len();
                upload_file(
                    &self.client,
                    &o.key,
                    &f,
                    size,
                    self.cfg.part_size,
                    &self.slots,
                    &metadata,
                    o.symlink,
                    None,
                )
                .await
            }
            .await;
            match r {
                Ok(_) => {
                    o.forget();
                    ok.push(o.key.clone());
                }
                Err(e) => {
                    self.failed.lock().insert(
                        o.key.clone(),
                        format!("recovery from the journal of an earlier mount failed: {e}"),
                    );
                    failed.push(format!("{}: {e}", o.key))
                }
            }
        }
        self.recovered.lock().extend(ok.iter().cloned());
        (ok, failed)
    }

    pub fn recovered(&self) -> Vec<String> {
        self.recovered.lock().clone()
    }

    async fn resolve(&self, parent: u64, name: &str) -> Result<u64> {
        if let Some(ino) = self.inodes.lock().child(parent, name) {
            return Ok(ino);
        }
        let a = self.lookup(parent, name).await?;
        // The lookup above is ours, not the kernel's.
        if let Some(n) = self.inodes.lock().get_mut(a.ino) {
            n.lookups = n.lookups.saturating_sub(1);
        }
        Ok(a.ino)
    }

    pub async fn create(
        self: &Arc<Self>,
        parent: u64,
        name: &str,
        mode: u32,
    ) -> Result<(Attr, u64)> {
        self.check_writable()?;
        valid_name(name)?;
        let staged = self.staging.create()?;
        {
            let mut st = staged.st.lock();
            st.gen = 1;
            st.writers = 1;
            st.early_ok = true;
        }
        let ino = {
            let mut t = self.inodes.lock();
            if t.get(parent).map(|p| p.entry.kind) != Some(Kind::Dir) {
                return Err(FsError::NotDir);
            }
            let e = Entry {
                kind: Kind::File,
                size: 0,
                mtime: SystemTime::now(),
                etag: None,
                target: None,
            };
            let ino = t.new_node(parent, name, e.clone());
            if let Some(n) = t.get_mut(ino) {
                n.staged = Some(staged.clone());
                n.perm = Some((mode & 0o7777) as u16).filter(|p| *p != self.cfg.file_mode);
                n.lookups += 1;
            }
            Self::listing_put(&mut t, parent, name, Some(e));
            ino
        };
        self.journal(ino, &staged);
        let fh = self.open_local(ino, staged, true);
        let attr = self.attr_of(&self.inodes.lock(), ino)?;
        Ok((attr, fh))
    }

    /// mknod of a regular file: an empty file, uploaded at once.
    pub async fn mknod(self: &Arc<Self>, parent: u64, name: &str, mode: u32) -> Result<Attr> {
        if mode & libc::S_IFMT != libc::S_IFREG {
            return Err(FsError::NotSupported(
                "only regular files can be created with mknod",
            ));
        }
        let (attr, fh) = self.create(parent, name, mode).await?;
        self.release(fh)?;
        Ok(attr)
    }

    pub async fn mkdir(&self, parent: u64, name: &str, _mode: u32) -> Result<Attr> {
        self.check_writable()?;
        valid_name(name)?;
        let (path, known_absent) = {
            let t = self.inodes.lock();
            let p = t.get(parent).ok_or(FsError::NotFound)?;
            if p.entry.kind != Kind::Dir {
                return Err(FsError::NotDir);
            }
            // The kernel's lookup just before found nothing: from a listing or a negative
            // entry younger than the TTL, that answer stands without a second round trip
            // (Nextflow makes two directories per task).
            let absent = t.child(parent, name).is_none()
                && matches!(p.cached_child(name, self.cfg.metadata_ttl), Some(None));
            (
                join(&t.path(parent).ok_or(FsError::NotFound)?, name),
                absent,
            )
        };
        if !known_absent && self.stat_remote(&path).await?.is_some() {
            return Err(FsError::Exists);
        }
        // The marker object makes an empty directory survive a remount.
        self.client
            .put(
                &format!("{}/", self.key(&path)),
                bytes::Bytes::new(),
                &HashMap::new(),
            )
            .await?;
        let mut t = self.inodes.lock();
        let e = Entry::dir(SystemTime::now());
        let at = Instant::now();
        let ino = t.upsert(parent, name, &e, Some(at));
        Self::listing_put(&mut t, parent, name, Some(e));
        // It was just checked to be empty: names created in it need no lookup request.
        if let Some(n) = t.get_mut(ino) {
            n.listing = Some(Listing {
                at,
                entries: Arc::default(),
            });
        }
        self.counted(&mut t, ino)
    }

    pub async fn symlink(self: &Arc<Self>, parent: u64, name: &str, target: &str) -> Result<Attr> {
        self.check_writable()?;
        valid_name(name)?;
        if target.len() as u64 > MAX_SYMLINK {
            return Err(FsError::NameTooLong);
        }
        // The kernel looked the name up just before (and found nothing), as for create:
        // no second round trip to the server here. Like a file, the symlink is staged and
        // uploaded in the background (Nextflow makes one per input of every task).
        let staged = self.staging.create()?;
        staged
            .write_at(0, target.as_bytes())
            .map_err(|e| FsError::Io(format!("staging a symlink: {e}")))?;
        {
            let mut st = staged.st.lock();
            st.size = target.len() as u64;
            st.gen = 1;
        }
        let ino = {
            let mut t = self.inodes.lock();
            if t.get(parent).map(|p| p.entry.kind) != Some(Kind::Dir) {
                self.staging.discard(&staged);
                return Err(FsError::NotDir);
            }
            let e = Entry {
                kind: Kind::Symlink,
                size: target.len() as u64,
                mtime: SystemTime::now(),
                etag: None,
                target: Some(target.to_string()),
            };
            let ino = t.new_node(parent, name, e.clone());
            if let Some(n) = t.get_mut(ino) {
                n.staged = Some(staged.clone());
                n.lookups += 1;
            }
            Self::listing_put(&mut t, parent, name, Some(e));
            ino
        };
        self.journal(ino, &staged);
        self.enqueue(ino, &staged);
        self.attr_of(&self.inodes.lock(), ino)
    }

    pub async fn unlink(&self, parent: u64, name: &str) -> Result<()> {
        self.check_writable()?;
        let ino = self.resolve(parent, name).await?;
        let (key, staged) = {
            let t = self.inodes.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            if n.entry.kind == Kind::Dir {
                return Err(FsError::IsDir);
            }
            (
                self.key(&t.path(ino).ok_or(FsError::NotFound)?),
                n.staged.clone(),
            )
        };
        let remote = match &staged {
            Some(s) => self.retire(s).await,
            None => true,
        };
        if remote {
            self.client.delete(&key).await?;
        }
        self.failed.lock().remove(&key);
        let mut t = self.inodes.lock();
        if let Some(n) = t.get_mut(ino) {
            n.staged = None;
            n.validated = Some(Instant::now());
        }
        t.detach(parent, name);
        Self::listing_put(&mut t, parent, name, None);
        t.add_negative(parent, name);
        Ok(())
    }

    /// Whether a directory holds anything, in the bucket or staged here.
    async fn dir_has_children(&self, ino: u64, path: &str) -> Result<bool> {
        let staged_child = {
            let t = self.inodes.lock();
            t.nodes
                .values()
                .any(|n| n.parent == ino && n.staged.is_some() && t.child(ino, &n.name).is_some())
        };
        if staged_child {
            return Ok(true);
        }
        let prefix = self.dir_prefix(path);
        let page = self
            .client
            .list_page(&prefix, Some("/"), None, Some(2))
            .await?;
        Ok(!page.prefixes.is_empty() || page.objects.iter().any(|o| o.key != prefix))
    }

    pub async fn rmdir(&self, parent: u64, name: &str) -> Result<()> {
        self.check_writable()?;
        let ino = self.resolve(parent, name).await?;
        let path = {
            let t = self.inodes.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            if n.entry.kind != Kind::Dir {
                return Err(FsError::NotDir);
            }
            t.path(ino).ok_or(FsError::NotFound)?
        };
        if self.dir_has_children(ino, &path).await? {
            return Err(FsError::NotEmpty);
        }
        self.client.delete(&self.dir_prefix(&path)).await?;
        let mut t = self.inodes.lock();
        t.detach(parent, name);
        Self::listing_put(&mut t, parent, name, None);
        t.add_negative(parent, name);
        Ok(())
    }

    pub async fn rename(
        self: &Arc<Self>,
        parent: u64,
        name: &str,
        newparent: u64,
        newname: &str,
        noreplace: bool,
    ) -> Result<()> {
        self.check_writable()?;
        valid_name(newname)?;
        let ino = self.resolve(parent, name).await?;
        let target = match self.resolve(newparent, newname).await {
            Ok(t) => Some(t),
            Err(FsError::NotFound) => None,
            Err(e) => return Err(e),
        };
        if target == Some(ino) {
            return Ok(());
        }
        if noreplace && target.is_some() {
            return Err(FsError::Exists);
        }
        let (kind, old_path, new_path, staged) = {
            let t = self.inodes.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            if n.entry.kind == Kind::Dir && t.is_within(newparent, ino) {
                return Err(FsError::Invalid("cannot move a directory into itself"));
            }
            let np = t.path(newparent).ok_or(FsError::NotFound)?;
            (
                n.entry.kind,
                t.path(ino).ok_or(FsError::NotFound)?,
                join(&np, newname),
                n.staged.clone(),
            )
        };
        if let Some(tino) = target {
            let tkind = self.inodes.lock().get(tino).map(|n| n.entry.kind);
            match (kind == Kind::Dir, tkind == Some(Kind::Dir)) {
                (false, true) => return Err(FsError::IsDir),
                (true, false) => return Err(FsError::NotDir),
                (true, true) => {
                    if self.dir_has_children(tino, &new_path).await? {
                        return Err(FsError::NotEmpty);
                    }
                    self.client.delete(&self.dir_prefix(&new_path)).await?;
                }
                (false, false) => {
                    // A staged target loses its pending upload: the source replaces it.
                    let staged = self.inodes.lock().get(tino).and_then(|n| n.staged.clone());
                    if let Some(s) = staged {
                        self.retire(&s).await;
                    }
                }
            }
        }
        if let Some(s) = &staged {
            self.wait_idle(s).await;
        }
        // Held until the nodes below have their new names: an upload that landed under
        // the old prefix after the LIST of the copy would be left behind there.
        let _moving = match kind {
            Kind::Dir => Some(self.dir_moves.write().await),
            _ => None,
        };
        match kind {
            Kind::Dir => self.rename_dir_remote(&old_path, &new_path).await?,
            _ => {
                let durable = staged.as_ref().map(|s| {
                    let st = s.st.lock();
                    (st.durable_gen > 0, st.dirty() || st.uploading)
                });
                match durable {
                    // Only staged here: its upload goes to the new name.
                    Some((false, _)) => {}
                    // Staged and changed since its last upload: drop the old object.
                    Some((true, true)) => self.client.delete(&self.key(&old_path)).await?,
                    // Clean: the bucket's copy moves.
                    Some((true, false)) | None => {
                        self.client
                            .copy(&self.key(&old_path), &self.key(&new_path))
                            .await?;
                        self.client.delete(&self.key(&old_path)).await?;
                    }
                }
            }
        }
        let rejournal: Vec<(u64, Arc<Staged>)> = {
            let mut t = self.inodes.lock();
            let entry = t.get(ino).map(|n| n.entry.clone());
            t.rename(ino, newparent, newname);
            if let Some(n) = t.get_mut(ino) {
                if n.validated.is_some() {
                    n.validated = Some(Instant::now());
                }
            }
            Self::listing_put(&mut t, parent, name, None);
            Self::listing_put(&mut t, newparent, newname, entry);
            t.add_negative(parent, name);
            if let Some(n) = t.get_mut(ino) {
                n.listing = None;
            }
            // Staged files below a moved directory now go to new keys.
            t.nodes
                .iter()
                .filter_map(|(i, n)| n.staged.clone().map(|s| (*i, s)))
                .filter(|(i, _)| t.is_within(*i, ino))
                .collect()
        };
        for (i, s) in rejournal {
            if s.st.lock().journaled.take().is_some() {
                self.journal(i, &s);
            }
        }
        Ok(())
    }

    /// Moves every object under a directory prefix (S3 has no rename).
    async fn rename_dir_remote(&self, old: &str, new: &str) -> Result<()> {
        let (from, to) = (self.dir_prefix(old), self.dir_prefix(new));
        let mut keys = Vec::new();
        let mut token = None;
        loop {
            let page = self.client.list_page(&from, None, token, None).await?;
            keys.extend(page.objects.into_iter().map(|o| o.key));
            token = page.next_token;
            if token.is_none() {
                break;
            }
        }
        // Every folder below `from`, whether it has a marker object or not.
        let mut folders = std::collections::BTreeSet::new();
        folders.insert(from.clone());
        for k in &keys {
            let rel = &k[from.len()..];
            for (i, _) in rel.match_indices('/') {
                folders.insert(format!("{from}{}", &rel[..=i]));
            }
        }
        let objects: Vec<&String> = keys.iter().filter(|k| !k.ends_with('/')).collect();
        for batch in objects.chunks(32) {
            let mut set = tokio::task::JoinSet::new();
            for k in batch {
                let (client, k, nk) = (
                    self.client.clone(),
                    (*k).clone(),
                    format!("{to}{}", &k[from.len()..]),
                );
                set.spawn(async move {
                    client.copy(&k, &nk).await?;
                    client.delete(&k).await
                });
            }
            while let Some(r) = set.join_next().await {
                r.map_err(|e| FsError::Io(e.to_string()))??;
            }
        }
        // Markers are empty (some servers cannot copy them) and keep empty directories.
        let markers: Vec<String> = keys
            .iter()
            .filter(|k| k.ends_with('/'))
            .map(|k| format!("{to}{}", &k[from.len()..]))
            .collect();
        for batch in markers.chunks(32) {
            let mut set = tokio::task::JoinSet::new();
            for nk in batch {
                let (client, nk) = (self.client.clone(), nk.clone());
                set.spawn(
                    async move { client.put(&nk, bytes::Bytes::new(), &HashMap::new()).await },
                );
            }
            while let Some(r) = set.join_next().await {
                r.map_err(|e| FsError::Io(e.to_string()))??;
            }
        }
        // Servers with real folders (SeaweedFS) keep an emptied folder listed until it is
        // deleted, and cannot delete one that still holds a folder: deepest first, one
        // depth at a time. Elsewhere these are deletes of absent keys.
        let mut by_depth: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for f in folders {
            by_depth.entry(f.matches('/').count()).or_default().push(f);
        }
        for (_, level) in by_depth.into_iter().rev() {
            for batch in level.chunks(32) {
                let mut set = tokio::task::JoinSet::new();
                for f in batch {
                    let (client, f) = (self.client.clone(), f.clone());
                    set.spawn(async move { client.delete(&f).await });
                }
                while let Some(r) = set.join_next().await {
                    match r.map_err(|e| FsError::Io(e.to_string()))? {
                        Ok(()) | Err(ClientError::NotFound(_)) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Ok(())
    }

    pub async fn setattr(
        self: &Arc<Self>,
        ino: u64,
        mode: Option<u32>,
        size: Option<u64>,
        mtime: Option<SystemTime>,
        fh: Option<u64>,
    ) -> Result<Attr> {
        if let Some(size) = size {
            self.check_writable()?;
            let kind = self.inodes.lock().get(ino).map(|n| n.entry.kind);
            match kind {
                Some(Kind::File) => {}
                Some(Kind::Dir) => return Err(FsError::IsDir),
                _ => return Err(FsError::Invalid("size of a non-file")),
            }
            let staged = self.stage(ino, (size == 0).then_some(0)).await?;
            staged.set_len(size)?;
            self.journal(ino, &staged);
            let open_writer = fh.is_some_and(|fh| {
                matches!(
                    self.files.lock().get(&fh),
                    Some(Handle::Local { write: true, .. })
                )
            });
            if !open_writer && staged.st.lock().writers == 0 {
                self.enqueue(ino, &staged);
            }
        }
        let mut t = self.inodes.lock();
        let n = t.get_mut(ino).ok_or(FsError::NotFound)?;
        if let Some(m) = mode {
            n.perm = Some((m & 0o7777) as u16);
        }
        if let Some(m) = mtime {
            n.entry.mtime = m;
        }
        Ok(self.node_attr(ino, n))
    }

    /// Extends a file (fallocate mode 0); space is not reserved in object storage.
    pub async fn fallocate(self: &Arc<Self>, fh: u64, off: u64, len: u64) -> Result<()> {
        let staged = match self.handle(fh)? {
            Handle::Local {
                staged,
                write: true,
                ..
            } => staged,
            _ => return Err(FsError::BadHandle),
        };
        let size = staged.st.lock().size;
        if off + len > size {
            staged.set_len(off + len)?;
        }
        Ok(())
    }

    /// A reader that opens a directory's files one after another in listing order (cp -r,
    /// cat *, tar) gets the next small files fetched in parallel ahead of it: many small
    /// files then come as fast as one big one.
    fn prefetch_siblings(self: &Arc<Self>, ino: u64) {
        let todo: Vec<(String, Entry)> = {
            let mut t = self.inodes.lock();
            let Some(n) = t.get(ino) else { return };
            let (parent, name) = (n.parent, n.name.clone());
            let Some(dir) = t.path(parent) else { return };
            let Some(p) = t.get_mut(parent) else { return };
            let Some(l) = p.listing.clone() else { return };
            let last = p.last_open.replace(name.clone());
            let in_order = last.is_some_and(|lo| {
                lo < name && l.entries.range(lo..name.clone()).take(6).count() <= 5
            });
            if !in_order {
                return;
            }
            // At most SIBLING_PREFETCH files and --max-readahead bytes ahead: what is
            // fetched waits in memory for its reader.
            let mut bytes = 0u64;
            let window_end = l
                .entries
                .range(name.clone()..)
                .enumerate()
                .find(|(i, (_, e))| {
                    bytes += e.size;
                    *i >= SIBLING_PREFETCH || bytes > self.cfg.max_readahead
                })
                .map(|(_, (k, _))| k.clone());
            let from = p
                .prefetched_to
                .clone()
                .filter(|f| *f > name)
                .unwrap_or(name.clone());
            let mut out = Vec::new();
            for (k, e) in l.entries.range(from.clone()..) {
                if *k == from || window_end.as_ref().is_some_and(|w| k > w) {
                    continue;
                }
                p.prefetched_to = Some(k.clone());
                if e.kind == Kind::File && e.size > 0 && e.size <= self.cfg.part_size {
                    out.push((join(&dir, k), e.clone()));
                }
            }
            out
        };
        let max_run = (self.cfg.part_size / CHUNK).max(1);
        for (path, e) in todo {
            let key = self.key(&path);
            let etag = e.etag.clone().filter(|x| !x.is_empty());
            let Ok(entry) = self.cache.entry(
                &self.cfg.bucket,
                &key,
                etag.as_deref().unwrap_or(""),
                e.size,
            ) else {
                continue;
            };
            let h = Arc::new(ReadHandle {
                ino: 0,
                key,
                etag,
                size: e.size,
                entry,
                seq: Mutex::new(SeqState::default()),
            });
            let claim = h.entry.claim(0, h.entry.chunks(), max_run);
            let fs = self.clone();
            let mut waits = claim.wait;
            for (c0, c1, f) in claim.start {
                waits.push(f.clone());
                self.spawn_fetch(&h, c0, c1, f);
            }
            tokio::spawn(async move {
                for w in waits {
                    let _ = w.wait().await;
                }
                fs.cache.release(&h.entry);
            });
        }
    }

    fn fetch(self: &Arc<Self>, h: &Arc<ReadHandle>, start: u64, end: u64, max_run: u64) {
        let claim = h.entry.claim(start / CHUNK, end.div_ceil(CHUNK), max_run);
        for (c0, c1, f) in claim.start {
            self.spawn_fetch(h, c0, c1, f);
        }
    }

    fn spawn_fetch(self: &Arc<Self>, h: &Arc<ReadHandle>, c0: u64, c1: u64, f: Arc<Fetch>) {
        let fs = self.clone();
        let h = h.clone();
        tokio::spawn(async move {
            let r = async {
                let _permit = fs
                    .gets
                    .acquire()
                    .await
                    .map_err(|e| FsError::Io(e.to_string()))?;
                let (start, end) = (c0 * CHUNK, (c1 * CHUNK).min(h.size));
                let data = fs
                    .client
                    .get_range(&h.key, start, end, h.etag.as_deref())
                    .await?;
                if data.len() as u64 != end - start {
                    return Err(FsError::Io(format!(
                        "{}: short read from the server ({} of {} bytes)",
                        h.key,
                        data.len(),
                        end - start
                    )));
                }
                fs.cache.offer(&h.entry, start, data.clone(), &f);
                // The O_DIRECT write waits for the disk: not on an async worker, where it
                // would hold up every FUSE request behind it.
                let (cache, entry) = (fs.cache.clone(), h.entry.clone());
                let stored = tokio::task::spawn_blocking(move || cache.store(&entry, start, &data))
                    .await
                    .map_err(|e| FsError::Io(e.to_string()))
                    .and_then(|r| r);
                if let Err(e) = stored {
                    // A full or broken cache disk costs the cache, not the read: the bytes
                    // are in memory for the readers waiting on them, later ones fetch again.
                    fs.cache_write_failed(&e);
                    fs.cache.abandon(&h.entry, c0, c1);
                }
                Ok(())
            }
            .await;
            if let Err(e) = &r {
                tracing::warn!(key = %h.key, "read failed: {e}");
                fs.cache.abandon(&h.entry, c0, c1);
            }
            fs.cache.finish(&f, r);
        });
    }

    fn cache_write_failed(&self, e: &FsError) {
        // Once per mount at warn level: a full disk would otherwise log every fetch.
        if !self.cache_write_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!("cannot write the disk cache, reading without it: {e}");
        } else {
            tracing::debug!("cannot write the disk cache: {e}");
        }
    }

    /// Saves what must survive a restart (cache bitmaps); called at unmount.
    pub fn shutdown(&self) {
        self.cache.persist_all();
        self.staging.close();
    }

    pub fn inode_count(&self) -> usize {
        self.inodes.lock().len()
    }
}
