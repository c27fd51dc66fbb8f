//! The namespace: inode numbers for paths the kernel knows, attributes with the time
//! they were last confirmed, directory listings and negative entries.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

mod entry;
mod links;
mod node;

pub use entry::{Entry, Kind, Listing, MetaHeads};
use node::Cached;
pub use node::Node;

/// The inode number of the mount's root directory (FUSE's fixed 1).
pub const ROOT: u64 = 1;
/// Negative entries kept per directory before the oldest are dropped.
const MAX_NEGATIVE: usize = 4096;
/// Listing entries kept across all directories before the oldest listings are dropped.
/// An entry and its name in a listing's B-tree cost about 180 bytes when measured in issue
/// 15 (on the core over the mock; about half since listings are built in one pass and
/// share their names with the nodes): unbounded, a million files seen took 180 MiB in
/// listings alone, of the 400 MiB allowed in all. A dropped listing keeps its size, the
/// directory its nodes and their attributes.
const MAX_LISTED: usize = 100_000;

/// The inode table and the names that lead to its nodes. Its state is private: every
/// change is one of the methods below, taken under its owner's one lock (`Namespace`, fs/names/).
pub struct Inodes {
    /// Boxed: a table slot is then 16 bytes, and a table of a million nodes, which
    /// doubles as it grows, leaves half its slots empty.
    nodes: HashMap<u64, Box<Node>>,
    /// Per directory, its children by name: what a listing, a lookup or a rename does
    /// with one directory costs what that directory holds, not what the mount has seen
    /// (the listing merge used to walk every inode of the mount).
    children: HashMap<u64, HashMap<Arc<str>, u64>>,
    next: u64,
    /// Entries in the listings kept, and those listings oldest first (by `Cached::Held`
    /// seq): the bound `MAX_LISTED` drops from the front.
    listed: usize,
    held: BTreeMap<u64, u64>,
    seq: u64,
    /// Hard links (links.rs): each linked node's names other than its first, and the
    /// node of each link group seen, by its id. Empty unless `link` was used.
    extra: HashMap<u64, Vec<(u64, Arc<str>)>>,
    groups: HashMap<u64, u64>,
}

impl Default for Inodes {
    fn default() -> Self {
        Self::new()
    }
}

impl Inodes {
    pub fn new() -> Inodes {
        node::Stamp::start();
        let mut root = Node::new(ROOT, "".into(), Entry::dir(SystemTime::now()), None);
        root.looked_up();
        let mut nodes = HashMap::new();
        nodes.insert(ROOT, Box::new(root));
        Inodes {
            nodes,
            children: HashMap::new(),
            next: ROOT + 1,
            listed: 0,
            held: BTreeMap::new(),
            seq: 0,
            extra: HashMap::new(),
            groups: HashMap::new(),
        }
    }

    pub fn get(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(&ino).map(|n| &**n)
    }

    pub fn get_mut(&mut self, ino: u64) -> Option<&mut Node> {
        self.nodes.get_mut(&ino).map(|n| &mut **n)
    }

    /// The path below the mount root, `""` for the root, `a/b` below it; a file with
    /// hard links by its first name.
    pub fn path(&self, ino: u64) -> Option<String> {
        let mut parts = Vec::new();
        let mut cur = ino;
        while cur != ROOT {
            let n = self.nodes.get(&cur)?;
            parts.push(&*n.name);
            cur = n.parent;
        }
        parts.reverse();
        Some(parts.join("/"))
    }

    pub fn child(&self, parent: u64, name: &str) -> Option<u64> {
        self.children.get(&parent)?.get(name).copied()
    }

    /// The names in directory `parent`, with the inode number and node each leads to
    /// (a hard-linked node's name here may be other than its first).
    pub fn children_of(&self, parent: u64) -> impl Iterator<Item = (&Arc<str>, u64, &Node)> {
        self.children
            .get(&parent)
            .into_iter()
            .flat_map(|m| m.iter())
            .filter_map(|(name, ino)| self.get(*ino).map(|n| (name, *ino, n)))
    }

