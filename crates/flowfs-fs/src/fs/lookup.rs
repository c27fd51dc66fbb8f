//! Names answered: lookup and getattr from the namespace while it is fresh, from the
//! store past the metadata TTL (a HEAD and a one-key LIST racing the directory's listing
//! taken again, `ask_store`), and `forget`.

use std::sync::Arc;
use std::time::Instant;

use crate::error::{FsError, Result};
use crate::inode::{Entry, Inodes, Kind, Listing};

use super::{join, pages, valid_name, Attr, Fs, RELIST_MAX};

impl Fs {
    /// The attributes of `name` in `parent`, asking the store if the cached answer is older
    /// than the TTL; counts a kernel reference.
    pub async fn lookup(self: &Arc<Self>, parent: u64, name: &str) -> Result<Attr> {
        valid_name(name)?;
        self.refresh_passthrough(None);
        let (path, marker, was_dir) = {
            let mut t = self.ns.lock();
            let p = t.get(parent).ok_or(FsError::NotFound)?;
            if p.entry.kind != Kind::Dir {
                return Err(FsError::NotDir);
            }
            if let Some(ino) = t.child(parent, name) {
                let fresh = t.get(ino).is_some_and(|n| n.fresh(self.cfg.metadata_ttl));
                // A staged file is what this mount made of the name: the bucket's copy is
                // older until the upload (a HEAD of a file created and then renamed here
                // finds nothing).
                if fresh || self.wb.stat(ino).is_some() {
                    return self.counted(&mut t, ino);
                }
            }
            let path = join(&t.path(parent).ok_or(FsError::NotFound)?, name);
            match self.check_key(&path, false) {
                // A name the store cannot hold is in no bucket; asking would find another
                // (SeaweedFS answers a HEAD of `x\y` with `x/y`).
                Err(FsError::KeyRefused { .. }) => return Err(FsError::NotFound),
                r => r?,
            }
            let p = t.get(parent).ok_or(FsError::NotFound)?;
            match p.cached_child(name, self.cfg.metadata_ttl) {
                Some(Some((e, at))) => {
                    let ino = t.upsert(parent, name, &e, Some(at));
                    return self.counted(&mut t, ino);
                }
                Some(None) => return Err(FsError::NotFound),
                None => {}
            }
            let node = t.child(parent, name).and_then(|c| t.get(c));
            let was_dir = node.is_some_and(|n| n.entry.kind == Kind::Dir);
            // A directory known here does not read its marker again.
            let known = node.and_then(|n| n.entry.posix());
            (path, known.is_none_or(|p| p.mode.is_none()), was_dir)
        };
        let (found, at) = self
            .ask_store(parent, name, &path, (marker, was_dir))
            .await?;
        let mut t = self.ns.lock();
        match found {
            Some(e) => {
                let ino = t.upsert(parent, name, &e, Some(at));
                self.counted(&mut t, ino)
            }
            None => {
                t.add_negative(parent, name);
                Err(FsError::NotFound)
            }
        }
    }

    /// A file created in a directory never listed here (one that was in the bucket
    /// before: a pipeline's `results/`, a rerun's work dir) lists the directory behind the
    /// create, up to `RELIST_MAX` names, so that the lookups of the creates after it are
    /// answered from memory. Each cost a HEAD and a one-key LIST before: 200 files into
    /// an existing directory took 5.0 s at 20 ms per request, against 0.3 s into a new
    /// one. A bigger directory is noted as such and asked name by name, as before. Only
    /// a create does this, not a name found absent: a reader waiting for another
    /// client's file would then be answered from a listing up to a TTL old for names it
    /// never asked before (a lookup of a new name asks the store).
    pub(super) fn list_unlisted_behind(self: &Arc<Self>, parent: u64) {
        if self.cfg.metadata_ttl.is_zero() {
            return; // no listing is used twice
        }
        let unlisted = self
            .ns
            .lock()
            .get(parent)
            .is_some_and(|p| p.listed_len().is_none());
        if unlisted {
            self.list_ahead(parent, RELIST_MAX.div_ceil(pages::PAGE), true);
        }
    }

    pub(super) fn counted(&self, t: &mut Inodes, ino: u64) -> Result<Attr> {
        let n = t.get_mut(ino).ok_or(FsError::NotFound)?;
        n.looked_up();
        self.attr_of(t, ino)
    }

    /// The kernel dropped `n` references to `ino`; a node neither referenced nor open goes.
    pub fn forget(&self, ino: u64, n: u64) {
        self.ns.lock().forget(ino, n);
    }

