//! Write-back: files staged on local disk, written, and uploaded in the background;
//! fsync, flush at unmount and recovery of a dead mount's journal wait on or restart it.

use super::*;

impl Fs {
    /// The staged content of a file, downloading the object first unless the caller
    /// is about to replace it (`truncate_to`).
    pub(super) async fn stage(&self, ino: u64, truncate_to: Option<u64>) -> Result<Arc<Staged>> {
        let existing = self.inodes.lock().get(ino).and_then(|n| n.staged.clone());
        let staged = match existing {
            Some(s) => s,
            None => {
                let _guard = self.fill.lock().await;
                let (path, etag, size) = {
                    let t = self.inodes.lock();
                    let n = t.get(ino).ok_or(FsError::NotFound)?;
                    if let Some(s) = &n.staged {
                        (None, None, s.st.lock().size)
                    } else {
                        (
                            Some(t.path(ino).ok_or(FsError::NotFound)?),
                            n.entry.etag.clone(),
                            n.entry.size,
                        )
                    }
                };
                match path {
                    None => self
                        .inodes
                        .lock()
                        .get(ino)
                        .and_then(|n| n.staged.clone())
                        .ok_or(FsError::NotFound)?,
                    Some(path) => {
                        let staged = self.staging.create()?;
                        let keep = truncate_to.map_or(size, |t| t.min(size));
                        if keep > 0 {
                            let etag = etag.filter(|e| !e.is_empty());
                            download_into(
                                &self.client,
                                &self.key(&path),
                                etag.as_deref(),
                                size,
                                self.cfg.part_size,
                                &self.gets,
                                &staged.file,
                            )
                            .await?;
                        }
                        {
                            let mut st = staged.st.lock();
                            st.size = size;
                            // The bucket already holds this content.
                            st.gen = 1;
                            st.durable_gen = 1;
                        }
                        staged.file.set_len(size)?;
                        let mut t = self.inodes.lock();
                        let n = t.get_mut(ino).ok_or(FsError::NotFound)?;
                        n.staged = Some(staged.clone());
                        n.validated = None;
                        staged
                    }
                }
            }
        };
        if let Some(len) = truncate_to {
            if staged.st.lock().size != len || len == 0 {
                staged.set_len(len)?;
                self.journal(ino, &staged);
            }
        }
        Ok(staged)
    }

    /// Writes the journal record that makes `staged` survive a crash of this process.
    pub(super) fn journal(&self, ino: u64, staged: &Staged) {
        let (key, symlink) = {
            let t = self.inodes.lock();
            let symlink = t.get(ino).is_some_and(|n| n.entry.kind == Kind::Symlink);
            (t.path(ino).map(|p| self.key(&p)), symlink)
        };
        let Some(key) = key else { return };
        let mut st = staged.st.lock();
        if st.journaled.as_deref() == Some(key.as_str()) || st.deleted {
            return;
        }
        match self
            .staging
            .journal(staged, &self.cfg.bucket, &key, symlink)
        {
            Ok(()) => st.journaled = Some(key),
            Err(e) => tracing::warn!(%key, "cannot write the journal record: {e}"),
        }
    }

    pub(super) fn close_node(&self, ino: u64) {
        let mut t = self.inodes.lock();
        if let Some(n) = t.get_mut(ino) {
            n.open = n.open.saturating_sub(1);
        }
        t.remove_if_unreferenced(ino);
    }

    pub fn write(&self, fh: u64, off: u64, data: &[u8]) -> Result<u32> {
        let (ino, staged) = match self.handle(fh)? {
            Handle::Local {
                ino,
                staged,
                write: true,
            } => (ino, staged),
            _ => return Err(FsError::BadHandle),
        };
        if let Err(e) = staged.write_at(off, data) {
            let e = FsError::from(e);
            if !matches!(e, FsError::NoSpace(_)) {
                return Err(e);
            }
            // The task's output goes before cached data: free the disk and try once more.
            self.cache.make_room(data.len() as u64);
            staged.write_at(off, data)?;
        }
        if staged.st.lock().journaled.is_none() {
            self.journal(ino, &staged);
        }
        self.send_early(ino, &staged);
        Ok(data.len() as u32)
    }

