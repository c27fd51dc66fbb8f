//! Directories read: handles, listings (fresh from the namespace, else from the store)
//! and readdir by offset.

use std::sync::Arc;
use std::time::Instant;

use crate::error::{FsError, Result};
use crate::inode::Listing;

use super::names::{Attrs, Fetched};
use super::Listings;
use super::{DirItem, Fs};

impl Fs {
    /// A handle for reading directory `ino`; its listing is taken at the first readdir.
    pub fn opendir(&self, ino: u64) -> Result<u64> {
        if !self.ns.is_dir(ino)? {
            return Err(FsError::NotDir);
        }
        Ok(self.handles.add_dir(ino))
    }

    /// Drops a directory handle and the listing it holds.
    pub fn releasedir(&self, fh: u64) {
        self.handles.remove_dir(fh);
    }

    /// Items from `offset` on. With `plus`, each item but `.` and `..` carries its
    /// attributes and counts as a lookup; the caller forgets the ones it could not send.
    pub async fn readdir(
        self: &Arc<Self>,
        ino: u64,
        fh: u64,
        offset: u64,
        plus: bool,
    ) -> Result<Vec<DirItem>> {
        if plus {
            self.wb.refresh_passthrough(None);
        }
        let handle = self.handles.dir(fh)?;
        let mut h = handle.lock().await;
        if h.ino != ino {
            return Err(FsError::BadHandle);
        }
        if offset == 0 || h.items.is_none() {
            let listing = self.lists.listing(ino).await?;
            if offset == 0 {
                self.lists.walk_ahead(ino, &listing);
            }
            h.at = Some(listing.at);
            h.items = Some(Arc::new(
                listing
                    .entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ));
        }
        let items = h.items.clone().unwrap_or_default();
        let at = h.at.unwrap_or_else(Instant::now);
        let attrs = Attrs {
            entry: &|i, e| self.shown.attr(i, e),
            node: &|i, n| self.w.node_attr(i, n),
        };
        self.ns
            .dir_items(ino, (&items, at), offset, plus.then_some(attrs))
    }
}

impl Listings {
    /// The entries of a directory, from the listing cache while it is fresh.
    pub(super) async fn listing(&self, ino: u64) -> Result<Listing> {
        let l = self.listing_within(ino, usize::MAX).await?;
        l.ok_or_else(|| FsError::Internal("a listing without a page bound gave up".into()))
    }

    /// `listing`, or `None` for a directory listed anew that has more than `max_pages`
    /// pages of keys (nothing is kept of it then).
    pub(super) async fn listing_within(
        &self,
        ino: u64,
        max_pages: usize,
    ) -> Result<Option<Listing>> {
        let ttl = self.cfg.metadata_ttl;
        if let Some(l) = self.ns.fresh_listing(ino, ttl) {
            return Ok(Some(l));
        }
        // Concurrent lookups in one directory share a single listing.
        let lock = self.ns.list_lock(ino)?;
        let _guard = lock.lock().await;
        if let Some(l) = self.ns.fresh_listing(ino, ttl) {
            return Ok(Some(l));
        }
        let path = self.ns.path(ino).ok_or(FsError::NotFound)?;
        let at = Instant::now();
        let Some((entries, marker, marked)) = self.list_remote(ino, &path, max_pages).await? else {
            return Ok(None);
        };
        let listed = Fetched {
            at,
            entries,
            marker,
            marked,
        };
        Ok(Some(self.ns.listed(ino, listed, |i| self.wb.stat(i))))
    }
}