    /// The attributes of `ino`; a file not open is confirmed with the store once the TTL
    /// has passed (a directory by the lookups of its parent).
    pub async fn getattr(self: &Arc<Self>, ino: u64) -> Result<Attr> {
        self.refresh_passthrough(Some(ino));
        let path = {
            let t = self.ns.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            // Directories are confirmed by the lookups of their parent; a staged file is
            // newer than the bucket's copy.
            if n.fresh(self.cfg.metadata_ttl)
                || n.entry.kind == Kind::Dir
                || n.is_open()
                || self.wb.stat(ino).is_some()
            {
                return Ok(self.node_attr(ino, n));
            }
            t.path(ino).ok_or(FsError::NotFound)?
        };
        self.revalidate(ino, &path).await
    }

    pub(super) async fn revalidate(self: &Arc<Self>, ino: u64, path: &str) -> Result<Attr> {
        let (parent, name) = {
            let t = self.ns.lock();
            let n = t.get(ino).ok_or(FsError::NotFound)?;
            (n.parent(), n.name().clone())
        };
        let (found, at) = self.ask_store(parent, &name, path, (false, false)).await?;
        let mut t = self.ns.lock();
        let n = t.get_mut(ino).ok_or(FsError::NotFound)?;
        match found {
            Some(e) if e.kind == n.entry.kind => {
                if n.validated().is_some_and(|v| at >= v) {
                    n.entry.refresh(&e);
                    n.confirm(at);
                }
                Ok(self.node_attr(ino, n))
            }
            Some(_) => Err(FsError::Stale),
            None => Err(FsError::NotFound),
        }
    }

    /// What `parent/name` is, asked of the store (`marker`: read a directory's marker;
    /// `was_dir`: this mount knows the name as a directory). A parent listed before and
    /// small enough is listed again, so that the lookups after this one are answered from
    /// memory (`ls -l`, `cp -r` and globbing in work directories). A name that listing
    /// had waits for it: a reader walking the directory, whose next names it answers all
    /// at once (asking each name as well cost B1s, 10,000 files at 20 ms, 1,600 requests
    /// and a tenth more time). A name it lacked (a create, mostly) takes whichever answers
    /// first, the listing or a HEAD and a one-key LIST of the name: waiting for the
    /// listing alone stalled a loop of creates 180-350 ms once a TTL (a LIST of 1,000
    /// keys takes about 200 ms on SeaweedFS here).
    async fn ask_store(
        self: &Arc<Self>,
        parent: u64,
        name: &str,
        path: &str,
        (marker, was_dir): (bool, bool),
    ) -> Result<(Option<Entry>, Instant)> {
        let by_name = async {
            let at = Instant::now();
            let found = if was_dir {
                self.stat_remote_dir(path, marker).await?
            } else {
                self.stat_remote(path, marker).await?
            };
            Ok((found, at))
        };
        match self.listed_before(parent, name) {
            None => by_name.await,
            Some(true) => {
                let l = self.listing(parent).await?;
                Ok((l.entries.get(name).cloned(), l.at))
            }
            Some(false) => {
                self.relist_behind(parent);
                tokio::select! {
                    biased;
                    l = self.listing_when_relisted(parent) => {
                        Ok((l.entries.get(name).cloned(), l.at))
                    }
                    r = by_name => r,
                }
            }
        }
    }

    /// Whether `parent`'s last listing had `name` (one dropped to bound memory counts as
    /// having it); `None` when it is not listed again (never listed, too big, or
    /// `--metadata-ttl 0`: no listing is used twice).
    fn listed_before(&self, parent: u64, name: &str) -> Option<bool> {
        if self.cfg.metadata_ttl.is_zero() {
            return None;
        }
        let t = self.ns.lock();
        let p = t.get(parent)?;
        if p.listed_len()? > RELIST_MAX {
            return None;
        }
        Some(p.listing().is_none_or(|l| l.entries.contains_key(name)))
    }

    /// Lists `parent` again in a task of its own; a listing already under way is joined,
    /// not repeated.
    fn relist_behind(self: &Arc<Self>, parent: u64) {
        let Some(lock) = self.ns.lock().get_mut(parent).map(|p| p.list_lock()) else {
            return;
        };
        if lock.try_lock().is_ok() {
            let fs = self.clone();
            tokio::spawn(async move {
                // Its error reaches the lookups that wait for it no more than its answer:
                // they have their own.
                let _ = fs.listing(parent).await;
            });
        }
    }

    /// The listing of `parent` once the one under way ends; never ready if that one
    /// failed (the lookup's own request answers then).
    async fn listing_when_relisted(&self, parent: u64) -> Listing {
        let lock = self.ns.lock().get_mut(parent).map(|p| p.list_lock());
        if let Some(lock) = lock {
            let _guard = lock.lock().await;
            let t = self.ns.lock();
            let fresh = t
                .get(parent)
                .and_then(|p| p.fresh_listing(self.cfg.metadata_ttl));
            if let Some(l) = fresh {
                return l.clone();
            }
        }
        std::future::pending().await
    }
}