    /// Starts the upload of the parts a front-to-back writer has left a whole part behind
    /// (the slack spares writers that patch what they have just written).
    pub(super) fn send_early(&self, ino: u64, staged: &Arc<Staged>) {
        let ps = self.cfg.part_size;
        let need_key = {
            let st = staged.st.lock();
            if !st.early_ok || st.size < st.sent + 2 * ps {
                return;
            }
            st.early.is_none()
        };
        let key = if need_key {
            match self.inodes.lock().path(ino) {
                Some(p) => Some(self.key(&p)),
                None => return,
            }
        } else {
            None
        };
        let mut st = staged.st.lock();
        if !st.early_ok {
            return;
        }
        let early = match (&st.early, key) {
            (Some(e), _) => e.clone(),
            (None, Some(key)) => {
                let e = Early::new(
                    self.client.clone(),
                    &self.cfg.bucket,
                    key,
                    staged.upload_note_path(),
                );
                st.early = Some(e.clone());
                e
            }
            (None, None) => return,
        };
        while st.size >= st.sent + 2 * ps {
            let index = st.sent / ps;
            st.sent += ps;
            early.send(staged.clone(), index, ps, self.slots.parts.clone());
        }
    }

    /// Returns once the file's content as of now is durable in the bucket.
    pub async fn fsync(self: &Arc<Self>, fh: u64) -> Result<()> {
        let (ino, staged) = match self.handle(fh)? {
            Handle::Local { ino, staged, .. } => (ino, staged),
            Handle::Remote(_) => return Ok(()),
        };
        self.wait_durable(ino, &staged).await
    }

    pub(super) async fn wait_durable(
        self: &Arc<Self>,
        ino: u64,
        staged: &Arc<Staged>,
    ) -> Result<()> {
        let target = {
            let mut st = staged.st.lock();
            st.error = None;
            st.gen
        };
        self.enqueue(ino, staged);
        loop {
            let notified = staged.done.notified();
            {
                let st = staged.st.lock();
                if st.deleted || st.durable_gen >= target && !st.uploading {
                    return Ok(());
                }
                if let Some(e) = &st.error {
                    return Err(FsError::Io(e.clone()));
                }
            }
            notified.await;
        }
    }

    /// Waits until no upload of `staged` is in flight, so that a rename or unlink never
    /// races with an upload that would land under the old name afterwards.
    pub(super) async fn wait_idle(&self, staged: &Staged) {
        loop {
            let notified = staged.done.notified();
            if !staged.st.lock().uploading {
                return;
            }
            notified.await;
        }
    }

    /// Gives up a staged file whose name is removed or replaced: waits out an upload in
    /// flight (it would land after whatever replaces the name) and marks it deleted in
    /// the same step, so that no new upload starts. Returns whether the bucket may hold
    /// an object of it.
    pub(super) async fn retire(&self, staged: &Staged) -> bool {
        loop {
            let notified = staged.done.notified();
            {
                let mut st = staged.st.lock();
                if !st.uploading {
                    st.deleted = true;
                    let remote = st.durable_gen > 0;
                    drop(st);
                    self.staging.discard(staged);
                    staged.done.notify_waiters();
                    return remote;
                }
            }
            notified.await;
        }
    }

    /// Starts the upload of a staged file unless one is already waiting to start.
    pub(super) fn enqueue(self: &Arc<Self>, ino: u64, staged: &Arc<Staged>) {
        {
            let mut st = staged.st.lock();
            if st.queued || st.deleted {
                return;
            }
            st.queued = true;
        }
        let (fs, staged) = (self.clone(), staged.clone());
        tokio::spawn(async move { fs.upload(ino, staged).await });
    }

    /// Waits until every file closed so far below `dir` (but `except`) is durable.
    pub(super) async fn wait_tree(self: &Arc<Self>, dir: u64, except: u64) -> Result<()> {
        let staged = self.closed_staged(|t, i, _| i != except && t.is_within(i, dir));
        self.wait_all_durable(staged).await
    }

    /// `fsync` of a directory: the names in it that this mount wrote back (symlinks,
    /// closed files) are in the bucket when it returns, or it fails with their error.
    pub async fn fsyncdir(self: &Arc<Self>, ino: u64) -> Result<()> {
        let staged =
            self.closed_staged(|t, i, n| n.parent == ino && t.child(ino, &n.name) == Some(i));
        self.wait_all_durable(staged).await
    }

    /// The staged files with no writer among the nodes `pick` selects.
    pub(super) fn closed_staged(
        &self,
        pick: impl Fn(&Inodes, u64, &crate::inode::Node) -> bool,
    ) -> Vec<(u64, Arc<Staged>)> {
        let t = self.inodes.lock();
        t.nodes
            .iter()
            .filter(|(i, n)| n.staged.is_some() && pick(&t, **i, n))
            .filter_map(|(i, n)| n.staged.clone().map(|s| (*i, s)))
            .filter(|(_, s)| s.st.lock().writers == 0)
            .collect()
    }

