//! Names answered: lookup and getattr from the namespace while it is fresh, from the
//! store past the metadata TTL (a HEAD and a one-key LIST racing the directory's listing
//! taken again, `ask_store`), and `forget`.

use std::sync::Arc;
use std::time::Instant;

use crate::error::{FsError, Result};
use crate::inode::{Entry, Kind, Listing};

use super::names::{Ask, Known};
use super::Listings;
use super::{pages, valid_name, Attr, Fs, RELIST_MAX};

impl Fs {
    /// The attributes of `name` in `parent`, asking the store if the cached answer is older
    /// than the TTL; counts a kernel reference.
    pub async fn lookup(self: &Arc<Self>, parent: u64, name: &str) -> Result<Attr> {
        valid_name(name)?;
        self.wb.refresh_passthrough(None);
        let ttl = self.cfg.metadata_ttl;
        // A staged file is what this mount made of the name: the bucket's copy is older
        // until the upload (a HEAD of a file created and then renamed here finds nothing).
        let staged = |ino| self.wb.stat(ino).is_some();
        // A name the store cannot hold is in no bucket; asking would find another
        // (SeaweedFS answers a HEAD of `x\y` with `x/y`).
        let check = |path: &str| match self.keys.check(path, false) {
            Err(FsError::KeyRefused { .. }) => Err(FsError::NotFound),
            r => r,
        };
        let ask = match self.ns.known(parent, name, ttl, staged, check)? {
            Known::Node(ino) => return self.w.attr_now(ino),
            Known::Absent => return Err(FsError::NotFound),
            Known::Ask(ask) => ask,
        };
        let (found, at) = self.lists.ask_store(parent, name, &ask).await?;
        match self.ns.answered(parent, name, found, at) {
            Some(ino) => self.w.attr_now(ino),
            None => Err(FsError::NotFound),
        }
    }

    /// The kernel dropped `n` references to `ino`; a node neither referenced nor open goes.
    pub fn forget(&self, ino: u64, n: u64) {
        self.ns.forget(ino, n);
    }

    /// The attributes of `ino`; a file not open is confirmed with the store once the TTL
    /// has passed (a directory by the lookups of its parent).
    pub async fn getattr(self: &Arc<Self>, ino: u64) -> Result<Attr> {
        self.wb.refresh_passthrough(Some(ino));
        // Directories are confirmed by the lookups of their parent; a staged file is
        // newer than the bucket's copy.
        let known = self.ns.read(ino, |n| {
            let kept = n.fresh(self.cfg.metadata_ttl)
                || n.entry.kind == Kind::Dir
                || n.is_open()
                || self.wb.stat(ino).is_some();
            kept.then(|| self.w.node_attr(ino, n))
        });
        if let Some(attr) = known.ok_or(FsError::NotFound)? {
            return Ok(attr);
        }
        // Only a node the store must confirm needs its path (getattr is the hottest call).
        let path = self.ns.path(ino).ok_or(FsError::NotFound)?;
        self.revalidate(ino, &path).await
    }

    pub(super) async fn revalidate(self: &Arc<Self>, ino: u64, path: &str) -> Result<Attr> {
        let named = self.ns.read(ino, |n| (n.parent(), n.name().clone()));
        let (parent, name) = named.ok_or(FsError::NotFound)?;
        let ask = Ask::name(path);
        let (found, at) = self.lists.ask_store(parent, &name, &ask).await?;
        let attr = self.ns.update(ino, |n| match found {
            Some(e) if e.kind == n.entry.kind => {
                if n.validated().is_some_and(|v| at >= v) {
                    n.entry.refresh(&e);
                    n.confirm(at);
                }
                Ok(self.w.node_attr(ino, n))
            }
            Some(_) => Err(FsError::Stale),
            None => Err(FsError::NotFound),
        });
        attr.ok_or(FsError::NotFound)?
    }
}

impl Listings {
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
        let unlisted = self.ns.read(parent, |p| p.listed_len().is_none());
        if unlisted == Some(true) {
            self.list_ahead(parent, RELIST_MAX.div_ceil(pages::PAGE), true);
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
        ask: &Ask,
    ) -> Result<(Option<Entry>, Instant)> {
        let (path, marker) = (ask.path.as_str(), ask.marker);
        let by_name = async {
            let at = Instant::now();
            let found = if ask.was_dir {
                self.remote.stat_dir(&self.keys.key(path), marker).await?
            } else {
                self.remote.stat(&self.keys.key(path), marker).await?
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
        self.ns
            .read(parent, |p| {
                if p.listed_len()? > RELIST_MAX {
                    return None;
                }
                Some(p.listing().is_none_or(|l| l.entries.contains_key(name)))
            })
            .flatten()
    }

    /// Lists `parent` again in a task of its own; a listing already under way is joined,
    /// not repeated.
    fn relist_behind(self: &Arc<Self>, parent: u64) {
        let Some(lock) = self.ns.update(parent, |p| p.list_lock()) else {
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
        let lock = self.ns.update(parent, |p| p.list_lock());
        if let Some(lock) = lock {
            let _guard = lock.lock().await;
            let ttl = self.cfg.metadata_ttl;
            let fresh = self.ns.read(parent, |p| p.fresh_listing(ttl).cloned());
            if let Some(l) = fresh.flatten() {
                return l;
            }
        }
        std::future::pending().await
    }
}
