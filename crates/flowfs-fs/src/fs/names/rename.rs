//! The namespace's side of a rename (fs/rename.rs has the store's): where a node may
//! go, the node under its new name, and the ETags its objects' copies took.

use std::sync::Arc;
use std::time::SystemTime;

use super::{name_changed, Namespace};
use crate::error::{FsError, Result};
use crate::inode::{join_path, Kind};

impl Namespace {
    /// The source's kind, its path and the path it goes to; a directory cannot move into
    /// itself, and `check` refuses a new path the store does not take (with whether it
    /// is a directory's).
    pub(in crate::fs) fn rename_paths(
        &self,
        ino: u64,
        (newparent, newname): (u64, &str),
        check: impl FnOnce(&str, bool) -> Result<()>,
    ) -> Result<(Kind, String, String)> {
        let t = self.table();
        let n = t.get(ino).ok_or(FsError::NotFound)?;
        if n.entry.kind == Kind::Dir && t.is_within(newparent, ino) {
            return Err(FsError::Invalid("cannot move a directory into itself"));
        }
        let new_path = join_path(&t.path(newparent).ok_or(FsError::NotFound)?, newname);
        check(&new_path, n.entry.kind == Kind::Dir)?;
        let old_path = t.path(ino).ok_or(FsError::NotFound)?;
        Ok((n.entry.kind, old_path, new_path))
    }

    /// The namespace after a rename: the node under its new name, both listings and the
    /// old name's negative entry. Returns those of the `staged` nodes whose keys changed
    /// with it (below a moved directory, or with a hard link there).
    pub(in crate::fs) fn renamed(
        &self,
        ino: u64,
        (parent, name): (u64, &str),
        (newparent, newname): (u64, &str),
        staged: &[u64],
    ) -> Vec<u64> {
        let mut t = self.table();
        t.rename(ino, newparent, newname);
        let entry = t.get_mut(ino).map(|n| {
            n.reconfirm();
            // Its ctime is now, as Linux file systems show (in memory only: the copy
            // keeps the metadata it had). Unknown attributes stay unknown.
            if let Some(p) = n.entry.posix.as_mut().map(Arc::make_mut) {
                p.ctime = Some(SystemTime::now());
            }
            n.entry.clone()
        });
        name_changed(&mut t, parent, name, None);
        name_changed(&mut t, newparent, newname, entry);
        t.add_negative(parent, name);
        t.set_listing(ino, None);
        let moved = |i: u64| t.is_within(i, ino) || t.has_extra_name_within(i, ino);
        staged.iter().copied().filter(|&i| moved(i)).collect()
    }

    /// The moved nodes (`ino`, or the nodes below it at the paths `copied` names relative
    /// to it, `""` for itself) take the ETags of their copies: a copy's ETag is not always
    /// its source's (S3's copy of a multipart object, Azure's of any blob), and a read
    /// with the old one fails as if the file had changed on the server.
    pub(in crate::fs) fn take_copied_etags(&self, ino: u64, copied: &[(String, String)]) {
        let mut t = self.table();
        for (rel, etag) in copied {
            let mut at = Some(ino);
            for name in rel.split('/').filter(|n| !n.is_empty()) {
                // A listing kept below the moved directory holds the old ETags: the
                // next lookup there lists again.
                if let Some(dir) = at.filter(|&d| d != ino) {
                    t.set_listing(dir, None);
                }
                // A hard link's other name is a copy: the file reads its first name.
                at = at.and_then(|d| t.child(d, name).filter(|&i| !t.is_extra_name(i, d, name)));
            }
            let Some(n) = at.and_then(|i| t.get_mut(i)) else {
                continue;
            };
            n.retag(etag.as_str().into());
        }
    }
}
