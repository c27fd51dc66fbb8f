//! The namespace: inode numbers for paths the kernel knows, attributes with the time
//! they were last confirmed, directory listings and negative entries.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::meta::Posix;

/// The inode number of the mount's root directory (FUSE's fixed 1).
pub const ROOT: u64 = 1;
/// Negative entries kept per directory before the oldest are dropped.
const MAX_NEGATIVE: usize = 4096;

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file: one object.
    File,
    /// A directory: a common prefix, or a name this mount created.
    Dir,
    /// A symbolic link: an object with its target in the metadata.
    Symlink,
    /// A FIFO, socket or device node (its `S_IFMT` bits): an empty object whose metadata
    /// holds its mode and rdev, as s3fs writes them. The kernel does its I/O locally.
    Special(u32),
}

/// What the server (or this mount) says about one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    pub size: u64,
    pub mtime: SystemTime,
    pub etag: Option<String>,
    pub target: Option<String>,
    /// The POSIX attributes its metadata holds (`Some(Posix::default())` when it holds
    /// none), or what this mount gave a node it made; `None` while unknown (a listing
    /// tells no metadata), which shows the mount's defaults.
    pub posix: Option<Posix>,
}

impl Entry {
    /// Takes what the server says now. A directory keeps its time: S3 has none for it,
    /// so the time this mount first gave it (the mount's start, or its mkdir) stays, and
    /// its attributes (kept in memory). An object still of the same ETag keeps the
    /// attributes read from its metadata when the news (a listing) tells none.
    pub fn refresh(&mut self, new: &Entry) {
        let (mtime, posix) = (self.mtime, self.posix);
        let same = self.etag.is_some() && self.etag == new.etag;
        *self = new.clone();
        if new.kind == Kind::Dir {
            self.mtime = mtime;
        }
        if new.posix.is_none() && (same || new.kind == Kind::Dir) {
            self.posix = posix;
        }
    }

    /// The time to show as mtime: the metadata's, else the object's `LastModified`.
    pub fn shown_mtime(&self) -> SystemTime {
        self.posix.and_then(|p| p.mtime).unwrap_or(self.mtime)
    }

    pub fn dir(mtime: SystemTime) -> Entry {
        Entry {
            kind: Kind::Dir,
            size: 0,
            mtime,
            etag: None,
            target: None,
            posix: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Listing {
    pub at: Instant,
    pub entries: Arc<BTreeMap<String, Entry>>,
}

/// What a directory's listing is asked to tell of its objects' metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaHeads {
    /// A HEAD per object whose metadata is not known yet, in directories whose listing
    /// shows their own marker (made by `mkdir` on flowfs or s3fs).
    Marked,
    /// A HEAD per object whose metadata is not known yet, in every directory.
    Always,
    /// Never: listings show the defaults (and symlinks as before).
    Never,
}

#[derive(Debug)]
pub struct Node {
    pub parent: u64,
    pub name: String,
    pub entry: Entry,
    /// When the attributes were last confirmed; `None` for nodes this mount owns.
    pub validated: Option<Instant>,
    pub lookups: u64,
    pub open: u32,
    pub listing: Option<Listing>,
    pub negative: HashMap<String, Instant>,
    /// ETag of the bytes the kernel may still hold in its page cache.
    pub page_cache_etag: Option<String>,
    /// Its name was removed (unlink, replaced by a rename) while it is still open or
    /// known to the kernel: no name leads to it any more.
    pub unlinked: bool,
    /// Directories: one listing at a time, however many lookups want it.
    pub list_lock: Arc<tokio::sync::Mutex<()>>,
    /// Directories: the last file opened and how far siblings were prefetched.
    pub last_open: Option<String>,
    pub prefetched_to: Option<String>,
}

impl Node {
    fn new(parent: u64, name: &str, entry: Entry, validated: Option<Instant>) -> Node {
        Node {
            parent,
            name: name.to_string(),
            entry,
            validated,
            lookups: 0,
            open: 0,
            listing: None,
            negative: HashMap::new(),
            page_cache_etag: None,
            unlinked: false,
            list_lock: Arc::default(),
            last_open: None,
            prefetched_to: None,
        }
    }

    pub fn fresh(&self, ttl: Duration) -> bool {
        self.validated.is_none_or(|t| t.elapsed() < ttl)
    }

    /// What this directory's listing or negative entries younger than `ttl` say of
    /// `name`: `Some(Some((entry, listed at)))` there, `Some(None)` absent, `None` unknown.
    pub fn cached_child(&self, name: &str, ttl: Duration) -> Option<Option<(Entry, Instant)>> {
        if let Some(l) = self.listing.as_ref().filter(|l| l.at.elapsed() < ttl) {
            return Some(l.entries.get(name).map(|e| (e.clone(), l.at)));
        }
        self.negative
            .get(name)
            .is_some_and(|at| at.elapsed() < ttl)
            .then_some(None)
    }
}

/// The inode table and the names that lead to its nodes. Its state is private: every
/// change is one of the methods below, taken under the caller's one lock (`Fs::inodes`).
pub struct Inodes {
    nodes: HashMap<u64, Node>,
    /// Per directory, its children by name: what a listing, a lookup or a rename does
    /// with one directory costs what that directory holds, not what the mount has seen
    /// (the listing merge used to walk every inode of the mount).
    children: HashMap<u64, HashMap<String, u64>>,
    next: u64,
}

impl Default for Inodes {
    fn default() -> Self {
        Self::new()
    }
}

impl Inodes {
    pub fn new() -> Inodes {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                lookups: 1,
                ..Node::new(ROOT, "", Entry::dir(SystemTime::now()), None)
            },
        );
        Inodes {
            nodes,
            children: HashMap::new(),
            next: ROOT + 1,
        }
    }