    pub(super) async fn wait_all_durable(
        self: &Arc<Self>,
        staged: Vec<(u64, Arc<Staged>)>,
    ) -> Result<()> {
        for (i, s) in staged {
            self.wait_durable(i, &s).await?;
        }
        Ok(())
    }

    pub(super) async fn upload(self: Arc<Self>, ino: u64, staged: Arc<Staged>) {
        // A completion marker goes last: whoever sees it may read the task's outputs.
        let marker = {
            let t = self.inodes.lock();
            t.get(ino)
                .filter(|n| self.cfg.completion_markers.contains(&n.name))
                .map(|n| n.parent)
        };
        if let Some(dir) = marker {
            if let Err(e) = self.wait_tree(dir, ino).await {
                let mut st = staged.st.lock();
                st.queued = false;
                st.error = Some(format!(
                    "not uploaded because an output of its task failed: {e}"
                ));
                drop(st);
                staged.done.notify_waiters();
                return;
            }
        }
        loop {
            let _moves = self.dir_moves.read().await;
            // An upload in progress finishes first; it re-checks the generation after.
            let (key, gen, size, metadata, early) = {
                let t = self.inodes.lock();
                let mut st = staged.st.lock();
                if st.uploading {
                    st.queued = false;
                    st.rerun = true;
                    return;
                }
                st.queued = false;
                st.rerun = false;
                if st.deleted || !st.dirty() {
                    // Unlinked while written: an early upload is aborted as it drops.
                    st.early = None;
                    drop(st);
                    staged.done.notify_waiters();
                    return;
                }
                let Some(path) = t.path(ino) else { return };
                st.uploading = true;
                let mut metadata = HashMap::new();
                if let Some(target) = t.get(ino).and_then(|n| n.entry.target.clone()) {
                    metadata.insert(SYMLINK_META.to_string(), percent_encode(&target));
                }
                let key = self.key(&path);
                // Parts sent while the file was written; only under the name they went to
                // (a file renamed meanwhile goes up whole, the early upload is aborted).
                st.early_ok = false;
                let early = st.early.take().filter(|e| e.key == key);
                (key, st.gen, st.size, metadata, early)
            };
            let r = upload_file(
                &self.client,
                &key,
                &staged.file,
                size,
                self.cfg.part_size,
                &self.slots,
                &metadata,
                metadata.contains_key(SYMLINK_META),
                early,
            )
            .await;
            // The time the bucket gives the object, which is what every later mount will
            // show: a file keeps one mtime for tools that compare them (-resume, make).
            let mtime = match &r {
                Ok(etag) => self.stamps.last_modified(&self.client, &key, etag).await,
                Err(_) => None,
            };
            let (again, stray) = {
                let mut t = self.inodes.lock();
                let cur_key = t.path(ino).map(|p| self.key(&p));
                let mut st = staged.st.lock();
                st.uploading = false;
                match r {
                    Ok(etag) => {
                        if st.deleted || cur_key.as_deref() != Some(key.as_str()) {
                            // Renamed or unlinked while uploading: the object we wrote
                            // does not belong there any more.
                            (!st.deleted, true)
                        } else {
                            st.durable_gen = gen;
                            st.error = None;
                            self.failed.lock().remove(&key);
                            if st.gen == gen {
                                self.staging.unjournal(&staged);
                                st.journaled = None;
                                let writers = st.writers;
                                let mut adopt = None;
                                if let Some(n) = t.get_mut(ino) {
                                    // The node now describes the object in the bucket.
                                    n.entry.size = size;
                                    n.entry.etag = Some(etag.clone());
                                    if let Some(m) = mtime {
                                        n.entry.mtime = m;
                                    }
                                    // The kernel's pages are exactly what we uploaded.
                                    n.page_cache_etag = Some(etag);
                                    if writers == 0 {
                                        n.validated = Some(Instant::now());
                                        n.staged = None;
                                        // No handle reads the staged file any more, so the
                                        // cache may own (and later punch) it.
                                        if n.open == 0 && n.entry.kind == Kind::File {
                                            adopt = n.entry.etag.clone();
                                        }
                                    }
                                    let (parent, name, e) =
                                        (n.parent, n.name.clone(), n.entry.clone());
                                    Self::listing_put(&mut t, parent, &name, Some(e));
                                }
                                if writers == 0 {
                                    if let Some(etag) = adopt {
                                        // Downstream tasks read what upstream ones wrote:
                                        // keep it as a cached copy of the new object.
                                        self.cache.adopt(
                                            &self.cfg.bucket,
                                            &key,
                                            &etag,
                                            size,
                                            self.staging.data_path(&staged),
                                        );
                                    }
                                    self.staging.discard(&staged);
                                    t.remove_if_unreferenced(ino);
                                }
                                (false, false)
                            } else {
                                (st.writers == 0 || st.rerun, false)
                            }
                        }
                    }
                    // The file changed while it was read for the upload (a rewrite with
                    // O_TRUNC shrinks it under the reader): that upload is moot, the
                    // next one carries the new content.
                    Err(_) if st.gen != gen && !st.deleted => (st.writers == 0 || st.rerun, false),
                    Err(e) => {
                        tracing::error!(%key, "upload failed: {e}");
                        let msg = format!("upload of {key} failed: {e}");
                        self.failed.lock().insert(key.clone(), msg.clone());
                        st.error = Some(msg);
                        (false, false)
                    }
                }
            };
            if stray {
                if let Err(e) = self.client.delete(&key).await {
                    tracing::warn!(%key, "cannot delete an object uploaded under a name that was given up: {e}");
                }
            }
            staged.done.notify_waiters();
            if !again {
                return;
            }
        }
    }