    /// Enters the node's own name in its parent's child index.
    fn link(&mut self, ino: u64) {
        let Some((parent, name)) = self.get(ino).map(|n| (n.parent, n.name.clone())) else {
            return;
        };
        self.children.entry(parent).or_default().insert(name, ino);
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
    /// `name` may be a listing's key, which a new node then shares.
    pub fn upsert<N: AsRef<str> + Into<Arc<str>>>(
        &mut self,
        parent: u64,
        name: N,
        entry: &Entry,
        at: Option<Instant>,
    ) -> u64 {
        if let Some(ino) = self.child(parent, name.as_ref()) {
            // What a hard link's other name shows is its first name's object, copied.
            if self.is_extra_name(ino, parent, name.as_ref()) {
                return ino;
            }
            if let Some(n) = self.nodes.get_mut(&ino) {
                if n.entry.kind == entry.kind {
                    // A node this mount owns keeps its own view until it is given up, and
                    // a listing taken before the node was last confirmed (an upload that
                    // landed while the LIST ran) does not replace the newer view.
                    let newer = match (n.validated(), at) {
                        (Some(v), Some(a)) => a >= v,
                        (Some(_), None) => true,
                        (None, _) => false,
                    };
                    if newer {
                        n.entry.refresh(entry);
                        n.set_validated(at);
                    }
                    return ino;
                }
            }
            self.detach(parent, name.as_ref());
        }
        if let Some(ino) = self.joinable(entry) {
            self.add_name(ino, parent, name.as_ref());
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        let name: Arc<str> = name.into();
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.remove_negative(&name);
        }
        self.nodes
            .insert(ino, Box::new(Node::new(parent, name, entry.clone(), at)));
        self.link(ino);
        if let Some(id) = entry.posix.as_ref().and_then(|p| p.link) {
            self.groups.entry(id).or_insert(ino);
        }
        ino
    }

    /// Forgets the name; the inode itself lives on until the kernel forgets it, and
    /// with its other names if it has hard links (the next becomes its first).
    pub fn detach(&mut self, parent: u64, name: &str) -> Option<u64> {
        let ino = self.unlink_name(parent, name, None)?;
        if self.drop_extra(ino, parent, name) || self.promote(ino) {
            return Some(ino);
        }
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.unlinked = true;
            if n.lookups == 0 && n.open == 0 {
                self.remove_node(ino);
            }
        }
        Some(ino)
    }