    pub fn get(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(&ino)
    }

    pub fn get_mut(&mut self, ino: u64) -> Option<&mut Node> {
        self.nodes.get_mut(&ino)
    }

    /// The path below the mount root, `""` for the root, `a/b` below it.
    pub fn path(&self, ino: u64) -> Option<String> {
        let mut parts = Vec::new();
        let mut cur = ino;
        while cur != ROOT {
            let n = self.nodes.get(&cur)?;
            parts.push(n.name.as_str());
            cur = n.parent;
        }
        parts.reverse();
        Some(parts.join("/"))
    }

    pub fn child(&self, parent: u64, name: &str) -> Option<u64> {
        self.children.get(&parent)?.get(name).copied()
    }

    /// The nodes named in directory `parent`, with their inode numbers.
    pub fn children_of(&self, parent: u64) -> impl Iterator<Item = (u64, &Node)> {
        self.children
            .get(&parent)
            .into_iter()
            .flat_map(|m| m.values())
            .filter_map(|ino| self.nodes.get(ino).map(|n| (*ino, n)))
    }

    fn link(&mut self, parent: u64, name: &str, ino: u64) {
        self.children
            .entry(parent)
            .or_default()
            .insert(name.to_string(), ino);
    }

    /// Removes the name `parent/name` if it leads to `ino` (any node when `None`).
    fn unlink_name(&mut self, parent: u64, name: &str, ino: Option<u64>) -> Option<u64> {
        let names = self.children.get_mut(&parent)?;
        let found = *names.get(name)?;
        if ino.is_some_and(|i| i != found) {
            return None;
        }
        names.remove(name);
        if names.is_empty() {
            self.children.remove(&parent);
        }
        Some(found)
    }

    /// Records what is known of `parent/name` and returns its inode; a name whose kind
    /// changed gets a new inode, since the kernel cannot change the type of one.
    pub fn upsert(&mut self, parent: u64, name: &str, entry: &Entry, at: Option<Instant>) -> u64 {
        if let Some(ino) = self.child(parent, name) {
            if let Some(n) = self.nodes.get_mut(&ino) {
                if n.entry.kind == entry.kind {
                    // A node this mount owns keeps its own view until it is given up, and
                    // a listing taken before the node was last confirmed (an upload that
                    // landed while the LIST ran) does not replace the newer view.
                    let newer = match (n.validated, at) {
                        (Some(v), Some(a)) => a >= v,
                        (Some(_), None) => true,
                        (None, _) => false,
                    };
                    if newer {
                        n.entry.refresh(entry);
                        n.validated = at;
                    }
                    return ino;
                }
            }
            self.detach(parent, name);
        }
        let ino = self.next;
        self.next += 1;
        self.nodes
            .insert(ino, Node::new(parent, name, entry.clone(), at));
        self.link(parent, name, ino);
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.negative.remove(name);
        }
        ino
    }

    /// Forgets the name; the inode itself lives on until the kernel forgets it.
    pub fn detach(&mut self, parent: u64, name: &str) -> Option<u64> {
        let ino = self.unlink_name(parent, name, None)?;
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.unlinked = true;
            if n.lookups == 0 && n.open == 0 {
                self.nodes.remove(&ino);
            }
        }
        Some(ino)
    }

    pub fn add_negative(&mut self, parent: u64, name: &str) {
        if let Some(p) = self.nodes.get_mut(&parent) {
            if p.negative.len() >= MAX_NEGATIVE {
                p.negative.clear();
            }
            p.negative.insert(name.to_string(), Instant::now());
        }
    }

    pub fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        let remove = match self.nodes.get_mut(&ino) {
            Some(node) => {
                node.lookups = node.lookups.saturating_sub(n);
                node.lookups == 0 && node.open == 0
            }
            None => false,
        };
        if remove {
            self.remove_if_unreferenced(ino);
        }
    }

    pub fn remove_if_unreferenced(&mut self, ino: u64) {
        let Some(node) = self.nodes.get(&ino) else {
            return;
        };
        if ino == ROOT || node.lookups > 0 || node.open > 0 {
            return;
        }
        let (parent, name) = (node.parent, node.name.clone());
        if self.child(parent, &name) == Some(ino) {
            // Names this mount created stay known until they are removed.
            if node.validated.is_none() {
                return;
            }
            self.unlink_name(parent, &name, Some(ino));
        }
        self.nodes.remove(&ino);
    }

    /// Moves a node to a new name; whatever held that name is detached first.
    pub fn rename(&mut self, ino: u64, new_parent: u64, new_name: &str) {
        self.detach(new_parent, new_name);
        if let Some((parent, name)) = self.nodes.get(&ino).map(|n| (n.parent, n.name.clone())) {
            self.unlink_name(parent, &name, Some(ino));
        }
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.parent = new_parent;
            n.name = new_name.to_string();
        }
        self.link(new_parent, new_name, ino);
        // The rename looked the new name up first, which may have left a negative entry.
        if let Some(p) = self.nodes.get_mut(&new_parent) {
            p.negative.remove(new_name);
        }
    }

    pub fn new_node(&mut self, parent: u64, name: &str, entry: Entry) -> u64 {
        self.detach(parent, name);
        let ino = self.upsert(parent, name, &entry, None);
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.negative.remove(name);
        }
        ino
    }

    /// Whether `ino` is `anc` or lies below it.
    pub fn is_within(&self, mut ino: u64, anc: u64) -> bool {
        loop {
            if ino == anc {
                return true;
            }
            if ino == ROOT {
                return false;
            }
            match self.nodes.get(&ino) {
                Some(n) => ino = n.parent,
                None => return false,
            }
        }
    }
}
