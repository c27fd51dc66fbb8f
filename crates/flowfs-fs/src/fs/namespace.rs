//! Changes to the name space: create, mkdir, symlink, unlink, rmdir, rename, setattr.

use super::*;

impl Fs {
    pub(super) async fn resolve(&self, parent: u64, name: &str) -> Result<u64> {
        if let Some(ino) = self.inodes.lock().child(parent, name) {
            return Ok(ino);
        }
        let a = self.lookup(parent, name).await?;
        // The lookup above is ours, not the kernel's.
        if let Some(n) = self.inodes.lock().get_mut(a.ino) {
            n.lookup_undone();
        }
        Ok(a.ino)
    }

    /// Creates an empty file (staged locally, uploaded at its last close) and opens it for
    /// writing; it belongs to the mounting user.
    pub async fn create(
        self: &Arc<Self>,
        parent: u64,
        name: &str,
        mode: u32,
    ) -> Result<(Attr, u64)> {
        self.create_as(parent, name, mode, None).await
    }

    /// `create` by the user `owner` (uid, gid: the caller's), whose object carries them.
    pub async fn create_as(
        self: &Arc<Self>,
        parent: u64,
        name: &str,
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<(Attr, u64)> {
        self.check_writable()?;
        valid_name(name)?;
        let ino = {
            let mut t = self.inodes.lock();
            if t.get(parent).map(|p| p.entry.kind) != Some(Kind::Dir) {
                return Err(FsError::NotDir);
            }
            self.check_key(
                &join(&t.path(parent).ok_or(FsError::NotFound)?, name),
                false,
            )?;
            let e = Entry {
                kind: Kind::File,
                size: 0,
                mtime: SystemTime::now(),
                etag: None,
                target: None,
                posix: Some(self.new_posix(crate::meta::S_IFREG | mode & 0o7777, owner)),
            };
            let ino = t.new_node(parent, name, e.clone());
            if let Some(n) = t.get_mut(ino) {
                n.looked_up();
            }
            Self::listing_put(&mut t, parent, name, Some(e));
            Self::entries_changed(&mut t, parent);
            ino
        };
        let staged = match self.new_staged(ino, NewFile::Created, b"") {
            Ok(s) => s,
            Err(e) => {
                self.undo_create(parent, name, ino);
                return Err(e);
            }
        };
        let fh = self.open_local(ino, staged, true);
        let attr = self.attr_of(&self.inodes.lock(), ino)?;
        Ok((attr, fh))
    }

    /// mknod of a regular file: an empty file, uploaded at once.
    pub async fn mknod(
        self: &Arc<Self>,
        parent: u64,
        name: &str,
        mode: u32,
        rdev: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<Attr> {
        let bits = mode & libc::S_IFMT;
        if [libc::S_IFIFO, libc::S_IFSOCK, libc::S_IFCHR, libc::S_IFBLK].contains(&bits) {
            return self.mknod_special(parent, name, mode, rdev, owner).await;
        }
        if bits != libc::S_IFREG && bits != 0 {
            return Err(FsError::Invalid("mknod of this file type"));
        }
        let (attr, fh) = self.create_as(parent, name, mode, owner).await?;
        self.release(fh)?;
        Ok(attr)
    }

    /// Creates a directory as an empty marker object `name/`, so that it survives a remount
    /// while empty; it belongs to the mounting user.
    pub async fn mkdir(&self, parent: u64, name: &str, mode: u32) -> Result<Attr> {
        self.mkdir_as(parent, name, mode, None).await
    }

    /// `mkdir` by the user `owner` (uid, gid: the caller's), whose marker carries them.
    pub async fn mkdir_as(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<Attr> {
        self.check_writable()?;
        valid_name(name)?;
        let (path, known_absent) = {
            let t = self.inodes.lock();
            let p = t.get(parent).ok_or(FsError::NotFound)?;
            if p.entry.kind != Kind::Dir {
                return Err(FsError::NotDir);
            }
            // The kernel's lookup just before found nothing: from a listing or a negative
            // entry younger than the TTL, that answer stands without a second round trip
            // (Nextflow makes two directories per task).
            let absent = t.child(parent, name).is_none()
                && matches!(p.cached_child(name, self.cfg.metadata_ttl), Some(None));
            (
                join(&t.path(parent).ok_or(FsError::NotFound)?, name),
                absent,
            )
        };
        self.check_key(&path, true)?;
        if !known_absent && self.stat_remote(&path, false).await?.is_some() {
            return Err(FsError::Exists);
        }
        // The marker object makes an empty directory survive a remount; its metadata
        // holds the directory's attributes (as s3fs writes them), and tells a listing of
        // it that its objects may carry theirs.
        let mut e = Entry::dir(SystemTime::now());
        e.posix = Some(self.new_posix(libc::S_IFDIR | mode & 0o7777, owner));
        let mut metadata = HashMap::new();
        let mut posix = self.full_posix(&e);
        posix.mtime = Some(e.mtime);
        posix.encode_into(&mut metadata);
        self.client
            .put(
                &format!("{}/", self.key(&path)),
                bytes::Bytes::new(),
                &metadata,
            )
            .await?;
        let mut t = self.inodes.lock();
        let at = Instant::now();
        let ino = t.upsert(parent, name, &e, Some(at));
        Self::listing_put(&mut t, parent, name, Some(e));
        Self::entries_changed(&mut t, parent);
        // It was just checked to be empty: names created in it need no lookup request.
        t.set_listing(
            ino,
            Some(Listing {
                at,
                entries: Arc::default(),
            }),
        );
        self.counted(&mut t, ino)
    }

    /// Creates a symlink: staged and uploaded like a file, as a small object whose metadata
    /// holds the target.
    pub async fn symlink(self: &Arc<Self>, parent: u64, name: &str, target: &str) -> Result<Attr> {
        self.symlink_as(parent, name, target, None).await
    }

    /// `symlink` by the user `owner` (uid, gid: the caller's).
    pub async fn symlink_as(
        self: &Arc<Self>,
        parent: u64,
        name: &str,
        target: &str,
        owner: Option<(u32, u32)>,
    ) -> Result<Attr> {
        self.check_writable()?;
        valid_name(name)?;
        if target.len() as u64 > MAX_SYMLINK {
            return Err(FsError::NameTooLong);
        }
        // The kernel looked the name up just before (and found nothing), as for create:
        // no second round trip to the server here. Like a file, the symlink is staged and
        // uploaded in the background (Nextflow makes one per input of every task).
        let ino = {
            let mut t = self.inodes.lock();
            if t.get(parent).map(|p| p.entry.kind) != Some(Kind::Dir) {
                return Err(FsError::NotDir);
            }
            self.check_key(
                &join(&t.path(parent).ok_or(FsError::NotFound)?, name),
                false,
            )?;
            let e = Entry {
                kind: Kind::Symlink,
                size: target.len() as u64,
                mtime: SystemTime::now(),
                etag: None,
                target: Some(target.to_string()),
                posix: Some(self.new_posix(0o120_777, owner)),
            };
            let ino = t.new_node(parent, name, e.clone());
            if let Some(n) = t.get_mut(ino) {
                n.looked_up();
            }
            Self::listing_put(&mut t, parent, name, Some(e));
            Self::entries_changed(&mut t, parent);
            ino
        };
        if let Err(e) = self.new_staged(ino, NewFile::Symlink, target.as_bytes()) {
            self.undo_create(parent, name, ino);
            return Err(e);
        }
        if let Some((_, true)) = self.wb.request_upload(ino) {
            self.spawn_upload(ino);
        }
        self.attr_of(&self.inodes.lock(), ino)
    }

    /// Removes the name of a file or symlink and deletes its object; a staged copy is
    /// never uploaded again.
    pub async fn unlink(&self, parent: u64, name: &str) -> Result<()> {
        self.check_writable()?;
        let ino = self.resolve(parent, name).await?;
        let key = {
            let t = self.inodes.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            if n.entry.kind == Kind::Dir {
                return Err(FsError::IsDir);
            }
            self.key(&t.path(ino).ok_or(FsError::NotFound)?)
        };
        if self.wb.retire(ino).await.unwrap_or(true) {
            self.client.delete(&key).await?;
        }
        self.wb.forget_key(&key);
        let mut t = self.inodes.lock();
        if let Some(n) = t.get_mut(ino) {
            n.confirm(Instant::now());
            // Its link count changed (still open, fstat shows it).
            n.entry.posix.get_or_insert_with(Default::default).ctime = Some(SystemTime::now());
        }
        t.detach(parent, name);
        Self::listing_put(&mut t, parent, name, None);
        Self::entries_changed(&mut t, parent);
        t.add_negative(parent, name);
        Ok(())
    }

    /// Whether a directory holds anything, in the bucket or staged here.
    pub(super) async fn dir_has_children(&self, ino: u64, path: &str) -> Result<bool> {
        let staged_child = {
            let t = self.inodes.lock();
            let any = t.children_of(ino).any(|(i, _)| self.wb.stat(i).is_some());
            any
        };
        if staged_child {
            return Ok(true);
        }
        let prefix = self.dir_prefix(path);
        let page = self
            .client
            .list_page(&prefix, Some("/"), None, Some(2))
            .await?;
        Ok(!page.prefixes.is_empty() || page.objects.iter().any(|o| o.key != prefix))
    }

    /// Removes an empty directory.
    pub async fn rmdir(&self, parent: u64, name: &str) -> Result<()> {
        self.check_writable()?;
        let ino = self.resolve(parent, name).await?;
        let path = {
            let t = self.inodes.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            if n.entry.kind != Kind::Dir {
                return Err(FsError::NotDir);
            }
            t.path(ino).ok_or(FsError::NotFound)?
        };
        if self.dir_has_children(ino, &path).await? {
            return Err(FsError::NotEmpty);
        }
        self.client.delete(&self.dir_prefix(&path)).await?;
        let mut t = self.inodes.lock();
        t.detach(parent, name);
        Self::listing_put(&mut t, parent, name, None);
        Self::entries_changed(&mut t, parent);
        t.add_negative(parent, name);
        Ok(())
    }

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
        self.check_writable()?;
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
        let (kind, old_path, new_path) = self.rename_paths(ino, newparent, newname)?;
        let replaced_remote = match target {
            Some(tino) => self.rename_clear_target(kind, tino, &new_path).await?,
            None => false,
        };
        // No upload of the source runs from here until the node has its new name: the
        // bucket's state decided below stays true, and the upload queued meanwhile goes to
        // the new name. A clean source (not staged) has no upload to hold back.
        let _name = self.wb.hold_name(ino).await;
        // Held until the nodes below have their new names: an upload that landed under
        // the old prefix after the LIST of the copy would be left behind there.
        let _moving = match kind {
            Kind::Dir => Some(self.dir_moves.write().await),
            _ => None,
        };
        match kind {
            Kind::Dir => self.rename_dir_remote(&old_path, &new_path).await?,
            _ => self.rename_file_remote(ino, &old_path, &new_path).await?,
        }
        // Until its upload lands, a staged source shadows the object it replaced.
        self.wb.set_shadows(ino, replaced_remote);
        self.rename_nodes(ino, (parent, name), (newparent, newname))
    }

    /// The source's kind, its path and the path it goes to; a directory cannot move into
    /// itself, and the new key must be one the store takes.
    fn rename_paths(
        &self,
        ino: u64,
        newparent: u64,
        newname: &str,
    ) -> Result<(Kind, String, String)> {
        let t = self.inodes.lock();
        let n = t.get(ino).ok_or(FsError::NotFound)?;
        if n.entry.kind == Kind::Dir && t.is_within(newparent, ino) {
            return Err(FsError::Invalid("cannot move a directory into itself"));
        }
        let new_path = join(&t.path(newparent).ok_or(FsError::NotFound)?, newname);
        self.check_key(&new_path, n.entry.kind == Kind::Dir)?;
        Ok((
            n.entry.kind,
            t.path(ino).ok_or(FsError::NotFound)?,
            new_path,
        ))
    }

    /// Makes room at the target name: an empty directory's marker goes, a file's pending
    /// upload is retired. True when the replaced file was (or may be) in the bucket.
    async fn rename_clear_target(&self, kind: Kind, tino: u64, new_path: &str) -> Result<bool> {
        let tkind = self.inodes.lock().get(tino).map(|n| n.entry.kind);
        match (kind == Kind::Dir, tkind == Some(Kind::Dir)) {
            (false, true) => Err(FsError::IsDir),
            (true, false) => Err(FsError::NotDir),
            (true, true) => {
                if self.dir_has_children(tino, new_path).await? {
                    return Err(FsError::NotEmpty);
                }
                self.client.delete(&self.dir_prefix(new_path)).await?;
                Ok(false)
            }
            // A staged target loses its pending upload: the source replaces it.
            (false, false) => Ok(self.wb.retire(tino).await.unwrap_or(true)),
        }
    }

    /// Moves a file's object in the bucket, as far as its write-back state says one is
    /// there (the caller holds its naming lock).
    async fn rename_file_remote(&self, ino: u64, old_path: &str, new_path: &str) -> Result<()> {
        match self.wb.remote_state(ino) {
            // Only staged here: its upload goes to the new name.
            Some((false, _)) => {}
            // Staged and changed since its last upload: drop the old object.
            Some((true, true)) => self.client.delete(&self.key(old_path)).await?,
            // Clean: the bucket's copy moves.
            Some((true, false)) | None => {
                self.client
                    .copy(&self.key(old_path), &self.key(new_path))
                    .await?;
                self.client.delete(&self.key(old_path)).await?;
            }
        }
        Ok(())
    }

    /// The namespace after a rename: the node under its new name, both listings and the
    /// old name's negative entry; staged files below a moved directory journaled under
    /// their new keys.
    fn rename_nodes(&self, ino: u64, from: (u64, &str), to: (u64, &str)) -> Result<()> {
        let ((parent, name), (newparent, newname)) = (from, to);
        let staged = self.wb.staged(false);
        let rejournal: Vec<u64> = {
            let mut t = self.inodes.lock();
            t.rename(ino, newparent, newname);
            let entry = t.get_mut(ino).map(|n| {
                n.reconfirm();
                // Its ctime is now, as Linux file systems show (in memory only: the copy
                // keeps the metadata it had). Unknown attributes stay unknown.
                if let Some(p) = n.entry.posix.as_mut() {
                    p.ctime = Some(SystemTime::now());
                }
                n.entry.clone()
            });
            Self::listing_put(&mut t, parent, name, None);
            Self::entries_changed(&mut t, parent);
            Self::listing_put(&mut t, newparent, newname, entry);
            Self::entries_changed(&mut t, newparent);
            t.add_negative(parent, name);
            t.set_listing(ino, None);
            staged
                .iter()
                .map(|(i, _)| *i)
                .filter(|i| t.is_within(*i, ino))
                .collect()
        };
        for i in rejournal {
            if self.wb.rekey(i) {
                self.journal(i)?;
            }
        }
        Ok(())
    }

    /// Moves every object under a directory prefix (S3 has no rename).
    pub(super) async fn rename_dir_remote(&self, old: &str, new: &str) -> Result<()> {
        let (from, to) = (self.dir_prefix(old), self.dir_prefix(new));
        let mut keys = Vec::new();
        let mut token = None;
        loop {
            let page = self.client.list_page(&from, None, token, None).await?;
            keys.extend(page.objects.into_iter().map(|o| o.key));
            token = page.next_token;
            if token.is_none() {
                break;
            }
        }
        // Every folder below `from`, whether it has a marker object or not.
        let mut folders = std::collections::BTreeSet::new();
        folders.insert(from.clone());
        for k in &keys {
            let rel = &k[from.len()..];
            for (i, _) in rel.match_indices('/') {
                folders.insert(format!("{from}{}", &rel[..=i]));
            }
        }
        let objects: Vec<&String> = keys.iter().filter(|k| !k.ends_with('/')).collect();
        let client = &self.client;
        batched(
            &objects,
            |k| {
                let (client, k) = (client.clone(), (*k).clone());
                let nk = format!("{to}{}", &k[from.len()..]);
                async move {
                    client.copy(&k, &nk).await?;
                    client.delete(&k).await
                }
            },
            |r| r.map_err(FsError::from),
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
                async move { client.put(&nk, bytes::Bytes::new(), &HashMap::new()).await }
            },
            |r| r.map(|_| ()).map_err(FsError::from),
        )
        .await?;
        // Servers with real folders (SeaweedFS) keep an emptied folder listed until it is
        // deleted, and cannot delete one that still holds a folder: deepest first, one
        // depth at a time. Elsewhere these are deletes of absent keys.
        let mut by_depth: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for f in folders {
            by_depth.entry(f.matches('/').count()).or_default().push(f);
        }
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

    /// Changes mode bits, size (truncation, staged) or mtime.
    pub async fn setattr(
        self: &Arc<Self>,
        ino: u64,
        mode: Option<u32>,
        size: Option<u64>,
        mtime: Option<SystemTime>,
        fh: Option<u64>,
    ) -> Result<Attr> {
        let c = AttrChanges {
            mode,
            mtime,
            ..AttrChanges::default()
        };
        self.setattr_with(ino, size, c, fh).await
    }

    /// Changes the size (truncation, staged) and the attributes in `c` (see attrs.rs).
    pub async fn setattr_with(
        self: &Arc<Self>,
        ino: u64,
        size: Option<u64>,
        c: AttrChanges,
        fh: Option<u64>,
    ) -> Result<Attr> {
        if let Some(size) = size {
            self.check_writable()?;
            let kind = self.inodes.lock().get(ino).map(|n| n.entry.kind);
            match kind {
                Some(Kind::File) => {}
                Some(Kind::Dir) => return Err(FsError::IsDir),
                _ => return Err(FsError::Invalid("size of a non-file")),
            }
            self.truncate(ino, size, fh).await?;
        }
        self.change_attrs(ino, c)?;
        self.attr_of(&self.inodes.lock(), ino)
    }

    /// truncate(2) and ftruncate(2): the staged content gets its new length; without an
    /// open writer it is uploaded as a file closed just now would be.
    async fn truncate(self: &Arc<Self>, ino: u64, size: u64, fh: Option<u64>) -> Result<()> {
        let writer = fh.and_then(|fh| match self.files.lock().get(&fh) {
            Some(Handle::Local {
                staged,
                write: true,
                ..
            }) => Some(staged.clone()),
            _ => None,
        });
        if let Some(staged) = writer {
            return self.truncate_staged(ino, &staged, size);
        }
        // As a writer of its own, released at once: that queues the upload.
        let staged = self.open_staged(ino, true, size == 0).await?;
        let fh = self.open_local(ino, staged.clone(), true);
        let r = self.truncate_staged(ino, &staged, size);
        self.release(fh)?;
        r
    }

    /// Gives `ino`, just created, its staged file and journal record.
    pub(super) fn new_staged(
        &self,
        ino: u64,
        kind: NewFile,
        content: &[u8],
    ) -> Result<Arc<StagedFile>> {
        let file = self.wb.insert_new(ino, kind, content)?;
        if let Err(e) = self.journal(ino) {
            self.wb.remove_new(ino);
            return Err(e);
        }
        Ok(file)
    }

    /// Takes back a name whose staged file could not be made.
    pub(super) fn undo_create(&self, parent: u64, name: &str, ino: u64) {
        let mut t = self.inodes.lock();
        if let Some(n) = t.get_mut(ino) {
            n.lookup_undone();
            n.confirm(Instant::now());
        }
        t.detach(parent, name);
        Self::listing_put(&mut t, parent, name, None);
    }
}
