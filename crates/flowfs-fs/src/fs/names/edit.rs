//! One node changed in one step with what the change must see of its neighbours (its
//! path, its parent's marker) and do to them (its parent's kept listing), for the
//! operations whose decision also asks another owner (the write-back table) and must
//! not see the namespace change halfway: an upload's start and end, a release.

use super::Namespace;
use crate::inode::{Entry, Inodes, Node};

/// Node `ino` of the table, for the length of `Namespace::edit`.
pub(in crate::fs) struct NodeEdit<'a> {
    t: &'a mut Inodes,
    ino: u64,
}

impl NodeEdit<'_> {
    /// The node, if it is still there.
    pub(in crate::fs) fn node(&self) -> Option<&Node> {
        self.t.get(self.ino)
    }

    /// The node to change, if it is still there.
    pub(in crate::fs) fn node_mut(&mut self) -> Option<&mut Node> {
        self.t.get_mut(self.ino)
    }

    /// Its path below the mount root, while it has a name.
    pub(in crate::fs) fn path(&self) -> Option<String> {
        self.t.path(self.ino)
    }

    /// Whether it has names other than its first (hard links).
    pub(in crate::fs) fn has_other_names(&self) -> bool {
        !self.t.extra_paths(self.ino).is_empty()
    }

    /// Whether its parent directory has a marker object.
    pub(in crate::fs) fn parent_marked(&self) -> bool {
        let parent = self.node().map(|n| n.parent());
        parent
            .and_then(|p| self.t.get(p))
            .is_some_and(|p| p.is_marked())
    }

    /// Its entry as it is now stands in its parent's kept listing.
    pub(in crate::fs) fn relist(&mut self) {
        let Some(n) = self.t.get(self.ino) else {
            return;
        };
        let (parent, name, e): (u64, _, Entry) = (n.parent(), n.name().clone(), n.entry.clone());
        self.t.listing_put(parent, &name, Some(e));
    }

    /// The node goes if nothing references it any more (no lookup, no open, no name).
    pub(in crate::fs) fn remove_if_unreferenced(&mut self) {
        self.t.remove_if_unreferenced(self.ino);
    }
}

impl Namespace {
    /// `f` of node `ino` and its neighbours, under the table's lock. `f` does no I/O.
    pub(in crate::fs) fn edit<R>(&self, ino: u64, f: impl FnOnce(NodeEdit<'_>) -> R) -> R {
        let mut t = self.table();
        f(NodeEdit { t: &mut t, ino })
    }
}
