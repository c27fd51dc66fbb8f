//! Rename: a file is copied and deleted (S3 has no rename), a directory moves every key
//! below it; the namespace and the staged files below follow.

use flowfs_client::Version;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use flowfs_client::ClientError;

use crate::error::{FsError, Result};
use crate::inode::Kind;

use super::WritePath;
use super::{batched, valid_name, Fs};

impl Fs {
    /// Renames a file (copy and delete) or a directory (every key below it); `noreplace`
    /// fails with EEXIST.
    pub async fn rename(
        self: &Arc<Self>,
        parent: u64,
        name: &str,
        newparent: u64,
        newname: &str,
        noreplace: bool,
    ) -> Result<()> {
        self.w.check_writable_in(parent, name)?;
        self.w.check_writable_in(newparent, newname)?;
        valid_name(newname)?;
        let ino = self.resolve(parent, name).await?;
        let target = match self.resolve(newparent, newname).await {
            Ok(t) => Some(t),
            Err(FsError::NotFound) => None,
            Err(e) => return Err(e),
        };
        if target == Some(ino) {
            return Ok(());
        }
        if noreplace && target.is_some() {
            return Err(FsError::Exists);
        }
        // A target with other names keeps them: only this name goes (not atomically).
        let target = match target {
            Some(t) if self.ns.has_links(t) => {
                let _target = self.ns.locks().key(t).await;
                self.w.unlink_one_name(t, newparent, newname).await?;
                None
            }
            t => t,
        };
        // No metadata rewrite of the source or the target lands on either name while
        // the source moves (taken in inode order: two renames never wait on each other).
        let (first, second) = (ino.min(target.unwrap_or(0)), ino.max(target.unwrap_or(0)));
        let _first = match first {
            0 => None,
            i => Some(self.ns.locks().key(i).await),
        };
        let _second = self.ns.locks().key(second).await;
        if self.ns.is_other_name(ino, parent, name) {
            return (self
                .w
                .rename_other_name(ino, (parent, name), (newparent, newname), target))
            .await;
        }
        let check = |path: &str, dir: bool| self.keys.check(path, dir);
        let (kind, old_path, new_path) = self.ns.rename_paths(ino, (newparent, newname), check)?;
        let replaced_remote = match target {
            Some(tino) => self.w.rename_clear_target(kind, tino, &new_path).await?,
            None => false,
        };
        // No upload of the source runs from here until the node has its new name: the
        // bucket's state decided below stays true, and the upload queued meanwhile goes to
        // the new name. A clean source (not staged) has no upload to hold back.
        let _name = self.wb.hold_name(ino).await;
        // Held until the nodes below have their new names: an upload that landed under
        // the old prefix after the LIST of the copy would be left behind there.
        let _moving = match kind {
            Kind::Dir => Some(self.up.hold_all().await),
            _ => None,
        };
        let copied = match kind {
            Kind::Dir => self.w.rename_dir_remote(&old_path, &new_path).await?,
            _ => self.w.rename_file_remote(ino, &old_path, &new_path).await?,
        };
        // Until its upload lands, a staged source shadows the object it replaced.
        self.wb.set_shadows(ino, replaced_remote);
        self.w
            .rename_nodes(ino, (parent, name), (newparent, newname))?;
        self.ns.take_copied_etags(ino, &copied);
        Ok(())
    }
}

impl WritePath {
    /// Makes room at the target name: an empty directory's marker goes, a file's pending
    /// upload is retired. True when the replaced file was (or may be) in the bucket.
    pub(super) async fn rename_clear_target(
        &self,
        kind: Kind,
        tino: u64,
        new_path: &str,
    ) -> Result<bool> {
        let tkind = self.ns.read(tino, |n| n.entry.kind);
        match (kind == Kind::Dir, tkind == Some(Kind::Dir)) {
            (false, true) => Err(FsError::IsDir),
            (true, false) => Err(FsError::NotDir),
            (true, true) => {
                if self.dir_has_children(tino, new_path).await? {
                    return Err(FsError::NotEmpty);
                }
                self.client.delete(&self.keys.dir_prefix(new_path)).await?;
                Ok(false)
            }
            // A staged target loses its pending upload: the source replaces it.
            (false, false) => Ok(self.wb.retire(tino).is_none_or(|r| r.remote)),
        }
    }

