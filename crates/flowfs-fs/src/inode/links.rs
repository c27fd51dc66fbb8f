//! Hard links in the inode table: a node with more than one name. The node's own
//! `parent` and `name` are its first name, the one its object is uploaded to; its other
//! names (`Inodes::extra`) lead to it through the child index like any name, and are
//! copies of that object in the bucket (fs/links.rs makes and keeps them). Removing the
//! first name makes the next one first. Names whose objects carry the same link id
//! (`Posix::link`) and ETag are joined into one node when they are seen (`joinable`),
//! which is how a remount shows them as links again.

use std::sync::Arc;

use super::{Entry, Inodes};

impl Inodes {
    /// Adds `parent/name` as one more name of `ino`; a node the name led to before (one
    /// the store no longer has) loses it.
    pub fn add_name(&mut self, ino: u64, parent: u64, name: &str) {
        if self.child(parent, name).is_some_and(|held| held != ino) {
            self.detach(parent, name);
        }
        let name: Arc<str> = name.into();
        self.children
            .entry(parent)
            .or_default()
            .insert(name.clone(), ino);
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.remove_negative(&name);
        }
        self.extra.entry(ino).or_default().push((parent, name));
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.links += 1;
        }
    }

    /// Whether `parent/name` is one of `ino`'s names other than its first.
    pub fn is_extra_name(&self, ino: u64, parent: u64, name: &str) -> bool {
        self.extra
            .get(&ino)
            .is_some_and(|v| v.iter().any(|(p, n)| *p == parent && **n == *name))
    }

    /// The paths of `ino`'s names other than its first, where they can be told.
    pub fn extra_paths(&self, ino: u64) -> Vec<String> {
        let Some(names) = self.extra.get(&ino) else {
            return Vec::new();
        };
        names
            .iter()
            .filter_map(|(p, n)| Some(super::join_path(&self.path(*p)?, n)))
            .collect()
    }

    /// Whether one of `ino`'s names other than its first lies below directory `dir`.
    pub fn has_extra_name_within(&self, ino: u64, dir: u64) -> bool {
        self.extra
            .get(&ino)
            .is_some_and(|v| v.iter().any(|(p, _)| self.is_within(*p, dir)))
    }

    /// Marks `ino` as a member of the link group `id`: another name seen with that id
    /// and the same ETag is joined to it.
    pub fn join_group(&mut self, id: u64, ino: u64) {
        self.groups.insert(id, ino);
    }

    /// Moves `ino`'s name `from` (one other than its first) to `to`; whatever held `to`
    /// is detached first.
    pub fn rename_extra(&mut self, ino: u64, from: (u64, &str), to: (u64, &str)) {
        self.detach(to.0, to.1);
        self.unlink_name(from.0, from.1, Some(ino));
        self.drop_extra(ino, from.0, from.1);
        self.add_name(ino, to.0, to.1);
    }

    /// Removes `parent/name` from `ino`'s other names; false if it is not one.
    pub(super) fn drop_extra(&mut self, ino: u64, parent: u64, name: &str) -> bool {
        let Some(names) = self.extra.get_mut(&ino) else {
            return false;
        };
        let Some(i) = names.iter().position(|(p, n)| *p == parent && **n == *name) else {
            return false;
        };
        names.remove(i);
        if names.is_empty() {
            self.extra.remove(&ino);
        }
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.links -= 1;
        }
        true
    }

    /// `ino`'s first name is gone: its next name becomes the first. False if it had
    /// no other.
    pub(super) fn promote(&mut self, ino: u64) -> bool {
        let Some((parent, name)) = self.extra.get(&ino).and_then(|v| v.first().cloned()) else {
            return false;
        };
        self.drop_extra(ino, parent, &name);
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.parent = parent;
            n.name = name;
        }
        true
    }

    /// The node a newly seen `entry` is another name of: one in the same link group,
    /// of the same kind and with the same ETag (the names still hold the same bytes).
    pub(super) fn joinable(&self, entry: &Entry) -> Option<u64> {
        let id = entry.posix.as_ref()?.link?;
        let ino = *self.groups.get(&id)?;
        let n = self.get(ino)?;
        let same = entry.etag.is_some() && n.entry.etag == entry.etag;
        (same && n.entry.kind == entry.kind && !n.unlinked).then_some(ino)
    }

    /// Forgets what the table knows of `ino`'s links when the node goes.
    pub(super) fn forget_links(&mut self, ino: u64, entry: &Entry) {
        self.extra.remove(&ino);
        if let Some(id) = entry.posix.as_ref().and_then(|p| p.link) {
            if self.groups.get(&id) == Some(&ino) {
                self.groups.remove(&id);
            }
        }
    }
}
