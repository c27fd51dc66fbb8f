//! Hard links within a mount. One node, several names (inode/links.rs); in the bucket
//! each name is an object with the same bytes: `link` copies the first name's object on
//! the server (no byte through the node), and each upload of the file copies what it
//! sent to the other names before it counts as done (`copy_to_links`). Every name's
//! object carries the link id (`Posix::link`), so that a mount that sees two names with
//! the same id and ETag shows them as one file again. See SEMANTICS.md, "Hard links".

use flowfs_client::Version;
use std::sync::Arc;

use flowfs_client::ClientError;

use crate::error::{FsError, Result};
use crate::inode::Kind;
use crate::meta::Posix;

use super::WritePath;
use super::{valid_name, Attr, Fs};

impl Fs {
    /// `link`: `newparent/newname` becomes one more name of the file `ino`. The file's
    /// content is made durable first (its object is what the new name copies).
    pub async fn link(self: &Arc<Self>, ino: u64, newparent: u64, newname: &str) -> Result<Attr> {
        self.w.check_writable_in(newparent, newname)?;
        valid_name(newname)?;
        self.ns.linkable(ino)?;
        // Asked as a lookup (a name another client removed is free), not counted as
        // the kernel's.
        match self.lookup(newparent, newname).await {
            Ok(a) => {
                self.ns.lookup_undone(a.ino);
                return Err(FsError::Exists);
            }
            Err(FsError::NotFound) => {}
            Err(e) => return Err(e),
        }
        // No rename, unlink or metadata rewrite of the file runs meanwhile.
        let _key = self.ns.locks().key(ino).await;
        self.ns.linkable(ino)?;
        if let Some(staged) = self.wb.file(ino) {
            self.wb.refresh_passthrough(Some(ino));
            self.w.wait_durable(ino, &staged).await?;
        }
        // No upload starts until the new name is recorded: the next one copies to it.
        let _name = self.wb.hold_name(ino).await;
        let to = self.ns.child_path(newparent, newname)?;
        self.keys.check(&to, false)?;
        let from = self.ns.path(ino).ok_or(FsError::NotFound)?;
        let (id, etag) = self.w.link_id(ino, &from).await?;
        let _dest = self.up.keys().hold(&self.keys.key(&to)).await;
        self.client
            .copy(
                Version::any(&self.keys.key(&from)),
                &self.keys.key(&to),
                None,
            )
            .await?;
        self.ns.linked(ino, (newparent, newname), id, etag)?;
        let attr = self.w.attr_now(ino)?;
        self.w.rejournal(ino)?;
        Ok(attr)
    }
}

impl WritePath {
    /// A staged file's names changed: its journal record names them again, so that a
    /// recovery copies to exactly the names it has.
    fn rejournal(&self, ino: u64) -> Result<()> {
        if self.wb.rekey(ino) {
            self.journal(ino)?;
        }
        Ok(())
    }

    /// The link id of the object at `path` (given to it, by a copy onto itself with
    /// its metadata kept, if it has none yet) and its ETag afterwards.
    async fn link_id(&self, ino: u64, path: &str) -> Result<(u64, Arc<str>)> {
        let key = self.keys.key(path);
        let head = self.client.head(&key).await?;
        let mut posix = Posix::decode(&head.metadata);
        if let Some(id) = posix.link {
            return Ok((id, head.info.etag.as_str().into()));
        }
        let known = self.ns.read(ino, |n| n.entry.posix()).flatten();
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
        let paths = self.ns.extra_paths(ino);
        for path in paths {
            self.client
                .copy(Version::any(key), &self.keys.key(&path), None)
                .await?;
        }
        Ok(())
    }

    /// Removes one name of a file that has others: its object goes, the file and its
    /// staged content stay (under the next name, if this was its first). The caller
    /// holds the file's key lock.
    pub(super) async fn unlink_one_name(&self, ino: u64, parent: u64, name: &str) -> Result<()> {
        // An upload in flight copies to every name: this one must not come back.
        let _name = self.wb.hold_name(ino).await;
        let path = self.ns.child_path(parent, name)?;
        self.client.delete(&self.keys.key(&path)).await?;
        self.ns.name_removed(parent, name, Some(ino));
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
        let old = self.ns.child_path(from.0, from.1)?;
        let new = self.ns.child_path(to.0, to.1)?;
        self.keys.check(&new, false)?;
        if let Some(tino) = target {
            self.rename_clear_target(Kind::File, tino, &new).await?;
        }
        let _name = self.wb.hold_name(ino).await;
        let (old_key, new_key) = (self.keys.key(&old), self.keys.key(&new));
        {
            let _dest = self.up.keys().hold(&new_key).await;
            self.client
                .copy(Version::any(&old_key), &new_key, None)
                .await?;
        }
        self.client.delete(&old_key).await?;
        self.ns.other_name_moved(ino, from, to);
        self.rejournal(ino)
    }
}