    /// Moves a file's object in the bucket, as far as its write-back state says one is
    /// there (the caller holds its naming lock).
    /// The copy's ETag, as `take_copied_etags` wants it, when the object was copied.
    async fn rename_file_remote(
        &self,
        ino: u64,
        old_path: &str,
        new_path: &str,
    ) -> Result<Vec<(String, String)>> {
        match self.wb.remote_state(ino) {
            // Only staged here: its upload goes to the new name.
            Some((false, _)) => Ok(Vec::new()),
            // Staged and changed since its last upload: drop the old object.
            Some((true, true)) => {
                self.client.delete(&self.keys.key(old_path)).await?;
                Ok(Vec::new())
            }
            // Clean: the bucket's copy moves, once an upload of a file it replaced that
            // may still land there is over (its stray's delete would take the copy).
            Some((true, false)) | None => {
                let _dest = self.up.keys().hold(&self.keys.key(new_path)).await;
                let copy = (self.client)
                    .copy(
                        Version::any(&self.keys.key(old_path)),
                        &self.keys.key(new_path),
                        None,
                    )
                    .await?;
                self.client.delete(&self.keys.key(old_path)).await?;
                Ok(vec![(String::new(), copy.etag)])
            }
        }
    }

    /// The namespace after a rename: the node under its new name, both listings and the
    /// old name's negative entry; staged files below a moved directory (or with a hard
    /// link there) journaled under their new keys.
    fn rename_nodes(&self, ino: u64, from: (u64, &str), to: (u64, &str)) -> Result<()> {
        let staged = self.wb.staged(false);
        let staged: Vec<u64> = staged.iter().map(|(i, _)| *i).collect();
        let rejournal = self.ns.renamed(ino, from, to, &staged);
        for i in rejournal {
            if self.wb.rekey(i) {
                self.journal(i)?;
            }
        }
        Ok(())
    }

    /// Moves every object under a directory prefix (S3 has no rename).
    /// Returns each copied object's path below the directory and its new ETag.
    pub(super) async fn rename_dir_remote(
        &self,
        old: &str,
        new: &str,
    ) -> Result<Vec<(String, String)>> {
        let (from, to) = (self.keys.dir_prefix(old), self.keys.dir_prefix(new));
        let keys = self.all_keys(&from).await?;
        // Every folder below `from`, whether it has a marker object or not.
        let mut folders = BTreeSet::new();
        folders.insert(from.clone());
        for k in &keys {
            let rel = &k[from.len()..];
            for (i, _) in rel.match_indices('/') {
                folders.insert(format!("{from}{}", &rel[..=i]));
            }
        }
        let objects: Vec<&String> = keys.iter().filter(|k| !k.ends_with('/')).collect();
        let client = &self.client;
        let mut copied = Vec::with_capacity(objects.len());
        batched(
            &objects,
            |k| {
                let (client, k) = (client.clone(), (*k).clone());
                let rel = k[from.len()..].to_string();
                let nk = format!("{to}{rel}");
                async move {
                    let copy = client.copy(Version::any(&k), &nk, None).await?;
                    client.delete(&k).await?;
                    Ok::<_, ClientError>((rel, copy.etag))
                }
            },
            |r| {
                copied.push(r?);
                Ok(())
            },
        )
        .await?;
        // Markers are empty (some servers cannot copy them) and keep empty directories.
        let markers: Vec<String> = keys
            .iter()
            .filter(|k| k.ends_with('/'))
            .map(|k| format!("{to}{}", &k[from.len()..]))
            .collect();
        batched(
            &markers,
            |nk| {
                let (client, nk) = (client.clone(), nk.clone());
                async move { client.put(&nk, Default::default(), &HashMap::new()).await }
            },
            |r| r.map(|_| ()).map_err(FsError::from),
        )
        .await?;
        self.delete_folders(folders).await?;
        Ok(copied)
    }

    /// Every key below `prefix`, all listing pages.
    async fn all_keys(&self, prefix: &str) -> Result<Vec<String>> {
        let (mut keys, mut token) = (Vec::new(), None);
        loop {
            let page = self
                .client
                .list_page(flowfs_client::List::flat(prefix).token(token))
                .await?;
            keys.extend(page.objects.into_iter().map(|o| o.key));
            token = page.next_token;
            if token.is_none() {
                return Ok(keys);
            }
        }
    }

    /// Servers with real folders (SeaweedFS) keep an emptied folder listed until it is
    /// deleted, and cannot delete one that still holds a folder: deepest first, one
    /// depth at a time. Elsewhere these are deletes of absent keys.
    async fn delete_folders(&self, folders: BTreeSet<String>) -> Result<()> {
        let mut by_depth: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for f in folders {
            by_depth.entry(f.matches('/').count()).or_default().push(f);
        }
        let client = &self.client;
        for (_, level) in by_depth.into_iter().rev() {
            batched(
                &level,
                |f| {
                    let (client, f) = (client.clone(), f.clone());
                    async move { client.delete(&f).await }
                },
                |r| match r {
                    Ok(()) | Err(ClientError::NotFound(_)) => Ok(()),
                    Err(e) => Err(e.into()),
                },
            )
            .await?;
        }
        Ok(())
    }
}
