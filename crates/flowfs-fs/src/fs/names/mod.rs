//! The namespace `Fs` routes name operations to: the inode table behind its one lock,
//! the per-inode orders of operations that change a key or rewrite an object in place
//! (locks.rs), and the listings fetched ahead of directory walks (walk.rs).

use std::time::SystemTime;

use parking_lot::{Mutex, MutexGuard};

mod ahead;
mod dirs;
mod edit;
mod known;
mod links;
mod rename;

pub(super) use dirs::{Attrs, DirView, Fetched};
pub(super) use edit::NodeEdit;
pub(super) use known::{Ask, Known};

use super::locks::Locks;
use super::walk::Walks;
use crate::error::{FsError, Result};
use crate::inode::{join_path, Entry, Inodes, Node};

/// Which nodes `Namespace::pick` keeps.
#[derive(Debug, Clone, Copy)]
pub(super) enum Which {
    /// This one.
    Node(u64),
    /// Those at or below directory `dir`, but `except`.
    Below { dir: u64, except: u64 },
    /// Those named in directory `dir` by their first name.
    NamedIn(u64),
}

/// A node's entry and names (`Namespace::names_of`).
pub(super) struct Names {
    pub(super) entry: Option<Entry>,
    pub(super) path: Option<String>,
    /// Its names other than the first (hard links).
    pub(super) extra: Vec<String>,
}

pub(super) struct Namespace {
    inodes: Mutex<Inodes>,
    locks: Locks,
    walks: Walks,
}

impl Namespace {
    pub(super) fn new() -> Namespace {
        Namespace {
            inodes: Mutex::new(Inodes::new()),
            locks: Locks::default(),
            walks: Walks::default(),
        }
    }