    pub fn add_negative(&mut self, parent: u64, name: &str) {
        if let Some(p) = self.nodes.get_mut(&parent) {
            let negative = &mut p.dir_mut().negative;
            if negative.len() >= MAX_NEGATIVE {
                negative.clear();
            }
            negative.insert(name.to_string(), Instant::now());
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

    /// Removes `ino` if nothing needs it: no kernel reference, not open, and (while its
    /// name stands) no listing kept in it and no node below it. A directory the kernel
    /// forgot keeps its listing (within `MAX_LISTED`), and its ancestors stay for its
    /// path: after the kernel dropped its dentries (`drop_caches`, memory pressure), a
    /// `cp` of its files looked each one up again with a HEAD and a one-key LIST, and
    /// the directory too, although its listing was a moment old. Its parent is looked
    /// at in turn, since it may have been kept only for it.
    pub fn remove_if_unreferenced(&mut self, ino: u64) {
        let mut next = Some(ino);
        while let Some(ino) = next.take() {
            next = self.remove_one(ino);
        }
    }

    /// Removes `ino` if nothing needs it; its parent, if that may now be unneeded too.
    fn remove_one(&mut self, ino: u64) -> Option<u64> {
        let node = self.nodes.get(&ino)?;
        // A file with hard links stays: its names are known only here.
        if ino == ROOT || node.lookups > 0 || node.open > 0 || self.extra.contains_key(&ino) {
            return None;
        }
        let (parent, name) = (node.parent, node.name.clone());
        if self.child(parent, &name) == Some(ino) {
            // Names this mount created stay known until they are removed.
            let held = node.listing().is_some() || self.children.contains_key(&ino);
            if node.validated().is_none() || held {
                return None;
            }
            self.unlink_name(parent, &name, Some(ino));
        }
        self.remove_node(ino);
        Some(parent)
    }

    fn remove_node(&mut self, ino: u64) {
        if let Some(mut n) = self.nodes.remove(&ino) {
            self.forget_listing(&mut n);
            self.forget_links(ino, &n.entry);
        }
    }

    fn forget_listing(&mut self, n: &mut Node) {
        if let Some((len, seq)) = n.take_listing() {
            self.listed -= len;
            self.held.remove(&seq);
        }
    }

    /// Stores (or with `None` forgets) directory `ino`'s listing, then drops the oldest
    /// listings beyond `MAX_LISTED` entries, never the one just stored.
    pub fn set_listing(&mut self, ino: u64, l: Option<Listing>) {
        let Some(mut n) = self.nodes.remove(&ino) else {
            return;
        };
        self.forget_listing(&mut n);
        if let Some(listing) = l {
            self.seq += 1;
            self.listed += listing.entries.len();
            self.held.insert(self.seq, ino);
            let seq = self.seq;
            let subdirs = listing
                .entries
                .values()
                .filter(|e| e.kind == Kind::Dir)
                .count();
            n.dir_mut().listing = Some(Cached::Held {
                listing,
                seq,
                subdirs,
            });
        }
        self.nodes.insert(ino, n);
        let mut gone = vec![ino];
        while self.listed > MAX_LISTED && self.held.len() > 1 {
            let Some((_, old)) = self.held.pop_first() else {
                break;
            };
            if let Some(d) = self.nodes.get_mut(&old).and_then(|n| n.dir.as_mut()) {
                if let Some(Cached::Held { listing, .. }) = &d.listing {
                    let len = listing.entries.len();
                    self.listed -= len;
                    d.listing = Some(Cached::Dropped { len });
                    gone.push(old);
                }
            }
        }
        // A directory kept only for its listing goes with it.
        for ino in gone {
            self.remove_if_unreferenced(ino);
        }
    }

    /// Notes that directory `ino` has more than `len` entries, so that it is not listed
    /// again to answer lookups (`Cached::Dropped`); a listing held is kept.
    pub fn set_too_big_to_list(&mut self, ino: u64, len: usize) {
        if let Some(d) = self.nodes.get_mut(&ino).map(|n| n.dir_mut()) {
            d.listing.get_or_insert(Cached::Dropped { len });
        }
    }

    /// Records a name (`Some`) or its removal (`None`) in the kept listing of `parent`,
    /// so that lookups of it need no request.
    pub fn listing_put(&mut self, parent: u64, name: &str, e: Option<Entry>) {
        let Some(Cached::Held {
            listing, subdirs, ..
        }) = self
            .nodes
            .get_mut(&parent)
            .and_then(|p| p.dir.as_mut())
            .and_then(|d| d.listing.as_mut())
        else {
            return;
        };
        let entries = Arc::make_mut(&mut listing.entries);
        let before = entries.len();
        let is_dir = |e: Option<&Entry>| e.is_some_and(|e| e.kind == Kind::Dir);
        let added = is_dir(e.as_ref());
        let old = match e {
            Some(e) => entries.insert(name.into(), e),
            None => entries.remove(name),
        };
        *subdirs =
            (*subdirs + usize::from(added)).saturating_sub(usize::from(is_dir(old.as_ref())));
        self.listed = self.listed + entries.len() - before;
    }

    /// Moves a node to a new name; whatever held that name is detached first.
    pub fn rename(&mut self, ino: u64, new_parent: u64, new_name: &str) {
        self.detach(new_parent, new_name);
        if let Some((parent, name)) = self.nodes.get(&ino).map(|n| (n.parent, n.name.clone())) {
            self.unlink_name(parent, &name, Some(ino));
        }
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.parent = new_parent;
            n.name = new_name.into();
        }
        self.link(ino);
        // The rename looked the new name up first, which may have left a negative entry.
        if let Some(p) = self.nodes.get_mut(&new_parent) {
            p.remove_negative(new_name);
        }
    }

    pub fn new_node(&mut self, parent: u64, name: &str, entry: Entry) -> u64 {
        self.detach(parent, name);
        let ino = self.upsert(parent, name, &entry, None);
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.remove_negative(name);
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

/// `dir/name`, or `name` in the root.
pub(crate) fn join_path(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests;
