//! The namespace's side of hard links (fs/links.rs has the store's): which names a file
//! has, and the names it gains, moves and loses, each one step under the table's lock.

use std::sync::Arc;
use std::time::SystemTime;

use super::{name_changed, Namespace};
use crate::error::{FsError, Result};
use crate::inode::Kind;

impl Namespace {
    /// A directory cannot be linked (EPERM, as link(2) says), nor a file whose last
    /// name is gone.
    pub(in crate::fs) fn linkable(&self, ino: u64) -> Result<()> {
        let t = self.table();
        let n = t.get(ino).ok_or(FsError::NotFound)?;
        if n.entry.kind == Kind::Dir {
            return Err(FsError::NotPermitted("a hard link to a directory"));
        }
        if n.is_unlinked() {
            return Err(FsError::NotFound);
        }
        if n.nlink() >= u32::from(u16::MAX) {
            return Err(FsError::TooManyLinks);
        }
        Ok(())
    }

    /// `to` is one more name of `ino`, whose objects carry link `id` and whose own
    /// object now has `etag`; looked up once for the kernel.
    pub(in crate::fs) fn linked(
        &self,
        ino: u64,
        to: (u64, &str),
        id: u64,
        etag: Arc<str>,
    ) -> Result<()> {
        let mut t = self.table();
        let n = t.get_mut(ino).ok_or(FsError::NotFound)?;
        if n.entry.etag.as_deref() != Some(&*etag) {
            n.retag(etag);
        }
        let p = n.entry.posix_mut();
        p.link = Some(id);
        // Its link count changed.
        p.ctime = Some(SystemTime::now());
        n.looked_up();
        let entry = n.entry.clone();
        t.join_group(id, ino);
        t.add_name(ino, to.0, to.1);
        name_changed(&mut t, to.0, to.1, Some(entry));
        Ok(())
    }

    /// The paths of `ino`'s names other than its first.
    pub(in crate::fs) fn extra_paths(&self, ino: u64) -> Vec<String> {
        self.table().extra_paths(ino)
    }

    /// Whether `parent/name` leads to `ino` by a name other than its first.
    pub(in crate::fs) fn is_other_name(&self, ino: u64, parent: u64, name: &str) -> bool {
        self.table().is_extra_name(ino, parent, name)
    }

    /// Whether `ino` has more than one name.
    pub(in crate::fs) fn has_links(&self, ino: u64) -> bool {
        self.table().get(ino).is_some_and(|n| n.nlink() > 1)
    }

    /// A name of `ino` other than its first moved from `from` to `to`.
    pub(in crate::fs) fn other_name_moved(&self, ino: u64, from: (u64, &str), to: (u64, &str)) {
        let mut t = self.table();
        t.rename_extra(ino, from, to);
        let entry = t.get(ino).map(|n| n.entry.clone());
        name_changed(&mut t, from.0, from.1, None);
        name_changed(&mut t, to.0, to.1, entry);
        t.add_negative(from.0, from.1);
    }
}
