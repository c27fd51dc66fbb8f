//! Open files: handles, reads through the disk cache, fetches from the store (ranged
//! GETs, read-ahead, the prefetch of a directory's next files), and close.

use super::*;

/// Chunks per piece of a GET: what a reader waits for at most before its bytes are
/// handed over, however long the GET they come in.
const PIECE: u64 = (1 << 20) / CHUNK;

impl Fs {
    /// Opens a file; returns the handle and what the kernel may skip for it.
    pub async fn open(
        self: &Arc<Self>,
        ino: u64,
        write: bool,
        truncate: bool,
    ) -> Result<(u64, OpenHints)> {
        if write {
            self.check_writable()?;
        }
        let (path, fresh) = {
            let t = self.inodes.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            match n.entry.kind {
                Kind::Dir => return Err(FsError::IsDir),
                Kind::Symlink => return Err(FsError::Invalid("symlink")),
                Kind::Special(_) => return Err(FsError::Invalid("special file")),
                Kind::File => {}
            }
            (
                t.path(ino).ok_or(FsError::NotFound)?,
                n.fresh(self.cfg.metadata_ttl),
            )
        };
        if write {
            let staged = self.open_staged(ino, true, truncate).await?;
            let fh = self.open_local(ino, staged.clone(), true);
            if truncate {
                if let Err(e) = self.truncate_staged(ino, &staged, 0) {
                    let _ = self.release(fh);
                    return Err(e);
                }
            }
            return Ok((fh, OpenHints::default()));
        }
        if let Some(staged) = self.wb.open(ino, false) {
            return Ok((self.open_local(ino, staged, false), OpenHints::default()));
        }
        // Close-to-open: an open after the TTL sees the object as it is now.
        if !fresh {
            self.revalidate(ino, &path).await?;
        }
        let key = self.key(&path);
        let (etag, size, keep) = {
            let mut t = self.inodes.lock();
            let n = t.get_mut(ino).ok_or(FsError::NotFound)?;
            let etag = n.entry.etag.clone().filter(|e| !e.is_empty());
            let keep = etag.is_some() && n.page_cache_etag == etag;
            n.page_cache_etag = etag.clone();
            n.open += 1;
            (etag, n.entry.size, keep)
        };
        let version = etag.clone().unwrap_or_default();
        let entry = match self.cache.entry(&self.cfg.bucket, &key, &version, size) {
            Ok(e) => e,
            Err(e) => {
                self.close_node(ino);
                return Err(e);
            }
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let h = ReadHandle {
            ino,
            key,
            etag,
            size,
            entry,
            seq: Mutex::new(SeqState::default()),
        };
        self.files.lock().insert(fh, Handle::Remote(Arc::new(h)));
        self.prefetch_siblings(ino);
        // `flush` has nothing to report for a handle that only reads the bucket.
        Ok((
            fh,
            OpenHints {
                keep_cache: keep,
                no_flush: true,
            },
        ))
    }

    pub(super) fn handle(&self, fh: u64) -> Result<Handle> {
        self.files
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(FsError::BadHandle)
    }

    /// A handle on a staged file `WriteBack` has already counted.
    pub(super) fn open_local(&self, ino: u64, staged: Arc<StagedFile>, write: bool) -> u64 {
        if let Some(n) = self.inodes.lock().get_mut(ino) {
            n.open += 1;
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files
            .lock()
            .insert(fh, Handle::Local { ino, staged, write });
        fh
    }

    /// The error of a failed upload of this file, reported at close and fsync.
    pub fn flush(&self, fh: u64) -> Result<()> {
        let h = self
            .files
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(FsError::BadHandle)?;
        if let Handle::Local { ino, staged, .. } = h {
            if let Some(e) = self.wb.error(ino, &staged) {
                return Err(FsError::Io(e));
            }
        }
        Ok(())
    }

    /// Closes a handle; the last writer of a changed file starts its upload.
    pub fn release(self: &Arc<Self>, fh: u64) -> Result<()> {
        let h = self.files.lock().remove(&fh).ok_or(FsError::BadHandle)?;
        match h {
            Handle::Remote(h) => {
                self.cache.release(&h.entry);
                self.close_node(h.ino);
            }
            Handle::Local { ino, staged, write } => self.release_staged(ino, &staged, write),
        }
        Ok(())
    }

    /// Up to `len` bytes at `off` of an open file, from the staged copy, the cache or the
    /// store (with read-ahead).
    pub async fn read(self: &Arc<Self>, fh: u64, off: u64, len: u32) -> Result<Bytes> {
        let h = match self.handle(fh)? {
            Handle::Remote(h) => h,
            Handle::Local { ino, staged, .. } => {
                return Ok(Bytes::from(self.wb.read(
                    ino,
                    &staged,
                    off,
                    len as usize,
                )?))
            }
        };
        if off >= h.size {
            return Ok(Bytes::new());
        }
        let len = (len as u64).min(h.size - off);
        let plan = h
            .seq
            .lock()
            .plan(off, len, h.size, self.cfg.part_size, self.cfg.max_readahead);
        let max_run = (self.cfg.part_size / CHUNK).max(1);
        if let Some((a, b)) = plan.ahead {
            // Far ahead of a long run, GETs of half the window: a fifth of the requests
            // of part-sized ones, and the server spends its CPU per request.
            let ahead_run = (self.cfg.max_readahead / 2 / CHUNK).max(max_run);
            self.fetch(&h, a, b, ahead_run);
        }
        let mut retried = false;
        'attempt: for attempt in 0..4 {
            if let Some(data) = self.cache.read(&h.entry, off, len as usize)? {
                self.cache.touch(&h.entry, off, len);
                return Ok(data);
            }
            // Start what the plan wants, then wait only for the chunks asked for. One
            // claim for both: a GET started here is waited on even if it has ended by
            // then. (A second look, after starting it, found the chunks of a GET that had
            // failed meanwhile given up, and started another: the reader never saw the
            // failure, and a failing server cost a read three requests or more.)
            let (c0, c1) = (off / CHUNK, (off + len).div_ceil(CHUNK));
            let claim = h
                .entry
                .claim(plan.need.0 / CHUNK, plan.need.1.div_ceil(CHUNK), PIECE);
            let waits: Vec<Arc<Fetch>> = (claim.wait.iter())
                .chain(&claim.start)
                .filter(|(s, e, _)| *s < c1 && *e > c0)
                .map(|p| p.2.clone())
                .collect();
            self.spawn_gets(&h, claim.start, max_run);
            for w in waits {
                // First from memory as soon as it arrives; if another reader took it
                // from there meanwhile, from the file once written.
                let r = if attempt == 0 {
                    w.wait_ready().await
                } else {
                    w.wait().await
                };
                match r {
                    Ok(()) => {}
                    // A download that broke off after the client's own retries (a body
                    // cut mid-stream is not retried there) is fetched once more before
                    // the reader sees EIO.
                    Err(FsError::Io(e)) if !retried => {
                        tracing::debug!(key = %h.key, "fetching again after: {e}");
                        retried = true;
                        continue 'attempt;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Err(FsError::Io(
            "cached data was evicted while being read; raise --cache-size".into(),
        ))
    }

    /// A reader that opens a directory's files one after another in listing order (cp -r,
    /// cat *, tar) gets the next small files fetched in parallel ahead of it: many small
    /// files then come as fast as one big one.
    pub(super) fn prefetch_siblings(self: &Arc<Self>, ino: u64) {
        let todo: Vec<(String, Entry)> = {
            let mut t = self.inodes.lock();
            let Some(n) = t.get(ino) else { return };
            let (parent, name) = (n.parent, n.name.clone());
            let Some(dir) = t.path(parent) else { return };
            let Some(p) = t.get_mut(parent) else { return };
            let Some(l) = p.listing.clone() else { return };
            let last = p.last_open.replace(name.clone());
            let in_order = last.is_some_and(|lo| {
                lo < name && l.entries.range(lo..name.clone()).take(6).count() <= 5
            });
            if !in_order {
                return;
            }
            // At most SIBLING_PREFETCH files and --max-readahead bytes ahead: what is
            // fetched waits in memory for its reader.
            let mut bytes = 0u64;
            let window_end = l
                .entries
                .range(name.clone()..)
                .enumerate()
                .find(|(i, (_, e))| {
                    bytes += e.size;
                    *i >= SIBLING_PREFETCH || bytes > self.cfg.max_readahead
                })
                .map(|(_, (k, _))| k.clone());
            let from = p
                .prefetched_to
                .clone()
                .filter(|f| *f > name)
                .unwrap_or(name.clone());
            let mut out = Vec::new();
            for (k, e) in l.entries.range(from.clone()..) {
                if *k == from || window_end.as_ref().is_some_and(|w| k > w) {
                    continue;
                }
                p.prefetched_to = Some(k.clone());
                if e.kind == Kind::File && e.size > 0 && e.size <= self.cfg.part_size {
                    out.push((join(&dir, k), e.clone()));
                }
            }
            out
        };
        let max_run = (self.cfg.part_size / CHUNK).max(1);
        for (path, e) in todo {
            let key = self.key(&path);
            let etag = e.etag.clone().filter(|x| !x.is_empty());
            let Ok(entry) = self.cache.entry(
                &self.cfg.bucket,
                &key,
                etag.as_deref().unwrap_or(""),
                e.size,
            ) else {
                continue;
            };
            let h = Arc::new(ReadHandle {
                ino: 0,
                key,
                etag,
                size: e.size,
                entry,
                seq: Mutex::new(SeqState::default()),
            });
            let claim = h.entry.claim(0, h.entry.chunks(), PIECE);
            let fs = self.clone();
            let mut waits: Vec<_> = claim.wait.into_iter().map(|w| w.2).collect();
            waits.extend(claim.start.iter().map(|p| p.2.clone()));
            self.spawn_gets(&h, claim.start, max_run);
            tokio::spawn(async move {
                for w in waits {
                    let _ = w.wait().await;
                }
                fs.cache.release(&h.entry);
            });
        }
    }

    pub(super) fn fetch(self: &Arc<Self>, h: &Arc<ReadHandle>, start: u64, end: u64, max_run: u64) {
        let claim = h.entry.claim(start / CHUNK, end.div_ceil(CHUNK), PIECE);
        self.spawn_gets(h, claim.start, max_run);
    }

    /// Starts the claimed pieces, consecutive ones together in GETs of at most `max_run`
    /// chunks.
    pub(super) fn spawn_gets(
        self: &Arc<Self>,
        h: &Arc<ReadHandle>,
        pieces: Vec<(u64, u64, Arc<Fetch>)>,
        max_run: u64,
    ) {
        let mut group: Vec<(u64, u64, Arc<Fetch>)> = Vec::new();
        for p in pieces {
            let joins = group
                .first()
                .zip(group.last())
                .is_some_and(|(first, last)| last.1 == p.0 && p.1 - first.0 <= max_run);
            if !joins && !group.is_empty() {
                self.spawn_get(h, std::mem::take(&mut group));
            }
            group.push(p);
        }
        if !group.is_empty() {
            self.spawn_get(h, group);
        }
    }

    /// One GET for consecutive pieces. Each piece is handed to its readers as soon as its
    /// bytes are in, and written to the cache file while the rest is still arriving.
    fn spawn_get(self: &Arc<Self>, h: &Arc<ReadHandle>, pieces: Vec<(u64, u64, Arc<Fetch>)>) {
        let fs = self.clone();
        let h = h.clone();
        tokio::spawn(async move {
            let mut done = 0;
            let r = async {
                let _permit = fs
                    .gets
                    .acquire()
                    .await
                    .map_err(|e| FsError::Io(e.to_string()))?;
                let start = pieces[0].0 * CHUNK;
                let cuts: Vec<u64> = pieces.iter().map(|p| (p.1 * CHUNK).min(h.size)).collect();
                let mut stores = Vec::with_capacity(pieces.len());
                let mut sink = |i: usize, data: Bytes| {
                    let (c0, c1, f) = pieces[i].clone();
                    fs.cache.offer(&h.entry, c0 * CHUNK, data.clone(), &f);
                    // The O_DIRECT write waits for the disk: not on an async worker,
                    // where it would hold up every FUSE request behind it.
                    let (fs, entry) = (fs.clone(), h.entry.clone());
                    stores.push(tokio::task::spawn_blocking(move || {
                        if let Err(e) = fs.cache.store(&entry, c0 * CHUNK, &data) {
                            // A full or broken cache disk costs the cache, not the read:
                            // the bytes are in memory for the readers waiting on them,
                            // later ones fetch again.
                            fs.cache_write_failed(&e);
                            fs.cache.abandon(&entry, c0, c1);
                        }
                        fs.cache.finish(&f, Ok(()));
                    }));
                    done = i + 1;
                };
                let got = fs
                    .client
                    .get_range_pieces(&h.key, start, &cuts, h.etag.as_deref(), &mut sink)
                    .await;
                // The permit is held until the pieces are on disk: it bounds the memory
                // of downloaded bytes waiting for a slow cache disk too.
                for s in stores {
                    s.await.map_err(|e| FsError::Io(e.to_string()))?;
                }
                got.map_err(FsError::from)
            }
            .await;
            if let Err(e) = r {
                tracing::warn!(key = %h.key, "read failed: {e}");
                // Every chunk given up before any reader wakes: one woken by the failure
                // of one piece and fetching again never waits on a later piece of this
                // GET, which would fail it without a request.
                for (c0, c1, _) in &pieces[done..] {
                    fs.cache.abandon(&h.entry, *c0, *c1);
                }
                for (_, _, f) in &pieces[done..] {
                    fs.cache.finish(f, Err(e.clone()));
                }
            }
        });
    }

    pub(super) fn cache_write_failed(&self, e: &FsError) {
        // Once per mount at warn level: a full disk would otherwise log every fetch.
        if !self.cache_write_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!("cannot write the disk cache, reading without it: {e}");
        } else {
            tracing::debug!("cannot write the disk cache: {e}");
        }
    }
}
