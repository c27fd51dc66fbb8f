//! Names looked up and made: what the namespace knows of a name (`known`), the store's
//! answer for it (`answered`), and the nodes of names this mount makes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{counted, name_changed, Namespace};
use crate::error::{FsError, Result};
use crate::inode::{join_path, Entry, Kind, Listing};

/// What a lookup asks the store (`Namespace::known`).
pub(in crate::fs) struct Ask {
    pub(in crate::fs) path: String,
    /// Read the directory marker's attributes too (none known here yet).
    pub(in crate::fs) marker: bool,
    /// This mount knows the name as a directory.
    pub(in crate::fs) was_dir: bool,
}

impl Ask {
    /// The name at `path` alone, not known as a directory.
    pub(in crate::fs) fn name(path: &str) -> Ask {
        let path = path.to_string();
        Ask {
            path,
            marker: false,
            was_dir: false,
        }
    }
}

/// The namespace's answer for a name (`Namespace::known`).
pub(in crate::fs) enum Known {
    /// This node, counted as a kernel lookup.
    Node(u64),
    /// Known to be absent.
    Absent,
    /// Unknown here: the store is asked.
    Ask(Ask),
}

impl Namespace {
    /// What the namespace knows of `parent/name` within `ttl`: a node (counted as a
    /// kernel lookup), an absence, or what to ask the store. A node with a staged file
    /// (`staged`) is current however old; `check` refuses a path before any question.
    pub(in crate::fs) fn known(
        &self,
        parent: u64,
        name: &str,
        ttl: Duration,
        staged: impl Fn(u64) -> bool,
        check: impl FnOnce(&str) -> Result<()>,
    ) -> Result<Known> {
        let mut t = self.table();
        let p = t.get(parent).ok_or(FsError::NotFound)?;
        if p.entry.kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        if let Some(ino) = t.child(parent, name) {
            if t.get(ino).is_some_and(|n| n.fresh(ttl)) || staged(ino) {
                return counted(&mut t, ino).map(Known::Node);
            }
        }
        let path = join_path(&t.path(parent).ok_or(FsError::NotFound)?, name);
        check(&path)?;
        let p = t.get(parent).ok_or(FsError::NotFound)?;
        match p.cached_child(name, ttl) {
            Some(Some((e, at))) => {
                let ino = t.upsert(parent, name, &e, Some(at));
                return counted(&mut t, ino).map(Known::Node);
            }
            Some(None) => return Ok(Known::Absent),
            None => {}
        }
        let node = t.child(parent, name).and_then(|c| t.get(c));
        let was_dir = node.is_some_and(|n| n.entry.kind == Kind::Dir);
        // A directory known here does not read its marker again.
        let marker = node
            .and_then(|n| n.entry.posix())
            .is_none_or(|p| p.mode.is_none());
        Ok(Known::Ask(Ask {
            path,
            marker,
            was_dir,
        }))
    }

    /// The store's answer for `parent/name` as of `at`: its node, counted as a kernel
    /// lookup, or `None` and a negative entry.
    pub(in crate::fs) fn answered(
        &self,
        parent: u64,
        name: &str,
        found: Option<Entry>,
        at: Instant,
    ) -> Option<u64> {
        let mut t = self.table();
        match found {
            Some(e) => {
                let ino = t.upsert(parent, name, &e, Some(at));
                counted(&mut t, ino).ok()
            }
            None => {
                t.add_negative(parent, name);
                None
            }
        }
    }

    /// The path of a name about to be made in directory `parent`, and whether it is known
    /// to be absent (no node, and a listing or negative entry younger than `ttl` says so).
    pub(in crate::fs) fn new_name(
        &self,
        parent: u64,
        name: &str,
        ttl: Duration,
    ) -> Result<(String, bool)> {
        let t = self.table();
        let p = t.get(parent).ok_or(FsError::NotFound)?;
        if p.entry.kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        let absent =
            t.child(parent, name).is_none() && matches!(p.cached_child(name, ttl), Some(None));
        let path = join_path(&t.path(parent).ok_or(FsError::NotFound)?, name);
        Ok((path, absent))
    }

    /// Directory `parent/name`, whose marker was just written as `e`: its node, looked up
    /// once for the kernel, with an empty listing (it was just checked to be empty: names
    /// created in it need no lookup request).
    pub(in crate::fs) fn dir_made(&self, parent: u64, name: &str, e: Entry) -> u64 {
        let mut t = self.table();
        let at = Instant::now();
        let ino = t.upsert(parent, name, &e, Some(at));
        if let Some(n) = t.get_mut(ino) {
            n.set_marked(true);
            n.looked_up();
        }
        name_changed(&mut t, parent, name, Some(e));
        let entries = Arc::default();
        t.set_listing(ino, Some(Listing { at, entries }));
        ino
    }

    /// A new node `name` in directory `parent` for `e`, made by this mount and looked up
    /// once for the kernel; `check` refuses its path first (the store's key rules).
    pub(in crate::fs) fn add(
        &self,
        parent: u64,
        name: &str,
        e: Entry,
        check: impl FnOnce(&str) -> Result<()>,
    ) -> Result<u64> {
        let mut t = self.table();
        if t.get(parent).map(|p| p.entry.kind) != Some(Kind::Dir) {
            return Err(FsError::NotDir);
        }
        check(&join_path(&t.path(parent).ok_or(FsError::NotFound)?, name))?;
        let ino = t.new_node(parent, name, e.clone());
        if let Some(n) = t.get_mut(ino) {
            n.looked_up();
        }
        name_changed(&mut t, parent, name, Some(e));
        Ok(ino)
    }

    /// Takes back a name `add` made whose staged file could not be made.
    pub(in crate::fs) fn undo_add(&self, parent: u64, name: &str, ino: u64) {
        let mut t = self.table();
        if let Some(n) = t.get_mut(ino) {
            n.lookup_undone();
            n.confirm(Instant::now());
        }
        t.detach(parent, name);
        t.listing_put(parent, name, None);
    }
}