    /// Uploads everything staged and waits; returns the files that could not be.
    pub async fn flush_all(self: &Arc<Self>) -> Vec<String> {
        let staged: Vec<(u64, Arc<Staged>)> = {
            let t = self.inodes.lock();
            t.nodes
                .iter()
                .filter_map(|(ino, n)| n.staged.clone().map(|s| (*ino, s)))
                .collect()
        };
        let mut set = tokio::task::JoinSet::new();
        for (ino, s) in staged {
            let fs = self.clone();
            set.spawn(async move { fs.wait_durable(ino, &s).await });
        }
        while set.join_next().await.is_some() {}
        self.failed
            .lock()
            .iter()
            .map(|(k, e)| format!("{k}: {e}"))
            .collect()
    }

    /// Uploads what a dead mount left in the journal; returns the keys it recovered.
    pub async fn recover(&self) -> (Vec<String>, Vec<String>) {
        let mut ok = Vec::new();
        let mut failed = Vec::new();
        // Early uploads of files a dead mount was writing: their files (if journaled)
        // go up whole below; the parts they had sent are dropped.
        for u in self
            .staging
            .open_uploads(&self.cfg.cache_dir, &self.cfg.bucket)
        {
            match self.client.abort_multipart(&u.key, &u.upload_id).await {
                Ok(()) | Err(ClientError::NotFound(_)) => u.forget(),
                Err(e) => tracing::warn!(
                    key = %u.key,
                    "cannot abort a multipart upload left open by an earlier mount: {e}"
                ),
            }
        }
        for o in self.staging.orphans(&self.cfg.cache_dir, &self.cfg.bucket) {
            let r = async {
                let mut metadata = HashMap::new();
                if o.symlink {
                    let target = std::fs::read_to_string(&o.data)
                        .map_err(|e| ClientError::Other(e.to_string()))?;
                    metadata.insert(SYMLINK_META.to_string(), percent_encode(&target));
                }
                let f =
                    std::fs::File::open(&o.data).map_err(|e| ClientError::Other(e.to_string()))?;
                let size = f
                    .metadata()
                    .map_err(|e| ClientError::Other(e.to_string()))?
                    .len();
                upload_file(
                    &self.client,
                    &o.key,
                    &f,
                    size,
                    self.cfg.part_size,
                    &self.slots,
                    &metadata,
                    o.symlink,
                    None,
                )
                .await
            }
            .await;
            match r {
                Ok(_) => {
                    o.forget();
                    ok.push(o.key.clone());
                }
                Err(e) => {
                    self.failed.lock().insert(
                        o.key.clone(),
                        format!("recovery from the journal of an earlier mount failed: {e}"),
                    );
                    failed.push(format!("{}: {e}", o.key))
                }
            }
        }
        self.recovered.lock().extend(ok.iter().cloned());
        (ok, failed)
    }

    pub fn recovered(&self) -> Vec<String> {
        self.recovered.lock().clone()
    }

    /// Extends a file (fallocate mode 0); space is not reserved in object storage.
    pub async fn fallocate(self: &Arc<Self>, fh: u64, off: u64, len: u64) -> Result<()> {
        let staged = match self.handle(fh)? {
            Handle::Local {
                staged,
                write: true,
                ..
            } => staged,
            _ => return Err(FsError::BadHandle),
        };
        let size = staged.st.lock().size;
        if off + len > size {
            staged.set_len(off + len)?;
        }
        Ok(())
    }
}
