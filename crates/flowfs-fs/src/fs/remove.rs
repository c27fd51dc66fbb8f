//! Names removed: unlink (a file's object deleted, or its upload's result once it lands)
//! and rmdir (only an empty directory, as the store and this mount see it).

use std::sync::Arc;
use std::time::Instant;

use crate::error::{FsError, Result};
use crate::inode::Kind;

use super::Fs;
use super::WritePath;

impl Fs {
    /// Removes the name of a file or symlink and deletes its object; a staged copy is
    /// never uploaded again.
    pub async fn unlink(self: &Arc<Self>, parent: u64, name: &str) -> Result<()> {
        self.w.check_writable_in(parent, name)?;
        let ino = self.resolve(parent, name).await?;
        // A metadata rewrite landing after the delete would bring the object back.
        let _key = self.ns.locks().key(ino).await;
        let kind = self.ns.read_at(ino, |n, path| (n.entry.kind, path));
        let key = match kind.ok_or(FsError::NotFound)? {
            (Kind::Dir, _) => return Err(FsError::IsDir),
            (_, path) => self.keys.key(&path),
        };
        // The file lives on under its other names.
        if self.ns.has_links(ino) {
            return self.w.unlink_one_name(ino, parent, name).await;
        }
        let retired = self.wb.retire(ino);
        if retired.is_some_and(|r| r.in_flight) {
            self.up.keys().doom(&key);
        }
        if retired.is_none_or(|r| r.remote) {
            self.client.delete(&key).await?;
        }
        self.wb.forget_key(&key);
        // Its link count changed (still open, fstat shows it).
        self.ns.update(ino, |n| n.confirm(Instant::now()));
        self.ns.name_removed(parent, name, Some(ino));
        Ok(())
    }

    /// Removes an empty directory.
    pub async fn rmdir(self: &Arc<Self>, parent: u64, name: &str) -> Result<()> {
        self.w.check_writable_in(parent, name)?;
        let ino = self.resolve(parent, name).await?;
        // A rewrite of its marker landing after the delete would bring it back.
        let _key = self.ns.locks().key(ino).await;
        let kind = self.ns.read_at(ino, |n, path| (n.entry.kind, path));
        let path = match kind.ok_or(FsError::NotFound)? {
            (Kind::Dir, path) => path,
            _ => return Err(FsError::NotDir),
        };
        if self.w.dir_has_children(ino, &path).await? {
            return Err(FsError::NotEmpty);
        }
        self.w.delete_marker(&self.keys.dir_prefix(&path)).await?;
        self.ns.name_removed(parent, name, None);
        Ok(())
    }
}

impl WritePath {
    /// Whether a directory holds anything, in the bucket or staged here.
    pub(super) async fn dir_has_children(&self, ino: u64, path: &str) -> Result<bool> {
        let staged_child = self.ns.any_child(ino, |i| self.wb.stat(i).is_some());
        if staged_child {
            return Ok(true);
        }
        let prefix = self.keys.dir_prefix(path);
        // A stray of a file removed while it was uploaded is deleted by its upload's task:
        // not a child. Pages go on only while all they hold are strays (`rm -rf` of files
        // just written).
        let keys = self.up.keys();
        let size = if keys.strays().is_empty() { 2 } else { 1000 };
        let mut token = None;
        loop {
            let list = flowfs_client::List::dir(&prefix)
                .max_keys(size)
                .token(token);
            let page = self.client.list_page(list).await?;
            if !page.prefixes.is_empty()
                || (page.objects.iter()).any(|o| o.key != prefix && !keys.is_stray(&o.key))
            {
                return Ok(true);
            }
            match page.next_token {
                Some(next) => token = Some(next),
                None => return Ok(false),
            }
        }
    }

    /// Deletes the marker of a directory being removed. A stray below it (a removed file
    /// whose upload was in flight) may still land: on SeaweedFS its PUT makes the folder
    /// again, which stays listed once the stray is deleted, so the stray's task deletes
    /// the marker again (`delete_stray`). rmdir does not wait for that upload.
    async fn delete_marker(&self, marker: &str) -> Result<()> {
        let keys = self.up.keys();
        let _held = keys.hold(marker).await;
        keys.emptied(marker);
        let deleted = self.client.delete(marker).await;
        if deleted.is_err() {
            keys.remade(marker); // the directory stays
        }
        Ok(deleted?)
    }

    /// Deletes the object a removed file's upload landed at `key` (held), then the markers
    /// of the directories removed above it meanwhile.
    pub(super) async fn delete_stray(&self, key: &str) {
        if let Err(e) = self.client.delete(key).await {
            tracing::warn!(%key, "cannot delete an object uploaded under a name that was given up: {e}");
        }
        let keys = self.up.keys();
        for marker in keys.emptied_above(key) {
            let _held = keys.hold(&marker).await;
            if !keys.take_emptied(key, &marker) {
                continue; // made again meanwhile
            }
            if let Err(e) = self.client.delete(&marker).await {
                tracing::warn!(%marker, "cannot delete the marker of a removed directory again: {e}");
            }
        }
    }
}