    /// The inode table, under its lock: no I/O while it is held (the lock table in
    /// ARCHITECTURE.md). Only this type's methods take it: callers ask for what they
    /// need (a node read or changed, a name added or removed), never for the table.
    fn table(&self) -> MutexGuard<'_, Inodes> {
        self.inodes.lock()
    }

    /// `f` of node `ino` under the lock (`None`: no such node). `f` does no I/O.
    pub(super) fn read<R>(&self, ino: u64, f: impl FnOnce(&Node) -> R) -> Option<R> {
        self.table().get(ino).map(f)
    }

    /// `f` of node `ino` and its path under the lock; `None` where either is unknown.
    pub(super) fn read_at<R>(&self, ino: u64, f: impl FnOnce(&Node, String) -> R) -> Option<R> {
        let t = self.table();
        Some(f(t.get(ino)?, t.path(ino)?))
    }

    /// `read_at` where a node without a path (no name left) is read too.
    pub(super) fn read_maybe_at<R>(
        &self,
        ino: u64,
        f: impl FnOnce(&Node, Option<String>) -> R,
    ) -> Option<R> {
        let t = self.table();
        Some(f(t.get(ino)?, t.path(ino)))
    }

    /// Changes node `ino` by `f` under the lock (`None`: no such node). `f` does no I/O.
    pub(super) fn update<R>(&self, ino: u64, f: impl FnOnce(&mut Node) -> R) -> Option<R> {
        self.table().get_mut(ino).map(f)
    }

    /// `update`, after which the node's entry stands in its parent's kept listing as it
    /// is now, in the same step.
    pub(super) fn update_listed<R>(&self, ino: u64, f: impl FnOnce(&mut Node) -> R) -> Option<R> {
        let mut t = self.table();
        let n = t.get_mut(ino)?;
        let r = f(n);
        let (parent, name, e) = (n.parent(), n.name().clone(), n.entry.clone());
        t.listing_put(parent, &name, Some(e));
        Some(r)
    }

    /// The path of `ino` below the mount root (`""` for the root).
    pub(super) fn path(&self, ino: u64) -> Option<String> {
        self.table().path(ino)
    }

    /// The path `name` in directory `parent` has.
    pub(super) fn child_path(&self, parent: u64, name: &str) -> Result<String> {
        let dir = self.path(parent).ok_or(FsError::NotFound)?;
        Ok(join_path(&dir, name))
    }

    /// The node `name` in `parent` leads to, if one is known.
    pub(super) fn child(&self, parent: u64, name: &str) -> Option<u64> {
        self.table().child(parent, name)
    }

    /// Whether a name in directory `dir` leads to a node for which `f` holds.
    pub(super) fn any_child(&self, dir: u64, f: impl Fn(u64) -> bool) -> bool {
        self.table().children_of(dir).any(|(_, ino, _)| f(ino))
    }

    /// `ino`'s entry, path and other names' paths, read in one step (a journal record).
    pub(super) fn names_of(&self, ino: u64) -> Names {
        let t = self.table();
        Names {
            entry: t.get(ino).map(|n| n.entry.clone()),
            path: t.path(ino),
            extra: t.extra_paths(ino),
        }
    }

    /// Of `nodes` (by inode, with what the caller keeps of each), those `which` selects.
    pub(super) fn pick<T>(&self, nodes: Vec<(u64, T)>, which: Which) -> Vec<(u64, T)> {
        let t = self.table();
        let picked = |i: u64| match which {
            Which::Node(ino) => i == ino,
            Which::Below { dir, except } => i != except && t.is_within(i, dir),
            Which::NamedIn(dir) => t
                .get(i)
                .is_some_and(|n| n.parent() == dir && t.child(dir, n.name()) == Some(i)),
        };
        nodes.into_iter().filter(|(i, _)| picked(*i)).collect()
    }

    /// Directory `ino` has more than `len` entries: it is not listed again to answer
    /// lookups.
    pub(super) fn too_big_to_list(&self, ino: u64, len: usize) {
        self.table().set_too_big_to_list(ino, len);
    }

    /// The kernel dropped `n` references to `ino`; a node neither referenced nor open goes.
    pub(super) fn forget(&self, ino: u64, n: u64) {
        self.table().forget(ino, n);
    }

    /// A lookup of `ino` that was ours, not the kernel's, is taken back.
    pub(super) fn lookup_undone(&self, ino: u64) {
        self.update(ino, Node::lookup_undone);
    }

    /// An open of `ino` ended; a node neither referenced nor open goes.
    pub(super) fn closed(&self, ino: u64) {
        let mut t = self.table();
        if let Some(n) = t.get_mut(ino) {
            n.closed();
        }
        t.remove_if_unreferenced(ino);
    }

    /// The name `parent/name` is gone through this mount: from the directory's index and
    /// its kept listing, with the directory's times now and a negative entry in its place.
    /// `file`, the node it led to, if it lives on (open, or by other names): its link
    /// count changed, so its ctime is now.
    pub(super) fn name_removed(&self, parent: u64, name: &str, file: Option<u64>) {
        let mut t = self.table();
        t.detach(parent, name);
        if let Some(n) = file.and_then(|ino| t.get_mut(ino)) {
            n.entry.posix_mut().ctime = Some(SystemTime::now());
        }
        name_changed(&mut t, parent, name, None);
        t.add_negative(parent, name);
    }

    /// The per-inode orders of renames, unlinks, rewrites and downloads for writing.
    pub(super) fn locks(&self) -> &Locks {
        &self.locks
    }

    /// The listings fetched ahead of directory walks.
    pub(super) fn walks(&self) -> &Walks {
        &self.walks
    }
}

/// Records `parent/name` as `e` (`None`: removed) in the parent's kept listing, so that
/// lookups of it need no request, and the parent's times as now.
fn name_changed(t: &mut Inodes, parent: u64, name: &str, e: Option<Entry>) {
    t.listing_put(parent, name, e);
    entries_changed(t, parent);
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

/// Counts a kernel lookup of `ino`.
fn counted(t: &mut Inodes, ino: u64) -> Result<u64> {
    t.get_mut(ino).ok_or(FsError::NotFound)?.looked_up();
    Ok(ino)
}
