//! Hard links within a mount. One node, several names (inode/links.rs); in the bucket
//! each name is an object with the same bytes: `link` copies the first name's object on
//! the server (no byte through the node), and each upload of the file copies what it
//! sent to the other names before it counts as done (`copy_to_links`). Every name's
//! object carries the link id (`Posix::link`), so that a mount that sees two names with
//! the same id and ETag shows them as one file again. See SEMANTICS.md, "Hard links".

use flowfs_client::Version;
use std::sync::Arc;
use std::time::SystemTime;

use flowfs_client::ClientError;

use crate::error::{FsError, Result};
use crate::inode::Kind;
use crate::meta::Posix;

use super::{join, valid_name, Attr, Fs};

impl Fs {
    /// `link`: `newparent/newname` becomes one more name of the file `ino`. The file's
    /// content is made durable first (its object is what the new name copies).
    pub async fn link(self: &Arc<Self>, ino: u64, newparent: u64, newname: &str) -> Result<Attr> {
        self.check_writable_in(newparent, newname)?;
        valid_name(newname)?;
        self.check_linkable(ino)?;
        // Asked as a lookup (a name another client removed is free), not counted as
        // the kernel's.
        match self.lookup(newparent, newname).await {
            Ok(a) => {
                if let Some(n) = self.ns.lock().get_mut(a.ino) {
                    n.lookup_undone();
                }
                return Err(FsError::Exists);
            }
            Err(FsError::NotFound) => {}
            Err(e) => return Err(e),
        }
        // No rename, unlink or metadata rewrite of the file runs meanwhile.
        let _key = self.ns.locks().key(ino).await;
        self.check_linkable(ino)?;
        if let Some(staged) = self.wb.file(ino) {
            self.refresh_passthrough(Some(ino));
            self.wait_durable(ino, &staged).await?;
        }
        // No upload starts until the new name is recorded: the next one copies to it.
        let _name = self.wb.hold_name(ino).await;
        let (from, to) = {
            let t = self.ns.lock();
            let to = join(&t.path(newparent).ok_or(FsError::NotFound)?, newname);
            self.check_key(&to, false)?;
            (t.path(ino).ok_or(FsError::NotFound)?, to)
        };
        let (id, etag) = self.link_id(ino, &from).await?;
        let _dest = self.up.keys().hold(&self.key(&to)).await;
        self.client
            .copy(Version::any(&self.key(&from)), &self.key(&to), None)
            .await?;
        let mut t = self.ns.lock();
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
        t.add_name(ino, newparent, newname);
        Self::listing_put(&mut t, newparent, newname, Some(entry));
        Self::entries_changed(&mut t, newparent);
        let attr = self.attr_of(&t, ino)?;
        drop(t);
        self.rejournal(ino)?;
        Ok(attr)
    }

    /// A staged file's names changed: its journal record names them again, so that a
    /// recovery copies to exactly the names it has.
    fn rejournal(&self, ino: u64) -> Result<()> {
        if self.wb.rekey(ino) {
            self.journal(ino)?;
        }
        Ok(())
    }

    /// A directory cannot be linked (EPERM, as link(2) says), nor a file whose last
    /// name is gone.
    fn check_linkable(&self, ino: u64) -> Result<()> {
        let t = self.ns.lock();
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

    /// The link id of the object at `path` (given to it, by a copy onto itself with
    /// its metadata kept, if it has none yet) and its ETag afterwards.
    async fn link_id(&self, ino: u64, path: &str) -> Result<(u64, Arc<str>)> {
        let key = self.key(path);
        let head = self.client.head(&key).await?;
        let mut posix = Posix::decode(&head.metadata);
        if let Some(id) = posix.link {
            return Ok((id, head.info.etag.as_str().into()));
        }
        let known = self.ns.lock().get(ino).and_then(|n| n.entry.posix());
        let id = known.and_then(|p| p.link).unwrap_or_else(rand::random);
        posix.link = Some(id);
        let mut metadata = head.metadata.clone();
        posix.encode_into(&mut metadata);
        let etag = head.info.etag.as_str();
        let put = (self.client)
            .replace_metadata(Version::new(&key, Some(etag)).rewrite(&metadata, head.info.size))
            .await?;
        Ok((id, put.etag.as_str().into()))
    }

    /// After an upload of `ino` to `key` landed: the file's other names get copies of
    /// it (the caller holds the file's name, so its names stay as they are).
    pub(super) async fn copy_to_links(
        &self,
        ino: u64,
        key: &str,
    ) -> std::result::Result<(), ClientError> {
        let paths = self.ns.lock().extra_paths(ino);
        for path in paths {
            self.client
                .copy(Version::any(key), &self.key(&path), None)
                .await?;
        }
        Ok(())
    }

    /// Whether `parent/name` leads to `ino` by a name other than its first.
    pub(super) fn is_other_name(&self, ino: u64, parent: u64, name: &str) -> bool {
        self.ns.lock().is_extra_name(ino, parent, name)
    }

    /// Whether `ino` has more than one name.
    pub(super) fn has_links(&self, ino: u64) -> bool {
        self.ns.lock().get(ino).is_some_and(|n| n.nlink() > 1)
    }

    /// Removes one name of a file that has others: its object goes, the file and its
    /// staged content stay (under the next name, if this was its first). The caller
    /// holds the file's key lock.
    pub(super) async fn unlink_one_name(&self, ino: u64, parent: u64, name: &str) -> Result<()> {
        // An upload in flight copies to every name: this one must not come back.
        let _name = self.wb.hold_name(ino).await;
        let path = join(&self.ns.lock().path(parent).ok_or(FsError::NotFound)?, name);
        self.client.delete(&self.key(&path)).await?;
        {
            let mut t = self.ns.lock();
            t.detach(parent, name);
            if let Some(n) = t.get_mut(ino) {
                n.entry.posix_mut().ctime = Some(SystemTime::now());
            }
            Self::listing_put(&mut t, parent, name, None);
            Self::entries_changed(&mut t, parent);
            t.add_negative(parent, name);
        }
        // Its first name may have changed: the journal names the key it goes to.
        self.rejournal(ino)
    }

    /// Renames a name of `ino` other than its first: its object is copied to the new
    /// name on the server and removed; `target`, a file without other names, is replaced.
    /// The caller holds the key locks of both.
    pub(super) async fn rename_other_name(
        &self,
        ino: u64,
        from: (u64, &str),
        to: (u64, &str),
        target: Option<u64>,
    ) -> Result<()> {
        let (old, new) = {
            let t = self.ns.lock();
            let dir = |d: u64| t.path(d).ok_or(FsError::NotFound);
            (join(&dir(from.0)?, from.1), join(&dir(to.0)?, to.1))
        };
        self.check_key(&new, false)?;
        if let Some(tino) = target {
            self.rename_clear_target(Kind::File, tino, &new).await?;
        }
        let _name = self.wb.hold_name(ino).await;
        let (old_key, new_key) = (self.key(&old), self.key(&new));
        {
            let _dest = self.up.keys().hold(&new_key).await;
            self.client
                .copy(Version::any(&old_key), &new_key, None)
                .await?;
        }
        self.client.delete(&old_key).await?;
        let mut t = self.ns.lock();
        t.rename_extra(ino, from, to);
        let entry = t.get(ino).map(|n| n.entry.clone());
        Self::listing_put(&mut t, from.0, from.1, None);
        Self::entries_changed(&mut t, from.0);
        Self::listing_put(&mut t, to.0, to.1, entry);
        Self::entries_changed(&mut t, to.0);
        t.add_negative(from.0, from.1);
        drop(t);
        self.rejournal(ino)
    }
}
